"""The client-side Lua host: Redis's scripting environment on a ``lupa.lua51`` runtime, with each
``redis.call`` yielded to Python as one command.

Why it exists: to run the *same* script text either atomically (``EVALSHA`` on the server: no other client
runs inside it) or **split** — client-side, each ``redis.call`` sent to the server as its own command, with a
scheduling point before every one. The host runs a script as a Lua coroutine; ``redis.call`` yields the
command, Python sends it to the backend and resumes the script with the converted reply. Driving the
coroutine to its end in one go is the simulation's atomic run; each yield is a gap in which another actor
may run.

Fidelity (checked against Redis 7.0 in ``tests/test_luahost.py``; the rules are those of the Redis docs,
"Scripting with Lua" → "Data type conversion" and "Script execution environment"):

* Lua 5.1 (Redis embeds Lua 5.1; 5.2+ lack the global ``unpack`` real scripts use).
* ``KEYS``, ``ARGV``; ``redis.call``, ``redis.pcall``, ``redis.error_reply``, ``redis.status_reply``,
  ``redis.sha1hex``, ``redis.log`` and ``redis.LOG_*``, ``redis.setresp(2)``, ``redis.replicate_commands``;
  ``cjson`` (encode, decode, null), ``cmsgpack`` (pack, unpack — emqlab's pure-Lua module, the same file
  fakeredis loads), ``bit`` (pure Lua, LuaBitOp API). ``struct`` is **not** provided: a script touching it
  gets Redis's "nonexistent global variable" error.
* The global table is read-only ("Attempt to modify a readonly table"), reading an undefined global is an
  error, and ``os``, ``io``, ``require``, ``loadfile``, ``dofile``, ``package``, ``debug`` are absent.
* Redis → Lua: integer → number; bulk → string; nil bulk / nil multi-bulk → ``false``; array → table
  (nested); status → ``{ok=…}``; error → raised as a Lua error by ``redis.call`` (``pcall`` sees its
  message, as Redis 7 does), returned as ``{err=…}`` by ``redis.pcall``.
* Lua → Redis: number → integer reply (truncated toward zero); table → array up to the first nil;
  ``{ok=…}`` → status; ``{err=…}`` → error; ``true`` → 1; ``false``/nil → nil.
* Command arguments must be strings or numbers; numbers are formatted like Redis 7.0 (``%.17g``).
* Strings are bytes end to end (msgpack payloads are not UTF-8).

Which replies are *status* replies is not visible in redis-py's parsed RESP2 (both status and bulk parse to
bytes), so the host knows them by command (:data:`STATUS_REPLY_COMMANDS`, from the "Reply" section of each
command's page on redis.io).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import redis

from .registry import Script, lua_dir

Command = tuple[bytes, ...]

#: Commands whose success reply is a RESP *status* (simple string) — become ``{ok=…}`` tables in Lua.
STATUS_REPLY_COMMANDS: frozenset[bytes] = frozenset(
    c.encode()
    for c in (
        "SET SETEX PSETEX MSET RENAME LSET LTRIM HMSET TYPE SELECT FLUSHDB FLUSHALL RESTORE SWAPDB "
        "PFMERGE MIGRATE XSETID WATCH UNWATCH MULTI DISCARD"
    ).split()
)


class LuaScriptError(redis.exceptions.ResponseError):
    """An error reply produced by a script run in the host (an error raised inside the script, or a
    ``{err=…}`` return). The message has Redis 7's shape, e.g. ``user_script:3: boom script: <sha1>, on
    @user_script:3.``"""


@dataclass(frozen=True)
class Status:
    """A status reply (``+OK``); ``bytes(Status(b"OK")) == b"OK"``."""

    value: bytes

    def __bytes__(self) -> bytes:
        return self.value


_SANDBOX_LUA = r"""
local sandbox_base, cmsgpack_src, bit_src, py = ...
local pack_n = function(...) return {n = select('#', ...), ...} end

-- the yielding core of redis.call / redis.pcall -----------------------------------------------------
local function format_arg(v)
  local t = type(v)
  if t == 'string' then return v end
  if t == 'number' then return string.format('%.17g', v) end
  return nil
end

local getinfo = debug.getinfo
local function script_line()
  -- the innermost frame of the script itself; a script that tail-calls redis.call (`return
  -- redis.call(…)`) has no frame left, and the line is reported as 0
  for level = 3, 12 do
    local info = getinfo(level, 'Sl')
    if info == nil then break end
    if info.source == '@user_script' then return info.currentline end
  end
  return 0
end

local function command(raise, ...)
  local n = select('#', ...)
  if n == 0 then
    error({err = 'Please specify at least one argument for this redis lib call', line = script_line()})
  end
  local args = {...}
  for i = 1, n do
    local a = format_arg(args[i])
    if a == nil then
      error({err = 'Lua redis lib command arguments must be strings or integers', line = script_line()})
    end
    args[i] = a
  end
  local tag, value = coroutine.yield(n, unpack(args, 1, n))
  if tag == 1 then
    if raise then error({err = value, line = script_line()}) end
    return {err = value}
  end
  return value
end

local redis = {}
-- (not tail calls: script_line() counts the frames)
redis.call = function(...) local r = command(true, ...) return r end
redis.pcall = function(...) local r = command(false, ...) return r end
redis.error_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 2) end
  return {err = msg}
end
redis.status_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 2) end
  return {ok = msg}
end
redis.sha1hex = function(s) return py.sha1hex(tostring(s)) end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = function(level, ...) py.log(level, table.concat({...}, ' ')) end
redis.setresp = function(v)
  if v ~= 2 then error('emqlab host: only RESP2 replies are modelled', 2) end
end
redis.replicate_commands = function() return true end
redis.REPL_ALL, redis.REPL_AOF, redis.REPL_REPLICA, redis.REPL_SLAVE, redis.REPL_NONE = 3, 1, 2, 2, 0
redis.set_repl = function() end

-- pcall/xpcall that let redis.call yield through them (Lua 5.1 cannot yield across pcall) -------------
local function error_message(e)
  if type(e) == 'table' and e.err ~= nil then return e.err end
  return e
end

local function resume_through(co, ok_and_values)
  local r = ok_and_values
  while true do
    if not r[1] then return false, r[2] end
    if coroutine.status(co) == 'dead' then return true, unpack(r, 2, r.n) end
    r = pack_n(coroutine.resume(co, coroutine.yield(unpack(r, 2, r.n))))
  end
end

local function co_pcall(f, ...)
  if type(f) ~= 'function' and (type(f) ~= 'table' or getmetatable(f) == nil) then
    return false, 'attempt to call a ' .. type(f) .. ' value'
  end
  local co = coroutine.create(f)
  local r = pack_n(resume_through(co, pack_n(coroutine.resume(co, ...))))
  if not r[1] then return false, error_message(r[2]) end
  return unpack(r, 1, r.n)
end

local function co_xpcall(f, handler)
  local co = coroutine.create(f)
  local r = pack_n(resume_through(co, pack_n(coroutine.resume(co))))
  if not r[1] then return false, handler(error_message(r[2])) end
  return unpack(r, 1, r.n)
end

-- the library modules -----------------------------------------------------------------------------------
local cjson = {null = setmetatable({}, {__tostring = function() return 'null' end})}
cjson.encode = function(v) return py.cjson_encode(v) end
cjson.decode = function(s) return py.cjson_decode(s) end

local loaded = {}
for name, src in pairs({cmsgpack = cmsgpack_src, bit = bit_src}) do
  if src then
    local chunk = assert(loadstring(src, '@' .. name .. '.lua'))
    loaded[name] = chunk()
  end
end

-- the global environment a script sees ------------------------------------------------------------------
local allowed = {
  'assert', 'error', 'getmetatable', 'ipairs', 'next', 'pairs', 'rawequal', 'rawget', 'rawset',
  'select', 'setmetatable', 'tonumber', 'tostring', 'type', 'unpack', 'loadstring', 'gcinfo',
  'collectgarbage', '_VERSION', 'getfenv', 'setfenv', 'print',
}
for _, name in ipairs(allowed) do sandbox_base[name] = _G[name] end
for _, lib in ipairs({'string', 'table', 'math', 'coroutine'}) do
  local copy = {}
  for k, v in pairs(_G[lib]) do copy[k] = v end
  sandbox_base[lib] = copy
end
sandbox_base.pcall, sandbox_base.xpcall = co_pcall, co_xpcall
-- error() that remembers the script line for {err=…} tables, as Redis reports it
local raw_error = error
sandbox_base.error = function(e, level)
  if type(e) == 'table' and rawget(e, 'err') ~= nil and rawget(e, 'line') == nil then
    local info = getinfo(2, 'l')
    rawset(e, 'line', info and info.currentline or 0)
  end
  level = level or 1
  if level > 0 then level = level + 1 end
  raw_error(e, level)
end
sandbox_base.redis, sandbox_base.cjson = redis, cjson
sandbox_base.cmsgpack, sandbox_base.bit = loaded.cmsgpack, loaded.bit
sandbox_base._G = sandbox_base

local function new_env(keys, argv)
  local per_run = {KEYS = keys, ARGV = argv}
  return setmetatable({}, {
    __index = function(_, name)
      local v = per_run[name]
      if v == nil then v = sandbox_base[name] end
      if v == nil then
        error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
      end
      return v
    end,
    __newindex = function() error('Attempt to modify a readonly table', 2) end,
    __metatable = false,
  })
end

-- compile once, load a fresh copy per run so runs of one script can interleave ----------------------------
local function compile(src)
  local f, err = loadstring(src, '@user_script')
  if not f then return nil, err end
  return string.dump(f), false
end

-- live runs by id: lupa cannot hand a Lua coroutine back to Lua, so Python holds an integer. An entry is
-- the only reference to a run's coroutine (and through it to its stack, KEYS, ARGV and environment):
-- releasing it, at the run's end or by drop(), lets the collector free the run.
local runs, next_id, live = {}, 0, 0

local function release(id)
  if runs[id] ~= nil then
    runs[id] = nil
    live = live - 1
  end
end

local function start(bytecode, keys, argv)
  local f = assert(loadstring(bytecode, '@user_script'))
  setfenv(f, new_env(keys, argv))
  next_id = next_id + 1
  runs[next_id] = coroutine.create(f)
  live = live + 1
  return next_id
end

-- one step: resume, then report (0, n, cmd...) for a command, (1, value) at the end, (2, err) on error
local function step(id, tag, value)
  local co = runs[id]
  if co == nil then return 2, 'emqlab host: this script run was released' end
  local r = pack_n(coroutine.resume(co, tag, value))
  if not r[1] then release(id) return 2, r[2] end
  if coroutine.status(co) == 'dead' then release(id) return 1, r[2] end
  return 0, unpack(r, 2, r.n)
end

local function drop(id) release(id) end
local function live_runs() return live end
local function memory_kib()
  -- twice: the first cycle runs the __gc of lupa's userdata, the second frees what they held
  collectgarbage('collect')
  collectgarbage('collect')
  return collectgarbage('count')
end

-- Lua value -> Redis reply, as a Python-friendly tree: {kind, value}
local function to_reply(v, depth)
  local t = type(v)
  if t == 'string' then return v end
  if t == 'number' then return {'int', v} end
  if t == 'boolean' then if v then return {'int', 1} end return {'nil'} end
  if t == 'table' then
    local e = rawget(v, 'err')
    if type(e) == 'string' then return {'err', e} end
    local ok = rawget(v, 'ok')
    if type(ok) == 'string' then return {'status', ok} end
    local out = {'array'}
    local i = 1
    while v[i] ~= nil do
      out[i + 1] = to_reply(v[i], depth + 1)
      i = i + 1
    end
    return out
  end
  return {'nil'}
end

return {compile = compile, start = start, step = step, drop = drop, live_runs = live_runs,
        memory_kib = memory_kib,
        to_reply = function(v) return to_reply(v, 0) end, null = cjson.null}
"""


class LuaHost:
    """One Lua 5.1 runtime with Redis's scripting sandbox. Not thread-safe (one per thread).

    >>> host = LuaHost()
    >>> run = host.start(b"return redis.call('GET', KEYS[1])", [b"k"], [])
    >>> run.pending
    (b'GET', b'k')
    >>> run.resume(b"v")
    >>> run.done, run.result
    (True, b'v')
    """

    def __init__(self, lib_dir: str | Path | None = None) -> None:
        self.runtime = lua51.LuaRuntime(encoding=None, unpack_returned_tuples=False, register_eval=False)
        lib = Path(lib_dir) if lib_dir else lua_dir() / "lib"
        self.logs: list[tuple[int, bytes]] = []

        def read(name: str) -> bytes | None:
            p = lib / f"{name}.lua"
            return p.read_bytes() if p.is_file() else None

        helpers = self.runtime.table_from(
            {
                b"sha1hex": lambda s: hashlib.sha1(s).hexdigest().encode(),
                b"log": lambda level, msg: self.logs.append((int(level), msg)),
                b"cjson_encode": self._cjson_encode,
                b"cjson_decode": self._cjson_decode,
            }
        )
        setup = self.runtime.execute(b"return function(...) " + _SANDBOX_LUA.encode() + b" end")
        self._base = self.runtime.table()
        api = setup(self._base, read("cmsgpack"), read("bit"), helpers)
        self._compile = api[b"compile"]
        self._start = api[b"start"]
        self._step = api[b"step"]
        self._drop = api[b"drop"]
        self._live_runs = api[b"live_runs"]
        self._memory_kib = api[b"memory_kib"]
        # ids of runs garbage-collected in Python before they ended or were closed; a ScriptRun's __del__
        # only appends here (it may run at any point, even inside a call into Lua), the host drops them
        # at its next start(), live_runs or memory_kib()
        self._orphans: list[int] = []
        self._to_reply = api[b"to_reply"]
        self._null = api[b"null"]
        self._bytecode: dict[bytes, Any] = {}
        self._table_from = self.runtime.table_from
        self._lua_type = lua51.lua_type

    # -- cjson, on Python's json (as fakeredis does) ---------------------------------------------------
    def _lua_to_py(self, v: Any, depth: int = 0) -> Any:
        if depth > 1000:
            raise ValueError("Cannot serialise, excessive nesting (1001)")
        if self._lua_type(v) == "table":
            if v == self._null:
                return None
            items = list(v.items())
            if not items:
                return {}
            keys = [k for k, _ in items]
            if all(isinstance(k, int) and not isinstance(k, bool) for k in keys) and sorted(keys) == list(
                range(1, len(keys) + 1)
            ):
                return [self._lua_to_py(v[i], depth + 1) for i in range(1, len(keys) + 1)]
            out = {}
            for k, val in items:
                key = k.decode("utf-8", "surrogateescape") if isinstance(k, bytes) else _num(k)
                out[str(key)] = self._lua_to_py(val, depth + 1)
            return out
        if isinstance(v, bytes):
            return v.decode("utf-8", "surrogateescape")
        if isinstance(v, float):
            return _num(v)
        return v

    def _cjson_encode(self, v: Any) -> bytes:
        text = json.dumps(self._lua_to_py(v), separators=(",", ":"), ensure_ascii=False)
        return text.replace("/", "\\/").encode("utf-8", "surrogateescape")

    def _py_to_lua(self, v: Any) -> Any:
        if v is None:
            return self._null
        if isinstance(v, str):
            return v.encode("utf-8", "surrogateescape")
        if isinstance(v, list):
            return self._table_from([self._py_to_lua(x) for x in v])
        if isinstance(v, dict):
            return self._table_from({k.encode(): self._py_to_lua(x) for k, x in v.items()})
        return v

    def _cjson_decode(self, s: bytes) -> Any:
        return self._py_to_lua(json.loads(s))

    # -- running ---------------------------------------------------------------------------------------
    def compile(self, text: bytes) -> Any:
        """Compile ``text`` once (cached by content). Raises :class:`LuaScriptError` with Redis's
        "Error compiling script" message for a syntax error."""
        bc = self._bytecode.get(text)
        if bc is None:
            bc, err = self._compile(text)
            if bc is None:
                raise LuaScriptError(f"Error compiling script (new function): {_s(err)}")
            self._bytecode[text] = bc
        return bc

    def start(self, script: Script | bytes | str, keys: Sequence[Any], args: Sequence[Any] = ()) -> ScriptRun:
        """A new run of ``script`` with ``KEYS``/``ARGV``; it advances to its first ``redis.call``.

        A run holds its Lua coroutine until it ends (a value or an error) or is closed
        (:meth:`ScriptRun.close`, or ``with host.start(…) as run:``): close a run you stop driving."""
        if self._orphans:
            self._drop_orphans()
        text = script.text if isinstance(script, Script) else _b(script)
        bc = self.compile(text)
        co = self._start(bc, self._table_from([_b(k) for k in keys]), self._table_from([_b(a) for a in args]))
        return ScriptRun(self, co, hashlib.sha1(text).hexdigest())

    @property
    def live_runs(self) -> int:
        """How many runs still hold a Lua coroutine: started, and neither ended nor closed."""
        self._drop_orphans()
        return int(self._live_runs())

    def memory_kib(self) -> float:
        """The Lua heap in KiB (``collectgarbage('count')``) after a full collection. Lua objects that
        Python still references (lupa wrappers not yet collected) count as live."""
        self._drop_orphans()
        return float(self._memory_kib())

    def _drop_orphans(self) -> None:
        while self._orphans:
            self._drop(self._orphans.pop())

    def run(self, conn: redis.Redis | Callable[..., Any], script: Script | bytes | str, keys: Sequence[Any],
            args: Sequence[Any] = (), on_command: Callable[[Command, Any], None] | None = None) -> Any:
        """Run ``script`` to its end, one command per round trip, against ``conn``: a
        :func:`emqlab.backends.command_executor` or a :func:`emqlab.backends.raw_client`. Returns what
        ``EVALSHA`` would return; raises :class:`LuaScriptError` likewise."""
        execute = conn.execute_command if isinstance(conn, redis.Redis) else conn
        with self.start(script, keys, args) as run:  # closed if the backend or on_command raises
            while run.pending is not None:
                cmd = run.pending
                try:
                    reply: Any = execute(*cmd)
                except redis.exceptions.ResponseError as e:
                    reply = e
                if on_command is not None:
                    on_command(cmd, reply)
                run.resume(reply)
            return run.value()


class ScriptRun:
    """One script run, stepped by its caller (a scheduler).

    ``pending`` is the next command (a tuple of bytes, e.g. ``(b"DEL", b"emq:{q}:1:lock")``) or ``None``
    once the script has ended; ``resume(reply)`` answers it with the backend's raw RESP2 reply (or the
    ``redis.ResponseError`` the backend raised) and runs the script to its next command. When ``done``,
    ``result`` holds what ``EVALSHA`` would have returned, or ``error`` the :class:`LuaScriptError`.
    ``commands`` counts the commands issued so far.

    A run that ends releases its Lua coroutine by itself. A run abandoned before its end must be closed
    (:meth:`close`, or use the run as a context manager): until then the host keeps its coroutine, its
    stack and its KEYS/ARGV. ``closed`` is true once the coroutine is released (ended or closed).
    """

    __slots__ = ("host", "co", "sha", "pending", "done", "result", "error", "commands", "closed")

    def __init__(self, host: LuaHost, co: Any, sha: str) -> None:
        self.host = host
        self.co = co
        self.sha = sha
        self.pending: Command | None = None
        self.done = False
        self.result: Any = None
        self.error: LuaScriptError | None = None
        self.commands = 0
        self.closed = False
        self._advance(self.host._step(co, 0, None))

    def resume(self, reply: Any) -> None:
        """Answer the pending command with ``reply`` and advance to the next command or the end.

        Raises ``RuntimeError`` when the run has ended or was closed."""
        if self.pending is None:
            if self.closed and not self.done:
                raise RuntimeError("this script run was closed before it ended; it cannot be resumed")
            raise RuntimeError("this script run has no pending command (it has ended)")
        if isinstance(reply, BaseException):
            out = self.host._step(self.co, 1, _error_text(reply))
        else:
            out = self.host._step(self.co, 0, _reply_to_lua(self.host, self.pending, reply))
        self._advance(out)

    def close(self) -> None:
        """Abandon the run: release its Lua coroutine so it can be collected. Afterwards ``pending`` is
        ``None`` and :meth:`resume` raises ``RuntimeError``; a run that has ended keeps its ``result`` or
        ``error``. Idempotent."""
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
        kind = out[0]
        if kind == 0:
            self.pending = tuple(out[2:])
            self.commands += 1
            return
        self.pending = None
        self.done = True
        self.closed = True  # the Lua side released the coroutine when it died
        if kind == 1:
            tree = self.host._to_reply(out[1])
            try:
                self.result = _tree_to_py(tree)
            except LuaScriptError as e:
                self.error = self._located(str(e), None)
        else:
            self.error = self._located(_lua_error_text(out[1]), out[1], _lua_error_line(out[1]))

    def _located(self, msg: str, raw: Any, line: int = 0) -> LuaScriptError:
        line = line or _line_of(msg)
        if raw is None:  # a returned {err=…}: Redis adds nothing
            return LuaScriptError(msg)
        return LuaScriptError(f"{msg} script: {self.sha}, on @user_script:{line}.")


# -- conversions ------------------------------------------------------------------------------------------


def _b(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bool):
        raise TypeError("booleans are not Redis arguments")
    if isinstance(v, int):
        return str(v).encode()
    if isinstance(v, float):
        return (str(int(v)) if v.is_integer() else repr(v)).encode()
    raise TypeError(f"cannot send {type(v).__name__} as a Redis argument")


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _num(v: float | int) -> int | float:
    return int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2**63 else v


def _error_text(e: BaseException) -> bytes:
    """redis-py strips the ``ERR `` code from error replies; put it back (Redis scripts see it)."""
    msg = str(e)
    if msg.startswith("unknown command "):  # Redis checks the command table before running it
        return b"ERR Unknown Redis command called from script"
    first = msg.split(" ", 1)[0]
    if not (first.isupper() and first.isalpha()) or isinstance(e, redis.exceptions.NoScriptError):
        msg = "ERR " + msg
    return msg.encode()


def _reply_to_lua(host: LuaHost, cmd: Command, reply: Any) -> Any:
    if type(reply) is bytes:
        if cmd[0].upper() in STATUS_REPLY_COMMANDS and not _is_get_variant(cmd):
            return host._table_from({b"ok": reply})
        return reply
    if isinstance(reply, int):
        return reply
    if reply is None:
        return False
    if isinstance(reply, list):
        return host._table_from([_nested_to_lua(host, x) for x in reply])
    if isinstance(reply, Status):
        return host._table_from({b"ok": reply.value})
    if isinstance(reply, float):  # RESP3 doubles never reach us on RESP2; keep it safe
        return repr(reply).encode()
    raise TypeError(f"unexpected reply {reply!r} to {cmd[0]!r}")


def _nested_to_lua(host: LuaHost, x: Any) -> Any:
    if x is None:
        return False
    if isinstance(x, list):
        return host._table_from([_nested_to_lua(host, y) for y in x])
    if isinstance(x, Status):
        return host._table_from({b"ok": x.value})
    if isinstance(x, BaseException):
        return host._table_from({b"err": _error_text(x)})
    return x


def _is_get_variant(cmd: Command) -> bool:
    # SET … GET returns a bulk string, not a status
    return cmd[0].upper() == b"SET" and any(a.upper() == b"GET" for a in cmd[3:])


def _tree_to_py(tree: Any) -> Any:
    if isinstance(tree, bytes):
        return tree
    kind = tree[1]
    if kind == b"int":
        v = tree[2]
        return int(v) if not isinstance(v, float) else int(v)  # truncation toward zero
    if kind == b"nil":
        return None
    if kind == b"status":
        return tree[2]
    if kind == b"err":
        raise LuaScriptError(_strip_err(_s(tree[2])))
    out = []
    i = 2
    while True:
        item = tree[i]
        if item is None:
            break
        if not isinstance(item, bytes) and item[1] == b"err":
            out.append(LuaScriptError(_strip_err(_s(item[2]))))
        else:
            out.append(_tree_to_py(item))
        i += 1
    return out


def _strip_err(msg: str) -> str:
    # what redis-py does to an error reply: drop a leading "ERR "
    return msg[4:] if msg.startswith("ERR ") else msg


def _lua_error_text(err: Any) -> str:
    if lua51.lua_type(err) == "table":
        e = err[b"err"]
        if e is not None:
            return _strip_err(_s(e))
        return "Error running script: error object is a table"
    return _strip_err(_s(err))


def _lua_error_line(err: Any) -> int:
    if lua51.lua_type(err) == "table":
        line = err[b"line"]
        return int(line) if line is not None else 0
    return 0


def _line_of(msg: str) -> int:
    if msg.startswith("user_script:"):
        rest = msg[len("user_script:"):]
        digits = rest.split(":", 1)[0]
        if digits.isdigit():
            return int(digits)
    return 0
