"""Member footprints (:data:`emqlab.engine.footprints.MEMBER_COMMANDS`) against the server itself: every pair of
member commands the footprints call independent gives the same replies and leaves the same key in either
order, from every starting state of the grid below — an empty key, a set, a sorted set, a hash, a list with a
repeated element, a string (the wrong type for all of them) — on fakeredis and on the live server. And the
pairs that must race do: the same member written, a member against the whole key, a write against another
kind of value."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import redis

from emqlab.engine.footprints import MEMBER_COMMANDS, Footprint, of_command
from emqlab.protocol.keys import QueueKeys

#: member commands on key K with member M, as sent (every name of MEMBER_COMMANDS, and ZADD's flags)
TEMPLATES: list[tuple[str, ...]] = [
    ("SADD", "K", "M"), ("SREM", "K", "M"), ("SISMEMBER", "K", "M"), ("SMISMEMBER", "K", "M", "c"),
    ("ZADD", "K", "5", "M"), ("ZADD", "K", "NX", "3", "M"), ("ZADD", "K", "GT", "CH", "9", "M"),
    ("ZADD", "K", "INCR", "2", "M"), ("ZREM", "K", "M"), ("ZINCRBY", "K", "2", "M"), ("ZSCORE", "K", "M"),
    ("ZMSCORE", "K", "M"),
    ("HSET", "K", "M", "1"), ("HMSET", "K", "M", "7"), ("HSETNX", "K", "M", "2"), ("HINCRBY", "K", "M", "3"),
    ("HINCRBYFLOAT", "K", "M", "1.5"), ("HDEL", "K", "M"), ("HGET", "K", "M"), ("HMGET", "K", "M"),
    ("HEXISTS", "K", "M"), ("HSTRLEN", "K", "M"),
    ("LREM", "K", "1", "M"), ("LREM", "K", "-1", "M"), ("LREM", "K", "0", "M"),
]

#: starting states of key K: the commands that make it
STATES: dict[str, list[tuple[str, ...]]] = {
    "none": [],
    "set": [("SADD", "K", "a", "b", "x")],
    "zset": [("ZADD", "K", "1", "a", "2", "b", "4", "x")],
    "hash": [("HSET", "K", "a", "1", "b", "2.5", "x", "y")],
    "list": [("RPUSH", "K", "a", "b", "a", "x", "b")],
    "string": [("SET", "K", "v")],
}


def _line(template: tuple[str, ...], key: bytes, member: str) -> tuple[bytes, ...]:
    return tuple(key if w == "K" else member.encode() if w == "M" else w.encode() for w in template)


def _content(conn: redis.Redis, key: bytes) -> object:
    kind = conn.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    read: dict[str, Callable[[], object]] = {
        "none": lambda: None, "string": lambda: conn.get(key), "set": lambda: sorted(conn.smembers(key)),
        "zset": lambda: conn.zrange(key, 0, -1, withscores=True), "hash": lambda: sorted(conn.hgetall(key).items()),
        "list": lambda: conn.lrange(key, 0, -1),
    }
    return kind, read[kind]()


def _run(conn: redis.Redis, key: bytes, state: str, lines: list[tuple[bytes, ...]]) -> tuple[list[object], object]:
    conn.delete(key)
    pipe = conn.pipeline(transaction=False)
    for c in STATES[state]:
        pipe.execute_command(*_line(c, key, ""))
    for c in lines:
        pipe.execute_command(*c)
    out = pipe.execute(raise_on_error=False)[len(STATES[state]):]
    replies = [f"error: {e}" if isinstance(e, Exception) else e for e in out]
    return replies, _content(conn, key)


def test_every_command_of_the_table_is_in_the_grid() -> None:
    assert {t[0].encode() for t in TEMPLATES} == set(MEMBER_COMMANDS)


def test_independent_member_commands_commute_on_the_server(conn: redis.Redis, qkeys: QueueKeys) -> None:
    key = f"{qkeys.base}k".encode()
    independent = 0
    for (t1, t2), state in itertools.product(itertools.product(TEMPLATES, repeat=2), STATES):
        for m1, m2 in (("a", "b"), ("a", "a")):
            c1, c2 = _line(t1, key, m1), _line(t2, key, m2)
            if of_command(c1, qkeys.base).conflicts(of_command(c2, qkeys.base)):
                continue
            independent += 1
            one = _run(conn, key, state, [c1, c2])
            other = _run(conn, key, state, [c2, c1])
            assert (one[0], one[1]) == (other[0][::-1], other[1]), (state, c1, c2)
    conn.delete(key)
    assert independent > 1000  # (the grid does reach the rule: a guard against a table that calls nothing free)


def test_what_must_race_does() -> None:
    base = "emq:{q}:"
    fp = lambda *w: of_command(tuple(x.encode() for x in w), base)  # noqa: E731
    same = [("SREM", "emq:{q}:stalled", "1"), ("SADD", "emq:{q}:stalled", "1")]
    assert fp(*same[0]).conflicts(fp(*same[1]))  # the same member written
    assert fp("SREM", "emq:{q}:stalled", "1").conflicts(fp("SCARD", "emq:{q}:stalled"))  # the whole key
    assert fp("LREM", "emq:{q}:active", "-1", "2").conflicts(fp("LPOS", "emq:{q}:active", "1"))
    assert fp("HDEL", "emq:{q}:1", "atm").conflicts(fp("EXISTS", "emq:{q}:1"))
    assert fp("SADD", "emq:{q}:k", "a").conflicts(fp("HSET", "emq:{q}:k", "b", "1"))  # which type the key takes
    assert fp("SADD", "emq:{q}:k", "a").conflicts(fp("HGET", "emq:{q}:k", "b"))
    assert not fp("SREM", "emq:{q}:stalled", "1").conflicts(fp("SREM", "emq:{q}:stalled", "2"))
    assert not fp("ZADD", "emq:{q}:completed", "7", "1").conflicts(fp("ZADD", "emq:{q}:completed", "7", "2"))
    assert fp("SREM", "emq:{q}:stalled", "1").conflicts(Footprint.everything())
    assert fp("SREM", "emq:{q}:stalled", "1").conflicts(of_command((b"SREM", b"emq:{q}:stalled", b"1"), base, None))


def test_a_member_footprint_reads_as_its_key_and_member() -> None:
    assert str(of_command((b"SREM", b"emq:{q}:stalled", b"1"), "emq:{q}:")) == "r[-] w[stalled[1]]"


@pytest.mark.parametrize("line", [(b"ZADD", b"emq:{q}:z", b"NX"), (b"HSET", b"emq:{q}:h")])
def test_a_line_without_members_keeps_the_whole_key(line: tuple[bytes, ...]) -> None:
    fp = of_command(line, "emq:{q}:")
    assert all(len(k) == 2 for k in fp.reads | fp.writes)
