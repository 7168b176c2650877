"""Export an assignment for otter-grader (https://otter-grader.readthedocs.io), next to the nbgrader layout.

``export(assignment, out)`` writes, for one of :data:`emqlab.ASSIGNMENTS`:

* ``out/<notebook>.ipynb`` — the student version (solutions stubbed, hidden tests removed, as
  ``emqlab student`` makes it), with a first cell that creates otter's ``grader = otter.Notebook("tests")``
  and each of nbgrader's test cells replaced by a ``grader.check("<grade_id>")`` cell;
* ``out/tests/<grade_id>.py`` — one otter test file per graded cell in otter's "OK" format (a Python file
  defining ``OK_FORMAT = True`` and ``test = {"name", "points", "suites": [{"cases": [...], "type":
  "doctest", …}]}``): its one doctest case calls :func:`check`, which runs emqlab's own grader for that
  cell — the exploration, not a stored answer — and prints ``True``, or the feedback and ``False``.

Otter runs the tests in the student's kernel. Where a course needs grades students cannot forge, grade the
submissions with ``emqlab grade`` (a sandboxed process per notebook; ``docs/instructors.md``) — the otter
export is for courses whose workflow is otter's.
"""

from __future__ import annotations

import pprint
from pathlib import Path
from typing import Any

from emqlab.teaching import notebooks
from emqlab.teaching.assignments import ASSIGNMENTS

TESTS = "tests"


def check(assignment: str, grade_id: str, *values: Any) -> bool:
    """Run emqlab's grader of ``grade_id`` (in ``assignment``) on ``values`` (the answer names the cell
    grades, in order). Prints the feedback when it fails; returns whether it passed. A cell graded against
    the answer key reads it where :func:`emqlab.teaching.key.find_key` looks (``$EMQLAB_KEY``: set it where
    otter grades; a student's kernel has none, so there such a cell says so and fails)."""
    from emqlab.teaching.grade import key_answers, run_grader
    from emqlab.teaching.key import find_key

    a = ASSIGNMENTS[assignment]
    cell = a.cell(grade_id)
    key = key_answers(a, find_key()) if cell.key else None
    verdict = run_grader(cell, dict(zip(cell.names, values, strict=True)), key)
    if not verdict.passed:
        print(verdict.feedback)
    return verdict.passed


def test_file(assignment: str, grade_id: str) -> str:
    """The otter OK-format test file of one graded cell."""
    cell = ASSIGNMENTS[assignment].cell(grade_id)
    args = ", ".join(cell.names)
    code = (f">>> from emqlab.teaching.otter import check\n"
            f">>> check({assignment!r}, {grade_id!r}, {args})\nTrue\n")
    test = {"name": grade_id, "points": cell.points,
            "suites": [{"cases": [{"code": code, "hidden": False, "locked": False}], "scored": True,
                        "setup": "", "teardown": "", "type": "doctest"}]}
    return (f"# otter-grader test for emqlab's {assignment} / {grade_id}: {cell.what}\n"
            f"OK_FORMAT = True\n\ntest = {pprint.pformat(test, indent=4, width=100, sort_dicts=False)}\n")


def _code_cell(source: str) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": None, "metadata": {"tags": ["otter"]}, "outputs": [],
            "source": source}


def export(assignment: str, out: str | Path, source_dir: str | Path | None = None) -> list[Path]:
    """Write the otter layout of ``assignment`` under ``out`` (see the module docstring); returns the
    files written. ``source_dir`` holds the instructor notebooks (default: the package's
    ``notebooks/assignments``). Raises ``KeyError`` for an unknown assignment and
    :class:`emqlab.teaching.notebooks.GradingError` for a notebook that cannot be read."""
    a = ASSIGNMENTS[assignment]
    src = Path(source_dir) if source_dir is not None else _assignments_dir()
    nb = notebooks.student_version(notebooks.read_notebook(src / a.notebook))
    cells: list[dict[str, Any]] = [_code_cell(f'# otter-grader (pip install otter-grader): run this cell first\n'
                                              f'import otter\ngrader = otter.Notebook("{TESTS}")')]
    graded = {c.grade_id for c in a.cells}
    for cell in nb["cells"]:
        gid = notebooks.grade_id(cell)
        if notebooks.is_grade(cell) and gid in graded:  # nbgrader's test cell becomes otter's check
            cells.append(_code_cell(f'grader.check("{gid}")'))
        else:
            cells.append(cell)
    nb = {**nb, "cells": cells}
    out = Path(out)
    (out / TESTS).mkdir(parents=True, exist_ok=True)
    written = [out / a.notebook]
    notebooks.write_notebook(nb, written[0])
    for c in a.cells:
        path = out / TESTS / f"{c.grade_id}.py"
        path.write_text(test_file(assignment, c.grade_id), encoding="utf-8")
        written.append(path)
    return written


def _assignments_dir() -> Path:
    """The instructor notebooks of a checkout (``notebooks/assignments/``)."""
    return Path(__file__).resolve().parents[2] / "notebooks" / "assignments"


__all__ = ["check", "export", "test_file"]
