"""Fault events (issue 10, item 1): a crash, a lost reply (applied or not), an emptied script cache — each
one step the scheduler places, recorded in the history with Jepsen's outcome words and explained in the
because-sentences; the same claims on fakeredis and on the live server; bad fault specs refused."""

from __future__ import annotations

import pytest
import redis

from emqlab.backend.connect import BackendError, connect
from emqlab.backend.faults import FaultRefused
from emqlab.engine import scenario
from emqlab.engine.history import History
from emqlab.explore import explore
from emqlab.explore.checked import Runner, parse_schedule
from emqlab.protocol.outcome import Outcome
from tests.conftest import live_conn


def _run(conn: redis.Redis, sc: scenario.Scenario, mode: str, schedule: str) -> History:
    with Runner(sc, mode, conn) as r:
        return r.run(parse_schedule(schedule, [a.id for a in sc.actors]))


def test_a_crash_inside_a_split_finish_loses_the_job_and_says_why(conn: redis.Redis) -> None:
    sc = scenario.load("crash-mid-finish")
    h = _run(conn, sc, "split", "v1:W1*11.X1*2.S1")
    crash, lapse = h.steps[11], h.steps[12]
    assert (crash.kind, crash.op, crash.reply) == ("fault", "crash", "crashed holding 1")
    assert lapse.kind == "clock" and lapse.keys == ("1:lock",) and lapse.reply == 0  # W1's DEL had cleared it
    assert len(h.steps) == 14 and [s.actor for s in h.steps].count("W1") == 11  # W1 sent nothing after
    (e,) = h.executions
    assert (e.actor, e.crashed, e.end, e.open) == ("W1", 12, None, False)
    assert h.final["placements"]["1"] == []
    assert h.kinds == ["lost-job"]
    assert h.anomalies[0]["because"] == (
        "job 1 exists but is in no list or set: W1 step 11, LREM took it out and nothing put it back; W1 crashed"
        " at step 12 holding job 1; its lock was already gone when its TTL ran out (step 13)")
    again = History.from_json(h.to_json())
    assert again.executions[0].crashed == 12 and again.steps[11].kind == "fault"


def test_a_crash_before_the_atomic_finish_leaves_the_job_to_the_sweep(conn: redis.Redis) -> None:
    sc = scenario.load("crash-mid-finish")
    h = _run(conn, sc, "atomic", "v1:X1*2.S1")
    assert h.steps[1].reply == 1  # the dead worker's lock lapsed: its TTL ran out
    assert h.final["placements"]["1"] == ["wait"] and h.kinds == []
    assert h.results["W1"] == ()  # W1 never sent its finish


def test_a_crash_of_a_process_that_already_ended_changes_nothing(conn: redis.Redis) -> None:
    sc = scenario.load("crash-mid-finish")
    h = _run(conn, sc, "atomic", "v1:W1.X1.S1")
    assert h.steps[1].reply == "already ended" and len(h.steps) == 3  # nothing held: no lapse event
    assert h.final["placements"]["1"] == ["completed"] and h.kinds == []


def test_a_restarted_worker_is_a_new_process(conn: redis.Redis) -> None:
    text = ('name: restart\njobs: {"1": {}, "2": {}}\nstate: {active: ["1"], wait: ["2"], locks: {"1": W1}}\n'
            'actors:\n  - {id: W1, kind: worker, holds: "1", fetch_next: false}\n'
            '  - {id: X1, kind: crash, of: W1, restart: true}\n')
    sc = scenario.loads(text, "restart.yaml")
    h = _run(conn, sc, "atomic", "v1:X1*4")
    assert [(s.actor, s.op) for s in h.steps] == [("X1", "crash"), ("X1", "lapse"), ("X1", "moveToActive"),
                                                   ("X1", "moveToFinished")]
    assert [(e.actor, e.job, e.token, e.crashed) for e in h.executions] == [("W1", "1", "W1:1", 1),
                                                                           ("X1", "2", "X1:1", None)]
    assert h.final["placements"] == {"1": ["active"], "2": ["completed"]}
    # no sweep runs: the job the dead process held stays in active, lock-less, for good
    assert h.kinds == ["stuck-active"]
    assert h.anomalies[0]["because"] == (
        "job 1 is in active with no lock and no worker holding it after every actor ended; W1 crashed at step 1"
        " holding job 1; its lock lapsed at step 2; it restarted as X1 (step 3)")


@pytest.mark.parametrize(("applied", "placements", "codes"), [
    (True, ["completed"], [None, -2]),     # it ran; the retry with the same token is refused: the job is done
    (False, ["completed"], [None, 0]),     # it never arrived; the retry is the finish
])
def test_a_lost_reply_is_info_and_the_worker_retries(conn: redis.Redis, applied: bool, placements: list[str],
                                                     codes: list[int | None]) -> None:
    text = ('name: lost\njobs: {"1": {}}\nstate: {active: ["1"], locks: {"1": W1}, metrics: true}\nactors:\n'
            '  - {id: W1, kind: worker, holds: "1", fetch_next: false, on_error: retry}\n'
            f'  - {{id: N1, kind: disconnect, of: W1, applied: {str(applied).lower()}}}\n')
    h = _run(conn, scenario.loads(text, "lost.yaml"), "atomic", "v1:N1.W1*2")
    first = h.steps[1]
    assert (first.outcome, first.applied) == ("info", applied)
    assert h.steps[2].outcome == "ok"
    assert [r.outcome.code if r.outcome else None for r in h.results["W1"]] == codes
    assert h.results["W1"][0].outcome == Outcome(code=None, error="Connection lost while the request was in"
                                                                  " flight: the reply never came")
    assert h.final["placements"]["1"] == placements
    assert h.final["metrics"]["completed"] == 1  # counted once, retry or not
    assert h.kinds == []
    line = h.annotated().splitlines()[2]
    assert ("lost ([" in line or "lost (0)" in line) if applied else "lost (never arrived)" in line
    assert h.to_dict()["steps"][1]["outcome"] == "info" and "outcome" not in h.to_dict()["steps"][2]


def test_a_lost_reply_inside_a_split_finish_stops_the_script_half_way(conn: redis.Redis) -> None:
    h = _run(conn, scenario.load("lost-reply-retry"), "split", "v1:W1*10.N1.W1*5")
    lost = h.steps[11]
    assert (lost.op, lost.outcome, lost.applied) == ("LREM", "info", True)
    # the retry runs the script again from the top and is refused: W1's own first run cleared its lock
    assert h.steps[15].op == "GET" and h.steps[15].reply is None and len(h.steps) == 16
    assert h.kinds == ["lost-job", "work-thrown-away"]
    assert all(a["because"].endswith("; W1's LREM at step 12 lost its reply (it had run)") for a in h.anomalies)


def test_an_emptied_script_cache_fails_the_client_without_a_fallback() -> None:
    sc = scenario.load("noscript-no-fallback")
    h = _run(connect(), sc, "atomic", "v1:F1.W1.W2.L1")
    w1, w2 = h.steps[1], h.steps[2]
    assert (w1.outcome, w1.reply) == ("fail", "NOSCRIPT No matching script. Please use EVAL.")
    assert w2.outcome == "ok" and h.final["placements"]["2"] == ["completed"]  # W2's client loaded it again
    assert h.kinds == ["stuck-active"]
    assert h.anomalies[0]["because"] == (
        "job 1 is in active with no lock and no worker holding it after every actor ended (W1's finish at step 2"
        " answered ERR NOSCRIPT No matching script. Please use EVAL.)")


@pytest.mark.live
def test_the_script_cache_fault_is_refused_on_a_server_emqlab_does_not_own() -> None:
    with pytest.raises(BackendError) as e:
        Runner(scenario.load("noscript-no-fallback"), "atomic", live_conn())
    assert "script-flush fault needs a server emqlab owns (fakeredis)" in str(e.value)
    assert isinstance(e.value, FaultRefused)
    # the CLI calls it a usage error (2, as docs/cli.md says): the fault is the scenario's subject
    from click.testing import CliRunner

    from emqlab.backend.connect import live_url
    from emqlab.ui.cli import main

    res = CliRunner().invoke(main, ["simulate", "--atomic", "-s", "noscript-no-fallback", "--redis", live_url()])
    assert res.exit_code == 2, res.output
    assert "script-flush fault needs a server emqlab owns" in res.output


@pytest.mark.live
@pytest.mark.parametrize(("name", "mode"), [("crash-mid-finish", "split"), ("crash-mid-finish", "atomic"),
                                            ("lost-reply-retry", "atomic"), ("lost-finish-reply", "atomic")])
def test_faulted_explorations_claim_the_same_on_a_live_server(name: str, mode: str) -> None:
    sc = scenario.load(name)
    assert explore(sc, mode, conn=live_conn()).claims() == explore(sc, mode, conn=connect()).claims()


@pytest.mark.parametrize(("actor", "message"), [
    ("{id: X1, kind: crash}", "f.yaml:5: actors.X1.of: missing (the actor the crash hits)"),
    ("{id: X1, kind: crash, of: W9}", "f.yaml:5: actors.X1.of: unknown actor 'W9' (actors: L1, W1, X1)"),
    ("{id: X1, kind: crash, of: L1}", "f.yaml:5: actors.X1.of: a crash hits a process (a worker, sweep,"
                                      " producer or canceller), not the lease 'L1'"),
    ("{id: X1, kind: disconnect, of: W1, applied: maybe}", "f.yaml:5:"),
    ("{id: X1, kind: crash, of: W1, restart: 2}", "f.yaml:5:"),
    ("{id: X1, kind: fault, of: W1}", "f.yaml:5:"),
])
def test_a_bad_fault_is_refused_with_file_line_and_field(actor: str, message: str) -> None:
    text = ('name: f\njobs: {"1": {}}\nactors:\n  - {id: W1, kind: worker}\n  - ' + actor +
            '\n  - {id: L1, kind: lease, job: "1", of: W1}\n')
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.loads(text, "f.yaml")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_bad_on_error_policy_is_refused() -> None:
    text = 'name: f\njobs: {"1": {}}\nactors:\n  - {id: W1, kind: worker, on_error: panic}\n'
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.loads(text, "f.yaml")
    assert str(e.value).startswith("f.yaml:4:") and "none, retry, refetch" in str(e.value)


# -- the restart fault (issue 10 item 1) -------------------------------------------------------------------------

RESTART = """
name: restart
jobs: {"1": {name: email}}
state: {active: ["1"], locks: {"1": W1}}
actors:
  - {id: W1, kind: worker, holds: "1", fetch_next: false, on_error: retry}
  - {id: R1, kind: restart}
"""


def test_a_restart_loses_the_run_and_drops_every_connection() -> None:
    from emqlab.engine.scenario import loads

    sc = loads(RESTART, "restart.yaml")
    rep = explore(sc, "atomic")
    assert rep.anomaly_kinds == ["lost-job"] and rep.interleavings_with["lost-job"] == rep.raw_interleavings == 2
    with Runner(sc, "atomic") as r:
        h = r.run(["R1", "W1", "W1"])  # the restart first: W1's finish meets a dead connection, then retries
        w1 = [s for s in h.steps if s.actor == "W1"]
        assert w1[0].outcome == "info" and not w1[0].applied  # never reached the server
        assert w1[1].reply == -1  # the job is gone (moveToFinished: -1, no such job)
        assert h.final.jobs["1"]["exists"] is False and h.final.placements["1"] == []
        lost = next(a for a in h.anomalies if a["kind"] == "lost-job")
        assert "lost with the server's data (step 1, restart" in lost["because"]
        assert "stolen-lock" not in h.kinds  # the lock went with the data: nobody stole it


@pytest.mark.live
def test_a_restart_is_refused_on_a_server_emqlab_did_not_start() -> None:
    from emqlab.engine.scenario import loads

    live_conn()
    with pytest.raises(BackendError, match="emqlab never restarts"):
        Runner(loads(RESTART, "restart.yaml"), "atomic", connect("live"))
