"""The main job (issue 4): exploring split vs atomic finishes, on fakeredis and on the live server."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import redis
from click.testing import CliRunner

from emqlab.analysis.anomalies import check
from emqlab.backend.connect import KeysExist, Namespace, connect
from emqlab.engine import scenario
from emqlab.engine.history import History
from emqlab.explore import Explorer, explore, multinomial
from emqlab.explore.checked import Runner, ScheduleError, format_schedule, parse_schedule
from emqlab.protocol.keys import QueueKeys
from emqlab.ui.cli import main
from tests.conftest import admin_conn, backend_conn


def _counts(rep) -> dict:  # type: ignore[no-untyped-def]
    """What an exploration claims (identical on every backend; how much work it took may differ: on
    fakeredis an atomic step's footprint is observed, on a server it is the script's declared prior)."""
    return rep.claims()


@pytest.fixture(scope="module")
def seed_scenario() -> scenario.Scenario:
    return scenario.load("stalled-finish")


def test_split_finds_double_placement_with_its_because(conn: redis.Redis, seed_scenario) -> None:  # type: ignore[no-untyped-def]
    rep = explore(seed_scenario, "split", conn=conn)
    assert rep.anomaly_kinds == ["double-placement"]
    assert rep.runs_with["double-placement"] == 1  # exactly one gap: after DEL lock, before SREM stalled
    assert rep.min_preemptions["double-placement"] == 1
    assert rep.executed == rep.explored + rep.blocked + rep.outside_bound >= rep.explored > 1
    h = rep.witnesses["double-placement"]
    assert h.final["placements"]["1"] == ["wait", "completed"]
    because = h.anomalies[0]["because"]
    assert "S1 ran after W1 cleared the lock" in because and "SREM" in because
    # the steps named in the because are a DEL by W1, the sweep, and W1's SREM
    steps = {s.index: s for s in h.steps}
    named = [steps[i] for i in h.anomalies[0]["steps"]]
    assert [(s.actor, s.op) for s in named][:3] == [("W1", "DEL"), ("S1", "moveStalledJobsToWait"), ("W1", "SREM")]


@pytest.mark.parametrize("mode", ["atomic", "finish-then-fetch"])
def test_atomic_modes_show_no_anomaly_in_any_interleaving(conn: redis.Redis, seed_scenario, mode: str) -> None:  # type: ignore[no-untyped-def]
    rep = explore(seed_scenario, mode, conn=conn, reduce=False)
    assert rep.anomaly_kinds == []
    assert rep.explored == rep.raw_interleavings == 2
    assert rep.results["W1"] == {"finish:1:0": 2}


@pytest.mark.live
def test_counts_identical_on_both_backends(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    fake = explore(seed_scenario, "split", conn=connect())
    live = explore(seed_scenario, "split", conn=backend_conn("live"))
    assert _counts(fake) == _counts(live)


@pytest.mark.live
def test_witness_replays_to_the_same_history_on_both_backends(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    rep = explore(seed_scenario, "split", conn=connect())
    schedule = rep.witnesses["double-placement"].schedule
    histories = []
    for conn in (connect(), backend_conn("live")):
        with Runner(seed_scenario, "split", conn) as r:
            histories.append(r.run(parse_schedule(schedule, ["W1", "S1"])))
    fake_h, live_h = histories
    assert fake_h.comparable() == live_h.comparable()
    assert fake_h.anomalies == live_h.anomalies
    assert fake_h.final == live_h.final


_WITNESS_CACHE: dict[str, object] = {}


def _split_report(name: str):  # type: ignore[no-untyped-def]
    if name not in _WITNESS_CACHE:
        _WITNESS_CACHE[name] = explore(scenario.load(name), "split", conn=connect())
    return _WITNESS_CACHE[name]


@pytest.mark.live
@pytest.mark.parametrize("name", ["stalled-finish", "lease-lapse", "fetch-loop", "two-workers"])
def test_every_witness_replays_identically_on_both_backends(name: str) -> None:
    sc = scenario.load(name)
    rep = _split_report(name)
    assert rep.witnesses, f"{name}: split mode found no anomaly"
    ids = [a.id for a in sc.actors]
    for kind, witness in rep.witnesses.items():
        runs = []
        for conn in (connect(), backend_conn("live")):
            with Runner(sc, "split", conn) as r:
                runs.append(r.run(parse_schedule(witness.schedule, ids)))
        fake_h, live_h = runs
        assert fake_h.comparable() == live_h.comparable() == witness.comparable(), f"{name} {kind}"
        assert fake_h.final == live_h.final
        assert any(a["kind"] == kind for a in live_h.anomalies)


def test_two_workers_split_steals_the_lock_and_runs_the_job_twice() -> None:
    rep = _split_report("two-workers")
    assert {"duplicate-execution", "stolen-lock"} <= set(rep.anomaly_kinds)
    stolen = rep.witnesses["stolen-lock"].anomalies
    assert any(a["kind"] == "stolen-lock" and "W1 deleted W2's lock on job 1" in a["because"] for a in stolen)


@pytest.mark.parametrize("mode", ["atomic", "finish-then-fetch"])
def test_two_workers_atomic_rejects_the_lost_worker(mode: str) -> None:
    sc = scenario.load("two-workers")
    rep = explore(sc, mode, conn=connect())
    assert "double-placement" not in rep.anomaly_kinds and "stolen-lock" not in rep.anomaly_kinds
    codes = {k.split(":")[-1] for k in rep.results["W1"] if k.startswith("finish:")}
    assert {"-2", "-6"} <= codes


def test_lease_lapse_split_double_places_atomic_gets_missing_lock(conn: redis.Redis) -> None:
    sc = scenario.load("lease-lapse")
    split = explore(sc, "split", conn=conn)
    assert "double-placement" in split.anomaly_kinds
    atomic = explore(sc, "atomic", conn=conn)
    assert atomic.anomaly_kinds == []
    assert atomic.results["W1"].get("finish:1:-2", 0) > 0


def test_exhaustive_without_reduction_runs_the_multinomial(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    rep = explore(seed_scenario, "split", reduce=False)
    assert rep.explored == rep.raw_interleavings == multinomial(list(rep.steps_per_actor.values()))
    assert rep.blocked == rep.outside_bound == 0 and rep.executed == rep.explored


def test_reduction_keeps_every_anomaly() -> None:
    sc = scenario.load("lease-lapse")
    full = explore(sc, "split", reduce=False)
    reduced = explore(sc, "split")
    assert reduced.explored < full.explored
    assert reduced.anomaly_kinds == full.anomaly_kinds
    assert reduced.distinct_outcomes == full.distinct_outcomes


def test_preemption_bound_zero_finds_nothing_bound_one_finds_it(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    assert explore(seed_scenario, "split", preemptions=0).anomaly_kinds == []
    assert explore(seed_scenario, "split", preemptions=1).anomaly_kinds == ["double-placement"]


@pytest.mark.parametrize("strategy", ["random", "pct"])
def test_randomized_strategies_are_deterministic_for_a_seed(seed_scenario, strategy: str) -> None:  # type: ignore[no-untyped-def]
    a = explore(seed_scenario, "split", strategy=strategy, runs=30, seed=3)
    b = explore(seed_scenario, "split", strategy=strategy, runs=30, seed=3)
    assert _counts(a) == _counts(b)
    assert a.explored == 30


def test_pct_finds_the_one_window_that_random_walks_miss(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    # One gap among 21 steps: a uniform random walk hits it with p ~ 2^-10 per run, PCT (depth 2) with
    # p >= 1/(2*21) per run (Burckhardt et al. 2010).
    pct = explore(seed_scenario, "split", strategy="pct", runs=150, seed=1)
    assert pct.anomaly_kinds == ["double-placement"]
    assert pct.params["p_per_run_at_least"] == pytest.approx(1 / (2 * 21), rel=0.2)
    h = pct.witnesses["double-placement"]  # shrunk: still shows it
    assert any(x["kind"] == "double-placement" for x in h.anomalies)


def test_runs_do_not_leak_state(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    with Runner(seed_scenario, "split") as r:
        first = r.run(["W1"] * 9 + ["S1"])
        r.reset()
        again = r.run(["W1"] * 9 + ["S1"])
        r.reset()
        clean = r.run()
    assert first.comparable() == again.comparable()
    assert clean.final["placements"] == {"1": ["completed"]}


# -- schedule strings ------------------------------------------------------------------------------------------


def test_schedule_strings_round_trip_and_tolerate_whitespace_and_case() -> None:
    choices = ["W1"] * 9 + ["S1"] + ["W1"] * 3
    text = format_schedule(choices)
    assert text == "v1:W1*9.S1.W1*3"
    assert parse_schedule(text) == choices
    assert parse_schedule(" V1 : w1*9 . s1 . W1 * 3 ", ["W1", "S1"]) == choices


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("W1.S1", "expected 'v1:'"),
        ("v9:W1", "unknown version 'v9'"),
        ("v1:W1.X7", "unknown actor 'X7'"),
        ("v1:W1*0", "repeats 0 times"),
        ("v1:W1..S1", "part 2 '' is not ACTOR or ACTOR*COUNT"),
        ("v1:1W", "is not ACTOR"),
    ],
)
def test_bad_schedule_strings_give_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as e:
        parse_schedule(text, ["W1", "S1"])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_schedule_naming_a_finished_actor_is_refused(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    with Runner(seed_scenario, "atomic") as r, pytest.raises(ScheduleError, match="S1 has no step left at step 3"):
        r.run(["S1", "W1", "S1"])


# -- histories ----------------------------------------------------------------------------------------------


def test_history_json_round_trip_and_annotated_text(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    with Runner(seed_scenario, "split") as r:
        h = r.run(["W1"] * 9 + ["S1"])
    back = History.from_json(h.to_json())
    assert back.comparable() == h.comparable() and back.final == h.final and back.anomalies == h.anomalies
    text = h.annotated()
    assert "DEL 1:lock" in text and "-- S1" in text and "1 +wait" in text
    with pytest.raises(ValueError, match="version"):
        History.from_json(json.dumps({"version": 99}))


def test_anomaly_checks_are_pure_functions_of_the_history(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    with Runner(seed_scenario, "split") as r:
        h = r.run(["W1"] * 9 + ["S1"])
    again = [a.to_dict() for a in check(History.from_json(h.to_json()), seed_scenario)]
    assert again == h.anomalies
    # a made-up final state with an unfinished job in no list is a lost job; once W1 has finished it, the
    # hash left in no list is orphan data
    unfinished = replace(h, final=replace(h.final, placements={"1": []}), executions=())
    assert [a.kind for a in check(unfinished, seed_scenario)] == ["lost-job"]
    finished = replace(h, final=replace(h.final, placements={"1": []}))
    assert [a.kind for a in check(finished, seed_scenario)] == ["orphan-data"]


# -- live safety --------------------------------------------------------------------------------------------


@pytest.mark.live
def test_refuses_to_run_where_the_queue_keys_exist(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    conn = backend_conn("live")
    admin = admin_conn()  # (a key outside emqlab's patterns: a restricted live user may not write it)
    keys = QueueKeys("emqlab-test-taken")
    admin.set(keys.wait, "someone else's")
    try:
        with pytest.raises(KeysExist, match="refusing to run .* already exist"):
            Runner(seed_scenario, "split", conn, queue="emqlab-test-taken")
        assert admin.get(keys.wait) == b"someone else's"
    finally:
        admin.delete(keys.wait)


@pytest.mark.live
def test_runner_leaves_nothing_behind_on_the_live_server(seed_scenario) -> None:  # type: ignore[no-untyped-def]
    conn = backend_conn("live")
    with Runner(seed_scenario, "split", conn) as r:
        r.run()
        keys = r.keys
        assert Namespace(conn, keys).existing()
    assert Namespace(conn, keys).existing() == []


# -- the CLI --------------------------------------------------------------------------------------------------


def test_cli_simulate_prints_the_witness_and_replay_command() -> None:
    out = CliRunner().invoke(main, ["simulate", "--split"])
    assert out.exit_code == 0, out.output
    assert "double-placement" in out.output
    assert "why:" in out.output and "S1 ran after W1 cleared the lock" in out.output
    assert "emqlab replay 'v1:W1*9.S1.W1*" in out.output


def test_cli_json_carries_every_count() -> None:
    out = CliRunner().invoke(main, ["simulate", "--split", "--json"])
    assert out.exit_code == 0
    data = json.loads(out.output)
    assert data["interleavings"]["raw"] >= data["interleavings"]["explored"] > 0
    assert set(data["interleavings"]) == {"raw", "raw_exact", "explored", "blocked", "outside_bound", "repeated",
                                          "executed", "distinct_outcomes", "complete", "reduction",
                                          "steps_executed"}
    inter = data["interleavings"]
    assert inter["executed"] == inter["explored"] + inter["blocked"] + inter["outside_bound"] + inter["repeated"]
    assert data["interleavings"]["raw"] == 21 and data["interleavings"]["raw_exact"] is True
    assert data["interleavings_with"] == {"double-placement": 1}
    assert data["runs_with"] == {"double-placement": 1}
    assert data["min_preemptions"] == {"double-placement": 1}
    assert data["witnesses"]["double-placement"]["schedule"].startswith("v1:")
    assert data["steps_per_actor"]["S1"] == 1


def test_cli_fail_on_anomaly_and_errors() -> None:
    r = CliRunner()
    assert r.invoke(main, ["simulate", "--split", "--fail-on-anomaly"]).exit_code == 1
    assert r.invoke(main, ["simulate", "--atomic", "--fail-on-anomaly"]).exit_code == 0
    bad = r.invoke(main, ["replay", "v1:W1.Q9"])
    assert bad.exit_code == 2 and "unknown actor 'Q9'" in bad.output
    missing = r.invoke(main, ["simulate", "--scenario", "no-such-scenario"])
    assert missing.exit_code == 2 and "no scenario named 'no-such-scenario'" in missing.output
    unreachable = r.invoke(main, ["simulate", "--redis", "redis://127.0.0.1:1/0"])
    # an unreachable server is an infrastructure error (emqlab.protocol.verdict.ExitCode.INFRASTRUCTURE), not usage
    assert unreachable.exit_code == 4 and "cannot reach Redis at redis://127.0.0.1:1/0" in unreachable.output
    malformed = r.invoke(main, ["simulate", "--redis", "http://nope"])
    assert malformed.exit_code == 2 and "malformed Redis URL" in malformed.output


def test_cli_replay_reproduces_the_witness() -> None:
    out = CliRunner().invoke(main, ["replay", "v1:W1*9.S1", "--split"])
    assert out.exit_code == 0
    assert "double-placement: job 1 is in wait" in out.output


def test_explorer_reports_raw_count_from_the_longest_runs() -> None:
    sc = scenario.load("two-workers")
    with Runner(sc, "atomic") as r:
        rep = Explorer(r).exhaustive()
    # W2 fetches, then finishes only when the fetch got the job: 2 steps at most
    assert rep.steps_per_actor == {"W1": 1, "L1": 1, "S1": 1, "W2": 2}
    # exact: W2's second step exists only where its fetch got the job, so fewer than the multinomial
    with Runner(sc, "atomic") as r:
        every = Explorer(r).exhaustive(reduce=False)
    assert rep.raw_exact and rep.raw_interleavings == every.explored == 25 < multinomial([1, 1, 1, 2])


@pytest.mark.parametrize("name", ["stalled-finish", "lease-lapse", "two-workers"])
@pytest.mark.parametrize("mode", ["atomic", "finish-then-fetch"])
def test_atomic_steps_via_host_equal_fakeredis_evalsha(name: str, mode: str) -> None:
    """On fakeredis an atomic step runs the script through the Lua host inside the step; fakeredis's own
    EVALSHA gives the same exploration (counts, results, witnesses)."""
    sc = scenario.load(name)
    reports = []
    for local in (True, False):
        with Runner(sc, mode, connect(), local_scripts=local) as r:
            reports.append(_counts(Explorer(r).exhaustive(preemption_bound=sc.preemptions)))
    assert reports[0] == reports[1]


def test_replay_in_the_wrong_mode_says_so() -> None:
    out = CliRunner().invoke(main, ["replay", "v1:W1*9.S1", "--atomic"])
    assert out.exit_code == 2
    assert "only fits the scenario and mode it was found in (this is stalled-finish in --atomic)" in out.output


@pytest.mark.live
@pytest.mark.parametrize("options", [{}, {"protocol": 3}, {"decode_responses": True}, {"protocol": 2}],
                         ids=["library-default", "resp3", "decoded", "resp2"])
def test_a_client_of_your_own_explores_as_connect_does(options: dict[str, object]) -> None:
    """``explore(..., conn=redis.Redis(...))`` with a client as you would make it: redis-py 8's default
    speaks RESP3 (HGETALL answers a dict), another decodes replies to str. The engine adopts it
    (backends.adopt: the same server and database over RESP2, bytes) and claims what connect() gives; your
    client is left as it was, and the run's keys are gone."""
    from emqlab.backend.connect import live_url

    url = live_url()
    backend_conn("live")  # skips (fails in CI) without a server
    mine = redis.Redis.from_url(url, **options)  # type: ignore[arg-type]
    sc = scenario.load("stalled-finish")
    got = explore(sc, "split", conn=mine)
    assert got.claims() == explore(sc, "split", conn=connect(url)).claims()
    assert mine.connection_pool.connection_kwargs.get("decode_responses") == options.get("decode_responses")
    assert mine.ping()


@pytest.mark.parametrize("strategy", ["random", "pct"])
def test_a_sampled_report_never_says_it_covered_every_interleaving(strategy: str) -> None:
    """A sampled strategy that ran all its runs finished (``Report.complete``), but its JSON's
    ``interleavings.complete`` says whether every interleaving was covered, as its verdict does: never."""
    from emqlab.engine.scenario import load as load_scenario
    from emqlab.explore import explore

    rep = explore(load_scenario("stalled-finish"), "split", strategy=strategy, runs=20)
    assert rep.complete and rep.to_dict()["interleavings"]["complete"] is False
    exhaustive = explore(load_scenario("stalled-finish"), "split")
    assert exhaustive.to_dict()["interleavings"]["complete"] is True


@pytest.mark.live
def test_the_text_says_why_a_live_run_keeps_more_runs() -> None:
    """On a live server a shipped script's step is one EVALSHA whose footprint is every key it declares, so more
    runs are kept than on fakeredis for the same interleavings and anomalies: the text says so there only."""
    live = CliRunner().invoke(main, ["simulate", "--split", "--redis", "live", "--json"])
    fake = CliRunner().invoke(main, ["simulate", "--split", "--json"])
    a, b = json.loads(live.output), json.loads(fake.output)
    assert a["interleavings"]["raw"] == b["interleavings"]["raw"] and a["interleavings_with"] == b["interleavings_with"]
    assert a["interleavings"]["explored"] > b["interleavings"]["explored"]
    note = "on a live server a shipped script's step is one EVALSHA"
    assert note in CliRunner().invoke(main, ["simulate", "--split", "--redis", "live"]).output
    assert note not in CliRunner().invoke(main, ["simulate", "--split"]).output
