"""The client-side Lua host: Redis 7's scripting environment on a Lua 5.1 runtime (``lupa.lua51``, named only
by :mod:`emqlab.scripting.sandbox`), with each ``redis.call`` yielded to Python as one command.

Why it exists: to run the *same* script text either atomically (``EVALSHA`` on the server: no other client
runs inside it) or **split** — client-side, each ``redis.call`` sent to the server as its own command, with a
scheduling point before every one. The host runs a script as a Lua coroutine; ``redis.call`` yields the
command, Python sends it to the backend and resumes the script with the converted reply. Driving the
coroutine to its end in one go (:meth:`LuaHost.run`) is the simulation's atomic run; each yield is a gap in
which another actor may run.

What it reproduces (each rule checked against a Redis 7.0 server by ``tests/test_host_differential.py``;
``docs/lua-host.md`` lists the rules and the few intended differences), and where each rule lives:

* the globals and library tables of Redis 7.0's sandbox, read-only (``Attempt to modify a readonly table``,
  for assignment, ``rawset``, ``setmetatable`` and ``table.insert`` alike), a fresh global table per run
  (nothing one run does is visible to the next, or to another actor's run), reading an undefined global an
  error, no ``print``/``getfenv``/``setfenv``/``os``/``io``/``debug``, no bytecode (``loadstring`` and
  ``load`` compile a chunk starting with ESC as text, as Redis does) — ``lua/lib/sandbox.lua``, the file the
  embedded fakeredis server loads too (:mod:`emqlab.backend.fakeserver`), with Lua that reaches no Python
  (:mod:`emqlab.scripting.sandbox`); ``tests/test_lua_sandbox_probes.py`` probes both and Redis;
* ``redis.*`` (``call``, ``pcall``, ``error_reply``, ``status_reply``, ``sha1hex``, ``log``, ``setresp``,
  ``set_repl``, ``replicate_commands``, ``acl_check_cmd``, ``breakpoint``, ``debug``, ``REDIS_VERSION``…)
  with Redis's argument checks and messages; ``cjson`` (``lua/lib/cjson.lua``), ``cmsgpack``
  (``lua/lib/cmsgpack.lua``) and ``bit`` (``lua/lib/bit.lua``), pure Lua, written for emqlab;
  ``math.random`` on Redis's own generator — ``lua/lib/sandbox.lua``;
* the commands Redis refuses inside scripts are refused before they reach a server, with Redis's message
  and in Redis's order (unknown command, arity, ``noscript`` flag, ``#!lua flags=no-writes``, ``XREAD …
  BLOCK``); ``BLMPOP``/``BZMPOP`` behave as inside a script (they never block: sent as ``LMPOP``/``ZMPOP``)
  — :mod:`emqlab.scripting.rules`;
* a ``SELECT`` inside a script is scoped to the run: when the run ends, one more command restores the
  caller's database (:attr:`ScriptRun.pending` shows it like any other);
* ``SORT``/``SORT_RO`` ``BY`` a constant sorts a set's members ``ALPHA``, as inside a script on Redis: the
  run first asks the key's ``TYPE`` (one more pending command, not shown to the script; in a split run a
  step of its own);
* Redis → Lua: integer → number; bulk → string; nil → ``false``; array → table; status → ``{ok=…}`` (which
  replies are status replies is in :data:`STATUS_REPLY_COMMANDS`, keyed like the command table); error →
  raised by ``redis.call``, ``{err=…}`` from ``redis.pcall``, with the error code kept (``ERR …``) —
  :mod:`emqlab.scripting.replies`;
* Lua → Redis: number → integer (truncated; out of range, ±inf and NaN → the int64 minimum, as Redis's C
  cast gives on x86-64); ``{err=…}``, ``{ok=…}``, ``{double=…}``, ``{big_number=…}``, ``{map=…}``,
  ``{set=…}`` as Redis converts them for RESP2; tables read raw (metatables ignored) up to the first nil;
  nesting beyond Redis's Lua stack limit ends in its ``reached lua stack limit`` error element — the
  sandbox's ``to_reply`` and :mod:`emqlab.scripting.replies`;
* a ``#!lua`` shebang line with Redis's flag parsing — :mod:`emqlab.scripting.rules`;
* what Redis decides from the server's state: a ``#!lua`` script refused before it runs (``OOM``,
  ``NOREPLICAS``, ``MASTERDOWN`` …), a stale replica's refusals, ``redis.acl_check_cmd`` by ``ACL DRYRUN`` —
  :mod:`emqlab.scripting.serverstate`;
* an instruction-count hook: a run that executes more than ``max_instructions`` Lua instructions without a
  ``redis.call`` ends with a clear error, and Ctrl-C interrupts a looping script (``KeyboardInterrupt``).

Where Valkey differs from Redis 7.0 (error texts and suffix, blocking commands in a script, number texts,
its extra globals), the host follows the server dialect it was given (``LuaHost(dialect=…)``,
:mod:`emqlab.scripting.dialect`; Redis 7.0 by default); ``docs/lua-host.md`` ("Servers tested") lists them.

Strings are bytes end to end (msgpack payloads are not UTF-8).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from emqlab.protocol import messages, stopped
from emqlab.protocol.commands import LineCache
from emqlab.scripting import sandbox as _sandbox
from emqlab.scripting import serverstate
from emqlab.scripting.clock import frozen_clock
from emqlab.scripting.dialect import REDIS7, Dialect
from emqlab.scripting.registry import Script, lua_dir
from emqlab.scripting.replies import (
    STATUS_REPLY_COMMANDS,
    Command,
    LuaScriptError,
    Status,
    as_bytes,
    as_text,
    error_text,
    line_of,
    lua_error_line,
    lua_error_text,
    reply_to_lua,
    tree_to_py,
    wire_error,
)
from emqlab.scripting.rules import (
    Compiled,
    alpha_sort,
    compile_script,
    constant_sort,
    known_command,
    parse_shebang,
    unblocked_reply,
    vet,
)
from emqlab.scripting.rules import confine as outside_run
from emqlab.scripting.sandbox import (
    DEFAULT_MAX_COMMANDS,
    DEFAULT_MAX_INSTRUCTIONS,
    DEFAULT_MAX_SECONDS,
    MAX_MEMORY,
    new_runtime,
    sha1hex,
    soft_cap_kib,
)

__all__ = ["DEFAULT_MAX_INSTRUCTIONS", "STATUS_REPLY_COMMANDS", "Command", "Compiled", "LuaHost", "LuaScriptError",
           "ScriptRun", "Serving", "Status"]


@dataclass(frozen=True)
class Serving:
    """A host that runs a server's own scripts (the embedded server's ``EVAL``,
    :mod:`emqlab.backend.scripts`) rather than a client's: ``prefix`` starts the errors of its limits
    (:data:`emqlab.protocol.messages.SERVER_ERROR`), ``memory_text`` follows it when the Lua heap is spent,
    ``hints`` name the settings in the limits' texts (``budget_hint``, ``commands_hint``, ``seconds_hint``:
    bytes); ``tick()`` is asked by the count hook whether the run must stop (a ``SCRIPT KILL``),
    ``stopped_at(line)`` told the line it stopped at, ``log(level, message)`` takes ``redis.log``."""

    prefix: str
    memory_text: str
    hints: dict[str, bytes]
    tick: Callable[[], bool]
    stopped_at: Callable[[Any], None]
    log: Callable[[Any, Any], None]


class LuaHost:
    """One Lua 5.1 runtime with Redis 7's scripting sandbox. Not thread-safe (one per thread).

    Limits of one run, each ending it with an ``emqlab host:`` error (0: none): ``max_instructions`` Lua
    instructions and ``max_seconds`` CPU seconds over all its steps, ``max_commands`` commands; and
    ``max_memory`` bytes of Lua heap for all the host's runs together (``not enough memory``). Defaults:
    :mod:`emqlab.scripting.sandbox`. ``db``: the database the caller's connection is on, restored after a
    script that ``SELECT``\\ s another (:meth:`run` reads it from a redis-py client). ``dialect``: the server
    the host's scripts are compared with (:mod:`emqlab.scripting.dialect`; Redis 7.0 by default; for a live
    server ``server_dialect(conn)``): its error texts, the commands a script may call, its sandbox's globals.
    ``serving``: the host runs a server's own scripts (:class:`Serving`).

    >>> host = LuaHost()
    >>> run = host.start(b"return redis.call('GET', KEYS[1])", [b"k"], [])
    >>> run.pending
    (b'GET', b'k')
    >>> run.resume(b"v")
    >>> run.done, run.result
    (True, b'v')
    """

    def __init__(self, lib_dir: str | Path | None = None, *, max_instructions: int = DEFAULT_MAX_INSTRUCTIONS,
                 max_commands: int = DEFAULT_MAX_COMMANDS, max_memory: int = MAX_MEMORY,
                 max_seconds: float = DEFAULT_MAX_SECONDS, db: int = 0, dialect: Dialect = REDIS7,
                 serving: Serving | None = None) -> None:
        self.dialect = dialect
        self._frozen_time = dialect.frozen_time
        self.runtime = new_runtime(unpack_returned_tuples=False, max_memory=max_memory or None)
        lib = Path(lib_dir) if lib_dir else lua_dir() / "lib"
        self.logs: list[tuple[int, bytes]] = []
        self.max_instructions = int(max_instructions)
        self.max_commands = int(max_commands)
        self.max_memory = int(max_memory)
        self.serving = serving
        prefix = serving.prefix if serving is not None else messages.HOST_ERROR
        self._oom = prefix + (serving.memory_text if serving is not None else messages.OUT_OF_MEMORY % (
            "the host's", "LuaHost(max_memory=...)", self.max_memory))
        soft_oom = self._oom[len(prefix):]
        hints = serving.hints if serving is not None else {
            "budget_hint": b"LuaHost(max_instructions=...)", "commands_hint": b"LuaHost(max_commands=...)",
            "seconds_hint": b"LuaHost(max_seconds=...)"}
        self.db = int(db)
        self._interrupted = False
        #: the stop signal's exception that ended a run inside the Lua hook (raised again by _step)
        self._stop: BaseException | None = None
        helpers = {
            b"sha1hex": sha1hex,
            b"log": lambda level, msg: self.logs.append((int(level), msg)),
            b"tick": self._tick,
            b"known_command": lambda name, sub: known_command(name, sub),
        }
        if serving is not None:
            helpers[b"stopped_at"] = serving.stopped_at
            helpers[b"log"] = serving.log
        api = _sandbox.load(self.runtime, lib, helpers, memory_text=soft_oom.encode(),
                             memory_kib=soft_cap_kib(self.max_memory), max_seconds=float(max_seconds),
                             dialect=self.runtime.table_from(dialect.lua_options()),
                             msg=self.runtime.table_from(dialect.lua_texts()), error_prefix=prefix.encode(),
                             no_lines=serving is not None, acl_query=serving is None, **hints)
        self._start = api[b"start"]
        #: Redis Functions' runs (emqlab.scripting.functions): a library's load, a function's call
        self._start_library = api[b"start_library"]
        self._start_function = api[b"start_function"]
        self._step_lua = api[b"step"]
        self._drop = api[b"drop"]
        self._live_runs = api[b"live_runs"]
        self._lines_of = api[b"lines_of"]
        self._memory_kib = api[b"memory_kib"]
        # ids of runs garbage-collected in Python before they ended or were closed; a ScriptRun's __del__
        # only appends here (it may run at any point, even inside a call into Lua), the host drops them
        # at its next start(), live_runs or memory_kib()
        self._orphans: list[int] = []
        self._to_reply = api[b"to_reply"]
        self._null = api[b"null"]
        self._compiled: dict[bytes, Compiled] = {}
        #: what a run does with each command line its scripts issue (_vet)
        self._vetted: LineCache[tuple[bytes | None, Command | None, bool]] = LineCache()
        #: each compiled text's SHA1 (hex), hashed once: a BullMQ script is tens of KB, started thousands of times
        self._sha: dict[bytes, str] = {}
        self._table_from = self.runtime.table_from
        self._lua_type = _sandbox.lua_type
        #: the ACL user of each connection :meth:`run` has asked (``ACL WHOAMI``), by the connection
        self._users: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()

    def _tick(self) -> bool:
        # called by the count hook every sandbox.HOOK_EVERY instructions: a pending stop signal's handler runs
        # here (Python runs its signal handlers when it runs Python code) and raises — KeyboardInterrupt for
        # Ctrl-C, SystemExit for SIGTERM / SIGHUP (emqlab.ui.entry); the hook then ends the run, and _step
        # raises that same exception once Lua has unwound (a SIGHUP must not come back as a Ctrl-C)
        try:
            if self.serving is not None and self.serving.tick():
                return True
            return self._interrupted
        except (KeyboardInterrupt, SystemExit) as e:
            self._interrupted = True
            self._stop = e
            return True

    def _step(self, co: int, tag: int, value: Any) -> tuple[Any, ...]:
        try:
            out = self._step_lua(co, tag, value, self.max_instructions, self.max_commands)
        except KeyboardInterrupt:
            self._interrupted = True
            raise
        except _sandbox.LuaMemoryError:  # (out of memory outside the script's coroutine: its own text is empty)
            self._collect(co)
            return (2, self._oom.encode())
        if out[0] == 2:
            err = out[1][b"err"] if self._lua_type(out[1]) == "table" else out[1]
            if err in (b"not enough memory", self._oom.encode()):
                self._collect(co)
                out = (2, self._oom.encode(), *out[2:])
        if out[0] == 2 and self._lua_type(out[1]) == "table" and out[1][b"interrupted"]:
            self._interrupted = False
            stop, self._stop = self._stop, None
            if stop is None:  # (raised before _tick's try: Lua got it as an error; the handler recorded it)
                stop = stopped.raised
            raise stop if stop is not None else KeyboardInterrupt()
        return tuple(out)

    def _collect(self, co: int) -> None:
        # a run that ran out of memory: release it and collect its garbage with the cap lifted (Lua 5.1 does not
        # collect when an allocation fails, and one that fails outside a protected call aborts the process)
        if self.max_memory:
            self.runtime.set_max_memory(0)
        try:
            self._drop(co)
            self._memory_kib()
        finally:
            if self.max_memory:
                self.runtime.set_max_memory(self.max_memory)

    def _vet(self, cmd: Command, flags: frozenset[str],
             confine: bytes | None) -> tuple[bytes | None, Command | None, bool]:
        """What a run does with a command its script issued: ``(refusal or None, the command sent instead or
        None, whether it is a constant-BY SORT)`` (:func:`~emqlab.scripting.rules.vet`, then the run's key
        confinement, then :func:`~emqlab.scripting.rules.constant_sort`); remembered per command line."""
        def compute() -> tuple[bytes | None, Command | None, bool]:
            refusal, sent = vet(cmd, flags, self.dialect)
            if refusal is None and confine is not None:
                refusal = outside_run(sent, confine)
            return refusal, None if sent is cmd else sent, refusal is None and constant_sort(sent)

        return self._vetted.answer((self.dialect, confine, flags, *cmd), sum(map(len, cmd)), compute)

    # -- compiling -------------------------------------------------------------------------------------
    def compile(self, text: bytes) -> Compiled:
        """Compile ``text`` once (cached by content). Raises :class:`LuaScriptError` with Redis's message
        for a syntax error (``Error compiling script (new function): …``) or a bad ``#!`` line."""
        found = self._compiled.get(text)
        if found is None:
            found = self._compiled[text] = compile_script(text, self.dialect)
        return found

    # -- running ---------------------------------------------------------------------------------------
    def start(self, script: Script | bytes | str, keys: Sequence[Any], args: Sequence[Any] = (), *,
              db: int | None = None, confine: bytes | None = None, read_only: bool = False,
              resp3: bool = False, acl_user: bytes | None = None, server_checks: bool = False) -> ScriptRun:
        """A new run of ``script`` with ``KEYS``/``ARGV``; it advances to its first ``redis.call``.
        ``db``: the caller's database (default :attr:`db`), restored after a ``SELECT`` in the script.
        ``confine``: a run's key prefix; a command that names a key outside it, or reaches every key,
        another database or server, is refused (:func:`emqlab.scripting.rules.confine`).
        ``read_only``: the run is an ``EVAL_RO``/``EVALSHA_RO``: its writes are refused as in a
        ``flags=no-writes`` script, and a script whose shebang lacks that flag is refused before it runs
        (:class:`LuaScriptError`, Redis's text). ``resp3``: the result is for a RESP3 client (the embedded
        server's): a ``{double=…}`` comes back a float, a ``{map=…}`` a
        :class:`emqlab.scripting.replies.MapReply`. ``acl_user``: the ACL user of the connection the run's
        commands go to, when known (else a ``redis.acl_check_cmd`` first asks ``ACL WHOAMI``).
        ``server_checks`` (:meth:`run` sets it): a ``MASTERDOWN`` reply is read as Redis reads a stale replica,
        and a ``redis.acl_check_cmd`` asks the server (:class:`ScriptRun`); false, the default for a run that
        a scheduler steps (the engine's split runs, which stop at a server fault themselves; the embedded
        server's ``EVAL``): a ``MASTERDOWN`` is the command's error like any other, and
        ``redis.acl_check_cmd`` answers true without asking.

        A run holds its Lua coroutine until it ends (a value or an error) or is closed
        (:meth:`ScriptRun.close`, or ``with host.start(…) as run:``): close a run you stop driving."""
        if self._orphans:
            self._drop_orphans()
        text = script.text if isinstance(script, Script) else as_bytes(script)
        compiled = self.compile(text)
        flags = compiled.flags
        if read_only:
            if compiled.shebang and "no-writes" not in flags:
                raise LuaScriptError(messages.RO_CALL_OF_WRITING_SCRIPT.removeprefix("ERR "))
            flags = flags | {"no-writes"}
        co = self._start(compiled.bytecode, self._table_from([as_bytes(k) for k in keys]),
                         self._table_from([as_bytes(a) for a in args]), server_checks)
        sha = self._sha.get(text)
        if sha is None:
            sha = self._sha[text] = hashlib.sha1(text).hexdigest()
        return ScriptRun(self, co, sha, flags, self.db if db is None else int(db), confine, resp3, acl_user,
                         server_checks)

    @property
    def live_runs(self) -> int:
        """How many runs still hold a Lua coroutine: started, and neither ended nor closed."""
        self._drop_orphans()
        return int(self._live_runs())

    def memory_kib(self) -> float:
        """The Lua heap in KiB (``collectgarbage('count')``) after a full collection, the host's cache of
        loaded scripts (kept for their next runs) emptied first. Lua objects that Python still references
        (lupa wrappers not yet collected) count as live."""
        self._drop_orphans()
        return float(self._memory_kib())

    def _drop_orphans(self) -> None:
        while self._orphans:
            self._drop(self._orphans.pop())

    def run(self, conn: redis.Redis | Callable[..., Any], script: Script | bytes | str, keys: Sequence[Any],
            args: Sequence[Any] = (), on_command: Callable[[Command, Any], None] | None = None, *,
            confine: bytes | None = None, read_only: bool = False, server_checks: bool = True) -> Any:
        """Run ``script`` to its end, one command per round trip, against ``conn``: a
        :func:`emqlab.backend.executor.command_executor` or a :func:`emqlab.backend.clients.raw_client`. Returns what
        ``EVALSHA`` would return; raises :class:`LuaScriptError` likewise.

        The run is atomic on an in-process fakeredis executor (nothing else runs between its commands), so
        there its commands see one instant, as a script's do on Redis (:func:`emqlab.scripting.clock.frozen_clock`);
        against a live server each command reads the server's clock. ``confine``, ``read_only``: as for
        :meth:`start`.

        ``server_checks``: a script with a ``#!lua`` line is first put to the server as Redis checks it before
        it runs (one ``EVAL`` of an empty script with the same line, not shown to ``on_command``:
        :func:`emqlab.scripting.serverstate.probe`); a refusal (``OOM``, ``NOREPLICAS``, ``MASTERDOWN`` …) is
        raised as Redis's ``EVAL`` answers it, before the script runs; a ``MASTERDOWN`` reply is read as
        Redis reads a stale replica, and a ``redis.acl_check_cmd`` asks the server, the connection's user
        once (``ACL WHOAMI``, remembered per ``conn``) (:class:`ScriptRun`). False: none of these (the
        engine's steps, whose footprint is every command sent and which stop at a server fault themselves)."""
        execute = conn.execute_command if isinstance(conn, redis.Redis) else conn
        db = _db_of(conn, self.db)
        text = script.text if isinstance(script, Script) else as_bytes(script)
        if server_checks and text.startswith(b"#!"):
            self._check_up_front(text, [as_bytes(k) for k in keys], execute)
        user = self._user_of(conn)
        # (the run is closed if the backend raises)
        with frozen_clock(), self.start(text, keys, args, db=db, confine=confine, read_only=read_only,
                                        acl_user=user, server_checks=server_checks) as run:
            while run.pending is not None:
                cmd = run.pending
                try:
                    reply: Any = execute(*cmd)
                except redis.exceptions.ResponseError as e:
                    reply = e
                if on_command is not None:
                    on_command(cmd, reply)
                run.resume(reply)
            if run.acl_user is not None and run.acl_user != user:
                self._remember_user(conn, run.acl_user)
            return run.value()

    def _check_up_front(self, text: bytes, keys: list[bytes], execute: Callable[..., Any]) -> None:
        # a refusal of the probe that Redis gives the script itself before it runs (a text whose #! line
        # does not parse: start() raises Redis's error for it, as Redis does without taking flags from it)
        try:
            _body, flags = parse_shebang(text, self.dialect)
        except LuaScriptError:
            return
        try:
            execute(*serverstate.probe(flags, keys))
        except redis.exceptions.ResponseError as e:
            refusal = serverstate.up_front(error_text(e))
            if refusal is not None:
                raise LuaScriptError(as_text(refusal).removeprefix("ERR "), wire_error(refusal)) from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            raise  # (the server is gone: the run would meet it at its first command)
        except Exception:  # noqa: BLE001 - a backend that cannot send it (a cluster's keyless EVAL): no answer
            return

    def _user_of(self, conn: Any) -> bytes | None:
        try:
            return self._users.get(conn)
        except TypeError:  # (a connection that takes no weak reference: asked in each run)
            return None

    def _remember_user(self, conn: Any, user: bytes) -> None:
        try:
            self._users[conn] = user
        except TypeError:
            pass


def _db_of(conn: Any, default: int) -> int:
    if isinstance(conn, redis.Redis):
        try:
            return int(conn.connection_pool.connection_kwargs.get("db", 0) or 0)
        except (AttributeError, TypeError, ValueError):
            return default
    return int(getattr(conn, "db", default) or 0)


class ScriptRun:
    """One script run, stepped by its caller (a scheduler).

    ``pending`` is the next command (a tuple of bytes, e.g. ``(b"DEL", b"emq:{q}:1:lock")``) or ``None``
    once the script has ended; ``resume(reply)`` answers it with the backend's raw RESP2 reply (or the
    ``redis.ResponseError`` the backend raised) and runs the script to its next command. When ``done``,
    ``result`` holds what ``EVALSHA`` would have returned, or ``error`` the :class:`LuaScriptError`.
    ``commands`` counts the commands issued so far; a command the host refuses (as Redis refuses it inside a
    script) is never pending and never counts, it is listed in ``refused`` with the error the script got.

    A script that ``SELECT``\\ ed another database gets one last pending command after its end, ``SELECT
    <caller's db>`` (``restoring`` is true then); its reply is not shown to the script.

    With ``server_checks`` (:meth:`LuaHost.start`), a ``redis.acl_check_cmd`` is a question to the server
    (:mod:`emqlab.scripting.serverstate`): pending ``ACL WHOAMI`` while :attr:`acl_user` is not known, then
    ``ACL DRYRUN <user> <command> <args…>``, neither counted in ``commands``; the script gets true or false
    (true where the server cannot tell). And a ``MASTERDOWN`` reply ends the run as Redis refuses the ``EVAL``
    on a stale replica, unless the script is ``allow-stale`` (its command then fails with Redis's own
    refusal). Where the dialect freezes ``TIME`` (Valkey), every ``TIME`` of the run is still sent, and
    answered with the run's first reply.

    A run that ends releases its Lua coroutine by itself. A run abandoned before its end must be closed
    (:meth:`close`, or use the run as a context manager): until then the host keeps its coroutine, its
    stack and its KEYS/ARGV. ``closed`` is true once the coroutine is released (ended or closed).
    """

    __slots__ = ("host", "co", "sha", "flags", "pending", "done", "result", "error", "commands", "closed",
                 "caller_db", "db", "restoring", "refused", "confine", "resp3", "acl_user", "_ended", "_where",
                 "_asked", "_sort", "_acl", "_time", "_stale")

    def __init__(self, host: LuaHost, co: Any, sha: str, flags: frozenset[str] = frozenset(),
                 caller_db: int = 0, confine: bytes | None = None, resp3: bool = False,
                 acl_user: bytes | None = None, server_checks: bool = False) -> None:
        self.host = host
        #: a MASTERDOWN reply is read as Redis reads a stale replica
        self._stale = server_checks
        #: the ACL user of the run's connection (``ACL WHOAMI``), once known
        self.acl_user = acl_user
        #: the words of a ``redis.acl_check_cmd`` whose question to the server is pending
        self._acl: Command | None = None
        #: the run's first ``TIME`` reply, every later ``TIME``'s answer where the dialect freezes it
        self._time: Any = None
        #: the result is for a RESP3 client: a ``{double=…}`` a float, a ``{map=…}`` a MapReply
        self.resp3 = resp3
        self.co = co
        self.sha = sha
        self.flags = flags
        self.pending: Command | None = None
        self.done = False
        self.result: Any = None
        self.error: LuaScriptError | None = None
        self.commands = 0
        self.closed = False
        self.caller_db = caller_db
        self.db = caller_db
        self.restoring = False
        #: the commands the host refused (never sent), each with the error the script got
        self.refused: list[tuple[Command, bytes]] = []
        #: the run's key prefix the script is kept to (``None``: not kept)
        self.confine = confine
        self._ended: tuple[Any, ...] | None = None
        #: a command the script issued is pending (its lines are on the Lua stack: :attr:`lines` reads them)
        self._where = False
        #: the command as the script asked for it, when ``pending`` is another one (BLPOP sent as LMPOP)
        self._asked: Command | None = None
        self._sort: Command | None = None
        self._advance(self.host._step(co, 0, None))

    @property
    def lines(self) -> tuple[int, ...]:
        """Where the pending command was issued: the script's line numbers on the Lua stack, innermost
        (the ``redis.call`` itself, maybe in an included function) first, the main chunk's last; ``()``
        when nothing is pending (or for the ``SELECT`` that restores the caller's database). Lines count
        in the text the host ran (a flattened script: includes inlined)."""
        if not self._where or self.pending is None or self.restoring:
            return ()
        return tuple(int(x) for x in bytes(self.host._lines_of(self.co)).split(b",") if x)

    @property
    def line(self) -> int:
        """The line of the pending ``redis.call`` (0 when nothing is pending)."""
        lines = self.lines
        return lines[0] if lines else 0

    def resume(self, reply: Any) -> None:
        """Answer the pending command with ``reply`` and advance to the next command or the end.

        Raises ``RuntimeError`` when the run has ended or was closed."""
        if self.pending is None:
            if self.closed and not self.done:
                raise RuntimeError("this script run was closed before it ended; it cannot be resumed")
            raise RuntimeError("this script run has no pending command (it has ended)")
        if self.restoring:
            self.restoring = False
            self.pending = None
            self.db = self.caller_db
            assert self._ended is not None
            self._finish(self._ended)
            return
        if self._sort is not None:
            sort, self._sort = self._sort, None
            self.pending = self._asked = alpha_sort(sort) if reply in (b"set", "set") else sort
            return
        if self._acl is not None:
            self._answer_acl(reply)
            return
        cmd = self.pending
        if isinstance(reply, BaseException):
            whole, text = serverstate.stale(error_text(reply), self.flags) if self._stale else (False,
                                                                                                  error_text(reply))
            if whole:
                self.host._drop(self.co)
                self._end((4, text))
                return
            out = self.host._step(self.co, 1, text)
        else:
            if self.host._frozen_time and cmd[0].upper() == b"TIME":
                if self._time is None:
                    self._time = reply
                reply = self._time
            if cmd[0].upper() == b"SELECT":
                self.db = int(cmd[1])
            asked = self._asked
            if asked is not None and asked is not cmd:  # sent as another command (BLPOP as LMPOP)
                reply = unblocked_reply(asked, reply)
                cmd = asked
            out = self.host._step(self.co, 0, reply_to_lua(self.host._table_from, cmd, reply))
        self._advance(out)

    def _answer_acl(self, reply: Any) -> None:
        words = self._acl
        assert words is not None
        if self.pending is not None and self.pending[1] == b"WHOAMI":
            self.acl_user = serverstate.user_of(reply)
            if self.acl_user is not None:
                self.pending = serverstate.acl_query(self.acl_user, words)
                return
            verdict: bool | None = None
        else:
            verdict = serverstate.acl_verdict(reply)
        self._acl = None
        self._advance(self.host._step(self.co, 0, True if verdict is None else verdict))

    def close(self) -> None:
        """Abandon the run: release its Lua coroutine so it can be collected. Afterwards ``pending`` is
        ``None`` and :meth:`resume` raises ``RuntimeError``; a run that has ended keeps its ``result`` or
        ``error``. Idempotent. (A run closed while ``restoring`` leaves the connection on the script's
        database: send ``SELECT caller_db`` yourself.)"""
        if self.restoring:
            self.restoring = False
            self.pending = None
            assert self._ended is not None
            self._finish(self._ended)
        if self.closed:
            return
        self.closed = True
        self.pending = None
        self.host._drop(self.co)

    def __enter__(self) -> ScriptRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A run dropped without close(): hand its id to the host, which releases it at its next start().
        # (No call into Lua here: __del__ may run in the middle of one.)
        try:
            if not self.closed:
                self.host._orphans.append(self.co)
        except AttributeError:  # __init__ did not get far enough
            pass

    def value(self) -> Any:
        """The result, or raise the script's error (what ``EVALSHA`` would do)."""
        if not self.done:
            if self.closed:
                raise RuntimeError("the script run was closed before it ended")
            raise RuntimeError("the script has not ended")
        if self.error is not None:
            raise self.error
        return self.result

    def _advance(self, out: tuple[Any, ...]) -> None:
        while out[0] == 0 or out[0] == 3:
            if len(out) > 2 or type(out[1]) is bytes:  # (its words; a long command comes as its table)
                cmd: Command = out[1:]
            else:
                args = out[1]
                cmd = tuple(bytes(args[i]) for i in range(1, int(args[b"n"]) + 1))
            if out[0] == 3:  # redis.acl_check_cmd's question (not the script's command: not vetted, not counted)
                self._acl = cmd
                self._where = True
                self.pending = serverstate.acl_query(self.acl_user, cmd)
                return
            asked = cmd
            refusal, sent, sort = self.host._vet(cmd, self.flags, self.confine)
            if sent is not None:
                cmd = sent
            if refusal is None:
                self._asked = asked
                self.commands += 1
                self._where = True
                if sort:
                    # Redis sorts a set's members ALPHA when a script sorts it BY a constant; which type
                    # the key holds only the backend knows: ask it first
                    self._sort = cmd
                    self.pending = (b"TYPE", cmd[1])
                else:
                    self.pending = cmd
                return
            self.refused.append((cmd, refusal))
            out = self.host._step(self.co, 1, refusal)
        self._end(out)

    def _end(self, out: tuple[Any, ...]) -> None:
        self.pending = None
        self._where = False
        self.closed = True  # the Lua side released the coroutine when it died
        if self.db != self.caller_db:
            self._ended = out
            self.restoring = True
            self.pending = (b"SELECT", str(self.caller_db).encode())
            return
        self._finish(out)

    def _finish(self, out: tuple[Any, ...]) -> None:
        self.done = True
        if out[0] == 4:  # (the whole run refused, as Redis refuses the EVAL: no suffix)
            self.error = LuaScriptError(as_text(out[1]).removeprefix("ERR "), wire_error(out[1]))
            return
        if out[0] == 1:
            tree = self.host._to_reply(out[1], self.resp3)
            try:
                self.result = tree_to_py(tree, status=self.host.serving is not None)
            except LuaScriptError as e:  # a returned {err=…}: Redis adds nothing
                self.error = e
        else:
            source = as_text(out[2]) if len(out) > 2 and out[2] is not None else "@user_script"
            line = int(out[3]) if len(out) > 3 and out[3] is not None else 0
            msg, err = lua_error_text(out[1]), out[1]
            line = line or lua_error_line(err) or line_of(msg)
            suffix = self.host.dialect.error_suffix(self.sha, source, line)
            # on the wire: a raised table's err as it is (a command's error keeps its code), a raised
            # string after ERR (Redis's error handler), each with the suffix
            raw = err[b"err"] if self.host._lua_type(err) == "table" else None
            raw = as_bytes(raw) if isinstance(raw, bytes) else b"ERR " + as_bytes(msg)
            self.error = LuaScriptError(msg + suffix, wire_error(raw + suffix.encode()))

