"""Timed runs (emqlab.timing): deterministic for a seed, no anomaly for atomic finishes, round trips per job
1 / 2 / the split script's command count, and split anomalies that grow with the RTT."""

from __future__ import annotations

from collections import Counter

import pytest

from emqlab.backend.connect import command_executor, connect
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting import calls as api
from emqlab.scripting.host import LuaHost
from emqlab.timing.model import ALL_MODES, MODES, PRESETS, TimingConfig, mode_of, model_round_trips, parts_of
from emqlab.timing.run import TimedRun, simulate
from emqlab.timing.sweep import sweep_rtt

SMALL = TimingConfig(jobs=24, workers=4)
TS = 1_767_225_600_000


def _comparable(r):  # type: ignore[no-untyped-def]
    d = r.to_dict()
    d.pop("wall_s")
    return d


def split_finish_commands(next_waiting: bool) -> int:
    """How many commands moveToFinished-14 sends when run split (fetch_next = 1), counted by the Lua host on
    a queue built with the scripts API: one job active and locked, and one more waiting or none."""
    conn = connect()
    k = QueueKeys("q")
    conn.hset(k.meta, "opts.maxLenEvents", 10000)
    api.add_job(conn, k, "job", {"n": 1}, timestamp=TS)
    if next_waiting:
        api.add_job(conn, k, "job", {"n": 2}, timestamp=TS)
    nxt = api.move_to_active(conn, k, "W1:1", timestamp=TS + 1, lock_duration=3_600_000)
    assert nxt is not None and nxt.job_id is not None
    call = api.move_to_finished_call(k, nxt.job_id, "W1:1", "completed", {"ok": True},
                                     api.FinishOpts(token="W1:1", lock_duration=3_600_000), True, timestamp=TS + 2)
    seen: list[tuple[bytes, ...]] = []
    LuaHost().run(command_executor(conn), call.script().text, call.keys, call.args,
                  on_command=lambda cmd, _reply: seen.append(cmd))
    return len(seen)


# -- modes ----------------------------------------------------------------------------------------------


def test_mode_names_round_trip() -> None:
    for m in ALL_MODES:
        assert mode_of(*parts_of(m)) == m
    assert mode_of("atomic", True) == "atomic"
    assert mode_of("atomic", False) == "finish-then-fetch"
    with pytest.raises(ValueError):
        parts_of("watch")
    assert PRESETS["loopback"] == 0.05 and PRESETS["cross-region"] == 75


# -- determinism ----------------------------------------------------------------------------------------


def test_deterministic_for_a_seed() -> None:
    conn = connect()
    cfg = TimingConfig(jobs=16, workers=3, rtt_ms=5.0, seed=7)
    a = simulate("split", cfg, conn)
    b = simulate("split", cfg, conn)
    assert _comparable(a) == _comparable(b)
    assert a.history is not None and b.history is not None
    assert a.history.comparable() == b.history.comparable()
    assert [s.time for s in a.history.steps] == [s.time for s in b.history.steps]
    c = simulate("split", cfg, conn, seed=8)
    assert c.history is not None
    assert [s.time for s in c.history.steps] != [s.time for s in a.history.steps]


_DIGEST = """
import hashlib, json
from emqlab.timing import simulate, TimingConfig
r = simulate("split", TimingConfig(jobs=12, workers=3, rtt_ms=5.0, lock_ms=70.0, renew_ms=1e9, seed=3))
print(hashlib.sha256(json.dumps(r.history.comparable(), default=str).encode()).hexdigest(), r.anomalies)
"""


def test_deterministic_across_processes() -> None:
    """The same seed gives the same history in another Python process with another hash seed (fakeredis
    returns set members in hash order; the timed runner sorts SMEMBERS as Redis returns an intset)."""
    import os
    import subprocess
    import sys

    outs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", _DIGEST], capture_output=True, text=True, env=env, check=True)
        outs.add(done.stdout.strip())
    assert len(outs) == 1, outs


def test_local_atomic_scripts_equal_fakeredis_evalsha() -> None:
    """The fast path (an atomic script run by the Lua host inside one step) sends the same commands and gets
    the same replies as fakeredis's own EVALSHA. (No sweep: inside fakeredis's EVALSHA, SMEMBERS comes
    back in hash order, which the timed runner's sorted SMEMBERS does not reach.)"""
    cfg = TimingConfig(jobs=10, workers=3, rtt_ms=2.0, seed=1, sweep=False)
    fast = simulate("atomic", cfg)
    slow = simulate("atomic", cfg, local_scripts=False)
    assert fast.history is not None and slow.history is not None
    assert fast.history.comparable() == slow.history.comparable()
    assert fast.history.final == slow.history.final


# -- the lesson: atomic modes have no window -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["atomic", "finish-then-fetch"])
def test_atomic_modes_show_no_anomaly(mode: str) -> None:
    conn = connect()
    for rtt in (0.05, 1.0, 75.0, 250.0):
        r = simulate(mode, SMALL, conn, rtt_ms=rtt, keep_history=False)
        assert r.anomalies == {}, (rtt, r.examples)
        assert r.anomalies_per_1000 == 0 and r.gap_hits == 0 and r.expected_per_1000 == 0
        assert r.jobs_done == r.jobs == r.finishes
        assert r.sweep_runs > 0


def test_round_trips_per_job_atomic_is_one_finish_then_fetch_is_two() -> None:
    conn = connect()
    for rtt in (0.05, 75.0):
        a = simulate("atomic", SMALL, conn, rtt_ms=rtt, keep_history=False)
        f = simulate("finish-then-fetch", SMALL, conn, rtt_ms=rtt, keep_history=False)
        assert a.round_trips_per_job == 1.0 == model_round_trips("atomic")
        assert f.round_trips_per_job == 2.0 == model_round_trips("finish-then-fetch")
        assert a.finish_round_trips == {1: SMALL.jobs} == f.finish_round_trips
        assert a.round_trips == SMALL.workers + SMALL.jobs
        assert f.round_trips == SMALL.workers + 2 * SMALL.jobs
        assert a.jobs_per_s > f.jobs_per_s  # one round trip less per job


def test_round_trips_per_job_split_is_the_split_scripts_command_count() -> None:
    with_next = split_finish_commands(next_waiting=True)
    last = split_finish_commands(next_waiting=False)
    assert with_next > 15
    cfg = TimingConfig(jobs=5, workers=1, sweep=False)
    r = simulate("split", cfg)
    # four finishes fetch the next job in the same script, the last finds the queue empty
    assert r.finish_round_trips == dict(Counter({with_next: 4}) + Counter({last: 1}))
    assert r.round_trips_per_job == pytest.approx((4 * with_next + last) / 5)
    assert r.round_trips_per_job == pytest.approx(model_round_trips("split", r.round_trips_per_job))
    # split-then-fetch: the same finish without its fetch part, then one moveToActive
    s = simulate("split-then-fetch", cfg)
    assert s.round_trips_per_job < r.round_trips_per_job
    assert s.round_trips == 1 + sum(k * n for k, n in s.finish_round_trips.items()) + 5


def test_split_round_trips_make_it_slower_as_rtt_grows() -> None:
    conn = connect()
    fast_link = simulate("split", SMALL, conn, rtt_ms=0.05, keep_history=False)
    atomic_fast = simulate("atomic", SMALL, conn, rtt_ms=0.05, keep_history=False)
    slow_link = simulate("split", SMALL, conn, rtt_ms=75.0, keep_history=False)
    atomic_slow = simulate("atomic", SMALL, conn, rtt_ms=75.0, keep_history=False)
    assert fast_link.jobs_per_s > 0.9 * atomic_fast.jobs_per_s  # loopback: the round trips are nearly free
    assert slow_link.jobs_per_s < atomic_slow.jobs_per_s / 10  # cross-region: they are the whole cost


# -- the lesson: split anomalies grow with the RTT ---------------------------------------------------------


def test_split_anomalies_appear_at_high_rtt_and_grow_with_it() -> None:
    conn = connect()
    cfg = TimingConfig(jobs=30, workers=4)
    low = simulate("split", cfg, conn, rtt_ms=0.05, keep_history=False)
    mid = simulate("split", cfg, conn, rtt_ms=1.0, keep_history=False)
    high = simulate("split", cfg, conn, rtt_ms=75.0)
    assert high.anomaly_total > 0 and high.gap_hits > 0
    assert set(high.anomalies) <= {"double-placement", "duplicate-execution", "lost-job", "stolen-lock"}
    assert high.anomalies_per_1000 > mid.anomalies_per_1000 >= low.anomalies_per_1000
    # the window model: P(hit) ~ RTT / (interval + RTT) per marked finish
    assert low.expected_per_1000 < mid.expected_per_1000 < high.expected_per_1000
    interval = cfg.stalled_interval_ms
    assert low.expected_per_1000 == pytest.approx(1000 * 0.05 / (interval + 0.05), rel=0.5)
    assert mid.expected_per_1000 == pytest.approx(1000 * 1.0 / (interval + 1.0), rel=0.5)
    assert high.expected_per_1000 > 500
    # each anomaly comes with its "because" sentence naming steps
    assert high.examples and all(a["because"] and a["steps"] for a in high.examples)
    because = next(a["because"] for a in high.history.anomalies if a["kind"] == "double-placement") \
        if "double-placement" in high.anomalies else high.examples[0]["because"]
    assert "step" in because


def test_annotated_effects_find_what_full_effects_find() -> None:
    """Counting runs skip the full state read per step; the effects they record themselves are enough for
    every check, stolen-lock included (a lease lapses mid-finish, the sweep requeues, another worker takes
    the job, the split finish deletes the new owner's lock)."""
    cfg = TimingConfig(jobs=12, workers=3, rtt_ms=5.0, lock_ms=70.0, renew_ms=1e9, processing_jitter=0.0, seed=3)
    light = simulate("split", cfg)
    full = simulate("split", cfg, effects=True)
    assert light.anomalies == full.anomalies
    assert "stolen-lock" in light.anomalies
    assert light.history is not None and full.history is not None
    assert light.history.comparable() != [] and len(light.history.steps) == len(full.history.steps)


# -- locks in virtual time -----------------------------------------------------------------------------------


def test_renewals_are_extend_lock_round_trips_and_keep_the_lock() -> None:
    cfg = TimingConfig(jobs=12, workers=3, lock_ms=30.0, processing_jitter=0.0, processing_ms=50.0)
    r = simulate("atomic", cfg)
    # renewals at 15, 30 and 45 ms of a 50 ms job: three extendLock round trips + the finish
    assert r.round_trips_per_job == 4.0
    assert r.clock_events == 0 and r.anomalies == {}
    assert r.history is not None
    assert all(x == "extend:1" for res in r.history.results.values() for x in map(str, res) if x.startswith("extend"))


def test_a_lease_lapses_as_a_virtual_time_event() -> None:
    """No renewal and a lock shorter than the work: the lease lapses (a clock step, not a wall-clock TTL),
    the sweep requeues the job, and even an atomic finish is refused (-2) — at-least-once."""
    cfg = TimingConfig(jobs=12, workers=3, lock_ms=30.0, renew_ms=1e9)
    r = simulate("atomic", cfg)
    assert r.clock_events > 0
    assert r.history is not None
    clock = [s for s in r.history.steps if s.kind == "clock"]
    assert clock and all(s.op == "lapse" for s in clock)
    assert any(s.reply == 1 for s in clock)  # a lock was there, held by that acquisition, and was deleted
    assert any(x.kind == "finish" and x.code == -2 for res in r.history.results.values() for x in res)
    assert "duplicate-execution" in r.anomalies


# -- sweeps and progress ------------------------------------------------------------------------------------


def test_sweep_grid_and_progress() -> None:
    seen: list[tuple[int, int]] = []
    sw = sweep_rtt([0.05, 75.0], MODES, TimingConfig(jobs=10, workers=2), progress=lambda d, t: seen.append((d, t)))
    assert [(r.mode, r.rtt_ms) for r in sw.results] == [(m, x) for m in MODES for x in (0.05, 75.0)]
    total = 10 * len(MODES) * 2
    assert seen and seen[-1] == (total, total)
    assert all(b[0] >= a[0] for a, b in zip(seen, seen[1:], strict=False))
    series = sw.series("round_trips_per_job")
    assert series["atomic"] == [1.0, 1.0] and series["finish-then-fetch"] == [2.0, 2.0]
    assert series["split"][0] > 15
    # a transaction that commits at once: WATCH, the pipelined reads, MULTI … EXEC, then the fetch
    tx = sw.get("transaction", 0.05)
    assert tx.aborts == 0 and tx.round_trips_per_job == 4.0 == model_round_trips("transaction")
    slow = sw.get("transaction", 75.0)  # the sweep writes `stalled` every interval: EXECs abort, attempts repeat
    assert slow.aborts > 0 and slow.attempts > slow.finishes
    assert slow.round_trips_per_job == pytest.approx(
        model_round_trips("transaction", attempts_per_job=slow.attempts / slow.finishes))
    rows = sw.rows()
    assert len(rows) == 2 * len(MODES) and {"mode", "rtt_ms", "anomalies_per_1000", "jobs_per_s",
                                            "aborts_per_job"} <= set(rows[0])
    assert sw.get("split", 75.0).anomaly_total > 0


def test_timed_run_object_brackets_the_run() -> None:
    progress: list[int] = []
    with TimedRun("atomic", TimingConfig(jobs=6, workers=2), progress=lambda d, t: progress.append(d)) as run:
        assert run.runner.steps == []  # nothing sent yet but the initial state
        run.run()
        r = run.result()
    assert progress == [1, 2, 3, 4, 5, 6]
    assert r.finishes == 6 and r.jobs_per_s > 0 and r.makespan_ms > 0
    assert "1.00 round trips/job" in r.summary()


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        TimingConfig(jobs=0)
    with pytest.raises(ValueError):
        TimingConfig(rtt_ms=-1)
    with pytest.raises(ValueError):
        simulate("watch")


# -- the CLI ------------------------------------------------------------------------------------------------


def test_cli_sweep_rtt(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from emqlab.ui.cli import main

    png, csv_path = tmp_path / "rtt.png", tmp_path / "rtt.csv"
    args = ["sweep-rtt", "--rtt", "1,75", "--jobs", "10", "--workers", "2"]
    res = CliRunner().invoke(main, [*args, "--out", str(png), "--csv", str(csv_path)])
    assert res.exit_code == 0, res.output
    assert "finish-then-fetch" in res.output and "trips/job" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("mode,rtt_ms,round_trips_per_job") and len(rows) == 1 + 2 * len(MODES)
    res = CliRunner().invoke(main, [*args, "--modes", "atomic", "--json"])
    data = json.loads(res.output)
    assert [r["round_trips_per_job"] for r in data["results"]] == [1.0, 1.0]
    assert data["config"]["jobs"] == 10
    bad = CliRunner().invoke(main, ["sweep-rtt", "--modes", "watch"])
    assert bad.exit_code == 2 and "unknown mode" in bad.output


def test_a_sweep_in_two_processes_is_the_sweep_in_one() -> None:
    """sweep-rtt's grid runs in a pool (--processes): every run is a pure function of its mode and
    configuration, so the results are the same, in the same order."""
    import json

    from click.testing import CliRunner

    from emqlab.ui.cli import main

    args = ["sweep-rtt", "--rtt", "1,75", "--jobs", "8", "--workers", "2", "--modes", "split,atomic", "--json"]
    got = {}
    for n in ("1", "2"):
        res = CliRunner().invoke(main, [*args, "--processes", n])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        data.pop("wall_s", None)
        for r in data["results"]:
            r.pop("wall_s", None)
        got[n] = data
    assert got["1"] == got["2"] and len(got["1"]["results"]) == 4


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="reads the process table from /proc (Linux)")
@pytest.mark.parametrize("backend", ["fakeredis", pytest.param("live", marks=pytest.mark.live)])
def test_a_sigint_to_the_coordinator_alone_stops_a_sweep_in_two_processes_at_once(backend: str) -> None:
    """SIGINT to sweep-rtt's own process alone (a supervisor, a notebook's interrupt, ``timeout -s INT``; a
    terminal's Ctrl-C signals the whole group) while its pool's workers run: it is passed on to them, their
    runs stop and delete their keys, and the command exits 130 within seconds, nothing of it left running.
    Before, a worker took the signal for one between two tasks and ignored it, and the pool's shutdown
    waited for the runs in flight: each run here takes far longer than the 5 s allowed."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from contextlib import ExitStack

    import redis as redis_py

    from tests.conftest import own_redis_server, stops_by_default
    from tests.procs import descendants, pool_workers, process_tree

    with ExitStack() as stack:
        url = stack.enter_context(own_redis_server()) if backend == "live" else None
        live = redis_py.Redis.from_url(url) if url else None

        def keys() -> list[bytes]:  # (the server is the test's own: any run's key is this command's)
            assert live is not None
            return [k for k in live.scan_iter(match="emq:{q-*") if not k.startswith(b"emq:{q-runs}")]

        proc = subprocess.Popen([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "sweep-rtt",
                                 "-p", "2", "--modes", "split,atomic", "--rtt", "1", "--jobs", "1000", "--json",
                                 *(["--redis", url] if url else [])],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=stops_by_default)
        try:
            end = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < end and not (
                    len(pool_workers(proc.pid)) >= 2 and (live is None or keys())):
                time.sleep(0.1)
            assert proc.poll() is None and len(pool_workers(proc.pid)) >= 2, "the sweep's pool did not start"
            time.sleep(1.0)  # (both runs under way)
            helpers = descendants(proc.pid)
            proc.send_signal(signal.SIGINT)  # the coordinator alone
            sent = time.monotonic()
            while proc.poll() is None and time.monotonic() < sent + 5:
                time.sleep(0.05)
            assert proc.poll() is not None, f"still running 5 s after the SIGINT (its workers {helpers})"
            out, err = proc.communicate(timeout=10)
            assert (proc.returncode, err, out) == (130, b"interrupted\n", b"")
            while helpers & set(process_tree()) and time.monotonic() < sent + 8:  # (orphans now, if alive)
                time.sleep(0.05)
            assert not helpers & set(process_tree()), "a process of the sweep outlived it"
            if live is not None:
                assert keys() == []
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()


def test_the_lock_a_gave_up_finish_leaves_lapses_and_the_sweep_recovers_its_job() -> None:
    """A transaction finish that gave up (every EXEC aborted) leaves its job in active under its lock, which
    nobody renews: it lapses lock_ms after it was set and the sweep recovers the job, which runs again. (The
    lease clock forgot such a lock when the worker moved on: it never lapsed, and the job stayed in active
    however long the run.)"""
    r = simulate("transaction", rtt_ms=75, jobs=4, workers=2, lock_ms=1500)
    h = r.history
    assert h is not None
    gave_up = [(x.job, str(x.outcome)) for x in h.results["W1"] + h.results["W2"]
               if x.kind == "finish" and x.outcome is not None and x.outcome.error is not None]
    assert gave_up and all(o == "ERR transaction aborted 3 times: a watched key kept changing" for _, o in gave_up)
    first = min(s.time for s in h.steps if s.actor.startswith("W"))
    lapses = [s for s in h.steps if s.kind == "clock" and s.reply == 1]
    assert lapses and min(s.time for s in lapses) >= first + 1500  # (a fetch sets the lock: none lapses sooner)
    assert r.anomalies.get("duplicate-execution", 0) > 0  # recovered, and run again
    # ... until the execution cap stops the run: executions begun, one still running (not a finish)
    assert r.truncated and r.executions == TimingConfig(jobs=4).execution_cap == r.finishes + 1


def test_jobs_a_gave_up_finish_leaves_in_active_are_reported_unfinished() -> None:
    """At 75 ms the sweep (every 30 ms) writes ``stalled`` inside every WATCH … EXEC of the transaction
    finish: each attempt aborts, the finish gives up and its job stays in active. That is no anomaly kind
    (its lock is still held, and the sweep would recover the job once the lock lapses), but the result must
    not read as a clean run: it names the jobs left unfinished, in the JSON and in the table."""
    import json

    from click.testing import CliRunner

    from emqlab.ui.cli import main

    tx = simulate("transaction", rtt_ms=75, jobs=4, workers=2)
    assert tx.history is not None
    left = [j for j, p in tx.history.final.placements.items() if p == ["active"]]
    assert tx.unfinished == {"active": len(left)} and len(left) == tx.jobs - tx.jobs_done > 0
    assert tx.unfinished_total == len(left) and tx.to_dict()["unfinished_total"] == len(left)
    # stuck-active's definition does not hold here: each such job keeps the lock of a worker that gave up
    assert "stuck-active" not in tx.anomalies and all(tx.history.final.locks.get(j) for j in left)
    assert f"{len(left)} of 4 jobs left unfinished: active {len(left)}" in tx.summary()
    atomic = simulate("atomic", rtt_ms=75, jobs=4, workers=2)
    assert atomic.unfinished == {} and atomic.jobs_done == 4 and "left unfinished" not in atomic.summary()

    args = ["sweep-rtt", "--modes", "transaction,atomic", "--rtt", "75", "--jobs", "4", "--workers", "2"]
    res = CliRunner().invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["mode"]: r for r in json.loads(res.output)["results"]}
    assert rows["transaction"]["unfinished"] == {"active": len(left)}
    assert rows["atomic"]["unfinished"] == {} and rows["atomic"]["unfinished_total"] == 0
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    header = next(line for line in res.output.splitlines() if line.startswith("mode"))
    assert header.split()[-1] == "left"
    row = {line.split()[0]: line.split() for line in res.output.splitlines()
           if line.startswith(("transaction", "atomic"))}
    assert row["transaction"][-1] == str(len(left)) and row["atomic"][-1] == "0"
    assert f"transaction @ 75 ms: {len(left)} of 4 jobs left unfinished (active {len(left)})" in res.output
