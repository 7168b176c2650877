"""Divided explorations (emqlab.explore.divide): for every shipped scenario × mode at its bound, the exploration
divided into subtrees claims exactly what the undivided one does (interleavings, distinct final states,
anomaly kinds, interleavings with each, minimal preemptions, witnesses), and one worker and two workers
give the same report, runs executed included. Also: the seed swarm, --max-seconds, the CLI options, a Dask
cluster, and a live server's keys after a run and after an interrupted part."""

from __future__ import annotations

import concurrent.futures as cf
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from emqlab.backend.connect import Namespace
from emqlab.engine import scenario
from emqlab.explore import ExploreConfig, explore, parts
from emqlab.explore import pool as explore_pool
from emqlab.explore.divide import PROBE_RUNS, SWARM_CHUNK, Stats
from emqlab.explore.dpor import Exhaustive
from emqlab.protocol.verdict import judge
from emqlab.ui.cli import main
from tests.conftest import live_conn, require, stops_by_default

#: The shipped cases large enough to be divided (the undivided search takes more than PROBE_RUNS runs; the
#: test asserts they are): a smaller search runs whole by design (test_small_explorations_are_not_divided),
#: so dividing it proves nothing. Listed, not computed, to keep the matrix within the suite's time budget.
CASES = [("two-workers", "split"), ("two-workers", "transaction"), ("late-finish-deleted", "split"),
         ("late-finish-deleted", "transaction"), ("crash-mid-finish", "split"), ("cancel-active", "split"),
         ("stale-sweep", "atomic"), ("lost-finish-reply", "split")]


def _json(rep: Any) -> dict[str, Any]:
    d = rep.to_dict()
    d.pop("elapsed_s")
    d.pop("runs_per_second")
    return d


def _oracle(name: str, mode: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Run in a pool worker: the undivided claims, and the claims and JSON of the divided search with one
    job (in that worker's process)."""
    sc = scenario.load(name)
    whole = explore(sc, mode)
    divided = explore(sc, mode, jobs=1, divide=True)
    return whole.claims(), divided.claims(), _json(divided)


@pytest.fixture(scope="module")
def pool() -> Iterator[cf.Executor]:
    ex, close = explore_pool.make_executor(2)
    yield ex
    close()


@pytest.fixture(scope="module")
def oracles(pool: cf.Executor) -> dict[tuple[str, str], Any]:
    futures = {case: pool.submit(_oracle, *case) for case in CASES}
    return {case: f.result() for case, f in futures.items()}


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_divided_claims_what_the_undivided_search_finds_and_two_jobs_print_what_one_does(
        name: str, mode: str, oracles: dict[tuple[str, str], Any], pool: cf.Executor) -> None:
    whole, divided, one_job = oracles[(name, mode)]
    assert whole["interleavings"]["complete"] and whole["interleavings"]["raw_exact"]
    assert divided == whole
    stats = Stats()
    two = explore(scenario.load(name), mode, executor=pool, divide=True, stats=stats)
    assert _json(two) == one_job
    assert stats.divided and stats.parts == one_job["params"]["divided"]["subtrees"] > 1
    assert sum(w["parts"] for w in stats.workers.values()) == stats.parts
    assert all(w["peak_rss_mb"] > 0 for w in stats.workers.values())


def test_the_swarms_of_neighbouring_seeds_share_no_run() -> None:
    """--seed 2 and --seed 3 printed the same report: their swarms shared 7 of 8 chunks (seeds s+i)."""
    sc = scenario.load("two-workers")
    reps = [explore(sc, "split", strategy="random", runs=200, seed=s, jobs=1) for s in (2, 3)]
    ranges = [range(r.params["swarm"]["seeds"]["from"], r.params["swarm"]["seeds"]["to"] + 1,
                    r.params["swarm"]["seeds"]["step"]) for r in reps]
    assert [len(r) for r in ranges] == [8, 8] and not set(ranges[0]) & set(ranges[1])
    same = [{k: v for k, v in _json(r).items() if k != "params"} for r in reps]
    assert same[0] != same[1]


@pytest.mark.parametrize("strategy", ["random", "pct"])
@pytest.mark.parametrize("name", ["cancel-active", "two-workers", "stalled-finish", "lease-lapse"])
def test_a_sampled_witness_has_the_preemptions_the_report_gives_it(name: str, strategy: str) -> None:
    """The witness is shrunk before it is reported: min preemptions is its own count (replayed), not the
    count of the longer run it was shrunk from (a report said 13 beside a schedule of 1); and more runs from
    the same seed never give a worse witness (parts are ranked by their shrunk witnesses)."""
    from emqlab.explore.checked import Runner, parse_schedule

    sc = scenario.load(name)
    reps = [explore(sc, "split", strategy=strategy, runs=n, seed=5, jobs=1) for n in (25, 50)]
    order = [a.id for a in sc.actors]
    with Runner(sc, "split") as runner:
        for rep in reps:
            assert rep.witnesses.keys() == rep.min_preemptions.keys()
            for kind, h in rep.witnesses.items():
                runner.reset()
                again = runner.run(parse_schedule(h.schedule, order))
                assert kind in again.kinds and runner.preemptions == rep.min_preemptions[kind], (kind, h.schedule)
    assert all(reps[1].min_preemptions[k] <= p for k, p in reps[0].min_preemptions.items())


def test_a_swarm_splits_by_seed_and_gives_what_one_process_gives_for_those_seeds() -> None:
    sc = scenario.load("stalled-finish")
    swarm = explore(sc, "split", strategy="random", runs=30, seed=3, jobs=1)
    assert swarm.params["swarm"] == {"seeds": {"from": 3, "to": 3 + 2**32, "step": 2**32},
                                     "runs_per_seed": SWARM_CHUNK, "chunks_run": 2}
    res = CliRunner().invoke(main, ["simulate", "--split", "--strategy", "random", "--runs", "30", "--seed",
                                    str(2**63 - 2**32)])
    assert res.exit_code == 2 and "--runs 30 takes 2 seeds from --seed on (one per 25 runs, 4294967296 apart):" \
        " the largest --seed for it is 9223372032559808511" in " ".join(res.output.split())
    assert 2**63 - 1 - 2**32 == 9223372032559808511
    a = explore(sc, "split", strategy="random", runs=25, seed=3)
    b = explore(sc, "split", strategy="random", runs=5, seed=3 + 2**32)
    assert swarm.explored == 30
    assert swarm.runs_with == dict(Counter(a.runs_with) + Counter(b.runs_with))
    assert swarm.outcomes == a.outcomes | b.outcomes
    one = explore(sc, "split", strategy="random", runs=10, seed=5, jobs=1)
    alone = explore(sc, "split", strategy="random", runs=10, seed=5)
    assert one.claims() == alone.claims() and one.runs_with == alone.runs_with and one.results == alone.results


def test_a_pct_swarm_gives_the_combined_bound(pool: cf.Executor) -> None:
    sc = scenario.load("stalled-finish")
    one = explore(sc, "split", strategy="pct", runs=40, seed=1, jobs=1)
    two = explore(sc, "split", strategy="pct", runs=40, seed=1, executor=pool)
    assert _json(one) == _json(two)
    p = one.params["p_per_run_at_least"]
    assert one.params["p_all_runs_at_least"] == pytest.approx(1 - (1 - p) ** 40)
    assert one.anomaly_kinds == ["double-placement"] and one.params["within_depth"] == ["double-placement"]


def test_a_seed_is_any_64_bit_signed_integer_and_the_help_splits_no_number() -> None:
    """--seed takes the 64-bit signed range and says so in words: printed as a range, its two 19-digit
    bounds were split in the middle of one by the help's wrapping at 80 columns."""
    for cmd in ("simulate", "sweep-rtt"):
        for bad, says in ((str(2**63), "is not a 64-bit signed integer"), ("7x", "is not an integer")):
            res = CliRunner().invoke(main, [cmd, "--seed", bad])
            assert res.exit_code == 2 and says in res.output, (cmd, bad, res.output)
        text = CliRunner().invoke(main, [cmd, "--help"], terminal_width=80).output
        assert "64-bit signed integer" in " ".join(text.split()) and "922337" not in text
    res = CliRunner().invoke(main, ["simulate", "--split", "--strategy", "random", "--runs", "1", "--seed",
                                    str(-(2**63)), "--json"])
    assert res.exit_code in (0, 1) and json.loads(res.output)["params"]["swarm"]["seeds"]["from"] == -(2**63)


def test_max_seconds_gives_an_inconclusive_report_that_says_what_was_covered() -> None:
    sc = scenario.load("lease-lapse")
    # handing on after every run: the first run (far longer than 1 ms) hands on, then the deadline stops it all
    rep = explore(sc, "split", jobs=1, divide=True, donate_every=1, max_seconds=0.001)
    assert not rep.complete and not rep.raw_exact
    assert "parts finished" in rep.params["inconclusive"] and "lower bounds" in rep.params["inconclusive"]
    assert judge(rep).kind == "inconclusive"
    probe = explore(sc, "split", jobs=1, max_seconds=0.001)  # stops in the undivided probe
    assert not probe.complete and "undivided search stopped" in probe.params["inconclusive"]
    # and it was not divided because it stopped, not because it finished
    assert probe.params["divided"] == ("no: stopped after 1 run(s), before the first hand-on "
                                       f"(after {PROBE_RUNS})")


def test_small_explorations_are_not_divided() -> None:
    sc = scenario.load("stalled-finish")
    rep = explore(sc, "split", jobs=2)
    assert rep.params["divided"].startswith("no: finished within")
    assert rep.claims() == explore(sc, "split").claims() and rep.explored == 4


def test_explore_takes_the_config_fields_as_options_and_names_them_when_one_is_wrong() -> None:
    """``explore(sc, mode, **options)`` is ``explore(sc, mode, ExploreConfig(**options))``; an option that is
    no field is a TypeError that lists the fields, a bad value a ValueError."""
    sc = scenario.load("stalled-finish")
    config = ExploreConfig(strategy="random", runs=40, seed=7)
    assert _json(explore(sc, "split", config)) == _json(explore(sc, "split", strategy="random", runs=40, seed=7))
    assert _json(explore(sc, "split", config, seed=8)) == _json(explore(sc, "split", strategy="random", runs=40,
                                                                        seed=8))
    with pytest.raises(TypeError, match="unknown exploration option donate .*donate_every"):
        explore(sc, "split", donate=1)
    with pytest.raises(ValueError, match="donate_every must be at least 1"):
        explore(sc, "split", jobs=1, donate_every=0)
    with pytest.raises(ValueError, match="unknown strategy 'dfs'"):
        ExploreConfig(strategy="dfs")


@pytest.mark.parametrize(("options", "error", "words"), [
    ({"runs": "ten"}, TypeError, "runs must be a whole number, not 'ten'"),
    ({"runs": 0}, ValueError, "runs must be at least 1, not 0"),
    ({"depth": 0, "strategy": "pct"}, ValueError, "depth must be at least 1"),
    ({"preemptions": -1}, ValueError, "preemptions must be at least 0, not -1"),
    ({"seed": 1.5}, TypeError, "seed must be a whole number"),
    ({"jobs": 0}, ValueError, "jobs must be at least 1, not 0"),
    ({"max_seconds": float("nan")}, ValueError, "max_seconds must be a number of seconds above 0"),
])
def test_a_bad_option_value_is_refused_before_anything_runs(options: dict[str, Any], error: type[Exception],
                                                            words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        explore(scenario.load("stalled-finish"), "split", **options)


def test_an_unknown_mode_is_refused_not_run_as_the_atomic_finish() -> None:
    """A mistyped mode once ran as the atomic finish and reported no anomaly: a false 'holds'."""
    with pytest.raises(ValueError, match="unknown mode 'splitt' \\(one of: atomic, split, finish-then-fetch"):
        explore(scenario.load("stalled-finish"), "splitt")


def test_the_console_scripts_entry_imports_no_exploration() -> None:
    """The entry takes the stop signals before the CLI's heavy imports (a Ctrl-C meanwhile exits quietly):
    importing it loads emqlab.explore.stops and nothing of the exploration itself."""
    import subprocess

    code = ("import sys, emqlab.ui.entry\n"
            "print(sorted(m for m in sys.modules if m.startswith('emqlab.explore')))\n"
            "print(sorted(m for m in ('redis', 'lupa', 'fakeredis', 'click') if m in sys.modules))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["['emqlab.explore', 'emqlab.explore.stops']", "[]"]


def test_cli_jobs_one_and_two_print_the_same_json() -> None:
    out = {}
    for jobs in ("1", "2"):
        r = CliRunner().invoke(main, ["simulate", "--split", "--scenario", "lease-lapse", "--json", "--jobs", jobs])
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        d.pop("elapsed_s")
        d.pop("runs_per_second")
        out[jobs] = d
    assert out["1"] == out["2"]
    assert out["1"]["params"]["divided"]["subtrees"] > 1  # divided, the same way for one job and for two


def test_cli_max_seconds_and_a_bad_executor() -> None:
    r = CliRunner().invoke(main, ["simulate", "--split", "--scenario", "lease-lapse", "--json", "--max-seconds",
                                  "0.001"])
    d = json.loads(r.output)
    assert d["verdict"] == "inconclusive" and d["interleavings"]["complete"] is False
    bad = CliRunner().invoke(main, ["simulate", "--split", "--executor", "bogus://x"])
    assert bad.exit_code == 2 and "unknown executor 'bogus://x'" in bad.output


def test_dask_executor_without_dask_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(explore_pool.ParallelError, match=r"pip install 'emqlab\[dask\]'"):
        explore_pool.make_executor(executor="dask://127.0.0.1:8786")


def test_a_dask_cluster_of_two_workers_gives_the_same_report() -> None:
    try:
        import distributed
    except ImportError:
        require("Dask", "pip install -e '.[test]' (or 'emqlab[dask]')")
    sc = scenario.load("mark-then-recover")
    one = explore(sc, "split", jobs=1, divide=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) \
            as cluster, distributed.Client(cluster) as client:
        stats = Stats()
        two = explore(sc, "split", executor=client.get_executor(), divide=True, stats=stats)
    assert _json(two) == _json(one)
    assert len(stats.workers) == 2


@pytest.mark.live
def test_live_parts_run_under_their_own_queues_and_delete_them() -> None:
    conn = live_conn()
    sc = scenario.load("lease-lapse")
    stats = Stats()
    live = explore(sc, "split", conn=conn, jobs=2, divide=True, stats=stats)
    assert live.claims() == explore(sc, "split").claims()
    assert stats.queues and all(q.startswith("emq:{q-") for q in stats.queues)
    for base in stats.queues:
        assert not list(conn.scan_iter(match=base + "*", count=500))


@pytest.mark.live
def test_an_interrupted_part_deletes_its_live_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = live_conn()
    seen: list[Any] = []

    def interrupted(self: Exhaustive, *args: Any, **kwargs: Any) -> None:
        self.runner.reset()
        self.runner.step(self.order[0])
        assert Namespace(self.runner.conn, self.runner.keys).existing()  # keys written
        seen.append(self.runner.keys)
        raise KeyboardInterrupt

    monkeypatch.setattr(Exhaustive, "_dpor", interrupted)
    url = explore_pool.url_of(conn)
    job = parts.Job(scenario.load("lease-lapse"), "split", url)
    with pytest.raises(KeyboardInterrupt):
        parts.run_part(job, parts.Task(0, prefix="v1:W1"))
    assert seen and Namespace(conn, seen[0]).existing() == []


def _every_case() -> list[tuple[str, str]]:
    return [(name, mode) for name in scenario.shipped_names() for mode in scenario.load(name).expect]


@pytest.mark.parametrize(("name", "mode"), _every_case(), ids=[f"{n}-{m}" for n, m in _every_case()])
def test_handing_on_after_every_run_claims_what_the_undivided_search_finds(name: str, mode: str) -> None:
    """The oracle for :class:`emqlab.explore.parts.Donor` over every shipped scenario and mode: handing on at
    the first run and after every run (the most parts the rule can make) changes no claim — interleavings,
    distinct final states, anomaly kinds and their counts, minimal preemptions, witnesses — and ``--jobs 2``
    gives the same JSON as ``--jobs 1`` (issue 14's acceptance, under the rule that divides the most)."""
    sc = scenario.load(name)
    whole = explore(sc, mode)
    stats = Stats()
    divided = explore(sc, mode, jobs=1, divide=True, donate_every=1, stats=stats)
    assert divided.claims() == whole.claims()
    assert whole.explored <= 1 or stats.parts > 1  # it was divided wherever there was more than one run
    # and two jobs (a forked pool worker, its hand-ons streamed back) print exactly what one prints
    assert _json(explore(sc, mode, jobs=2, divide=True, donate_every=1)) == _json(divided)


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_hand_ons_streamed_back_from_pool_workers_claim_what_the_undivided_search_finds(
        name: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a pool, a worker's part sends each node it hands on back at once (the coordinator queues it
    while the part goes on): the claims are the undivided search's, and the hand-ons did stream."""
    from emqlab.explore import pool

    # (the pool at the first hand-on: some of these searches end within the usual wait, and then no
    # worker would run)
    monkeypatch.setattr(pool, "WARM_AFTER_S", 0.0)
    sc = scenario.load(name)
    stats = Stats()
    divided = explore(sc, mode, jobs=2, divide=True, donate_every=1, stats=stats)
    assert divided.claims() == explore(sc, mode).claims()


def test_a_pool_workers_hand_ons_stream_back_as_its_part_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The streaming itself, on a search whose parts are large enough that the worker's certainly hand on
    (a part explores only the children a race asked for: some of the cases above give the worker parts that
    run nothing, and whether it gets one that hands on is then a matter of timing)."""
    from emqlab.explore import pool

    monkeypatch.setattr(pool, "WARM_AFTER_S", 0.0)
    sc = scenario.load(str(Path(__file__).parents[1] / "benchmarks" / "scenarios" / "three-split-workers.yaml"))
    stats = Stats()
    divided = explore(sc, "split", jobs=2, divide=True, donate_every=1, stats=stats)
    assert divided.claims() == explore(sc, "split").claims()
    assert stats.streamed > 0 and len({w.split(":")[1] for w in stats.workers}) == 2  # two processes


@pytest.mark.parametrize("how", ["one job", "a pool of ours", "an executor given"])
def test_a_divided_searchs_progress_is_full_only_when_every_part_has_ended(
        how: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``progress(done, total)`` of a divided search counts parts finished of parts known: the total grows
    as parts are handed on, done stays below it while any part (the search here included) is open, and the
    last update is every part of the report, done. (Told None, or done == total whenever nothing was queued
    for a moment, a bar stood full, and rich kept that total, while the search here or a part still ran.)"""
    monkeypatch.setattr(explore_pool, "WARM_AFTER_S", 0.0)  # (the pool at the first hand-on)
    where: dict[str, Any] = ({"jobs": 1} if how == "one job" else {"jobs": 2} if how == "a pool of ours"
                             else {"executor": request.getfixturevalue("pool")})
    told: list[tuple[int, int]] = []  # (a total of None is told as -1)
    stats = Stats()
    explore(scenario.load("crash-mid-finish"), "split", divide=True, donate_every=1, stats=stats,
            progress=lambda done, total: told.append((done, -1 if total is None else total)), **where)
    assert stats.parts > 2 and told
    *going, last = told
    assert all(0 <= done < total for done, total in going), going
    assert last == (stats.parts, stats.parts)
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(told, told[1:], strict=False)), told


def test_a_pool_forked_from_a_process_with_no_other_thread_prints_what_one_job_does() -> None:
    """``emqlab simulate`` in a process of its own has no other thread, so its pool's worker is forked from
    it (explore_pool.start_method): the report is the same as one job's, and a worker really ran parts."""
    import subprocess

    script = (
        "import json, threading\n"
        "from emqlab import scenario\n"
        "from emqlab.explore import explore, pool\n"
        "from emqlab.explore.divide import Stats\n"
        "assert threading.active_count() == 1 and pool.start_method() == 'fork'\n"
        "sc = scenario.load('lease-lapse')\n"
        "pool.WARM_AFTER_S = 0.0  # the pool at the first hand-on: this search is shorter than the wait\n"
        "out = {}\n"
        "for jobs in (1, 2):\n"
        "    st = Stats()\n"
        "    rep = explore(sc, 'split', jobs=jobs, stats=st)\n"
        "    d = rep.to_dict(); d.pop('elapsed_s'); d.pop('runs_per_second')\n"
        "    out[jobs] = (d, sorted(st.workers))\n"
        "print(json.dumps(out))\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["1"][0] == out["2"][0]
    assert len({w.split(":")[1] for w in out["2"][1]}) == 2  # the coordinator and a forked worker ran parts


def test_a_search_shorter_than_the_warm_up_wait_starts_no_pool_and_reports_what_one_job_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A local pool starts only once the search has run WARM_AFTER_S (wall time) (a fork and a pool's thread cost a
    short search more than they save): until then the parts handed on run here, the report is the same,
    and with a long wait no pool starts at all; with none, the pool's worker takes parts."""
    sc = scenario.load("lease-lapse")
    one = _json(explore(sc, "split", jobs=1, divide=True))
    for wait, processes in ((3600.0, 1), (0.0, 2)):
        monkeypatch.setattr(explore_pool, "WARM_AFTER_S", wait)
        st = Stats()
        assert _json(explore(sc, "split", jobs=2, divide=True, stats=st)) == one
        assert st.parts > 1 and len({w.split(":")[1] for w in st.workers}) == processes


def test_a_job_keeps_its_runner_key_through_pickling_for_every_shipped_scenario() -> None:
    """A worker keeps its runner for the parts whose job has its key. The key is computed where the job is
    made and shipped with it: a hash of a worker's unpickled copy differed from the coordinator's for some
    scenarios (a pickle's bytes depend on which of its objects are one object), and the forked worker then
    built a second runner instead of keeping its copy of the root's."""
    import pickle

    for name in scenario.shipped_names():
        job = parts.Job(scenario.load(name), "split")
        assert pickle.loads(pickle.dumps(job)).key == job.key, name
    a, b = (parts.Job(scenario.load("two-workers"), mode) for mode in ("split", "atomic"))
    assert a.key != b.key


def test_ctrl_c_again_and_again_while_the_cli_imports_exits_130_quietly() -> None:
    """Stop signals that come while the console script imports the CLI (made slow here, so they surely
    do): the first ends it with 130 and "interrupted", and the ones after, however many, change nothing.
    Before, the exit went through the interpreter's shutdown, which puts the default handlers back, and a
    second Ctrl-C then killed the process (status -2; seen with a double Ctrl-C on a loaded machine)."""
    import os
    import signal
    import subprocess
    import time

    slow = ("import sys, time\n"
            "class Slow:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'emqlab.ui.cli':\n"
            "            print('importing', flush=True)\n"
            "            time.sleep(30)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Slow())\n"
            "from emqlab.ui.entry import entry\n"
            "entry()\n")
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", slow, "simulate"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=stops_by_default)
        assert proc.stdout is not None and proc.stdout.readline() == b"importing\n"
        while proc.poll() is None:  # a flood of them, 2 ms apart, until it has exited
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.002)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130 and err == b"interrupted\n", (proc.returncode, err.decode())


def _python(code: str) -> Any:
    """``python -c code`` in a child with the stop signals at their defaults; its CompletedProcess."""
    import subprocess

    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False,
                          preexec_fn=stops_by_default)


def test_a_stop_signal_inside_an_import_is_taken_when_the_import_has_ended(tmp_path: Path) -> None:
    """The commands import their modules lazily, after the CLI's handler is installed; a stop signal raised
    inside one of those imports left it half-made (a submodule in ``sys.modules`` but not bound to its
    package: "module 'redis' has no attribute 'exceptions'"), and the clean-up's own imports failed with a
    traceback. The signal is held until the import has returned, then taken there: the module is whole."""
    (tmp_path / "slowmod.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
                                         "import json\nDONE = json.dumps(1)\n")
    code = ("import sys\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from emqlab.ui import entry\n"
            "entry.handle_stops(entry._terminate)\n"
            "def after():\n"
            "    pass\n"
            "try:\n"
            "    import slowmod\n"
            "    after()\n"
            "    print('not stopped')\n"
            "except SystemExit as e:\n"
            "    print(e.code, getattr(sys.modules.get('slowmod'), 'DONE', None))\n")
    done = _python(code)
    assert (done.returncode, done.stdout) == (0, b"143 1\n"), done.stderr.decode()[-2000:]


def test_a_stop_signal_raised_inside_a_finalizer_still_stops_the_command() -> None:
    """A stop's exception raised inside a ``__del__`` is printed and dropped by Python, and the command ran
    on (a Lua script run's finalizer, in a stopped two-job simulate). It is raised again at the next call:
    the command stops with 143, says so, and prints no traceback."""
    code = ("import os, signal, sys\n"
            "from emqlab.ui import entry\n"
            "class Dropped:\n"
            "    def __del__(self):\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        for _ in range(10000):\n"
            "            pass\n"
            "def after():\n"
            "    pass\n"
            "def main():\n"
            "    Dropped()\n"
            "    after()\n"
            "    print('ran on')\n"
            "entry._run(main)\n")
    done = _python(code)
    assert (done.returncode, done.stdout, done.stderr) == (143, b"", b"stopped by SIGTERM\n"), done.stderr


def test_a_stop_signal_whose_exit_an_import_swallows_still_stops_the_command() -> None:
    """A Ctrl-C while the CLI is imported whose SystemExit something inside the import swallows (a bare
    except, say): the command still ends with 130 and "interrupted" instead of running on to exit 0 (seen
    when the signal landed inside importlib's compiling of a module)."""
    import os
    import signal
    import subprocess

    swallow = ("import sys, time\n"
               "class Swallow:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'emqlab.ui.cli':\n"
               "            print('importing', flush=True)\n"
               "            try:\n"
               "                time.sleep(30)\n"
               "            except BaseException:\n"
               "                pass\n"
               "        return None\n"
               "sys.meta_path.insert(0, Swallow())\n"
               "from emqlab.ui.entry import entry\n"
               "entry()\n")
    proc = subprocess.Popen([sys.executable, "-c", swallow, "simulate", "--split"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=stops_by_default)
    assert proc.stdout is not None and proc.stdout.readline() == b"importing\n"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err, out) == (130, b"interrupted\n", b"")


@pytest.mark.parametrize("sig", ["INT", "TERM", "HUP"])
def test_a_burst_of_stop_signals_during_a_run_ends_it_with_the_first_ones_status(sig: str) -> None:
    """Stop signals every 10 ms from mid-run until the command has exited: the first decides the status
    (130, 143, 129) and what is said, the rest change nothing. Before, the ones that came during the
    interpreter's shutdown (the default handlers back, a thread left that did not block them) killed the
    process by the signal: status -2, -15, -1."""
    import os
    import signal
    import subprocess
    import time

    signum = getattr(signal, f"SIG{sig}")
    # (a search of several seconds: two-workers, which it ran before, can end before the first signal)
    three = str(Path(__file__).parents[1] / "benchmarks" / "scenarios" / "three-split-workers.yaml")
    proc = subprocess.Popen([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate",
                             "--split", "-s", three, "--preemptions", "1", "--jobs", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=stops_by_default)
    time.sleep(1.0)
    end = time.monotonic() + 90  # (a run that never stops fails here instead of holding the suite)
    while proc.poll() is None and time.monotonic() < end:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        pytest.fail(f"SIG{sig} every 10 ms for 90 s did not stop the run")
    out, err = proc.communicate(timeout=60)
    said = {"INT": b"interrupted", "TERM": b"stopped by SIGTERM", "HUP": b"stopped by SIGHUP"}[sig]
    assert proc.returncode == 128 + signum and said in err and b"Traceback" not in err, (proc.returncode, err)


STOPS = [("INT", 1.6, 1), ("INT", 2.4, 1), ("INT", 1.0, 2), ("INT", 0.4, 2), ("TERM", 1.6, 1), ("HUP", 1.6, 1)]


@pytest.mark.live
@pytest.mark.parametrize(("sig", "after", "times"), STOPS, ids=[f"{s}x{n}-at-{a}s" for s, a, n in STOPS])
def test_a_stop_signal_to_the_whole_process_group_of_a_two_job_live_run_leaves_no_keys(
        sig: str, after: float, times: int) -> None:
    """Ctrl-C (once, or twice 10 ms apart), SIGTERM (a CI timeout) or SIGHUP (a closed terminal) reaches the
    coordinator and its worker at once (the signal goes to the process group), and the coordinator passes
    it on as well: each part stops once and deletes its keys, a later signal never cuts that short or
    hangs the pool's shutdown (pool._on_sigint, pool._quiet, entry._terminate). On the test's own
    server, so any key left is this run's."""
    import os
    import signal
    import subprocess
    import time

    import redis as redis_py

    from tests.conftest import own_redis_server

    signum = getattr(signal, f"SIG{sig}")
    with own_redis_server() as url:
        proc = subprocess.Popen([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()",  # the script
                                 "simulate", "--split", "-s", "two-workers", "--jobs", "2", "--redis", url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=stops_by_default)
        time.sleep(after)
        for _ in range(times):
            os.killpg(proc.pid, signum)
            time.sleep(0.01)
        out, err = proc.communicate(timeout=60)  # (a hang fails here)
        conn = redis_py.Redis.from_url(url)
        left = [k for k in conn.scan_iter(match="emq:{q-*") if not k.startswith(b"emq:{q-runs}")]
        assert proc.returncode in (0, 128 + signum), err.decode()
        assert b"Traceback" not in err, err.decode()
        assert left == [], (left, err.decode())


def _caught(pid: int) -> set[int]:
    """The signals process ``pid`` has a handler for (Linux: /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return {n for n in range(1, 64) if mask >> (n - 1) & 1}


@pytest.mark.live
def test_a_fork_server_worker_handles_the_stop_signals_and_a_ctrl_c_to_the_coordinator_stops_it_at_once() -> None:
    """On a live server the pool's workers come from a fork server, which ignores the stop signals (a Ctrl-C
    to the group must not print its import traceback): a worker inherited that, took itself for a process
    run under nohup, and ran its part to the end — a Ctrl-C took 35 s and more to stop a run, keys were
    left where it was then killed. Now each worker handles what the coordinator did not ignore."""
    import os
    import signal
    import subprocess
    import time

    import redis as redis_py

    from tests.conftest import own_redis_server

    if not Path("/proc/self/status").exists():
        pytest.skip("reads the workers' signal handlers from /proc (Linux)")
    three = str(Path(__file__).parents[1] / "benchmarks" / "scenarios" / "three-split-workers.yaml")
    with own_redis_server() as url:
        proc = subprocess.Popen([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate",
                                 "--split", "-s", three, "--preemptions", "2", "--jobs", "2", "--redis", url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=stops_by_default)
        try:
            workers: list[int] = []
            end = time.monotonic() + 30
            while not workers and time.monotonic() < end and proc.poll() is None:
                children = {int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()}
                workers = [int(w) for c in children for w in
                           Path(f"/proc/{c}/task/{c}/children").read_text().split()]  # the fork server's
                time.sleep(0.05)
            assert workers, "no pool worker started"
            time.sleep(0.5)  # (its initializer has run: it takes parts)
            assert all({signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= _caught(w) for w in workers)
            proc.send_signal(signal.SIGINT)  # the coordinator alone: it passes the signal on
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        conn = redis_py.Redis.from_url(url)
        left = [k for k in conn.scan_iter(match="emq:{q-*") if not k.startswith(b"emq:{q-runs}")]
        assert (proc.returncode, err) == (130, b"interrupted\n")
        assert left == []


def test_a_worker_the_server_refuses_a_queue_hands_its_parts_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose queue registration gets a server error (OOM while the other queues hold their keys)
    runs nothing: its parts go back and the coordinator runs them on its own queue, so the report is the
    undivided one and says nothing was lost; the refusal is kept in the stats."""
    import threading

    from emqlab.backend.connect import ServerFault

    claim = Namespace.claim

    def refused(self: Namespace) -> Namespace:
        if threading.current_thread() is not threading.main_thread():
            raise ServerFault("registering the run got a server error (OOM …): no run can start", code="OOM")
        return claim(self)

    monkeypatch.setattr(Namespace, "claim", refused)
    sc = scenario.load("two-workers")
    whole = explore(sc, "split")
    handing_on, swarm = Stats(), Stats()
    with cf.ThreadPoolExecutor(2) as ex:
        divided = explore(sc, "split", executor=ex, divide=True, donate_every=1, stats=handing_on)
        sampled = explore(sc, "split", strategy="random", runs=300, seed=5, executor=ex, stats=swarm)
    assert divided.claims() == whole.claims() and divided.complete
    assert _json(sampled) == _json(explore(sc, "split", strategy="random", runs=300, seed=5, jobs=1))
    for stats in (handing_on, swarm):
        assert stats.refused is not None and "OOM" in stats.refused


def test_an_unreachable_dask_scheduler_is_an_error_even_when_the_coordinator_did_everything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool starts in the background while the search goes on here; if it never starts, the run says so
    (exit 4, as for an unreachable Redis) instead of printing the report this process made alone."""
    distributed = pytest.importorskip("distributed")

    def refused(address: str, timeout: float) -> Any:
        raise OSError(f"Timed out trying to connect to {address} after {timeout} s")

    monkeypatch.setattr(distributed, "Client", refused)
    with pytest.raises(explore_pool.ExecutorUnreachable, match="cannot reach the Dask scheduler at tcp://127.0.0.1:1"):
        explore(scenario.load("two-workers"), "split", executor="dask://127.0.0.1:1", divide=True)
    for strategy in ("exhaustive", "random"):
        res = CliRunner().invoke(main, ["simulate", "--split", "-s", "two-workers", "--strategy", strategy,
                                        "--executor", "dask://127.0.0.1:1"])
        assert res.exit_code == 4 and "error: cannot reach the Dask scheduler" in res.output, res.output


_PROBE = '''\
import sys

if __name__ == "__main__":
    import emqlab
    from emqlab.explore.pool import make_executor

    pool, close = make_executor(2, pool=True, live=True)  # (live: the fork server)
    try:
        print(emqlab.__file__)
        print(pool.submit(eval, "__import__('emqlab').__file__").result(timeout=60))
    finally:
        close()
'''


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH (no current directory on sys.path): 3.11+")
@pytest.mark.parametrize("init", [None, "__version__ = 'not the one this process runs'\n"])
def test_pool_workers_import_the_emqlab_this_process_runs(tmp_path: Any, init: str | None) -> None:
    """Issue 25, item 7: multiprocessing starts the fork server with ``python -c``, whose sys.path begins with
    the current directory, and ignores the sys.path it is handed: run from a folder holding a folder named
    ``emqlab`` (an empty one, or a package of that name), the fork server imported that one and its workers
    failed (exit 5, ImportError). The workers must import the very emqlab this process runs."""
    import subprocess
    from pathlib import Path

    import emqlab

    work, runner = tmp_path / "work", tmp_path / "runner"
    (work / "emqlab").mkdir(parents=True)
    if init is not None:
        (work / "emqlab" / "__init__.py").write_text(init)
    runner.mkdir()
    (runner / "probe.py").write_text(_PROBE)
    res = subprocess.run([sys.executable, str(runner / "probe.py")], cwd=work, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == [str(Path(emqlab.__file__))] * 2, res.stdout


def test_an_ignored_sighup_stays_ignored_in_the_pool_workers_too() -> None:
    """Started with SIGHUP ignored (nohup, a shell's background job), emqlab keeps it ignored, and so do
    its pool workers: a SIGHUP to the process group changes nothing (before, a worker turned it into a
    Ctrl-C and the command exited 130, interrupted)."""
    import os
    import signal
    import subprocess
    import time

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate",
                             "--split", "-s", "two-workers", "--jobs", "2", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=nohup)
    time.sleep(0.8)
    while proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGHUP)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b'"verdict"' in out, (proc.returncode, err[-300:])


def test_a_workers_stop_that_a_finalizer_dropped_is_raised_at_its_next_call() -> None:
    """In a pool worker, the stop's KeyboardInterrupt raised inside a ``__del__`` is dropped by Python (the
    part then ran to its end, streaming hand-ons no one read): the worker's hook says nothing and raises it
    at the next call, while a part runs."""
    from emqlab.explore import parts, pool

    class Dropped:
        def __del__(self) -> None:
            raise KeyboardInterrupt

    def after() -> None:
        pass

    saved = sys.unraisablehook
    sys.unraisablehook = pool._unraisable
    parts._stopping.set()
    parts._running.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            Dropped()
            after()
    finally:
        sys.setprofile(None)
        sys.unraisablehook = saved
        parts._stopping.clear()
        parts._running.clear()


def test_an_interrupt_a_finalizer_dropped_during_an_exploration_is_raised_again() -> None:
    """A notebook's interrupt that lands in a ``__del__`` is dropped by Python ("Exception ignored") and the
    cell ran on to its end; inside :func:`~emqlab.explore.stops.interrupts_kept` (every exploration) it is
    raised at the next call. Other unraisable exceptions, and everything after the block, go to the hook
    that was there."""
    from emqlab.explore.stops import interrupts_kept

    class Dropped:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def __del__(self) -> None:
            raise self.exc

    def after() -> None:
        pass

    seen: list[BaseException | None] = []
    saved = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    try:
        with pytest.raises(KeyboardInterrupt), interrupts_kept():
            Dropped(ValueError("other"))
            Dropped(KeyboardInterrupt())
            after()
            pytest.fail("the interrupt was dropped")
        assert [type(e) for e in seen] == [ValueError]
        Dropped(KeyboardInterrupt())  # (outside the block: the hook that was there)
        assert [type(e) for e in seen] == [ValueError, KeyboardInterrupt]
    finally:
        sys.setprofile(None)
        sys.unraisablehook = saved
