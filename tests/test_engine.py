"""Engine v2: the cases the first release got wrong, each with its exact expected outcome on both backends;
the anomaly checks on hand-built histories (positive and negative); typed effects and results; leaks."""

from __future__ import annotations

import itertools
import random
import re

import pytest
import redis

from emqlab.analysis.anomalies import CHECKS, KINDS, CheckInputMissing, check
from emqlab.engine import scenario
from emqlab.engine.effects import HashCreated, HashDeleted, LockChanged, Marked, Placed, Removed, parse
from emqlab.engine.history import Execution, FinalState, History, Step
from emqlab.engine.scenario import ANOMALY_KINDS
from emqlab.explore import Explorer
from emqlab.explore.checked import Runner, parse_schedule
from emqlab.explore.pct import PCT
from emqlab.protocol.outcome import Outcome, Result


def _replay(conn: redis.Redis, name: str, schedule: str, mode: str = "split", **kw: object) -> History:
    sc = scenario.load(name)
    with Runner(sc, mode, conn, **kw) as r:  # type: ignore[arg-type]
        return r.run(parse_schedule(schedule, [a.id for a in sc.actors]))


def _kinds(h: History) -> list[str]:
    return h.kinds


# -- the quoted cases ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "schedule", "later", "earlier"), [
    ("two-workers", "v1:W1*9.L1.S1.W1*7.W2*2", "W2", "W1"),
    ("remove-on-complete", "v1:W1*9.S1.W2*2", "W2", "W1"),
    ("metrics-drift", "v1:W1*9.S1.W2", "W2", "W1"),
])
def test_a_second_worker_inside_a_split_finish_is_a_duplicate_execution(conn: redis.Redis, name: str, schedule: str,
                                                                         later: str, earlier: str) -> None:
    h = _replay(conn, name, schedule)
    dup = [a for a in h.findings if a.kind == "duplicate-execution"]
    assert len(dup) == 1, h.anomalies
    start = next(e.start for e in h.executions if e.actor == later)
    assert re.fullmatch(rf"{later} started job 1 \(step {start}\) (while {earlier}'s execution \(from the start\) had"
                        rf" not released it|after {earlier} had already completed it \(step \d+\))", dup[0].because)


def test_two_workers_case_names_the_completion_step(conn: redis.Redis) -> None:
    h = _replay(conn, "two-workers", "v1:W1*9.L1.S1.W1*7.W2*2")
    dup = next(a for a in h.findings if a.kind == "duplicate-execution")
    zadd = next(s for s in h.steps if s.actor == "W1" and any(isinstance(e, Placed) and e.place == "completed"
                                                             for e in s.effects))
    assert dup.because == f"W2 started job 1 (step 19) after W1 had already completed it (step {zadd.index})"
    assert dup.steps == (19, zadd.index)


def test_one_lpush_is_one_effect_and_each_copy_names_its_own_step(conn: redis.Redis) -> None:
    h = _replay(conn, "attempts-overrun", "v1:W1*7.W2.S1.W1*9")
    for s in h.steps:
        texts = [str(e) for e in s.effects]
        assert len(texts) == len(set(texts)), (s.index, texts)
    dp = next(a for a in h.findings if a.kind == "double-placement")
    refs = re.findall(r"\((\w+) step (\d+), (\w+)\)", dp.because)
    assert len(refs) >= 2 and refs[0] != refs[1], dp.because


def test_a_write_that_changed_nothing_is_not_called_a_read() -> None:
    from emqlab.backend.connect import connect

    for sc in scenario.shipped():
        if "split" not in sc.modes:
            continue
        with Runner(sc, "split", connect()) as r:
            rep = Explorer(r).exhaustive(preemption_bound=sc.preemptions)
        for h in rep.witnesses.values():
            steps = {s.index: s for s in h.steps}
            for a in h.findings:
                for n, _op in re.findall(r"'s read \(step (\d+), (\w+)\)", a.because):
                    assert steps[int(n)].read_only, (sc.name, a.because)


def test_a_finish_that_fetched_is_never_called_refused() -> None:
    from emqlab.backend.connect import connect

    for name in ("fetch-loop", "two-workers", "delayed-promotion"):
        sc = scenario.load(name)
        with Runner(sc, "split", connect()) as r:
            rep = Explorer(r).exhaustive(preemption_bound=sc.preemptions)
        for h in rep.witnesses.values():
            for a in h.findings:
                assert "refused" not in a.because or "next" not in a.because, a.because


def test_without_effects_no_drift_is_invented(conn: redis.Redis) -> None:
    sc = scenario.load("metrics-drift")
    with Runner(sc, "atomic", conn, effects=False) as r:
        h = r.run()
    assert h.kinds == []
    assert {"metrics-drift", "stolen-lock", "duplicate-execution", "work-thrown-away"} <= set(h.unchecked)
    with pytest.raises(CheckInputMissing, match="metrics-drift needs effects"):
        check(h, sc, kinds=["metrics-drift"])
    with Runner(sc, "atomic", conn) as r:
        full = r.run()
    assert full.kinds == [] and full.unchecked == ()


def test_producer_results_are_ids_not_bytes_reprs() -> None:
    sc = scenario.loads("""
name: add-one
title: t
lesson: l
source: [x]
anomaly: none
jobs:
  "5": {name: a, data: {}}
state: {}
actors:
  - {id: P1, kind: producer, job: "5"}
expect:
  atomic: []
""")
    with Runner(sc, "atomic") as r:
        h = r.run()
    assert [str(x) for x in h.results["P1"]] == ["add:5"]


def test_canceller_follows_split(conn: redis.Redis) -> None:
    sc = scenario.load("cancel-active")
    with Runner(sc, "split", conn) as r:
        h = r.run()
    assert any(s.actor == "C1" and s.kind == "command" for s in h.steps)
    with Runner(sc, "atomic", conn) as r:
        h = r.run()
    assert [s.kind for s in h.steps if s.actor == "C1"] == ["script"]


def test_a_deferred_failure_is_failed_not_processed() -> None:
    sc = scenario.loads("""
name: defa
title: t
lesson: l
source: [x]
anomaly: none
jobs:
  "1": {name: a, data: {}, fields: {defa: "job stalled more than allowable limit"}}
state:
  wait: ["1"]
actors:
  - {id: W1, kind: worker, finish: completed}
expect:
  atomic: []
""")
    with Runner(sc, "atomic") as r:
        h = r.run()
    assert h.final.placements["1"] == ["failed"]
    assert h.final.jobs["1"]["failedReason"] == "job stalled more than allowable limit"


# -- hand-built histories -----------------------------------------------------------------------------------


def _step(i: int, actor: str, op: str, *effects: object, kind: str = "command", run: int | None = None,
          read_only: bool = False) -> Step:
    return Step(i, actor, i, kind, op, effects=tuple(effects), run=run, read_only=read_only)  # type: ignore[arg-type]


def _h(steps: list[Step], execs: list[Execution], placements: dict[str, list[str]], *, jobs: dict | None = None,
       locks: dict[str, str] | None = None, metrics: dict | None = None) -> History:
    jobs = jobs if jobs is not None else {j: {"exists": True, "payload": True} for j in placements}
    final = FinalState(placements=placements, locks=locks or {}, jobs=jobs, metrics=metrics or {},
                       metrics_on=metrics is not None)
    return History("hand", "split", "v1:", tuple(steps), tuple(execs), final)


OK = Outcome(0)


def test_double_placement_positive_and_negative() -> None:
    steps = [_step(1, "W1", "DEL", LockChanged("1", "W1:1", None), run=1),
             _step(2, "S1", "moveStalledJobsToWait", Removed("1", "active"), Placed("1", "wait"), kind="script"),
             _step(3, "W1", "ZADD", Placed("1", "completed"), run=1)]
    h = _h(steps, [], {"1": ["wait", "completed"]})
    (a,) = check(h)
    assert a.kind == "double-placement"
    assert a.because == ("job 1 is in wait (S1 step 2, moveStalledJobsToWait) and in completed (W1 step 3, ZADD)"
                         " because S1 ran after W1 cleared the lock (step 1, DEL) and before W1's next command"
                         " (step 3, ZADD), inside W1's split script")
    assert check(_h(steps[:1], [], {"1": ["completed"]})) == []


def test_duplicate_execution_retry_is_not_but_overlap_is() -> None:
    retry = [_step(1, "W1", "moveToFinished", Removed("1", "active"), Placed("1", "delayed"), kind="script"),
             _step(2, "W2", "moveToActive", Removed("1", "delayed"), Placed("1", "active"), kind="script")]
    execs = [Execution("W1", "1", "W1:1", 0, 1, "0", True, OK), Execution("W2", "1", "W2:1", 2)]
    assert [a.kind for a in check(_h(retry, execs, {"1": ["active"]}))] == []
    overlap = [Execution("W1", "1", "W1:1", 0, 3, "0", True, OK), Execution("W2", "1", "W2:1", 2)]
    found = check(_h(retry[1:], overlap, {"1": ["active"]}))
    assert [a.kind for a in found] == ["duplicate-execution"]


def test_a_readded_id_is_a_new_job() -> None:
    steps = [_step(1, "W1", "moveToFinished", Removed("1", "active"), Placed("1", "completed"), HashDeleted("1"),
                   Removed("1", "completed"), kind="script"),
             _step(2, "P1", "addStandardJob", HashCreated("1"), Placed("1", "wait"), kind="script"),
             _step(3, "W2", "moveToActive", Removed("1", "wait"), Placed("1", "active"), kind="script")]
    execs = [Execution("W1", "1", "W1:1", 0, 1, "0", True, OK), Execution("W2", "1", "W2:1", 3)]
    assert [a.kind for a in check(_h(steps, execs, {"1": ["active"]}))] == []
    # without the re-add, the same id run again is a duplicate (and a phantom: it has no hash)
    found = check(_h([steps[0], steps[2]], execs, {"1": ["active"]}, jobs={"1": {"exists": False}}))
    assert sorted(a.kind for a in found) == ["duplicate-execution", "phantom-job"]


def test_stolen_lock_and_lapse() -> None:
    execs = [Execution("W2", "1", "W2:1", 1, 5, "0", True, OK)]
    theft = [_step(2, "W1", "DEL", LockChanged("1", "W2:1", None))]
    (a,) = check(_h(theft, execs, {"1": ["completed"]}))
    assert a.because == ("W1 deleted W2's lock on job 1 (step 2, DEL) while W2 still held the job (since step 1,"
                         " until step 5)")
    lapse = [_step(2, "L1", "lapse", LockChanged("1", "W2:1", None), kind="clock")]
    assert check(_h(lapse, execs, {"1": ["completed"]})) == []


def test_lost_orphan_phantom_stuck() -> None:
    assert [a.kind for a in check(_h([], [], {"1": []}))] == ["lost-job"]
    fragment = {"1": {"exists": True, "payload": False}}
    assert [a.kind for a in check(_h([], [], {"1": []}, jobs=fragment))] == ["orphan-data"]
    finished = [Execution("W1", "1", "W1:1", 0, 2, "0", True, OK)]
    # W1's finish completed the job (step 2) and X1 took it out of completed: left-over data
    completed = [_step(2, "W1", "moveToFinished", Removed("1", "active"), Placed("1", "completed"), kind="script"),
                 _step(3, "X1", "ZREM", Removed("1", "completed"))]
    assert [a.kind for a in check(_h(completed, finished, {"1": []}))] == ["orphan-data"]
    # a finish that succeeded by putting the job back in wait (a retry) did not finish it: lost
    retried = [_step(2, "W1", "moveToFinished", Removed("1", "active"), Placed("1", "wait"), kind="script"),
               _step(3, "X1", "LREM", Removed("1", "wait"))]
    assert [a.kind for a in check(_h(retried, finished, {"1": []}))] == ["lost-job"]
    assert [a.kind for a in check(_h([], [], {"1": ["wait"]}, jobs={"1": {"exists": False}}))] == ["phantom-job"]
    assert [a.kind for a in check(_h([], finished, {"1": ["active"]}))] == ["stuck-active"]
    assert check(_h([], finished, {"1": ["active"]}, locks={"1": "W2:1"})) == []
    held = [Execution("W1", "1", "W1:1", 0)]
    assert check(_h([], held, {"1": ["active"]})) == []


def test_metrics_drift_and_attempts() -> None:
    steps = [_step(1, "W1", "ZADD", Placed("1", "completed"))]
    assert [a.kind for a in check(_h(steps, [], {"1": ["completed"]}, metrics={"completed": 2}))] == ["metrics-drift"]
    assert check(_h(steps, [], {"1": ["completed"]}, metrics={"completed": 1})) == []
    sc = scenario.load("attempts-overrun")
    over = _h([], [], {"1": ["failed"]}, jobs={"1": {"exists": True, "payload": True, "atm": "3"}})
    assert [a.kind for a in check(over, sc)] == ["attempts-overrun"]


def test_work_thrown_away_only_when_the_lock_was_never_touched() -> None:
    refused = Outcome(-3)
    execs = [Execution("W2", "1", "W2:1", 1, 3, "-3", False, refused)]
    (a,) = check(_h([], execs, {"1": ["wait"]}))
    assert a.kind == "work-thrown-away" and "step 3: -3, not in active state" in a.because
    lapsed = [_step(2, "L1", "lapse", LockChanged("1", "W2:1", None), kind="clock")]
    assert check(_h(lapsed, execs, {"1": ["wait"]})) == []
    assert check(_h([], execs, {"1": ["failed"]})) == []  # someone's result stands


def test_every_kind_has_one_home() -> None:
    assert KINDS == ANOMALY_KINDS
    assert all(c.needs <= {"final", "effects", "lock-changes"} for c in CHECKS)  # (the inputs instruments record)


# -- typed values at the edges -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1 +wait", "1 -active", "1 +wait×2", "1 +stalled", "1 -stalled", "1:lock W1:1 -> -",
                                  "1:lock - -> W2:1", "1 hash +", "1 hash -", "(stalled interval elapsed)"])
def test_effect_text_round_trips(text: str) -> None:
    assert str(parse(text)) == text
    assert isinstance(parse("1 +stalled"), Marked)


@pytest.mark.parametrize("text", ["finish:1:-2", "finish:1:0", "fetch:next", "sweep:1,2", "sweep:", "extend:1",
                                  "lapsed", "add:5", "cancel:1:-3", "finish:1:ERR boom"])
def test_result_text_round_trips(text: str) -> None:
    assert str(Result.parse(text)) == text


def test_history_json_v1_reads_back_typed(conn: redis.Redis) -> None:
    h = _replay(conn, "stalled-finish", "v1:W1*9.S1.W1*8")
    back = History.from_json(h.to_json())
    assert back.steps == h.steps and back.final == h.final and back.anomalies == h.anomalies
    assert [str(r) for r in back.results["W1"]] == ["finish:1:0"]
    assert '"effects": [\n    "1:lock W1:1 -> -"' in h.to_json()


# -- leaks -------------------------------------------------------------------------------------------------


def test_lua_heap_and_connections_stay_flat_across_explorations() -> None:
    from emqlab.backend.connect import connect

    sc = scenario.load("two-workers")
    conn = connect()
    with Runner(sc, "split", conn) as r:
        heaps = []
        for _ in range(3):
            Explorer(r).exhaustive(preemption_bound=1, reduce=False)
            heaps.append(r.host.memory_kib())
    assert heaps[-1] <= 2 * heaps[0], heaps
    for _ in range(150):  # the pool holds 100 connections: each Runner gives its one back
        with Runner(sc, "split", conn) as r:
            r.step("W1")
    assert len(conn.connection_pool._in_use_connections) <= 1


# -- PCT's depth, the producer rule, the shared actor blocks ------------------------------------------------


@pytest.mark.parametrize(("name", "mode"), [("delayed-promotion", "split"), ("two-workers", "split"),
                                            ("stalled-finish", "split"), ("lease-lapse", "atomic"),
                                            ("stale-sweep", "atomic")])
def test_pct_never_preempts_more_than_depth_minus_one_and_its_depth_check_is_exact(name: str, mode: str) -> None:
    """The premise of PCT's depth check, and its conclusion: no PCT run at depth 2 has more than one
    preemption, and the kinds it calls beyond that depth are exactly those an unreduced search at one
    preemption never shows (while the scenario's expectation for the mode names them)."""
    sc = scenario.load(name)
    with Runner(sc, mode) as r:
        ex = PCT(r)
        seen: list[int] = []
        record = ex._record

        def spy(h: History, preempt: int, choices: list[str], weight: int = 1) -> None:
            seen.append(preempt)
            record(h, preempt, choices, weight)

        ex._record = spy  # type: ignore[method-assign]
        rep = ex.pct(40, seed=3, depth=2)
        pct_runs = seen[:40 + 1]  # the default run, then the 40 PCT runs (the depth probe comes after)
        assert max(pct_runs) <= 1
        unreduced = Explorer(r).exhaustive(preemption_bound=1, reduce=False)
    expected = set(sc.expect[mode].anomalies)
    if not expected | set(rep.anomaly_kinds):
        assert rep.params["depth_check"] == "nothing to check: no anomaly expected or found"
        assert rep.warnings == []
        return
    assert rep.params["depth_check"].startswith("complete")
    assert set(rep.params["beyond_depth"]) == (expected | set(rep.anomaly_kinds)) - set(unreduced.anomaly_kinds)
    assert set(rep.params["within_depth"]) == (expected | set(rep.anomaly_kinds)) & set(unreduced.anomaly_kinds)
    assert not set(rep.params["beyond_depth"]) & set(rep.anomaly_kinds)  # PCT found none of them
    if rep.params["beyond_depth"]:
        assert rep.warnings and f"cannot find {', '.join(rep.params['beyond_depth'])}" in rep.warnings[0]
    else:
        assert rep.warnings == []


def test_with_two_actors_every_pct_change_point_is_reached() -> None:
    """The change point of a run is drawn among the choice points of the run its priorities give without
    one (both such runs are known with two actors: the default run and the other actor's serial run), so
    every run reaches its change point and none merely repeats a serial run. Drawn over the first ``k``
    steps, as before, a point past its serial run's choice points was never reached (there, with ``k`` the
    longer serial run's length, 3 of every 22 runs with W1 first and 6 of 22 with C1 first)."""
    with Runner(scenario.load("cancel-active"), "split") as r:
        ex = PCT(r)
        drawn: list[list[int]] = []
        reached: list[bool] = []
        draw, record = ex._change_points, ex._record

        def spy_draw(rng: random.Random, k: int, count: int, serial: int | None) -> list[int]:
            drawn.append(draw(rng, k, count, serial))
            return drawn[-1]

        def spy(h: History, preempt: int, choices: list[str], weight: int = 1) -> None:
            reached.append(sum(len(e) > 1 for e in r.enabled_at) >= drawn[-1][0])
            record(h, preempt, choices, weight)

        ex._change_points, ex._record = spy_draw, spy  # type: ignore[method-assign]
        ex.pct(40, seed=5, depth=2, check_depth=False)
        assert set(ex.serial) == {("W1", "C1"), ("C1", "W1")}
    assert len(reached) == 40 and all(reached)


def test_pct_change_points_cover_every_set_whose_earliest_point_can_matter() -> None:
    """An oracle over all cases of a small range: the change points are every set of ``count`` steps of
    ``1 .. k`` whose earliest is within the serial run's choice points, and no other set."""
    rng = random.Random(0)
    for k, count, serial in [(6, 1, 4), (6, 2, 3), (5, 3, 1), (4, 2, None), (3, 5, 2)]:
        drawn = {tuple(PCT._change_points(rng, k, count, serial)) for _ in range(3000)}
        every = {c for c in itertools.combinations(range(1, k + 1), min(count, k))
                 if serial is None or c[0] <= serial}
        assert drawn == every
    assert PCT._change_points(rng, 9, 2, 0) == []


def test_pct_warns_that_delayed_promotions_double_placement_needs_depth_three() -> None:
    from emqlab.explore import explore

    shallow = explore(scenario.load("delayed-promotion"), "split", strategy="pct", runs=30, depth=2)
    deep = explore(scenario.load("delayed-promotion"), "split", strategy="pct", runs=30, depth=3)
    assert "double-placement" in shallow.params["beyond_depth"]
    assert shallow.warnings[0].startswith("PCT at depth 2 cannot find double-placement")
    assert "try --depth 3" in shallow.warnings[0]
    assert deep.params["beyond_depth"] == [] and deep.warnings == []
    assert shallow.to_dict()["warnings"] == shallow.warnings


def test_a_producer_may_not_add_a_job_the_initial_state_already_places() -> None:
    text = ('name: x\njobs: {"1": {}}\nstate: {wait: ["1"]}\nactors:\n'
            '  - {id: W1, kind: worker}\n  - {id: P1, kind: producer, job: "1"}\n')
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.loads(text, "x.yaml")
    assert str(e.value) == ("x.yaml:6: actors.P1.job: job '1' is already in wait in the initial state; a producer "
                            "adds a new job (remove it from state.wait or give the producer another job)")
    ok = scenario.loads(text.replace('state: {wait: ["1"]}\n', ""), "x.yaml")
    assert [a.kind for a in ok.actors] == ["worker", "producer"]


def test_the_timed_model_and_the_grader_run_on_the_shared_actor_blocks() -> None:
    """The timed worker's steps are the blocks' steps: fetch (moveToActive), finish (moveToFinished),
    sweep (moveStalledJobsToWait) and lapse ops, with the blocks' typed results; the grader's student
    finish runs through scripted_finish (one script run, its commands numbered as one run)."""
    from emqlab.teaching.assignments.a2 import _a2_runner
    from emqlab.timing.model import TimingConfig
    from emqlab.timing.run import simulate

    res = simulate("split", TimingConfig(jobs=6, workers=2, seed=4), keep_history=True)
    h = res.history
    assert h is not None
    ops = {s.op for s in h.steps if s.kind == "script"}
    assert ops <= {"moveToActive", "moveToFinished", "moveStalledJobsToWait", "extendLock"}
    finishes = [x for w in ("W1", "W2") for x in h.results[w] if x.kind == "finish"]
    assert len(finishes) == res.finishes == 6 and all(x.outcome is not None and x.outcome.ok for x in finishes)
    split_runs = {s.run for s in h.steps if s.kind == "command" and s.actor == "W1"}
    assert None not in split_runs and len(split_runs) >= 1

    lua = ("redis.call('DEL', KEYS[1]) redis.call('SREM', KEYS[2], ARGV[1]) redis.call('LREM', KEYS[3], 0, ARGV[1]) "
           "redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1]) redis.call('MULTI') return 0")
    violations: list[str] = []
    with _a2_runner("stalled-finish", lua, violations) as r:
        hist = r.run()
    w1 = [s for s in hist.steps if s.actor == "W1"]
    assert [s.op for s in w1] == ["DEL", "SREM", "LREM", "ZADD"] and len({s.run for s in w1}) == 1  # MULTI: no step
    assert violations == ["MULTI"]
    out = hist.results["W1"][-1].outcome
    assert out is not None and out.code is None and out.error == "This Redis command is not allowed from script"
