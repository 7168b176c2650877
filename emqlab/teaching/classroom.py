"""Grading a folder of submissions: one row per notebook, as CSV for a gradebook.

The folder is searched recursively for ``*.ipynb`` (Jupyter's ``.ipynb_checkpoints`` skipped). The student
is the first folder below the root (``submitted/ada/a1.ipynb`` → ``ada``), else the file's stem. A notebook
that cannot be graded gets a row with ``status = error`` and the reason, never stops the others.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from emqlab.teaching.assignments import ASSIGNMENTS
from emqlab.teaching.grade import EXIT_BELOW_FULL, EXIT_CANNOT_GRADE, EXIT_FULL_MARKS, grade_notebook
from emqlab.teaching.notebooks import GradingError


@dataclass
class Row:
    student: str
    notebook: str
    assignment: str = ""
    score: float = 0.0
    max_score: float = 0.0
    status: str = "graded"
    cells: dict[str, float] = field(default_factory=dict)
    message: str = ""

    @property
    def full_marks(self) -> bool:
        return self.status == "graded" and self.score >= self.max_score


def submissions(root: str | Path) -> list[Path]:
    base = Path(root)
    return sorted(p for p in base.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("."))


def student_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else path.stem


def grade_folder(root: str | Path, *, limits: Any = None, progress: Callable[[Row], None] | None = None,
                 jobs: int = 1, feedback: str | Path | None = None, key: Any = None) -> list[Row]:
    """Grade every notebook under ``root`` (isolated, as ``emqlab grade`` does), ``jobs`` at a time; the rows
    in submission order whatever the order they finish in. With ``feedback``, a folder: one text file per
    student there, ``<student>.txt`` (:func:`feedback_path`), each of the student's notebooks' reports in
    submission order (or why one could not be graded): what is handed back. ``key``: the answer key (a
    folder or a :class:`~emqlab.teaching.key.Key`; default :func:`~emqlab.teaching.key.find_key`).

    The pool holds threads, not processes: each notebook's code already runs in a sandboxed process of
    its own (:func:`~emqlab.teaching.grade.grade_isolated`), and the graders' reference runs, made once per
    assignment (:func:`~emqlab.teaching.assignments.warm`), are shared by every notebook of the folder."""
    from concurrent.futures import ThreadPoolExecutor

    base = Path(root)

    def one(p: Path) -> tuple[Row, str]:
        row = Row(student_of(p, base), str(p.relative_to(base)))
        linked = _linked(p, base)
        if linked is not None:
            row.status, row.message = "error", linked
            return row, f"{row.notebook}: could not be graded: {linked}\n"
        try:
            report = grade_notebook(p, limits=limits, key=key)
        except GradingError as e:
            row.status, row.message = "error", str(e)
            return row, f"{row.notebook}: could not be graded: {e}\n"
        row.assignment, row.score, row.max_score = report.assignment, report.score, report.max_score
        row.cells = {c.grade_id: c.points for c in report.cells}
        failures = {c.feedback for c in report.cells if not c.passed and c.feedback.startswith("Your notebook")}
        row.message = " ".join(sorted(failures))[:300]
        return row, report.text() + "\n"

    rows = []
    texts: dict[str, list[str]] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for row, text in pool.map(one, submissions(base)):
            rows.append(row)
            if feedback is not None:  # the student's file so far: whole after their last notebook
                texts.setdefault(row.student, []).append(text)
                out = feedback_path(feedback, row.student)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text("\n".join(texts[row.student]), encoding="utf-8")
            if progress is not None:
                progress(row)
    return rows


def _linked(path: Path, root: Path) -> str | None:
    """Why a submission is no file of the folder's own (a symbolic link on its way, say, to the solution in the
    instructor's folder), or None."""
    rel = path.relative_to(root)
    for n in range(1, len(rel.parts) + 1):
        step = root.joinpath(*rel.parts[:n])
        if step.is_symlink():
            return (f"{'/'.join(rel.parts[:n])} is a symbolic link (to {step.resolve()}): a submission must be a "
                    "file of the folder's own")
    return None


def feedback_path(folder: str | Path, student: str) -> Path:
    """Where a student's feedback goes: ``folder/<student>.txt``."""
    return Path(folder) / f"{student}.txt"


def feedback_beside(csv_path: str | Path) -> Path:
    """The feedback folder that goes with a CSV of grades: ``grades.csv`` → ``grades-feedback/`` beside it."""
    p = Path(csv_path)
    return p.with_name(f"{p.stem}-feedback")


def columns(rows: Iterable[Row]) -> list[str]:
    """Every graded cell seen, in the assignments' order."""
    seen = {gid for r in rows for gid in r.cells}
    return [c.grade_id for a in ASSIGNMENTS.values() for c in a.cells if c.grade_id in seen]


def _cell(text: str) -> str:
    """A text field as a gradebook reads it safely: on one line, and never a formula (a spreadsheet evaluates a
    field that starts with ``=``, ``+``, ``-`` or ``@``; a quote before it keeps it text)."""
    text = " ".join(text.splitlines())
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t") else text


def write_csv(rows: list[Row], out: IO[str]) -> None:
    """The rows as CSV: a header, then one line per notebook; the students' names and the notebooks' paths,
    which the students chose, are made safe for a spreadsheet (:func:`_cell`)."""
    cells = columns(rows)
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["student", "notebook", "assignment", "score", "max_score", "status", *cells, "message"])
    for r in rows:
        w.writerow([_cell(r.student), _cell(r.notebook), r.assignment, f"{r.score:g}", f"{r.max_score:g}", r.status,
                    *(f"{r.cells[c]:g}" if c in r.cells else "" for c in cells), _cell(r.message)])


def exit_code(rows: list[Row]) -> int:
    """:data:`~emqlab.teaching.grade.EXIT_CANNOT_GRADE` if any notebook could not be graded (or there is none),
    else :data:`~emqlab.teaching.grade.EXIT_BELOW_FULL` if any is below full marks, else
    :data:`~emqlab.teaching.grade.EXIT_FULL_MARKS`."""
    if not rows or any(r.status != "graded" for r in rows):
        return EXIT_CANNOT_GRADE
    return EXIT_FULL_MARKS if all(r.full_marks for r in rows) else EXIT_BELOW_FULL
