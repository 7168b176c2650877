"""The isolated side of :mod:`emqlab.teaching.sandbox`: runs a student's cells in this (fresh, limited)
interpreter and writes the answers to the grader's pipe. Started by the grader only; never imported by it.

Order matters: read the whole spec from stdin, import what the notebooks use, limit the process, install
the audit hook, and only then run the first student cell.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn",
                   "os.startfile", "winreg.OpenKey"}
_NETWORK_PREFIX = "socket."
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
                "os.link", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
#: Modules that could start processes, load native code or escape the audit hook (a subinterpreter has
#: its own hooks): importing them is refused.
_BLOCKED_IMPORTS = {"_posixsubprocess", "_ctypes", "ctypes", "_xxsubinterpreters", "_testcapi",
                    "_testinternalcapi", "_multiprocessing", "_posixshmem", "pty", "termios"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


#: The exit status of a child whose channel to the grader was closed or replaced by the student's code.
CHANNEL_BROKEN = 86


def _inside(path: Any, root: str) -> bool:
    try:
        p = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return p == root or p.startswith(root.rstrip("/") + "/")


def _is_dir(name: str) -> bool:
    try:
        return os.path.isdir(name)
    except (TypeError, ValueError):
        return False


def _other_process(name: str) -> bool:
    """``/proc/<pid>/…`` of a process other than this one (the grader's memory, environment, files)."""
    try:
        p = os.path.realpath(name)
    except (TypeError, ValueError):
        return False
    parts = p.split("/")
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != os.getpid()


def _make_hook(home: str, deny_dirs: list[str]) -> Any:
    home = os.path.realpath(home)
    deny = [os.path.realpath(d) for d in deny_dirs]
    channel = [-1]

    def refuse(what: str) -> None:
        raise PermissionError(f"{what} is not allowed while a notebook is graded")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "import" and args and str(args[0]).split(".")[0] in _BLOCKED_IMPORTS:
            refuse(f"importing {args[0]}")
        if event in _PROCESS_EVENTS:
            refuse("starting or signalling processes (" + event + ")")
        if event.startswith(_NETWORK_PREFIX) and event not in ("socket.gethostname",):
            refuse("network access (" + event + ")")
        if event.startswith("ctypes."):
            refuse("ctypes")
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            if isinstance(path, int):
                if path == channel[0]:
                    refuse("opening the grader's channel")
                return
            if path is None:
                return
            writes = (isinstance(mode, str) and any(ch in mode for ch in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writes and not _inside(path, home):
                refuse(f"writing {os.fsdecode(path)!r} (outside the notebook's folder)")
            name = os.fsdecode(path)
            if (name.endswith(".ipynb") and not _inside(path, home)) or any(_inside(path, d) for d in deny):
                refuse(f"reading {name!r}")
            if _is_dir(name):
                # a directory's descriptor would let a later open name a file relative to it (dir_fd), which
                # the open event does not show: the path checked here would not be the file opened
                refuse(f"opening the directory {name!r}")
            if _other_process(name):
                refuse(f"reading another process's {name!r}")
        elif event in ("os.listdir", "os.scandir") and args:
            if not isinstance(args[0], (str, bytes, os.PathLike)):
                refuse("listing a directory by its descriptor")
            if any(_inside(args[0], d) for d in deny):
                refuse(f"listing {os.fsdecode(args[0])!r}")
        elif event in _PATH_EVENTS:
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a, home):
                    refuse(f"{event} outside the notebook's folder")

    return hook, channel


def _count_tasks(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            n += int(fields.get("Threads", "1").strip() or 1)
    return n


def _limit(spec: dict[str, Any]) -> None:
    import resource
    import signal

    def both(which: int, value: int) -> None:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(which)
            if hard == resource.RLIM_INFINITY or value <= hard:
                resource.setrlimit(which, (value, hard if hard != resource.RLIM_INFINITY else value))

    both(resource.RLIMIT_AS, int(spec["memory_mb"]) * 1024 * 1024)
    both(resource.RLIMIT_CPU, int(spec["cpu_s"]))
    both(resource.RLIMIT_FSIZE, int(spec["output_mb"]) * 1024 * 1024)
    both(resource.RLIMIT_CORE, 0)
    if hasattr(resource, "RLIMIT_NPROC") and os.path.isdir("/proc"):
        both(resource.RLIMIT_NPROC, _count_tasks(os.getuid()) + int(spec["extra_processes"]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing the run


def _preload() -> None:
    import emqlab.backend.connect
    import emqlab.engine.scenario
    import emqlab.explore.checked
    import emqlab.scripting.host
    import emqlab.teaching.assignments
    import emqlab.teaching.grading  # the notebooks' own import path (emqlab.grading), and all it loads
    import emqlab.teaching.run
    import emqlab.timing  # noqa: F401

    emqlab.backend.connect.connect()  # the fake server's first use loads its modules


def _disarm() -> None:
    """Drop the already imported ways to start a process without an audit event (subprocess's fork_exec)."""

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError("starting processes is not allowed while a notebook is graded")

    for mod in ("_posixsubprocess", "subprocess", "multiprocessing.util"):
        m = sys.modules.get(mod)
        for attr in ("fork_exec", "_fork_exec", "spawnv_passfds"):
            if m is not None and hasattr(m, attr):
                setattr(m, attr, refused)
    for mod in _BLOCKED_IMPORTS:
        sys.modules.pop(mod, None)


def main(channel_fd: int) -> None:
    spec = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.set_inheritable(channel_fd, False)
    try:
        _preload()
    except Exception:  # noqa: BLE001 - the grader reports the missing answers
        pass
    from emqlab.teaching.assignments import probe_arguments
    from emqlab.teaching.run import time_limit
    from emqlab.teaching.sandbox import WIRE_VERSION, encode

    cell_timeout = int(spec["cell_timeout_s"])
    _disarm()
    _limit(spec)
    out = os.fdopen(channel_fd, "w", encoding="utf-8", closefd=False)
    hook, channel = _make_hook(spec["home"], spec["deny_dirs"])
    channel[0] = channel_fd
    sys.addaudithook(hook)

    def send(kind: str, body: Any) -> None:
        try:
            out.write(json.dumps({kind: body}, separators=(",", ":")) + "\n")
            out.flush()
        except (OSError, ValueError):
            os._exit(CHANNEL_BROKEN)  # the student's code closed or replaced the channel

    ns: dict[str, Any] = {"__name__": "__main__"}
    errors: list[list[Any]] = []
    for cell in spec["cells"]:
        label = f"code cell {cell['number']}" if cell["number"] else "a restored locked cell"
        if cell["grade_id"]:
            label += f" ('{cell['grade_id']}')"
        send("running", label)
        try:
            with time_limit(cell_timeout):
                exec(compile(cell["source"], f"<{label}>", "exec"), ns)  # noqa: S102 - the point of the child
        except BaseException as e:  # noqa: BLE001 - a student's cell may raise anything, even SystemExit
            first = str(e).strip().split("\n")[0][:300]
            if isinstance(e, MemoryError):
                first = first or f"the notebook may use at most {spec['memory_mb']} MB"
            text = f"{type(e).__name__}: {first}" if first else type(e).__name__
            errors.append([cell["number"], cell["grade_id"], text])

    send("running", "the grader's collection of your answers")

    def caller(name: str) -> Any:
        def call(fn: Any, args: Any) -> Any:  # the grader's probe (plain data) → the function's arguments
            with time_limit(cell_timeout):
                return fn(*probe_arguments(name, args))

        return call

    values: dict[str, Any] = {}
    for name in spec["names"]:
        if name not in ns:
            continue
        try:
            with time_limit(cell_timeout):
                values[name] = encode(ns[name], spec["probes"].get(name), call=caller(name))
        except BaseException as e:  # noqa: BLE001
            values[name] = {"opaque": f"unreadable ({type(e).__name__})"}
    send("answers", {"v": WIRE_VERSION, "values": values, "errors": errors})
    try:
        out.close()
        os.close(channel_fd)
    except OSError:
        pass
    os._exit(0)  # no atexit handlers or finalizers of the student's code after the answers
