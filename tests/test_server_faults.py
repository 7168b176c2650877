"""A run either completes truthfully or says it could not (issue 15, item 1). An error reply about the
server's state is never a step's answer: one that spoils only its run (OOM, a BUSY
script SCRIPT KILL stopped) aborts that run, the exploration goes on, and the report is inconclusive with the
cause and the count of aborted runs, none of which is in any other figure; one that spoils every later run
(READONLY, a lost connection, a restart) stops the exploration with what it covered. Faults on servers the
tests start themselves; the deterministic cases on fakeredis with a failing command executor."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emqlab.backend.connect import FaultScope, ServerFault, connect, server_fault
from emqlab.engine import scenario
from emqlab.engine.runner import Runner as EngineRunner
from emqlab.explore import Abort, Report, explore
from emqlab.explore.checked import Runner, parse_schedule
from emqlab.explore.dpor import Exhaustive
from emqlab.protocol.verdict import ExitCode, judge
from emqlab.scripting.registry import ScriptSet, default_scripts
from emqlab.ui.cli import main
from tests.conftest import own_redis_server

OOM = "OOM command not allowed when used memory > 'maxmemory'."
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."


@pytest.mark.parametrize(("text", "fault"), [
    ("OOM command not allowed when used memory > 'maxmemory'.", True),
    ("READONLY You can't write against a read only replica.", True),
    ("BUSY Redis is busy running a script.", True),
    ("MOVED 3999 127.0.0.1:6381", True),
    ("NOSCRIPT No matching script. Please use EVAL.", True),
    ("ERR Error running script: @user_script:12: OOM command not allowed", True),
    ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
    ("ERR emqlab: opts.token is required", False),
])
def test_server_errors_are_told_from_answers(text: str, fault: bool) -> None:
    assert (server_fault(redis.exceptions.ResponseError(text)) is not None) == fault
    assert server_fault(b"OOM") is None and server_fault(-2) is None
    assert server_fault(redis.exceptions.OutOfMemoryError("command not allowed")) == "OOM command not allowed"
    assert server_fault(redis.exceptions.OutOfMemoryError(f"{OOM[4:]} script: 4b2e, on @user_script:9.")) == OOM


@pytest.mark.parametrize(("detail", "code", "scope"), [
    (OOM, "OOM", FaultScope.RUN),
    (NOSCRIPT, "NOSCRIPT", FaultScope.RUN),
    ("BUSY Redis is busy running a script.", "BUSY", FaultScope.RUN),
    ("ERR Error running script: @user_script:12: OOM command not allowed", "OOM", FaultScope.RUN),
    ("READONLY You can't write against a read only replica.", "READONLY", FaultScope.EXPLORATION),
    ("LOADING Redis is loading the dataset in memory", "LOADING", FaultScope.EXPLORATION),
    ("MOVED 3999 127.0.0.1:6381", "MOVED", FaultScope.EXPLORATION),
    ("NOPERM this user has no permissions to run the 'lpos' command", "NOPERM", FaultScope.EXPLORATION),
])
def test_each_fault_has_a_scope(detail: str, code: str, scope: FaultScope) -> None:
    f = ServerFault("message", detail=detail)
    assert (f.code, f.scope) == (code, scope)
    assert ServerFault("m", detail="x", code="RESTARTED").scope is FaultScope.EXPLORATION


# -- deterministic: fakeredis and a failing command executor ----------------------------------------------------


class _Keeping(Exhaustive):
    """An explorer that keeps what every counted run showed: schedule -> (anomaly kinds, logical final state)."""

    def __init__(self, runner: Any) -> None:
        super().__init__(runner)
        self.kept: dict[str, tuple[frozenset[str], Any]] = {}

    def _record(self, h: Any, preempt: int, choices: Any, weight: int = 1) -> None:
        self.kept[h.schedule] = (frozenset(h.kinds), h.final.logical())
        super()._record(h, preempt, choices, weight)


def _explore(sc: scenario.Scenario, mode: str, conn: redis.Redis | None = None, *, reduce: bool = True,
             scripts: ScriptSet | None = None,
             failing: Callable[[Any, tuple[Any, ...]], BaseException | None] | None = None,
             ) -> tuple[Report, dict[str, tuple[frozenset[str], Any]]]:
    """An exhaustive exploration whose command executor answers ``failing(runner, command)`` instead of
    running the command when that is an exception; returns the report and every counted run's
    (anomaly kinds, logical final state) by schedule."""
    with Runner(sc, mode, conn, scripts=scripts) as r:
        if failing is not None:
            real = r.exec

            def execute(*command: Any) -> Any:
                error = failing(r, command)
                if isinstance(error, redis.exceptions.ResponseError):
                    raise error  # (an error reply, as the executor raises it)
                if error is not None:
                    raise error
                return real(*command)

            r.exec = execute
        ex = _Keeping(r)
        rep = ex.exhaustive(reduce=reduce)
        return rep, ex.kept


def _fake_replay(sc: scenario.Scenario, mode: str, schedule: str, scripts: ScriptSet | None = None) -> Any:
    with Runner(sc, mode, scripts=scripts) as r:
        return r.run(parse_schedule(schedule))


def _zadd_completed_after_the_sweep(r: Runner, command: tuple[Any, ...]) -> BaseException | None:
    if command[0] == b"ZADD" and command[1].endswith(b":completed") and "S1" in r.choices:
        return redis.exceptions.OutOfMemoryError(OOM[4:])
    return None


def test_a_run_scoped_fault_aborts_exactly_its_runs_and_nothing_else_counts_them() -> None:
    """Every schedule run (no reduction): the runs in which the sweep went before W1's ZADD completed get OOM
    there and are aborted; every other run is counted exactly as the same schedule on a healthy server."""
    sc = scenario.load("stalled-finish")
    healthy, every = _explore(sc, "split", reduce=False)
    assert healthy.explored == len(every) == 21 and not healthy.aborted
    rep, completed = _explore(sc, "split", reduce=False, failing=_zadd_completed_after_the_sweep)

    def aborts(schedule: str) -> str | None:  # the prefix up to the failing step, for a run that meets it
        choices = parse_schedule(schedule)
        with Runner(sc, "split") as r:
            for i, c in enumerate(choices):
                step = r.step(c)
                if step.op == "ZADD" and "completed" in step.keys and "S1" in choices[:i]:
                    return ".".join(choices[:i + 1])
        return None

    cut = {s: aborts(s) for s in every}
    survivors = {s: v for s, v in every.items() if cut[s] is None}
    assert completed == survivors and 0 < len(survivors) < 21
    assert rep.explored == len(survivors) and rep.raw_interleavings == len(survivors)
    assert rep.aborted == {Abort("OOM", OOM): len({p for p in cut.values() if p is not None})}
    assert rep.runs_with == dict(Counter(k for kinds, _f in survivors.values() for k in kinds))
    assert rep.outcomes == {f for _k, f in survivors.values()}
    assert rep.stopped is None and rep.complete and not rep.raw_exact
    # double-placement needs the sweep inside the finish: every such run was aborted, so it is not reported
    assert "double-placement" in healthy.anomaly_kinds and rep.anomaly_kinds == []
    v = judge(rep)
    assert v.kind == "inconclusive" and v.exit_code(check=False) == ExitCode.INCONCLUSIVE
    assert v.reason == (f"no anomaly in the {rep.explored} run(s) that completed, but {rep.aborted_runs} run(s)"
                        f" aborted by server errors ({OOM} ×{rep.aborted_runs}): no count includes them, and the"
                        " reduction may have missed interleavings below them")
    d = rep.to_dict()["infrastructure"]
    assert d["aborted_runs"] == rep.aborted_runs and d["aborted"] == [
        {"code": "OOM", "reason": OOM, "runs": rep.aborted_runs}] and d["stopped"] is None


def test_an_anomaly_witnessed_beside_aborted_runs_fails_and_does_not_exit_inconclusive() -> None:
    """Aborted runs leave a missing anomaly unproven, not a found one: the verdict fails (with what the
    aborts did) and --fail-on-anomaly exits 1; without a check the exit status is still 3, never 0, so a
    run that server errors cut short never passes for a clean one."""
    def sweep_first(r: Runner, command: tuple[Any, ...]) -> BaseException | None:
        if command[0] == b"ZADD" and command[1].endswith(b":completed") and r.choices[:1] == ["S1"]:
            return redis.exceptions.OutOfMemoryError(OOM[4:])
        return None

    rep, _completed = _explore(scenario.load("stalled-finish"), "split", reduce=False, failing=sweep_first)
    assert rep.aborted and "double-placement" in rep.anomaly_kinds
    v = judge(rep)
    assert v.kind == "fails" and rep.infrastructure() in v.reason
    assert v.exit_code(check=False) == ExitCode.INCONCLUSIVE and v.exit_code(check=True) == ExitCode.FAILS
    assert "whatever it found" in ExitCode.INCONCLUSIVE.meaning


@pytest.mark.parametrize("reduce", [True, False], ids=["dpor", "every-schedule"])
def test_a_run_a_passing_server_error_cut_short_is_run_again_and_counts_as_any_other(reduce: bool) -> None:
    """A run-scoped fault that does not recur (every other ZADD to completed gets OOM): each run that meets
    it is run again from its start and completes, so the claims are the healthy ones and nothing is
    aborted; a fault that does recur is retried RUN_RETRIES times, then the run is aborted."""
    from emqlab.explore.report import RUN_RETRIES

    sc = scenario.load("stalled-finish")
    healthy, _every = _explore(sc, "split", reduce=reduce)
    seen = Counter[str]()

    def every_other(r: Runner, command: tuple[Any, ...]) -> BaseException | None:
        if command[0] == b"ZADD" and command[1].endswith(b":completed"):
            seen["zadd"] += 1
            if seen["zadd"] % 2:
                return redis.exceptions.OutOfMemoryError(OOM[4:])
        return None

    rep, _completed = _explore(sc, "split", reduce=reduce, failing=every_other)
    assert not rep.aborted and rep.retried == {Abort("OOM", OOM): (seen["zadd"] + 1) // 2}
    assert rep.claims() == healthy.claims()
    rep, _completed = _explore(sc, "split", reduce=reduce, failing=_zadd_completed_after_the_sweep)
    assert rep.aborted and rep.retried == {Abort("OOM", OOM): RUN_RETRIES * rep.aborted_runs}
    d = rep.to_dict()["infrastructure"]
    assert d["retried"] == [{"code": "OOM", "reason": OOM, "times": RUN_RETRIES * rep.aborted_runs}]


def test_with_the_reduction_an_aborted_run_contributes_nothing() -> None:
    sc = scenario.load("stalled-finish")
    healthy, _every = _explore(sc, "split")
    rep, completed = _explore(sc, "split", failing=_zadd_completed_after_the_sweep)
    assert rep.aborted_runs >= 1 and rep.explored == len(completed) >= 1
    assert rep.runs_with == dict(Counter(k for kinds, _f in completed.values() for k in kinds))
    assert rep.outcomes == {f for _k, f in completed.values()} and rep.outcomes <= healthy.outcomes
    assert not rep.raw_exact and judge(rep).kind == "inconclusive"


@pytest.mark.parametrize(("error", "code", "reason"), [
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."), "READONLY",
     "READONLY You can't write against a read only replica."),
    (redis.exceptions.ConnectionError("Connection reset by peer"), "CONNECTION",
     "the connection to the server was lost (Connection reset by peer)"),
    (redis.exceptions.TimeoutError("Timeout reading from socket"), "CONNECTION",
     "the connection to the server timed out (Timeout reading from socket)"),
])
def test_a_fault_that_spoils_later_runs_stops_the_exploration_with_what_it_covered(
        error: BaseException, code: str, reason: str) -> None:
    sc = scenario.load("stalled-finish")
    seen = Counter[str]()

    def third_finish(r: Runner, command: tuple[Any, ...]) -> BaseException | None:
        if command[0] == b"ZADD" and command[1].endswith(b":completed"):
            seen["zadd"] += 1
            if seen["zadd"] == 3:
                return error
        return None

    rep, completed = _explore(sc, "split", reduce=False, failing=third_finish)
    assert rep.stopped == Abort(code, reason) and not rep.aborted and not rep.complete
    assert rep.explored == len(completed) == 2
    v = judge(rep)
    assert v.kind == "inconclusive" and v.exit_code(check=False) == ExitCode.INCONCLUSIVE
    assert v.reason.endswith(f"but the exploration stopped after 2 complete run(s): {reason} — later runs could not"
                             " be trusted, so the counts are lower bounds and a missing anomaly proves nothing")


def test_a_fault_in_the_middle_of_a_run_stops_it_at_that_step() -> None:
    with Runner(scenario.load("stalled-finish"), "split") as r:
        real = r.exec

        def refusing(*command: object) -> object:
            if command[0] == b"ZADD":
                return redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
            return real(*command)

        r.exec = refusing
        with pytest.raises(ServerFault) as e:
            r.run()
    assert str(e.value) == ("W1's ZADD at step 13 got a server error (READONLY You can't write against a read only"
                            " replica.): a run cannot go on truthfully past a server fault (its result would count"
                            " an error as the step's answer); the exploration stops")
    assert e.value.scope is FaultScope.EXPLORATION


def test_a_fault_of_the_first_reset_aborts_only_the_first_run() -> None:
    """The Runner's constructor writes the initial state: a run-scoped fault there is kept for the first
    step (an exploration resets before every run anyway)."""
    sc = scenario.load("stalled-finish")
    calls = Counter[str]()
    real_init = EngineRunner._write_initial_state

    def flaky(self: EngineRunner) -> None:
        calls["init"] += 1
        if calls["init"] == 1:
            raise ServerFault("writing the initial state got a server error (OOM …)", detail=OOM)
        real_init(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineRunner, "_write_initial_state", flaky)
        with Runner(sc, "split") as r:
            with pytest.raises(ServerFault, match="OOM"):
                r.step("W1")
            r.reset()
            assert r.run().schedule


# -- on servers the tests start ------------------------------------------------------------------------------


def test_a_server_full_before_any_run_starts_is_an_infrastructure_error() -> None:
    with own_redis_server("--maxmemory-policy", "noeviction") as url:
        own = redis.Redis.from_url(url)  # (the test's own server: it may be filled and reconfigured)
        own.set("emqlab-test-filler", b"x" * 2_000_000)
        own.config_set("maxmemory", "1mb")
        own.close()
        with pytest.raises(ServerFault) as e:
            explore(scenario.load("stalled-finish"), "atomic", conn=connect(url))
        assert "OOM" in str(e.value) and "no run can start" in str(e.value) and "\n" not in str(e.value)
        res = CliRunner().invoke(main, ["simulate", "--atomic", "--redis", url])
        assert res.exit_code == ExitCode.INFRASTRUCTURE, res.output
        assert "error:" in res.output and "OOM" in res.output and "no run can start" in res.output


@pytest.fixture
def ballast(tmp_path: Path) -> Path:
    """The sweep's script with 3 MB of ballast written under the run's queue first: on a server with 1 MB to
    spare, every denyoom command after it gets OOM, until the next run's reset deletes the ballast."""
    s = default_scripts()["moveStalledJobsToWait"]
    (tmp_path / Path(s.path).name).write_text(
        "redis.call('SET', KEYS[1] .. ':ballast', string.rep('x', 3000000))\n" + s.text.decode())
    return tmp_path


@contextmanager
def _tight_server() -> Iterator[str]:
    with own_redis_server("--maxmemory-policy", "noeviction") as url:
        own = redis.Redis.from_url(url)
        own.config_set("maxmemory", int(own.info("memory")["used_memory"]) + 1_000_000)
        own.close()
        yield url


def test_out_of_memory_mid_exploration_aborts_those_runs_and_the_cli_exits_3(
        ballast: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """maxmemory + noeviction on a server the test starts: the runs in which a write follows the sweep are
    aborted with OOM, the one in which the sweep comes last completes, exactly as on fakeredis (without
    retries: how much memory the server counts moves a little with time, so a retry may complete)."""
    from emqlab.explore import strategy as explore_module

    sc = scenario.load("stalled-finish")
    scripts = default_scripts().overlay(ballast).trusted()  # (EVALSHA: Redis checks maxmemory at its start)
    with _tight_server() as url:
        with monkeypatch.context() as m:
            m.setattr(explore_module, "RUN_RETRIES", 0)
            rep, completed = _explore(sc, "split", connect(url), reduce=False, scripts=scripts)
        assert rep.explored == len(completed) == 1 and rep.aborted == {Abort("OOM", OOM): 20}
        (schedule, (kinds, final)), = completed.items()
        replayed = _fake_replay(sc, "split", schedule, scripts)
        assert parse_schedule(schedule)[-1] == "S1" and (frozenset(replayed.kinds), replayed.final.logical()) == (
            kinds, final)
        assert rep.outcomes == {final} and rep.runs_with == {}
        # (how many runs the reduced search aborts varies from run to run here: the server's memory use
        # moves with its clients' query buffers, so a retry now and then completes; each report must
        # agree with itself)
        res = CliRunner().invoke(main, ["simulate", "--split", "--redis", url, "--lua", str(ballast)])
        assert res.exit_code == ExitCode.INCONCLUSIVE, res.output
        text = " ".join(res.output.split())
        row = re.search(r"runs executed [\d,]+ .*?aborted \(server errors\) (\d+)", text)
        assert row is not None, text
        n = int(row.group(1))
        assert n >= 1 and f"aborted: {n} run(s): {OOM}" in text and "verdict: inconclusive" in text
        assert f"{n} run(s) aborted by server errors ({OOM} ×{n})" in text
    # (a server of its own: the host, which runs a script not emqlab's, sent the 3 MB ballast as a command, and
    # the client's query buffer that held it may count against maxmemory for a while)
    with _tight_server() as url:
        res = CliRunner().invoke(main, ["simulate", "--split", "--redis", url, "--lua", str(ballast), "--json"])
        assert res.exit_code == ExitCode.INCONCLUSIVE, res.output
        d = json.loads(res.output)
        n = d["infrastructure"]["aborted_runs"]
        assert d["verdict"] == "inconclusive" and n >= 1 and d["infrastructure"]["aborted"] == [
            {"code": "OOM", "reason": OOM, "runs": n}]
        assert d["verdict_detail"]["exit_code"] == 3 and d["interleavings"]["complete"] is True


def test_a_looping_script_on_a_live_server_is_killed_and_its_runs_aborted(tmp_path: Path) -> None:
    """Never hold a shared server (issue 15, item 3): a script step past the socket timeout gets SCRIPT
    KILL from a connection of its own and aborts its run; the server answers again."""
    (tmp_path / "moveToFinished-14.lua").write_text("local n = 0 while true do n = n + 1 end return n\n")
    looping = default_scripts().overlay(tmp_path).trusted()  # (else the host runs it, within its budget)
    with own_redis_server("--lua-time-limit", "50") as url:
        conn = redis.Redis.from_url(url, socket_timeout=1, protocol=2)
        rep = explore(scenario.load("stalled-finish"), "atomic", conn=conn, scripts=looping)
        assert rep.aborted_runs >= 1 and {a.code for a in rep.aborted} == {"BUSY"}
        assert all("the script moveToFinished ran past the socket timeout" in a.reason and
                   "emqlab sent SCRIPT KILL and the server is free again" in a.reason for a in rep.aborted)
        assert redis.Redis.from_url(url).ping() is True


#: another client's script that only reads (TIME) and loops for ARGV[1] ms
_LOOP = """
local function now() local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
local stop = now() + tonumber(ARGV[1])
while now() < stop do end
return 1
"""


def _busy(url: str, ms: int) -> threading.Thread:
    """Another client's script looping for ``ms`` on the server at ``url``; returns once the server answers
    BUSY to everyone else (its busy-reply threshold, ``lua-time-limit``, has passed)."""
    def loop() -> None:
        other = redis.Redis.from_url(url, socket_timeout=ms / 1000 + 30)
        try:
            other.eval(_LOOP, 0, ms)
        except redis.exceptions.ConnectionError:  # (the server was stopped first: a test failed)
            pass
        finally:
            other.close()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    probe = redis.Redis.from_url(url, socket_timeout=10)
    try:
        while True:
            try:
                probe.ping()  # (before the script starts: PONG; while it runs: BUSY once past the threshold)
            except redis.exceptions.ResponseError as e:
                assert str(e).startswith("BUSY"), e
                return t
    finally:
        probe.close()


def test_another_clients_busy_script_aborts_runs_and_the_cli_exits_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25, item 7: a script of another client that keeps the server busy mid-exploration gave exit 4
    (a bare BUSY reply to the reset's SCAN ended the command as if the server could not be used), where
    docs/cli.md says the run is run again, then aborted, and the exploration goes on: inconclusive, exit 3.
    The run's keys are deleted once the server is free again."""
    resets = 0
    busy: list[threading.Thread] = []
    real = EngineRunner.reset

    with own_redis_server("--lua-time-limit", "100") as url:
        def reset(self: EngineRunner) -> None:
            nonlocal resets
            resets += 1
            if resets == 3:  # (the constructor's, the first run's, then the second run's: the server is busy)
                busy.append(_busy(url, 1500))
            real(self)

        monkeypatch.setattr(EngineRunner, "reset", reset)
        res = CliRunner().invoke(main, ["simulate", "--split", "--redis", url, "--jobs", "1"])
        assert busy and res.exit_code == ExitCode.INCONCLUSIVE, res.output
        text = " ".join(res.output.split())
        row = re.search(r"runs executed [\d,]+ .*?aborted \(server errors\) (\d+)", text)
        assert row is not None, text
        n = int(row.group(1))
        assert n >= 1 and f"aborted: {n} run(s): BUSY Redis is busy running a script" in text, text
        assert "retried: " in text and "verdict: " in text
        busy[0].join(timeout=30)
        assert redis.Redis.from_url(url).dbsize() == 0  # (the clean-up waited for the script to end)


def test_a_busy_server_refuses_a_worker_its_queue_and_a_connection_with_a_server_fault() -> None:
    """A pool worker that connects while another client's script runs gets BUSY from PING and from the
    registration of its queue: a :class:`ServerFault` (the part goes back to the coordinator, whose queue
    stands), not an error that ends the command."""
    from emqlab.explore.parts import Job, Task, run_part

    sc = scenario.load("stalled-finish")
    with own_redis_server("--lua-time-limit", "100") as url:
        loop = _busy(url, 1500)
        with pytest.raises(ServerFault) as info:
            connect(url)
        assert info.value.code == "BUSY" and info.value.scope is FaultScope.RUN
        with pytest.raises(ServerFault, match=r"registering the run on .* got a server error \(BUSY .*no run can"):
            EngineRunner(sc, "split", connect(url, ping=False))
        part = run_part(Job(sc, "split", url), Task(1))
        assert part.refused is not None and "BUSY" in part.refused and not part.started
        loop.join(timeout=30)
        assert redis.Redis.from_url(url).dbsize() == 0


@contextmanager
def _flushing(url: str) -> Iterator[None]:
    """SCRIPT FLUSH in a loop from another client: redis-cli's repeat when installed (a hard loop), else a
    thread."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    exe = shutil.which("redis-cli")
    if exe is not None:
        proc = subprocess.Popen([exe, "-p", port, "-r", "100000000", "SCRIPT", "FLUSH"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            yield
        finally:
            proc.kill()
            proc.wait(timeout=10)
        return
    stop = threading.Event()

    def flush() -> None:
        flusher = redis.Redis.from_url(url)
        while not stop.is_set():
            flusher.script_flush()
        flusher.close()

    t = threading.Thread(target=flush, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=10)


def test_a_script_flush_loop_never_yields_a_wrong_count() -> None:
    """The reproducer of issue 15: SCRIPT FLUSH looping from another client while an atomic exploration runs.
    An EVALSHA that meets NOSCRIPT sends EVAL with the script's text (as ioredis does), which no flush can
    miss: every exploration claims exactly what the healthy one does, nothing is aborted, and the server
    saw EVALs (the flushes did land)."""
    sc = scenario.load("two-workers")
    healthy, _every = _explore(sc, "atomic")
    with own_redis_server() as url, _flushing(url):
        for _ in range(3):
            rep, completed = _explore(sc, "atomic", connect(url), failing=None)
            assert not rep.aborted and not rep.retried and rep.stopped is None
            for schedule, seen in completed.items():
                replayed = _fake_replay(sc, "atomic", schedule)
                assert seen == (frozenset(replayed.kinds), replayed.final.logical()), schedule
            assert rep.claims() == healthy.claims() | {"witnesses": rep.claims()["witnesses"]}
        res = CliRunner().invoke(main, ["simulate", "--atomic", "--redis", url])
        evals = redis.Redis.from_url(url).info("commandstats").get("cmdstat_eval", {}).get("calls", 0)
    assert res.exit_code == 0 and "aborted" not in res.output, res.output
    assert evals > 0  # NOSCRIPT did happen, and was answered with EVAL


def test_a_witness_the_server_fails_to_replay_keeps_its_schedule_and_the_verdict_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge of a divided exploration replays each witness; when the server fails that replay, the
    report has no history for it but keeps its schedule: the text prints its replay command, the JSON marks
    it not replayed, and the verdict does not point at a witness above that is not there."""
    from emqlab.explore import divide

    real_merge = divide._merge

    def merge(runner: Any, job: Any, parts: Any, *rest: Any) -> Any:
        def lost(*_a: Any, **_k: Any) -> Any:
            raise redis.exceptions.ConnectionError("Error while reading from 127.0.0.1:6395 : (104, 'reset')")
        monkeypatch.setattr(runner, "run", lost)
        return real_merge(runner, job, parts, *rest)

    monkeypatch.setattr(divide, "_merge", merge)
    sc = scenario.load("two-workers")
    rep = explore(sc, "split", jobs=1, divide=True)
    assert rep.anomaly_kinds and set(rep.unreplayed) == set(rep.anomaly_kinds) and not rep.witnesses
    whole = explore(sc, "split")
    assert rep.unreplayed == {k: h.schedule for k, h in whole.witnesses.items()}
    v = judge(rep)
    assert v.kind == "fails" and "witness above" not in v.reason and "not replayed (see above)" in v.reason
    res = CliRunner().invoke(main, ["simulate", "--split", "--scenario", "two-workers", "--jobs", "1"])
    text = " ".join(res.output.split())
    for kind, schedule in rep.unreplayed.items():
        assert f"witness for {kind}: not replayed" in text and schedule in text
    d = json.loads(CliRunner().invoke(main, ["simulate", "--split", "--scenario", "two-workers", "--jobs", "1",
                                             "--json"]).output)
    assert d["witnesses"] == {k: {"schedule": s, "replayed": False} for k, s in rep.unreplayed.items()}
