"""The one home of grading a notebook: :func:`grade_notebook` (a whole submission, to a
:class:`GradeReport`), :func:`grade_cells` (each graded cell of an assignment, on the answers of a run) and
:func:`check` (one cell, inside a notebook).

:func:`grade_notebook` grades a notebook **without nbgrader**: it runs the notebook's code cells except the
test cells (IPython magics and shell lines are skipped), collects the answers, and gives each graded cell to
its grader (:mod:`emqlab.teaching.assignments`). A grader is a pure function of the answers and of the
instructor's answer key (:mod:`emqlab.teaching.key`: the few answers no engine run gives), so the same
notebook and the same key always get the same grade; the package itself holds no expected answer. A
cell scores all of its points or none, as in nbgrader (a test cell
passes or fails), and its feedback says what was right or, in terms of the recorded steps, what went wrong.
The hidden tests in the source notebooks call :func:`check` with the same graders, so ``nbgrader autograde``
and ``emqlab grade`` agree.

By default the student's code does **not** run in this process: :func:`grade_isolated` hands the notebook's
code cells to :mod:`emqlab.teaching.sandbox`, which runs them in a separate, resource-limited interpreter
and brings back only the answer values as plain data; every score is computed here. ``isolated=False``
runs the cells in this process instead (:func:`emqlab.teaching.run.run_notebook`), as nbgrader's autograder
does (for the notebooks' own hidden tests and for tests of the graders).

``emqlab grade`` exits with :data:`EXIT_FULL_MARKS` (0) at full marks, :data:`EXIT_BELOW_FULL` (1) below
them, and :data:`EXIT_CANNOT_GRADE` (2) when a notebook cannot be graded at all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from emqlab.engine.history import DEFAULT_WIDTH, wrap
from emqlab.protocol.verdict import ExitCode
from emqlab.teaching.assignments import ASSIGNMENTS, PROBES, warm
from emqlab.teaching.assignments.base import FEEDBACK_INDENT, Assignment, GradedCell, Verdict, feedback_block
from emqlab.teaching.key import NO_KEY, Key, find_key
from emqlab.teaching.notebooks import GradingError, assignment_of, grade_id, read_notebook, validate_notebook
from emqlab.teaching.run import CellError, NotebookRun, run_notebook
from emqlab.teaching.sandbox import (
    DEFAULT_LIMITS,
    IsolatedRun,
    Limits,
    cells_to_run,
    release_version,
    run_isolated,
    source_notebook,
    source_version,
    unsaved_hint,
)

#: ``emqlab grade``'s exit codes, from :class:`emqlab.protocol.verdict.ExitCode`: every notebook got full marks
#: (``HOLDS``, 0) / at least one is below full marks, a grade was given (``FAILS``, 1) / at least one could
#: not be graded: not a notebook, not an assignment (``USAGE``, 2).
EXIT_FULL_MARKS, EXIT_BELOW_FULL, EXIT_CANNOT_GRADE = int(ExitCode.HOLDS), int(ExitCode.FAILS), int(ExitCode.USAGE)


@dataclass
class CellGrade:
    """One graded cell's grade: all of its points or none, and the feedback for the student."""

    grade_id: str
    what: str
    points: float
    max_points: float
    passed: bool
    feedback: str


@dataclass
class GradeReport:
    """A notebook's grade: each graded cell's, the cells that raised, the notes; :meth:`to_dict` is the JSON of
    ``emqlab grade --json`` and :meth:`text` its text."""

    notebook: str
    assignment: str
    title: str
    cells: list[CellGrade]
    errors: list[CellError]
    elapsed_s: float = 0.0
    #: remarks on the notebook as a whole (an edited locked cell, an unsaved notebook)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def max_score(self) -> float:
        return sum(c.max_points for c in self.cells)

    def to_dict(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "assignment": self.assignment, "title": self.title,
                "score": self.score, "max_score": self.max_score,
                "cells": [asdict(c) for c in self.cells], "errors": [asdict(e) for e in self.errors],
                "notes": list(self.notes), "elapsed_s": round(self.elapsed_s, 3)}

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_FULL_MARKS` or :data:`EXIT_BELOW_FULL`."""
        return EXIT_FULL_MARKS if self.score >= self.max_score else EXIT_BELOW_FULL

    def text(self, width: int | None = DEFAULT_WIDTH) -> str:
        """The report as text, its sentences wrapped to ``width`` columns (``None``: unwrapped)."""
        lines = wrap(f"{self.title} ({self.assignment}) · {self.notebook}", width, indent=2)
        for c in self.cells:
            mark = "ok" if c.passed else "--"
            lines += wrap(f"  [{mark}] {c.grade_id:<16} {_pts(c.points)}/{_pts(c.max_points)}  {c.what}", width,
                          indent=4)
            lines += wrap(feedback_block(c.feedback, FEEDBACK_INDENT), width)
        for note in self.notes:
            lines += wrap(f"  note: {note}", width, indent=6)
        lines.append(f"  score {_pts(self.score)}/{_pts(self.max_score)}")
        return "\n".join(lines)


def _pts(x: float) -> str:
    return f"{x:g}"


def find_assignment(nb: Mapping[str, Any], path: str) -> Assignment:
    """The assignment ``nb`` is a submission of: by ``metadata.emqlab.assignment``, else by its graded cells'
    ids. Raises :class:`GradingError` (``path`` names the notebook in its message) when it is none."""
    aid = assignment_of(nb)
    if aid is None:
        ids = {grade_id(c) for c in nb.get("cells", [])}
        aid = next((a.id for a in ASSIGNMENTS.values() if any(c.grade_id in ids for c in a.cells)), None)
    if aid is None or aid not in ASSIGNMENTS:
        raise GradingError(f"{path}: not an emqlab assignment (metadata.emqlab.assignment is "
                           f"{aid!r}; known: {', '.join(ASSIGNMENTS)})")
    return ASSIGNMENTS[aid]


def _grade_cell(cell: GradedCell, run: NotebookRun, key: Mapping[str, Any] | None = None) -> Verdict:
    missing = [n for n in cell.names if n not in run.namespace]
    if missing:
        err = run.error_in(cell.answer_cell)
        names = ", ".join(missing) + (" are" if len(missing) > 1 else " is")
        if err is not None and err.stubbed:
            return Verdict(False, f"{names} not defined: the answer cell '{cell.answer_cell}' still has the stub "
                                  "('# YOUR CODE HERE' / raise NotImplementedError()). Replace it with your answer.")
        if err is not None:
            return Verdict(False, f"{names} not defined: the answer cell '{cell.answer_cell}' (code cell "
                                  f"{err.cell}) raised {err.error}.")
        return Verdict(False, f"{names} not defined: write it in the answer cell '{cell.answer_cell}'.")
    try:
        return run_grader(cell, run.namespace, key)
    except Exception as e:  # noqa: BLE001 - a grader must never crash the grade of the other cells
        return Verdict(False, f"Grading {cell.grade_id} failed: {type(e).__name__}: {e}")


def run_grader(cell: GradedCell, answers: Mapping[str, Any], key: Mapping[str, Any] | None) -> Verdict:
    """``cell``'s grader on ``answers``, given the answer key's values when it names some
    (:attr:`GradedCell.key`); without them the verdict is :data:`emqlab.teaching.key.NO_KEY`."""
    values = {n: answers[n] for n in cell.names}
    if not cell.key:
        return cell.grader(**values)
    if key is None or any(n not in key for n in cell.key):
        return Verdict(False, NO_KEY)
    return cell.grader(**values, key={n: key[n] for n in cell.key})


def key_answers(assignment: Assignment, key: Key | None) -> dict[str, Any] | None:
    """The answer key's values for ``assignment`` (None without a key, or when it lacks this notebook)."""
    if key is None or not assignment.key_cells:
        return None
    return key.answers(assignment)


def grade_cells(assignment: Assignment, run: NotebookRun, key: Mapping[str, Any] | None = None) -> list[CellGrade]:
    """Grade every test cell of ``assignment`` on the answers in ``run`` (``key``: the answer key's values,
    :func:`key_answers`). A failed cell whose answers build on another failed cell
    (:attr:`GradedCell.depends`) says so first: the cause is there."""
    grades: list[CellGrade] = []
    failed: dict[str, GradedCell] = {}
    for cell in assignment.cells:
        v = _grade_cell(cell, run, key)
        feedback = v.feedback
        if not v.passed:
            causes = [failed[d] for d in cell.depends if d in failed]
            if causes:
                named = " and ".join(f"'{c.grade_id}' ({c.what})" for c in causes)
                feedback = (f"This answer builds on {named}, which did not pass: fix that first, the error here "
                            f"may come from there. {feedback}")
            failed[cell.grade_id] = cell
        grades.append(CellGrade(cell.grade_id, cell.what, cell.points if v.passed else 0.0, cell.points, v.passed,
                                feedback))
    return grades


def grade_notebook(source: str | Path | Mapping[str, Any], *, name: str | None = None, isolated: bool = True,
                   limits: Limits | None = None, key: str | Path | Key | None = None) -> GradeReport:
    """Grade a notebook (a path or a loaded notebook dict). Deterministic; raises :class:`GradingError` when
    the notebook is not an emqlab assignment, or ``key`` is not a folder.

    ``isolated`` (the default) runs the notebook's code in a separate, limited process
    (:func:`grade_isolated`, ``limits`` a :class:`~emqlab.teaching.sandbox.Limits`)
    and grades the answers that come back; ``isolated=False`` runs it in this process. ``key`` is the
    instructor's answer key (a folder or a :class:`~emqlab.teaching.key.Key`; default
    :func:`~emqlab.teaching.key.find_key`): the source notebooks, whose locked cells run as released and whose
    key cells hold the answers no engine run gives."""
    the_key = key if isinstance(key, Key) else find_key(key)
    started = time.perf_counter()
    file: str | None = None
    if isinstance(source, Mapping):
        nb, path = source, name or "<notebook>"
        validate_notebook(dict(nb), path)
    else:
        nb, path, file = read_notebook(source), name or str(source), str(source)
    assignment = find_assignment(nb, path)
    if isolated:
        return grade_isolated(nb, path, assignment, limits or DEFAULT_LIMITS, file=file, key=the_key)
    run = run_notebook(nb)
    grades = grade_cells(assignment, run, key_answers(assignment, the_key))
    return GradeReport(path, assignment.id, assignment.title, grades, run.errors, time.perf_counter() - started)


def check(gid: str, namespace: Mapping[str, Any], key: str | Path | None = None) -> str:
    """Grade one test cell inside a notebook (its hidden tests call this with ``globals()``): return the
    feedback when the answer is right; raise ``AssertionError`` with the feedback when it is not. A cell
    graded against the answer key reads it from ``key`` (a folder), ``$EMQLAB_KEY`` or the checkout
    (:func:`~emqlab.teaching.key.find_key`)."""
    found = next(((a, c) for a in ASSIGNMENTS.values() for c in a.cells if c.grade_id == gid), None)
    if found is None:
        raise KeyError(f"no graded cell {gid!r}")
    assignment, cell = found
    missing = [n for n in cell.names if n not in namespace]
    if missing:
        raise AssertionError(f"{', '.join(missing)} is not defined: run the answer cell '{cell.answer_cell}' first.")
    v = run_grader(cell, namespace, key_answers(assignment, find_key(key)) if cell.key else None)
    if not v.passed:
        raise AssertionError(v.feedback)
    return v.feedback


def checkout_folders() -> list[str]:
    """The folders of the source checkout emqlab runs from (an editable install: the package's parent holds
    ``pyproject.toml``), except the ones graded code imports and reads from: the package, ``lua/`` and any
    folder that holds the interpreter or an entry of ``sys.path``. A checkout's tests, docs, notebooks and
    benchmarks hold worked answers (``tests/test_grading.py`` has a repaired finish that passes a2), so a
    graded notebook may not read them. Empty for an installed wheel."""
    import sys

    import emqlab

    package = Path(emqlab.__file__).resolve().parent
    root = package.parent
    if not (root / "pyproject.toml").is_file():
        return []
    needed = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.executable, *sys.path) if p]
    out = []
    for child in root.iterdir():
        child = child.resolve()
        if not child.is_dir() or child in (package, root / "lua") or child.suffix in (".egg-info", ".dist-info"):
            continue
        if any(n == child or child in n.parents for n in needed):
            continue
        out.append(str(child))
    return sorted(out)


def grade_isolated(nb: Mapping[str, Any], path: str, assignment: Assignment, limits: Limits = DEFAULT_LIMITS,
                   *, file: str | None = None, key: Key | None = None) -> GradeReport:
    """Grade ``nb`` (an assignment's submission) with its code run by
    :func:`emqlab.teaching.sandbox.run_isolated`; the graders run here, on the answers that came back.
    ``key``: the answer key (its source notebook gives the released locked cells; its folder is closed to
    the notebook's code)."""
    started = time.perf_counter()
    src = key.notebook(assignment.notebook) if key is not None else None
    release = release_version(assignment.notebook, src)
    cells, notes = cells_to_run(nb, release, source_version(assignment.notebook, src))
    if release is None:
        notes.append("The source notebook is not available here, so edits of locked cells cannot be detected; "
                     "test cells still never run.")
    names = sorted({n for c in assignment.cells for n in c.names})
    probes = {n: pts for n, pts in PROBES.items() if n in names}
    src = src or source_notebook(assignment.notebook)
    deny = sorted({str(p) for p in (src.parent if src is not None else None,
                                    key.folder if key is not None else None) if p is not None}
                  | set(checkout_folders()))
    answers = key_answers(assignment, key)
    if answers is None and any(c.key for c in assignment.cells):
        notes.append("No answer key here: the cells graded against the instructor's key score 0 "
                     "(emqlab grade --key DIR).")
    try:
        run = run_isolated(cells, names, probes, limits, deny_dirs=deny, meanwhile=lambda: warm(assignment.id))
    except OSError as e:  # the grader could not start or talk to the child: a grade of 0 with the reason
        run = IsolatedRun({}, [], failure=f"The grader could not run your notebook in its own process ({e}); "
                                          "ask your instructor.")
    if run.failure is not None:
        grades = [CellGrade(c.grade_id, c.what, 0.0, c.points, False, run.failure) for c in assignment.cells]
    else:
        grades = grade_cells(assignment, NotebookRun(dict(run.answers), list(run.errors)), answers)
    stubbed = any(e.stubbed and any(e.grade_id == c.answer_cell for c in assignment.cells) for e in run.errors)
    if stubbed:
        notes.append(unsaved_hint(file))
    report = GradeReport(path, assignment.id, assignment.title, grades, list(run.errors),
                         time.perf_counter() - started)
    report.notes = notes
    return report


__all__ = ["EXIT_BELOW_FULL", "EXIT_CANNOT_GRADE", "EXIT_FULL_MARKS", "Assignment", "CellGrade", "GradeReport",
           "GradedCell", "Verdict", "check", "find_assignment", "grade_cells", "grade_isolated", "grade_notebook",
           "key_answers", "run_grader"]
