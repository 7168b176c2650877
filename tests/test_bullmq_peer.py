"""BullMQ's shipped scripts (loaded at run time from the installed ``bullmq`` package) run unchanged through
the Lua host and through EVALSHA, on fakeredis (with emqlab's pure-Lua cmsgpack) and on the live server,
with the same replies and the same final key states (issue 2)."""

from __future__ import annotations

import msgpack
import pytest
import redis

from emqlab.backend.connect import command_executor
from emqlab.backend.state import diff, snapshot, write_state
from emqlab.scripting.host import LuaHost
from emqlab.scripting.registry import ScriptSet


@pytest.fixture(scope="module")
def bullmq() -> ScriptSet:
    return ScriptSet.bullmq()


def test_bullmq_set_is_loaded_with_its_version(bullmq: ScriptSet) -> None:
    assert bullmq.origin.startswith("bullmq ")
    assert bullmq["moveToFinished"].numkeys == 14
    assert bullmq["extendLock"].numkeys == 2
    assert len(bullmq) > 40


def _both_ways(conn: redis.Redis, qkeys, script, state, keys, args):  # type: ignore[no-untyped-def]
    """Run ``script`` once by EVALSHA and once through the host, from the same ``state``; return both
    (reply, snapshot) pairs."""
    from emqlab.backend.connect import Namespace

    ns = Namespace(conn, qkeys)
    results = []
    for via in ("evalsha", "host"):
        ns.reset()
        write_state(conn, qkeys, state)
        if via == "evalsha":
            reply = conn.evalsha(script.sha, len(keys), *keys, *args) if conn.script_exists(script.sha)[0] \
                else conn.eval(script.text, len(keys), *keys, *args)
        else:
            reply = LuaHost().run(command_executor(conn), script, keys, args)
        results.append((reply, snapshot(conn, qkeys)))
    return results


@pytest.mark.parametrize("token", ["tok-1", "someone-else"])
def test_bullmq_extend_lock_host_equals_evalsha(conn, qkeys, bullmq, token) -> None:  # type: ignore[no-untyped-def]
    state = {"1:lock": {"value": "tok-1", "px": 30000}, "stalled": {"set": ["1", "2"]}}
    keys = [qkeys.lock("1"), qkeys.stalled]
    (r1, s1), (r2, s2) = _both_ways(conn, qkeys, bullmq["extendLock"], state, keys, [token, "30000", "1"])
    assert r1 == r2 == (1 if token == "tok-1" else 0)
    assert not diff(s1, s2)
    assert s1["stalled"] == ("set", [b"2"] if token == "tok-1" else [b"1", b"2"])


@pytest.mark.parametrize("waiting", [True, False])
def test_bullmq_move_to_active_host_equals_evalsha(conn, qkeys, bullmq, waiting) -> None:  # type: ignore[no-untyped-def]
    state = {
        "wait": ["2", "1"] if waiting else [],
        "1": {"name": "a", "data": "{}", "opts": "{}", "timestamp": "1000", "delay": "0", "priority": "0"},
        "2": {"name": "b", "data": "{}", "opts": "{}", "timestamp": "1001", "delay": "0", "priority": "0"},
        "meta": {"opts.maxLenEvents": "10000"},
        "id": "2",
    }
    opts = msgpack.packb({"token": "tok-A", "lockDuration": 30000, "limiter": None, "name": "w1"})
    keys = qkeys.move_to_active_keys()
    (r1, s1), (r2, s2) = _both_ways(conn, qkeys, bullmq["moveToActive"], state, keys, [qkeys.base, "5000", opts])
    assert r1 == r2
    assert not diff(s1, s2)
    if waiting:
        assert r1[1] == b"1"  # RPOPLPUSH takes the oldest job from the right end
        assert s1["active"] == ("list", [b"1"])
        assert s1["1:lock"] == ("string+ttl", b"tok-A")
        assert s1["1"][1][b"processedOn"] == b"5000" and s1["1"][1][b"ats"] == b"1"
    else:
        assert r1 == [0, 0, 0, 0]
