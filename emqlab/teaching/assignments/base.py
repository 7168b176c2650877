"""The one home of what an assignment is made of — :class:`Assignment`, its :class:`GradedCell` s, the
:class:`Verdict` a grader returns — and of what the graders share: how feedback is laid out (its indent, the
width of a history shown in it) and the engine's connection they run on.

A grader is a pure function of a notebook's answers: it runs the engine on fakeredis with the virtual clock
(replays, exhaustive explorations, seeded timed runs), so the same notebook always gets the same grade.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from emqlab.engine.history import DEFAULT_WIDTH


@dataclass
class Verdict:
    """A grader's answer: passed or not, and the feedback (full sentences, for the student)."""

    passed: bool
    feedback: str


@dataclass
class GradedCell:
    """A test cell of an assignment: its ``grade_id``, its points, the answer cell and names it grades, and
    the grader (a function of those names' values)."""

    grade_id: str
    points: float
    answer_cell: str
    names: tuple[str, ...]
    grader: Callable[..., Verdict]
    what: str
    #: graded cells whose answers this one builds on: when one of them fails, so does this one's feedback say
    depends: tuple[str, ...] = ()
    #: names of the instructor's answer key (:mod:`emqlab.teaching.key`) the grader compares with: it is
    #: called with ``key=`` their values; without a key the cell cannot be graded
    key: tuple[str, ...] = ()


@dataclass
class Assignment:
    """An assignment: its id (``metadata.emqlab.assignment``), title, source notebook's file name, and its
    graded cells in the notebook's order."""

    id: str
    title: str
    notebook: str
    cells: list[GradedCell]
    #: the source notebook's answer cells that define the answer key's values (run by
    #: :class:`emqlab.teaching.key.Key`, in the instructor's folder only)
    key_cells: tuple[str, ...] = ()

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.cells)

    def cell(self, gid: str) -> GradedCell:
        for c in self.cells:
            if c.grade_id == gid:
                return c
        raise KeyError(gid)


# -- how feedback is laid out --------------------------------------------------------------------------------

#: feedback is printed indented this much under its cell's line
FEEDBACK_INDENT = 8
#: the width of a history shown inside feedback: it fits under the indent of a report's feedback
_WITNESS_WIDTH: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "emqlab_witness_width", default=DEFAULT_WIDTH - FEEDBACK_INDENT)


@contextlib.contextmanager
def feedback_width(width: int | None) -> Iterator[None]:
    """While grading in this block, render the histories shown in feedback (a shortest witness) fitted to
    ``width`` columns of a report (``None``: unwrapped, one line per step): they fit under its feedback
    indent. By default they fit a report of :data:`DEFAULT_WIDTH` columns."""
    token = _WITNESS_WIDTH.set(None if width is None else max(40, width - FEEDBACK_INDENT))
    try:
        yield
    finally:
        _WITNESS_WIDTH.reset(token)


def feedback_block(feedback: str, indent: int = FEEDBACK_INDENT) -> str:
    """``feedback`` with each of its lines indented ``indent`` columns (for :func:`emqlab.text.wrap`:
    its sentences then wrap under themselves, a history in it stays as it is)."""
    return "\n".join(" " * indent + line for line in feedback.split("\n"))


# -- the engine, as graders use it -----------------------------------------------------------------------

T = TypeVar("T")


class SharedRun(Generic[T]):
    """A reference run of the graders (:func:`shared`): cached like :func:`functools.lru_cache`, and computed
    once even when the threads of ``emqlab grade FOLDER --jobs N`` ask for it at the same time (an
    ``lru_cache`` alone lets each of them compute it). ``cache_clear()`` empties it."""

    def __init__(self, fn: Callable[..., T], maxsize: int) -> None:
        self._cached = functools.lru_cache(maxsize=maxsize)(fn)
        self._lock = threading.RLock()
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Hashable) -> T:
        with self._lock:  # the runs are CPU-bound Python: one at a time costs no throughput
            return self._cached(*args)

    def cache_clear(self) -> None:
        self._cached.cache_clear()


def shared(maxsize: int) -> Callable[[Callable[..., T]], SharedRun[T]]:
    """Decorate a grader's reference run (a pure function of hashable arguments): :class:`SharedRun`."""
    return lambda fn: SharedRun(fn, maxsize)



def conn() -> Any:
    """A fresh connection of :func:`emqlab.backend.connect.connect` (fakeredis unless configured)."""
    from emqlab.backend.connect import connect

    return connect()


def short(h: Any, limit: int = 40) -> str:
    """The annotated history, at most ``limit`` lines, fitted to the width feedback histories have
    (:func:`feedback_width`)."""
    lines = h.annotated(width=_WITNESS_WIDTH.get()).split("\n")
    if len(lines) > limit:
        lines = lines[: limit - 1] + [f"     … {len(lines) - limit + 1} more steps"]
    return "\n".join(lines)


def direction(got: float, want: float) -> str:
    """``"above"`` or ``"below"``: where a wrong number lies, never the number it should be."""
    return "above" if got > want else "below"
