"""The instructor's answer key: the answers no engine run can compute (a yes/no question, the model a
student is asked to write), held in the instructor's folder, never in the installed package.

The key is a folder holding the assignments' **source notebooks** (with their solutions): the
``instructor/`` folder ``emqlab workshop DIR`` writes, or a checkout's ``notebooks/assignments``. The
grader runs only an assignment's key cells (:attr:`~emqlab.teaching.assignments.base.Assignment.key_cells`,
answer cells of the source notebook) in a fresh namespace of its own process, and a graded cell that names
key answers (:attr:`~emqlab.teaching.assignments.base.GradedCell.key`) is graded against those values.
Every other expected value is computed at grade time by the engine (replays, explorations, seeded timed
runs on hidden variants).

Where the key comes from, first match: the folder given (``emqlab grade --key DIR``), the ``EMQLAB_KEY``
environment variable (for :func:`emqlab.teaching.grade.check` in nbgrader's hidden tests and for otter's),
the checkout emqlab runs from. A graded notebook never reads it: the isolated run refuses to open any
file under the key's folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from emqlab.teaching.notebooks import GradingError, cell_source, grade_id, python_of, read_notebook

#: the environment variable naming the key's folder
KEY_ENV = "EMQLAB_KEY"

#: the feedback of a cell graded against a key that is not there
NO_KEY = ("This answer is graded against the instructor's answer key, which is not available here: the "
          "instructor grades it (emqlab grade --key DIR).")


@dataclass(frozen=True)
class Key:
    """An answer key: ``folder`` holds the assignments' source notebooks (``<assignment.notebook>``)."""

    folder: Path

    def notebook(self, name: str) -> Path | None:
        """The source notebook ``name`` in the key's folder, if it is there."""
        p = self.folder / name
        return p if p.is_file() else None

    def answers(self, assignment: Any) -> dict[str, Any] | None:
        """The values the key cells of ``assignment`` (an :class:`~emqlab.teaching.assignments.base.Assignment`)
        define, run in a fresh namespace; None when the folder lacks its notebook. Raises
        :class:`~emqlab.teaching.notebooks.GradingError` when a key cell is missing or raises."""
        p = self.notebook(assignment.notebook)
        if p is None:
            return None
        return dict(_run_key_cells(str(p.resolve()), p.stat().st_mtime_ns, tuple(assignment.key_cells)))


@lru_cache(maxsize=16)
def _run_key_cells(path: str, _mtime: int, cells: tuple[str, ...]) -> dict[str, Any]:
    nb = read_notebook(path)
    by_id = {grade_id(c): c for c in nb.get("cells", []) if c.get("cell_type") == "code"}
    ns: dict[str, Any] = {"__name__": "emqlab_key"}
    for gid in cells:
        if gid not in by_id:
            raise GradingError(f"{path}: the answer key has no cell {gid!r}")
        try:
            exec(compile(python_of(cell_source(by_id[gid])), f"<key {gid}>", "exec"), ns)  # noqa: S102 - the instructor's own notebook
        except Exception as e:  # noqa: BLE001 - a broken key is the instructor's to fix: say where
            raise GradingError(f"{path}: the answer key's cell {gid!r} raised {type(e).__name__}: {e}") from e
    return {k: v for k, v in ns.items() if not k.startswith("__")}


def checkout_key() -> Path | None:
    """The ``notebooks/assignments`` folder of the checkout this package runs from, if there is one."""
    here = Path(__file__).resolve().parents[2] / "notebooks" / "assignments"
    return here if here.is_dir() else None


def find_key(folder: str | Path | None = None) -> Key | None:
    """The answer key: ``folder``, else ``$EMQLAB_KEY``, else :func:`checkout_key`; None when there is none.
    Raises :class:`~emqlab.teaching.notebooks.GradingError` when a folder named is not one."""
    named = folder if folder is not None else os.environ.get(KEY_ENV) or None
    if named is not None:
        p = Path(named)
        if not p.is_dir():
            raise GradingError(f"the answer key {p} is not a folder (the instructor/ folder of emqlab workshop, "
                               "holding the assignments' source notebooks)")
        return Key(p)
    here = checkout_key()
    return Key(here) if here is not None else None


__all__ = ["KEY_ENV", "NO_KEY", "Key", "checkout_key", "find_key"]
