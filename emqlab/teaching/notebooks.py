"""The one home of the course's notebooks as files: reading and checking an ``.ipynb`` (with guards against
hostile submissions), writing one, nbgrader's markers, the cell helpers, and the student version.

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

A notebook is read as plain JSON and written as Jupyter writes it, byte for byte as the file was: nbformat's
own reader and writer would rejoin (or split) cell sources, drop transient metadata and log, rather than
refuse, an invalid notebook. nbformat's schema check runs in :func:`validate_notebook`, after the size and
depth guards and the grader's own checks, whose one-line messages name the field.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"
#: nbgrader's ClearSolutions stubs
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"


class GradingError(ValueError):
    """A notebook cannot be graded or converted (not a notebook, unknown assignment, a malformed solution or
    hidden-test region); the message is one line."""


# -- notebooks as JSON -----------------------------------------------------------------------------------------


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
    """Check that ``nb`` is an nbformat 4 notebook the grader can read, before any cell is touched: its
    nesting depth, the parts the grader reads (cell sources, nbgrader metadata, the assignment id), then the
    nbformat schema. Raises :class:`GradingError` with one line naming the field:
    ``a1.ipynb: cells[3].source: expected text or a list of text, got int``."""

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
    # then nbformat's schema (a runtime dependency; imported here, as only validation needs it), on a notebook
    # whose shape the checks above vouch for
    import warnings

    import nbformat

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


def cell_source(cell: Mapping[str, Any]) -> str:
    """A cell's source as one text (nbformat stores it as text or as a list of lines)."""
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


def graded_cells(nb: Mapping[str, Any]) -> Iterable[tuple[str, float]]:
    """(grade_id, points) of the notebook's graded cells, as nbgrader would read them."""
    for cell in nb.get("cells", []):
        if is_grade(cell):
            yield str(grade_id(cell)), float(_meta(cell).get("points", 0))


_MAGIC = re.compile(r"^\s*[%!]")


def python_of(text: str) -> str:
    """A cell's Python with IPython magics and shell escapes commented out (``%matplotlib``, ``!pip``)."""
    return "\n".join(f"# {line}" if _MAGIC.match(line) else line for line in text.split("\n"))


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
        text = cell_source(cell)
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
