"""The home of the server side of Python actors: what the Runner does with a Python actor's round trip.

A Python actor (:mod:`emqlab.engine.pyactors`) hands the Runner a request (one command, or a pipeline / ``MULTI …
EXEC`` batch) on one of its connections. :func:`refusal` says which commands a scheduled actor may send at
all (the driver checks each request before it becomes a step); :class:`PyWire` carries an allowed request
out for the Runner: the run's own script cache answers ``SCRIPT LOAD`` / ``SCRIPT EXISTS`` and ``EVALSHA``
(an atomic script runs through the Lua host on fakeredis, every command observed, or as one ``EVALSHA`` on a
server), each connection keeps its ``WATCH`` / ``MULTI`` state, and every command's footprint is noted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from emqlab.engine import footprints
from emqlab.engine.footprints import Footprint
from emqlab.protocol import messages
from emqlab.protocol.commands import command_keys, key_access
from emqlab.scripting.registry import ScriptSet, evalsha

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.engine.actors import Op
    from emqlab.scripting.host import LuaHost

Command = tuple[bytes, ...]
#: Redis's reply to EVALSHA of a script its cache does not hold
NOSCRIPT = messages.NOSCRIPT

_KEYLESS_OK = frozenset({b"PING", b"ECHO", b"MULTI", b"EXEC", b"DISCARD", b"UNWATCH"})
_SCRIPTING = frozenset({b"EVAL", b"EVALSHA", b"EVAL_RO", b"EVALSHA_RO"})
_BLOCKING = {b"BLPOP": "LPOP", b"BRPOP": "RPOP", b"BLMOVE": "LMOVE", b"BRPOPLPUSH": "LMOVE", b"BLMPOP": "LMPOP",
             b"BZPOPMIN": "ZPOPMIN", b"BZPOPMAX": "ZPOPMAX", b"BZMPOP": "ZMPOP", b"WAIT": None, b"WAITAOF": None}
_KEYSPACE = frozenset({b"KEYS", b"SCAN", b"RANDOMKEY", b"DBSIZE", b"FLUSHDB", b"FLUSHALL", b"SWAPDB", b"MOVE",
                       b"MIGRATE", b"COPY"})


def refusal(command: Command, base: str) -> str | None:
    """Why a Python actor may not send ``command`` on a run whose keys start with ``base`` (``None``: it
    may). See the module docstring for the rules."""
    name = command[0].upper()
    shown = name.decode("utf-8", "replace")
    if name in _BLOCKING:
        instead = _BLOCKING[name]
        hint = f" (use {instead}, its non-blocking form)" if instead else ""
        return (f"{shown} blocks its connection until another client acts, but under the scheduler only one actor"
                f" runs at a time, so it would wait forever{hint}")
    if name in (b"XREAD", b"XREADGROUP") and any(a.upper() == b"BLOCK" for a in command[1:]):
        return f"{shown} … BLOCK blocks its connection (under the scheduler it would wait forever): leave out BLOCK"
    if name == b"TIME":
        return "TIME reads the server's wall clock, which differs from run to run: use q.now() (virtual ms)"
    if name in _KEYSPACE:
        return (f"{shown} acts on the whole keyspace (on a live server, other users' keys): a Python actor may"
                " touch only its run's keys")
    if name == b"HELLO" and len(command) > 1 and command[1] != b"2":
        return "HELLO with another protocol than 2: the scheduled client speaks RESP2"
    if name == b"SCRIPT":
        sub = command[1].upper() if len(command) > 1 else b""
        if sub in (b"LOAD", b"EXISTS"):
            return None
        return (f"SCRIPT {sub.decode('utf-8', 'replace')} acts on the server's script cache for every client: a"
                " Python actor may only SCRIPT LOAD and SCRIPT EXISTS (the script-flush fault empties the cache)")
    if name in _KEYLESS_OK:
        return None
    if name == b"CLIENT" and len(command) > 1 and command[1].upper() in (b"SETNAME", b"GETNAME", b"ID"):
        return None  # the connection's own name and id
    if name == b"INFO":
        return None  # read-only (clients read the server's version from it)
    b = base.encode()
    if name in _SCRIPTING:
        try:
            n = int(command[2])
        except (IndexError, ValueError):
            return None  # the server answers the syntax error
        outside = [k for k in command[3:3 + n] if not k.startswith(b)]
    else:
        access = key_access(command)
        keys = command_keys(command)
        if access is None or keys is None:
            return (f"{shown} is not a command of the table emqlab knows the keys of (or a server command):"
                    " a Python actor may send only key commands on its run's keys")
        if not keys:
            return (f"{shown} is a server command without keys (it could change the server for every client):"
                    " a Python actor may send only key commands on its run's keys")
        outside = [k for k in keys if not k.startswith(b)]
    if outside:
        k = outside[0].decode("utf-8", "replace")
        return (f"key {k!r} is outside this run's queue ({base}…): a Python actor may touch only its run's keys"
                " (build them with q.keys), so a live server's other data is never touched")
    return None


def sha1_hex(source: bytes) -> bytes:
    return hashlib.sha1(source).hexdigest().encode()


def script_ref(source: bytes) -> str:
    """How a script's source is shown in a history: by its SHA1's first 12 digits."""
    return f"<script {sha1_hex(source)[:12].decode()}…>"



def shown(command: Command, show: Callable[[Any], str]) -> tuple[str, list[str], Sequence[bytes] | None]:
    """How a Python actor's ``command`` is shown in a history — its name, its arguments (each by ``show``; a
    script's source by its SHA1) — and the keys it wrote (``None`` when the command table cannot name
    them: a transaction, a script)."""
    name = command[0].decode("utf-8", "replace").upper()
    args = [show(a) for a in command[1:]]
    if name == "SCRIPT" and len(command) == 3:  # SCRIPT LOAD <source>
        args[1] = script_ref(command[2])
    elif name in ("EVAL", "EVAL_RO"):
        args[0] = script_ref(command[1])
    access = key_access(command)
    written = access.writes if access is not None and not access.writes_any and name not in UNSEEN_WRITES else None
    return name, args, written

# -- the Runner's side of a Python actor's round trip ----------------------------------------------------------


@dataclass
class _Conn:
    """A Python actor's connection state: its WATCHed keys, an open MULTI and what it queued."""

    watched: tuple[bytes, ...] = ()
    multi: bool = False
    queued: Footprint = field(default_factory=Footprint)


#: commands that hold per-connection state: a Python actor sends them on its own connection
SESSION_COMMANDS = frozenset({b"WATCH", b"UNWATCH", b"MULTI", b"EXEC", b"DISCARD"})
SCRIPT_CALLS = frozenset({b"EVAL", b"EVALSHA", b"EVAL_RO", b"EVALSHA_RO"})
#: commands whose writes the command table cannot name (a transaction, a script)
UNSEEN_WRITES = frozenset({"EXEC", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO"})


class PyWire:
    """The Python actors' round trips of one Runner: the run's script cache (sha -> source: the run's script
    set and ``loaded`` when a run starts) and each connection's WATCH / MULTI state.

    What it is given of the Runner: ``base`` (the queue's key prefix), ``fake`` (the backend is fakeredis),
    ``execute`` (the run's command executor), ``executor`` (the backend's own, for ``SCRIPT LOAD`` and
    ``EVALSHA`` on a server), ``session(conn)`` (the executor of a Python actor's own connection, opened at
    its first use), ``host`` (the Lua host that runs atomic scripts locally; ``None``: EVALSHA on the
    backend) and ``kill_script(sha)`` (the fault to raise when a script runs past the socket timeout)."""

    def __init__(self, base: str, fake: bool, execute: Callable[..., Any], executor: Callable[..., Any],
                 session: Callable[[str], Callable[..., Any]], host: LuaHost | None,
                 kill_script: Callable[[str], BaseException], scripts: ScriptSet, loaded: Sequence[bytes]) -> None:
        self.base = base
        self.fake = fake
        self.exec = execute
        self.executor = executor
        self.session = session
        self.host = host
        self.kill_script = kill_script
        self._scripts = scripts
        self._loaded = tuple(loaded)
        self._shas: dict[bytes, bytes] | None = None
        #: the run's script cache as Python actors see it (sha -> source; emqlab's set when a run starts)
        self.cache: dict[bytes, bytes] = {}
        #: each Python-actor connection's WATCH / MULTI state
        self.conns: dict[str, _Conn] = {}

    def reset(self) -> None:
        """A run starts: the script cache holds the run's script set (and ``loaded``), no connection state."""
        if self._shas is None:
            self._shas = {sha1_hex(self._scripts[n].text): self._scripts[n].text for n in self._scripts.names()}
            self._shas.update((sha1_hex(text), text) for text in self._loaded)
        self.cache = dict(self._shas)
        self.conns = {}

    def forget(self, conn: str) -> None:
        """``conn`` was closed: its WATCH and any open MULTI are gone."""
        self.conns.pop(conn, None)

    def round_trip(self, conn: str, op: Op, now: int) -> tuple[Any, Footprint, Command | None,
                                                               Sequence[Command] | None]:
        """A Python actor's round trip on its connection ``conn``: one command (its reply) or a batch
        (the list of replies, errors as values). Returns the reply, the footprint, the command, the batch."""
        if op.batch is not None:
            cmds = op.batch(now)
            out: list[Any] = []
            fp = Footprint()
            for c in cmds:
                r, f = self.command(conn, c)
                out.append(r)
                fp = fp | f
            return out, fp, None, cmds
        assert op.command is not None
        reply, fp = self.command(conn, op.command)
        return reply, fp, op.command, None

    def command(self, conn: str, cmd: Command) -> tuple[Any, Footprint]:
        """One command of a Python actor on its connection ``conn``: the reply (an error reply as a value)
        and the footprint. The run's script cache answers SCRIPT LOAD / EXISTS and EVAL / EVALSHA; a
        command inside MULTI is queued (its footprint counts at EXEC)."""
        base = self.base
        name = cmd[0].upper()
        if name == b"SCRIPT":
            sub = cmd[1].upper()
            if sub == b"LOAD" and len(cmd) == 3:
                sha = sha1_hex(cmd[2])
                self.cache[sha] = cmd[2]
                if not self.fake:  # so that its EVALSHA finds it on the server too
                    self.executor(b"SCRIPT", b"LOAD", cmd[2])
                return sha, Footprint(writes=frozenset({("scripts", sha.decode())}))
            if sub == b"EXISTS":
                shas = [c.lower() for c in cmd[2:]]
                return ([int(s in self.cache) for s in shas],
                        Footprint(reads=frozenset(("scripts", s.decode("utf-8", "replace")) for s in shas)))
        st = self.conns.setdefault(conn, _Conn())
        if name in SCRIPT_CALLS and len(cmd) >= 3:
            if not st.multi:
                return self.script(cmd)
            # inside MULTI the server queues it and runs it at EXEC, in its place among the others: as EVAL
            # of the run's cached text (an unknown SHA1 fails there with NOSCRIPT, as on Redis)
            source = self.cache.get(cmd[1].lower()) if name.startswith(b"EVALSHA") else cmd[1]
            if source is None:
                source = b"return redis.error_reply('" + NOSCRIPT.encode() + b"')"
            cmd = (b"EVAL_RO" if name.endswith(b"_RO") else b"EVAL", source, *cmd[2:])
            st.queued = st.queued | Footprint.everything()  # (what it touches is not seen)
        stateful = name in SESSION_COMMANDS or st.multi or bool(st.watched)
        execute = self.session(conn) if stateful else self.exec
        try:
            reply = execute(*cmd)
        except redis.exceptions.ResponseError as e:
            reply = e
        if name == b"MULTI":
            st.multi = st.multi or not isinstance(reply, Exception)
            return reply, Footprint()
        if name in (b"EXEC", b"DISCARD"):
            fp = st.queued if name == b"EXEC" else Footprint()
            if st.watched and name == b"EXEC":  # its fate depends on every write to the watched keys
                fp = fp | footprints.of_commands([(b"EXISTS", *st.watched)], base)
            self.conns[conn] = _Conn()
            return reply, fp
        if name == b"WATCH":
            st.watched = tuple(dict.fromkeys((*st.watched, *cmd[1:])))
            return reply, footprints.of_commands([(b"EXISTS", *cmd[1:])], base)
        if name == b"UNWATCH":
            st.watched = ()
            return reply, Footprint()
        if st.multi:  # queued: it takes effect at EXEC
            if not isinstance(reply, Exception):
                st.queued = st.queued | footprints.of_command(cmd, base)
            return reply, Footprint()
        return reply, footprints.of_command(cmd, base)

    def script(self, cmd: Command) -> tuple[Any, Footprint]:
        """EVAL / EVALSHA of a Python actor, answered from the run's script cache and run atomically: on
        fakeredis through the Lua host with every command observed, on a server as one EVALSHA (its
        footprint: everything, since a server does not tell what a script touched)."""
        name = cmd[0].upper()
        if name.startswith(b"EVALSHA"):
            sha = cmd[1].lower()
            source = self.cache.get(sha)
            cache = Footprint(reads=frozenset({("scripts", sha.decode("utf-8", "replace"))}))
            if source is None:
                return redis.exceptions.NoScriptError(NOSCRIPT), cache
        else:
            source = cmd[1]
            sha = sha1_hex(source)
            self.cache[sha] = source
            cache = Footprint(writes=frozenset({("scripts", sha.decode())}))
        try:
            n = int(cmd[2])
            if n < 0 or n > len(cmd) - 3:
                raise ValueError
        except ValueError:
            return redis.exceptions.ResponseError("Number of keys can't be greater than number of args"
                                                  if cmd[2].lstrip(b"-").isdigit() and int(cmd[2]) >= 0
                                                  else "value is not an integer or out of range"), cache
        keys, args = cmd[3:3 + n], cmd[3 + n:]
        if self.host is not None:
            seen: list[tuple[bytes, ...]] = []

            def observe(*command: Any) -> Any:
                seen.append(command)
                return self.exec(*command)

            try:
                # (no server checks: every command the host sends is in the footprint, and a step stops at a
                # server fault by itself)
                reply = self.host.run(observe, source, keys, args, server_checks=False)
            except redis.exceptions.ResponseError as e:
                reply = e
            return reply, footprints.of_commands(seen, self.base) | cache
        try:
            reply = evalsha(self.executor, sha, source, keys, args)
        except redis.exceptions.ResponseError as e:
            reply = e
        except redis.exceptions.TimeoutError:
            raise self.kill_script(sha.decode()) from None
        return reply, Footprint.everything() | cache


__all__ = ["NOSCRIPT", "PyWire", "refusal", "script_ref", "sha1_hex", "shown"]
