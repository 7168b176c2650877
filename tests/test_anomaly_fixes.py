"""Three anomaly-check cases the checks got wrong, on hand-built histories (positive and negative) and on
real runs:

* a finish that succeeded (0) but deleted the job because keepJobs is 0 (removeOnComplete / removeOnFail)
  is a finish: duplicate-execution says the later run came after it, work-thrown-away does not call a
  refused run's work lost when another run's result went with the job;
* a re-add by a Python actor (an ``EVALSHA`` of addStandardJob, atomic or split) begins a new incarnation:
  the step carries the script it ran (``Step.script``, resolved from the SHA1), and every check that reads
  incarnations (duplicate-execution, work-thrown-away, lost-job / orphan-data) sees it;
* a lock token two executions hold (one copied it) is the lock of the one that took it, whatever order the
  actors are declared in: stolen-lock names the copy holder's delete, not the owner's.
"""

from __future__ import annotations

from typing import Any

import pytest

from emqlab.analysis.anomalies import check
from emqlab.backend.connect import connect
from emqlab.check.api import scenario
from emqlab.engine.effects import HashCreated, HashDeleted, LockChanged, Placed, Removed
from emqlab.engine.history import Execution, FinalState, History, Step
from emqlab.explore.checked import Runner
from emqlab.protocol.outcome import Outcome

OK = Outcome(0)
WTA = "work-thrown-away"


def _step(i: int, actor: str, op: str, *effects: object, kind: str = "script", script: str | None = None) -> Step:
    return Step(i, actor, i, kind, op, effects=tuple(effects), script=script)  # type: ignore[arg-type]


def _h(steps: list[Step], execs: list[Execution], placements: dict[str, list[str]],
       jobs: dict[str, Any] | None = None) -> History:
    jobs = jobs if jobs is not None else {j: {"exists": True, "payload": True} for j in placements}
    return History("hand", "atomic", "v1:", tuple(steps), tuple(execs),
                   FinalState(placements=placements, jobs=jobs))


def _kinds(h: History, only: str | None = None) -> list[str]:
    return sorted(a.kind for a in check(h, kinds=[only] if only else None))


# -- a successful finish that deleted the job (keepJobs 0) ----------------------------------------------------

#: W1's finish of job 1 with keepJobs 0: out of active, lock cleared, hash deleted, answered 0
_REMOVED = _step(1, "W1", "moveToFinished", Removed("1", "active"), LockChanged("1", "W1:1", None), HashDeleted("1"))


def test_a_run_after_a_finish_that_deleted_the_job_follows_that_finish() -> None:
    back = _step(2, "S1", "moveStalledJobsToWait", Placed("1", "wait"))  # a stale requeue of the id
    take = _step(3, "W2", "moveToActive", Removed("1", "wait"), Placed("1", "active"))
    execs = [Execution("W1", "1", "W1:1", 0, 1, "0", True, OK), Execution("W2", "1", "W2:1", 3)]
    found = check(_h([_REMOVED, back, take], execs, {"1": ["active"]}, {"1": {"exists": False}}))
    dup = next(a for a in found if a.kind == "duplicate-execution")
    assert dup.because == ("W2 started job 1 (step 3) after W1 had already finished it: its finish succeeded and"
                           " deleted the job (step 1, moveToFinished; keepJobs 0)")
    assert dup.steps == (3, 1)
    # negative: a refused finish that deleted nothing is no finish (the job was still W1's to run)
    refused = [Execution("W1", "1", "W1:1", 0, 1, "-2", False, Outcome(-2)), Execution("W2", "1", "W2:1", 3)]
    noop = _step(1, "W1", "moveToFinished")
    dup = next(a for a in check(_h([noop, back, take], refused, {"1": ["active"]})) if a.kind == "duplicate-execution")
    assert "finished it" not in dup.because and "W1's finish was refused at step 1" in dup.because


def test_work_is_not_thrown_away_when_another_run_finished_the_job_with_keepjobs_0() -> None:
    w2 = _step(1, "W2", "moveToFinished", Removed("1", "active"), LockChanged("1", "W2:1", None), HashDeleted("1"))
    w1 = _step(2, "W1", "moveToFinished")
    execs = [Execution("W2", "1", "W2:1", 0, 1, "0", True, OK),
             Execution("W1", "1", "W1:1", 0, 2, "-1", False, Outcome(-1))]
    # (both ran it from the start: a duplicate execution too, which is another check's finding)
    assert _kinds(_h([w2, w1], execs, {"1": []}, {"1": {"exists": False}}), WTA) == []
    # negative: W2's finish was a retry (back to wait): nobody's result stands, W1's refused work is lost
    retry = _step(1, "W2", "moveToFinished", Removed("1", "active"), LockChanged("1", "W2:1", None),
                  Placed("1", "wait"))
    (a,) = check(_h([retry, w1], execs, {"1": ["wait"]}), kinds=[WTA])
    assert a.kind == "work-thrown-away" and a.because.startswith("W1's finish of job 1 was refused (step 2: -1")
    # negative: W2 finished the old job 1; W1 ran the re-added one, and that run's work is what was lost
    add = _step(2, "P1", "EVALSHA", HashCreated("1"), Placed("1", "wait"), kind="command", script="addStandardJob")
    late = _step(4, "W1", "moveToFinished")
    execs = [Execution("W2", "1", "W2:1", 0, 1, "0", True, OK),
             Execution("W1", "1", "W1:1", 3, 4, "-3", False, Outcome(-3))]
    assert _kinds(_h([w2, add, _step(3, "W1", "moveToActive"), late], execs, {"1": ["wait"]})) == [WTA]


# -- a re-add by a Python actor is a new incarnation ---------------------------------------------------------


def _readd(script: str | None) -> Step:
    """A Python actor's EVALSHA step that created job 1's hash and put it in wait."""
    return _step(2, "P1", "EVALSHA", HashCreated("1"), Placed("1", "wait"), kind="command", script=script)


_TAKE = _step(3, "W2", "moveToActive", Removed("1", "wait"), Placed("1", "active"))
_TWO_RUNS = [Execution("W1", "1", "W1:1", 0, 1, "0", True, OK), Execution("W2", "1", "W2:1", 3)]


def test_a_python_readd_is_a_new_incarnation() -> None:
    assert _kinds(_h([_REMOVED, _readd("addStandardJob"), _TAKE], _TWO_RUNS, {"1": ["active"]})) == []
    # negative: the same EVALSHA step of a script that is not an add (a block's own Lua writing the hash) is
    # no new job, whatever the step's op says: W2 ran the job W1 had finished
    for script in (None, "moveToFinished"):
        found = check(_h([_REMOVED, _readd(script), _TAKE], _TWO_RUNS, {"1": ["active"]}))
        assert [a.kind for a in found] == ["duplicate-execution"]


def test_a_job_readded_after_a_finish_then_lost_is_a_lost_job() -> None:
    """lost-job and orphan-data judge "finished" by the job that exists at the end: W1 finished the old
    job 1, the re-added one was then taken out of wait and put nowhere."""
    drop = _step(3, "X1", "LPOP", Removed("1", "wait"), kind="command")
    (a,) = check(_h([_REMOVED, _readd("addStandardJob"), drop], _TWO_RUNS[:1], {"1": []}))
    assert a.kind == "lost-job" and a.because == "job 1 exists but is in no list or set: X1 step 3, LPOP took it" \
        " out and nothing put it back"
    # negative: without the re-add the hash in no place is W1's finished job's left-over data
    (a,) = check(_h([_REMOVED, _readd(None), drop], _TWO_RUNS[:1], {"1": []}))
    assert a.kind == "orphan-data"


# -- on a real run: the Python actor's step carries its script ----------------------------------------------

_ACTORS: dict[str, Any] = {
    "W1": {"kind": "worker", "holds": "1", "fetch_next": False, "keep_jobs": {"count": 0}},
    "P1": {"python": "emqlab.blocks:readd", "with": {"job": "1", "name": "again"}},
    "W2": {"kind": "worker", "mode": "atomic"},
}


@pytest.mark.parametrize("mode", ["atomic", "split"])
def test_a_block_readd_after_remove_on_complete_is_run_again_without_an_anomaly(mode: str) -> None:
    """W1 completes job 1 with keepJobs 0 (its hash deleted), P1 adds the id again, W2 runs the new job 1."""
    actors = {**_ACTORS, "P1": {**_ACTORS["P1"], "mode": mode}}
    sc = scenario(actors, state={"active": ["1"]}, locks={"1": "W1"})
    with Runner(sc, "atomic", connect()) as r:
        h = _drain(r, ["W1", "P1", "W2"])
    adds = [s for s in h.steps if s.actor == "P1"]
    created = [s for s in adds if any(isinstance(e, HashCreated) for e in s.effects)]
    assert len(created) == 1 and created[0].script == "addStandardJob"
    assert created[0].op == ("EVALSHA" if mode == "atomic" else "HMSET")
    assert {s.script for s in adds} == {"addStandardJob"}
    assert [(e.actor, e.released) for e in h.executions] == [("W1", True), ("W2", True)]
    assert h.final.placements["1"] == ["completed"]
    assert h.kinds == []


def _drain(r: Runner, order: list[str]) -> History:
    """Run each actor of ``order`` to its end before the next."""
    for actor in order:
        while actor in r.enabled:
            r.step(actor)
    return r.history()


def test_the_same_run_without_the_readd_is_a_duplicate_execution() -> None:
    """The requeue is a stale sweep's instead: W2 runs the job W1 completed and deleted (a phantom)."""
    sc = scenario({"W1": _ACTORS["W1"], "W2": _ACTORS["W2"]}, state={"active": ["1"]}, locks={"1": "W1"})
    with Runner(sc, "atomic", connect()) as r:
        r.step("W1")
        r.exec(b"LPUSH", r.keys.wait.encode(), b"1")
        h = _drain(r, ["W2"])
    dup = next(a for a in h.findings if a.kind == "duplicate-execution")
    assert dup.because.startswith("W2 started job 1 (step 2) after W1 had already finished it: its finish"
                                  " succeeded and deleted the job (step 1, moveToFinished")


def test_the_step_script_survives_history_json_and_v1_files_read_as_before() -> None:
    sc = scenario(_ACTORS, state={"active": ["1"]}, locks={"1": "W1"})
    with Runner(sc, "atomic", connect()) as r:
        h = _drain(r, ["W1", "P1", "W2"])
    back = History.from_json(h.to_json())
    assert [s.script for s in back.steps] == [s.script for s in h.steps]
    assert back.steps[1].script == "addStandardJob" and check(back) == []
    d = h.steps[0].to_dict()  # an emqlab script step: JSON v1 as before (its script is its op)
    assert "script" not in d and Step.from_dict(d).script == h.steps[0].op
    assert h.steps[1].to_dict()["script"] == "addStandardJob"


@pytest.mark.parametrize("backend", ["fake", pytest.param("live", marks=pytest.mark.live)])
def test_a_readd_inside_a_python_actors_transaction_is_a_new_incarnation_too(backend: str) -> None:
    """The add's EVALSHA in a MULTI … EXEC beside another command: the server queues it and runs it at EXEC
    in its place (EXEC's reply has both), and the batch step carries every script it ran (Step.scripts),
    so the re-added job is a new incarnation, as for a lone EVALSHA."""
    from tests.conftest import live_conn

    actors = {**_ACTORS, "P1": {"python": "tests.pyactors_toys:readd_in_a_transaction"}}
    sc = scenario(actors, state={"active": ["1"]}, locks={"1": "W1"})
    with Runner(sc, "atomic", connect() if backend == "fake" else live_conn()) as r:
        h = _drain(r, ["W1", "P1", "W2"])
    created = [s for s in h.steps if s.actor == "P1" and any(isinstance(e, HashCreated) for e in s.effects)]
    assert len(created) == 1 and created[0].op == "PIPELINE" and "addStandardJob" in created[0].scripts
    assert [(e.actor, e.released) for e in h.executions] == [("W1", True), ("W2", True)]
    assert h.final.placements["1"] == ["completed"] and h.kinds == []
    back = History.from_json(h.to_json())  # the batch's scripts survive the history's JSON
    assert [s.scripts for s in back.steps] == [s.scripts for s in h.steps] and check(back) == []


# -- a copied lock token: whose lock it is does not depend on the order actors are declared in --------------

#: shared-token's actors: W2 owns job 1's lock (``locks: {"1": W2}``), W1 holds a copy of W2's token
_SHARED: dict[str, Any] = {
    "W2": {"kind": "worker", "holds": "1", "mode": "atomic", "fetch_next": False},
    "W1": {"python": "emqlab.blocks:finish", "with": {"job": "1", "token": "W2:1"}},
}


@pytest.mark.parametrize("order", [["W2", "W1"], ["W1", "W2"]], ids=["owner-declared-first", "owner-declared-last"])
def test_a_copied_token_is_stolen_by_the_copy_holder_not_by_the_owner(order: list[str]) -> None:
    """Found by the independent checker (tests/test_independent_checker.py): with two executions under one
    token, the check took the first listed as the lock's owner, so declaring W1 first turned W2's finish of
    its own job into a theft from W1 and W1's late finish into none. The owner is the one that took the
    token: here the scenario's ``locks:`` gives it to W2."""
    sc = scenario({a: _SHARED[a] for a in order}, state={"active": ["1"]}, locks={"1": "W2"})
    with Runner(sc, "atomic", connect()) as r:
        owner_first = _drain(r, ["W2", "W1"])
        r.reset()
        copy_first = _drain(r, ["W1", "W2"])
    assert [a.kind for a in owner_first.findings if a.kind == "stolen-lock"] == []
    (stolen,) = [a for a in copy_first.findings if a.kind == "stolen-lock"]
    assert stolen.because.startswith("W1 deleted W2's lock on job 1 (step 1, EVALSHA) while W2 still held the job")


# -- a finish that put the job back for a retry did not finish it ---------------------------------------------


def _drop_from_wait(r: Any, q: Any) -> None:
    """Takes job 1 out of wait and puts it nowhere (a clean-up that removes the wrong entry)."""
    r.lrem(q.keys.wait, 0, "1")


def _drop_from_failed(r: Any, q: Any) -> None:
    """Takes job 1 out of failed and leaves its hash (a trim that forgets the hash)."""
    r.zrem(q.keys.failed, "1")


def test_a_job_retried_and_then_dropped_is_lost_not_left_over_data() -> None:
    """Found by the independent checker's reading of docs/concepts.md: lost-job and orphan-data took any
    finish that succeeded for one that finished the job, so a job W1 put back in wait for a retry (attempt 1
    of 3), which X1 then took out of wait, was called orphan-data "although W1 finished it". Its finish
    filed it in neither completed nor failed: nobody finished it, and the job is lost."""
    w1 = {"kind": "worker", "holds": "1", "finish": "failed", "fetch_next": False}
    sc = scenario({"W1": w1, "X1": _drop_from_wait}, jobs={"1": {"attempts": 3}}, state={"active": ["1"]},
                  locks={"1": "W1"})
    with Runner(sc, "atomic", connect()) as r:
        h = _drain(r, ["W1", "X1"])
    assert [(e.actor, e.result, e.released) for e in h.executions] == [("W1", "0", True)]
    (lost,) = h.findings
    assert lost.kind == "lost-job"
    assert lost.because == "job 1 exists but is in no list or set: X1 step 2, LREM took it out and nothing put it back"
    # negative: the same finish filing the job as failed for good (attempts 1) finishes it, so the hash X1
    # leaves in no place is W1's finished job's left-over data
    sc = scenario({"W1": w1, "X1": _drop_from_failed}, jobs={"1": {"attempts": 1}}, state={"active": ["1"]},
                  locks={"1": "W1"})
    with Runner(sc, "atomic", connect()) as r:
        h = _drain(r, ["W1", "X1"])
    (left,) = h.findings
    assert left.kind == "orphan-data" and left.because == ("job 1's hash is in no list or set although W1"
                                                           " finished it (step 1)")


def test_a_finish_that_fails_a_job_and_fetches_it_again_is_said_so() -> None:
    """W2's fetch_next finish files job 1 in failed and, in the same step, fetches job 1 again (a second copy
    sat in wait): the because-sentence said W2's first execution 'had not released it', which its own finish
    had just done."""
    from emqlab.engine.scenario import load
    from emqlab.protocol.schedules import parse_schedule

    sc = load("attempts-overrun")
    with Runner(sc, "split", connect()) as r:
        for actor in parse_schedule("v1:W1*7.S1.W1*9.W2*3", [a.id for a in sc.actors]):
            r.step(actor)
        h = r.history()
    dup = [a for a in h.anomalies if a["kind"] == "duplicate-execution"]
    assert dup and dup[0]["because"] == ("W2 started job 1 again (step 19): its own finish had just failed it in"
                                         " that step and fetched it as the next job"), dup
