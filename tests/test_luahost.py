"""The Lua host reproduces Redis's scripting environment: every conversion and sandbox rule gives the same
reply (or the same error) through the host as through EVALSHA, on fakeredis and on the live server."""

from __future__ import annotations

import re
import secrets

import pytest
import redis

from emqlab.backend.connect import command_executor, connect, is_fake, raw_client, unique_queue
from emqlab.scripting.dialect import REDIS7, Dialect
from emqlab.scripting.host import LuaHost, LuaScriptError
from emqlab.scripting.registry import KeyCountMismatch, Script, ScriptSet
from tests.conftest import live_conn, live_dialect

# name -> (script, keys suffixes). Keys are made unique per test under the test's own queue base.
CASES: dict[str, tuple[str, list[str]]] = {
    # Lua -> Redis reply conversion
    "number_truncates": ("return 3.99", []),
    "negative_truncates": ("return -3.99", []),
    "table_to_first_nil": ("return {1, 2, nil, 4}", []),
    "nested_tables": ("return {1, {2, {3, 'x'}}, 'y'}", []),
    "true_is_one_false_is_nil": ("return {true, false, 1}", []),
    "false_alone_is_nil": ("return false", []),
    "nil_return": ("return nil", []),
    "status_reply": ("return redis.status_reply('FINE')", []),
    "ok_table": ("return {ok = 'FINE'}", []),
    "error_reply": ("return redis.error_reply('MYERR custom failure')", []),
    "err_table_without_code": ("return {err = 'plain words'}", []),
    "string_with_nul_and_high_bytes": ("return 'a\\0b\\255\\254'", []),
    "empty_table": ("return {}", []),
    "map_table_is_empty_array": ("return {a = 1}", []),
    # Redis -> Lua conversion
    "integer_reply_is_number": ("redis.call('SET', KEYS[1], '5'); return type(redis.call('INCR', KEYS[1]))", ["n"]),
    "bulk_is_string": ("redis.call('SET', KEYS[1], 'v'); return type(redis.call('GET', KEYS[1]))", ["s"]),
    "nil_bulk_is_false": ("local v = redis.call('GET', KEYS[1]); return {type(v), tostring(v)}", ["absent"]),
    "status_is_ok_table": ("local r = redis.call('SET', KEYS[1], 'v'); return {type(r), r.ok}", ["s"]),
    "type_is_status": ("redis.call('RPUSH', KEYS[1], 'a'); return redis.call('TYPE', KEYS[1]).ok", ["l"]),
    "array_is_table": ("redis.call('RPUSH', KEYS[1], 'a', 'b'); local t = redis.call('LRANGE', KEYS[1], 0, -1);"
                       " return {type(t), #t, t[2]}", ["l"]),
    "empty_array": ("local t = redis.call('LRANGE', KEYS[1], 0, -1); return {type(t), #t}", ["absent"]),
    "nil_inside_array": ("redis.call('SET', KEYS[1], 'x'); local t = redis.call('MGET', KEYS[1], KEYS[2]);"
                         " return {t[1], type(t[2])}", ["a", "absent"]),
    "hgetall_flat": ("redis.call('HSET', KEYS[1], 'f', 'v'); return redis.call('HGETALL', KEYS[1])", ["h"]),
    "set_returns_ok": ("return redis.call('SET', KEYS[1], 'v')", ["s"]),
    "set_get_is_bulk": ("redis.call('SET', KEYS[1], 'old'); local r = redis.call('SET', KEYS[1], 'v', 'GET');"
                        " return {type(r), r}", ["s"]),
    "hmset_status": ("local r = redis.call('HMSET', KEYS[1], 'a', '1'); return r.ok", ["h"]),
    "binary_round_trip": ("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])", ["b"]),
    # arguments
    "number_args_formatted": ("redis.call('SET', KEYS[1], 7225344000000000); redis.call('SET', KEYS[2], 0.1);"
                              " redis.call('SET', KEYS[3], -2); return redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])",
                              ["n1", "n2", "n3"]),
    "table_arg_rejected": ("return redis.call('SET', KEYS[1], {})", ["s"]),
    "no_args_rejected": ("return redis.call()", []),
    # errors
    "call_raises_error_reply": ("redis.call('SET', KEYS[1], 'abc'); return redis.call('INCR', KEYS[1])", ["s"]),
    "pcall_returns_err_table": ("redis.call('SET', KEYS[1], 'abc'); local e = redis.pcall('INCR', KEYS[1]);"
                                " return {type(e), e.err}", ["s"]),
    "lua_pcall_sees_message": ("redis.call('SET', KEYS[1], 'abc'); local ok, e = pcall(redis.call, 'INCR', KEYS[1]);"
                               " return {tostring(ok), type(e), e}", ["s"]),
    "wrongtype": ("redis.call('SET', KEYS[1], 'abc'); return redis.call('LPUSH', KEYS[1], 'x')", ["s"]),
    "error_string": ("error('boom')", []),
    "error_table": ("error({err = 'MYERR custom'})", []),
    "unknown_command": ("return redis.call('NOSUCHCMD')", []),
    # sandbox
    "no_new_globals": ("x = 1; return 1", []),
    "undefined_global_read": ("return undefinedvar", []),
    "no_os": ("return os.time()", []),
    "no_io": ("return io.write('x')", []),
    "no_require": ("return require('x')", []),
    "no_loadfile": ("return loadfile('/etc/passwd')", []),
    "unpack_is_global": ("return {unpack({1, 2, 3})}", []),
    "keys_and_argv": ("return {KEYS[1] ~= nil, #ARGV, ARGV[1]}", ["k"]),
    "sha1hex": ("return redis.sha1hex('abc')", []),
    "log_levels": ("return {redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING}", []),
    "cjson_round_trip": ("local t = cjson.decode('{\"a\":[1,2,{\"b\":null}]}');"
                         " return {t.a[2], tostring(t.a[3].b == cjson.null), cjson.encode({1, 2, 3})}", []),
    "cmsgpack_unpack": ("local t = cmsgpack.unpack(ARGV[1]); return {t.token, t.n}", []),
}

# fakeredis's own EVAL differs from Redis here (the host does not): the reason is fakeredis's, not ours.
FAKE_EVAL_DIFFERS = {
    "lua_pcall_sees_message": "fakeredis hands pcall a Python exception object, Redis 7 the message string",
    "error_table": "fakeredis reports a raised {err=…} table as 'Error running script …'",
    "unknown_command": "fakeredis forwards the server's 'unknown command' text",
    "no_args_rejected": "fakeredis raises a Python TypeError",
    "sha1hex": "fakeredis has no redis.sha1hex",
    "cjson_round_trip": "fakeredis's cjson is Python json (null handling differs)",
}

ARGV_FOR = {
    "binary_round_trip": [b"\x00\xff\xfe msgpack \x93\x01"],
    "keys_and_argv": [b"first", b"second"],
    "cmsgpack_unpack": [b"\x82\xa5token\xa3abc\xa1n\xcd\x01\x00"],  # {token: "abc", n: 256}
}

# Redis's suffix names the script's SHA1, Valkey's does not (emqlab.scripting.dialect)
_SUFFIX = re.compile(r" script: (?:[0-9a-f]{40}, )?on @user_script:-?\d+\.$")
_FAKE_PREFIX = re.compile(r"^Error running script \(call to f_[0-9a-f]+\): @user_script:\?: ")


def normalize(outcome: object) -> object:
    """Errors compared by their message without the server's ' script: <sha>, on @user_script:N.' suffix (the
    line is unknowable after a tail call, see emqlab.scripting.host) and without fakeredis's own wrapping."""
    if isinstance(outcome, BaseException):
        msg = str(outcome).split("\n")[0]
        msg = _FAKE_PREFIX.sub("", msg)
        msg = _SUFFIX.sub("", msg)
        msg = re.sub(r"^user_script:\d+: ", "", msg)
        return ("error", msg)
    if isinstance(outcome, list):
        return [normalize(x) for x in outcome]
    return outcome


def outcome_of(fn):  # type: ignore[no-untyped-def]
    try:
        return fn()
    except redis.exceptions.ResponseError as e:
        return e


@pytest.fixture(scope="module")
def host() -> LuaHost:
    return LuaHost()


_HOSTS: dict[Dialect, LuaHost] = {}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.live) if c in FAKE_EVAL_DIFFERS else c
                                  for c in sorted(CASES)])  # (those are compared with the live server on fake too)
def test_host_matches_evalsha(case: str, conn: redis.Redis, qkeys) -> None:  # type: ignore[no-untyped-def]
    src, key_names = CASES[case]
    # the host follows the server its result is compared with: the live one (Redis 7.0 or Valkey), or the
    # embedded fakeredis server (Redis 7-flavoured)
    dialect = live_dialect() if not is_fake(conn) or case in FAKE_EVAL_DIFFERS else REDIS7
    if dialect not in _HOSTS:
        _HOSTS[dialect] = LuaHost(dialect=dialect)
    host = _HOSTS[dialect]
    args = ARGV_FOR.get(case, [])
    keys_a = [qkeys.key(f"a:{k}") for k in key_names]
    keys_b = [qkeys.key(f"b:{k}") for k in key_names]
    keys_c = [qkeys.key(f"c:{k}") for k in key_names]
    via_host = outcome_of(lambda: host.run(command_executor(conn), src, keys_b, args))
    via_redispy = outcome_of(lambda: host.run(raw_client(conn), src, keys_c, args))
    assert normalize(via_redispy) == normalize(via_host), "the redis-py executor and the direct one disagree"
    if is_fake(conn) and case in FAKE_EVAL_DIFFERS:
        # the host still behaves as Redis does: compare it with the live server (keys of a fresh queue)
        live = live_conn()
        base = qkeys.base.replace("{q}", "{" + unique_queue("t") + "}")
        live_keys = [base + f"a:{k}" for k in key_names]
        via_server = outcome_of(lambda: live.eval(src, len(live_keys), *live_keys, *args))
        if live_keys:
            live.delete(*live_keys)
    else:
        via_server = outcome_of(lambda: conn.eval(src, len(keys_a), *keys_a, *args))
    assert normalize(via_host) == normalize(via_server)
    # and both runs left the same values behind
    for ka, kb in zip(keys_a, keys_b, strict=True):
        if is_fake(conn) and case in FAKE_EVAL_DIFFERS:
            continue
        assert conn.dump(ka) == conn.dump(kb), f"{case}: {ka} and {kb} differ"


def test_error_has_redis_shape(host: LuaHost) -> None:
    conn = connect()
    with pytest.raises(LuaScriptError) as e:
        host.run(raw_client(conn), "local a = 1\nerror('boom')", [], [])
    sha = Script("x", 0, b"local a = 1\nerror('boom')").sha
    assert str(e.value) == f"user_script:2: boom script: {sha}, on @user_script:2."


def test_stepper_yields_each_command(host: LuaHost) -> None:
    run = host.start(b"redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])", [b"k"], [b"v"])
    assert run.pending == (b"SET", b"k", b"v")
    run.resume(b"OK")
    assert run.pending == (b"GET", b"k")
    run.resume(b"v")
    assert run.done and run.result == b"v" and run.commands == 2
    with pytest.raises(RuntimeError):
        run.resume(b"again")


def test_interleaved_runs_keep_their_own_keys(host: LuaHost) -> None:
    src = b"local a = redis.call('GET', KEYS[1]); local b = redis.call('GET', KEYS[1]); return {KEYS[1], ARGV[1], a, b}"
    r1 = host.start(src, [b"one"], [b"1"])
    r2 = host.start(src, [b"two"], [b"2"])
    assert r1.pending == (b"GET", b"one") and r2.pending == (b"GET", b"two")
    r2.resume(b"x")
    r1.resume(b"y")
    r1.resume(b"y2")
    r2.resume(b"x2")
    assert r1.result == [b"one", b"1", b"y", b"y2"]
    assert r2.result == [b"two", b"2", b"x", b"x2"]


def test_pcall_can_wrap_yielding_calls(host: LuaHost) -> None:
    conn = raw_client(connect())
    src = ("local ok, v = pcall(function() redis.call('SET', KEYS[1], 'x'); return redis.call('GET', KEYS[1]) end)"
           " return {tostring(ok), v}")
    assert host.run(conn, src, ["k"], []) == [b"true", b"x"]


def test_error_reply_arrives_as_exception_to_resume(host: LuaHost) -> None:
    run = host.start(b"local e = redis.pcall('INCR', KEYS[1]); return e.err", [b"k"], [])
    run.resume(redis.exceptions.ResponseError("value is not an integer or out of range"))
    assert run.result == b"ERR value is not an integer or out of range"


def test_execute_recovers_from_noscript(conn: redis.Redis, qkeys) -> None:  # type: ignore[no-untyped-def]
    # A script the server has never seen (unique text) takes the NOSCRIPT path; on fakeredis (a server
    # this test created) SCRIPT FLUSH empties the cache for real. A shared live server's cache is never flushed.
    text = f"-- {secrets.token_hex(8)}\nredis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])"
    scripts = ScriptSet({"probe": Script("probe", 1, text.encode())}, "test")
    assert scripts.execute(conn, "probe", [qkeys.key("p")], ["v1"]) == b"v1"
    if is_fake(conn):
        conn.script_flush()
        assert conn.script_exists(scripts["probe"].sha) == [False]
    assert scripts.execute(conn, "probe", [qkeys.key("p")], ["v2"]) == b"v2"


def test_execute_refuses_wrong_key_count(conn: redis.Redis) -> None:
    scripts = ScriptSet({"probe": Script("probe", 2, b"return 1")}, "test")
    with pytest.raises(KeyCountMismatch, match="probe-2.lua takes 2 KEYS, the call passed 1"):
        scripts.execute(conn, "probe", ["k"], [])


def test_lua_error_inside_script_is_reported_and_keeps_earlier_writes(conn: redis.Redis, qkeys, host) -> None:  # type: ignore[no-untyped-def]
    # Redis scripts are isolated, not transactional (PROTOCOL.md §1.8): a write before the error stays.
    src = "redis.call('SET', KEYS[1], 'written'); local t = nil; return t.field"
    for via, key in (("server", qkeys.key("e1")), ("host", qkeys.key("e2"))):
        with pytest.raises(redis.exceptions.ResponseError, match="attempt to index"):
            if via == "server":
                conn.eval(src, 1, key)
            else:
                host.run(raw_client(conn), src, [key], [])
        assert conn.get(key) == b"written"


def test_select_in_a_script_is_restored_by_one_last_command(host: LuaHost) -> None:
    run = host.start(b"redis.call('SELECT', '9') return redis.call('GET', KEYS[1])", [b"k"], [], db=3)
    assert run.pending == (b"SELECT", b"9")
    run.resume(b"OK")
    assert run.pending == (b"GET", b"k")
    run.resume(b"v")
    assert run.restoring and run.pending == (b"SELECT", b"3") and not run.done
    run.resume(b"OK")
    assert run.done and run.result == b"v" and run.db == 3


def test_refused_commands_are_listed_not_pending(host: LuaHost) -> None:
    run = host.start(b"local e = redis.pcall('MULTI') return redis.call('GET', KEYS[1])", [b"k"], [])
    assert run.pending == (b"GET", b"k") and run.commands == 1
    assert run.refused == [((b"MULTI",), b"ERR This Redis command is not allowed from script")]
    run.close()


def test_runs_of_one_script_keep_their_own_keys_while_interleaved() -> None:
    """The host keeps a loaded script for its next run: runs of one script that are live at the same time
    (a split search interleaves them) each see their own KEYS and ARGV, and a run started after another
    ended, while a third is still live, too."""
    host = LuaHost()
    src = b"local k = KEYS[1]\nredis.call('GET', k)\nredis.call('GET', KEYS[1])\nreturn {k, KEYS[1], ARGV[1]}"
    a = host.start(src, [b"a"], [b"1"])
    b = host.start(src, [b"b"], [b"2"])
    assert a.pending == (b"GET", b"a") and b.pending == (b"GET", b"b")
    a.resume(None)
    b.resume(None)
    a.resume(None)
    assert a.done and a.result == [b"a", b"a", b"1"]
    c = host.start(src, [b"c"], [b"3"])
    assert c.pending == (b"GET", b"c")
    b.resume(None)
    assert b.done and b.result == [b"b", b"b", b"2"]
    c.resume(None)
    c.resume(None)
    assert c.done and c.result == [b"c", b"c", b"3"]
    assert host.live_runs == 0
