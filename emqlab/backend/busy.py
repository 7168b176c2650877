"""A busy embedded server, as Redis 7 is busy: while a script (``EVAL``/``EVALSHA``) or a function (``FCALL``)
has run longer than the busy-reply threshold, other clients' commands get ``BUSY`` instead of waiting, and
``SCRIPT KILL`` (``FUNCTION KILL`` for a function) ends it — unless it has already called a write command
(``UNKILLABLE``). A Ctrl-C in the thread running the script ends it too, and is raised to that thread's caller
once the script has let go of the server.

Redis 7.0's rules (``src/script.c``: ``scriptInterrupt``, ``scriptKill``; ``src/server.c``: the ``allow-busy``
commands), checked against a Redis 7.0 server by ``tests/test_embedded_busy.py``. Before the threshold a
command waits for the script to end (Redis processes none); ``SCRIPT KILL`` waits the same way and, if no
script is running once it gets its turn, answers ``NOTBUSY``. The embedded server still ends every script at
its own limits (:func:`emqlab.backend.fakeserver.new_server`'s ``max_instructions``, ``max_seconds``), which
Redis does not.

fakeredis runs every command under one lock (``FakeServer.lock``); :func:`install` puts a :class:`ServerLock`
in its place, whose waits turn into a ``BUSY`` reply for a command (never for fakeredis's own waits, such as a
blocked ``BLPOP`` waking up).
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# isort: off
from emqlab.backend._fakeredis import fakeredis  # (first: fakeredis without NumPy)
# isort: on
from fakeredis._core import Database
from fakeredis._helpers import SimpleError, SimpleString

from emqlab.protocol import messages
from emqlab.protocol.commands import is_container, line_flags

__all__ = ["CONNECTION_ONLY", "DEFAULT_BUSY_REPLY_THRESHOLD_MS", "Busy", "BusyMixin", "Running", "ServerLock",
           "install"]

#: Redis 7's default ``busy-reply-threshold`` (``lua-time-limit``), milliseconds.
DEFAULT_BUSY_REPLY_THRESHOLD_MS = 5000

_POLL_S = 0.01  # how often a waiting command looks whether the script running has turned busy

#: Commands Redis runs while busy (the ``allow-busy`` flag) that touch only their own connection: they run
#: at once without the server's lock. The other ``allow-busy`` commands (MULTI, WATCH, RESET, SHUTDOWN …)
#: wait for the script to end instead; every other command gets BUSY.
CONNECTION_ONLY = frozenset({b"hello", b"auth", b"quit"})


@dataclass
class Running:
    """The script or function an embedded server is running: ``kind`` ``"script"`` or ``"function"``, its
    ``source`` (the script's text, the function's name), ``started`` (``time.monotonic()``, seconds);
    ``wrote`` once it has called a write command, ``killed`` once a KILL was accepted, ``interrupted`` once a
    Ctrl-C reached it, ``line`` the line it was stopped at."""

    kind: str
    source: bytes
    started: float
    wrote: bool = False
    killed: bool = False
    interrupted: bool = False
    line: int = 0

    def name(self) -> str:
        """The name Redis's reply gives it: the script's SHA1 in hex, the function's name."""
        if self.kind == "script":
            return hashlib.sha1(self.source).hexdigest()
        return self.source.decode(errors="replace")


class Busy:
    """One embedded server's state of scripts (``server._emqlab_busy``): what it is running, and since when
    that turns other clients away (``threshold_s``, seconds)."""

    def __init__(self, threshold_ms: int) -> None:
        if threshold_ms < 0:
            raise ValueError(f"busy_reply_threshold_ms must be 0 or more, not {threshold_ms}")
        self.threshold_s = threshold_ms / 1000
        self.running: Running | None = None
        # per thread: .fields, the client's command line it is about to run (None: not dispatching);
        # .borrowed, True while it runs a CONNECTION_ONLY command without the lock
        self.local = threading.local()

    def busy(self) -> Running | None:
        """The script running, if it has passed the threshold."""
        r = self.running
        if r is not None and time.monotonic() - r.started >= self.threshold_s:
            return r
        return None

    def tick(self) -> bool:
        """Called by the Lua count hook of a script the server runs: True once the script must stop (killed,
        or a Ctrl-C is pending in this thread — Python raises it here, where Python code runs)."""
        r = self.running
        try:
            return r is not None and (r.killed or r.interrupted)
        except KeyboardInterrupt:
            if r is not None:
                r.interrupted = True
            return True

    def stopped_at(self, line: Any) -> None:
        """Called by the hook when :meth:`tick` stopped the script (or raised: a Ctrl-C that arrived in
        lupa's own code around the call): the line it was running."""
        r = self.running
        if r is None:
            return
        if not r.killed:
            r.interrupted = True
        if isinstance(line, (int, float)):
            r.line = int(line)

    def call(self, kind: str, source: bytes, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with a script or function marked running (the caller holds the server's lock): its
        result, or Redis's error reply for a script that was killed, or ``KeyboardInterrupt`` for one a
        Ctrl-C stopped."""
        running = Running(kind, source, time.monotonic())
        self.running = running
        try:
            result = fn(*args, **kwargs)
        except Exception:
            if running.interrupted:
                raise KeyboardInterrupt from None
            if running.killed:
                where = "user_script" if kind == "script" else "user_function"
                raise SimpleError(messages.SCRIPT_KILLED % (running.name(), where, running.line)) from None
            raise
        finally:
            self.running = None
        if running.interrupted:
            raise KeyboardInterrupt
        return result

    def kill(self, kind: str, lock: threading.RLock) -> SimpleError | SimpleString:
        """``SCRIPT KILL`` (``kind`` ``"script"``) or ``FUNCTION KILL`` (``"function"``): wait as any command
        does, then answer as Redis 7.0's ``scriptKill`` (OK, ``NOTBUSY``, ``UNKILLABLE``, or ``BUSY`` for a KILL
        of the other kind)."""
        while not lock.acquire(timeout=_POLL_S):
            r = self.busy()
            if r is None:
                continue
            if r.kind != kind:
                return SimpleError(_busy_text(r))
            if r.wrote:
                return SimpleError(messages.UNKILLABLE)
            r.killed = True
            return SimpleString(b"OK")
        lock.release()
        return SimpleError(messages.NOTBUSY)


@lru_cache(maxsize=1024)
def _writes(op: bytes) -> bool | None:
    """Whether command ``op`` writes (None for a container: its subcommand tells)."""
    return None if is_container(op) else "write" in line_flags((op,))


def _busy_text(r: Running) -> str:
    return messages.BUSY_SCRIPT if r.kind == "script" else messages.BUSY_FUNCTION


class ServerLock:
    """``FakeServer.lock`` of an embedded server: a plain lock, except for a thread waiting to run a client's
    command (``busy.local.command``) once the script holding the server has run past the threshold: the
    command gets Redis's ``BUSY`` error, or runs at once (:data:`CONNECTION_ONLY`), or goes on waiting (the
    other ``allow-busy`` commands)."""

    def __init__(self, raw: threading.RLock, busy: Busy) -> None:
        self.raw = raw
        self._busy = busy

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock as :meth:`threading.RLock.acquire` does, a client's command waiting busy-aware. A
        Ctrl-C that CPython raises as the raw acquire returns (it takes signals after a C call) gives the
        hold back: the caller never learnt it had the lock, so it would never release it, and every other
        thread's command would wait for ever (the executor's and fakeredis's ``with`` alike)."""
        raw = self.raw
        held = raw._recursion_count()  # type: ignore[attr-defined]
        try:
            local = self._busy.local
            fields = getattr(local, "fields", None)
            if not blocking or timeout >= 0 or fields is None:
                return raw.acquire(blocking, timeout)
            while not raw.acquire(timeout=_POLL_S):
                r = self._busy.busy()
                if r is None:
                    continue
                if fields[0].lower() in CONNECTION_ONLY:
                    local.borrowed = True
                    return True
                # (FUNCTION STATS is allow-busy, but while an EVAL runs Redis 7.0 answers it BUSY)
                stats = [f.lower() for f in fields] == [b"function", b"stats"]
                if "allow_busy" not in line_flags(fields) or (stats and r.kind == "script"):
                    raise SimpleError(_busy_text(r))
            return True
        except BaseException:
            if raw._recursion_count() > held:  # type: ignore[attr-defined]
                raw.release()
            raise

    def release(self) -> None:
        local = self._busy.local
        if getattr(local, "borrowed", False):
            local.borrowed = False
        else:
            self.raw.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def release_interrupted(conn: Any) -> None:
    """Called while a Ctrl-C's or a stop signal's exception is handled in this thread (nothing otherwise), when no
    command of it runs any more (the exception has unwound them all): give back the embedded server's lock as often
    as this thread still holds it (a KeyboardInterrupt between its acquire and the command kept it, and every other
    thread's command waited for ever). Nothing for a live server's connection. What Python's own locks inside the
    connection may keep (a socket's response queue, an event: plain locks taken in Python code) is not touched:
    closing the connection takes them, and would wait for ever where this thread kept one."""
    if not isinstance(sys.exc_info()[1], (KeyboardInterrupt, SystemExit)):
        return
    pool = getattr(conn, "connection_pool", None)
    server = getattr(pool, "connection_kwargs", {}).get("server") if pool is not None else None
    lock = getattr(server, "lock", None)
    if pool is None or not isinstance(lock, ServerLock):
        return
    raw = lock.raw
    while raw._is_owned():  # type: ignore[attr-defined]
        raw.release()


def install(server: fakeredis.FakeServer, threshold_ms: int) -> Busy:
    """Give ``server`` (a fresh one: before any client used it) a :class:`Busy` state and a :class:`ServerLock`.
    The databases' conditions keep the plain lock (a blocked command's wake-up is no new command); client ids
    get a lock of their own."""
    busy = Busy(threshold_ms)
    # Re-entrant: a Ctrl-C (a stop signal, a notebook's interrupt) raised in the thread between this lock's
    # acquire and the command that holds it — ServerLock is Python code — left it held, and the next command
    # from that thread (the run's clean-up, the notebook's next cell) waited for it for ever
    raw = threading.RLock()
    server.lock = ServerLock(raw, busy)  # type: ignore[assignment]
    server.dbs.default_factory = lambda: Database(raw)  # type: ignore[attr-defined,arg-type]
    for db in server.dbs.values():
        db.condition = threading.Condition(raw)
    server._emqlab_busy = busy  # type: ignore[attr-defined]
    ids = threading.Lock()

    def next_client_id() -> int:
        # (a new connection takes an id: with the server's lock it would wait for a long script, where Redis
        # accepts the connection and answers its first command BUSY)
        with ids:
            client_id: int = server._next_client_id
            server._next_client_id += 1
        return client_id

    server.get_next_client_id = next_client_id  # type: ignore[method-assign]
    return busy


_KILLS = {(b"script", b"kill"): "script", (b"function", b"kill"): "function"}


class BusyMixin:
    """The socket side (a fakeredis socket mixin): commands dispatched through the :class:`ServerLock`'s
    busy-aware wait, ``SCRIPT KILL``/``FUNCTION KILL`` answered as Redis does, scripts and functions marked
    running, their write commands noted. A socket on a server without :func:`install` behaves as fakeredis's."""

    _server: fakeredis.FakeServer

    def _process_command(self, fields: list[bytes]) -> None:
        busy: Busy | None = getattr(self._server, "_emqlab_busy", None)
        if busy is None or not fields:
            super()._process_command(fields)  # type: ignore[misc]
            return
        kind = _KILLS.get((fields[0].lower(), fields[1].lower())) if len(fields) == 2 else None
        if kind is not None:
            self.put_response(self._decode_result(busy.kill(kind, self._server.lock.raw)))  # type: ignore[attr-defined]
            return
        busy.local.fields = fields
        try:
            super()._process_command(fields)  # type: ignore[misc]
        finally:
            busy.local.fields = None

    def eval(self, script: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        busy: Busy | None = getattr(self._server, "_emqlab_busy", None)
        evaluate = super().eval  # type: ignore[misc]
        if busy is None:
            return evaluate(script, numkeys, *keys_and_args)
        return busy.call("script", script, evaluate, script, numkeys, *keys_and_args)

    def _fcall(self, command_name: str, function_name: bytes, *args: Any, **kwargs: Any) -> Any:
        busy: Busy | None = getattr(self._server, "_emqlab_busy", None)
        fcall = super()._fcall  # type: ignore[misc]
        if busy is None:
            return fcall(command_name, function_name, *args, **kwargs)
        return busy.call("function", function_name, fcall, command_name, function_name, *args, **kwargs)

    def _note_write(self, op: Any, args: tuple[Any, ...]) -> None:
        # Redis marks a script dirty when it calls a write command (src/script.c: scriptCall), whatever the
        # command then does; from then on SCRIPT KILL answers UNKILLABLE (called for every command a script or
        # function sends: emqlab/backend/scripts.py)
        busy: Busy | None = getattr(self._server, "_emqlab_busy", None)
        r = busy.running if busy is not None else None
        if r is not None and not r.wrote and isinstance(op, bytes):
            writes = _writes(op)
            r.wrote = writes if writes is not None else "write" in line_flags((op, *args[:1]))

