--[[
  sandbox.lua -- Redis 7.0's scripting sandbox, for emqlab's one Lua environment: the host
  (emqlab/scripting/host.py, a lupa runtime that runs each script as a coroutine and yields every
  redis.call to Python). It runs the scripts of a client-side split run and, on the embedded server
  (emqlab/backend/scripts.py), every EVAL; the rules it follows are listed in the docstring of
  emqlab/scripting/host.py and checked against a Redis 7.0 server.

  What a script can reach is built here: the globals and library tables of Redis 7.0, read-only (the
  message is Redis's, "Attempt to modify a readonly table"); reading an undefined global an error
  ("Script attempted to access nonexistent global variable 'x'"); no print, getfenv, setfenv, os, io,
  debug, require, dofile, loadfile, package, module, newproxy or python; no bytecode (a chunk starting
  with ESC is compiled as text); redis.*, cjson, cmsgpack and bit (lua/lib/*.lua); math.random on
  Redis's own generator; a budget of Lua instructions enforced by a count hook.

  The file is two sections:
    1. shared   -- the environment a script sees;
    2. host     -- the yielding redis.call, pcall/xpcall/coroutines a command may yield through, script
                   runs by id and the conversion of a result to a reply tree; returns the host's API.

  Called with one table of options:
    py          Python helpers: sha1hex(s), log(level, msg), known_command(name, sub), tick() (true
                when the run must stop: a Ctrl-C is pending, or on the server a SCRIPT KILL came) and
                (optional) stopped_at(line), told the script's line when tick() stopped it;
    cjson, cmsgpack, bit   the modules' source texts (a missing one is not loaded);
    patterns    the source of lua/lib/patterns.lua (the bounded pattern functions), match_steps its bound;
    hook_every  instructions between two calls of the count hook;
    budget_hint the text that names the setting of the budget in the budget's error;
    commands_hint the same for the cap on a run's commands;
    memory_kib, memory_text  the Lua heap (KiB) past which a run ends, checked by the count hook, and the
                text of its error (after error_prefix);
    max_seconds, seconds_hint  the CPU seconds a run may use (0: no limit) and the setting's name;
    error_prefix  what starts an error of the limits (default MSG.host_error; the embedded server's
                host has MSG.server_error);
    no_lines    a pending command does not carry the script's lines (ScriptRun.lines is empty);
    acl_query   redis.acl_check_cmd asks the server (a yield step reports as 3) instead of answering true;
    dialect, msg  the server the scripts are compared with, and the texts of its errors.
]]

local opts = ...
-- the sandbox's own code reads the standard library from a private copy of the globals
local std = {}
for k, v in next, _G do if k ~= 'python' then std[k] = v end end
setfenv(1, std)
local py, hook_every = opts.py, opts.hook_every
-- every text an error carries, by name (emqlab/protocol/messages.py: the one home of them)
local MSG = opts.msg

-- 1. shared ===========================================================================================
-- the server the scripts are compared with (emqlab/scripting/dialect.py; the host's dialect option): Redis
-- 7.0 without one (the embedded server), else Redis 7.0 or Valkey
local dialect = opts.dialect or {}

-- a Lua number as a command's argument, and a {double=...} reply's text: '%.17g' on Redis 7.0; on Valkey
-- an integer within +-2^62 as an integer, any other finite number in the shortest digits that read back
-- as the same number, laid out as its fpconv_dtoa does (0.1, 1e-7, 1e+21, 9223372036854776000), and a
-- NaN reply as 'nan'
local function fpconv(x)
  local neg = ''
  if x < 0 then neg, x = '-', -x end
  local s
  for p = 0, 16 do
    s = string.format('%.' .. p .. 'e', x)
    if tonumber(s) == x then break end
  end
  local mant, e10 = string.match(s, '^([%d%.]+)e([-+]%d+)$')
  local digits = string.gsub(string.gsub(mant, '%.', ''), '0+$', '')
  if digits == '' then digits = '0' end
  local nd = #digits
  local K = tonumber(e10) - (nd - 1)
  local ex = K + nd - 1
  if ex < 0 then ex = -ex end
  if K >= 0 and ex < nd + 7 then return neg .. digits .. string.rep('0', K) end
  if K < 0 and (K > -7 or ex < 4) then
    local offset = nd + K
    if offset <= 0 then return neg .. '0.' .. string.rep('0', -offset) .. digits end
    return neg .. string.sub(digits, 1, offset) .. '.' .. string.sub(digits, offset + 1)
  end
  local out = string.sub(digits, 1, 1)
  if nd > 1 then out = out .. '.' .. string.sub(digits, 2) end
  return neg .. out .. 'e' .. (K + nd - 1 < 0 and '-' or '+') .. ex
end
local TWO_62 = 2 ^ 62
local function number_text(x, reply)
  if not dialect.valkey then return string.format('%.17g', x) end
  if x ~= x then return reply and 'nan' or string.format('%.17g', x) end
  if x == 1 / 0 or x == -1 / 0 then return string.format('%.17g', x) end
  if x == 0 then return (reply and 1 / x < 0) and '-0' or '0' end
  if x == math.floor(x) and x >= -TWO_62 and x <= TWO_62 then return string.format('%.0f', x) end
  return fpconv(x)
end

local real_next, real_pairs, real_ipairs = next, pairs, ipairs
local real_rawget, real_rawset, real_rawequal = rawget, rawset, rawequal
local real_setmetatable, real_getmetatable = setmetatable, getmetatable
local real_loadstring, real_pcall, real_error = loadstring, pcall, error
local real_type, real_tostring, real_select, real_unpack = type, tostring, select, unpack
local co_create, co_resume, co_yield, co_status, co_running =
  coroutine.create, coroutine.resume, coroutine.yield, coroutine.status, coroutine.running
local sethook, getinfo = debug.sethook, debug.getinfo
local floor, fmt, gsub, sub, find = math.floor, string.format, string.gsub, string.sub, string.find
local pack_n = function(...) return {n = real_select('#', ...), ...} end

local READONLY = MSG.readonly_table
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

-- instruction budget (and Ctrl-C, SCRIPT KILL): a count hook on every coroutine a run uses ------------
-- (the budget's error is a table {err=..., budget=true}: the host reads it)
local budget = {limit = 0, used = 0, abort = nil, before = 0, clock0 = 0}
local real_collect, heap_cap_kib = collectgarbage, opts.memory_kib or 0
-- the most steps one pattern match may take (lua/lib/patterns.lua; about the 5 s CPU limit)
local MATCH_STEPS = opts.match_steps
-- CPU seconds a run may use (Lua instructions can cost more than a budget of them says: a string table
-- full of colliding hashes); budget.before is what the run used in earlier steps, budget.clock0 this one's start
local cpu_clock, time_cap = os.clock, opts.max_seconds or 0
-- (host) what each live run has spent so far, by run id: its budget counts for the whole run, not per
-- step; and the run the host is resuming, with its cap on commands
local spent = {instructions = {}, commands = {}, seconds = {}, current = nil, max_commands = 0}
-- (host) the coroutine each live run's pending command was yielded from, by run id (lines_of)
local yielded_in = {}
local tick, stopped_at = py.tick, py.stopped_at
-- the line of the user's script that is running (0 when none is on the stack)
-- (a script's chunk is '@user_script', a function library's '@user_function')
local USER_SOURCES = {['@user_script'] = true, ['@user_function'] = true}
local function script_line()
  for level = 2, 40 do
    local info = getinfo(level, 'Sl')
    if info == nil then break end
    if USER_SOURCES[info.source] then return info.currentline end
  end
  return 0
end
local function budget_error(text, kind)
  return {err = (opts.error_prefix or MSG.host_error) .. text, [kind] = true}
end
local function hook()
  if budget.abort then real_error(budget.abort, 0) end
  budget.used = budget.used + hook_every
  local stop = false
  if tick then
    local ok, pending = real_pcall(tick)
    stop = not ok or pending
  end
  if stop then
    if stopped_at then real_pcall(stopped_at, script_line()) end
    budget.abort = budget_error(MSG.interrupted, 'interrupted')
  elseif time_cap > 0 and budget.before + cpu_clock() - budget.clock0 > time_cap then
    budget.abort = budget_error(fmt(MSG.too_long, time_cap, opts.seconds_hint), 'budget')
  elseif heap_cap_kib > 0 and real_collect("count") > heap_cap_kib then
    -- (below the runtime's hard cap, so that the error, the run's release and the collection that follows
    -- still find memory: an allocation that fails outside a protected call aborts the whole process)
    budget.abort = budget_error(opts.memory_text, 'budget')
  elseif budget.limit > 0 and budget.used > budget.limit then
    budget.abort = budget_error(fmt(MSG.budget_spent, budget.limit, opts.budget_hint), 'budget')
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
  budget.limit, budget.used, budget.abort, budget.before, budget.clock0 = limit, 0, nil, 0, cpu_clock()
  if was then for co in real_next, hooked do sethook(co, hook, '', hook_every) end end
end

-- errors raised for the caller's line -------------------------------------------------------------
-- (script_line: above, with the count hook)
-- the script's lines on the stack of co, innermost first ("12,340"): where its pending redis.call was made,
-- read from the suspended coroutine only when asked (the engine never asks: a walk per command cost it ~6 %);
-- level 0 is the yield, 1 the redis.call core, as levels 2.. were from inside the core
-- (the embedded server's host never shows a pending command's lines: it does not walk the stack for them)
local want_lines = not opts.no_lines
local function where(co)
  local lines = {}
  for level = 0, 59 do
    local info = getinfo(co, level, 'Sl')
    if info == nil then break end
    if USER_SOURCES[info.source] then lines[#lines + 1] = info.currentline end
  end
  return table.concat(lines, ',')
end
-- call a library function and re-raise its error at the caller's line, named as the caller named it
-- (Lua's C functions that the sandbox wraps name themselves '?': BAD_ARGUMENT is what comes before the number)
local BAD_ARGUMENT = MSG.bad_argument:match('^(.-)%%d')
local function guarded(name, f)
  return function(...)
    local r = pack_n(real_pcall(f, ...))
    if r[1] then return real_unpack(r, 2, r.n) end
    local msg = r[2]
    if msg == READONLY then real_error(msg, 0) end
    if real_type(msg) == 'string' then
      msg = gsub(msg, '^' .. BAD_ARGUMENT .. "(%d+) to '%?'", BAD_ARGUMENT .. "%1 to '" .. name .. "'")
      real_error(msg, 2)
    end
    real_error(msg, 0)
  end
end

-- redis.* (call, pcall and setresp are each environment's own) ----------------------------------------
local redis = {}
local function reply_table(field, name)
  return function(...)
    local msg = ...
    if real_select('#', ...) ~= 1 or real_type(msg) ~= 'string' then
      return {err = MSG.reply_helper_arguments}
    end
    if field == 'err' then
      -- Redis 7.0 (luaRedisErrorReplyCommand, luaPushErrorBuff): the text, its '-' added when missing, is
      -- 'CODE message' split at its first space, or all message with the code ERR; CR and LF trimmed
      if sub(msg, 1, 1) == '-' then msg = sub(msg, 2) end
      local code, text = 'ERR', msg
      local space = find(msg, ' ', 1, true)
      if space then code, text = sub(msg, 1, space - 1), sub(msg, space + 1) end
      msg = code .. ' ' .. (gsub(gsub(text, '^[\r\n]+', ''), '[\r\n]+$', ''))
    end
    return {[field] = msg}
  end
end
redis.error_reply = reply_table('err')
redis.status_reply = reply_table('ok')
redis.sha1hex = function(...)
  if real_select('#', ...) ~= 1 then real_error(MSG.wrong_number_of_arguments, 0) end
  local s = ...
  local t = real_type(s)
  if t == 'number' then s = real_tostring(s) elseif t ~= 'string' then s = '' end
  return py.sha1hex(s)
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = function(...)
  local n = real_select('#', ...)
  if n < 2 then real_error(MSG.log_arguments, 0) end
  local level = ...
  if real_type(level) ~= 'number' then real_error(MSG.log_level_type, 0) end
  if level < 0 or level > 3 then real_error(MSG.log_level, 0) end
  local parts = {}
  for i = 2, n do
    local v = real_select(i, ...)
    local t = real_type(v)
    if t == 'string' or t == 'number' then parts[#parts + 1] = real_tostring(v) end
  end
  py.log(level, table.concat(parts, ' '))
end
redis.replicate_commands = function() return true end
redis.REPL_ALL, redis.REPL_AOF, redis.REPL_REPLICA, redis.REPL_SLAVE, redis.REPL_NONE = 3, 1, 2, 2, 0
redis.set_repl = function(...)
  if real_select('#', ...) ~= 1 then real_error(MSG.set_repl_arguments, 0) end
  local v = ...
  if real_type(v) ~= 'number' or v ~= floor(v) or v < 0 or v > 3 then
    real_error(MSG.set_repl_flags, 0)
  end
end
-- (set in section 2 when the host asks the server: opts.acl_query)
local acl_ask = nil
redis.acl_check_cmd = function(...)
  local n = real_select('#', ...)
  if n == 0 then real_error(MSG.no_arguments, 0) end
  local args = {...}
  for i = 1, n do
    local a = args[i]
    if real_type(a) == 'number' then args[i] = number_text(a)
    elseif real_type(a) ~= 'string' then
      real_error(MSG.argument_type, 0)
    end
  end
  if not py.known_command(args[1], args[2]) then
    real_error(MSG.acl_check_command, 0)
  end
  if acl_ask then
    args.n = n
    return acl_ask(args)
  end
  return true
end
redis.breakpoint = function() return false end
redis.debug = function() end
-- Valkey adds its name and release, and answers as the Redis release in redis_version
redis.REDIS_VERSION = dialect.redis_version or '7.0.15'
redis.REDIS_VERSION_NUM = dialect.redis_version_num or 0x07000f
if dialect.valkey then
  redis.SERVER_NAME, redis.VALKEY_VERSION, redis.VALKEY_VERSION_NUM =
    dialect.server_name, dialect.valkey_version, dialect.valkey_version_num
end

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
    real_error(fmt(MSG.bad_argument, i, 'random',
      fmt(MSG.type_expected, 'number', v == nil and 'no value' or real_type(v))), 3)
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
    if u < 1 then real_error(fmt(MSG.bad_argument, 1, 'random', MSG.interval_empty), 2) end
    return floor(r * u) + 1
  end
  if n == 2 then
    local l, u = checkint(a, 1), checkint(b, 2)
    if l > u then real_error(fmt(MSG.bad_argument, 2, 'random', MSG.interval_empty), 2) end
    return floor(r * (u - l + 1)) + l
  end
  real_error(MSG.wrong_number_of_arguments, 2)
end
lib_math.randomseed = function(v)
  local x = tonumber(v)
  if x == nil then
    real_error(fmt(MSG.bad_argument, 1, 'randomseed',
      fmt(MSG.type_expected, 'number', v == nil and 'no value' or real_type(v))), 2)
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
    real_error(fmt(MSG.bad_argument, 1, 'pairs', fmt(MSG.type_expected, 'table', tn)), 0)
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
    real_error(fmt(MSG.bad_argument, 1, 'load',
      fmt(MSG.type_expected, 'function', reader == nil and 'no value' or real_type(reader))), 2)
  end
  local parts = {}
  while true do
    local piece = reader()
    if piece == nil or piece == '' then break end
    if real_type(piece) ~= 'string' then return nil, MSG.reader_result end
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
  base[name] = std[name]
end
base._VERSION = _VERSION
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
if dialect.valkey then base.__server__err__handler = base.__redis__err__handler end

-- the library modules ---------------------------------------------------------------------------------
null = newproxy(true)
real_getmetatable(null).__tostring = function() return 'userdata: (nil)' end
local function load_module(name, src, ...)
  if not src then return nil end
  local chunk = assert(real_loadstring(src, '@' .. name .. '.lua'))
  setfenv(chunk, std)
  return chunk(...)
end
local cjson = load_module('cjson', opts.cjson, null)
local cmsgpack = load_module('cmsgpack', opts.cmsgpack)
local bit = load_module('bit', opts.bit)

-- string.find / match / gmatch / gsub with a bound on the matcher's work (lua/lib/patterns.lua: it
-- backtracks inside one C call, where no count hook runs)
local lib_string = string
if opts.patterns then
  local make = assert(real_loadstring(opts.patterns, '@patterns.lua'))
  lib_string = make({string = string, error = real_error, type = real_type, select = real_select, format = fmt,
                     next = real_next, text = MSG.pattern_too_costly, max_steps = MATCH_STEPS})
end

base.redis = protect(redis)
if dialect.valkey then
  -- Valkey's sandbox: the redis table under the name server too, and os with os.clock alone
  base.server = base.redis
  base.os = protect({clock = cpu_clock})
end
base.string = protect(lib_string)
base.math = protect(lib_math)
base.table = protect(lib_table)
if cjson then base.cjson = protect(cjson) end
if cmsgpack then base.cmsgpack = protect(cmsgpack) end
if bit then base.bit = protect(bit) end
-- ("x"):rep(3) finds string's functions through the shared string metatable, shown read-only
local string_mt = real_getmetatable('')
string_mt.__index = base.string
string_mt_proxy = protect(string_mt)

local function nonexistent(_, name)
  -- (a read by no Lua function is lupa's own, from C, outside any protected call: it looks up
  -- debug.traceback before each call into Lua; an error there would abort the process)
  if getinfo(2, 'S') == nil then return nil end
  real_error(fmt(MSG.nonexistent_global, real_tostring(name)), 2)
end
local G_MT = {__index = nonexistent}
local G_MT_PROXY = protect(G_MT)

-- a script's globals: g holds them (and errs on an undefined name), the script sees the read-only proxy
local function fill_env(g, keys, argv)
  for k, v in real_next, base do g[k] = v end
  g.KEYS, g.ARGV = keys, argv
  local proxy = real_setmetatable({}, {__index = g, __newindex = ro_newindex, [RO] = true, [VISIBLE] = G_MT_PROXY})
  g._G = proxy
  real_setmetatable(g, G_MT)
  return proxy
end
local function new_env(keys, argv) return fill_env({}, keys, argv) end

-- 2. host =============================================================================================
-- Everything is built once per host; a run gets a fresh global table (new_env).

local CMD = {}                                   -- first value of a command yield
-- the yielding core of redis.call / redis.pcall ----------------------------------------------------
local function command(raise, ...)
  local id = spent.current
  if id ~= nil then
    local sent = (spent.commands[id] or 0) + 1
    spent.commands[id] = sent
    if spent.max_commands > 0 and sent > spent.max_commands then
      budget.abort = budget_error(fmt(MSG.too_many_commands, spent.max_commands, opts.commands_hint), 'budget')
      real_error(budget.abort, 0)
    end
  end
  local n = real_select('#', ...)
  if n == 0 then
    real_error({err = 'ERR ' .. MSG.no_arguments, line = script_line()})
  end
  local args = {...}
  for i = 1, n do
    local a = args[i]
    local t = real_type(a)
    if t == 'number' then
      args[i] = number_text(a)
    elseif t ~= 'string' then
      real_error({err = 'ERR ' .. MSG.argument_type, line = script_line()})
    end
  end
  args.n = n
  -- (the coroutine that yields: a pcall's or a user coroutine's inside the run's own; lines_of walks it)
  if id ~= nil and want_lines then yielded_in[id] = co_running() end
  local tag, value = co_yield(CMD, args)
  if tag == 1 then
    if raise then real_error({err = value, line = script_line()}) end
    return {err = value}
  end
  return value
end

-- redis.acl_check_cmd's question to the server (emqlab.scripting.serverstate), in the runs started to ask
-- (acl_asks, by run id): yielded as a command marked acl (step reports it apart; no script's command can
-- carry the mark), answered true or false; not counted among the run's commands
local acl_asks = {}
-- (nothing yields from inside a C function's callback, table.sort's or string.gsub's, nor from a metamethod:
-- a redis.call there fails, but a question there keeps the answer acl_check_cmd gave before it asked, true)
local function can_yield()
  for level = 3, 250 do  -- (1: can_yield, 2: acl_ask, 3: acl_check_cmd)
    local info = getinfo(level, 'Sn')
    if info == nil then return true end
    if info.what == 'C' or info.namewhat == 'metamethod' then return false end
  end
  return false
end
if opts.acl_query then
  acl_ask = function(args)
    local id = spent.current
    if id == nil or not acl_asks[id] or not can_yield() then return true end
    if want_lines then yielded_in[id] = co_running() end
    args.acl = true
    local _, verdict = co_yield(CMD, args)
    return verdict
  end
end

-- (not tail calls: script_line() walks the frames)
redis.call = function(...) local r = command(true, ...) return r end
redis.pcall = function(...) local r = command(false, ...) return r end
redis.setresp = function(...)
  if real_select('#', ...) ~= 1 then real_error(MSG.setresp_arguments, 0) end
  local v = ...
  if v ~= 2 and v ~= 3 then real_error(MSG.setresp_version, 0) end
  if v == 3 then
    real_error(MSG.setresp3_not_modelled, 0)
  end
end

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
local function yield_boundary() return MSG.yield_boundary end

local function co_pcall(f, ...)
  if real_type(f) ~= 'function' and (real_type(f) ~= 'table' or real_getmetatable(f) == nil) then
    return false, fmt(MSG.call_non_function, real_type(f))
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
  if real_type(f) ~= 'function' then real_error(fmt(MSG.bad_argument, 1, 'create', fmt(MSG.expected, 'Lua function')), 0) end
  return new_coroutine(f, false)
end)
local function user_resume(co, ...)
  if real_type(co) ~= 'thread' then
    real_error(fmt(MSG.bad_argument, 1, 'resume', fmt(MSG.expected, 'coroutine')), 3)
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

base.pcall, base.xpcall = co_pcall, co_xpcall
base.coroutine = protect(lib_coroutine)

-- live runs by id (lupa cannot hand a Lua coroutine back to Lua; Python holds an integer) ---------------
local runs, envs, next_id, live = {}, {}, 0, 0
-- loaded scripts no live run is using, by bytecode (a list each), so that a run takes one instead of
-- undumping its script again (tens of KB for a BullMQ script, the most of a run's start); a chunk has no
-- state but its environment, which each run sets. At most IDLE_MAX are kept: past it the cache starts over
local idle, idle_count, IDLE_MAX = {}, 0, 32
local chunks, codes = {}, {}   -- by run id: the run's chunk and its bytecode
local NO_ENV = {}
local function_runs = {}       -- by run id: true for a library's load or a function's call
local function release(id)
  if runs[id] ~= nil then
    runs[id] = nil
    envs[id] = nil
    local f, bytecode = chunks[id], codes[id]
    chunks[id], codes[id] = nil, nil
    if f ~= nil then  -- (a function's run has no chunk of its own to keep)
      setfenv(f, NO_ENV)  -- (the run's globals are not kept alive by the cache)
      if idle_count >= IDLE_MAX then idle, idle_count = {}, 0 end
      local pool = idle[bytecode]
      if pool == nil then pool = {} idle[bytecode] = pool end
      pool[#pool + 1] = f
      idle_count = idle_count + 1
    end
    spent.instructions[id], spent.commands[id], spent.seconds[id] = nil, nil, nil
    yielded_in[id] = nil
    acl_asks[id] = nil
    function_runs[id] = nil
    live = live - 1
  end
end
local function start(bytecode, keys, argv, ask_acl)
  -- (compiled by emqlab.scripting.rules.compile_script, never from a script's own text)
  local pool, f = idle[bytecode], nil
  if pool ~= nil then
    f = pool[#pool]
    pool[#pool] = nil
    idle_count = idle_count - 1
    if #pool == 0 then idle[bytecode] = nil end
  else
    f = assert(real_loadstring(bytecode, '@user_script'))
  end
  local env = new_env(keys, argv)
  setfenv(f, env)
  next_id = next_id + 1
  runs[next_id] = new_coroutine(f, true)
  envs[next_id] = env
  chunks[next_id], codes[next_id] = f, bytecode
  acl_asks[next_id] = ask_acl or nil
  live = live + 1
  return next_id
end

-- Redis Functions (the embedded server's FUNCTION LOAD and FCALL), in this same sandbox: a library's code
-- runs once, as a run, in globals of its own (read-only, as a script's) whose redis table holds only what
-- a library may use while it loads; its functions then run, as runs too, in those globals with the whole
-- redis table. A library's functions come back as a list of {name=, callback=, flags=, description=, env=}.
local FUNCTION_FLAGS = {['no-writes'] = true, ['allow-oom'] = true, ['allow-stale'] = true,
                        ['no-cluster'] = true, ['allow-cross-slot-keys'] = true}
local function register_error(what) real_error(fmt(MSG.register_bad_arguments, what), 2) end
local function new_run(f, env)
  next_id = next_id + 1
  runs[next_id] = new_coroutine(f, true)
  envs[next_id] = env
  function_runs[next_id] = true
  live = live + 1
  return next_id
end
local function start_library(text)
  -- (text only: bytecode would reach the undumper, which trusts what it reads)
  if real_type(text) ~= 'string' or find(text, '^%s*\27') then return false, MSG.library_bytecode end
  local f, err = real_loadstring(text, '@user_function')
  if not f then return false, err end
  local found, g = {}, {}
  local env = fill_env(g, nil, nil)
  local loading = true
  local api = {}
  for _, k in real_ipairs({'log', 'LOG_DEBUG', 'LOG_VERBOSE', 'LOG_NOTICE', 'LOG_WARNING', 'REDIS_VERSION',
                           'REDIS_VERSION_NUM', 'setresp'}) do api[k] = redis[k] end
  api.register_function = function(...)
    if not loading then real_error(MSG.register_outside_load, 2) end
    local n = real_select('#', ...)
    local name, callback, flags, description = ...
    if n == 1 and real_type(name) == 'table' then
      local t = name
      name, callback, flags, description = t.function_name, t.callback, t.flags, t.description
      for k in real_next, t do
        if k ~= 'function_name' and k ~= 'callback' and k ~= 'flags' and k ~= 'description' then
          register_error('unknown argument ' .. real_tostring(k))
        end
      end
    elseif n ~= 2 then
      register_error(MSG.wrong_number_of_arguments)
    end
    if real_type(name) ~= 'string' or not find(name, '^[%w_]+$') then register_error('a name of letters, digits, _') end
    if real_type(callback) ~= 'function' then register_error('the callback must be a function') end
    local set = {}
    if flags ~= nil then
      if real_type(flags) ~= 'table' then register_error('flags must be a table') end
      for _, flag in real_ipairs(flags) do
        if not FUNCTION_FLAGS[flag] then real_error(MSG.register_unknown_flag, 2) end
        set[#set + 1] = flag
      end
    end
    for _, other in real_ipairs(found) do
      if other.name == name then real_error(MSG.register_duplicate, 2) end
    end
    found[#found + 1] = {name = name, callback = callback, flags = set, env = env,
                         description = real_type(description) == 'string' and description or nil}
  end
  real_rawset(g, 'redis', real_setmetatable({}, {__index = function(_, k)
    local v = api[k]
    if v == nil then real_error(fmt(MSG.nonexistent_global, real_tostring(k)), 2) end
    return v
  end, __newindex = ro_newindex, [RO] = true}))
  setfenv(f, env)
  return new_run(function()
    f()
    loading = false
    real_rawset(g, 'redis', base.redis)
    return found
  end, env), nil
end
local function start_function(entry, keys, argv)
  local callback = entry.callback
  return new_run(function() return callback(keys, argv) end, entry.env)
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

-- a script's error object as the host reads it: a table only as a fresh one holding its err text and line
-- (read raw), never the script's own table, whose metamethods would run where no budget counts (the host reads
-- it from Python) and whose fields could pose as the host's own (the interrupt and budget marks: only the
-- abort object the hook makes carries those)
local function plain_error(e)
  if real_type(e) ~= 'table' then return e end
  local text, line = real_rawget(e, 'err'), real_rawget(e, 'line')
  local kind = real_type(text)
  return {err = (kind == 'string' or kind == 'number') and text or nil,
          line = real_type(line) == 'number' and line or nil}
end

-- one step: resume, then report (0, word, word, …) or (0, args) for a command, (1, value) at the end, (2,
-- err) on error
local UNPACKED_WORDS = 200
local function step(id, tag, value, limit, max_commands)
  local co = runs[id]
  if co == nil then return 2, MSG.run_released end
  reset_budget(limit)
  budget.used, budget.before = spent.instructions[id] or 0, spent.seconds[id] or 0
  spent.current, spent.max_commands = id, max_commands or 0
  current_env = envs[id]
  local r = pack_n(co_resume(co, tag, value))
  spent.instructions[id], spent.current = budget.used, nil
  spent.seconds[id] = budget.before + cpu_clock() - budget.clock0
  local aborted = budget.abort
  if aborted then reset_budget(0) end
  if not r[1] then
    local source, line = error_location(co)
    if function_runs[id] and source == '@user_script' then source = '@user_function' end
    release(id)
    return 2, aborted or plain_error(r[2]), source, line
  end
  if co_status(co) == 'dead' then release(id) return 1, r[2] end
  if r[2] ~= CMD then
    release(id)
    return 2, yield_boundary()
  end
  -- a command's words as values of their own (Python reads them without indexing a table, one call into
  -- Lua each); a long one as its table, below Lua's limit on the values one call returns
  -- (3: redis.acl_check_cmd's question, in the same shapes)
  local args = r[3]
  local kind = args.acl and 3 or 0
  if args.n <= UNPACKED_WORDS then return kind, real_unpack(args, 1, args.n) end
  return kind, args
end
-- where run id's pending command was made: its script's lines on the stack, innermost first ("12,340"; ""
-- when nothing is pending or the host shows no lines)
local function lines_of(id)
  local co = yielded_in[id]
  if co == nil or runs[id] == nil then return '' end
  return where(co)
end

local function drop(id) release(id) end
local function live_runs() return live end
local function memory_kib()
  idle, idle_count = {}, 0  -- (the heap the runs hold, not the cache of loaded scripts)
  collectgarbage('collect')
  collectgarbage('collect')
  return collectgarbage('count')
end

-- Lua value -> Redis reply, as a Python-friendly tree: {kind, value} (Redis's RESP2 conversion rules)
local STACK_LIMIT = 7995
-- (resp3: the reply of a RESP3 client's EVAL on the embedded server: a double and a map kept as such)
local function to_reply(v, depth, resp3)
  local t = real_type(v)
  if depth > STACK_LIMIT then return {'err', MSG.stack_limit} end
  if t == 'string' then return v end
  if t == 'number' then return {'int', v} end
  if t == 'boolean' then if v then return {'int', 1} end return {'nil'} end
  if t ~= 'table' then return {'nil'} end
  local e = real_rawget(v, 'err')
  if real_type(e) == 'string' then return {'err', e} end
  local ok = real_rawget(v, 'ok')
  -- (a status reply is one line: Redis writes its CR and LF bytes as spaces)
  if real_type(ok) == 'string' then return {'status', (gsub(ok, '[\r\n]', ' '))} end
  local d = real_rawget(v, 'double')
  if real_type(d) == 'number' then
    if resp3 then return {'double', d} end
    return number_text(d, true)
  end
  local big = real_rawget(v, 'big_number')
  -- Redis writes a big number as a bulk string on RESP2, its CR and LF bytes mapped to spaces first
  if real_type(big) == 'string' then return (gsub(big, '[\r\n]', ' ')) end
  local map = real_rawget(v, 'map')
  if real_type(map) == 'table' then
    local out = {resp3 and 'map' or 'array'}
    for k, x in real_next, map do
      out[#out + 1] = to_reply(k, depth + 1, resp3)
      out[#out + 1] = to_reply(x, depth + 1, resp3)
    end
    return out
  end
  local set = real_rawget(v, 'set')
  if real_type(set) == 'table' then
    local out = {'array'}
    for k in real_next, set do out[#out + 1] = to_reply(k, depth + 1, resp3) end
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
    out[i + 1] = to_reply(x, depth + 1, resp3)
    i = i + 1
  end
  return out
end

return {start = start, start_library = start_library, start_function = start_function, step = step, drop = drop, live_runs = live_runs, lines_of = lines_of,
        memory_kib = memory_kib, to_reply = function(v, resp3) return to_reply(v, 1, resp3) end, null = null}

