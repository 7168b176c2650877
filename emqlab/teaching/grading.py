"""Classroom assignments: grading a student's notebook, and making the student version of a source notebook.

The assignments live in ``notebooks/assignments/`` in nbgrader's *source* layout:

* answer cells carry cell metadata ``nbgrader: {solution: true, grade_id: …}`` and a solution region between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
* test cells carry ``nbgrader: {grade: true, grade_id: …, points: n}``, a visible smoke test, and hidden
  tests between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``;
* read-only cells carry ``locked: true``.

:func:`student_version` does what ``nbgrader generate_assignment`` does to such a notebook (nbgrader's
ClearSolutions, ClearHiddenTests, ClearOutput and LockCells preprocessors): each solution region becomes
``# YOUR CODE HERE`` + ``raise NotImplementedError()`` at the region's indentation, hidden tests are
removed, outputs cleared, graded and read-only cells made undeletable.

:func:`grade_notebook` grades a notebook **without nbgrader**: it runs the notebook's code cells except the
test cells (IPython magics and shell lines are skipped), collects the answers, and gives each graded cell to
its grader. A grader is a pure function of the answers: it runs the engine on fakeredis with the virtual
clock (replays, exhaustive explorations, seeded timed runs), so the same notebook always gets the same
grade, and it reads the verdict off the recorded histories and final states. A cell scores all of its points
or none, as in nbgrader (a test cell passes or fails), and its feedback says what was right or, in terms of
the recorded steps, what went wrong. The hidden tests in the source notebooks call :func:`check` with the
same graders, so ``nbgrader autograde`` and ``emqlab grade`` agree.

By default the student's code does **not** run in this process: :func:`grade_notebook` hands the notebook's
code cells to :mod:`emqlab.teaching.sandbox`, which runs them in a separate, resource-limited interpreter
and brings back only the answer values as plain data; every score is computed here. ``isolated=False``
runs the cells in this process instead, as nbgrader's autograder does (for the notebooks' own hidden tests
and for tests of the graders).

``emqlab grade`` exits with :data:`EXIT_FULL_MARKS` (0) at full marks, :data:`EXIT_BELOW_FULL` (1) below
them, and :data:`EXIT_CANNOT_GRADE` (2) when a notebook cannot be graded at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import io
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from emqlab.engine.history import DEFAULT_WIDTH, wrap

__all__ = [
    "ASSIGNMENTS", "Assignment", "CellGrade", "GradeReport", "GradedCell", "GradingError", "Verdict",
    "check", "grade_notebook", "read_notebook", "run_notebook", "student_version", "write_notebook",
    "make_student_versions", "CODE_STUB", "TEXT_STUB", "explore_finish", "try_finish", "FinishExploration",
]

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"
#: nbgrader's ClearSolutions stubs
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"

#: ``emqlab grade``'s exit codes, from :class:`emqlab.verdict.ExitCode`: every notebook got full marks
#: (``HOLDS``, 0) / at least one is below full marks, a grade was given (``FAILS``, 1) / at least one could
#: not be graded: not a notebook, not an assignment (``USAGE``, 2).
try:
    from emqlab.protocol.verdict import ExitCode as _ExitCode

    EXIT_FULL_MARKS, EXIT_BELOW_FULL, EXIT_CANNOT_GRADE = (int(_ExitCode.HOLDS), int(_ExitCode.FAILS),
                                                           int(_ExitCode.USAGE))
except ImportError:  # pragma: no cover - emqlab.verdict is the one home of exit codes when present
    EXIT_FULL_MARKS, EXIT_BELOW_FULL, EXIT_CANNOT_GRADE = 0, 1, 2


class GradingError(ValueError):
    """A notebook cannot be graded or converted (not a notebook, unknown assignment, a malformed solution or
    hidden-test region); the message is one line."""


# -- notebooks as plain JSON (no nbformat needed) ------------------------------------------------------------


#: limits of a notebook file the grader reads
MAX_NOTEBOOK_BYTES = 50_000_000
MAX_JSON_DEPTH = 100
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON ``text`` (outside strings), without parsing it."""
    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", _JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_notebook(path: str | Path) -> dict[str, Any]:
    """Read an ``.ipynb`` file as a dict (nbformat 4), validated (:func:`validate_notebook`) before any cell
    is looked at. Raises :class:`GradingError` with a one-line message."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise GradingError(f"{p}: larger than {MAX_NOTEBOOK_BYTES:,} bytes; clear the outputs and retry")
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise GradingError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise GradingError(f"{p}: not a notebook (not UTF-8 text: byte {e.start}: {e.reason})") from None
    if _json_depth(text) > MAX_JSON_DEPTH:
        raise GradingError(f"{p}: not a notebook (JSON nested more than {MAX_JSON_DEPTH} levels deep)")
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as e:
        raise GradingError(f"{p}:{e.lineno}: not a notebook (JSON: {e.msg})") from None
    except RecursionError:  # pragma: no cover - _json_depth refuses such input first
        raise GradingError(f"{p}: not a notebook (JSON nested too deeply)") from None
    validate_notebook(nb, str(p))
    return nb


def _where(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the notebook"


def validate_notebook(nb: Any, path: str = "<notebook>") -> None:
    """Check that ``nb`` is an nbformat 4 notebook the grader can read, before any cell is touched: the
    nbformat schema (when the ``nbformat`` package is installed, as it is with Jupyter), then the parts the
    grader reads (cell sources, nbgrader metadata, the assignment id). Raises :class:`GradingError` with
    one line naming the field: ``a1.ipynb: cells[3].source: expected text or a list of text, got int``."""

    def bad(where: Iterable[Any], problem: str) -> GradingError:
        return GradingError(f"{path}: {_where(where)}: {problem}")

    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise GradingError(f"{path}: not an nbformat 4 notebook")
    try:
        nested = _json_depth(json.dumps(nb, default=str))
    except (RecursionError, ValueError):  # a circular or absurdly deep dict given in-process
        nested = MAX_JSON_DEPTH + 1
    if nested > MAX_JSON_DEPTH:
        raise GradingError(f"{path}: not a notebook (JSON nested more than {MAX_JSON_DEPTH} levels deep)")
    meta = nb.get("metadata", {})
    if not isinstance(meta, dict):
        raise bad(["metadata"], "expected an object")
    emq = meta.get("emqlab", {})
    if not isinstance(emq, dict):
        raise bad(["metadata", "emqlab"], "expected an object")
    if "assignment" in emq and not isinstance(emq["assignment"], str):
        raise bad(["metadata", "emqlab", "assignment"], f"expected text, got {type(emq['assignment']).__name__}")
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            raise bad(["cells", i], f"expected an object, got {type(cell).__name__}")
        src = cell.get("source", "")
        if not isinstance(src, str) and not (isinstance(src, list) and all(isinstance(x, str) for x in src)):
            raise bad(["cells", i, "source"], f"expected text or a list of text, got {type(src).__name__}")
        cmeta = cell.get("metadata", {})
        if not isinstance(cmeta, dict):
            raise bad(["cells", i, "metadata"], f"expected an object, got {type(cmeta).__name__}")
        nbg = cmeta.get("nbgrader", {})
        if not isinstance(nbg, dict):
            raise bad(["cells", i, "metadata", "nbgrader"], f"expected an object, got {type(nbg).__name__}")
        gid = nbg.get("grade_id")
        if gid is not None and not isinstance(gid, str):
            raise bad(["cells", i, "metadata", "nbgrader", "grade_id"], f"expected text, got {type(gid).__name__}")
        pts = nbg.get("points", 0)
        if isinstance(pts, bool) or not isinstance(pts, int | float) or not math.isfinite(pts) or pts < 0:
            raise bad(["cells", i, "metadata", "nbgrader", "points"], f"expected a number >= 0, got {pts!r}"[:200])
    # then the schema, on a notebook whose shape the checks above vouch for
    nbformat: Any
    try:
        import nbformat
    except ImportError:  # pragma: no cover - nbformat comes with Jupyter; the checks above did run
        nbformat = None
    if nbformat is not None:
        import warnings

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                nbformat.validate(copy.deepcopy(nb), version=4)
        except Exception as e:  # noqa: BLE001 - nbformat's ValidationError, or its own slip on odd input
            message = " ".join(str(getattr(e, "message", e)).split())
            if len(message) > 200:
                message = message[:199] + "…"
            raise bad(getattr(e, "absolute_path", ()), f"not valid nbformat 4: {message}") from None


def write_notebook(nb: Mapping[str, Any], path: str | Path) -> None:
    """Write a notebook as Jupyter does (one-space indent, sorted keys, trailing newline)."""
    Path(path).write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _source(cell: Mapping[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _set_source(cell: dict[str, Any], text: str) -> None:
    cell["source"] = text.splitlines(keepends=True)


def _meta(cell: Mapping[str, Any]) -> dict[str, Any]:
    m = cell.get("metadata", {}).get("nbgrader", {})
    return m if isinstance(m, dict) else {}


def is_solution(cell: Mapping[str, Any]) -> bool:
    return bool(_meta(cell).get("solution"))


def is_grade(cell: Mapping[str, Any]) -> bool:
    return bool(_meta(cell).get("grade"))


def is_locked(cell: Mapping[str, Any]) -> bool:
    m = _meta(cell)
    return bool(m.get("locked")) and not m.get("solution")


def grade_id(cell: Mapping[str, Any]) -> str | None:
    gid = _meta(cell).get("grade_id")
    return str(gid) if gid else None


def assignment_of(nb: Mapping[str, Any]) -> str | None:
    """The assignment id in the notebook's metadata (``metadata.emqlab.assignment``)."""
    meta = nb.get("metadata", {}).get("emqlab", {})
    return meta.get("assignment") if isinstance(meta, dict) else None


# -- the student version (nbgrader generate_assignment, the parts that matter) ------------------------------


def _replace_solution_regions(text: str, stub: str, where: str) -> tuple[str, bool]:
    out: list[str] = []
    in_solution = replaced = False
    for line in text.split("\n"):
        if line.strip() == BEGIN_SOLUTION:
            if in_solution:
                raise GradingError(f"{where}: nested '{BEGIN_SOLUTION}'")
            in_solution = replaced = True
            indent = line[: line.find(BEGIN_SOLUTION)]
            out.extend(indent + s for s in stub.split("\n"))
        elif line.strip() == END_SOLUTION:
            if not in_solution:
                raise GradingError(f"{where}: '{END_SOLUTION}' without '{BEGIN_SOLUTION}'")
            in_solution = False
        elif not in_solution:
            out.append(line)
    if in_solution:
        raise GradingError(f"{where}: '{BEGIN_SOLUTION}' without '{END_SOLUTION}'")
    return "\n".join(out), replaced


def _remove_hidden_tests(text: str, where: str) -> tuple[str, bool]:
    out: list[str] = []
    in_test = removed = False
    for line in text.split("\n"):
        if BEGIN_HIDDEN in line:
            if in_test:
                raise GradingError(f"{where}: nested '{BEGIN_HIDDEN}'")
            in_test = removed = True
        elif END_HIDDEN in line:
            in_test = False
        elif not in_test:
            out.append(line)
    if in_test:
        raise GradingError(f"{where}: '{BEGIN_HIDDEN}' without '{END_HIDDEN}'")
    return "\n".join(out), removed


def student_version(nb: Mapping[str, Any]) -> dict[str, Any]:
    """The release (student) version of a source notebook, as ``nbgrader generate_assignment`` makes it:
    solution regions → the stub, solution cells without a region → the whole cell is the stub, hidden tests
    removed, outputs and execution counts cleared, graded / solution / read-only cells undeletable (graded
    and read-only cells also uneditable), and ``cell_type`` recorded in their nbgrader metadata. Raises
    :class:`GradingError` for a malformed region, or one outside a solution / graded cell."""
    out = copy.deepcopy(dict(nb))
    out.setdefault("metadata", {}).pop("celltoolbar", None)
    for i, cell in enumerate(out["cells"]):
        where = f"cell {i + 1}" + (f" ({grade_id(cell)})" if grade_id(cell) else "")
        text = _source(cell)
        stub = CODE_STUB if cell.get("cell_type") == "code" else TEXT_STUB
        text, replaced = _replace_solution_regions(text, stub, where)
        if replaced and not is_solution(cell):
            raise GradingError(f"{where}: a solution region in a cell not marked as a solution (nbgrader metadata)")
        if is_solution(cell) and not replaced:
            text = stub
        text, removed = _remove_hidden_tests(text, where)
        if removed and not is_grade(cell):
            raise GradingError(f"{where}: hidden tests in a cell not marked as graded (nbgrader metadata)")
        _set_source(cell, text)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        meta = cell.setdefault("metadata", {})
        nbg = meta.get("nbgrader")
        if isinstance(nbg, dict):
            nbg.setdefault("cell_type", cell.get("cell_type"))
            if is_solution(cell):
                meta["deletable"] = False
            elif is_grade(cell) or nbg.get("locked"):
                meta["deletable"] = False
                meta["editable"] = False
    return out


def make_student_versions(source: str | Path, out: str | Path) -> list[Path]:
    """Write the student version of ``source`` (a notebook, or a directory of them) to ``out`` (a file, or
    a directory created if needed). Returns the files written."""
    src, dst = Path(source), Path(out)
    pairs: list[tuple[Path, Path]]
    if src.is_dir():
        notebooks = sorted(p for p in src.glob("*.ipynb") if not p.name.startswith("."))
        if not notebooks:
            raise GradingError(f"{src}: no notebooks (*.ipynb) in this directory")
        if dst.exists() and not dst.is_dir():
            raise GradingError(f"{dst}: must be a directory when SOURCE is one")
        if dst.resolve() == src.resolve():
            raise GradingError(f"{dst}: would overwrite the source notebooks; choose another directory")
        dst.mkdir(parents=True, exist_ok=True)
        pairs = [(p, dst / p.name) for p in notebooks]
    else:
        if str(out).endswith(("/", "\\")) or dst.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
            target = dst / src.name
        else:
            if not dst.parent.is_dir():
                raise GradingError(f"{dst}: the folder {dst.parent} does not exist")
            target = dst
        if target.resolve() == src.resolve():
            raise GradingError(f"{target}: would overwrite the source notebook; choose another path")
        pairs = [(src, target)]
    written = []
    for s, d in pairs:
        write_notebook(student_version(read_notebook(s)), d)
        written.append(d)
    return written


# -- running a notebook's code ---------------------------------------------------------------------------


@dataclass
class CellError:
    """A code cell that raised: its index (1-based), grade_id, and the exception as one line."""

    cell: int
    grade_id: str | None
    error: str

    @property
    def stubbed(self) -> bool:
        return self.error.startswith("NotImplementedError")


@dataclass
class NotebookRun:
    namespace: dict[str, Any]
    errors: list[CellError] = field(default_factory=list)
    stdout: str = ""

    def error_in(self, gid: str) -> CellError | None:
        return next((e for e in self.errors if e.grade_id == gid), None)


_MAGIC = re.compile(r"^\s*[%!]")


def _python_of(text: str) -> str:
    """A cell's Python with IPython magics and shell escapes commented out (``%matplotlib``, ``!pip``)."""
    return "\n".join(f"# {line}" if _MAGIC.match(line) else line for line in text.split("\n"))


#: Seconds one cell may run before it is stopped (nbgrader's default cell timeout is 30 s).
CELL_TIMEOUT_S = 30


class CellTimeout(Exception):
    """A cell ran longer than :data:`CELL_TIMEOUT_S`."""


@contextlib.contextmanager
def _time_limit(seconds: int) -> Any:
    """Stop the block after ``seconds`` (SIGALRM; only in the main thread of a POSIX process, else no limit)."""
    import signal
    import threading

    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: Any) -> None:
        raise CellTimeout(f"the cell ran longer than {seconds} s and was stopped")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_notebook(nb: Mapping[str, Any], *, tests: bool = False) -> NotebookRun:
    """Run the notebook's code cells in order in one fresh namespace, as a kernel would, capturing their
    output. Test cells (graded, not solutions) run only with ``tests=True``. A cell that raises is recorded
    and the run goes on (nbgrader autograde does the same); a cell that runs longer than
    :data:`CELL_TIMEOUT_S` seconds is stopped and recorded as ``CellTimeout``."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    run = NotebookRun(ns)
    buf = io.StringIO()
    code_cells = (c for c in nb.get("cells", []) if c.get("cell_type") == "code")
    for i, cell in enumerate(code_cells, start=1):  # numbered as code cells: Markdown cells do not count
        if is_grade(cell) and not is_solution(cell) and not tests:
            continue
        code = _python_of(_source(cell))
        try:
            with contextlib.redirect_stdout(buf), _time_limit(CELL_TIMEOUT_S):
                exec(compile(code, f"<code cell {i}>", "exec"), ns)  # noqa: S102 - running the notebook is the point
        except BaseException as e:  # noqa: BLE001 - a student's cell may raise anything, even SystemExit
            if isinstance(e, KeyboardInterrupt):
                raise
            first = str(e).strip().split("\n")[0]
            text = f"{type(e).__name__}: {first}" if first else type(e).__name__
            run.errors.append(CellError(i, grade_id(cell), text))
    run.stdout = buf.getvalue()
    return run


# -- verdicts and reports ------------------------------------------------------------------------------------


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


@dataclass
class Assignment:
    id: str
    title: str
    notebook: str
    cells: list[GradedCell]

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.cells)

    def cell(self, gid: str) -> GradedCell:
        for c in self.cells:
            if c.grade_id == gid:
                return c
        raise KeyError(gid)


@dataclass
class CellGrade:
    grade_id: str
    what: str
    points: float
    max_points: float
    passed: bool
    feedback: str


@dataclass
class GradeReport:
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
    """``feedback`` with each of its lines indented ``indent`` columns (for :func:`emqlab.history.wrap`:
    its sentences then wrap under themselves, a history in it stays as it is)."""
    return "\n".join(" " * indent + line for line in feedback.split("\n"))


# -- the engine, as graders use it -----------------------------------------------------------------------


def _conn() -> Any:
    from emqlab.backend.connect import connect

    return connect()


def _replay(scenario: str, mode: str, schedule: str) -> Any:
    from emqlab.engine.scenario import load
    from emqlab.explore.checked import Runner, parse_schedule

    sc = load(scenario)
    choices = parse_schedule(schedule, [a.id for a in sc.actors])
    with Runner(sc, mode, _conn()) as r:
        return r.run(choices)


def _short(h: Any, limit: int = 40) -> str:
    """The annotated history, at most ``limit`` lines, fitted to the width feedback histories have
    (:func:`feedback_width`)."""
    lines = h.annotated(width=_WITNESS_WIDTH.get()).split("\n")
    if len(lines) > limit:
        lines = lines[: limit - 1] + [f"     … {len(lines) - limit + 1} more steps"]
    return "\n".join(lines)


# -- assignment 1: find a schedule that double-places a job ------------------------------------------------

A1_SCENARIO = "stalled-finish"


@dataclass(frozen=True)
class A1Case:
    """A case of assignment 1: ``stalled-finish`` itself, or a variant of it the grader builds in memory
    (no shipped file). ``about`` says what differs, for feedback (never where the window is)."""

    name: str
    about: str
    #: the job W1 holds (and the sweep has marked)
    job: str = "1"
    #: W1 files the job in ``completed`` or, its handler having thrown, in ``failed`` (fewer checks first)
    finish: str = "completed"
    #: W1 asks how long its lock has left (PTTL, one round trip each) this many times before it finishes
    lease_checks: int = 0
    #: how many recovery sweeps run (S1, S2, …)
    sweeps: int = 1
    #: a lease actor (L1) lets W1's lock lapse at some step
    lapse: bool = False

    def scenario(self) -> Any:
        """The case's scenario, a modified copy of ``stalled-finish``."""
        from emqlab.engine.scenario import ActorSpec

        sc = copy.deepcopy(_a1_base())
        if self.job != "1":
            spec = sc.jobs.pop("1")
            spec.id = self.job
            sc.jobs = {self.job: spec, **sc.jobs}
            sc.state = {k: [self.job if x == "1" else x for x in v] if isinstance(v, list) else v
                        for k, v in sc.state.items()}
            sc.locks = {self.job if k == "1" else k: v for k, v in sc.locks.items()}
            sc.actor("W1").holds = self.job
        sc.actor("W1").finish = self.finish
        if self.finish == "failed":
            sc.actor("W1").value = "handler threw"
        sc.actors += [ActorSpec(id=f"S{i}", kind="sweep", max_stalled=1) for i in range(2, self.sweeps + 1)]
        if self.lapse:
            sc.actors.append(ActorSpec(id="L1", kind="lease", job=self.job))
        sc.name = f"{A1_SCENARIO} ({self.name})" if self.name != "assignment" else A1_SCENARIO
        sc.expect = {}
        return sc

    def factories(self) -> dict[str, Callable[..., Any]] | None:
        """A worker that checks its lease before the finish (``lease_checks``), else None (emqlab's own)."""
        if not self.lease_checks:
            return None
        checks = self.lease_checks

        def worker(ctx: Any, spec: Any) -> Any:
            from emqlab.engine.actors import Op
            from emqlab.engine.actors import worker as finish_worker

            for _ in range(checks):
                yield Op("command", "lease check", command=(b"PTTL", ctx.keys.lock(spec.holds).encode()),
                         section="lease check")
            yield from finish_worker(ctx, spec)

        return {"worker": worker}

    def runner(self, mode: str = "split") -> Any:
        from emqlab.explore.checked import Runner

        return Runner(self.scenario(), mode, _conn(), factories=self.factories())

    def replay(self, schedule: str, mode: str = "split") -> Any:
        """The history of ``schedule`` on this case (raises :class:`emqlab.schedule.ScheduleError`)."""
        from emqlab.explore.checked import parse_schedule

        with self.runner(mode) as r:
            return r.run(parse_schedule(schedule, [a.id for a in r.scenario.actors]))

    def solo(self) -> Any:
        """W1's split finish run alone to its end, then the sweep: the history ``schedule_for`` is given."""
        return _a1_solo(self)


@lru_cache(maxsize=1)
def _a1_base() -> Any:
    from emqlab.engine.scenario import load

    return load(A1_SCENARIO)


@lru_cache(maxsize=16)
def _a1_solo(case: A1Case) -> Any:
    with case.runner("split") as r:
        return r.run()


#: Assignment 1's case and the variants the grader builds from it. ``schedule_for`` must double-place on
#: :data:`A1_SCHEDULE_CASES`, ``runs_with_anomaly`` must count right on :data:`A1_COUNT_PROBES`: a schedule
#: string or a number copied from one run fits that run only.
A1_CASES: dict[str, A1Case] = {c.name: c for c in [
    A1Case("assignment", "the assignment's own case"),
    A1Case("another-job", "another job id: W1 holds and finishes job 7, not job 1", job="7"),
    A1Case("lease-checks", "W1 asks how long its lock has left (PTTL) before it finishes, so every "
                           "command of its finish comes later in the history", lease_checks=2),
    A1Case("failed", "W1's handler threw, so W1 files the job in failed: that branch of the finish runs fewer "
                     "checks before it writes", finish="failed"),
    A1Case("two-sweeps", "a second recovery sweep runs too", sweeps=2),
    A1Case("lease-lapse", "W1's lock can also lapse, its lease running out", lapse=True),
]}
A1_SCHEDULE_CASES = ("assignment", "another-job", "lease-checks", "failed")
#: (case, mode) at which ``runs_with_anomaly(scenario, mode)`` is checked; a case here needs no custom
#: worker (the student's function gets a Scenario, explored with emqlab's own actors)
A1_COUNT_PROBES: tuple[tuple[str, str], ...] = (("assignment", "atomic"), ("assignment", "split"),
                                                ("two-sweeps", "split"), ("two-sweeps", "atomic"),
                                                ("lease-lapse", "split"))


def probe_arguments(name: str, key: Sequence[Any]) -> tuple[Any, ...]:
    """The arguments an answer function ``name`` is called with at probe ``key`` (plain data: it crosses
    to the isolated run): assignment 1's functions get typed objects built from the case named in ``key``
    (the solo :class:`~emqlab.history.History`; the :class:`~emqlab.scenario.Scenario` and a mode); the
    other functions get ``key`` itself."""
    if name == "schedule_for":
        return (A1_CASES[str(key[0])].solo(),)
    if name == "runs_with_anomaly":
        return (A1_CASES[str(key[0])].scenario(), str(key[1]))
    return tuple(key)


def _at(fn: Any, name: str, key: Sequence[Any]) -> Any:
    """``fn`` at probe ``key``: a function that came back from an isolated run is its table of values there
    (:class:`emqlab.teaching.sandbox.ProbedFunction`, called with the key), one from this process is called
    with :func:`probe_arguments`."""
    from emqlab.teaching.sandbox import ProbedFunction

    if isinstance(fn, ProbedFunction):
        return fn(*key)
    return fn(*probe_arguments(name, key))


def _a1_steps(h: Any, job: str = "1") -> dict[str, int | None]:
    """Where the sweeps and W1's DEL <job>:lock / SREM stalled happened in a history of an a1 case."""
    sweep = next((s.index for s in h.steps if s.actor.startswith("S")), None)
    dele = next((s.index for s in h.steps if s.actor == "W1" and s.op == "DEL"
                 and s.args[:1] == (f"{job}:lock",)), None)
    srem = next((s.index for s in h.steps if s.actor == "W1" and s.op == "SREM"), None)
    return {"sweep": sweep, "del": dele, "srem": srem}


def _a1_replay_verdict(case: A1Case, schedule: str) -> Verdict:
    """``schedule`` replayed on ``case`` (split) must leave its job in two places."""
    from emqlab.explore.checked import ScheduleError

    try:
        h = case.replay(schedule)
    except ScheduleError as e:
        actors = "W1 (the split finish, one step per command) and S1 (the sweep, one EVALSHA)"
        return Verdict(False, f"The schedule does not fit the scenario: {e}. The actors are {actors}.")
    if any(a["kind"] == "double-placement" for a in h.anomalies):
        a = next(x for x in h.anomalies if x["kind"] == "double-placement")
        return Verdict(True, f"Replaying {h.schedule} with a split finish: {a['because']}.")
    pos = _a1_steps(h, case.job)
    s, d, r = pos["sweep"], pos["del"], pos["srem"]
    if s is None:
        why = "S1 never ran, so nothing raced W1's finish. Give S1 a step inside the schedule"
    elif d is not None and s < d:
        why = (f"S1 ran at step {s}, too early: W1 had not yet given up the job's lock, so the lock was still "
               "there and the sweep saw a live job and only marked it again. Look in W1's history for the "
               "command that deletes the lock, and let S1 run later")
    elif r is not None and s > r:
        why = (f"S1 ran at step {s}, too late: W1 had already taken the job out of the stalled set, so it was no "
               "longer marked and the sweep had nothing to recover. Let S1 run earlier")
    else:
        why = f"S1 ran at step {s}, but the job was not recovered"
    places = ", ".join(h.final["placements"].get(case.job, [])) or "no list"
    return Verdict(False, f"Replaying {h.schedule} (split) leaves job {case.job} in {places} only: {why}.")


def grade_a1_schedule(schedule_for: Any) -> Verdict:
    """``schedule_for(history)`` must return, for W1's solo history of each case of
    :data:`A1_SCHEDULE_CASES` (the assignment's and hidden variants), a schedule that double-places there."""
    if isinstance(schedule_for, str):
        return Verdict(False, "schedule_for must be a function that reads W1's solo history and returns a schedule "
                              "string, not a string: one schedule fits one run only, and the grader calls your "
                              "function on other runs too.")
    if not callable(schedule_for):
        return Verdict(False, "schedule_for must be a function of W1's solo history (a History) returning a "
                              "schedule string such as 'v1:W1*3.S1'.")
    for name in A1_SCHEDULE_CASES:
        case = A1_CASES[name]
        where = "On the assignment's case" if name == "assignment" else f"On a hidden variant ({case.about})"
        try:
            schedule = _at(schedule_for, "schedule_for", (name,))
        except NotImplementedError:
            return Verdict(False, "schedule_for still has the stub ('# YOUR CODE HERE' / raise "
                                  "NotImplementedError()): write its body in the answer cell 'a1_schedule_answer'.")
        except Exception as e:  # noqa: BLE001 - the student's function may raise anything
            return Verdict(False, f"{where}, schedule_for raised {type(e).__name__}: {str(e)[:200]}. It must work "
                                  "on any solo history of this finish: look the steps up by what they are (the "
                                  "actor, the command, its keys), not by a position or a name you saw once.")
        if not isinstance(schedule, str):
            return Verdict(False, f"{where}, schedule_for returned a {type(schedule).__name__}; it must return a "
                                  "schedule string such as 'v1:W1*3.S1'.")
        v = _a1_replay_verdict(case, schedule)
        if not v.passed:
            if name == "assignment":
                return v
            return Verdict(False, f"Your schedule fits the assignment's case, but a hidden check gives "
                                  f"schedule_for another run. {where}, {v.feedback[0].lower()}{v.feedback[1:]} "
                                  "A schedule string copied from one run (or a step number written into the "
                                  "function) only fits that run: compute the step from the history you are given.")
    return Verdict(True, "On the assignment's case and on every hidden variant (another job id, extra round trips "
                         "before the finish, the failed branch), your schedule_for puts S1 inside the window and "
                         "the job lands in two places.")


def grade_a1_gap(GAP: Any) -> Verdict:  # noqa: N803
    """GAP names W1's two commands between which the sweep must run: (DEL, SREM)."""
    if not isinstance(GAP, (tuple, list)) or len(GAP) != 2 or not all(isinstance(x, str) for x in GAP):
        return Verdict(False, "GAP must be a pair of command names, e.g. ('GET', 'LPOS').")
    first, second = (x.strip().split()[0].upper() if x.strip() else "" for x in GAP)
    if (first, second) == ("DEL", "SREM"):
        return Verdict(True, "Right: the window opens when the finish deletes the lock (DEL 1:lock) while the "
                             "job is still marked and active, and closes when it removes the mark (SREM stalled).")
    problems = []
    if first != "DEL":
        problems.append(f"the window does not open after {first or 'an empty name'}: the sweep recovers a job "
                        "that is active, marked and *unlocked*, so look for the command after which W1's job has "
                        "no lock any more")
    if second != "SREM":
        if second == "LREM":
            problems.append("it closes earlier than LREM: the sweep stops treating the job as a recovery "
                            "candidate as soon as one of its three conditions is gone; which earlier command "
                            "removes one?")
        else:
            problems.append(f"it does not close at {second or 'an empty name'}: look for the first command after "
                            "the window opens that takes away one of the sweep's three conditions (active, "
                            "marked, unlocked)")
    text = "; ".join(problems)
    return Verdict(False, f"GAP is {tuple(GAP)!r}: {text}" + ("" if text.endswith("?") else "."))


@lru_cache(maxsize=16)
def _explore_counts(case: str, mode: str) -> tuple[int, int]:
    """(runs explored, the sum of ``runs_with`` over the anomaly kinds) of an exhaustive exploration of an
    a1 case: the grader's own reference, computed, never stored."""
    from emqlab.explore import explore

    rep = explore(A1_CASES[case].scenario(), mode, conn=_conn())
    return rep.explored, sum(rep.runs_with.values())


def grade_a1_atomic(ATOMIC_RUNS_WITH_ANOMALY: Any, runs_with_anomaly: Any) -> Verdict:  # noqa: N803
    """ATOMIC_RUNS_WITH_ANOMALY is the count of the assignment's atomic exploration; ``runs_with_anomaly``
    (scenario, mode) must count right at every probe of :data:`A1_COUNT_PROBES` (hidden variants, both
    modes), so a copied or guessed number fails."""
    explored, bad = _explore_counts("assignment", "atomic")
    if isinstance(ATOMIC_RUNS_WITH_ANOMALY, bool) or not isinstance(ATOMIC_RUNS_WITH_ANOMALY, int):
        return Verdict(False, "ATOMIC_RUNS_WITH_ANOMALY must be an integer (a number of runs).")
    if ATOMIC_RUNS_WITH_ANOMALY != bad:
        return Verdict(False, f"ATOMIC_RUNS_WITH_ANOMALY is {ATOMIC_RUNS_WITH_ANOMALY}, which is not the number of "
                              "runs with an anomaly in an exhaustive exploration of the atomic finish. Run "
                              "explore(sc, 'atomic', conn=connect()) and add up report.runs_with; think about "
                              "where the sweep can run relative to one EVALSHA.")
    bad_probe = _a1_count_variants(runs_with_anomaly)
    if bad_probe:
        return Verdict(False, bad_probe)
    return Verdict(True, f"Right: exhaustive exploration of the atomic finish runs {explored} interleavings and "
                         f"finds an anomaly in {bad}: the sweep runs before or after the one EVALSHA, never "
                         "inside it. And runs_with_anomaly counts right on the hidden variants, split and atomic.")


def _a1_count_variants(runs_with_anomaly: Any) -> str | None:
    """Feedback when ``runs_with_anomaly(scenario, mode)`` miscounts at a probe, else None."""
    if not callable(runs_with_anomaly):
        return "runs_with_anomaly must be a function of (scenario, mode) returning a number of runs."
    for name, mode in A1_COUNT_PROBES:
        case = A1_CASES[name]
        where = ("on the assignment's case" if name == "assignment" else f"on a hidden variant ({case.about})")
        try:
            got = _at(runs_with_anomaly, "runs_with_anomaly", (name, mode))
        except NotImplementedError:
            return ("runs_with_anomaly still has the stub: write its body in the answer cell "
                    "'a1_atomic_answer'.")
        except Exception as e:  # noqa: BLE001
            return f"runs_with_anomaly(scenario, {mode!r}) {where} raised {type(e).__name__}: {str(e)[:200]}."
        if isinstance(got, bool) or not isinstance(got, int):
            return f"runs_with_anomaly must return an integer (a number of runs), not a {type(got).__name__}."
        _, want = _explore_counts(name, mode)
        if got != want:
            return (f"Your count for the assignment's atomic finish is right, but runs_with_anomaly(scenario, "
                    f"{mode!r}) {where} is {_direction(got, want)} what exhaustive exploration of that scenario "
                    "finds. It must explore the scenario and mode it is given, every time it is called, and "
                    "count the runs that show an anomaly: a number copied from one run only fits that run.")
    return None


# -- assignment 2: repair a split finish -------------------------------------------------------------------

#: Commands a split finish may not send: each would make the finish (or part of it) atomic on the server.
FORBIDDEN = frozenset(b"EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO MULTI EXEC SCRIPT FUNCTION".split())

A2_KEYS_DOC = ("KEYS: 1 lock, 2 stalled, 3 active, 4 completed, 5 job hash; "
               "ARGV: 1 job id, 2 token, 3 timestamp (ms), 4 returnvalue (JSON)")


def _student_finish_factory(lua: str, violations: list[str]) -> Callable[..., Any]:
    """A worker that finishes the job it holds with the student's Lua, run split (one step per
    redis.call) through :func:`emqlab.actors.scripted_finish`. A command Redis refuses inside a script
    (EVAL, MULTI, SCRIPT, …: :data:`FORBIDDEN` among them) is refused by the Lua host with Redis's error,
    never sent, and noted in ``violations``."""
    from emqlab.engine.actors import scripted_finish

    def note(cmd: tuple[bytes, ...]) -> None:
        violations.append(cmd[0].decode("utf-8", "replace").upper())

    def worker(ctx: Any, spec: Any) -> Any:
        job = spec.holds
        token = ctx.new_token(spec.id)
        ctx.begin(spec.id, job, token)
        k = ctx.keys
        keys = [k.lock(job), k.stalled, k.active, k.completed, k.job(job)]
        args = [job, token, str(ctx.now()), json.dumps(spec.value, separators=(",", ":"))]
        yield from scripted_finish(ctx, spec.id, job, lua.encode(), keys, args, on_refused=note)

    return worker


def _lua_problem(lua: Any) -> str | None:
    if not isinstance(lua, str) or not lua.strip():
        return "FINISH_LUA must be the text of a Lua script (a string)."
    from emqlab.scripting.host import LuaHost

    try:
        LuaHost().compile(lua.encode())
    except Exception as e:  # noqa: BLE001
        return f"FINISH_LUA does not compile: {str(e).split(' script:')[0]}"
    return None


def _a2_runner(scenario: str, lua: str, violations: list[str]) -> Any:
    from emqlab.engine.scenario import load
    from emqlab.explore.checked import Runner

    sc = load(scenario)
    return Runner(sc, "split", _conn(), factories={"worker": _student_finish_factory(lua, violations)})


@dataclass(frozen=True)
class FinishExploration:
    """Every interleaving of a scenario with W1 finishing by the student's Lua, run split: the counts, the
    anomalies with their shortest witnesses, and each run's (schedule, placements of job 1, W1's return
    code)."""

    scenario: str
    explored: int
    anomalies: dict[str, int]
    witnesses: dict[str, Any]
    runs: tuple[tuple[str, tuple[str, ...], str], ...]
    violations: tuple[str, ...]

    @property
    def anomalous(self) -> bool:
        return any(self.anomalies.values())

    def codes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, _, code in self.runs:
            out[code] = out.get(code, 0) + 1
        return dict(sorted(out.items()))


@lru_cache(maxsize=32)
def explore_finish(lua: str, scenario: str = "stalled-finish") -> FinishExploration:
    """Explore every interleaving of ``scenario`` (``stalled-finish``: the sweep; ``lease-lapse``: a lapsing
    lease and the sweep) with W1 finishing job 1 by ``lua``, one step per ``redis.call``. Deterministic
    (fakeredis, virtual clock), so results are cached per (script, scenario)."""
    from emqlab.explore import Explorer

    violations: list[str] = []
    runs: list[tuple[str, tuple[str, ...], str]] = []
    with _a2_runner(scenario, lua, violations) as r:
        def each(_done: int, _total: int | None) -> None:
            runs.append((r.schedule, tuple(_placements(r)), _w1_code(r)))

        rep = Explorer(r, progress=each).exhaustive()
    return FinishExploration(scenario, rep.explored, {k: n for k, n in rep.runs_with.items() if n},
                             dict(rep.witnesses), tuple(runs), tuple(dict.fromkeys(violations)))


def try_finish(lua: str, scenario: str = "stalled-finish") -> str:
    """A readable summary of :func:`explore_finish`: how many interleavings, the anomalies (with the
    shortest witness), where job 1 ended and what the finish returned."""
    problem = _lua_problem(lua)
    if problem:
        return problem
    out = explore_finish(lua, scenario)
    ends: dict[str, int] = {}
    for _, places, _ in out.runs:
        key = " + ".join(places) or "no list"
        ends[key] = ends.get(key, 0) + 1
    lines = [f"{scenario}: {out.explored} interleavings of your split finish",
             "  job 1 ended in: " + ", ".join(f"{k} ({n})" for k, n in sorted(ends.items())),
             "  finish returned: " + ", ".join(f"{c} ({n})" for c, n in out.codes().items())]
    if out.violations:
        lines.append(f"  not allowed: {', '.join(out.violations)} (a split finish sends plain commands)")
    if out.anomalous:
        lines.append(_anomaly_feedback(out))
    else:
        lines.append("  no anomaly in any interleaving")
    return "\n".join(lines)


def _placements(r: Any) -> list[str]:
    return list(r.final_state()["placements"].get("1", []))


def _w1_code(r: Any) -> str:
    res = [x for x in r.results.get("W1", []) if x.kind == "finish"]
    return str(res[-1].outcome) if res else "none"


def _anomaly_feedback(out: FinishExploration) -> str:
    kind = sorted(out.anomalies)[0]
    h = out.witnesses[kind]
    because = next(a["because"] for a in h.anomalies if a["kind"] == kind)
    return (f"In {out.anomalies[kind]} of {out.explored} interleavings on {out.scenario} your finish leaves a "
            f"{kind}: {because}.\nShortest witness ({h.schedule}):\n{_short(h)}")


_ATOMIC_NOTE = ("Atomicity is the course's answer, but this exercise asks for a finish that is safe by the order of "
                "its commands alone, each sent on its own.")


def _violation(violations: Iterable[str]) -> Verdict | None:
    first = next(iter(violations), None)
    if first is None:
        return None
    return Verdict(False, f"Your finish sends {first}: that runs part of it atomically on the server. {_ATOMIC_NOTE}")


def grade_a2_sequential(FINISH_LUA: Any) -> Verdict:  # noqa: N803
    """With nothing running beside it, the finish must complete the job: 0, job 1 in completed only, lock and
    mark gone, returnvalue stored."""
    problem = _lua_problem(FINISH_LUA)
    if problem:
        return Verdict(False, problem)
    violations: list[str] = []
    with _a2_runner(A1_SCENARIO, FINISH_LUA, violations) as r:
        h = r.run()  # W1 to its end, then the sweep
        k = r.keys
        stalled = {m.decode() for m in r.conn.smembers(k.stalled)}
        returnvalue = r.conn.hget(k.job("1"), "returnvalue")
        lock = r.conn.get(k.lock("1"))
    bad = _violation(violations)
    if bad:
        return bad
    res = [x for x in h.results.get("W1", []) if x.kind == "finish"]
    code = str(res[-1].outcome) if res else "none"
    places = h.final["placements"].get("1", [])
    problems = []
    if code != "0":
        problems.append(f"it returned {code} instead of 0")
    if places != ["completed"]:
        problems.append(f"job 1 ended in {', '.join(places) or 'no list'} instead of completed only")
    if lock is not None:
        problems.append("job 1's lock is still there")
    if "1" in stalled:
        problems.append("job 1 is still marked in stalled")
    if returnvalue is None:
        problems.append("the job's returnvalue was not stored (HSET <job> returnvalue …)")
    if problems:
        return Verdict(False, "Run on its own (W1 to its end, then the sweep), your finish does not finish the job: "
                              + "; ".join(problems) + f". {A2_KEYS_DOC}.\n{_short(h)}")
    return Verdict(True, f"On its own your finish completes job 1 in {sum(1 for s in h.steps if s.actor == 'W1')} "
                         "commands: job 1 in completed, lock and mark gone, returnvalue stored.")


def grade_a2_sweep(FINISH_LUA: Any) -> Verdict:  # noqa: N803
    """Every interleaving with the sweep (stalled-finish): no anomaly, and the job always ends completed."""
    problem = _lua_problem(FINISH_LUA)
    if problem:
        return Verdict(False, problem)
    out = explore_finish(FINISH_LUA, "stalled-finish")
    bad = _violation(out.violations)
    if bad:
        return bad
    if out.anomalous:
        return Verdict(False, _anomaly_feedback(out))
    unfinished = [(s, p, c) for s, p, c in out.runs if p != ("completed",)]
    if unfinished:
        s, p, c = unfinished[0]
        return Verdict(False, f"No anomaly, but the job is not always finished: here no lease lapses, so the finish "
                              f"must always complete job 1. In {len(unfinished)} of {out.explored} interleavings it "
                              f"does not, e.g. {s}: job 1 ends in {' + '.join(p) or 'no list'} and the finish "
                              f"returned {c}.")
    return Verdict(True, f"All {out.explored} interleavings of your split finish with the sweep end with job 1 in "
                         "completed only, and no anomaly.")


def grade_a2_lease(FINISH_LUA: Any) -> Verdict:  # noqa: N803
    """Hidden: every interleaving with a lease lapse and the sweep (lease-lapse): no anomaly; the job ends in
    exactly one place, completed exactly when the finish returned 0."""
    problem = _lua_problem(FINISH_LUA)
    if problem:
        return Verdict(False, problem)
    out = explore_finish(FINISH_LUA, "lease-lapse")
    bad = _violation(out.violations)
    if bad:
        return bad
    if out.anomalous:
        return Verdict(False, "When W1's lease lapses during the finish (lease-lapse: the lock expires and the sweep "
                              "recovers the job), your finish is not safe. " + _anomaly_feedback(out)
                              + "\nHint: a write whose result you ignore (an LREM count) cannot tell you that the "
                                "job was taken away after your lock check.")
    for s, p, c in out.runs:
        if len(p) != 1 or (c == "0") != (p == ("completed",)):
            return Verdict(False, "When W1's lease lapses during the finish, the outcome is inconsistent: in "
                                  f"{s} the finish returned {c} and job 1 is in {' + '.join(p) or 'no list'}. A "
                                  "finish that returns 0 must have completed the job; one that refuses (a negative "
                                  "code) must leave it where the sweep put it.")
    refused = sum(n for c, n in out.codes().items() if c.startswith("-"))
    return Verdict(True, f"All {out.explored} interleavings with a lapsing lease are consistent: the job is completed "
                         f"when your finish returns 0, and left to the sweep when it refuses ({refused} run(s)).")


def grade_a2_two_workers(TWO_WORKERS_SPLIT_SAFE: Any) -> Verdict:  # noqa: N803
    if not isinstance(TWO_WORKERS_SPLIT_SAFE, bool):
        return Verdict(False, "TWO_WORKERS_SPLIT_SAFE must be True or False.")
    if TWO_WORKERS_SPLIT_SAFE is False:
        return Verdict(True, "Right: with a second worker the job can leave `active` and come back under W2's lock "
                             "between any two of W1's commands, so no order of separate commands can tell W1's "
                             "job from W2's (an ABA problem). The lock check and the writes must be one step.")
    return Verdict(False, "TWO_WORKERS_SPLIT_SAFE is True, but no order helps in two-workers: after W1 checks its "
                          "lock, the lease can lapse, the sweep requeue the job and W2 take it back into `active` "
                          "with its own lock, so W1's LREM succeeds on W2's job. Only one atomic step can check the "
                          "lock and write together.")


# -- assignment 3: predict the anomaly rate at a given RTT, then measure it ------------------------------------

A3_RTT_MS = 5.0
A3_INTERVAL_MS = 30.0
A3_JOBS = 200
A3_SEED = 0
#: the timed run of assignment 3, every parameter pinned (so a change of emqlab.timing's defaults does not
#: change the assignment): simulate(mode, **A3_RUN)
A3_RUN: dict[str, Any] = {"rtt_ms": A3_RTT_MS, "jobs": A3_JOBS, "seed": A3_SEED, "workers": 4,
                          "processing_ms": 5.0, "stalled_interval_ms": A3_INTERVAL_MS}
_A3_CALL = "simulate('{mode}', rtt_ms=5, seed=0, **RUN)"


@lru_cache(maxsize=8)
def _timed(mode: str, rtt_ms: float = A3_RTT_MS, seed: int = A3_SEED) -> tuple[float, int, int]:
    from emqlab.timing.model import simulate

    r = simulate(mode, keep_history=False, **{**A3_RUN, "rtt_ms": rtt_ms, "seed": seed})
    return float(r.anomalies_per_1000), int(r.marked_finishes), int(r.finishes)


#: measure(rtt_ms, seed) is also checked here, where no number from the notebook's own run can help.
A3_VARIANTS: tuple[tuple[float, int], ...] = ((3.0, 1),)


def _a3_measure_variants(measure: Any) -> str | None:
    """Feedback when ``measure(rtt_ms, seed)`` is wrong at a hidden variant, else None."""
    if not callable(measure):
        return "measure must be a function of (rtt_ms, seed) returning (p_marked, predicted, measured)."
    for rtt, seed in A3_VARIANTS:
        try:
            got = measure(rtt, seed)
        except NotImplementedError:
            return "measure still has the stub: write its body in the answer cell 'a3_measure_answer'."
        except Exception as e:  # noqa: BLE001
            return f"measure at another RTT and seed raised {type(e).__name__}: {str(e)[:200]}."
        if (not isinstance(got, (tuple, list)) or len(got) != 3
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in got)):
            return "measure must return three numbers: (p_marked, predicted, measured)."
        measured, marked, finishes = _timed("split", rtt, seed)
        p = marked / finishes if finishes else 0.0
        for what, x, want in (("p_marked", got[0], p), ("predicted", got[1], _model(rtt, A3_INTERVAL_MS, p)),
                              ("measured", got[2], measured)):
            if not math.isclose(float(x), want, rel_tol=1e-6, abs_tol=0.02 if what == "p_marked" else 1e-6):
                return (f"Your numbers at RTT 5 ms and seed 0 are right, but at another RTT and seed (a hidden "
                        f"check) measure's {what} is {_direction(float(x), want)} what that run gives: measure must "
                        "run its own simulation with the rtt_ms and seed it is given (a hard-coded or copied number "
                        "only fits one run).")
    return None


def _model(rtt_ms: float, interval_ms: float, p_marked: float) -> float:
    return 1000.0 * p_marked * rtt_ms / (interval_ms + rtt_ms) if interval_ms + rtt_ms > 0 else 0.0


_A3_POINTS = [(1.0, 30.0, 1.0), (75.0, 30.0, 1.0), (5.0, 30.0, 0.5), (0.0, 30.0, 1.0), (20.0, 10.0, 0.25),
              (0.2, 30000.0, 0.2), (7.5, 45.0, 0.8)]

#: Answers that are functions, and the points at which an isolated run evaluates them for the grader
#: (:mod:`emqlab.teaching.sandbox`): only their values there cross back.
#: Assignment 1's functions are probed at the names of cases (and modes): :func:`probe_arguments` turns
#: those into the typed objects the functions are called with.
PROBES: dict[str, list[tuple[Any, ...]]] = {"predicted_per_1000": list(_A3_POINTS), "measure": list(A3_VARIANTS),
                                            "schedule_for": [(n,) for n in A1_SCHEDULE_CASES],
                                            "runs_with_anomaly": list(A1_COUNT_PROBES)}


def grade_a3_model(predicted_per_1000: Any) -> Verdict:
    if not callable(predicted_per_1000):
        return Verdict(False, "predicted_per_1000 must be a function of (rtt_ms, interval_ms, p_marked).")
    for rtt, interval, p in _A3_POINTS:
        want = _model(rtt, interval, p)
        try:
            got = float(predicted_per_1000(rtt, interval, p))
        except NotImplementedError:
            return Verdict(False, "predicted_per_1000 still has the stub ('# YOUR CODE HERE' / raise "
                                  "NotImplementedError()): write its body in the answer cell 'a3_model_answer'.")
        except Exception as e:  # noqa: BLE001
            return Verdict(False, f"predicted_per_1000({rtt:g}, {interval:g}, {p:g}) raised {type(e).__name__}: {e}.")
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            return Verdict(False, f"predicted_per_1000({rtt:g}, {interval:g}, {p:g}) is {got:.4g}, which is "
                                  f"{_direction(got, want)} the window model. Re-read Question 1: a marked finish "
                                  "is hit with probability RTT / (interval + RTT), only a share p_marked of the "
                                  "finishes are marked, and the answer is per 1,000 jobs. Check each factor, and "
                                  "the edge cases (RTT 0, a very long interval).")
    return Verdict(True, "Your model matches 1000 × p_marked × RTT / (interval + RTT) at every point checked.")


def _direction(got: float, want: float) -> str:
    return "above" if got > want else "below"


def grade_a3_p_marked(P_MARKED: Any) -> Verdict:  # noqa: N803
    _, marked, finishes = _timed("split")
    want = marked / finishes if finishes else 0.0
    if not isinstance(P_MARKED, (int, float)) or isinstance(P_MARKED, bool):
        return Verdict(False, "P_MARKED must be a number between 0 and 1.")
    if abs(float(P_MARKED) - want) <= 0.02:
        return Verdict(True, "Right: that is the share of the split finishes that found their job marked.")
    return Verdict(False, f"P_MARKED is {float(P_MARKED):.3f}, {_direction(float(P_MARKED), want)} the share of "
                          f"marked finishes in {_A3_CALL.format(mode='split')}. It is that run's "
                          "result.marked_finishes divided by its result.finishes: did you run it with every "
                          "parameter of RUN, RTT 5 ms and seed 0?")


def grade_a3_measured(MEASURED: Any, PREDICTED: Any, P_MARKED: Any,  # noqa: N803
                      measure: Any = None) -> Verdict:
    measured, _, _ = _timed("split")
    for name, v in (("MEASURED", MEASURED), ("PREDICTED", PREDICTED), ("P_MARKED", P_MARKED)):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return Verdict(False, f"{name} must be a number.")
    want_pred = _model(A3_RTT_MS, A3_INTERVAL_MS, float(P_MARKED))
    if not math.isclose(float(PREDICTED), want_pred, rel_tol=1e-6, abs_tol=1e-6):
        return Verdict(False, f"PREDICTED is {float(PREDICTED):.2f}, {_direction(float(PREDICTED), want_pred)} the "
                              f"window model at RTT {A3_RTT_MS:g} ms and a {A3_INTERVAL_MS:g} ms stalled interval with "
                              "your own P_MARKED: compute it with your predicted_per_1000.")
    if not math.isclose(float(MEASURED), measured, rel_tol=1e-9, abs_tol=1e-9):
        return Verdict(False, f"MEASURED is {float(MEASURED):.2f}, {_direction(float(MEASURED), measured)} the "
                              f"anomalies_per_1000 of {_A3_CALL.format(mode='split')}. A timed run is deterministic "
                              "for its seed and parameters: did you change one of them, or copy a number?")
    if measure is not None:
        bad = _a3_measure_variants(measure)
        if bad:
            return Verdict(False, bad)
    return Verdict(True, "Both numbers are right, and measure() gives the right numbers at another RTT and seed "
                         "too. The grade is for computing each correctly; where prediction and measurement "
                         "differ, the written answer should say which effect the model leaves out.")


def grade_a3_atomic(ATOMIC_MEASURED: Any) -> Verdict:  # noqa: N803
    measured, _, _ = _timed("atomic")
    if not isinstance(ATOMIC_MEASURED, (int, float)) or isinstance(ATOMIC_MEASURED, bool):
        return Verdict(False, "ATOMIC_MEASURED must be a number.")
    if math.isclose(float(ATOMIC_MEASURED), measured, abs_tol=1e-9):
        return Verdict(True, "Right: the atomic finish has no window for the sweep to run in.")
    return Verdict(False, f"ATOMIC_MEASURED is {float(ATOMIC_MEASURED):g}, which is not the anomalies_per_1000 of "
                          f"{_A3_CALL.format(mode='atomic')}: run that call as written (mode 'atomic', every "
                          "parameter of RUN, seed 0) and take its result.anomalies_per_1000.")


# -- the assignments -------------------------------------------------------------------------------------------

ASSIGNMENTS: dict[str, Assignment] = {a.id: a for a in [
    Assignment("a1-double-placement", "Find a schedule that double-places a job", "a1-double-placement.ipynb", [
        GradedCell("a1_schedule", 3, "a1_schedule_answer", ("schedule_for",), grade_a1_schedule,
                   "a schedule that double-places the job, from W1's history"),
        GradedCell("a1_gap", 1, "a1_gap_answer", ("GAP",), grade_a1_gap,
                   "the two commands that bound the window"),
        GradedCell("a1_atomic", 1, "a1_atomic_answer", ("ATOMIC_RUNS_WITH_ANOMALY", "runs_with_anomaly"),
                   grade_a1_atomic, "anomalous runs with an atomic finish"),
    ]),
    Assignment("a2-repair-finish", "Repair a split finish", "a2-repair-finish.ipynb", [
        GradedCell("a2_sequential", 1, "a2_finish_answer", ("FINISH_LUA",), grade_a2_sequential,
                   "the finish still finishes the job"),
        GradedCell("a2_sweep", 3, "a2_finish_answer", ("FINISH_LUA",), grade_a2_sweep,
                   "no anomaly in any interleaving with the sweep"),
        GradedCell("a2_lease", 2, "a2_finish_answer", ("FINISH_LUA",), grade_a2_lease,
                   "consistent when the lease lapses too"),
        GradedCell("a2_two_workers", 1, "a2_two_workers_answer", ("TWO_WORKERS_SPLIT_SAFE",), grade_a2_two_workers,
                   "can any order save two-workers?"),
    ]),
    Assignment("a3-rate-vs-rtt", "Predict the anomaly rate at a given RTT, then measure it", "a3-rate-vs-rtt.ipynb", [
        GradedCell("a3_model", 2, "a3_model_answer", ("predicted_per_1000",), grade_a3_model,
                   "the model: anomalies per 1,000 jobs"),
        GradedCell("a3_p_marked", 1, "a3_measure_answer", ("P_MARKED",), grade_a3_p_marked,
                   "the share of finishes whose job is marked"),
        GradedCell("a3_measured", 2, "a3_measure_answer", ("MEASURED", "PREDICTED", "P_MARKED", "measure"),
                   grade_a3_measured, "prediction and measurement at 5 ms", depends=("a3_model", "a3_p_marked")),
        GradedCell("a3_atomic", 1, "a3_atomic_answer", ("ATOMIC_MEASURED",), grade_a3_atomic,
                   "the atomic finish at the same RTT"),
    ]),
]}


def _find_assignment(nb: Mapping[str, Any], path: str) -> Assignment:
    aid = assignment_of(nb)
    if aid is None:
        ids = {grade_id(c) for c in nb.get("cells", [])}
        aid = next((a.id for a in ASSIGNMENTS.values() if any(c.grade_id in ids for c in a.cells)), None)
    if aid is None or aid not in ASSIGNMENTS:
        raise GradingError(f"{path}: not an emqlab assignment (metadata.emqlab.assignment is "
                           f"{aid!r}; known: {', '.join(ASSIGNMENTS)})")
    return ASSIGNMENTS[aid]


def _grade_cell(cell: GradedCell, run: NotebookRun) -> Verdict:
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
        return cell.grader(**{n: run.namespace[n] for n in cell.names})
    except Exception as e:  # noqa: BLE001 - a grader must never crash the grade of the other cells
        return Verdict(False, f"Grading {cell.grade_id} failed: {type(e).__name__}: {e}")


def grade_cells(assignment: Assignment, run: NotebookRun) -> list[CellGrade]:
    """Grade every test cell of ``assignment`` on the answers in ``run``. A failed cell whose answers build on
    another failed cell (:attr:`GradedCell.depends`) says so first: the cause is there."""
    grades: list[CellGrade] = []
    failed: dict[str, GradedCell] = {}
    for cell in assignment.cells:
        v = _grade_cell(cell, run)
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
                   limits: Any = None) -> GradeReport:
    """Grade a notebook (a path or a loaded notebook dict). Deterministic; raises :class:`GradingError` when
    the notebook is not an emqlab assignment.

    ``isolated`` (the default) runs the notebook's code in a separate, limited process
    (:func:`emqlab.teaching.sandbox.grade_isolated`, ``limits`` a :class:`~emqlab.teaching.sandbox.Limits`)
    and grades the answers that come back; ``isolated=False`` runs it in this process."""
    started = time.perf_counter()
    file: str | None = None
    if isinstance(source, Mapping):
        nb, path = source, name or "<notebook>"
        validate_notebook(dict(nb), path)
    else:
        nb, path, file = read_notebook(source), name or str(source), str(source)
    assignment = _find_assignment(nb, path)
    if isolated:
        from emqlab.teaching.sandbox import DEFAULT_LIMITS, grade_isolated

        return grade_isolated(nb, path, assignment, limits or DEFAULT_LIMITS, file=file)
    run = run_notebook(nb)
    grades = grade_cells(assignment, run)
    return GradeReport(path, assignment.id, assignment.title, grades, run.errors, time.perf_counter() - started)


def check(gid: str, namespace: Mapping[str, Any]) -> str:
    """Grade one test cell inside a notebook (its hidden tests call this with ``globals()``): return the
    feedback when the answer is right; raise ``AssertionError`` with the feedback when it is not."""
    cell = next((c for a in ASSIGNMENTS.values() for c in a.cells if c.grade_id == gid), None)
    if cell is None:
        raise KeyError(f"no graded cell {gid!r}")
    missing = [n for n in cell.names if n not in namespace]
    if missing:
        raise AssertionError(f"{', '.join(missing)} is not defined: run the answer cell '{cell.answer_cell}' first.")
    v = cell.grader(**{n: namespace[n] for n in cell.names})
    if not v.passed:
        raise AssertionError(v.feedback)
    return v.feedback


def graded_cells(nb: Mapping[str, Any]) -> Iterable[tuple[str, float]]:
    """(grade_id, points) of the notebook's graded cells, as nbgrader would read them."""
    for cell in nb.get("cells", []):
        if is_grade(cell):
            yield str(grade_id(cell)), float(_meta(cell).get("points", 0))
