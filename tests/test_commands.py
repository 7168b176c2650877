"""emqlab.protocol.commands, the Redis command table: unit tests on hand-built commands, and (marked ``live``) the key
positions and read/write split checked against the server's ``COMMAND GETKEYS`` / ``COMMAND GETKEYSANDFLAGS``,
and the committed ``emqlab/protocol/commands.json`` checked against what ``scripts/gen_commands.py`` produces now."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

from emqlab.protocol import commands as cmds
from emqlab.protocol.commands import KeyAccess, command_keys, is_read_only, key_access, table_version
from tests.conftest import live_conn, live_dialect

ROOT = Path(__file__).resolve().parent.parent


def B(*args: str) -> tuple[bytes, ...]:
    return tuple(a.encode() for a in args)


def access(line: str, **kw: Any) -> KeyAccess:
    got = key_access(line.split(), **kw)
    assert got is not None, line
    return got


def keys(line: str) -> tuple[bytes, ...]:
    got = command_keys(line.split())
    assert got is not None, line
    return got


# --------------------------------------------------------------------------------------------------------
# (c) without a server


def test_table_header_and_size() -> None:
    data = json.loads(files("emqlab.protocol").joinpath("commands.json").read_text("utf-8"))
    assert data["header"]["redis_version"] == table_version()
    assert "gen_commands.py" in data["header"]["regenerate"]
    names = data["commands"]
    assert len(names) > 300
    assert list(names) == sorted(names)
    for must in ("lrem", "lmove", "eval", "evalsha", "xread", "zunionstore", "xinfo|stream", "object|encoding"):
        assert must in names


def test_package_data_lists_the_table() -> None:
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    section = text.split("[tool.setuptools.package-data]", 1)[1]
    listed = re.search(r"^emqlab\s*=\s*\[(.*?)\]", section, re.M | re.S)
    assert listed is not None and '"protocol/commands.json"' in listed.group(1)


def test_every_spec_is_understood() -> None:
    """A regenerated table with new spec types or flags must be reviewed, not silently guessed at."""
    for name, entry in cmds._table()["commands"].items():
        for flags, bs, fk in entry["key_specs"]:
            assert set(flags) <= cmds._KNOWN_FLAGS, (name, flags)
            assert bs[0] in ("index", "keyword", "unknown"), (name, bs)
            assert fk[0] in ("range", "keynum", "unknown"), (name, fk)
            if "unknown" in (bs[0], fk[0]):
                assert name in ("sort", "sort_ro"), f"{name}: an unknown spec outside SORT needs a rule"
        assert "legacy_keys" not in entry, name


def test_keyless_data_commands_are_all_accounted_for() -> None:
    """Commands flagged write/readonly without key specs act on the whole keyspace, or on no key at all."""
    no_keys = {"lolwut", "function|load", "function|restore", "function|delete", "function|flush"}
    for name, entry in cmds._table()["commands"].items():
        if entry["key_specs"] or "|" not in name and any(n.startswith(name + "|") for n in cmds._table()["commands"]):
            continue
        if "write" in entry["flags"]:
            assert name in cmds.KEYSPACE_WRITERS or name in no_keys, name
        if "readonly" in entry["flags"]:
            assert name in cmds.KEYSPACE_READERS or name in no_keys, name


def test_single_key_and_list_moves() -> None:
    assert access("LREM emq:{q}:active -1 1") == KeyAccess((b"emq:{q}:active",), (b"emq:{q}:active",))
    assert access("LRANGE l 0 -1") == KeyAccess((b"l",), ())
    assert access("LMOVE a b LEFT RIGHT") == KeyAccess((b"a", b"b"), (b"a", b"b"))
    assert access("RPOPLPUSH a a") == KeyAccess((b"a",), (b"a",))
    assert keys("RPOPLPUSH a a") == (b"a", b"a")
    assert access("SMOVE s1 s2 m") == KeyAccess((b"s1", b"s2"), (b"s1", b"s2"))


def test_write_only_keys() -> None:
    assert access("DEL a b c") == KeyAccess((), (b"a", b"b", b"c"))
    assert access("MSET a 1 b 2") == KeyAccess((), (b"a", b"b"))
    assert keys("MSET a 1 a 2") == (b"a", b"a")
    assert access("RENAME a b").writes == (b"a", b"b")
    assert access("SUNIONSTORE d s1 s2") == KeyAccess((b"s1", b"s2"), (b"d",))


def test_range_specs() -> None:
    assert keys("BLPOP a b c 0") == B("a", "b", "c")  # lastkey -2: the timeout is not a key
    assert keys("LCS a b IDX") == B("a", "b")  # lastkey 1, relative to the first key
    assert keys("MGET a b c") == B("a", "b", "c")
    assert keys("EXISTS a b a") == B("a", "b", "a")
    assert keys("XREAD COUNT 1 BLOCK 0 STREAMS s1 s2 0-0 $") == B("s1", "s2")  # limit 2: half the rest
    assert keys("xreadgroup group STREAMS c streams s 0") == B("s")  # group named STREAMS: startfrom 4


def test_keynum_specs() -> None:
    assert access("ZUNIONSTORE d 2 z1 z2 WEIGHTS 1 2") == KeyAccess((b"z1", b"z2"), (b"d",))
    assert keys("ZINTERSTORE d 1 z") == B("d", "z")
    assert keys("SINTERCARD 2 a b LIMIT 5") == B("a", "b")
    assert keys("LMPOP 2 a b LEFT COUNT 2") == B("a", "b")
    assert keys("BLMPOP 0 1 a RIGHT") == B("a")
    assert keys("ZMPOP 1 z MIN") == B("z")


def test_scripts_declare_their_keys() -> None:
    assert access("EVAL return 2 k1 k2 a1") == KeyAccess((b"k1", b"k2"), (b"k1", b"k2"))
    assert access("EVALSHA abc 1 k a") == KeyAccess((b"k",), (b"k",))
    assert access("FCALL f 1 k") == KeyAccess((b"k",), (b"k",))
    assert access("EVAL return 0") == KeyAccess((), ())
    assert access("EVAL_RO return 1 k") == KeyAccess((b"k",), ())
    assert access("EVAL return 1 k", trust_script_keys=False) == KeyAccess((b"k",), (b"k",), True, True)
    assert access("EVAL_RO return 1 k", trust_script_keys=False) == KeyAccess((b"k",), (), True, False)


def test_unresolvable_specs_are_conservative() -> None:
    # numkeys is not a number, or promises more keys than there are: every argument from the count on.
    assert access("EVAL return x k") == KeyAccess(B("x", "k"), B("x", "k"))
    assert access("ZUNIONSTORE d 3 z1 z2") == KeyAccess(B("3", "z1", "z2"), B("d", "3", "z1", "z2"))
    assert access("EVAL return 01 k").writes == B("01", "k")  # Redis reads no leading zeros
    # MIGRATE's KEYS spec is INCOMPLETE: everything from the earliest KEYS on (a key may be named KEYS).
    assert keys("MIGRATE h 1 '' 0 10 KEYS a KEYS b") == B("''", "a", "KEYS", "b")
    assert keys("MIGRATE h 1 k 0 10 COPY") == B("k")


def test_keyword_at_every_occurrence() -> None:
    # STORE spelled as the stored key: a keyword spec looks at every STORE/STOREDIST, so nothing is missed.
    got = access("GEORADIUS k 0 0 1 m STOREDIST STORE STORE x")
    assert set(got.writes) >= {b"STORE", b"x"}
    assert access("GEORADIUS k 0 0 1 m STORE d") == KeyAccess((b"k",), (b"d",))
    assert access("GEORADIUS k 0 0 1 m WITHDIST") == KeyAccess((b"k",), ())


def test_sort() -> None:
    assert access("SORT l") == KeyAccess((b"l",), ())
    assert access("SORT l LIMIT 0 1 STORE d ALPHA") == KeyAccess((b"l",), (b"d",))
    assert access("SORT l STORE a STORE b") == KeyAccess((b"l",), (b"b",))  # the last STORE wins
    assert access("SORT l BY nosort GET #") == KeyAccess((b"l",), ())
    assert access("SORT l BY w_* STORE d") == KeyAccess((b"l",), (b"d",), reads_any=True)
    assert access("SORT l GET h_*->f").reads_any
    assert access("SORT_RO l BY w_*") == KeyAccess((b"l",), (), reads_any=True)
    # A syntax error: every argument after a STORE may be the key, any BY/GET may look keys up.
    assert access("SORT l STORE a BOGUS STORE b") == KeyAccess((b"l",), (b"a", b"b"), reads_any=False)
    assert access("SORT l BOGUS GET #").reads_any


def test_subcommands_and_channels() -> None:
    assert access("XINFO STREAM s FULL") == KeyAccess((b"s",), ())
    assert access("object encoding k") == KeyAccess((b"k",), ())
    assert access("XGROUP CREATE s g $ MKSTREAM").writes == (b"s",)
    assert access("CONFIG GET maxmemory") == KeyAccess((), ())
    assert access("SPUBLISH ch msg") == KeyAccess((), ())  # NOT_KEY: a shard channel is not a key
    assert key_access(["XINFO"]) is None  # a container without its subcommand
    assert key_access(["XINFO", "NOPE", "s"]) is None
    assert key_access(["xinfo|stream", "s"]) is None


def test_variable_flags() -> None:
    assert access("SET k v PX 10 NX") == KeyAccess((), (b"k",))
    assert access("SET k v get") == KeyAccess((b"k",), (b"k",))
    assert access("BITFIELD k GET u8 0 OVERFLOW FAIL GET i4 4") == KeyAccess((b"k",), ())
    assert access("BITFIELD k GET u8 0 SET u8 0 1") == KeyAccess((b"k",), (b"k",))
    assert access("BITFIELD k GET u8") == KeyAccess((b"k",), (b"k",))  # a syntax error: the widest flags
    for name, entry in cmds._table()["commands"].items():
        if any("VARIABLE_FLAGS" in flags for flags, _, _ in entry["key_specs"]):
            assert name in cmds._VARIABLE_FLAGS, f"{name}: a VARIABLE_FLAGS spec without a rule keeps its widest flags"


def test_whole_keyspace_commands() -> None:
    assert access("FLUSHDB ASYNC") == KeyAccess((), (), writes_any=True)
    assert access("KEYS *") == KeyAccess((), (), reads_any=True)
    assert access("SCAN 0 MATCH x*") == KeyAccess((), (), reads_any=True)
    assert access("EXEC") == KeyAccess((), (), True, True)
    assert access("PING") == KeyAccess((), ())


def test_unknown_and_argument_types() -> None:
    assert key_access([b"NOSUCHCOMMAND", b"k"]) is None
    assert command_keys(["nosuchcommand"]) is None
    as_str = key_access(["lmove", "a", "b", "left", "right"])
    as_bytes = key_access([b"LMOVE", b"a", b"b", b"LEFT", b"RIGHT"])
    assert as_str == as_bytes and as_str is not None
    assert all(isinstance(k, bytes) for k in as_str.reads + as_str.writes)
    assert key_access(["SeT", "k", b"v", "PX", 100, "NX", "GET"]) == KeyAccess((b"k",), (b"k",))
    assert key_access([b"ZUNIONSTORE", b"d", 2, "z1", bytearray(b"z2")]) == KeyAccess((b"z1", b"z2"), (b"d",))
    assert key_access(["GET", "clé"]) == KeyAccess(("clé".encode(),), ())
    with pytest.raises(ValueError):
        key_access([])
    with pytest.raises(ValueError):
        key_access("GET k")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        key_access(["GET", None])  # type: ignore[list-item]


def test_is_read_only() -> None:
    assert is_read_only("GET") and is_read_only(b"zrangebyscore") and is_read_only("xread")
    assert not is_read_only("SET") and not is_read_only("EVAL") and not is_read_only("nosuch")
    assert is_read_only("xinfo|stream") and is_read_only("OBJECT ENCODING")
    assert is_read_only([b"XINFO", b"STREAM", b"s"]) and not is_read_only(["XGROUP", "CREATE", "s", "g", "$"])
    assert not is_read_only("XINFO")  # a container has no flags of its own
    # readonly yet its key spec is RW (PFCOUNT may rewrite the cached cardinality): key_access says write.
    assert is_read_only("PFCOUNT") and access("PFCOUNT h").writes == (b"h",)


def test_conflicts() -> None:
    get_a, set_a, get_b = access("GET a"), access("SET a 1"), access("GET b")
    assert not get_a.conflicts(get_a) and get_a.conflicts(set_a) and set_a.conflicts(get_a)
    assert not set_a.conflicts(get_b) and set_a.conflicts(set_a)
    keys_all, flush, ping = access("KEYS *"), access("FLUSHDB"), access("PING")
    assert keys_all.conflicts(set_a) and not keys_all.conflicts(get_a) and not keys_all.conflicts(keys_all)
    assert flush.conflicts(get_b) and flush.conflicts(keys_all) and not flush.conflicts(ping)
    assert access("DEL x").keys == (b"x",) and access("LMOVE a b LEFT LEFT").keys == (b"a", b"b")


# --------------------------------------------------------------------------------------------------------
# (a), (b) against the live server

# Every command the project sends (lua/ and emqlab/*.py), then a broad sample of the rest. Key names are
# distinct within a command so GETKEYSANDFLAGS' per-key flags map back onto ours.
LIVE_COMMANDS = [
    "LREM emq:{q}:active -1 1", "LPUSH l a b", "RPUSH l a", "RPOPLPUSH src dst", "LMOVE src dst LEFT RIGHT",
    "LRANGE l 0 -1", "LLEN l", "LPOP l", "LPOS l x RANK 1 MAXLEN 0", "LTRIM l 0 9", "LINDEX l 0", "LSET l 0 v",
    "ZADD z NX 1 a 2 b", "ZREM z a", "ZRANGE z 0 -1 WITHSCORES", "ZRANGE z (1 +inf BYSCORE LIMIT 0 1",
    "ZRANGEBYSCORE z -inf +inf", "ZREVRANGE z 0 0", "ZREVRANGEBYSCORE z +inf -inf LIMIT 0 1",
    "ZREMRANGEBYRANK z 0 1", "ZCARD z", "ZSCORE z a", "ZPOPMIN z 1", "ZINCRBY z 1 a", "ZRANGESTORE d z 0 -1",
    "SADD s a b", "SREM s a", "SMEMBERS s", "SISMEMBER s a", "SCARD s", "SMOVE s1 s2 a", "SPOP s",
    "HSET h f v f2 v2", "HMSET h f v", "HGET h f", "HMGET h f g", "HGETALL h", "HINCRBY h f 1", "HDEL h f g",
    "HEXISTS h f", "HSETNX h f v", "HKEYS h", "HLEN h",
    "DEL a b c", "UNLINK a b", "EXISTS a b", "GET a", "SET a v PX 100 NX GET", "SET a v", "SET a v KEEPTTL get",
    "PEXPIRE a 100", "PTTL a", "INCR a", "INCRBY a 2", "TYPE a", "RENAME a b", "RENAMENX a b", "MSET a 1 b 2",
    "MGET a b c", "GETDEL a", "GETEX a PX 10", "SETRANGE a 0 x", "APPEND a x", "COPY a b REPLACE", "TOUCH a b",
    "EXPIRE a 10", "PERSIST a", "DUMP a", "RESTORE a 0 payload", "STRLEN a",
    "XADD s MAXLEN ~ 10 * f v", "XADD s NOMKSTREAM * f v", "XTRIM s MAXLEN ~ 10", "XLEN s", "XRANGE s - +",
    "XREAD COUNT 1 BLOCK 0 STREAMS s1 s2 0-0 $", "XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >",
    "XGROUP CREATE s g $ MKSTREAM", "XINFO STREAM s", "XACK s g 1-0", "XDEL s 1-0",
    "EVAL return 2 k1 k2 a1", "EVAL return 0", "EVALSHA 0123456789abcdef0123456789abcdef01234567 1 k a",
    "EVAL_RO return 1 k", "FCALL f 2 k1 k2 x", "FCALL_RO f 1 k",
    "ZUNIONSTORE d 2 z1 z2 WEIGHTS 1 2", "ZINTERSTORE d 1 z", "ZDIFFSTORE d 2 z1 z2", "ZUNION 2 z1 z2",
    "SUNIONSTORE d s1 s2", "SINTERSTORE d s1 s2", "SDIFF s1 s2", "SINTERCARD 2 s1 s2 LIMIT 1",
    "LMPOP 2 l1 l2 LEFT COUNT 1", "ZMPOP 1 z MIN", "BLMPOP 0 2 l1 l2 LEFT", "BZMPOP 0 1 z MAX",
    "BLPOP l1 l2 0", "BRPOP l1 0", "BZPOPMIN z1 z2 0", "BLMOVE src dst LEFT RIGHT 0", "BRPOPLPUSH src dst 0",
    "GEOADD g 0 0 m", "GEORADIUS g 0 0 1 m STORE d", "GEORADIUS g 0 0 1 m STOREDIST d2",
    "GEORADIUS g 0 0 1 m WITHDIST", "GEORADIUS g 0 0 1 m STORE a STOREDIST b", "GEORADIUSBYMEMBER g m 1 km STORE d",
    "GEOSEARCHSTORE d g FROMMEMBER m BYRADIUS 1 km",
    "SORT l", "SORT l BY w_* GET # GET h_*->f STORE d", "SORT l LIMIT 0 1 STORE d ALPHA", "SORT_RO l BY nosort",
    "MIGRATE h 1 k 0 10 COPY", "OBJECT ENCODING k", "OBJECT FREQ k", "MEMORY USAGE k SAMPLES 5",
    "BITOP AND d a b", "BITFIELD k GET u8 0", "BITFIELD k OVERFLOW SAT INCRBY u8 0 1",
    "BITFIELD_RO k GET u8 0", "BITCOUNT k", "SETBIT k 1 1",
    "PFADD p a", "PFCOUNT p1 p2", "PFMERGE d p1 p2", "LCS a b", "WATCH a b", "MOVE a 1", "SWAPDB 0 1",
    "KEYS *", "SCAN 0", "RANDOMKEY", "DBSIZE", "FLUSHDB", "FLUSHDB ASYNC", "PING", "PUBLISH ch m", "SPUBLISH ch m",
    "CONFIG GET maxmemory", "INFO server", "TIME", "SCRIPT LOAD return", "SCRIPT EXISTS abc", "ZREMRANGEBYSCORE z 0 1",
    "MULTI", "EXEC", "DISCARD", "UNWATCH", "SELECT 0", "READONLY",
    "EVALSHA_RO 0123456789abcdef0123456789abcdef01234567 1 k a",
]


# Commands emqlab/*.py sends through redis-py methods (smembers, hgetall, delete, dbsize, xrange, dump, ...).
PY_METHOD_COMMANDS = {"SMEMBERS", "SET", "HGETALL", "GET", "FLUSHDB", "DEL", "DBSIZE", "ZRANGE", "ZADD", "SADD",
                      "RPUSH", "LRANGE", "HSET", "XRANGE", "TYPE", "PTTL", "PING", "HGET", "EVAL", "DUMP", "SCAN"}
# ... and the commands the explorer's schedules and tests send.
SCHEDULE_COMMANDS = set(
    "LREM LPUSH RPUSH RPOPLPUSH LMOVE LRANGE LLEN LPOS ZADD ZREM ZRANGE ZRANGEBYSCORE ZCARD ZSCORE ZPOPMIN SADD SREM"
    " SMEMBERS SISMEMBER SCARD HSET HMSET HGET HMGET HGETALL HINCRBY HDEL HEXISTS DEL UNLINK EXISTS GET SET PEXPIRE"
    " PTTL INCR XADD XTRIM EVAL EVALSHA TYPE RENAME MSET MGET SMOVE ZUNIONSTORE ZINTERSTORE SUNIONSTORE XREAD".split()
)


def test_live_list_covers_the_project() -> None:
    """Every command the Lua scripts call, and every command name spelled out in emqlab/*.py, is checked
    against the server below."""
    sent = PY_METHOD_COMMANDS | SCHEDULE_COMMANDS
    for path in (ROOT / "lua").rglob("*.lua"):
        sent |= {m.upper() for m in re.findall(r"""\bcall\(\s*["']([A-Za-z_]+)["']""", path.read_text("utf-8"))}
    known = cmds._table()["commands"]
    # (pyactors.py and cluster.py spell out commands they refuse or route for others, not commands they send)
    for path in (ROOT / "emqlab").glob("*.py"):
        if path.name not in ("commands.py", "pyactors.py", "cluster.py"):
            literals = re.findall(r"""b?["']([A-Z][A-Z_]{2,})["']""", path.read_text("utf-8"))
            sent |= {m for m in literals if m.lower() in known}
    checked = {line.split()[0].upper() for line in LIVE_COMMANDS}
    assert len(sent) > 40
    assert sent <= checked, sorted(sent - checked)


def _raw(conn: redis.Redis, *args: str | bytes) -> Any:
    plain = redis.Redis(connection_pool=conn.connection_pool)
    plain.set_response_callback("COMMAND", lambda response, **_options: response)
    return plain.execute_command(*args)


def _server_keys(conn: redis.Redis, argv: list[str]) -> list[tuple[bytes, frozenset[str]]]:
    """``COMMAND GETKEYSANDFLAGS`` as (key, flags); [] when the server says the command has no keys."""
    if len(argv) == 1:
        return []  # GETKEYSANDFLAGS needs an argument after the name; no argument, no key argument
    try:
        reply = _raw(conn, "COMMAND", "GETKEYSANDFLAGS", *argv)
    except redis.ResponseError as e:
        if "no key arguments" in str(e):
            return []
        raise
    return [(bytes(k), frozenset(f.decode().upper() for f in flags)) for k, flags in reply]


@pytest.fixture(scope="module")
def live() -> redis.Redis:
    return live_conn()  # skips (fails when CI=true) without a server


#: Where Valkey's key specs are narrower than Redis 7.0's, whose emqlab's command table is: emqlab's answer is
#: Redis 7.0's, a superset of Valkey's (it never misses a key the command touches)
VALKEY_NARROWER = {
    "SINTERSTORE d s1 s2": "Valkey flags the destination OW (written, not read), Redis 7.0 RW",
    "GEORADIUS g 0 0 1 m STORE a STOREDIST b": "Valkey names only the last STORE/STOREDIST key (the one "
                                               "written), Redis 7.0 both",
}


@pytest.mark.live
@pytest.mark.parametrize("line", LIVE_COMMANDS)
def test_keys_match_the_server(live: redis.Redis, line: str) -> None:
    argv = line.split()
    server = _server_keys(live, argv)
    ours = command_keys(argv)
    assert ours is not None
    if line in VALKEY_NARROWER and live_dialect().valkey:
        got = key_access(argv)
        assert got is not None
        assert set(ours) >= {k for k, _ in server}
        assert set(got.reads) >= {k for k, f in server if cmds._kinds(f)[0]}
        assert set(got.writes) >= {k for k, f in server if cmds._kinds(f)[1]}
        return
    # Redis lists keys spec by spec, ours are in argument order: the same for every command here.
    assert list(ours) == [k for k, _ in server], "GETKEYS"
    reads: set[bytes] = set()
    writes: set[bytes] = set()
    for key, flags in server:
        r, w = cmds._kinds(flags)
        if r:
            reads.add(key)
        if w:
            writes.add(key)
    got = key_access(argv)
    assert got is not None
    assert (set(got.reads), set(got.writes)) == (reads, writes), "GETKEYSANDFLAGS read/write split"


@pytest.mark.live
@pytest.mark.parametrize("argv", [
    ["MIGRATE", "h", "1", "", "0", "10", "KEYS", "a", "KEYS", "b"],  # MIGRATE's own parser drops the "" slot
    ["MIGRATE", "h", "1", "", "0", "10", "AUTH", "KEYS", "KEYS", "a"],  # a password spelled KEYS
    "GEORADIUS g 0 0 1 m STOREDIST STORE STORE x".split(),  # GETKEYS lists STORE twice; GEORADIUS stores to x
    "SORT l STORE a BOGUS STORE b".split(),  # a syntax error: ours keeps every STORE
])
def test_conservative_where_the_specs_cannot_tell(live: redis.Redis, argv: list[str]) -> None:
    """Where ours is conservative, it is a superset of the server's answer, never a subset."""
    server = _server_keys(live, argv)
    got = key_access(argv)
    assert got is not None
    assert {k for k, _ in server} <= set(got.keys)
    assert {k for k, f in server if cmds._kinds(f)[1]} <= set(got.writes)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_commands", ROOT / "scripts" / "gen_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.live
def test_committed_table_matches_the_server(live: redis.Redis) -> None:
    gen = _generator()
    build: Callable[[redis.Redis], dict[str, Any]] = gen.build_table
    table = build(live)
    server, committed = table["header"]["redis_version"], table_version()
    if server != committed or live_dialect().valkey:
        pytest.skip(f"commands.json was generated from Redis {committed}; the live server is "
                    f"{live_dialect().name} (redis_version {server})")
    text = (ROOT / "emqlab" / "protocol" / "commands.json").read_text("utf-8")
    assert gen.render(table) == text, "regenerate with: python scripts/gen_commands.py"
    assert gen.render(build(live)) == text  # deterministic
