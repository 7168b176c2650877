"""The one home of the course's assignments (:data:`ASSIGNMENTS`, by id, in the course's order), and of what
an isolated run needs to know about their answers: the points each answer function is probed at
(:data:`PROBES`), the arguments a probe stands for (:func:`probe_arguments`), and the graders' reference runs
that do not depend on the answers (:func:`warm`).

Each assignment is a module of its own (:mod:`.a1`, :mod:`.a2`, :mod:`.a3`) with its graders;
:mod:`.base` holds what they are made of.
"""

from __future__ import annotations

from typing import Any

from emqlab.teaching.assignments import a1, a2, a3
from emqlab.teaching.assignments.a1 import probe_arguments
from emqlab.teaching.assignments.base import Assignment

ASSIGNMENTS: dict[str, Assignment] = {a.id: a for a in [a1.ASSIGNMENT, a2.ASSIGNMENT, a3.ASSIGNMENT]}

#: Answers that are functions, and the points at which an isolated run evaluates them for the grader
#: (:mod:`emqlab.teaching.sandbox`): only their values there cross back.
#: Assignment 1's functions are probed at the names of cases (and modes): :func:`probe_arguments` turns
#: those into the typed objects the functions are called with.
PROBES: dict[str, list[tuple[Any, ...]]] = {**a3.PROBES, **a1.PROBES}


def warm(aid: str) -> None:
    """Run (and cache) the graders' reference runs of assignment ``aid`` that do not depend on the answers:
    the grader runs this while an isolated run works."""
    if aid == a1.ASSIGNMENT.id:
        a1.warm()
    elif aid == a3.ASSIGNMENT.id:
        a3.warm()


__all__ = ["ASSIGNMENTS", "PROBES", "probe_arguments", "warm"]
