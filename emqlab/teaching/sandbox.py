"""Grading a student's notebook so that the grade cannot be forged.

The student's code never runs in the grader's process. :func:`run_isolated` starts a fresh interpreter
(:mod:`emqlab.teaching._child`) that

* runs as ``nobody`` when the grader runs as root (so per-user limits apply), in its own session and its
  own temporary folder (its working directory, ``HOME`` and ``TMPDIR``);
* limits itself before the first student cell: address space (``RLIMIT_AS``), CPU time, file size, no
  core files, and the number of processes of its user (``RLIMIT_NPROC``: a few more than it has);
* installs an audit hook (:func:`sys.addaudithook`, which cannot be removed) that refuses creating
  processes (``os.fork``, ``subprocess``, ``os.system``, ``exec``), sockets (no network), signals to other
  processes, ``ctypes``, writing outside its folder, and reading notebooks outside it (the hidden tests);
* runs the code cells with a per-cell time limit, then sends back **only the answer values**, as data of
  declared types (strings, numbers, booleans, lists, tuples; a function as its values at points the grader
  chose), over a pipe the grader opened for it. The student's output goes to a file the grader ignores.

The grader, in its own process, validates that message strictly (one message, known names, plain data),
and every score is computed there (:func:`emqlab.teaching.grade.grade_isolated`) by the graders of
:mod:`emqlab.teaching.assignments`, which replay and explore the answers themselves. Whatever the student's
code writes to the pipe can only ever be *answers* — which it could have written in its answer cells — never
a score. A notebook that is killed (time, memory), exits
early (``os._exit``) or garbles the pipe gets no answers: a low grade with the reason, never a crash.

Locked and test cells are never taken from the submission when the source notebook is available: the
grader runs the release version's locked cells (and notes any edit), never runs test cells at all, and
takes only the answer cells (and the student's own extra cells) from the submission.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from emqlab.teaching.notebooks import (
    cell_source,
    grade_id,
    is_grade,
    is_solution,
    python_of,
    read_notebook,
    student_version,
)
from emqlab.teaching.run import CellError

#: Protocol version of the child → grader message.
WIRE_VERSION = 1
#: At most this many bytes cross back from the child (answers and progress); more is tampering.
MAX_CHANNEL_BYTES = 4 * 1024 * 1024
MAX_STR = 200_000
MAX_ITEMS = 1_000
MAX_DEPTH = 6


@dataclass(frozen=True)
class Limits:
    """What a graded notebook may use. ``timeout_s`` bounds the whole notebook (wall clock, enforced by the
    grader, which kills the child's session); ``cell_timeout_s`` each cell (inside the child);
    ``memory_mb`` the child's address space; ``extra_processes`` how many processes beyond its own the
    child's user may start (the audit hook refuses every way Python offers to; this is the backstop)."""

    timeout_s: float = 120.0
    cell_timeout_s: int = 30
    memory_mb: int = 1536
    extra_processes: int = 4
    output_mb: int = 16


DEFAULT_LIMITS = Limits()


# -- answers as data -----------------------------------------------------------------------------------------


class TamperedError(ValueError):
    """The message from the child is not one the runner writes."""


def encode(value: Any, probes: Sequence[Sequence[Any]] | None = None, depth: int = 0,
           call: Callable[[Callable[..., Any], Sequence[Any]], Any] | None = None) -> Any:
    """A value as tagged JSON data (child side). Callables with ``probes`` become their values at those
    points (each call through ``call``, which can add a time limit); anything else unsupported is named by
    its type only."""
    if depth > MAX_DEPTH:
        return {"opaque": "nested too deep"}
    if value is None:
        return {"none": True}
    if isinstance(value, bool):
        return {"bool": bool(value)}
    if isinstance(value, int):
        text = int.__repr__(value)
        return {"int": text} if len(text) <= 100 else {"opaque": "int (too large)"}
    if isinstance(value, float):
        return {"float": float.__repr__(value)}
    if isinstance(value, str):
        text = str.__str__(value)
        return {"str": text} if len(text) <= MAX_STR else {"opaque": "str (too long)"}
    if isinstance(value, (list, tuple)):
        tag = "tuple" if isinstance(value, tuple) else "list"
        items = list(value)[: MAX_ITEMS + 1]
        if len(items) > MAX_ITEMS:
            return {"opaque": f"{tag} (too long)"}
        return {tag: [encode(x, None, depth + 1) for x in items]}
    if isinstance(value, dict):
        pairs = list(value.items())[: MAX_ITEMS + 1]
        if len(pairs) > MAX_ITEMS or not all(isinstance(k, str) for k, _ in pairs):
            return {"opaque": "dict"}
        return {"dict": [[str.__str__(k), encode(v, None, depth + 1)] for k, v in pairs]}
    if callable(value) and probes is not None:
        table = []
        for args in probes:
            try:
                got = call(value, args) if call is not None else value(*args)
                table.append([list(args), {"value": encode(got, None, depth + 1)}])
            except BaseException as e:  # noqa: BLE001 - the student's function may raise anything
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                table.append([list(args), {"raise": [type(e).__name__, _one_line(e)]}])
        return {"function": table}
    return {"opaque": type(value).__name__}


def _one_line(e: BaseException) -> str:
    first = str(e).strip().split("\n")[0][:300]
    return first


class Opaque:
    """An answer whose value did not cross (not plain data); its class is named after the student's type,
    so graders' ``isinstance`` checks fail and their messages name that type."""


@lru_cache(maxsize=64)
def _opaque_type(name: str) -> type:
    safe = "".join(ch for ch in name if ch.isalnum() or ch in "_ ()") or "object"
    return type(safe, (Opaque,), {"__repr__": lambda self: f"<{safe}>"})


class StudentError(Exception):
    """An exception the student's function raised in the child, replayed by name in the grader."""


def _exception(kind: str, message: str) -> BaseException:
    builtin = __builtins__.get(kind) if isinstance(__builtins__, dict) else getattr(__builtins__, kind, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin.__module__ == "builtins":
        try:
            return builtin(message)
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs more arguments
            pass
    return type(kind if kind.isidentifier() else "StudentError", (StudentError,), {})(message)


class ProbedFunction:
    """A student's function as the grader sees it: its values (or exceptions) at the probed points."""

    def __init__(self, name: str, table: dict[tuple[Any, ...], tuple[str, Any]]) -> None:
        self.__name__ = name
        self._table = table

    def __call__(self, *args: Any) -> Any:
        key = tuple(args)
        if key not in self._table:
            raise LookupError(f"{self.__name__}{key} was not evaluated by the grader")
        kind, value = self._table[key]
        if kind == "raise":
            raise _exception(*value)
        return value

    def __repr__(self) -> str:
        return f"<function {self.__name__} (probed at {len(self._table)} points)>"


def decode(data: Any, name: str = "answer", depth: int = 0) -> Any:
    """Tagged JSON data → a plain value (grader side). Strict: any other shape raises :class:`TamperedError`."""
    if depth > MAX_DEPTH + 2 or not isinstance(data, dict) or len(data) != 1:
        raise TamperedError(f"{name}: not an encoded value")
    (tag, v), = data.items()
    if tag == "none" and v is True:
        return None
    if tag == "bool" and isinstance(v, bool):
        return v
    if tag == "int" and isinstance(v, str) and len(v) <= 101:
        try:
            return int(v)
        except ValueError:
            raise TamperedError(f"{name}: bad int") from None
    if tag == "float" and isinstance(v, str) and len(v) <= 40:
        try:
            return float(v)
        except ValueError:
            raise TamperedError(f"{name}: bad float") from None
    if tag == "str" and isinstance(v, str) and len(v) <= MAX_STR:
        return v
    if tag in ("list", "tuple") and isinstance(v, list) and len(v) <= MAX_ITEMS:
        items = [decode(x, name, depth + 1) for x in v]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and isinstance(v, list) and len(v) <= MAX_ITEMS:
        out = {}
        for pair in v:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise TamperedError(f"{name}: bad dict")
            out[pair[0]] = decode(pair[1], name, depth + 1)
        return out
    if tag == "opaque" and isinstance(v, str):
        return _opaque_type(v[:60])()
    if tag == "function" and isinstance(v, list) and len(v) <= MAX_ITEMS:
        table: dict[tuple[Any, ...], tuple[str, Any]] = {}
        for row in v:
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], list)
                    and isinstance(row[1], dict) and len(row[1]) == 1):
                raise TamperedError(f"{name}: bad probe")
            args = tuple(_plain(a, name) for a in row[0])
            (kind, res), = row[1].items()
            if kind == "value":
                table[args] = ("value", decode(res, name, depth + 1))
            elif kind == "raise" and isinstance(res, list) and len(res) == 2 and all(isinstance(x, str) for x in res):
                table[args] = ("raise", (res[0][:80], res[1][:300]))
            else:
                raise TamperedError(f"{name}: bad probe result")
        return ProbedFunction(name, table)
    raise TamperedError(f"{name}: unknown value tag {tag!r}")


def _plain(a: Any, name: str) -> Any:
    if isinstance(a, (bool, int, float, str)) or a is None:
        return a
    raise TamperedError(f"{name}: bad probe argument")


# -- which cells the child runs --------------------------------------------------------------------------------


@dataclass
class CellToRun:
    """A code cell for the child: its number among the submission's code cells (0 for a cell the grader
    put back), its grade_id, and its source."""

    number: int
    grade_id: str | None
    source: str
    answer: bool = False

    def label(self) -> str:
        where = f"code cell {self.number}" if self.number else "a locked cell the grader restored"
        return f"{where} ('{self.grade_id}')" if self.grade_id else where


def source_notebook(notebook_name: str) -> Path | None:
    """The source notebook of an assignment in a checkout (``notebooks/assignments/``), if there is one."""
    p = Path(__file__).resolve().parents[2] / "notebooks" / "assignments" / notebook_name
    return p if p.is_file() else None


@lru_cache(maxsize=8)
def _release(path: str, mtime: float) -> dict[str, Any]:
    return student_version(read_notebook(path))


def release_version(notebook_name: str, path: Path | None = None) -> dict[str, Any] | None:
    """The student version of an assignment's source notebook (``path``, else :func:`source_notebook`)."""
    p = path or source_notebook(notebook_name)
    return _release(str(p), p.stat().st_mtime) if p is not None else None


def source_version(notebook_name: str, path: Path | None = None) -> dict[str, Any] | None:
    """The source notebook of an assignment (``path``, else :func:`source_notebook`), read, if there is one."""
    p = path or source_notebook(notebook_name)
    return read_notebook(p) if p is not None else None


def cells_to_run(nb: Mapping[str, Any], release: Mapping[str, Any] | None,
                 source: Mapping[str, Any] | None = None) -> tuple[list[CellToRun], list[str]]:
    """The code cells the child runs, and notes for the report. Test cells never run. With the release
    version, each locked cell runs as released (an edit is noted and ignored, a missing one put back), each
    answer cell and each cell the student added runs as submitted."""
    notes: list[str] = []
    canon: dict[str, tuple[int, Mapping[str, Any]]] = {}
    if release is not None:
        for i, c in enumerate(release.get("cells", [])):
            gid = grade_id(c)
            if gid:
                canon[gid] = (i, c)
    original: dict[str, set[str]] = {}
    for version in (release, source):
        for c in (version or {}).get("cells", []):
            if grade_id(c):
                original.setdefault(str(grade_id(c)), set()).add(cell_source(c).strip())
    out: list[CellToRun] = []
    emitted: set[str] = set()

    def restore_until(index: int) -> None:
        for gid, (i, c) in sorted(canon.items(), key=lambda kv: kv[1][0]):
            if i >= index:
                break
            if gid in emitted or c.get("cell_type") != "code" or is_solution(c) or is_grade(c):
                continue
            emitted.add(gid)
            notes.append(f"The locked cell '{gid}' was missing from the notebook; the grader ran the original.")
            out.append(CellToRun(0, gid, python_of(cell_source(c))))

    number = 0
    for cell in nb.get("cells", []):
        if not isinstance(cell, Mapping) or cell.get("cell_type") != "code":
            continue
        number += 1
        gid = grade_id(cell)
        if gid is not None and gid in canon:
            index, c = canon[gid]
            restore_until(index)
            if gid in emitted:
                continue
            emitted.add(gid)
            if is_solution(c):
                out.append(CellToRun(number, gid, python_of(cell_source(cell)), answer=True))
            elif is_grade(c):
                if cell_source(cell).strip() not in original[gid]:
                    notes.append(f"The test cell '{gid}' (code cell {number}) was edited; test cells never run "
                                 "when grading, so the edit changes nothing.")
            else:
                if cell_source(cell).strip() not in original[gid]:
                    notes.append(f"The locked cell '{gid}' (code cell {number}) was edited; the grader ran the "
                                 "original instead.")
                out.append(CellToRun(number, gid, python_of(cell_source(c))))
        elif release is None and is_grade(cell) and not is_solution(cell):
            continue  # no release version to compare with: test cells still never run
        else:
            out.append(CellToRun(number, gid, python_of(cell_source(cell)), answer=is_solution(cell)))
    restore_until(10**9)
    return out, notes


# -- running the child -----------------------------------------------------------------------------------------


@dataclass
class IsolatedRun:
    """What came back from the child: the answers (plain values), the cells that raised, and why the run
    ended early if it did (``failure``, a sentence for the student)."""

    answers: dict[str, Any]
    errors: list[CellError]
    failure: str | None = None
    elapsed_s: float = 0.0
    returncode: int | None = None
    output_tail: str = ""
    notes: list[str] = field(default_factory=list)
    #: the final answers message arrived
    done: bool = False
    #: the cell the child reported running last (its label)
    running: str | None = None


_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from emqlab.teaching import _child; _child.main(int(sys.argv[2]))")


#: False once starting the child as ``nobody`` failed (the interpreter is not readable by it, e.g. under
#: /root): the child then runs as the grader's user, limited by the audit hook and the rlimits only.
_NOBODY_WORKS = [True]


def _nobody() -> tuple[int, int] | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not _NOBODY_WORKS[0]:
        return None
    try:
        import pwd

        pw = pwd.getpwnam("nobody")
        return pw.pw_uid, pw.pw_gid
    except (ImportError, KeyError):
        return None


def run_isolated(cells: Sequence[CellToRun], names: Sequence[str], probes: Mapping[str, Sequence[Sequence[Any]]],
                 limits: Limits = DEFAULT_LIMITS, *, deny_dirs: Sequence[str] = (),
                 meanwhile: Callable[[], Any] | None = None) -> IsolatedRun:
    """Run ``cells`` in a fresh, limited interpreter and bring back the values of ``names``. ``meanwhile``
    runs here while the child works (the grader's own reference runs, which need no answers)."""
    started = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="emqlab-grade-")
    user = _nobody()
    spec = {"v": WIRE_VERSION, "cells": [c.__dict__ for c in cells], "names": list(names),
            "probes": {k: [list(a) for a in v] for k, v in probes.items()},
            "cell_timeout_s": limits.cell_timeout_s, "memory_mb": limits.memory_mb,
            "cpu_s": int(limits.timeout_s) + 5, "extra_processes": limits.extra_processes,
            "output_mb": limits.output_mb, "home": tmp, "deny_dirs": list(deny_dirs)}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8",
           "MPLBACKEND": "Agg", "MPLCONFIGDIR": os.path.join(tmp, ".matplotlib")}
    read_fd, write_fd = os.pipe()
    out_path = os.path.join(tmp, ".output")
    received = bytearray()
    overflow = [False]

    def reader() -> None:
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            if len(received) + len(chunk) > MAX_CHANNEL_BYTES:
                overflow[0] = True
                continue
            received.extend(chunk)

    pkg_root = str(Path(__file__).resolve().parents[2])
    proc = None
    try:
        with open(out_path, "wb") as out:
            proc = _start(user, [sys.executable, "-I", "-B", "-c", _BOOT, pkg_root, str(write_fd)], tmp, out_path,
                          stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=tmp, env=env,
                          pass_fds=(write_fd,), start_new_session=True, close_fds=True)
        os.close(write_fd)
        write_fd = -1
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:  # noqa: BLE001 - the graders meet the same error and report it per cell
                pass
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_session(proc.pid)
        proc.wait()
        thread.join(timeout=10)
        run = _parse(bytes(received), overflow[0], names)
        run.returncode = proc.returncode
        run.output_tail = _tail(out_path)
        if timed_out:
            run.answers, run.errors = {}, []
            run.failure = (f"Your notebook was stopped after {limits.timeout_s:g} s{_while(run)}: it did not "
                           "finish, so no answers could be collected. Look for a loop that never ends.")
        elif run.failure is None and not run.done:
            run.failure = _early_end(proc.returncode, run, limits)
        run.elapsed_s = time.perf_counter() - started
        return run
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)
        if proc is not None and proc.poll() is None:
            _kill_session(proc.pid)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _start(user: tuple[int, int] | None, argv: list[str], tmp: str, out_path: str, **kwargs: Any) -> Any:
    if user is not None:
        try:
            os.chown(tmp, *user)
            os.chown(out_path, *user)
            return subprocess.Popen(argv, user=user[0], group=user[1], extra_groups=[], **kwargs)  # noqa: S603
        except PermissionError:
            _NOBODY_WORKS[0] = False
            os.chown(tmp, os.getuid(), os.getgid())
            os.chown(out_path, os.getuid(), os.getgid())
    return subprocess.Popen(argv, **kwargs)  # noqa: S603 - our own interpreter and bootstrap


def _kill_session(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _while(run: IsolatedRun) -> str:
    return f" while running {run.running}" if run.running else ""


def _early_end(code: int | None, run: IsolatedRun, limits: Limits) -> str:
    import signal

    where = _while(run)
    if code is not None and code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig in (signal.SIGKILL, getattr(signal, "SIGXCPU", -1)):
            return (f"Your notebook's process was stopped by {name}{where} (it may use at most "
                    f"{limits.memory_mb} MB of memory and {int(limits.timeout_s)} s of CPU): no answers could be "
                    "collected.")
        return f"Your notebook's process died of {name}{where}: no answers could be collected."
    return (f"Your notebook's process ended (exit status {code}){where} before its answers were collected: "
            "something in it exits the interpreter (os._exit, sys.exit in a thread, …). A notebook must run "
            "to its end.")


def _parse(data: bytes, overflow: bool, names: Sequence[str]) -> IsolatedRun:
    run = IsolatedRun({}, [])
    tampered = ("Your notebook wrote to the grader's answer channel itself (data the runner does not write), "
                "so none of its answers can be trusted: every answer counts as missing.")
    if overflow:
        run.failure = tampered
        return run
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for i, raw in enumerate(lines):
        try:
            msg = json.loads(raw)
            if not isinstance(msg, dict) or len(msg) != 1:
                raise TamperedError("shape")
            (kind, body), = msg.items()
            if kind == "running" and isinstance(body, str) and len(body) < 300 and not run.done:
                run.running = body
            elif kind == "answers" and i == len(lines) - 1 and isinstance(body, dict):
                run.answers, run.errors = _answers(body, names)
                run.done = True
            else:
                raise TamperedError(kind)
        except (ValueError, TypeError, TamperedError):
            return IsolatedRun({}, [], failure=tampered)
    return run


def _answers(body: Mapping[str, Any], names: Sequence[str]) -> tuple[dict[str, Any], list[CellError]]:
    if set(body) != {"v", "values", "errors"} or body["v"] != WIRE_VERSION:
        raise TamperedError("answers")
    values, errors = body["values"], body["errors"]
    if not isinstance(values, dict) or not set(values) <= set(names) or not isinstance(errors, list):
        raise TamperedError("answers")
    out = {n: decode(v, n) for n, v in values.items()}
    errs = []
    for e in errors[:200]:
        if not (isinstance(e, list) and len(e) == 3 and isinstance(e[0], int) and not isinstance(e[0], bool)
                and (e[1] is None or isinstance(e[1], str)) and isinstance(e[2], str)):
            raise TamperedError("errors")
        errs.append(CellError(e[0], e[1][:100] if e[1] else None, e[2][:400]))
    return out, errs


# -- what the report says of a notebook whose answers are stubs ------------------------------------------------


def unsaved_hint(path: str | None) -> str:
    """The hint for a notebook whose answers are still stubs: JupyterLab keeps unsaved edits in the browser."""
    when = ""
    if path:
        try:
            when = time.strftime(" (the file was last saved at %H:%M on %d %b)", time.localtime(os.stat(path).st_mtime))
        except OSError:
            when = ""
    return ("Did you save the notebook? emqlab grade reads the file on disk, not what is open in JupyterLab"
            f"{when}: save it (Ctrl+S) and grade again.")
