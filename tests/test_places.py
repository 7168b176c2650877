"""A scenario's own places (``places:``, BR-18): keys the checks treat as places a job can be in, read into
every step's effects and the final state. A job waiting in such a list is not lost; a job deleted with its
list is; a list whose index no longer names it is no place (no poll would find it). The shipped scenario
empty-then-delete replays resque/resque-scheduler#46 on both backends."""

from __future__ import annotations

import pytest
import redis

from emqlab.analysis.anomalies import check
from emqlab.engine import scenario
from emqlab.engine.effects import ExtraPlace, HashCreated, Placed, Removed, parse
from emqlab.engine.history import FinalState, History, Step
from emqlab.explore import explore
from emqlab.explore.checked import Runner, parse_schedule

NAME = "empty-then-delete"


def _run(conn: redis.Redis, schedule: str, mode: str = "split") -> History:
    sc = scenario.load(NAME)
    with Runner(sc, mode, conn) as r:
        return r.run(parse_schedule(schedule, [a.id for a in sc.actors]))


def test_the_scenario_declares_its_list_and_index() -> None:
    sc = scenario.load(NAME)
    assert sc.places == (ExtraPlace("delayed:1000", "list", "delayed_queue_schedule", "1000", ("1",)),)


def test_a_job_deleted_with_its_list_is_lost(conn: redis.Redis) -> None:
    """The report's order: SCHED's LLEN sees the list empty, PROD pushes job 2, SCHED deletes the list."""
    h = _run(conn, "v1:SCHED*2.PROD*2.SCHED*3")
    assert h.final.placements == {"1": ["wait"], "2": []}
    assert h.final.jobs["2"]["exists"] and h.final.jobs["2"]["payload"]
    (a,) = h.findings
    assert a.kind == "lost-job" and a.steps == (5,)
    assert h.steps[4].op == "DEL" and Removed("2", "delayed:1000") in h.steps[4].effects
    assert a.because == "job 2 exists but is in no list or set: SCHED step 5, DEL took it out of delayed:1000" \
        " and nothing put it back"


def test_a_job_in_a_list_its_index_no_longer_names_is_lost(conn: redis.Redis) -> None:
    """PROD pushes after the DEL (recreating the list) and indexes it before SCHED's ZREM: the list holds
    job 2, but nothing will poll it."""
    h = _run(conn, "v1:SCHED*3.PROD*2.SCHED*2")
    assert h.final.placements["2"] == []
    (a,) = h.findings
    assert a.kind == "lost-job" and h.steps[a.steps[0] - 1].op == "ZREM"
    # (it said the job was "in no list or set" while it was in delayed:1000)
    assert a.because == ("job 2 exists but no poll can find it: SCHED step 6, ZREM took 1000 out of the index"
                         " delayed_queue_schedule while the job was in delayed:1000, and nothing put it back")


@pytest.mark.parametrize("schedule", ["v1:PROD*2.SCHED*3", "v1:SCHED*5.PROD*2", "v1:SCHED*4.PROD*2.SCHED"])
def test_a_job_still_waiting_in_an_indexed_list_is_not_lost(conn: redis.Redis, schedule: str) -> None:
    """PROD before SCHED's poll (the list is not empty: nothing deleted), after it, or after its ZREM."""
    h = _run(conn, schedule)
    assert h.final.placements["2"] == ["delayed:1000"]
    assert h.findings == ()


def test_atomic_holds_and_split_loses_the_job() -> None:
    sc = scenario.load(NAME)
    atomic = explore(sc, "atomic")
    assert atomic.complete and atomic.anomaly_kinds == [] and atomic.raw_interleavings == 3
    split = explore(sc, "split")
    assert split.complete and split.anomaly_kinds == ["lost-job"]
    assert split.raw_interleavings == 17 and split.interleavings_with["lost-job"] == 5


def test_without_places_a_job_waiting_in_the_list_would_be_called_lost() -> None:
    """What the checks said before ``places:``: hand-built, the same final state judged with and without
    the place in the view."""
    steps = (Step(1, "PROD", 1, "command", "PIPELINE", effects=(HashCreated("2"), Placed("2", "delayed:1000"))),)
    waiting = History("hand", "split", "v1:", steps, (), FinalState(placements={"2": ["delayed:1000"]},
                                                                       jobs={"2": {"exists": True, "payload": True}}))
    assert check(waiting) == []
    nowhere = History("hand", "split", "v1:", steps, (), FinalState(placements={"2": []},
                                                                       jobs={"2": {"exists": True, "payload": True}}))
    assert [a.kind for a in check(nowhere)] == ["lost-job"]


def test_a_place_effect_reads_back_from_history_json() -> None:
    for text in ("2 +delayed:1000", "2 -delayed:1000", "1 +private:web1×2"):
        assert str(parse(text)) == text
    assert parse("2 -delayed:1000") == Removed("2", "delayed:1000")


@pytest.mark.parametrize(("mode", "ops"), [("atomic", ["EVAL"]), ("split", ["LPOP", "LLEN", "DEL", "ZREM", "LPUSH"])])
def test_the_poll_is_one_script_atomic_and_its_commands_split(mode: str, ops: list[str]) -> None:
    """scheduler_poll's round trips (the list was left empty: the cleanup runs), then enqueue_at's two."""
    sc = scenario.load(NAME)
    with Runner(sc, mode) as r:
        h = r.run(["SCHED"] * len(ops) + ["PROD", "PROD"])
    assert [s.op for s in h.steps if s.actor == "SCHED"] == ops
    assert [s.op for s in h.steps if s.actor == "PROD"] == ["PIPELINE", "ZADD"]
    assert [str(x) for x in h.results["SCHED"]] == ["sweep:1"]
    assert h.final.placements == {"1": ["wait"], "2": ["delayed:1000"]}
