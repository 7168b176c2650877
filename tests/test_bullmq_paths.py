"""Targeted host-vs-EVAL cases for two paths of BullMQ's shipped scripts that generic arguments never reach
(issue 12's acceptance), on each of BullMQ's three script sets (the Python package's and two Node releases'):
an add that stores its options as JSON with fractional and large numbers (the
`opts` field is Redis's cjson output, so the host's cjson must format numbers as Redis's does), and the relay
scripts' lease path (register a node, heartbeat — PEXPIRE, then PEXPIREAT through the namespace refresh —
and touch the namespace), compared reply by reply and key by key (with which keys expire)."""

from __future__ import annotations

import re
from typing import Any

import msgpack
import pytest
import redis

from emqlab.backend.connect import live_url, unique_queue
from emqlab.scripting.host import LuaHost
from emqlab.scripting.registry import ScriptSet
from tests.conftest import NODE_RELEASES, bullmq_node_release, json_order_free, live_conn, live_dialect

pytestmark = pytest.mark.live


def _client(raw: bool) -> redis.Redis:
    c = redis.Redis.from_url(live_url(), single_connection_client=True, protocol=2, socket_timeout=10)
    if raw:
        c.response_callbacks = {}  # type: ignore[assignment]
    return c


@pytest.fixture(scope="module")
def live() -> redis.Redis:
    live_conn()  # skips (fails in CI) without a server
    return _client(raw=True)


@pytest.fixture(scope="module")
def reader() -> redis.Redis:
    return _client(raw=False)


#: The script sets: the Python package's (3.4.4, pinned by the test extra) and the Node releases' (fetched).
SETS = ("python", *(f"node-{v}" for v in NODE_RELEASES))

#: Which sets ship the relay scripts (added to BullMQ after 5.34.0): a set missing from here that has them,
#: or one listed that lacks them, fails test_relay_scripts_are_where_expected instead of skipping.
RELAY_SETS = frozenset({"python", "node-6.7.0"})


def _load(which: str) -> tuple[str, ScriptSet]:
    if which == "python":
        pytest.importorskip("bullmq")
        return which, ScriptSet.bullmq()
    return which, ScriptSet.from_dir(bullmq_node_release(which.removeprefix("node-")))


@pytest.fixture(scope="module", params=SETS)
def bullmq(request: pytest.FixtureRequest) -> tuple[str, ScriptSet]:
    return _load(request.param)


#: addStandardJob's KEYS by count: 5.34.0 has no `delayed` key (8 KEYS), the later releases add it (9).
ADD_KEYS = {
    9: ["wait", "paused", "meta", "id", "completed", "delayed", "active", "events", "marker"],
    8: ["wait", "paused", "meta", "id", "completed", "active", "events", "marker"],
}


_CLOCK = re.compile(rb"1[6-9]\d{11}")  # a ms timestamp read from the server's clock (TIME): differs run to run


def _state(c: redis.Redis, prefix: str) -> dict[bytes, tuple[Any, bool]]:
    pattern = prefix.replace("{", "\\{").replace("}", "\\}") + "*"
    out = {}
    for k in c.scan_iter(match=pattern, count=1000):
        kind = c.type(k)
        if kind == b"hash":
            value: Any = sorted((f, b"<clock>" if _CLOCK.fullmatch(v) else v) for f, v in c.hgetall(k).items())
        elif kind == b"zset":
            value = c.zrange(k, 0, -1)  # (members only: scores carry the server's clock)
        elif kind == b"stream":
            value = "<stream>"  # entry ids are server time
        else:
            value = c.dump(k)
        out[k[len(prefix):]] = (value, int(c.pttl(k)) > 0)
    return out


def _json_free(side: Any) -> Any:
    """On Valkey, ``side`` with its JSON compared without the members' order (:func:`json_order_free`)."""
    return json_order_free(side) if live_dialect().valkey else side


def _both(live: redis.Redis, reader: redis.Redis, calls: list[tuple[Any, list[str], list[Any]]],
          prefix_of: Any) -> list[Any]:
    sides = []
    host = LuaHost(dialect=live_dialect())  # (compared with EVAL on the live server: its dialect)
    for via in ("host", "eval"):
        prefix = prefix_of()
        replies = []
        try:
            for script, keys, args in calls:
                ks = [k.replace("{p}", prefix) for k in keys]
                avs = [a.replace("{p}", prefix) if isinstance(a, str) else a for a in args]
                try:
                    if via == "host":
                        reply = host.run(live, script.text, ks, avs)
                    else:
                        reply = live.execute_command("EVAL", script.text, len(ks), *ks, *avs)
                except redis.exceptions.ResponseError as e:
                    reply = ("error", str(e).replace(prefix, "<p>"))
                replies.append(reply.replace(prefix.encode(), b"<p>") if isinstance(reply, bytes) else reply)
            sides.append(_json_free((replies, _state(reader, prefix))))
        finally:
            found = list(reader.scan_iter(match=prefix.replace("{", "\\{").replace("}", "\\}") + "*"))
            if found:
                reader.delete(*found)
    return sides


@pytest.mark.parametrize("opts", [
    {"attempts": 3, "delay": 0, "backoff": {"type": "exponential", "delay": 1 / 3}, "jobId": "1"},
    {"attempts": 1.5, "big": 2 ** 53, "bigger": 2 ** 60, "tiny": 1e-7, "neg": -0.1, "jobId": "1"},
    {"removeOnComplete": {"age": 3600.25, "count": 100}, "priority": 0, "jobId": "1"},
])
def test_add_stores_the_same_opts_json(live: redis.Redis, reader: redis.Redis, bullmq: tuple[str, ScriptSet],
                                       opts: dict[str, Any]) -> None:
    add = bullmq[1]["addStandardJob"]
    names = ADD_KEYS[add.numkeys]
    host = LuaHost(dialect=live_dialect())
    sides = []
    for via in ("host", "eval"):
        prefix = f"bull:{{{unique_queue('addj')}}}:"
        keys = [prefix + n for n in names]
        # (the args array: prefix, custom id, name, timestamp, then the parent/repeat/dedup fields, all nil)
        args = [msgpack.packb([prefix, "1", "email", 1700000000000, None, None, None, None, None, None]),
                '{"to":"ada@example.com","n":0.1}', msgpack.packb(opts)]
        text = add.text
        try:
            if via == "host":
                reply = host.run(live, text, keys, args)
            else:
                reply = live.execute_command("EVAL", text, len(keys), *keys, *args)
            stored = reader.hget(prefix + "1", "opts")
            sides.append(_json_free((reply, stored, _state(reader, prefix))))
        finally:
            found = list(reader.scan_iter(match=prefix.replace("{", "\\{").replace("}", "\\}") + "*"))
            if found:
                reader.delete(*found)
    assert sides[0] == sides[1]
    assert sides[0][0] == b"1" and sides[0][1]  # added, with its options stored as JSON


RELAY = ("relayRegisterNode", "relayHeartbeat", "relayTouchNamespace")


def test_relay_scripts_are_where_expected(bullmq: tuple[str, ScriptSet]) -> None:
    which, scripts = bullmq
    present = [n for n in RELAY if n in scripts.names()]
    assert present == (list(RELAY) if which in RELAY_SETS else []), which


@pytest.mark.parametrize("which", sorted(RELAY_SETS))
def test_relay_lease_path_host_equals_eval(live: redis.Redis, reader: redis.Redis, which: str) -> None:
    _, scripts = _load(which)
    prefix_of = lambda: f"bull:{{{unique_queue('relay')}}}:"  # noqa: E731
    calls = [
        (scripts["relayRegisterNode"], ["{p}nodes"], ["{p}", "n1", "5000", '{"host":"a"}', "1", "100"]),
        (scripts["relayHeartbeat"], ["{p}nodes"], ["{p}", "n1", "5000"]),
        (scripts["relayTouchNamespace"], ["{p}:relay:namespaces"], ["ns1", "7000"]),
        (scripts["relayHeartbeat"], ["{p}nodes"], ["{p}", "n2", "5000"]),  # an unknown node
    ]
    host_side, eval_side = _both(live, reader, calls, prefix_of)
    assert host_side == eval_side
    assert any(expires for _, expires in host_side[1].values())  # the lease path set expiries
