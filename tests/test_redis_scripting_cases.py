"""Redis's own scripting tests, case by case: the host against ``EVAL`` on Redis 7.0 (issue 28, item 4).

Redis's test suite checks its scripting engine in ``tests/unit/scripting.tcl``; at tag 7.0.15 that file holds
147 ``test`` blocks (``TCL_TITLES`` below, in file order). Each one that checks what a client sees of a script
run by ``EVAL`` (its reply or error, its keys, the connection after it) is covered here by one or more cases
of our own: a short script written for emqlab expressing the same behaviour (the fact Redis tests, not its
text), run once through ``EVAL`` (or ``EVAL_RO``) and once through ``LuaHost().run(client, script, keys,
args)``, each on a dedicated connection, from the same starting state. Compared: the reply or the full error
text, the same follow-up as ``tests/test_host_differential.py`` (the connection's database and MULTI state, a
PING), the keys under the run's own prefix in databases 0 and 9, and a case's ``after`` commands. The other
tests are listed in ``NOT_APPLICABLE`` with the reason.

A case the host is known to answer differently is in ``KNOWN_DIFFERENCES`` with the reason, and is asserted
to *still* differ (a fix shows up as a failure: move the case out of the table). Every other case must agree.

Cases that need a server-wide change (``maxmemory``, an ACL user, ``min-replicas-to-write``, a stale replica,
active expiry off) run on a throwaway ``redis-server`` this module starts; each switches the change on just
around its run and off again. On the shared server, a script that changes a cjson setting restores it in the
same script, through ``pcall``.

``pytest -s tests/test_redis_scripting_cases.py`` prints the count at the end (``test_report``, after the cases;
see docs/lua-host.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from emqlab.backend.connect import unique_queue
from emqlab.scripting.dialect import server_dialect
from emqlab.scripting.host import LuaHost, LuaScriptError
from tests.conftest import live_is_valkey, own_redis_server
from tests.test_host_differential import (
    OTHER_DB,
    C,
    Case,
    _client,
    _delete,
    _follow_up,
    _outcome,
    _raw_eval,
    _resp,
    _show,
    _state,
)

pytestmark = pytest.mark.live

TAG = "7.0.15"

#: Every ``test`` block of tests/unit/scripting.tcl at 7.0.15, in file order (titles as written there; the ones
#: built in a loop keep their ``$extra``; three blocks share one title, two others another).
TCL_TITLES = [
    "Script - disallow write on OOM",
    "EVAL - Does Lua interpreter replies to our requests?",
    "EVAL - Return _G",
    "EVAL - Return table with a metatable that raise error",
    "EVAL - Return table with a metatable that call redis",
    "EVAL - Lua integer -> Redis protocol type conversion",
    "EVAL - Lua string -> Redis protocol type conversion",
    "EVAL - Lua true boolean -> Redis protocol type conversion",
    "EVAL - Lua false boolean -> Redis protocol type conversion",
    "EVAL - Lua status code reply -> Redis protocol type conversion",
    "EVAL - Lua error reply -> Redis protocol type conversion",
    "EVAL - Lua table -> Redis protocol type conversion",
    "EVAL - Are the KEYS and ARGV arrays populated correctly?",
    "EVAL - is Lua able to call Redis API?",
    "EVALSHA - Can we call a SHA1 if already defined?",
    "EVALSHA - Can we call a SHA1 in uppercase?",
    "EVALSHA - Do we get an error on invalid SHA1?",
    "EVALSHA - Do we get an error on non defined SHA1?",
    "EVAL - Redis integer -> Lua type conversion",
    "EVAL - Redis bulk -> Lua type conversion",
    "EVAL - Redis multi bulk -> Lua type conversion",
    "EVAL - Redis status reply -> Lua type conversion",
    "EVAL - Redis error reply -> Lua type conversion",
    "EVAL - Redis nil bulk reply -> Lua type conversion",
    "EVAL - Is the Lua client using the currently selected DB?",
    "EVAL - SELECT inside Lua should not affect the caller",
    "EVAL - Script can't run more than configured time limit",
    "EVAL - Scripts can't run blpop command",
    "EVAL - Scripts can't run brpop command",
    "EVAL - Scripts can't run brpoplpush command",
    "EVAL - Scripts can't run blmove command",
    "EVAL - Scripts can't run bzpopmin command",
    "EVAL - Scripts can't run bzpopmax command",
    "EVAL - Scripts can't run XREAD and XREADGROUP with BLOCK option",
    "EVAL - Scripts can run non-deterministic commands",
    "EVAL - No arguments to redis.call/pcall is considered an error",
    "EVAL - redis.call variant raises a Lua error on Redis cmd error (1)",
    "EVAL - redis.call variant raises a Lua error on Redis cmd error (1)",
    "EVAL - redis.call variant raises a Lua error on Redis cmd error (1)",
    "EVAL - JSON numeric decoding",
    "EVAL - JSON string decoding",
    "EVAL - JSON smoke test",
    "EVAL - cmsgpack can pack double?",
    "EVAL - cmsgpack can pack negative int64?",
    "EVAL - cmsgpack pack/unpack smoke test",
    "EVAL - cmsgpack can pack and unpack circular references?",
    "EVAL - Numerical sanity check from bitop",
    "EVAL - Verify minimal bitop functionality",
    "EVAL - Able to parse trailing comments",
    "EVAL_RO - Successful case",
    "EVAL_RO - Cannot run write commands",
    "SCRIPTING FLUSH - is able to clear the scripts cache?",
    "SCRIPTING FLUSH ASYNC",
    "SCRIPT EXISTS - can detect already defined scripts?",
    "SCRIPT LOAD - is able to register scripts in the scripting cache",
    "SORT is normally not alpha re-ordered for the scripting engine",
    "SORT BY <constant> output gets ordered for scripting",
    "SORT BY <constant> with GET gets ordered for scripting",
    "redis.sha1hex() implementation",
    "Globals protection reading an undeclared global variable",
    "Globals protection setting an undeclared global*",
    "Test an example script DECR_IF_GT",
    "random numbers are random now",
    "Scripting engine PRNG can be seeded correctly",
    "EVAL does not leak in the Lua stack",
    "SPOP: We can call scripts rewriting client->argv from Lua",
    "MGET: mget shouldn't be propagated in Lua",
    "EXPIRE: We can call scripts rewriting client->argv from Lua",
    "INCRBYFLOAT: We can call scripts expanding client->argv from Lua",
    "Call Redis command with many args from Lua (issue #1764)",
    "Number conversion precision test (issue #1118)",
    "String containing number precision test (regression of issue #1118)",
    "Verify negative arg count is error instead of crash (issue #1842)",
    "Scripts can handle commands with incorrect arity",
    "Correct handling of reused argv (issue #1939)",
    "Functions in the Redis namespace are able to report errors",
    "CLUSTER RESET can not be invoke from within a script",
    "Script with RESP3 map",
    "Script return recursive object",
    "Script check unpack with massive arguments",
    "Script read key with expiration set",
    "Script del key with expiration set",
    "Script ACL check",
    "Binary code loading failed",
    "Try trick global protection 1",
    "Try trick global protection 2",
    "Try trick global protection 3",
    "Try trick global protection 4",
    "Try trick readonly table on redis table",
    "Try trick readonly table on json table",
    "Try trick readonly table on cmsgpack table",
    "Try trick readonly table on bit table",
    "Test loadfile are not available",
    "Test dofile are not available",
    "Test print are not available",
    "Timedout read-only scripts can be killed by SCRIPT KILL",
    "Timedout read-only scripts can be killed by SCRIPT KILL even when use pcall",
    "Timedout script does not cause a false dead client",
    "Timedout script link is still usable after Lua returns",
    "Timedout scripts and unblocked command",
    "Timedout scripts that modified data can't be killed by SCRIPT KILL",
    "SHUTDOWN NOSAVE can kill a timedout script anyway",
    "Before the replica connects we issue two EVAL commands",
    "Connect a replica to the master instance",
    "Now use EVALSHA against the master, with both SHAs",
    "'x' should be '4' for EVALSHA being replicated by effects",
    "Replication of script multiple pushes to list with BLPOP",
    "EVALSHA replication when first call is readonly",
    "Lua scripts using SELECT are replicated correctly",
    "Connect a replica to the master instance",
    "Redis.replicate_commands() can be issued anywhere now",
    "Redis.set_repl() can be issued before replicate_commands() now",
    "Redis.set_repl() don't accept invalid values",
    "Test selective replication of certain Redis commands from Lua",
    "PRNG is seeded randomly for command replication",
    "Using side effects is not a problem with command replication",
    "Test scripting debug protocol parsing",
    "Test scripting debug lua stack overflow",
    "test $extra big number protocol parsing",
    "test $extra malformed big number protocol parsing",
    "test $extra map protocol parsing",
    "test $extra set protocol parsing",
    "test $extra double protocol parsing",
    "test $extra null protocol parsing",
    "test $extra verbatim protocol parsing",
    "test $extra true protocol parsing",
    "test $extra false protocol parsing",
    "test resp3 attribute protocol parsing",
    "Script block the time during execution",
    "Script delete the expired key",
    "Shebang support for lua engine",
    "Unknown shebang option",
    "Unknown shebang flag",
    "allow-oom shebang flag",
    "no-writes shebang flag",
    "no-writes shebang flag on replica",
    "not enough good replicas",
    "not enough good replicas state change during long script",
    "allow-stale shebang flag",
    "reject script do not cause a Lua stack leak",
    "Consistent eval error reporting",
    "LUA redis.error_reply API",
    "LUA redis.error_reply API with empty string",
    "LUA redis.status_reply API",
    "LUA test pcall",
    "LUA test pcall with error",
    "LUA test pcall with non string/integer arg",
]

_CACHE = "the script cache (EVALSHA, SCRIPT LOAD/EXISTS/FLUSH) is the server's; the host runs a script's text"
_REPL = "replication: what a replica, the replication stream or the AOF receives (the host runs on the master)"
_KILL = "SCRIPT KILL, busy scripts and time limits (the host's own limits: tests/test_script_limits.py)"
_DEBUG = "DEBUG / the Lua debugger (LDB): server-side tooling a script's client does not see"
_RESP3 = "RESP3: a RESP3 client or redis.setresp(3) over DEBUG PROTOCOL (the host speaks RESP2 to its backend)"
_MEMORY = "the server's Lua memory (used_memory_lua) and stack leaks"
_NUMKEYS = "EVAL's own argument parsing (a negative numkeys): LuaHost.run takes KEYS as a list"

#: The tests of scripting.tcl no case covers, with the reason (titles that a case covers in part are not here).
NOT_APPLICABLE: dict[str, str] = {
    "EVALSHA - Can we call a SHA1 if already defined?": _CACHE,
    "EVALSHA - Can we call a SHA1 in uppercase?": _CACHE,
    "EVALSHA - Do we get an error on invalid SHA1?": _CACHE,
    "EVALSHA - Do we get an error on non defined SHA1?": _CACHE,
    "SCRIPTING FLUSH - is able to clear the scripts cache?": _CACHE,
    "SCRIPTING FLUSH ASYNC": _CACHE,
    "SCRIPT EXISTS - can detect already defined scripts?": _CACHE,
    "SCRIPT LOAD - is able to register scripts in the scripting cache": _CACHE,
    "EVAL - Script can't run more than configured time limit": _KILL + " (and disabled in Redis's file: if 0)",
    "EVAL does not leak in the Lua stack": _MEMORY,
    "reject script do not cause a Lua stack leak": _MEMORY + " (its refusal itself: the allow-oom cases)",
    "SPOP: We can call scripts rewriting client->argv from Lua": _REPL,
    "MGET: mget shouldn't be propagated in Lua": _REPL,
    "EXPIRE: We can call scripts rewriting client->argv from Lua": _REPL,
    "INCRBYFLOAT: We can call scripts expanding client->argv from Lua": _REPL,
    "Verify negative arg count is error instead of crash (issue #1842)": _NUMKEYS,
    "Timedout read-only scripts can be killed by SCRIPT KILL": _KILL,
    "Timedout read-only scripts can be killed by SCRIPT KILL even when use pcall": _KILL,
    "Timedout script does not cause a false dead client": _KILL,
    "Timedout script link is still usable after Lua returns": _KILL,
    "Timedout scripts and unblocked command": _KILL,
    "Timedout scripts that modified data can't be killed by SCRIPT KILL": _KILL,
    "SHUTDOWN NOSAVE can kill a timedout script anyway": _KILL,
    "Connect a replica to the master instance": _REPL,
    "Now use EVALSHA against the master, with both SHAs": _REPL + "; " + _CACHE,
    "'x' should be '4' for EVALSHA being replicated by effects": _REPL,
    "EVALSHA replication when first call is readonly": _REPL + "; " + _CACHE,
    "Lua scripts using SELECT are replicated correctly": _REPL + " (SELECT in a script: the SELECT cases)",
    "no-writes shebang flag on replica": _REPL + " (a replica linked to a master, MULTI/EXEC across REPLICAOF)",
    "not enough good replicas state change during long script": _REPL + "; " + _KILL,
    "Test scripting debug protocol parsing": _DEBUG,
    "Test scripting debug lua stack overflow": _DEBUG,
    "test $extra big number protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra map protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra set protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra double protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra null protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra verbatim protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra true protocol parsing": _RESP3 + "; " + _DEBUG,
    "test $extra false protocol parsing": _RESP3 + "; " + _DEBUG,
    "test resp3 attribute protocol parsing": _RESP3 + "; " + _DEBUG,
}


@dataclass
class T:
    """One case: the scripting.tcl test it covers (``title``) and a :class:`Case` of the differential suite."""

    title: str
    case: Case
    db: int = 0  # the database the calling connection is on
    via: str = "EVAL"  # "EVAL_RO": the EVAL side runs EVAL_RO (the host side asks for read-only if it can)
    runs: list[list[Any]] | None = None  # ARGV of each run of the script (several runs on the same keys)
    compare: Callable[[list[Any]], Any] | None = None  # what is compared of the runs' outcomes (default: all)
    after: list[tuple[Any, ...]] = field(default_factory=list)  # commands on the same connection, replies compared
    server: str = ""  # "": the live server; else a profile of the throwaway server (PROFILES)
    waiter: tuple[Any, ...] | None = None  # a command another client blocks in before the run; its reply compared
    raw: bool = False  # compared as RESP bytes (a reply too deep for redis-py)


def _differ(outs: list[Any]) -> bool:
    return outs[0] != outs[1]


_SAVE_CJSON = ("local saved = {cjson.encode_max_depth(), cjson.decode_max_depth(), cjson.encode_invalid_numbers(),"
               " cjson.encode_keep_buffer()}\n")
_RESTORE_CJSON = ("local ok, res = pcall(body)\n"
                  "cjson.encode_max_depth(saved[1]) cjson.decode_max_depth(saved[2])"
                  " cjson.encode_invalid_numbers(saved[3]) cjson.encode_keep_buffer(saved[4])\n"
                  "if not ok then error(res) end return res")


def _with_cjson_restored(body: str) -> str:
    """``body`` as a function whose changes to the cjson settings are undone, even when it raises."""
    return _SAVE_CJSON + "local function body()\n" + body + "\nend\n" + _RESTORE_CJSON


_HEX = "local function hex(s) return (s:gsub('.', function(c) return string.format('%02x', c:byte()) end)) end\n"

_JSON_SMOKE = _with_cjson_restored("""
local out = {}
local doc = {name = 'queue', size = 42, parts = {'a', 'b', 'c'}, none = nil, yes = true, no = false}
local back = cjson.decode(cjson.encode(doc))
out[#out + 1] = back.name .. back.size .. table.concat(back.parts) .. tostring(back.yes) .. tostring(back.no)
cjson.encode_keep_buffer(false)
back = cjson.decode(cjson.encode(doc))
out[#out + 1] = back.name .. #back.parts
local mixed = cjson.decode(cjson.encode({label = 'l', [1] = 'first'}))
out[#out + 1] = tostring(mixed.label) .. tostring(mixed['1'])
out[#out + 1] = table.concat(cjson.decode(cjson.encode({'p', 'q'})), '+')
out[#out + 1] = tostring(pcall(cjson.encode, {[true] = 'x'}))
cjson.encode_max_depth(1)
out[#out + 1] = tostring(pcall(cjson.encode, doc))
cjson.decode_max_depth(1)
out[#out + 1] = tostring(pcall(cjson.decode, '{"a": {"b": [1, 2]}}'))
out[#out + 1] = tostring(pcall(cjson.encode, {x = 0/0}))
cjson.encode_invalid_numbers(true)
out[#out + 1] = tostring(pcall(cjson.encode, {x = 0/0}))
return out""")

_JSON_INVALID_NUMBERS = _with_cjson_restored("""
cjson.encode_invalid_numbers(true)
return {cjson.encode(0/0), cjson.encode(1/0), cjson.encode({-1/0})}""")

_MSGPACK_SMOKE = """
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= 'table' then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
local long, big_array, big_map = string.rep('y', 70000), {}, {}
for i = 1, 70000 do big_array[i] = i * 3 big_map['k' .. i] = -i end
local value = {short = 'abc', s8 = string.rep('z', 200), s16 = string.rep('w', 60000), s32 = long,
  f = 1.5, d = 0.3, u8 = 200, u16 = 60000, u32 = 70000, u64 = 2^45, n5 = -5, n8 = -100, n16 = -30000,
  n32 = -70000, n64 = -2^40 - 7, small = {1, 2, 3}, a16 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17},
  a32 = big_array, m4 = {p = 1, q = 2}, m32 = big_map, t = true, f0 = false}
local packed = cmsgpack.pack(value)
local out = {#packed, same(value, cmsgpack.unpack(packed))}
local offset, one = cmsgpack.unpack_one(packed, 0)
out[#out + 1] = offset
out[#out + 1] = same(value, one)
local seq = cmsgpack.pack('first', string.rep('s', 300), long, 7)
local pos, item = 0, nil
for _ = 1, 4 do
  pos, item = cmsgpack.unpack_limit(seq, 1, pos)
  out[#out + 1] = pos
  out[#out + 1] = type(item) == 'string' and #item or item
end
return out"""

_MSGPACK_CYCLE = _HEX + """
local outer = {tag = 9}
local inner = {back = outer}
outer.back = inner
local packed = cmsgpack.pack(outer)
local t = cmsgpack.unpack(packed)
local depth, node = 0, t
while type(node) == 'table' and node.back ~= nil do node = node.back depth = depth + 1 end
return {hex(packed), depth, t.back.back.tag, t.back.back.back.back.back.back.tag, type(node)}"""

_DECR_IF_GT = """
local now = redis.call('get', KEYS[1])
if not now then return nil end
if now > ARGV[1] then return redis.call('decr', KEYS[1]) end
return redis.call('get', KEYS[1])"""

# (Valkey freezes TIME inside a script: there the loop ends after its 100,000 calls, not after 5 ms)
_WAIT_FOR_TIME = ("local t0, calls = redis.call('time'), 0"
                  " repeat local t = redis.call('time') calls = calls + 1"
                  " until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 5000 or calls >= 10000 ")

_TRICK = "Try trick "

CASES: dict[str, T] = {
    # -- replies and conversions ---------------------------------------------------------------------------------
    "oom_plain_write": T("Script - disallow write on OOM", C("redis.call('set', KEYS[1], '2')", ["k"]), server="oom"),
    "a_string_reply": T("EVAL - Does Lua interpreter replies to our requests?", C("return 'one reply'")),
    "return_globals": T("EVAL - Return _G", C("return _G")),
    "metatable_index_raising": T("EVAL - Return table with a metatable that raise error",
                                 C("local t = setmetatable({}, {__index = function() no_such_function() end})"
                                   " return t")),
    "metatable_index_calling_redis": T("EVAL - Return table with a metatable that call redis",
                                       C("return setmetatable({}, {__index = function()"
                                         " redis.call('set', KEYS[1], 'touched') end})", ["k"]),
                                       after=[("EXISTS", "{1}")]),
    "lua_number_reply": T("EVAL - Lua integer -> Redis protocol type conversion", C("return 42.9")),
    "lua_string_reply": T("EVAL - Lua string -> Redis protocol type conversion", C("return 'words here'")),
    "lua_true_reply": T("EVAL - Lua true boolean -> Redis protocol type conversion", C("return true")),
    "lua_false_reply": T("EVAL - Lua false boolean -> Redis protocol type conversion", C("return false")),
    "lua_ok_table_reply": T("EVAL - Lua status code reply -> Redis protocol type conversion",
                            C("return {ok = 'ALL GOOD'}")),
    "lua_err_table_reply": T("EVAL - Lua error reply -> Redis protocol type conversion",
                             C("return {err = 'ERR it went wrong'}")),
    "lua_nested_array_reply": T("EVAL - Lua table -> Redis protocol type conversion",
                                C("return {7, 8, 'nine', {10, 'eleven'}, 12}")),
    "keys_and_argv": T("EVAL - Are the KEYS and ARGV arrays populated correctly?",
                       C("return {ARGV[2], KEYS[2], ARGV[1], KEYS[1]}", ["first", "second"], ["x1", "x2"])),
    "call_get": T("EVAL - is Lua able to call Redis API?", C("return redis.call('get', KEYS[1])", ["k"],
                                                              setup=[("SET", "{1}", "stored")])),
    "integer_to_lua": T("EVAL - Redis integer -> Lua type conversion",
                        C("local v = redis.pcall('incr', KEYS[1]) return {type(v), v}", ["n"],
                          setup=[("SET", "{1}", "41")])),
    "bulk_to_lua": T("EVAL - Redis bulk -> Lua type conversion",
                     C("local v = redis.pcall('get', KEYS[1]) return {type(v), v}", ["s"],
                       setup=[("SET", "{1}", "some bulk")])),
    "array_to_lua": T("EVAL - Redis multi bulk -> Lua type conversion",
                      C("local v = redis.pcall('lrange', KEYS[1], 0, -1) return {type(v), #v, v[3], v[1], v[2]}",
                        ["l"], setup=[("RPUSH", "{1}", "p", "q", "r")])),
    "status_to_lua": T("EVAL - Redis status reply -> Lua type conversion",
                       C("local v = redis.pcall('set', KEYS[1], 'x') return {type(v), v.ok, #v}", ["k"])),
    "error_to_lua": T("EVAL - Redis error reply -> Lua type conversion",
                      C("local v = redis.pcall('incr', KEYS[1]) return {type(v), v.err}", ["s"],
                        setup=[("SET", "{1}", "not a number")])),
    "nil_to_lua": T("EVAL - Redis nil bulk reply -> Lua type conversion",
                    C("local v = redis.pcall('get', KEYS[1]) return {type(v), tostring(v), v == false}",
                      ["absent"])),
    # -- the caller's database --------------------------------------------------------------------------------
    "caller_db_is_scripts_db": T("EVAL - Is the Lua client using the currently selected DB?",
                                 C("return redis.pcall('get', KEYS[1])", ["k"],
                                   setup=[("SELECT", "0"), ("SET", "{1}", "in db 0"), ("SELECT", str(OTHER_DB)),
                                          ("SET", "{1}", "in the other db")]), db=OTHER_DB),
    "select_does_not_leak": T("EVAL - SELECT inside Lua should not affect the caller",
                              C(f"return redis.pcall('select', '{OTHER_DB}')", ["k"],
                                setup=[("SET", "{1}", "caller's value")]), after=[("GET", "{1}")]),
    # -- refused commands ---------------------------------------------------------------------------------------
    **{f"refused_{cmd}": T(f"EVAL - Scripts can't run {cmd} command",
                           C(f"return redis.pcall('{cmd}', {args})", keys))
       for cmd, args, keys in (("blpop", "KEYS[1], 0", ["l"]), ("brpop", "KEYS[1], 0", ["l"]),
                               ("brpoplpush", "KEYS[1], KEYS[2], 0", ["l1", "l2"]),
                               ("blmove", "KEYS[1], KEYS[2], 'RIGHT', 'LEFT', 0", ["l1", "l2"]),
                               ("bzpopmin", "KEYS[1], 0", ["z"]), ("bzpopmax", "KEYS[1], 0", ["z"]))},
    **{f"{cmd}_{'block' if block else 'no_block'}": T(
        "EVAL - Scripts can't run XREAD and XREADGROUP with BLOCK option",
        C(f"return redis.pcall('{cmd}', {head}{', ' if head else ''}{block}'STREAMS', KEYS[1], '{last}')", ["s"],
          setup=[("XGROUP", "CREATE", "{1}", "grp", "$", "MKSTREAM")], compare_state=cmd == "xread"))
       for cmd, head, last in (("xread", "", "$"), ("xreadgroup", "'GROUP', 'grp', 'me'", ">"))
       for block in ("", "'BLOCK', 0, ")},
    "randomkey_then_write": T("EVAL - Scripts can run non-deterministic commands",
                              C("redis.pcall('randomkey') return redis.pcall('set', KEYS[1], 'after')", ["k"])),
    "call_without_arguments": T("EVAL - No arguments to redis.call/pcall is considered an error",
                                C("return redis.call()")),
    "call_unknown_command": T("EVAL - redis.call variant raises a Lua error on Redis cmd error (1)",
                              C("redis.call('notacommand', 'x')")),
    "call_wrong_arity": T("EVAL - redis.call variant raises a Lua error on Redis cmd error (1)",
                          C("redis.call('get', KEYS[1], 'one', 'two')", ["k"])),
    "call_wrong_type": T("EVAL - redis.call variant raises a Lua error on Redis cmd error (1)",
                         C("redis.call('rpush', KEYS[1], 'item')", ["s"], setup=[("SET", "{1}", "a string")])),
    # -- cjson, cmsgpack, bit -----------------------------------------------------------------------------------
    "json_numbers_decoded": T("EVAL - JSON numeric decoding",
                              C("return table.concat(cjson.decode('[0.0, -25e2, -7, 0.5e-4, 2048.75, 0e5, 3E2]'),"
                                " ' ')")),
    "json_object_decoded": T("EVAL - JSON string decoding",
                             C("local d = cjson.decode('{\"first\": \"x\", \"second\": \"y\"}')"
                               " return {d.second, d.first}")),
    # (cjson settings hold for every client of the server until put back: these run on the throwaway server)
    "json_smoke": T("EVAL - JSON smoke test", C(_JSON_SMOKE), server="alone"),
    "json_invalid_numbers_allowed": T("EVAL - JSON smoke test", C(_JSON_INVALID_NUMBERS), server="alone"),
    "msgpack_doubles": T("EVAL - cmsgpack can pack double?",
                         C(_HEX + "return {hex(cmsgpack.pack(1.1)), hex(cmsgpack.pack(2.5)),"
                                  " hex(cmsgpack.pack(-0.1))}")),
    "msgpack_negative_int64": T("EVAL - cmsgpack can pack negative int64?",
                                C(_HEX + "return {hex(cmsgpack.pack(-2^41 - 5)), hex(cmsgpack.pack(-2^31 - 1))}")),
    "msgpack_smoke": T("EVAL - cmsgpack pack/unpack smoke test", C(_MSGPACK_SMOKE)),
    "msgpack_cycle": T("EVAL - cmsgpack can pack and unpack circular references?", C(_MSGPACK_CYCLE)),
    "hex_literals": T("EVAL - Numerical sanity check from bitop",
                      C("return {0x7fffffff == 2147483647, tostring(0xffffffff), tostring(-1), 0x10 + 1}")),
    "bit_basics": T("EVAL - Verify minimal bitop functionality",
                    C("return {bit.tobit(1), bit.band(1), bit.bxor(1, 2), bit.bor(1, 2, 4, 8, 16, 32, 64, 128),"
                      " bit.tobit(2^32 + 3)}")),
    "trailing_comment": T("EVAL - Able to parse trailing comments", C("return 'still here' -- the end")),
    # -- EVAL_RO --------------------------------------------------------------------------------------------------
    "eval_ro_reads": T("EVAL_RO - Successful case", C("return redis.call('get', KEYS[1])", ["k"],
                                                       setup=[("SET", "{1}", "readable")]), via="EVAL_RO"),
    "eval_ro_refuses_writes": T("EVAL_RO - Cannot run write commands",
                                C("redis.call('del', KEYS[1])", ["k"], setup=[("SET", "{1}", "kept")]),
                                via="EVAL_RO"),
    # -- SORT inside a script --------------------------------------------------------------------------------------
    "sort_numbers_desc": T("SORT is normally not alpha re-ordered for the scripting engine",
                           C("return redis.call('sort', KEYS[1], 'desc')", ["set"],
                             setup=[("SADD", "{1}", "3", "20", "100", "7", "1")])),
    "sort_by_constant": T("SORT BY <constant> output gets ordered for scripting",
                          C("return redis.call('sort', KEYS[1], 'by', 'nosort')", ["set"],
                            setup=[("SADD", "{1}", *"m b zz a c q bb aa x d e f g h i j k".split())])),
    "sort_by_constant_get": T("SORT BY <constant> with GET gets ordered for scripting",
                              C("return redis.call('sort', KEYS[1], 'by', 'nosort', 'get', '#', 'get', KEYS[2])",
                                ["set", "w:*"], setup=[("SADD", "{1}", "c", "a", "b")])),
    # -- redis.*, globals ------------------------------------------------------------------------------------------
    "sha1hex_values": T("redis.sha1hex() implementation",
                        C("return {redis.sha1hex(''), redis.sha1hex('emqlab scripting cases')}")),
    "read_undeclared_global": T("Globals protection reading an undeclared global variable",
                                C("return never_declared")),
    "write_undeclared_global": T("Globals protection setting an undeclared global*", C("fresh_global = 10")),
    "decrement_if_greater": T("Test an example script DECR_IF_GT", C(_DECR_IF_GT, ["n"], setup=[("SET", "{1}", "6")]),
                              runs=[["3"]] * 6),
    "unseeded_random_moves_on": T("random numbers are random now", C("return tostring(math.random())"),
                                  runs=[[], []], compare=_differ),
    "seeded_random": T("Scripting engine PRNG can be seeded correctly",
                       C("math.randomseed(ARGV[1]) return {tostring(math.random()), math.random(1000)}"),
                       runs=[["17"], ["17"], ["23"]]),
    "rpush_from_unpack": T("Call Redis command with many args from Lua (issue #1764)",
                           C("local t = {} for i = 1, 150 do t[#t + 1] = i * 2 end"
                             " redis.call('rpush', KEYS[1], unpack(t)) return redis.call('lrange', KEYS[1], 0, -1)",
                             ["l"])),
    "number_argument_precision": T("Number conversion precision test (issue #1118)",
                                   C("redis.call('set', KEYS[1], 9007199254740991 - 2)"
                                     " return redis.call('get', KEYS[1])", ["k"])),
    "numeric_string_precision": T("String containing number precision test (regression of issue #1118)",
                                  C("redis.call('set', KEYS[1], '98765432109876543210')"
                                    " return redis.call('get', KEYS[1])", ["k"])),
    "arity_too_few": T("Scripts can handle commands with incorrect arity", C("redis.call('set', KEYS[1])", ["k"])),
    "arity_none": T("Scripts can handle commands with incorrect arity", C("redis.call('decr')")),
    "argument_counts_vary": T("Correct handling of reused argv (issue #1939)",
                              C("for i = 1, 12 do redis.call('SET', KEYS[1], i)"
                                " redis.call('MGET', KEYS[1], KEYS[2], KEYS[3]) redis.call('EXPIRE', KEYS[1], 0)"
                                " redis.call('GET', KEYS[1]) redis.call('MGET', KEYS[3], KEYS[1], KEYS[2]) end"
                                " return redis.call('mget', KEYS[1], KEYS[2], KEYS[3])", ["a", "b", "c"],
                                setup=[("SET", "{2}", "bee")])),
    "sha1hex_without_argument": T("Functions in the Redis namespace are able to report errors",
                                  C("return redis.sha1hex()")),
    "cluster_reset_refused": T("CLUSTER RESET can not be invoke from within a script",
                               C("redis.call('cluster', 'reset', 'soft')")),
    "hgetall_resp2": T("Script with RESP3 map", C("redis.setresp(2) return redis.call('hgetall', KEYS[1])", ["h"],
                                                  setup=[("HSET", "{1}", "field", "value")])),
    "hgetall_setresp3_on_resp2_client": T("Script with RESP3 map",
                                          C("redis.setresp(3) return redis.call('hgetall', KEYS[1])", ["h"],
                                            setup=[("HSET", "{1}", "field", "value")])),
    "recursive_reply": T("Script return recursive object",
                         C("local x = {} local y = {x} x[1] = y return x"), raw=True),
    "unpack_many_arguments": T("Script check unpack with massive arguments",
                               C("local t = {} for i = 1, 7999 do t[i] = 'v' end"
                                 " return redis.call('lpush', KEYS[1], unpack(t))", ["l"])),
    "read_key_with_ttl": T("Script read key with expiration set",
                           C("if redis.call('exists', KEYS[1]) == 1 then return redis.call('get', KEYS[1]) end"
                             " return 'gone'", ["k"], setup=[("SET", "{1}", "alive", "EX", "100")])),
    "del_key_with_ttl": T("Script del key with expiration set",
                          C("redis.call('del', KEYS[1]) return redis.call('exists', KEYS[1])", ["k"],
                            setup=[("SET", "{1}", "alive", "EX", "100")])),
    "acl_check_allowed": T("Script ACL check", C("return redis.acl_check_cmd('set', KEYS[1], 5)", ["xk"]),
                           server="acl"),
    "acl_check_command_denied": T("Script ACL check", C("return redis.acl_check_cmd('hset', KEYS[1], 'f', 5)",
                                                        ["xk"]), server="acl"),
    "acl_check_key_denied": T("Script ACL check", C("return redis.acl_check_cmd('set', 'y' .. KEYS[1], 5)", ["xk"]),
                              server="acl"),
    "acl_check_unknown_command": T("Script ACL check", C("return redis.acl_check_cmd('nosuchcommand', 'a')"),
                                   server="acl"),
    # (the user of the "acl" profile may ask ACL WHOAMI and ACL DRYRUN, as the host does; this one may not)
    "acl_check_denied_unasked": T("Script ACL check", C("return redis.acl_check_cmd('hset', KEYS[1], 'f', 5)",
                                                        ["xk"]), server="acl-unasked"),
    "bytecode_refused": T("Binary code loading failed",
                          C("return loadstring(string.dump(function() return 'ran' end))()")),
    "trick_setmetatable_G": T(_TRICK + "global protection 1", C("setmetatable(_G, nil)")),
    "trick_G_metatable_index": T(_TRICK + "global protection 2",
                                 C("local mt = getmetatable(_G) mt.__index = {}")),
    "trick_replace_redis": T(_TRICK + "global protection 3", C("redis = {call = function() return 1 end}")),
    "trick_replace_G": T(_TRICK + "global protection 4", C("_G = {}")),
    "trick_redis_field": T(_TRICK + "readonly table on redis table", C("redis.pcall = function() end")),
    "trick_cjson_field": T(_TRICK + "readonly table on json table", C("cjson.decode = function() end")),
    "trick_cmsgpack_field": T(_TRICK + "readonly table on cmsgpack table", C("cmsgpack.unpack = function() end")),
    "trick_bit_field": T(_TRICK + "readonly table on bit table", C("bit.band = function() end")),
    "no_loadfile": T("Test loadfile are not available", C("return loadfile('/etc/hostname')")),
    "no_dofile": T("Test dofile are not available", C("return dofile('/etc/hostname')")),
    "no_print": T("Test print are not available", C("print('to stdout')")),
    # -- what a client sees of the replication tests --------------------------------------------------------------
    "error_after_a_write_keeps_it": T("Before the replica connects we issue two EVAL commands",
                                      C("redis.call('incr', KEYS[1]) redis.call('notacommand')", ["n"]),
                                      after=[("GET", "{1}")]),
    "pushes_reach_a_blocked_client": T("Replication of script multiple pushes to list with BLPOP",
                                       C("redis.call('lpush', KEYS[1], 'one') redis.call('lpush', KEYS[1], 'two')",
                                         ["l"]), waiter=("BRPOP", "{1}", "5")),
    "replicate_commands_after_write": T("Redis.replicate_commands() can be issued anywhere now",
                                        C("redis.call('set', KEYS[1], 'v') return redis.replicate_commands()",
                                          ["k"])),
    "set_repl_first": T("Redis.set_repl() can be issued before replicate_commands() now",
                        C("redis.set_repl(redis.REPL_ALL)")),
    "set_repl_invalid": T("Redis.set_repl() don't accept invalid values", C("redis.set_repl(4321)")),
    "set_repl_local_writes": T("Test selective replication of certain Redis commands from Lua",
                               C("redis.call('set', KEYS[1], 'a') redis.set_repl(redis.REPL_NONE)"
                                 " redis.call('set', KEYS[2], 'b') redis.set_repl(redis.REPL_AOF)"
                                 " redis.call('set', KEYS[3], 'c') redis.set_repl(redis.REPL_ALL)"
                                 " redis.call('set', KEYS[4], 'd')"
                                 " return redis.call('mget', KEYS[1], KEYS[2], KEYS[3], KEYS[4])",
                                 ["a", "b", "c", "d"])),
    "random_after_replicate_commands": T("PRNG is seeded randomly for command replication",
                                         C("redis.replicate_commands() return tostring(math.random())"),
                                         runs=[[], []], compare=_differ),
    "time_written_to_a_key": T("Using side effects is not a problem with command replication",
                               C("redis.call('set', KEYS[1], redis.call('time')[1])", ["k"], compare_state=False),
                               after=[("EXISTS", "{1}")]),
    # -- protocol and time ----------------------------------------------------------------------------------------
    "big_number_with_crlf": T("test $extra malformed big number protocol parsing",
                              C("return {big_number = '12\\r\\n34'}")),
    "time_frozen": T("Script block the time during execution",
                     C("redis.call('set', KEYS[1], 'v', 'PX', '1') " + _WAIT_FOR_TIME
                       + "return redis.call('exists', KEYS[1])", ["k"], compare_state=False)),
    "expired_key_deleted": T("Script delete the expired key",
                             C("return redis.call('exists', KEYS[1])", ["k"],
                               setup=[("SET", "{1}", "v", "PX", "1"), ("PAUSE", "0.01")]),
                             server="no-active-expire", after=[("DBSIZE",)]),
    # -- shebang and flags ---------------------------------------------------------------------------------------
    "shebang_other_engine": T("Shebang support for lua engine", C("#!javascript\nreturn 1")),
    "shebang_lua": T("Shebang support for lua engine", C("#!lua\nreturn 'via shebang'")),
    "shebang_unknown_option": T("Unknown shebang option", C("#!lua colour=blue\nreturn 1")),
    "shebang_unknown_flag": T("Unknown shebang flag", C("#!lua flags=no-writes,sideways\nreturn 1")),
    "oom_no_shebang_write": T("allow-oom shebang flag", C("redis.call('set', KEYS[1], 'new') return 1", ["k"],
                                                          setup=[("SET", "{1}", "old")]), server="oom",
                              after=[("GET", "{1}")]),
    "oom_no_shebang_read": T("allow-oom shebang flag", C("return redis.call('get', KEYS[1])", ["k"],
                                                         setup=[("SET", "{1}", "old")]), server="oom"),
    "oom_shebang_default_flags": T("allow-oom shebang flag", C("#!lua flags=\nreturn 1"), server="oom"),
    "oom_allow_oom_write": T("allow-oom shebang flag",
                             C("#!lua flags=allow-oom\nredis.call('set', KEYS[1], 'new') return 1", ["k"],
                               setup=[("SET", "{1}", "old")]), server="oom", after=[("GET", "{1}")]),
    "oom_no_writes_read": T("allow-oom shebang flag",
                            C("#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", ["k"],
                              setup=[("SET", "{1}", "old")]), server="oom"),
    "oom_no_writes_eval_ro": T("allow-oom shebang flag",
                               C("#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", ["k"],
                                 setup=[("SET", "{1}", "old")]), server="oom", via="EVAL_RO"),
    "oom_no_shebang_eval_ro": T("allow-oom shebang flag", C("return redis.call('get', KEYS[1])", ["k"],
                                                            setup=[("SET", "{1}", "old")]), server="oom",
                                via="EVAL_RO"),
    "no_writes_flag": T("no-writes shebang flag", C("#!lua flags=no-writes\nredis.call('incr', KEYS[1])", ["n"])),
    "noreplicas_no_writes_read": T("not enough good replicas",
                                   C("#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", ["k"],
                                     setup=[("SET", "{1}", "v")]), server="noreplicas"),
    "noreplicas_no_shebang_read": T("not enough good replicas", C("return redis.call('get', KEYS[1])", ["k"],
                                                                  setup=[("SET", "{1}", "v")]), server="noreplicas"),
    "noreplicas_shebang_read": T("not enough good replicas", C("#!lua\nreturn redis.call('get', KEYS[1])", ["k"],
                                                               setup=[("SET", "{1}", "v")]), server="noreplicas"),
    "noreplicas_no_shebang_write": T("not enough good replicas", C("return redis.call('set', KEYS[1], 'w')", ["k"]),
                                     server="noreplicas"),
    "stale_no_shebang_read": T("allow-stale shebang flag", C("return redis.call('get', KEYS[1])", ["k"]),
                               server="stale"),
    "stale_no_writes": T("allow-stale shebang flag", C("#!lua flags=no-writes\nreturn 1"), server="stale"),
    "stale_allow_stale": T("allow-stale shebang flag", C("#!lua flags=allow-stale,no-writes\nreturn 1"),
                           server="stale"),
    "stale_allow_stale_read": T("allow-stale shebang flag",
                                C("#!lua flags=allow-stale,no-writes\nreturn redis.call('get', KEYS[1])", ["k"]),
                                server="stale"),
    "stale_allow_stale_echo": T("allow-stale shebang flag",
                                C("#!lua flags=allow-stale,no-writes\nreturn redis.call('echo', 'still here')"),
                                server="stale"),
    # -- errors as a client sees them ----------------------------------------------------------------------------
    "oom_call_error": T("Consistent eval error reporting", C("return redis.call('set', KEYS[1], 'y')", ["k"]),
                        server="oom"),
    "oom_pcall_err_field": T("Consistent eval error reporting",
                             C("return redis.pcall('set', KEYS[1], 'y').err", ["k"]), server="oom"),
    "oom_pcall_returned": T("Consistent eval error reporting", C("return redis.pcall('set', KEYS[1], 'y')", ["k"]),
                            server="oom"),
    "select_out_of_range_call": T("Consistent eval error reporting", C("return redis.call('select', 1234)")),
    "select_out_of_range_pcall": T("Consistent eval error reporting", C("return redis.pcall('select', 1234).err")),
    "eval_ro_write_call": T("Consistent eval error reporting", C("return redis.call('set', KEYS[1], 'y')", ["k"]),
                            via="EVAL_RO"),
    "eval_ro_write_pcall": T("Consistent eval error reporting",
                             C("return redis.pcall('set', KEYS[1], 'y').err", ["k"]), via="EVAL_RO"),
    "geoadd_wrong_type": T("Consistent eval error reporting",
                           C("return redis.call('geoadd', KEYS[1], '2.35', '48.85', 'here')", ["g"],
                             setup=[("SET", "{1}", "str")])),
    "error_reply_code": T("LUA redis.error_reply API", C("return redis.error_reply('OWN_CODE with text')")),
    "error_reply_empty": T("LUA redis.error_reply API with empty string", C("return redis.error_reply('')")),
    "status_reply_text": T("LUA redis.status_reply API", C("return redis.status_reply('OWN_STATUS with text')")),
    "lua_pcall_ok": T("LUA test pcall", C("local ok, v = pcall(function() return 5 end)"
                                          " return tostring(ok) .. '/' .. v")),
    "lua_pcall_global_error": T("LUA test pcall with error",
                                C("local ok, v = pcall(function() return not_defined end)"
                                  " return tostring(ok) .. '/' .. v")),
    "table_argument_refused": T("LUA test pcall with non string/integer arg",
                                C("return redis.call('echo', {1})")),
    "call_after_table_argument": T("LUA test pcall with non string/integer arg",
                                   C("return redis.call('echo', 'fine')")),
}

#: Cases the host answers differently, with the reason; each is asserted to still differ.
KNOWN_DIFFERENCES: dict[str, str] = {
    "hgetall_setresp3_on_resp2_client": "intended (docs/lua-host.md): redis.setresp(3) is refused",
    "time_frozen": "intended (docs/lua-host.md): a live host run is one round trip per command, and the server's"
                   " key expiry is not frozen between them (the SET PX 1 key has expired at the EXISTS)",
    "acl_check_denied_unasked": "redis.acl_check_cmd asks the server (ACL WHOAMI, ACL DRYRUN); a user who may"
                                " send neither gets the host's old answer, true (docs/lua-host.md)",
    "oom_allow_oom_write": "allow-oom lifts Redis's OOM check for a script's own writes (scriptVerifyOOM); the"
                           " host's SET is a plain client command, which the server refuses over maxmemory",
}


#: what differs only when the live server is Valkey (the cases on the throwaway redis-server are unaffected)
VALKEY_DIFFERENCES: dict[str, str] = {
    "msgpack_cycle": "Valkey's Lua visits a table's string keys in another order than Redis 7.0's, so the packed"
                     " map lists its members in another order (docs/lua-host.md, 'Servers tested')",
}


def known_difference(name: str) -> str | None:
    """Why case ``name`` differs where it runs (``None``: it must agree)."""
    if name in KNOWN_DIFFERENCES:
        return KNOWN_DIFFERENCES[name]
    if name in VALKEY_DIFFERENCES and not CASES[name].server and live_is_valkey():
        return VALKEY_DIFFERENCES[name]
    return None

# -- the throwaway server's profiles: commands on an admin connection around each side's run -------------------

PROFILES: dict[str, tuple[list[tuple[str, ...]], list[tuple[str, ...]]]] = {
    # nothing to switch: the case changes what every script of the server sees (its cjson settings)
    "alone": ([], []),
    "oom": ([("CONFIG", "SET", "maxmemory", "1")], [("CONFIG", "SET", "maxmemory", "0")]),
    "acl": ([("ACL", "SETUSER", "scripter", "reset", "on", ">pw", "+@scripting", "+set", "+client|info", "+ping",
              "+acl|whoami", "+acl|dryrun", "~x*")], [("ACL", "DELUSER", "scripter")]),
    "acl-unasked": ([("ACL", "SETUSER", "scripter", "reset", "on", ">pw", "+@scripting", "+set", "+client|info",
                      "+ping", "~x*")], [("ACL", "DELUSER", "scripter")]),
    "noreplicas": ([("CONFIG", "SET", "min-replicas-to-write", "1")],
                   [("CONFIG", "SET", "min-replicas-to-write", "0")]),
    "stale": ([("CONFIG", "SET", "replica-serve-stale-data", "no"), ("REPLICAOF", "127.0.0.1", "1")],
              [("REPLICAOF", "NO", "ONE"), ("CONFIG", "SET", "replica-serve-stale-data", "yes")]),
    "no-active-expire": ([("DEBUG", "SET-ACTIVE-EXPIRE", "0")], [("DEBUG", "SET-ACTIVE-EXPIRE", "1")]),
}


@pytest.fixture(scope="module")
def own_url() -> Iterator[str]:
    with own_redis_server("--enable-debug-command", "yes") as url:
        yield url


def _own_client(url: str, user: str | None = None) -> redis.Redis:
    kw = redis.connection.parse_url(url)
    if user:
        kw.update(username=user, password="pw")
    c = redis.Redis(**kw, single_connection_client=True, protocol=2, socket_timeout=10)
    c.response_callbacks = {}  # type: ignore[assignment]
    return c


def _host_run(host: LuaHost, c: redis.Redis, t: T, keys: list[str], args: list[Any]) -> Any:
    kw: dict[str, Any] = {}
    if t.via == "EVAL_RO":
        kw["read_only"] = True
    return host.run(c, t.case.src, keys, args, **kw)


def _as_host_shows(fn: Callable[[], Any]) -> Any:
    """``fn()`` (an ``EVAL``), its error text as the host shows it: redis-py drops the code of some errors from
    the message (``ERR``, ``OOM``, ``MASTERDOWN`` …, kept in ``status_code``), the host only ``ERR``; the others
    are put back (the exception classes: ``test_error_classes_differ_from_redis_py``)."""
    try:
        return fn()
    except redis.exceptions.ResponseError as e:
        code, msg = getattr(e, "status_code", None), str(e)
        if code and code != "ERR" and not msg.startswith(code):
            raise redis.exceptions.ResponseError(f"{code} {msg}") from e
        raise


def _sub(arg: Any, keys: list[str]) -> Any:
    if isinstance(arg, str) and arg.startswith("{") and arg.endswith("}") and arg[1:-1].isdigit():
        return keys[int(arg[1:-1]) - 1]
    return arg


def _switch(admin: redis.Redis | None, cmds: list[tuple[str, ...]]) -> None:
    for cmd in cmds:
        assert admin is not None
        admin.execute_command(*cmd)


def _blocked(watcher: redis.Redis, client_id: int) -> bool:
    info = bytes(watcher.execute_command("CLIENT", "LIST", "ID", str(client_id)))
    return b" flags=b " in info


def _side(t: T, via: str, own_url: str | None) -> tuple[Any, ...]:
    """One side's run: ``(outcomes, follow-up, key state, after-replies, waiter's reply)``."""
    case = t.case
    own = own_url if t.server else None
    prefix = f"{'x' if own else 'emq:'}{{{unique_queue('rs')}}}:"
    keys = [prefix + k for k in case.keys]
    admin = _own_client(own) if own else None
    c = _own_client(own) if own else _client(t.db)
    on, off = PROFILES[t.server] if t.server else ([], [])
    waiter_out: list[Any] = []
    thread = None
    try:
        for cmd in case.setup:
            if cmd[0] == "PAUSE":
                time.sleep(float(cmd[1]))
            else:
                (admin or c).execute_command(*(_sub(a, keys) for a in cmd))
        _switch(admin, on)
        if t.server.startswith("acl"):  # the runs are the ACL user's (who exists only now)
            c.close()
            c = _own_client(own, "scripter")  # type: ignore[arg-type]
        if t.waiter is not None:
            w, watcher = _client(), _client()
            wid = int(w.execute_command("CLIENT", "ID"))
            thread = threading.Thread(target=lambda: waiter_out.append(
                _outcome(lambda: w.execute_command(*(_sub(a, keys) for a in t.waiter)))))  # type: ignore[union-attr]
            thread.start()
            deadline = time.monotonic() + 5
            while not _blocked(watcher, wid) and time.monotonic() < deadline:
                time.sleep(0.005)
            watcher.close()
        outs = []
        host = LuaHost(dialect=server_dialect(c))  # (the live server may be Valkey: the host follows it)
        for args in t.runs or [case.args]:
            if via == "host":
                out = _outcome(lambda args=args: _host_run(host, c, t, keys, args))
            elif t.raw:
                out = _raw_eval(case.src.encode())
            else:
                out = _outcome(lambda args=args: _as_host_shows(
                    lambda: c.execute_command(t.via, case.src, len(keys), *keys, *args)))
            if t.raw and via == "host":
                out = _resp(out[1]) if out[0] == "ok" else out
            outs.append(_show(out, prefix.encode()))
        if thread is not None:
            thread.join(10)
            w.close()
        if not t.server.startswith("acl"):  # (the ACL user's connection ends with the user: switched off after)
            _switch(admin, off)
        after = [_show(_outcome(lambda cmd=cmd: c.execute_command(*(_sub(a, keys) for a in cmd))), prefix.encode())
                 for cmd in t.after]
        follow = _follow_up(c)
        state = _state(prefix) if case.compare_state and not own else {}
        compared = t.compare(outs) if t.compare else outs
        return compared, follow, state, after, [_show(x, prefix.encode()) for x in waiter_out]
    finally:
        c.close()
        _switch(admin, off)
        if admin is not None:
            for k in admin.execute_command("KEYS", prefix.replace("{", "\\{").replace("}", "\\}") + "*"):
                admin.delete(k)
            admin.close()
        else:
            _delete(prefix)


def run_sides(name: str, own_url: str | None) -> tuple[Any, Any]:
    t = CASES[name]
    return _side(t, "host", own_url), _side(t, "eval", own_url)


@pytest.fixture(scope="module")
def outcomes() -> dict[str, bool]:
    return {}  # case name -> agreed (filled by test_case, read by test_report)


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, request: pytest.FixtureRequest, outcomes: dict[str, bool]) -> None:
    own = request.getfixturevalue("own_url") if CASES[name].server else None
    via_host, via_eval = run_sides(name, own)
    agreed = via_host == via_eval
    outcomes[name] = agreed
    why = known_difference(name)
    if why is not None:
        assert not agreed, f"{name} now agrees: remove it from KNOWN_DIFFERENCES ({why})"
        return
    labels = ("reply or error", "follow-up (db, multi, PING)", "key state", "after-commands", "blocked client")
    for label, h, e in zip(labels, via_host, via_eval, strict=True):
        assert h == e, f"{label}: host {h!r} != EVAL {e!r}"


# -- the bookkeeping --------------------------------------------------------------------------------------------


def test_every_title_is_covered_or_set_aside() -> None:
    covered = {t.title for t in CASES.values()}
    titles = set(TCL_TITLES)
    assert len(TCL_TITLES) == 147
    assert covered <= titles, sorted(covered - titles)
    assert set(NOT_APPLICABLE) <= titles
    assert covered & set(NOT_APPLICABLE) == set()
    assert titles - covered - set(NOT_APPLICABLE) == set()
    assert set(KNOWN_DIFFERENCES) <= set(CASES)


def report(agreed: dict[str, bool] | None = None) -> str:
    """The count: scripting.tcl's tests, how many are applicable, the cases, how many agree, the differences."""
    applicable = [t for t in dict.fromkeys(TCL_TITLES) if t not in NOT_APPLICABLE]
    blocks = [t for t in TCL_TITLES if t not in NOT_APPLICABLE]
    lines = [f"Redis {TAG} tests/unit/scripting.tcl: {len(TCL_TITLES)} test blocks ({len(set(TCL_TITLES))} titles);"
             f" {len(blocks)} applicable ({len(applicable)} titles), {len(TCL_TITLES) - len(blocks)} not",
             f"cases: {len(CASES)}"]
    if agreed is not None:
        ran = [n for n in CASES if n in agreed]
        lines.append(f"ran {len(ran)}: {sum(agreed[n] for n in ran)} agree, {sum(not agreed[n] for n in ran)} differ")
        for n in ran:
            if not agreed[n]:
                lines.append(f"  differs: {n} [{CASES[n].title}]: {known_difference(n) or 'UNEXPECTED'}")
    return "\n".join(lines)


def test_report(outcomes: dict[str, bool]) -> None:
    print("\n" + report(outcomes or None))
    if outcomes:
        assert all(agreed != (known_difference(n) is not None) for n, agreed in outcomes.items())


def test_host_error_type() -> None:
    # (the host's errors are LuaScriptError, a redis ResponseError: _outcome reads both sides alike)
    assert issubclass(LuaScriptError, redis.exceptions.ResponseError)


def test_error_classes_differ_from_redis_py(own_url: str) -> None:
    """Pinned: an error reply whose code redis-py drops from the message (``OOM``, ``MASTERDOWN``, ``NOSCRIPT``
    …) comes out of ``EVAL`` as redis-py's class for it with the bare text; the host raises a
    :class:`LuaScriptError` keeping the code (it drops ``ERR`` only). The reply texts are the same."""
    src = "return redis.call('set', KEYS[1], 'v')"
    admin, c = _own_client(own_url), _own_client(own_url)
    admin.execute_command("CONFIG", "SET", "maxmemory", "1")
    try:
        with pytest.raises(redis.exceptions.ResponseError) as via_eval:
            c.execute_command("EVAL", src, 1, "xk")
        with pytest.raises(redis.exceptions.ResponseError) as via_host:
            LuaHost().run(c, src, ["xk"])
    finally:
        admin.execute_command("CONFIG", "SET", "maxmemory", "0")
        admin.close()
        c.close()
    assert type(via_eval.value) is redis.exceptions.OutOfMemoryError
    assert str(via_eval.value).startswith("command not allowed when used memory")
    assert type(via_host.value) is LuaScriptError
    assert str(via_host.value) == "OOM " + str(via_eval.value)
