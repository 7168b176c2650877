"""Outcomes the checks used to leave unnamed or tell wrongly (issue 26, "no unnamed outcome"), each on a
real run of a shipped scenario:

* a job filed in a structure whose hash is a fragment without its payload is orphan-data, as
  ``docs/concepts.md`` defines it (before, only a fragment in no structure was);
* two executions that both hold a job from the start are not put in an order the history does not show;
* the recovery role's allowance for stuck-active goes to any actor that runs a recovery pass, a user's
  Python recoverer as well as the built-in sweep;
* a Python actor's guard against wall-clock waits applies to the actor's own thread only;
* a finish accepted from a worker that no longer holds the job's lock is non-owner-finish (a finish that
  skips its lock check showed nothing but the at-least-once duplicate before).
"""

from __future__ import annotations

from typing import Any

from emqlab.analysis.anomalies import check
from emqlab.check.api import explore_actors
from emqlab.check.api import scenario as actors_scenario
from emqlab.engine import scenario
from emqlab.explore.checked import Runner
from emqlab.protocol.schedules import parse_schedule


def _replay(name: str, mode: str, schedule: str) -> object:
    sc = scenario.load(scenario.shipped_path(name))
    with Runner(sc, mode) as r:
        r.reset()
        return r.run(parse_schedule(schedule))


def test_a_placed_fragment_without_its_payload_is_orphan_data() -> None:
    # W2 completes job 1 and removes it (keepJobs 0); W1's late split finish writes attempts and the return
    # value into the deleted job, recreating a hash without data, and files it in completed
    h = _replay("late-finish-deleted", "split", "v1:W1*9.L1.S1.W2*2.W1*11")
    assert h.final.placements["1"] == ["completed"]  # type: ignore[attr-defined]
    assert h.final.jobs["1"]["exists"] and not h.final.jobs["1"]["payload"]  # type: ignore[attr-defined]
    orphan = [a for a in check(h) if a.kind == "orphan-data"]  # type: ignore[arg-type]
    assert [a.because for a in orphan] == [
        "job 1's hash in completed is a fragment without its payload: W1 step 16, HINCRBY wrote into the job"
        " after it had been deleted"]
    assert orphan[0].steps == (16,)


def test_a_placed_job_with_its_payload_is_no_orphan() -> None:
    # the same scenario where W1 finishes first: the job is filed whole
    h = _replay("late-finish-deleted", "split", "v1:W1*20")
    assert "orphan-data" not in {a.kind for a in check(h)}  # type: ignore[arg-type]


def test_two_executions_from_the_start_are_not_ordered() -> None:
    # shared-token: W2 holds job 1 in the initial state and W1, a stale worker with the same token, still
    # runs it too; the history shows neither beginning, so neither is "earlier"
    h = _replay("shared-token", "split", "v1:W2.W1*4")
    dup = [a for a in check(h) if a.kind == "duplicate-execution"]  # type: ignore[arg-type]
    assert [a.because for a in dup] == [
        "W2 and W1 both ran job 1 from the start: two executions of one job, neither released when the run"
        " began"]
    assert dup[0].steps == ()


_LAPSE = {"W1": {"kind": "worker", "holds": "1", "finish": "completed", "value": {"ok": True}},
          "L1": {"kind": "lease", "job": "1", "of": "W1"}}


def test_a_users_recoverer_plays_the_recovery_role_as_the_sweep_does() -> None:
    # lease-lapse with its sweep replaced by a Python actor that runs the same recovery pass: atomic, the
    # late finish is refused and the job is left lock-less in active for the recoverer's next pass, as with
    # the built-in sweep (which the scenario's atomic expectation, no anomaly, rests on)
    state = {"active": ["1"], "stalled": ["1"]}
    user = explore_actors({**_LAPSE, "P1": {"python": "tests.pyactors_toys:recover_stalled"}}, mode="atomic",
                          state=state, locks={"1": "W1"})
    builtin = explore_actors({**_LAPSE, "S1": {"kind": "sweep", "max_stalled": 1}}, mode="atomic",
                             state=state, locks={"1": "W1"})
    assert builtin.kinds == [] and user.kinds == []
    # without any recoverer the same refusal leaves the job stuck
    alone = explore_actors(_LAPSE, mode="atomic", state=state, locks={"1": "W1"})
    assert alone.kinds == ["stuck-active"]


def test_another_thread_may_sleep_while_a_python_actor_runs() -> None:
    sc = actors_scenario({"P1": {"python": "tests.pyactors_toys:sleeps_in_another_thread"}})
    with Runner(sc, "split") as r:
        r.reset()
        r.run()
        assert r.exec(b"GET", r.keys.key("slept").encode()) == b"yes"


def _without_lock_check(tmp_path: Any) -> Any:
    from emqlab.scripting.registry import lua_dir

    text = (lua_dir() / "moveToFinished-14.lua").read_text()
    assert 'local checksLock = token ~= "0"' in text
    path = tmp_path / "moveToFinished-14.lua"
    path.write_text(text.replace('local checksLock = token ~= "0"', "local checksLock = false"))
    return path


def test_a_finish_that_skips_its_lock_check_is_a_non_owner_finish(tmp_path: Any) -> None:
    from emqlab.explore import explore
    from emqlab.scripting.registry import ScriptSet

    sc = scenario.load(scenario.shipped_path("two-workers"))
    scripts = ScriptSet.emqlab().overlay(_without_lock_check(tmp_path))
    theirs = explore(sc, "atomic", scripts=scripts)
    assert "non-owner-finish" in theirs.anomaly_kinds
    w = theirs.witnesses["non-owner-finish"]
    # the sweep put the job back and W2 took it with its own lock; W1's late finish, which no longer checks
    # the lock, is accepted and files the job under W2's lock
    because = [a["because"] for a in w.anomalies if a["kind"] == "non-owner-finish"]
    assert "although W2 had taken the job's lock (W2:1, step" in because[0]
    with Runner(sc, "atomic", scripts=scripts) as r:
        r.reset()
        h = r.run(parse_schedule("v1:L1.S1.W2.W1"))
    found = [a.because for a in check(h) if a.kind == "non-owner-finish"]
    assert len(found) == 1 and "W2 had taken the job's lock (W2:1, step 3) before it began (step 4)" in found[0]
    # a lock that only lapsed is no other owner: the lapse and a finish that never reads the lock come in
    # either order with the same outcome, so the reduced search (one run per trace) and the one that runs
    # every schedule must agree, and they do only if such a finish is not named
    from tests.test_reduction import differences

    for name in ("lease-lapse", "two-workers"):
        one = scenario.load(scenario.shipped_path(name))
        for mode in ("atomic", "split"):
            reduced = explore(one, mode, scripts=scripts, unbounded=True)
            every = explore(one, mode, scripts=scripts, unbounded=True, reduce=False) \
                if reduced.raw_interleavings <= 4000 else None
            if every is not None:
                assert not differences(reduced, every), (name, mode, differences(reduced, every))
    # emqlab's own finish refuses it: nothing of the kind, in any mode
    for mode in ("atomic", "split", "finish-then-fetch", "transaction"):
        assert "non-owner-finish" not in explore(sc, mode).anomaly_kinds


def test_a_queue_without_job_locks_has_no_non_owner_finish() -> None:
    # recovery-by-identity (Sidekiq's reliable fetch): executions take no lock, so there is no owner to check
    h = _replay("recovery-by-identity", "atomic", "v1:NEW*3.X1")
    assert h.executions and all(e.released for e in h.executions if e.actor == "NEW")  # type: ignore[attr-defined]
    assert "non-owner-finish" not in {a.kind for a in check(h)}  # type: ignore[arg-type]


def test_a_python_actors_finish_is_in_the_reports_results() -> None:
    # q.end(job, reply) records the finish as emqlab's own workers' finishes are recorded (before, only
    # q.note(Result(...)) did); a block that notes its finish and then ends it is counted once
    from emqlab.explore import explore

    rep = explore(actors_scenario({"W1": {"python": "tests.pyactors_toys:finish"}},
                                  state={"active": ["1"]}, locks={"1": "W1"}), "split")
    assert rep.results["W1"] == {"finish:1:0": 1}
    sc = scenario.load(scenario.shipped_path("recovery-by-identity"))
    counts = explore(sc, "atomic").results
    assert set(counts["NEW"]) == {"finish:1:0", "finish:2:0"} and set(counts["OLD"]) == {"finish:1:0", "finish:2:0"}
    shared = explore(scenario.load(scenario.shipped_path("shared-token")), "atomic")
    # emqlab.blocks:finish notes its finish and ends it: one finish per run, not two
    assert sum(shared.results["W1"].values()) == shared.explored


def test_wide_prints_every_command_whole() -> None:
    from click.testing import CliRunner

    from emqlab.ui.cli import main

    res = CliRunner().invoke(main, ["simulate", "--atomic", "-s", "noscript-no-fallback", "--wide"])
    assert "(fault) script-flush the script cache is emptied" in res.output
    assert "…" not in "".join(line for line in res.output.splitlines() if line.lstrip()[:1].isdigit())
