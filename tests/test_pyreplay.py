"""Synchronous Python actors without greenlet (:mod:`emqlab.engine.pysync`): replayed from their start at each
reply, stopped at their next request.

The oracle: every shipped scenario with Python actors, at its own bound, gives the same claims (interleaving
counts, anomaly kinds and counts, minimal preemptions, witness schedules and their explanations) under
``EMQLAB_PYACTORS=replay`` as under greenlet, in the split and the atomic mode (with
``EMQLAB_REPLAY_EVERY=1``, in every mode: twice the time, about a minute of CPU here). Then replay's own
rules, each shown by an actor that needs it: what ``finally`` blocks do while a stopped actor unwinds is
neither sent nor done, a crash ends a replayed actor as it ends a greenlet, and an actor that is not
replayable (it sends what it did not send the first time, or catches the stop and carries on) stops the
run with the reason.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest
import redis

from emqlab.check.api import explore_actors
from emqlab.engine.context import MODES
from emqlab.engine.pyactors import ActorError
from emqlab.engine.pysync import DRIVER_VARIABLE, sync_driver
from emqlab.engine.scenario import load, shipped_names
from emqlab.explore import explore
from tests import pyactors_toys as toys

PYTHON_SCENARIOS = [n for n in shipped_names() if any(a.kind == "python" for a in load(n).actors)]
ORACLE_MODES = MODES if os.environ.get("EMQLAB_REPLAY_EVERY") == "1" else ("split", "atomic")


def claims_under(driver: str, monkeypatch: pytest.MonkeyPatch, name: str) -> dict[str, Any]:
    monkeypatch.setenv(DRIVER_VARIABLE, driver)
    assert sync_driver() == driver
    out = {}
    for mode in ORACLE_MODES:
        try:
            out[mode] = explore(load(name), mode).claims()
        except Exception as e:  # noqa: BLE001 - compared like any answer (none is expected: asserted below)
            out[mode] = {"error": f"{type(e).__name__}: {e}"}
    return out


def test_the_oracle_covers_the_python_scenarios() -> None:
    assert len(PYTHON_SCENARIOS) >= 30 and "rq-two-schedulers" in PYTHON_SCENARIOS


@pytest.mark.slow
@pytest.mark.parametrize("name", PYTHON_SCENARIOS)
def test_replay_gives_the_greenlet_drivers_claims(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    greenlet = claims_under("greenlet", monkeypatch, name)
    replay = claims_under("replay", monkeypatch, name)
    assert not any("error" in c for c in greenlet.values()), greenlet
    assert replay == greenlet


# -- replay's rules ---------------------------------------------------------------------------------------------

def cleans_up(r: redis.Redis, q: Any) -> None:
    """Completes job 1; its finally block writes and notes, which a stopped replay must neither send nor do."""
    try:
        r.zadd(q.keys.completed, {"1": 5})
        r.lrem(q.keys.active, 0, "1")
    finally:
        r.hset(q.keys.job("1"), "cleaned", q.token())


def steps_of(driver: str, monkeypatch: pytest.MonkeyPatch, actors: dict[str, Any], schedule: str,
             **kw: Any) -> list[tuple[str, str, Any]]:
    monkeypatch.setenv(DRIVER_VARIABLE, driver)
    res = explore_actors(actors, schedule=schedule, **kw)
    assert res.history is not None
    return [(s.actor, s.op, s.outcome) for s in res.history.steps]


@pytest.mark.parametrize("schedule", ["v1:W1*3.S1*4", "v1:S1*5.W1*3", "v1:S1*2.W1*2.S1*2.W1"])
def test_a_stopped_actors_finally_blocks_send_nothing(schedule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    actors = {"W1": cleans_up, "S1": toys.sweep}
    state = {"active": ["1"], "stalled": ["1"]}
    greenlet = steps_of("greenlet", monkeypatch, actors, schedule, state=state)
    replay = steps_of("replay", monkeypatch, actors, schedule, state=state)
    assert replay == greenlet
    assert [op for a, op, _ in replay if a == "W1"] == ["ZADD", "LREM", "HSET"]  # each sent once


def ends_in_finally(r: redis.Redis, q: Any) -> None:
    """Runs job 1 and, however that ends, records its finish with what it got."""
    q.begin("1", q.token())
    got: Any = 0
    try:
        r.zadd(q.keys.completed, {"1": 5})
        r.lrem(q.keys.active, 0, "1")
    except redis.ConnectionError as e:
        got = e
    finally:
        q.end("1", got)


def crashed(driver: str, monkeypatch: pytest.MonkeyPatch, actor: Any) -> Any:
    monkeypatch.setenv(DRIVER_VARIABLE, driver)
    res = explore_actors({"W1": actor, "C1": {"kind": "crash", "of": "W1"}}, state={"active": ["1"]},
                         schedule="v1:W1.C1")
    assert res.history is not None
    return res.history


def test_a_crash_ends_a_replayed_actor_as_it_ends_a_greenlet(monkeypatch: pytest.MonkeyPatch) -> None:
    for driver in ("greenlet", "replay"):
        h = crashed(driver, monkeypatch, toys.retry_once)
        assert [s.op for s in h.steps if s.actor == "W1"] == ["ZADD"], driver  # its retry met a closed connection
        # its finally block ran when its process ended (the end is no ConnectionError: it still held 0), once
        h = crashed(driver, monkeypatch, ends_in_finally)
        assert [s.op for s in h.steps if s.actor == "W1"] == ["ZADD"], driver
        assert h.result_texts("W1") == ["finish:1:0"], driver
    greenlet, replay = (crashed(d, monkeypatch, ends_in_finally) for d in ("greenlet", "replay"))
    assert replay.to_dict() == greenlet.to_dict()


_RUNS = itertools.count()


def counts_its_runs(r: redis.Redis, q: Any) -> None:
    """Writes how often its code has run in this process: not a function of its replies."""
    r.hset(q.keys.job("1"), "run", next(_RUNS))
    r.lrem(q.keys.active, 0, "1")


_CALLS = itertools.count()


def calls_the_handle_now_and_then(r: redis.Redis, q: Any) -> None:
    """Asks for a token on every other run of its code (a global counter): its handle calls differ."""
    if next(_CALLS) % 2 == 0:
        q.token()
    r.lrem(q.keys.active, 0, "1")
    r.zadd(q.keys.completed, {"1": 5})


def swallows_the_stop(r: redis.Redis, q: Any) -> None:
    try:
        r.zadd(q.keys.completed, {"1": 5})
    except BaseException:  # noqa: BLE001 - the rule it breaks
        return
    r.lrem(q.keys.active, 0, "1")


@pytest.mark.parametrize("actor, words", [
    (counts_its_runs, ["W1 ran differently when run again", "exchange 1", "HSET", "function of its replies",
                       "argument 4 "]),
    (calls_the_handle_now_and_then, ["W1 ran differently", "exchange 1 was a", "q.token()",
                                     "a round trip on W1: LREM"]),
    (swallows_the_stop, ["went on after the replay driver stopped it", "BaseException"]),
])
def test_an_actor_that_is_not_replayable_stops_the_run(actor: Any, words: list[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DRIVER_VARIABLE, "greenlet")
    explore_actors({"W1": actor, "S1": toys.sweep}, state={"active": ["1"]})  # (greenlet runs it)
    monkeypatch.setenv(DRIVER_VARIABLE, "replay")
    with pytest.raises(ActorError) as e:
        explore_actors({"W1": actor, "S1": toys.sweep}, state={"active": ["1"]})
    for w in words:
        assert w in str(e.value), str(e.value)


def test_the_driver_is_chosen_by_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DRIVER_VARIABLE, raising=False)
    assert sync_driver() == "greenlet"  # (CPython here has greenlet)
    monkeypatch.setenv(DRIVER_VARIABLE, "Replay")
    assert sync_driver() == "replay"
    monkeypatch.setenv(DRIVER_VARIABLE, "threads")
    with pytest.raises(ValueError, match="'greenlet' or 'replay'"):
        sync_driver()
