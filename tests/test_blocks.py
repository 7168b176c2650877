"""The scenario building blocks (emqlab/engine/pyblocks.py): each block on a tiny state — what it writes, how many
scheduling points it is atomic and split — and the races they exist for, found where they are. The
scenarios built from them are checked with the rest of the library (tests/test_scenarios.py), on fakeredis
and, each in its headline mode, on the live server (``LIVE_CASES`` there: one home for the live runs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from emqlab.backend.connect import connect
from emqlab.check.api import explore_actors, scenario
from emqlab.engine import pyblocks as blocks
from emqlab.engine.history import History
from emqlab.explore.checked import Runner
from emqlab.scripting.host import LuaHost

#: a worker that holds job 1 (its lock is the one ``locks:`` gives it)
HOLDS = {"kind": "worker", "holds": "1", "fetch_next": False}


def block(name: str, **params: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"python": f"emqlab.blocks:{name}"}
    if params:
        fields["with"] = params
    return fields


class Ran:
    """One run's history, with the raw keys read before the run's keys are deleted."""

    def __init__(self, history: History, runner: Runner) -> None:
        self.h = history
        self._r = runner

    def raw(self, *command: str) -> Any:
        return self._r.exec(*(c.encode() for c in command))

    def key(self, suffix: str) -> str:
        return self._r.keys.key(suffix)

    def hash(self, job: str) -> dict[str, str]:
        raw = self._r.exec(b"HGETALL", self._r.keys.job(job).encode()) or []
        return {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}

    def steps(self, actor: str) -> int:
        return sum(1 for s in self.h.steps if s.actor == actor)

    def results(self, actor: str) -> list[str]:
        return [str(r) for r in self.h.results.get(actor, ())]


@contextmanager
def ran(actors: dict[str, Any], mode: str = "atomic", schedule: list[str] | None = None,
        **kw: Any) -> Iterator[Ran]:
    sc = scenario(actors, **kw)
    with Runner(sc, mode, connect()) as r:
        h = r.run(schedule or [])
        yield Ran(h, r)


def test_every_block_script_compiles() -> None:
    host = LuaHost()
    for lua in blocks.LUA.values():
        host.compile(lua.encode())


def test_blocks_document_their_parameters_and_report() -> None:
    for name in blocks.__all__:
        if name == "LUA":
            continue
        doc = getattr(blocks, name).__doc__ or ""
        assert "BR-" in doc, f"{name}: its docstring names no report"
        assert name in (blocks.__doc__ or ""), f"{name} is missing from the module's table"


# -- each block's effect, atomic and split ------------------------------------------------------------------


@pytest.mark.parametrize("mode, steps", [("atomic", 1), ("split", 2)])
def test_fetch_moves_then_locks(mode: str, steps: int) -> None:
    with ran({"F1": block("fetch")}, mode, state={"wait": ["1"]}) as run:
        assert run.h.final.placements["1"] == ["active"]
        assert run.h.final.locks["1"] == "F1:1"
        assert run.steps("F1") == steps
        assert [e.job for e in run.h.executions] == ["1"]


def test_fetch_into_a_private_list_without_a_lock_then_finish() -> None:
    with ran({"F1": block("fetch", into="private:h", token="")}, state={"wait": ["1"]}) as run:
        assert run.raw("LRANGE", run.key("private:h"), "0", "-1") == [b"1"]
        assert "1" not in run.h.final.locks
    with ran({"F1": block("fetch", finish="completed")}, state={"wait": ["1"]}) as run:
        assert run.h.final.placements["1"] == ["completed"]
        assert run.results("F1") == ["fetch:next", "finish:1:0"]


def test_fetch_split_leaves_a_window_without_the_lock() -> None:
    """A sweep that marks, and one that recovers, between the move and the lock: the job runs twice."""
    actors = {"F1": block("fetch"), "S1": {"kind": "sweep", "runs": 2}, "W2": {"kind": "worker", "mode": "atomic"}}
    state = {"wait": ["1"]}
    assert "duplicate-execution" in explore_actors(actors, mode="split", state=state).kinds
    explore_actors(actors, mode="atomic", state=state).assert_never("duplicate-execution")


@pytest.mark.parametrize("mode, steps", [("atomic", 1), ("split", 2)])
def test_progress_writes_only_into_an_existing_job(mode: str, steps: int) -> None:
    with ran({"W1": block("progress", value=80)}, mode, state={"active": ["1"]}, locks={"1": "W1"}) as run:
        assert run.hash("1")["progress"] == "80"
        assert run.results("W1") == ["extend:0"]
        assert run.steps("W1") == steps
        assert [(e.actor, e.token) for e in run.h.executions] == [("W1", "W1:1")]
    with ran({"W1": block("progress", job="9", begin=False)}, mode, state={"active": ["1"]}) as run:
        assert run.hash("9") == {}
        assert run.results("W1") == ["extend:-1"]
        assert run.h.executions == ()


@pytest.mark.parametrize("mode, steps", [("atomic", 1), ("split", 3)])
def test_refresh_refiles_an_active_job_at_the_tail(mode: str, steps: int) -> None:
    with ran({"T1": block("refresh", job="1")}, mode, jobs=["1", "2"], state={"active": ["1", "2"]}) as run:
        assert run.raw("LRANGE", run.key("active"), "0", "-1") == [b"2", b"1"]
        assert run.steps("T1") == steps
    with ran({"T1": block("refresh", job="1")}, mode, jobs=["1"], state={"failed": ["1"]}) as run:
        assert run.h.final.placements["1"] == ["failed"]
        assert run.results("T1") == ["extend:0"]


@pytest.mark.parametrize("mode, steps", [("atomic", 1), ("split", 3)])
def test_renew_compares_then_sets(mode: str, steps: int) -> None:
    with ran({"W1": HOLDS, "R1": block("renew", token="W1:1", ms=5000)}, mode, schedule=["R1"] * steps,
             state={"active": ["1"], "stalled": ["1"]}, locks={"1": "W1"}) as run:
        assert run.results("R1") == ["extend:1"]
        assert run.steps("R1") == steps
        assert run.results("W1") == ["finish:1:0"]  # the renewal before the finish: the finish is W1's
    with ran({"R1": block("renew", token="W9:1")}, mode, state={"active": ["1"]}, locks={"1": "R1"}) as run:
        assert run.results("R1") == ["extend:0"]
        assert run.h.final.locks["1"] == "R1:1"


def test_a_blind_renewal_recreates_a_lock_that_is_gone() -> None:
    with ran({"R1": block("renew", token="W1:1", cas=False)}, state={"completed": ["1"]}) as run:
        assert run.h.final.locks["1"] == "W1:1"
    with ran({"R1": block("renew", token="W1:1")}, state={"completed": ["1"]}) as run:
        assert "1" not in run.h.final.locks


def test_renew_needs_a_token() -> None:
    from emqlab.engine.pyactors import ActorError

    with pytest.raises(ActorError, match="with.token"), ran({"R1": block("renew")}, state={"active": ["1"]}):
        pass


@pytest.mark.parametrize("mode, steps", [("atomic", 1), ("split", 5)])
def test_promote_moves_every_due_job(mode: str, steps: int) -> None:
    with ran({"P1": block("promote")}, mode, jobs=["1", "2"], state={"delayed": {"1": 0, "2": 0}}) as run:
        assert run.h.final.placements == {"1": ["wait"], "2": ["wait"]}
        assert run.steps("P1") == steps


def test_two_split_promoters_duplicate_unless_they_honour_zrem() -> None:
    state = {"delayed": {"1": 0}}
    two = {"A1": block("promote"), "B1": block("promote")}
    assert explore_actors(two, mode="split", state=state).kinds == ["double-placement"]
    explore_actors(two, mode="atomic", state=state).assert_never()
    honour = {"A1": block("promote", honour_zrem=True), "B1": block("promote", honour_zrem=True)}
    explore_actors(honour, mode="split", state=state).assert_never()


def test_finish_from_outside_and_with_a_shared_token() -> None:
    with ran({"E1": block("finish")}, state={"active": ["1"]}) as run:  # token "0": an outside complete
        assert run.h.final.placements["1"] == ["completed"]
        assert run.results("E1") == ["cancel:1:0"]
        assert run.h.executions == ()
    with ran({"E1": block("finish", target="failed", value="no")}, state={"delayed": {"1": 0}}) as run:
        assert run.h.final.placements["1"] == ["delayed"]
        assert run.results("E1") == ["cancel:1:-3"]
    with ran({"W2": HOLDS, "W1": block("finish", token="W2:1", keep=0)}, schedule=["W1"],
             state={"active": ["1"]}, locks={"1": "W2"}) as run:
        assert run.results("W1") == ["finish:1:0"]  # the lock check cannot tell W1 from W2
        assert run.results("W2") == ["finish:1:-1"]
        assert not run.h.final.jobs["1"]["exists"]


@pytest.mark.parametrize("mode", ["atomic", "split"])
def test_record_failure_writes_only_into_an_existing_job(mode: str) -> None:
    with ran({"W1": block("record_failure", reason="lost it")}, mode, state={"active": ["1"]}) as run:
        assert run.results("W1") == ["finish:1:-2", "extend:0"]
        assert run.hash("1")["failedReason"] == "lost it"
        assert run.hash("1")["atm"] == "1"
    with ran({"W1": block("record_failure", job="9", begin=False)}, mode, state={"active": ["1"]}) as run:
        assert run.results("W1") == ["finish:9:-1", "extend:-1"]
        assert run.hash("9") == {}


def test_readd_is_a_no_op_for_a_taken_id_and_fresh_after_remove() -> None:
    with ran({"P1": block("readd", data={"v": 2})}, state={"failed": ["1"]}, jobs={"1": {"data": {"v": 1}}}) as run:
        assert run.results("P1") == ["add:1"]
        assert run.h.final.placements["1"] == ["failed"]
        assert run.hash("1")["data"] == '{"v":1}'
    with ran({"P1": block("readd", remove=True, data={"v": 2})}, state={"failed": ["1"]},
             jobs={"1": {"data": {"v": 1}}}) as run:
        assert run.h.final.placements["1"] == ["wait"]
        assert run.hash("1")["data"] == '{"v":2}'


@pytest.mark.parametrize("mode, steps", [("atomic", 1), ("split", 4)])
def test_requeue_only_under_the_process_token(mode: str, steps: int) -> None:
    with ran({"W1": HOLDS, "M1": block("requeue", token="W1:1")}, mode, schedule=["M1"] * steps,
             state={"active": ["1"]}, locks={"1": "W1"}) as run:
        assert run.results("M1")[0] == "cancel:1:1"
        assert run.steps("M1") == steps
        assert run.results("W1") == ["finish:1:-2"]  # the worker's finish finds the lock gone
        assert run.h.final.placements["1"] == ["wait"]
    with ran({"M1": block("requeue", token="W1:1")}, mode, state={"active": ["1"]}, locks={"1": "M1"}) as run:
        assert run.results("M1") == ["cancel:1:0"]
        assert run.h.final.placements["1"] == ["active"]


@pytest.mark.parametrize("mode", ["atomic", "split", "transaction"])
def test_success_files_the_job_and_leaves_the_registry(mode: str) -> None:
    with ran({"W1": block("success")}, mode, locks={"1": "W1"}) as run:
        assert run.h.final.placements["1"] == ["completed"]
        assert run.raw("ZRANGE", run.key("started"), "0", "-1") == []
        assert run.hash("1")["status"] == "finished"
        assert run.results("W1") == ["finish:1:0"]


def test_success_naive_retry_after_an_aborted_exec_keeps_the_registry_entry() -> None:
    actors = {"W1": block("success"), "E1": block("progress", begin=False)}
    # W1: ZADD started, WATCH, GET; E1 writes the job; W1: the aborted EXEC, WATCH, GET, EXEC
    with ran(actors, "transaction", schedule=["W1", "W1", "W1", "E1"], locks={"1": "W1"}) as run:
        assert run.h.final.placements["1"] == ["completed"]
        assert run.raw("ZRANGE", run.key("started"), "0", "-1") == [b"1"]
    actors["W1"] = block("success", naive_retry=False)
    with ran(actors, "transaction", schedule=["W1", "W1", "W1", "E1"], locks={"1": "W1"}) as run:
        assert run.raw("ZRANGE", run.key("started"), "0", "-1") == []


def test_clean_abandons_due_entries_without_a_lock() -> None:
    actors = {"W1": block("success", ttl=0), "C1": block("clean")}
    with ran(actors, "split", schedule=["W1", "W1", "W1", "C1"], locks={"1": "W1"}) as run:  # after the DEL
        assert sorted(run.h.final.placements["1"]) == ["completed", "failed"]
        assert run.hash("1")["failedReason"] == "abandoned"
        assert run.results("C1") == ["sweep:1"]
    with ran(actors, "atomic", schedule=["W1", "C1"], locks={"1": "W1"}) as run:  # registered, lock held
        assert run.results("C1") == ["sweep:"]
        assert run.h.final.placements["1"] == ["completed"]
    actors = {"W1": block("success", ttl=0), "C1": block("clean", to="wait")}
    with ran(actors, "split", schedule=["W1", "W1", "W1", "C1"], locks={"1": "W1"}) as run:
        assert sorted(run.h.final.placements["1"]) == ["completed", "wait"]


@pytest.mark.parametrize("snapshot", [False, True])
def test_retry_all_moves_the_failed_set_back(snapshot: bool) -> None:
    with ran({"A1": block("retry_all", snapshot=snapshot)}, "split", jobs=["1", "2"],
             state={"failed": ["1", "2"]}) as run:
        assert run.h.final.placements == {"1": ["wait"], "2": ["wait"]}


def test_retry_all_split_retries_a_job_that_fails_again_unless_bounded() -> None:
    worker = {"kind": "worker", "mode": "finish-then-fetch", "jobs": 2, "finish": "failed"}
    kw: dict[str, Any] = {"state": {"failed": ["1"], "metrics": True}}
    loop = explore_actors(scenario({"A1": block("retry_all"), "W1": worker}, **kw), mode="split")
    assert loop.kinds == ["duplicate-execution", "metrics-drift"]
    bounded = explore_actors(scenario({"A1": block("retry_all", snapshot=True), "W1": worker}, **kw), mode="split")
    bounded.assert_never()


@pytest.mark.parametrize("mode", ["atomic", "split"])
def test_snapshot_sweep_takes_only_a_lockless_unfinished_job(mode: str) -> None:
    with ran({"S1": block("snapshot_sweep")}, mode, state={"active": ["1"]}) as run:
        assert run.results("S1") == ["sweep:1", "finish:1:0"]
        assert run.h.final.placements["1"] == ["completed"]
    with ran({"S1": block("snapshot_sweep")}, mode, state={"active": ["1"]}, locks={"1": "S1"}) as run:
        assert run.results("S1") == ["sweep:"]


def test_reliable_worker_and_recovery_by_identity() -> None:
    with ran({"OLD": block("reliable_worker", jobs=2)}, jobs=["1", "2"], state={"wait": ["1", "2"]}) as run:
        assert run.h.final.placements == {"1": ["completed"], "2": ["completed"]}
        assert run.raw("LLEN", run.key("private:host")) == 0
    # OLD takes job 1 into its private list; NEW's recovery puts it back and runs it; OLD finishes it too
    with ran({"OLD": block("reliable_worker"), "NEW": block("recover_by_identity")}, schedule=["OLD", "NEW"],
             state={"wait": ["1"]}) as run:
        assert [e.actor for e in run.h.executions] == ["OLD", "NEW"]
        assert "duplicate-execution" in run.h.kinds
