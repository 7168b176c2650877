"""The client-side Lua host: Redis 7's scripting environment on a ``lupa.lua51`` runtime, with each
``redis.call`` yielded to Python as one command.

Why it exists: to run the *same* script text either atomically (``EVALSHA`` on the server: no other client
runs inside it) or **split** — client-side, each ``redis.call`` sent to the server as its own command, with a
scheduling point before every one. The host runs a script as a Lua coroutine; ``redis.call`` yields the
command, Python sends it to the backend and resumes the script with the converted reply. Driving the
coroutine to its end in one go (:meth:`LuaHost.run`) is the simulation's atomic run; each yield is a gap in
which another actor may run.

What it reproduces (each rule checked against a Redis 7.0 server by ``tests/test_host_differential.py``;
``docs/lua-host.md`` lists the rules and the few intended differences):

* the globals and library tables of Redis 7.0's sandbox, read-only (``Attempt to modify a readonly table``,
  for assignment, ``rawset``, ``setmetatable`` and ``table.insert`` alike), a fresh global table per run
  (nothing one run does is visible to the next, or to another actor's run), reading an undefined global an
  error, no ``print``/``getfenv``/``setfenv``/``os``/``io``/``debug``, no bytecode (``loadstring`` and
  ``load`` compile a chunk starting with ESC as text, as Redis does);
* ``redis.*`` (``call``, ``pcall``, ``error_reply``, ``status_reply``, ``sha1hex``, ``log``, ``setresp``,
  ``set_repl``, ``replicate_commands``, ``acl_check_cmd``, ``breakpoint``, ``debug``, ``REDIS_VERSION``…)
  with Redis's argument checks and messages; ``cjson`` (``lua/lib/cjson.lua``), ``cmsgpack``
  (``lua/lib/cmsgpack.lua``) and ``bit`` (``lua/lib/bit.lua``), pure Lua, written for emqlab;
  ``math.random`` on Redis's own generator;
* the commands Redis refuses inside scripts are refused before they reach a server, with Redis's message
  and in Redis's order (unknown command, arity, ``noscript`` flag, ``#!lua flags=no-writes``, ``XREAD …
  BLOCK``); ``BLMPOP``/``BZMPOP`` behave as inside a script (they never block: sent as ``LMPOP``/``ZMPOP``);
* a ``SELECT`` inside a script is scoped to the run: when the run ends, one more command restores the
  caller's database (:attr:`ScriptRun.pending` shows it like any other);
* Redis → Lua: integer → number; bulk → string; nil → ``false``; array → table; status → ``{ok=…}`` (which
  replies are status replies is in :data:`STATUS_REPLY_COMMANDS`, keyed like the command table); error →
  raised by ``redis.call``, ``{err=…}`` from ``redis.pcall``, with the error code kept (``ERR …``);
* Lua → Redis: number → integer (truncated; out of range, ±inf and NaN → the int64 minimum, as Redis's C
  cast gives on x86-64); ``{err=…}``, ``{ok=…}``, ``{double=…}``, ``{big_number=…}``, ``{map=…}``,
  ``{set=…}`` as Redis converts them for RESP2; tables read raw (metatables ignored) up to the first nil;
  nesting beyond Redis's Lua stack limit ends in its ``reached lua stack limit`` error element;
* a ``#!lua`` shebang line with Redis's flag parsing;
* an instruction-count hook: a run that executes more than ``max_instructions`` Lua instructions without a
  ``redis.call`` ends with a clear error, and Ctrl-C interrupts a looping script (``KeyboardInterrupt``).

Strings are bytes end to end (msgpack payloads are not UTF-8).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import redis

from emqlab.protocol import commands as _commands
from emqlab.scripting.registry import Script, lua_dir

Command = tuple[bytes, ...]

#: Commands (named as in the command table, ``container|sub`` for subcommands) whose success reply is a RESP
#: *status* (simple string); they become ``{ok=…}`` tables in Lua. Checked against a Redis 7.0 server by
#: ``tests/test_host_differential.py``. ``PING`` only without an argument, ``SET`` not with ``GET``.
STATUS_REPLY_COMMANDS: frozenset[str] = frozenset(
    "set setex psetex mset rename lset ltrim hmset type select flushdb flushall restore restore-asking swapdb "
    "pfmerge migrate xsetid ping xgroup|create xgroup|setid slowlog|reset memory|purge".split()
)

#: Default budget of Lua instructions a run may execute between two commands (or before its end).
DEFAULT_MAX_INSTRUCTIONS = 500_000_000
_HOOK_EVERY = 10_000

#: Commands refused in a read-only (``#!lua flags=no-writes``) script although the table does not flag them
#: ``write``: Redis 7.0's ``may-replicate`` commands that a script may call.
_MAY_REPLICATE = frozenset({"publish", "spublish", "pfcount"})
#: Blocking commands that Redis runs without blocking inside a script, and what the host sends instead.
_NON_BLOCKING = {"blmpop": b"LMPOP", "bzmpop": b"ZMPOP"}
_SHEBANG_FLAGS = frozenset({"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"})
_FLOAT = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


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


@dataclass(frozen=True)
class Compiled:
    """A compiled script: its bytecode (for the host's own loader) and its shebang flags."""

    bytecode: bytes
    flags: frozenset[str]


_SANDBOX_LUA = r"""
local py, cmsgpack_src, bit_src, cjson_src, hook_every = ...
-- Everything a script can reach is built here, once per host; a run gets a fresh global table
-- (new_env) whose library tables are shared read-only proxies.
local real_next, real_pairs, real_ipairs = next, pairs, ipairs
local real_rawget, real_rawset, real_rawequal = rawget, rawset, rawequal
local real_setmetatable, real_getmetatable = setmetatable, getmetatable
local real_loadstring, real_pcall, real_error = loadstring, pcall, error
local real_type, real_tostring, real_select, real_unpack = type, tostring, select, unpack
local co_create, co_resume, co_yield, co_status, co_running =
  coroutine.create, coroutine.resume, coroutine.yield, coroutine.status, coroutine.running
local sethook, getinfo = debug.sethook, debug.getinfo
local floor, fmt, gsub, sub = math.floor, string.format, string.gsub, string.sub
local pack_n = function(...) return {n = real_select('#', ...), ...} end

local READONLY = 'Attempt to modify a readonly table'
local CMD = {}                                   -- first value of a command yield
-- a read-only proxy is an empty table whose metatable holds, under private keys, the table it shows and
-- what getmetatable() shows for it (no weak table: a run's proxy and its globals would keep each other)
local RO, VISIBLE = {}, {}
local function backing_of(t)
  if real_type(t) ~= 'table' then return nil end
  local mt = real_getmetatable(t)
  if mt == nil or real_type(mt) ~= 'table' or not real_rawget(mt, RO) then return nil end
  return real_rawget(mt, '__index')
end
local system = real_setmetatable({}, {__mode = 'k'})      -- coroutines of the host itself
local hooked = real_setmetatable({}, {__mode = 'k'})      -- every coroutine with the count hook

local function ro_newindex() real_error(READONLY, 2) end
local function protect(t)
  return real_setmetatable({}, {__index = t, __newindex = ro_newindex, [RO] = true})
end

-- instruction budget and Ctrl-C: a count hook on every coroutine a run uses ---------------------
local budget = {limit = 0, used = 0, abort = nil}
local function hook()
  if budget.abort then real_error(budget.abort, 0) end
  budget.used = budget.used + hook_every
  local ok, stop = real_pcall(py.tick)
  if not ok then
    budget.abort = {err = 'ERR emqlab host: interrupted (KeyboardInterrupt)', interrupted = true}
  elseif stop then
    budget.abort = {err = 'ERR emqlab host: interrupted (KeyboardInterrupt)', interrupted = true}
  elseif budget.limit > 0 and budget.used > budget.limit then
    budget.abort = {err = fmt('ERR emqlab host: the script ran more than %d Lua instructions without a redis.call '
      .. 'or its end (an endless loop?); LuaHost(max_instructions=...) sets the budget', budget.limit), budget = true}
  end
  if budget.abort then
    for co in real_next, hooked do sethook(co, hook, '', 1) end
    real_error(budget.abort, 0)
  end
end
local function new_coroutine(f, is_system)
  local co = co_create(f)
  sethook(co, hook, '', budget.abort and 1 or hook_every)
  hooked[co] = true
  if is_system then system[co] = true end
  return co
end
local function reset_budget(limit)
  local was = budget.abort
  budget.limit, budget.used, budget.abort = limit, 0, nil
  if was then for co in real_next, hooked do sethook(co, hook, '', hook_every) end end
end

-- errors raised for the caller's line -------------------------------------------------------------
local function script_line()
  for level = 2, 40 do
    local info = getinfo(level, 'Sl')
    if info == nil then break end
    if info.source == '@user_script' then return info.currentline end
  end
  return 0
end
-- the script's lines on the stack, innermost first ("12,340"): where a pending redis.call was made
local function where()
  local lines = {}
  for level = 2, 60 do
    local info = getinfo(level, 'Sl')
    if info == nil then break end
    if info.source == '@user_script' then lines[#lines + 1] = info.currentline end
  end
  return table.concat(lines, ',')
end
-- call a library function and re-raise its error at the caller's line, named as the caller named it
local function guarded(name, f)
  return function(...)
    local r = pack_n(real_pcall(f, ...))
    if r[1] then return real_unpack(r, 2, r.n) end
    local msg = r[2]
    if msg == READONLY then real_error(msg, 0) end
    if real_type(msg) == 'string' then
      msg = gsub(msg, "^bad argument #(%d+) to '%?'", "bad argument #%1 to '" .. name .. "'")
      real_error(msg, 2)
    end
    real_error(msg, 0)
  end
end

-- the yielding core of redis.call / redis.pcall ----------------------------------------------------
local function command(raise, ...)
  local n = real_select('#', ...)
  if n == 0 then
    real_error({err = 'ERR Please specify at least one argument for this redis lib call', line = script_line()})
  end
  local args = {...}
  for i = 1, n do
    local a = args[i]
    local t = real_type(a)
    if t == 'number' then
      args[i] = fmt('%.17g', a)
    elseif t ~= 'string' then
      real_error({err = 'ERR Lua redis lib command arguments must be strings or integers', line = script_line()})
    end
  end
  args.n = n
  args.where = where()
  local tag, value = co_yield(CMD, args)
  if tag == 1 then
    if raise then real_error({err = value, line = script_line()}) end
    return {err = value}
  end
  return value
end

local redis = {}
-- (not tail calls: script_line() walks the frames)
redis.call = function(...) local r = command(true, ...) return r end
redis.pcall = function(...) local r = command(false, ...) return r end
local function reply_table(field, name)
  return function(...)
    local msg = ...
    if real_select('#', ...) ~= 1 or real_type(msg) ~= 'string' then
      return {err = 'ERR wrong number or type of arguments'}
    end
    if field == 'err' and sub(msg, 1, 1) == '-' then msg = sub(msg, 2) end
    return {[field] = msg}
  end
end
redis.error_reply = reply_table('err')
redis.status_reply = reply_table('ok')
redis.sha1hex = function(...)
  if real_select('#', ...) ~= 1 then real_error('wrong number of arguments', 0) end
  local s = ...
  local t = real_type(s)
  if t == 'number' then s = real_tostring(s) elseif t ~= 'string' then s = '' end
  return py.sha1hex(s)
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = function(...)
  local n = real_select('#', ...)
  if n < 2 then real_error('redis.log() requires two arguments or more.', 0) end
  local level = ...
  if real_type(level) ~= 'number' then real_error('First argument must be a number (log level).', 0) end
  if level < 0 or level > 3 then real_error('Invalid debug level.', 0) end
  local parts = {}
  for i = 2, n do
    local v = real_select(i, ...)
    local t = real_type(v)
    if t == 'string' or t == 'number' then parts[#parts + 1] = real_tostring(v) end
  end
  py.log(level, table.concat(parts, ' '))
end
redis.setresp = function(...)
  if real_select('#', ...) ~= 1 then real_error('redis.setresp() requires one argument.', 0) end
  local v = ...
  if v ~= 2 and v ~= 3 then real_error('RESP version must be 2 or 3.', 0) end
  if v == 3 then
    real_error('emqlab host: redis.setresp(3) is not modelled (the host speaks RESP2)', 0)
  end
end
redis.replicate_commands = function() return true end
redis.REPL_ALL, redis.REPL_AOF, redis.REPL_REPLICA, redis.REPL_SLAVE, redis.REPL_NONE = 3, 1, 2, 2, 0
redis.set_repl = function(...)
  if real_select('#', ...) ~= 1 then real_error('redis.set_repl() requires two arguments.', 0) end
  local v = ...
  if real_type(v) ~= 'number' or v ~= floor(v) or v < 0 or v > 3 then
    real_error('Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.', 0)
  end
end
redis.acl_check_cmd = function(...)
  local n = real_select('#', ...)
  if n == 0 then real_error('Please specify at least one argument for this redis lib call', 0) end
  local args = {...}
  for i = 1, n do
    local a = args[i]
    if real_type(a) == 'number' then args[i] = fmt('%.17g', a)
    elseif real_type(a) ~= 'string' then
      real_error('Lua redis lib command arguments must be strings or integers', 0)
    end
  end
  if not py.known_command(args[1], args[2]) then
    real_error('Invalid command passed to redis.acl_check_cmd()', 0)
  end
  return true
end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = '7.0.15', 0x07000f

-- pcall/xpcall/coroutines that let redis.call yield through them (Lua 5.1 cannot yield across pcall)
local function error_message(e)
  if real_type(e) == 'table' and e.err ~= nil and not e.budget and not e.interrupted then return e.err end
  return e
end
-- drive co until it ends; its command yields are passed up to our own resumer
local function drive(co, r)
  while true do
    if not r[1] then return r end
    if co_status(co) == 'dead' or r[2] ~= CMD then return r end
    r = pack_n(co_resume(co, co_yield(CMD, r[3])))
  end
end
local function yield_boundary() return 'attempt to yield across metamethod/C-call boundary' end

local function co_pcall(f, ...)
  if real_type(f) ~= 'function' and (real_type(f) ~= 'table' or real_getmetatable(f) == nil) then
    return false, 'attempt to call a ' .. real_type(f) .. ' value'
  end
  local co = new_coroutine(f, true)
  local r = drive(co, pack_n(co_resume(co, ...)))
  if not r[1] then
    if budget.abort then real_error(budget.abort, 0) end
    return false, error_message(r[2])
  end
  return true, real_unpack(r, 2, r.n)
end
local function co_xpcall(f, handler)
  local co = new_coroutine(f, true)
  local r = drive(co, pack_n(co_resume(co)))
  if not r[1] then
    if budget.abort then real_error(budget.abort, 0) end
    return false, handler(error_message(r[2]))
  end
  return true, real_unpack(r, 2, r.n)
end

local user_stack = {}   -- the user coroutines being resumed, innermost last
local lib_coroutine = {}
lib_coroutine.create = guarded('create', function(f)
  if real_type(f) ~= 'function' then real_error("bad argument #1 to 'create' (Lua function expected)", 0) end
  return new_coroutine(f, false)
end)
local function user_resume(co, ...)
  if real_type(co) ~= 'thread' then
    real_error("bad argument #1 to 'resume' (coroutine expected)", 3)
  end
  user_stack[#user_stack + 1] = co
  local r = drive(co, pack_n(co_resume(co, ...)))
  user_stack[#user_stack] = nil
  if not r[1] and budget.abort then real_error(budget.abort, 0) end
  return r
end
lib_coroutine.resume = function(co, ...)
  local r = user_resume(co, ...)
  if not r[1] then return false, error_message(r[2]) end
  return true, real_unpack(r, 2, r.n)
end
lib_coroutine.wrap = function(f)
  local co = lib_coroutine.create(f)
  return function(...)
    local r = user_resume(co, ...)
    if not r[1] then real_error(error_message(r[2]), 0) end
    return real_unpack(r, 2, r.n)
  end
end
lib_coroutine.yield = function(...)
  local co = co_running()
  if co == nil or system[co] then real_error(yield_boundary(), 0) end
  return co_yield(...)
end
lib_coroutine.running = function()
  local co = co_running()
  if co ~= nil and system[co] then return user_stack[#user_stack] end
  return co
end
lib_coroutine.status = guarded('status', function(co)
  local s = co_status(co)
  if s == 'suspended' then
    for i = 1, #user_stack do if user_stack[i] == co then return 'normal' end end
  end
  return s
end)

-- Redis's math.random: the 48-bit linear congruential generator of its rand.c (lrand48) --------
local rx0, rx1, rx2 = 0x330E, 0xABCD, 0x1234
local function lrand48()
  local p0 = 0xE66D * rx0 + 0xB
  local p1 = 0xE66D * rx1 + 0xDEEC * rx0 + floor(p0 / 65536)
  local p2 = 0xE66D * rx2 + 0xDEEC * rx1 + 0x5 * rx0 + floor(p1 / 65536)
  rx0, rx1, rx2 = p0 % 65536, p1 % 65536, p2 % 65536
  return rx2 * 32768 + floor(rx1 / 2)
end
local function checkint(v, i)
  local x = tonumber(v)
  if x == nil then
    real_error(fmt("bad argument #%d to 'random' (number expected, got %s)", i,
      v == nil and 'no value' or real_type(v)), 3)
  end
  return x >= 0 and floor(x) or -floor(-x)
end
local lib_math = {}
for k, v in real_next, math do lib_math[k] = v end
lib_math.random = function(...)
  local n = real_select('#', ...)
  local r = (lrand48() % 2147483647) / 2147483647
  if n == 0 then return r end
  local a, b = ...
  if n == 1 then
    local u = checkint(a, 1)
    if u < 1 then real_error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * u) + 1
  end
  if n == 2 then
    local l, u = checkint(a, 1), checkint(b, 2)
    if l > u then real_error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (u - l + 1)) + l
  end
  real_error('wrong number of arguments', 2)
end
lib_math.randomseed = function(v)
  local x = tonumber(v)
  if x == nil then
    real_error(fmt("bad argument #1 to 'randomseed' (number expected, got %s)",
      v == nil and 'no value' or real_type(v)), 2)
  end
  x = (x >= 0 and floor(x) or -floor(-x)) % 4294967296
  rx0, rx1, rx2 = 0x330E, x % 65536, floor(x / 65536) % 65536
end

-- tables, raw access and metatables that respect the read-only proxies --------------------------
local lib_table = {}
for k, v in real_next, table do lib_table[k] = v end
for _, name in real_ipairs({'insert', 'remove', 'sort', 'setn'}) do
  local f = guarded(name, table[name])
  lib_table[name] = function(t, ...)
    if backing_of(t) then
      if name == 'sort' then return end
      real_error(READONLY, 0)
    end
    return f(t, ...)
  end
end

local function sandbox_next(t, k)
  local b = backing_of(t)
  if b then t = b end
  return real_next(t, k)
end
local base = {}
base.next = guarded('next', sandbox_next)
base.pairs = guarded('pairs', function(t)
  if backing_of(t) then return base.next, t, nil end
  if real_type(t) ~= 'table' then
    local tn = t == nil and 'no value' or real_type(t)
    real_error("bad argument #1 to 'pairs' (table expected, got " .. tn .. ")", 0)
  end
  return base.next, t, nil
end)
base.ipairs = guarded('ipairs', function(t) return real_ipairs(backing_of(t) or t) end)
base.rawget = guarded('rawget', function(t, k) return real_rawget(backing_of(t) or t, k) end)
base.rawset = guarded('rawset', function(t, k, v)
  if backing_of(t) then real_error(READONLY, 0) end
  return real_rawset(t, k, v)
end)
base.setmetatable = guarded('setmetatable', function(t, mt)
  if backing_of(t) then real_error(READONLY, 0) end
  return real_setmetatable(t, mt)
end)
local string_mt_proxy
local null
local current_env = {}
base.getmetatable = function(v)
  if backing_of(v) then return real_rawget(real_getmetatable(v), VISIBLE) end
  if v == null then return nil end
  if real_type(v) == 'string' then return string_mt_proxy end
  return real_getmetatable(v)
end

-- no bytecode: a chunk that starts with ESC is compiled as text, as a Redis without the undumper does
local function refuse_binary(s, chunkname)
  local _, msg = real_loadstring('\1', chunkname or s)
  return nil, (gsub(msg, 'char%(1%)', 'char(27)'))
end
base.loadstring = guarded('loadstring', function(s, chunkname)
  if real_type(s) == 'string' and sub(s, 1, 1) == '\27' then return refuse_binary(s, chunkname) end
  local f, err = real_loadstring(s, chunkname)
  if f then setfenv(f, current_env) end
  return f, err
end)
base.load = function(reader, chunkname)
  if real_type(reader) ~= 'function' then
    real_error("bad argument #1 to 'load' (function expected, got " ..
      (reader == nil and 'no value' or real_type(reader)) .. ")", 2)
  end
  local parts = {}
  while true do
    local piece = reader()
    if piece == nil or piece == '' then break end
    if real_type(piece) ~= 'string' then return nil, 'reader function must return a string' end
    parts[#parts + 1] = piece
  end
  local s = table.concat(parts)
  chunkname = chunkname or '=(load)'
  if sub(s, 1, 1) == '\27' then return refuse_binary(s, chunkname) end
  local f, err = real_loadstring(s, chunkname)
  if f then setfenv(f, current_env) end
  return f, err
end
for _, name in real_ipairs({'assert', 'error', 'rawequal', 'select', 'tonumber', 'tostring', 'type', 'unpack',
                            'gcinfo', 'collectgarbage'}) do
  base[name] = _G[name]
end
base._VERSION = _VERSION
base.pcall, base.xpcall = co_pcall, co_xpcall
-- error() that remembers the script line for {err=...} tables, as Redis reports it
base.error = function(e, level)
  if real_type(e) == 'table' and real_rawget(e, 'err') ~= nil and real_rawget(e, 'line') == nil then
    local info = getinfo(2, 'l')
    real_rawset(e, 'line', info and info.currentline or 0)
  end
  level = level or 1
  if level > 0 then level = level + 1 end
  real_error(e, level)
end
base.__redis__err__handler = function(e) return e end

-- the library modules ---------------------------------------------------------------------------------
null = newproxy(true)
real_getmetatable(null).__tostring = function() return 'userdata: (nil)' end
local function load_module(name, src, ...)
  if not src then return nil end
  local chunk = assert(real_loadstring(src, '@' .. name .. '.lua'))
  return chunk(...)
end
local cjson = load_module('cjson', cjson_src, null)
local cmsgpack = load_module('cmsgpack', cmsgpack_src)
local bit = load_module('bit', bit_src)

base.redis = protect(redis)
base.string = protect(string)
base.math = protect(lib_math)
base.table = protect(lib_table)
base.coroutine = protect(lib_coroutine)
if cjson then base.cjson = protect(cjson) end
if cmsgpack then base.cmsgpack = protect(cmsgpack) end
if bit then base.bit = protect(bit) end
-- ("x"):rep(3) finds string's functions through the shared string metatable, shown read-only
local string_mt = real_getmetatable('')
string_mt.__index = base.string
string_mt_proxy = protect(string_mt)

local function nonexistent(_, name)
  real_error("Script attempted to access nonexistent global variable '" .. real_tostring(name) .. "'", 2)
end
local G_MT = {__index = nonexistent}
local G_MT_PROXY = protect(G_MT)

local function new_env(keys, argv)
  local g = {}
  for k, v in real_next, base do g[k] = v end
  g.KEYS, g.ARGV = keys, argv
  local proxy = real_setmetatable({}, {__index = g, __newindex = ro_newindex, [RO] = true, [VISIBLE] = G_MT_PROXY})
  g._G = proxy
  real_setmetatable(g, G_MT)
  return proxy
end

-- compiling -------------------------------------------------------------------------------------------
local function compile(src)
  if sub(src, 1, 1) == '\27' then
    local _, msg = refuse_binary(src, '@user_script')
    return nil, msg
  end
  local f, err = real_loadstring(src, '@user_script')
  if not f then return nil, err end
  return string.dump(f), false
end

-- live runs by id (lupa cannot hand a Lua coroutine back to Lua; Python holds an integer) ---------------
local runs, envs, next_id, live = {}, {}, 0, 0
local function release(id)
  if runs[id] ~= nil then
    runs[id] = nil
    envs[id] = nil
    live = live - 1
  end
end
local function start(bytecode, keys, argv)
  local f = assert(real_loadstring(bytecode, '@user_script'))
  local env = new_env(keys, argv)
  setfenv(f, env)
  next_id = next_id + 1
  runs[next_id] = new_coroutine(f, true)
  envs[next_id] = env
  live = live + 1
  return next_id
end

-- where a dead run failed: the innermost Lua frame of the script (not of the host's own code)
local internal = {['@cjson.lua'] = true, ['@cmsgpack.lua'] = true, ['@bit.lua'] = true}
internal[getinfo(1, 'S').source] = true
local function error_location(co)
  for level = 0, 60 do
    local info = getinfo(co, level, 'Sl')
    if info == nil then break end
    if info.what ~= 'C' and not internal[info.source] and info.currentline and info.currentline > 0 then
      return info.source, info.currentline
    end
  end
  return '@user_script', 0
end

-- one step: resume, then report (0, args) for a command, (1, value) at the end, (2, err) on error
local function step(id, tag, value, limit)
  local co = runs[id]
  if co == nil then return 2, 'emqlab host: this script run was released' end
  reset_budget(limit)
  current_env = envs[id]
  local r = pack_n(co_resume(co, tag, value))
  local aborted = budget.abort
  if aborted then reset_budget(0) end
  if not r[1] then
    local source, line = error_location(co)
    release(id)
    return 2, aborted or r[2], source, line
  end
  if co_status(co) == 'dead' then release(id) return 1, r[2] end
  if r[2] ~= CMD then
    release(id)
    return 2, yield_boundary()
  end
  return 0, r[3]
end

local function drop(id) release(id) end
local function live_runs() return live end
local function memory_kib()
  collectgarbage('collect')
  collectgarbage('collect')
  return collectgarbage('count')
end

-- Lua value -> Redis reply, as a Python-friendly tree: {kind, value} (Redis's RESP2 conversion rules)
local STACK_LIMIT = 7995
local function to_reply(v, depth)
  local t = real_type(v)
  if depth > STACK_LIMIT then return {'err', 'ERR reached lua stack limit'} end
  if t == 'string' then return v end
  if t == 'number' then return {'int', v} end
  if t == 'boolean' then if v then return {'int', 1} end return {'nil'} end
  if t ~= 'table' then return {'nil'} end
  local e = real_rawget(v, 'err')
  if real_type(e) == 'string' then return {'err', e} end
  local ok = real_rawget(v, 'ok')
  if real_type(ok) == 'string' then return {'status', ok} end
  local d = real_rawget(v, 'double')
  if real_type(d) == 'number' then return fmt('%.17g', d) end
  local big = real_rawget(v, 'big_number')
  if real_type(big) == 'string' then return big end
  local map = real_rawget(v, 'map')
  if real_type(map) == 'table' then
    local out = {'array'}
    for k, x in real_next, map do
      out[#out + 1] = to_reply(k, depth + 1)
      out[#out + 1] = to_reply(x, depth + 1)
    end
    return out
  end
  local set = real_rawget(v, 'set')
  if real_type(set) == 'table' then
    local out = {'array'}
    for k in real_next, set do out[#out + 1] = to_reply(k, depth + 1) end
    return out
  end
  local verbatim = real_rawget(v, 'verbatim_string')
  if real_type(verbatim) == 'table' then
    local s = real_rawget(verbatim, 'string')
    if real_type(s) == 'string' then return s end
  end
  local out = {'array'}
  local i = 1
  while true do
    local x = real_rawget(v, i)
    if x == nil then break end
    out[i + 1] = to_reply(x, depth + 1)
    i = i + 1
  end
  return out
end

return {compile = compile, start = start, step = step, drop = drop, live_runs = live_runs,
        memory_kib = memory_kib, to_reply = function(v) return to_reply(v, 1) end, null = null}
"""


class LuaHost:
    """One Lua 5.1 runtime with Redis 7's scripting sandbox. Not thread-safe (one per thread).

    ``max_instructions``: the budget of Lua instructions a run may execute without issuing a command (0: no
    budget); past it the run ends with an ``emqlab host:`` error. ``db``: the database the caller's
    connection is on, restored after a script that ``SELECT``\\ s another (:meth:`run` reads it from a
    redis-py client).

    >>> host = LuaHost()
    >>> run = host.start(b"return redis.call('GET', KEYS[1])", [b"k"], [])
    >>> run.pending
    (b'GET', b'k')
    >>> run.resume(b"v")
    >>> run.done, run.result
    (True, b'v')
    """

    def __init__(self, lib_dir: str | Path | None = None, *, max_instructions: int = DEFAULT_MAX_INSTRUCTIONS,
                 db: int = 0) -> None:
        self.runtime = lua51.LuaRuntime(encoding=None, unpack_returned_tuples=False, register_eval=False)
        lib = Path(lib_dir) if lib_dir else lua_dir() / "lib"
        self.logs: list[tuple[int, bytes]] = []
        self.max_instructions = int(max_instructions)
        self.db = int(db)
        self._interrupted = False

        def read(name: str) -> bytes | None:
            p = lib / f"{name}.lua"
            return p.read_bytes() if p.is_file() else None

        helpers = self.runtime.table_from(
            {
                b"sha1hex": lambda s: hashlib.sha1(s).hexdigest().encode(),
                b"log": lambda level, msg: self.logs.append((int(level), msg)),
                b"tick": self._tick,
                b"known_command": lambda name, sub: _known_command(name, sub),
            }
        )
        setup = self.runtime.execute(b"return function(...) " + _SANDBOX_LUA.encode() + b" end")
        api = setup(helpers, read("cmsgpack"), read("bit"), read("cjson"), _HOOK_EVERY)
        self._compile = api[b"compile"]
        self._start = api[b"start"]
        self._step_lua = api[b"step"]
        self._drop = api[b"drop"]
        self._live_runs = api[b"live_runs"]
        self._memory_kib = api[b"memory_kib"]
        # ids of runs garbage-collected in Python before they ended or were closed; a ScriptRun's __del__
        # only appends here (it may run at any point, even inside a call into Lua), the host drops them
        # at its next start(), live_runs or memory_kib()
        self._orphans: list[int] = []
        self._to_reply = api[b"to_reply"]
        self._null = api[b"null"]
        self._compiled: dict[bytes, Compiled] = {}
        self._table_from = self.runtime.table_from
        self._lua_type = lua51.lua_type

    def _tick(self) -> bool:
        # called by the count hook every _HOOK_EVERY instructions: a pending Ctrl-C is raised here (Python
        # runs its signal handlers when it runs Python code); the hook then ends the run
        try:
            return self._interrupted
        except KeyboardInterrupt:
            self._interrupted = True
            return True

    def _step(self, co: int, tag: int, value: Any) -> tuple[Any, ...]:
        try:
            out = self._step_lua(co, tag, value, self.max_instructions)
        except KeyboardInterrupt:
            self._interrupted = True
            raise
        if out[0] == 2 and self._lua_type(out[1]) == "table" and out[1][b"interrupted"]:
            self._interrupted = False
            raise KeyboardInterrupt
        return tuple(out)

    # -- compiling -------------------------------------------------------------------------------------
    def compile(self, text: bytes) -> Compiled:
        """Compile ``text`` once (cached by content). Raises :class:`LuaScriptError` with Redis's message
        for a syntax error (``Error compiling script (new function): …``) or a bad ``#!`` line."""
        found = self._compiled.get(text)
        if found is None:
            body, flags = _shebang(text)
            bc, err = self._compile(body)
            if bc is None:
                raise LuaScriptError(f"Error compiling script (new function): {_s(err)}")
            found = self._compiled[text] = Compiled(_without_tail_calls(bytes(bc)), flags)
        return found

    # -- running ---------------------------------------------------------------------------------------
    def start(self, script: Script | bytes | str, keys: Sequence[Any], args: Sequence[Any] = (), *,
              db: int | None = None) -> ScriptRun:
        """A new run of ``script`` with ``KEYS``/``ARGV``; it advances to its first ``redis.call``.
        ``db``: the caller's database (default :attr:`db`), restored after a ``SELECT`` in the script.

        A run holds its Lua coroutine until it ends (a value or an error) or is closed
        (:meth:`ScriptRun.close`, or ``with host.start(…) as run:``): close a run you stop driving."""
        if self._orphans:
            self._drop_orphans()
        text = script.text if isinstance(script, Script) else _b(script)
        compiled = self.compile(text)
        co = self._start(compiled.bytecode, self._table_from([_b(k) for k in keys]),
                         self._table_from([_b(a) for a in args]))
        return ScriptRun(self, co, hashlib.sha1(text).hexdigest(), compiled.flags,
                         self.db if db is None else int(db))

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
        ``EVALSHA`` would return; raises :class:`LuaScriptError` likewise.

        The run is atomic on an in-process fakeredis executor (nothing else runs between its commands), so
        there its commands see one instant, as a script's do on Redis (:func:`emqlab.backends.frozen_clock`);
        against a live server each command reads the server's clock."""
        execute = conn.execute_command if isinstance(conn, redis.Redis) else conn
        db = _db_of(conn, self.db)
        with _frozen(), self.start(script, keys, args, db=db) as run:  # closed if the backend raises
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


@contextmanager
def _frozen() -> Iterator[None]:
    try:
        from emqlab.backend.connect import frozen_clock
    except ImportError:  # pragma: no cover - a backends module without the frozen clock
        yield
        return
    with frozen_clock():
        yield


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

    A run that ends releases its Lua coroutine by itself. A run abandoned before its end must be closed
    (:meth:`close`, or use the run as a context manager): until then the host keeps its coroutine, its
    stack and its KEYS/ARGV. ``closed`` is true once the coroutine is released (ended or closed).
    """

    __slots__ = ("host", "co", "sha", "flags", "pending", "done", "result", "error", "commands", "closed",
                 "caller_db", "db", "restoring", "refused", "_ended", "_where")

    def __init__(self, host: LuaHost, co: Any, sha: str, flags: frozenset[str] = frozenset(),
                 caller_db: int = 0) -> None:
        self.host = host
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
        self._ended: tuple[Any, ...] | None = None
        self._where = b""
        self._advance(self.host._step(co, 0, None))

    @property
    def lines(self) -> tuple[int, ...]:
        """Where the pending command was issued: the script's line numbers on the Lua stack, innermost
        (the ``redis.call`` itself, maybe in an included function) first, the main chunk's last; ``()``
        when nothing is pending (or for the ``SELECT`` that restores the caller's database). Lines count
        in the text the host ran (a flattened script: includes inlined)."""
        return tuple(int(x) for x in bytes(self._where).split(b",") if x)

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
        cmd = self.pending
        if isinstance(reply, BaseException):
            out = self.host._step(self.co, 1, _error_text(reply))
        else:
            if cmd[0].upper() == b"SELECT":
                self.db = int(cmd[1])
            out = self.host._step(self.co, 0, _reply_to_lua(self.host, cmd, reply))
        self._advance(out)

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
        while out[0] == 0:
            args = out[1]
            cmd: Command = tuple(bytes(args[i]) for i in range(1, int(args[b"n"]) + 1))
            refusal, cmd = _vet(cmd, self.flags)
            if refusal is None:
                self.pending = cmd
                self.commands += 1
                self._where = args[b"where"] or b""
                return
            self.refused.append((cmd, refusal))
            out = self.host._step(self.co, 1, refusal)
        self.pending = None
        self._where = b""
        self.closed = True  # the Lua side released the coroutine when it died
        if self.db != self.caller_db:
            self._ended = out
            self.restoring = True
            self.pending = (b"SELECT", str(self.caller_db).encode())
            return
        self._finish(out)

    def _finish(self, out: tuple[Any, ...]) -> None:
        self.done = True
        if out[0] == 1:
            tree = self.host._to_reply(out[1])
            try:
                self.result = _tree_to_py(tree)
            except LuaScriptError as e:
                self.error = self._located(str(e), None)
        else:
            source = _s(out[2]) if len(out) > 2 and out[2] is not None else "@user_script"
            line = int(out[3]) if len(out) > 3 and out[3] is not None else 0
            self.error = self._located(_lua_error_text(out[1]), True, line or _lua_error_line(out[1]), source)

    def _located(self, msg: str, raised: Any, line: int = 0, source: str = "@user_script") -> LuaScriptError:
        line = line or _line_of(msg)
        if raised is None:  # a returned {err=…}: Redis adds nothing
            return LuaScriptError(msg)
        return LuaScriptError(f"{msg} script: {self.sha}, on {source}:{line}.")


# -- the command checks Redis makes before running a command from a script ----------------------------------


def _known_command(name: Any, sub: Any) -> bool:
    argv = [bytes(name)] + ([bytes(sub)] if sub is not None else [])
    return _commands._entry(argv) is not None or _command_entry(argv[0]) is not None


def _command_entry(name: bytes) -> dict[str, Any] | None:
    entry: dict[str, Any] | None = _commands._table()["commands"].get(name.decode("utf-8", "replace").lower())
    return entry


def _vet(cmd: Command, flags: frozenset[str]) -> tuple[bytes | None, Command]:
    """``(None, command to send)`` or ``(error text, cmd)`` for a command the script may not run, checked in
    Redis's order: known command, arity, ``noscript``, read-only script, blocking options."""
    name = cmd[0].decode("utf-8", "replace").lower()
    table = _commands._table()["commands"]
    entry = None if "|" in name else table.get(name)
    if entry is None:
        return b"ERR Unknown Redis command called from script", cmd
    full = name
    if name in _commands._containers() and len(cmd) >= 2:
        full = f"{name}|{cmd[1].decode('utf-8', 'replace').lower()}"
        entry = table.get(full)
        if entry is None:
            return b"ERR Unknown Redis command called from script", cmd
    arity = int(entry["arity"])
    if (arity > 0 and len(cmd) != arity) or (arity < 0 and len(cmd) < -arity):
        return b"ERR Wrong number of args calling Redis command from script", cmd
    eflags = entry["flags"]
    if "noscript" in eflags:
        return b"ERR This Redis command is not allowed from script", cmd
    if "no-writes" in flags and ("write" in eflags or full in _MAY_REPLICATE):
        return b"ERR Write commands are not allowed from read-only scripts.", cmd
    if name in ("xread", "xreadgroup"):
        for a in cmd[1:]:
            u = a.upper()
            if u == b"STREAMS":
                break
            if u == b"BLOCK":
                return cmd[0] + b" command is not allowed with BLOCK option from scripts", cmd
    replacement = _NON_BLOCKING.get(name)
    if replacement is not None:
        timeout = cmd[1]
        if not _FLOAT.fullmatch(timeout):
            return b"ERR timeout is not a float or out of range", cmd
        if float(timeout) < 0:
            return b"ERR timeout is negative", cmd
        return None, (replacement, *cmd[2:])
    return None, cmd


_OP_CALL, _OP_TAILCALL = 28, 29


def _without_tail_calls(chunk: bytes) -> bytes:
    """The Lua 5.1 chunk with every ``TAILCALL`` made a ``CALL`` (its ``RETURN`` follows it already).

    Redis's ``redis.call`` is a C function, so ``return redis.call(…)`` keeps the script's frame, and Redis
    names the script's line in its error messages; the host's ``redis.call`` is a Lua function, which a tail
    call would replace. (Lua 5.1 bytecode: ``CALL A B C`` and ``TAILCALL A B 0`` share their operand layout;
    with ``C = 0`` the call keeps all results, which the following ``RETURN A 0`` returns.)"""
    if chunk[:4] != b"\x1bLua" or chunk[4] != 0x51:
        return chunk
    little = chunk[6] == 1
    size_int, size_t, size_ins, size_num = chunk[7], chunk[8], chunk[9], chunk[10]
    order: Any = "little" if little else "big"
    out = bytearray(chunk)
    pos = 12

    def integer(n: int) -> int:
        nonlocal pos
        v = int.from_bytes(out[pos:pos + n], order)
        pos += n
        return v

    def string() -> None:
        nonlocal pos
        n = integer(size_t)
        pos += n

    def function() -> None:
        nonlocal pos
        string()  # source
        pos += 2 * size_int + 4  # line defined, last line defined, nups, numparams, is_vararg, maxstack
        n = integer(size_int)
        for _ in range(n):
            ins = int.from_bytes(out[pos:pos + size_ins], order)
            if ins & 0x3F == _OP_TAILCALL:
                out[pos:pos + size_ins] = ((ins & ~0x3F) | _OP_CALL).to_bytes(size_ins, order)
            pos += size_ins
        for _ in range(integer(size_int)):  # constants
            kind = out[pos]
            pos += 1
            if kind == 1:
                pos += 1
            elif kind == 3:
                pos += size_num
            elif kind == 4:
                string()
        for _ in range(integer(size_int)):  # nested functions
            function()
        pos += integer(size_int) * size_int  # line info
        for _ in range(integer(size_int)):  # local variables
            string()
            pos += 2 * size_int
        for _ in range(integer(size_int)):  # upvalue names
            string()

    try:
        function()
    except (IndexError, ValueError):  # pragma: no cover - a chunk of another layout: leave it alone
        return chunk
    return bytes(out)


def _shebang(text: bytes) -> tuple[bytes, frozenset[str]]:
    """The script body to compile (the ``#!`` line blanked, so line numbers stay) and its flags."""
    if not text.startswith(b"#!"):
        return text, frozenset()
    end = text.find(b"\n")
    if end < 0:
        raise LuaScriptError("Invalid script shebang")
    line, rest = text[:end], text[end:]
    parts = line.split()
    if not parts or parts[0] != b"#!lua":
        raise LuaScriptError(f"Unexpected engine in script shebang: {_s(parts[0] if parts else line)}")
    flags: set[str] = set()
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            raise LuaScriptError(f"Unknown lua shebang option: {_s(part)}")
        for flag in part[len(b"flags="):].split(b","):
            if not flag:
                continue
            if flag.decode("utf-8", "replace") not in _SHEBANG_FLAGS:
                raise LuaScriptError(f"Unexpected flag in script shebang: {_s(flag)}")
            flags.add(flag.decode())
    return rest, frozenset(flags)


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


#: Error codes of Redis 7.0 replies; redis-py removes some of them from the message (it keeps them in
#: ``status_code``), the script must see them.
_ERROR_CODES = frozenset(
    "ERR WRONGTYPE NOSCRIPT BUSY BUSYKEY BUSYGROUP NOGROUP NOPROTO LOADING OOM NOAUTH NOPERM WRONGPASS EXECABORT "
    "READONLY MASTERDOWN MISCONF NOREPLICAS NOTBUSY UNBLOCKED CROSSSLOT MOVED ASK TRYAGAIN CLUSTERDOWN "
    "UNKILLABLE NOMASTERLINK".split()
)


def _error_text(e: BaseException) -> bytes:
    """The error reply as the server sent it: redis-py strips the code of some errors (``ERR``, ``NOSCRIPT``,
    ``OOM`` …) from the message; put it back (scripts see it)."""
    msg = str(e)
    code = getattr(e, "status_code", None)
    if code:
        return f"{code} {msg}".encode()
    if msg.startswith("unknown command "):  # Redis checks the command table before running it
        return b"ERR Unknown Redis command called from script"
    first = msg.split(" ", 1)[0]
    if first not in _ERROR_CODES:
        msg = "ERR " + msg
    return msg.encode()


def _status_command(cmd: Command) -> bool:
    name = cmd[0].decode("utf-8", "replace").lower()
    if name in _commands._containers() and len(cmd) >= 2:
        name = f"{name}|{cmd[1].decode('utf-8', 'replace').lower()}"
    if name not in STATUS_REPLY_COMMANDS:
        return False
    if name == "ping":
        return len(cmd) == 1
    if name == "set":
        return not any(a.upper() == b"GET" for a in cmd[3:])
    return True


def _reply_to_lua(host: LuaHost, cmd: Command, reply: Any) -> Any:
    if type(reply) is bytes:
        if _status_command(cmd):
            return host._table_from({b"ok": reply})
        return reply
    if isinstance(reply, bool):
        return 1 if reply else 0
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


_INT64_MIN = -(2**63)


def _to_int(v: Any) -> int:
    # Redis casts the Lua number to long long: truncation toward zero; out of range, inf and NaN give the
    # int64 minimum (x86-64's cvttsd2si)
    if isinstance(v, int):
        return v
    if v != v or v >= 2.0**63 or v < -(2.0**63):
        return _INT64_MIN
    return int(v)


def _tree_to_py(tree: Any) -> Any:
    """The reply tree from Lua (``{kind, value}`` tables) as Python values, without Python recursion (a
    reply may nest thousands of arrays deep)."""
    if isinstance(tree, bytes):
        return tree
    kind = tree[1]
    if kind == b"err":
        raise LuaScriptError(_strip_err(_s(tree[2])))
    if kind != b"array":
        return _leaf(tree)
    root: list[Any] = []
    stack: list[tuple[Any, int, list[Any]]] = [(tree, 2, root)]
    while stack:
        node, i, out = stack.pop()
        while True:
            item = node[i]
            if item is None:
                break
            i += 1
            if isinstance(item, bytes):
                out.append(item)
                continue
            k = item[1]
            if k == b"array":
                child: list[Any] = []
                out.append(child)
                stack.append((node, i, out))
                node, i, out = item, 2, child
                continue
            if k == b"err":
                out.append(LuaScriptError(_strip_err(_s(item[2]))))
            else:
                out.append(_leaf(item))
    return root


def _leaf(tree: Any) -> Any:
    kind = tree[1]
    if kind == b"int":
        return _to_int(tree[2])
    if kind == b"nil":
        return None
    return tree[2]  # status


def _strip_err(msg: str) -> str:
    # what redis-py does to an error reply: drop a leading "ERR "
    return msg[4:] if msg.startswith("ERR ") else msg


def _lua_error_text(err: Any) -> str:
    if err is None:
        return "nil"
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
