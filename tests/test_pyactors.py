"""Python actors (issue 11 item 2): plain functions over redis-py under the scheduler.

The oracle: for every toy pair and mode, the reduced search's counts equal an exact enumeration (the
unreduced search runs every interleaving), the explored count is the same on repeated runs and on the live
server, and never exceeds the interleavings. The race itself: the split finish double-places exactly where
the lock is cleared before the job is unmarked; the script and the transaction do not.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import redis

from emqlab.backend.connect import connect
from emqlab.check.api import explore_actors, scenario
from emqlab.engine.pyactors import ActorError, refusal
from emqlab.engine.scenario import ScenarioError, loads
from emqlab.explore import explore
from tests import pyactors_toys as toys
from tests.conftest import live_conn

RACE = {"state": {"active": ["1"], "stalled": ["1"]}, "locks": {"1": "W1"}}


def run(actors: dict, mode: str = "split", **kw: object):
    return explore_actors(actors, mode=mode, **{**RACE, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("finisher, sweeper, mode, race, bound", [
    (toys.finish, toys.sweep, "split", True, None),  # plain commands: split or not, there is no script
    (toys.finish, toys.pipelined_sweep, "atomic", True, None),
    (toys.script_finish, toys.sweep, "split", True, 2),  # (173 interleavings unbounded: bound 2 keeps it quick)
    (toys.script_finish, toys.sweep, "atomic", False, None),
    (toys.async_finish, toys.pipelined_sweep, "split", True, None),
    (toys.transaction_finish, toys.sweep, "split", False, None),
    (toys.transaction_finish, toys.pipelined_sweep, "atomic", False, None),
])
def test_counts_are_exact_and_the_race_is_found_where_it_is(finisher, sweeper, mode, race, bound) -> None:
    reduced = run({"W1": finisher, "S1": sweeper}, mode, preemptions=bound)
    full = run({"W1": finisher, "S1": sweeper}, mode, reduce=False, preemptions=bound)
    assert reduced.report.raw_exact and full.report.raw_exact
    assert reduced.report.raw_interleavings == full.report.raw_interleavings
    assert full.report.explored == full.report.raw_interleavings or bound is not None
    assert reduced.report.interleavings_with == full.report.interleavings_with
    assert reduced.report.outcomes == full.report.outcomes
    assert reduced.report.explored <= reduced.report.raw_interleavings
    assert ("double-placement" in reduced.kinds) is race
    if race:
        h = reduced.assert_some("double-placement")
        because = next(a["because"] for a in h.anomalies if a["kind"] == "double-placement")
        assert "after W1 cleared the lock" in because and "SREM" in because
        assert sorted(h.final.placements["1"]) == ["completed", "wait"]
    else:
        reduced.assert_never("double-placement")


@pytest.mark.live
def test_the_same_counts_every_time_and_on_the_live_server() -> None:
    live = live_conn()  # skips (fails in CI) without a server
    first = run({"W1": toys.finish, "S1": toys.sweep})
    for _ in range(9):
        again = run({"W1": toys.finish, "S1": toys.sweep})
        assert again.report.explored == first.report.explored
        assert again.report.claims() == first.report.claims()
    for finisher, mode in ((toys.finish, "split"), (toys.script_finish, "split"), (toys.script_finish, "atomic"),
                           (toys.transaction_finish, "split")):
        fake = run({"W1": finisher, "S1": toys.sweep}, mode)
        on_live = run({"W1": finisher, "S1": toys.sweep}, mode, conn=connect(liveurl_of(live)))
        assert on_live.report.claims()["interleavings"] == fake.report.claims()["interleavings"]
        assert on_live.report.interleavings_with == fake.report.interleavings_with
        assert on_live.report.outcomes == fake.report.outcomes
        if mode == "split" or finisher is not toys.script_finish:  # (an atomic user script: see below)
            assert on_live.report.explored == fake.report.explored


def liveurl_of(client: redis.Redis) -> str:
    kw = client.connection_pool.connection_kwargs
    return f"redis://{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def test_the_witness_is_the_window_between_del_and_srem() -> None:
    res = run({"W1": toys.finish, "S1": toys.sweep})
    h = res.witness("double-placement")
    assert h is not None
    ops = [(s.actor, s.op) for s in h.steps]
    dele = ops.index(("W1", "DEL"))
    srem = ops.index(("W1", "SREM"))
    assert all(a == "S1" for a, _ in ops[dele + 1:srem])  # the sweep ran inside the gap, and only there
    assert {op for _, op in ops[dele + 1:srem]} >= {"EXISTS", "RPUSH"}
    with pytest.raises(AssertionError) as e:
        res.assert_never("double-placement")
    assert h.schedule in str(e.value) and "DEL" in str(e.value) and "why:" in str(e.value)
    replayed = run({"W1": toys.finish, "S1": toys.sweep}, schedule=h.schedule)
    assert replayed.history is not None and "double-placement" in replayed.history.kinds


def test_split_evalsha_runs_the_script_one_call_per_step() -> None:
    res = run({"W1": toys.script_finish, "S1": toys.sweep}, schedule="v1:W1*7")
    h = res.history
    assert h is not None
    w1 = [s.op for s in h.steps if s.actor == "W1"]
    # redis-py's Script: EVALSHA -> NOSCRIPT (the run's cache starts without it), SCRIPT LOAD, then the
    # script's own redis.calls, each a step
    assert w1 == ["EVALSHA", "SCRIPT", "GET", "DEL", "SREM", "LREM", "ZADD"]
    assert h.steps[0].reply.startswith("NOSCRIPT")
    assert h.final.placements["1"] == ["completed"]
    atomic = run({"W1": toys.script_finish, "S1": toys.sweep}, "atomic", schedule="v1:W1*3")
    assert atomic.history is not None
    assert [s.op for s in atomic.history.steps if s.actor == "W1"] == ["EVALSHA", "SCRIPT", "EVALSHA"]


def test_decoded_clients_and_built_in_actors_mix() -> None:
    res = run({"W1": toys.decoded, "S1": {"kind": "sweep"}}, schedule="v1:W1*4", jobs={"1": {"name": "email"}})
    assert res.history is not None and res.history.final.placements["1"] == ["completed"]
    mixed = run({"W1": toys.finish, "S1": {"kind": "sweep", "max_stalled": 1}})
    assert "double-placement" in mixed.kinds


def test_a_lost_reply_reaches_the_actor_as_a_connection_error() -> None:
    for applied in (True, False):
        res = explore_actors({"W1": toys.retry_once, "D1": {"kind": "disconnect", "of": "W1", "applied": applied}},
                             state={"active": ["1"]}, schedule="v1:D1.W1*3")
        h = res.history
        assert h is not None
        zadds = [s for s in h.steps if s.op == "ZADD"]
        assert len(zadds) == 2 and zadds[0].outcome == "info"  # W1 sent it again after the error
        assert zadds[0].applied is applied
        assert h.final.placements["1"] == ["completed"]
    crashed = explore_actors({"W1": toys.retry_once, "C1": {"kind": "crash", "of": "W1"}},
                             state={"active": ["1"]}, schedule="v1:W1.C1")
    assert crashed.history is not None
    assert [s.op for s in crashed.history.steps if s.actor == "W1"] == ["ZADD"]  # it sent nothing more
    assert "double-placement" in crashed.history.kinds


@pytest.mark.parametrize("actor, words", [
    (toys.outside_key, ["someone-elses-key", "outside this run's queue"]),
    (toys.outside_fakeredis, ["outside the client it was given"]),
    (toys.outside_eval, ["(EVAL <script ", "…> 1…) is refused", "someone-elses-key"]),
    (toys.raises, ["raised ValueError: boom", "step 2", "pyactors_toys.py"]),
    (toys.blocking, ["BLMOVE blocks", "LMOVE"]),
    (toys.flushes, ["FLUSHDB", "whole keyspace"]),
    (toys.sleeps, ["awaited", "cannot be scheduled deterministically"]),
])
def test_actors_that_break_the_rules_are_refused_with_the_reason(actor, words) -> None:
    with pytest.raises(ActorError) as e:
        run({"W1": actor, "S1": toys.sweep})
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.live
def test_talking_to_the_live_server_behind_the_scheduler_is_refused() -> None:
    live_conn()
    with pytest.raises(ActorError, match="outside the client it was given"):
        run({"W1": toys.outside_live, "S1": toys.sweep})


def test_refusal_rules() -> None:
    base = "emq:{q}:"
    ok = [(b"GET", b"emq:{q}:1:lock"), (b"MULTI",), (b"SCRIPT", b"LOAD", b"return 1"),
          (b"EVALSHA", b"ab", b"1", b"emq:{q}:wait"), (b"CLIENT", b"SETNAME", b"w")]
    for cmd in ok:
        assert refusal(cmd, base) is None, cmd
    bad = [(b"GET", b"emq:{other}:1"), (b"EVAL", b"return 1", b"1", b"x"), (b"SCRIPT", b"FLUSH"),
           (b"CONFIG", b"SET", b"maxmemory", b"1"), (b"SELECT", b"9"), (b"TIME",), (b"KEYS", b"*"),
           (b"BZPOPMIN", b"emq:{q}:marker", b"0"), (b"XREAD", b"BLOCK", b"0", b"STREAMS", b"emq:{q}:events", b"$"),
           (b"HELLO", b"3")]
    for cmd in bad:
        assert refusal(cmd, base), cmd


def test_a_scenario_file_names_a_python_actor(tmp_path: Path) -> None:
    (tmp_path / "my_worker.py").write_text(textwrap.dedent("""
        def finish(r, q):
            if r.get(q.keys.lock("1")) == b"W1:1":
                r.delete(q.keys.lock("1"))
                r.srem(q.keys.stalled, "1")
                r.lrem(q.keys.active, 0, "1")
                r.zadd(q.keys.completed, {"1": 1})
        """))
    path = tmp_path / "mine.yaml"
    path.write_text(textwrap.dedent("""
        name: mine
        jobs: {"1": {name: email}}
        state: {active: ["1"], stalled: ["1"], locks: {"1": W1}}
        actors:
          - {id: W1, python: "my_worker:finish"}
          - {id: S1, kind: sweep}
        """))
    from emqlab.engine.scenario import load

    rep = explore(load(path), "split")
    assert rep.anomaly_kinds == ["double-placement"]
    for text, words in (('python: "my_worker:nope"', ["mine.yaml:6:", "has no 'nope'"]),
                        ('python: "no_such_module:f"', ["cannot import 'no_such_module'"]),
                        ('python: "my_worker"', ["expected 'module:function'"])):
        path.write_text(path.read_text().replace('python: "my_worker:finish"', text))
        with pytest.raises(ScenarioError) as e:
            load(path)
        for w in words:
            assert w in str(e.value), str(e.value)
        path.write_text(path.read_text().replace(text, 'python: "my_worker:finish"'))


def test_bad_python_actor_values() -> None:
    with pytest.raises(ScenarioError, match="two arguments"):
        scenario({"W1": toys.one_argument})
    with pytest.raises(TypeError, match="expected a function"):
        scenario({"W1": 42})
    with pytest.raises(ScenarioError, match="already in active"):
        scenario({"P1": {"python": toys.finish, "adds": ["1"]}}, state={"active": ["1"]})
    with pytest.raises(ScenarioError, match="unknown job"):
        loads("name: x\njobs: {'1': {}}\nactors:\n  - {id: P1, python: 'tests.pyactors_toys:finish', adds: ['2']}\n")


def test_bullmq_clients_own_code_runs_under_the_scheduler() -> None:
    """BullMQ's Python client, unmodified: its Queue.add and its Job.moveToCompleted (its own scripts, split or
    whole) against emqlab's sweep. Split, BullMQ's finish keeps its "still in active" check, so the sweep's
    requeue makes the finish refuse (-3) instead of double-placing; its Worker's loop awaits asyncio tasks
    and cannot be scheduled (refused with the reason)."""
    pytest.importorskip("bullmq")
    from tests import pyactors_bullmq as bq

    added = explore_actors({"P1": {"python": bq.add, "adds": ["1"]}, "W1": {"kind": "worker"}}, state={},
                           mode="split", preemptions=1)
    assert added.kinds == [] and len(added.report.outcomes) == 2  # fetched after the add, or found nothing
    one = explore_actors({"P1": {"python": bq.add, "adds": ["1"]}}, state={}, mode="atomic", schedule="v1:P1*3")
    assert one.history is not None and one.history.final.placements["1"] == ["wait"]
    split = run({"W1": bq.finish, "S1": {"kind": "sweep"}}, "split", preemptions=2)
    split.assert_never("double-placement")
    assert len(split.report.outcomes) == 2  # completed, or back in wait with the finish refused
    assert any(o[0] == (("1", ("wait",)),) for o in split.report.outcomes)
    with pytest.raises(ActorError, match="awaited <_GatheringFuture"):
        explore_actors({"W1": bq.worker_loop}, state={"wait": ["1"]}, mode="atomic")


def test_a_preloaded_script_is_one_round_trip() -> None:
    res = run({"W1": toys.script_finish, "S1": toys.sweep}, "atomic", loaded=[toys.FINISH_LUA], schedule="v1:W1")
    assert res.history is not None
    assert [s.op for s in res.history.steps if s.actor == "W1"] == ["EVALSHA"]
    assert res.history.final.placements["1"] == ["completed"]


def wall_sleeper(r: redis.Redis, q: object) -> None:
    import time

    r.get("emq:{q}:1:lock")
    time.sleep(0.5)


async def timer_awaiter(r: object, q: object) -> None:
    import asyncio

    await r.get("emq:{q}:1:lock")  # type: ignore[attr-defined]
    await asyncio.sleep(0.1)


@pytest.mark.parametrize("actor, words", [
    (wall_sleeper, ["time.sleep(0.5)", "virtual"]),
    (timer_awaiter, ["awaited an asyncio timer or task", "cannot be scheduled deterministically"]),
])
def test_waiting_on_the_wall_clock_is_refused(actor, words) -> None:
    with pytest.raises(ActorError) as e:
        run({"W1": actor, "S1": toys.sweep})
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.live
def test_a_split_eval_ro_is_read_only_as_on_redis() -> None:
    """A Python actor's EVAL_RO run split: a write is refused with Redis's error, and a script whose shebang
    does not say no-writes is refused before it runs — on fakeredis and live alike."""
    for conn in (None, live_conn()):
        res = run({"W1": toys.read_only_writes}, conn=conn)
        texts = " | ".join(res.report.results["W1"])
        assert "Write commands are not allowed from read-only scripts" in texts, texts
        assert "Can not execute a script with write flag using *_ro command" in texts, texts
        assert res.report.distinct_outcomes == 1  # (nothing was written: no run differs from another)


def test_a_ctrl_c_inside_a_python_actor_stays_an_interrupt() -> None:
    """A Ctrl-C that lands while an actor's own code runs is the command's stop, not the actor's error:
    `emqlab check` stopped that way said "R2 raised KeyboardInterrupt … a Python actor that raises stops
    the run" and exited 2."""
    import os
    import signal

    def worker(r, q):  # type: ignore[no-untyped-def]
        r.get(q.keys.lock("1"))
        os.kill(os.getpid(), signal.SIGINT)  # (the user's Ctrl-C, while the actor's code runs)
        r.get(q.keys.lock("1"))

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            explore_actors({"W1": worker, "S1": "sweep"}, state={"active": ["1"], "stalled": ["1"]},
                           locks={"1": "W1"})
    finally:
        signal.signal(signal.SIGINT, saved)
