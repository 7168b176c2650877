"""The one home of running a notebook's code in this process, as a kernel would: :func:`run_notebook`, the
per-cell time limit (:func:`time_limit`, :data:`CELL_TIMEOUT_S`), and what a run leaves (:class:`NotebookRun`,
:class:`CellError`).

A graded submission does not run here by default: :mod:`emqlab.teaching.sandbox` runs it in a separate,
limited interpreter (which uses :func:`time_limit` for each cell) and brings back a :class:`NotebookRun` of
plain answers. ``grade_notebook(..., isolated=False)`` and the notebooks' own hidden tests run it here.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from emqlab.teaching.notebooks import cell_source, grade_id, is_grade, is_solution, python_of


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
    """A run's namespace (name -> value: the answers), the cells that raised, and what the cells printed."""

    namespace: dict[str, Any]
    errors: list[CellError] = field(default_factory=list)
    stdout: str = ""

    def error_in(self, gid: str) -> CellError | None:
        return next((e for e in self.errors if e.grade_id == gid), None)


#: Seconds of CPU time one cell may use before it is stopped (nbgrader's default cell timeout is 30 s, of wall
#: time: counting CPU time, a correct answer is not stopped because the machine grading it is busy).
CELL_TIMEOUT_S = 30
#: A cell is also stopped after this many times :data:`CELL_TIMEOUT_S` of wall time: one that waits (a sleep, a
#: read that never returns) uses no CPU time.
CELL_WALL_FACTOR = 4


class CellTimeout(Exception):
    """A cell used more than :data:`CELL_TIMEOUT_S` of CPU time, or ran :data:`CELL_WALL_FACTOR` times longer."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Stop the block by raising :class:`CellTimeout` in it once it has used ``seconds`` of the process's CPU
    time (SIGPROF) or run ``CELL_WALL_FACTOR × seconds`` of wall time (SIGALRM); only in the main thread of a
    POSIX process, else no limit."""
    import signal
    import threading

    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return
    wall = seconds * CELL_WALL_FACTOR

    def used_cpu(_signum: int, _frame: Any) -> None:
        raise CellTimeout(f"the cell used more than {seconds} s of CPU time and was stopped")

    def ran_long(_signum: int, _frame: Any) -> None:
        raise CellTimeout(f"the cell ran longer than {wall} s and was stopped")

    previous = signal.signal(signal.SIGPROF, used_cpu), signal.signal(signal.SIGALRM, ran_long)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.alarm(wall)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous[0])
        signal.signal(signal.SIGALRM, previous[1])


def run_notebook(nb: Mapping[str, Any], *, tests: bool = False) -> NotebookRun:
    """Run the notebook's code cells in order in one fresh namespace, as a kernel would, capturing their
    output. Test cells (graded, not solutions) run only with ``tests=True``. A cell that raises is recorded
    and the run goes on (nbgrader autograde does the same); a cell over its time (:func:`time_limit`,
    :data:`CELL_TIMEOUT_S` seconds of CPU time) is stopped and recorded as ``CellTimeout``."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    run = NotebookRun(ns)
    buf = io.StringIO()
    code_cells = (c for c in nb.get("cells", []) if c.get("cell_type") == "code")
    for i, cell in enumerate(code_cells, start=1):  # numbered as code cells: Markdown cells do not count
        if is_grade(cell) and not is_solution(cell) and not tests:
            continue
        code = python_of(cell_source(cell))
        try:
            with contextlib.redirect_stdout(buf), time_limit(CELL_TIMEOUT_S):
                exec(compile(code, f"<code cell {i}>", "exec"), ns)  # noqa: S102 - running the notebook is the point
        except BaseException as e:  # noqa: BLE001 - a student's cell may raise anything, even SystemExit
            if isinstance(e, KeyboardInterrupt):
                raise
            first = str(e).strip().split("\n")[0]
            text = f"{type(e).__name__}: {first}" if first else type(e).__name__
            run.errors.append(CellError(i, grade_id(cell), text))
    run.stdout = buf.getvalue()
    return run

