"""The engine's anomaly verdicts against a second checker written from the docs alone
(:mod:`tests.independent_checker`; issue 26, item 6): for every atlas scenario (every project but BullMQ,
bee-queue's from tests/atlas/ included) and every mode, the search that runs every schedule (no reduction)
is run with the checker's snapshots taken, and run by run the engine's (kind, job) findings must equal the
checker's. The BullMQ-shaped shipped scenarios are compared the same way.

The bound: a case is searched without a preemption bound when that is at most :data:`LIMIT` interleavings
(every atlas case but one, and most BullMQ-shaped ones), else at the largest bound of 2, 1, 0 that is
(:data:`BOUNDS`; the atlas's one is rq-cleanup-after-success split, 1,256 interleavings without a bound, 206
at bound 2, its own declared bound). A case that outgrows LIMIT fails, naming BOUNDS, rather than being cut
short. A run with the checker's snapshots costs 5-15 ms of CPU (RQ's released code is the dearest).

And the checker can fail: an engine whose check drops a kind, or names one that is not there, is caught.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from emqlab.analysis import anomalies
from emqlab.engine import scenario
from emqlab.engine.history import Anomaly, History
from emqlab.engine.runner import Runner
from emqlab.engine.specs import Scenario
from emqlab.explore import Explorer
from tests.conftest import bee_queue_release
from tests.independent_checker import Finding, Snapshots, as_findings, findings, record

#: bee-queue's scenarios: its npm release's scripts, fetched at test time (tests/test_atlas_lua.py)
BEE_QUEUE = sorted(str(p) for p in (Path(__file__).parent / "atlas").glob("bee-queue-*.yaml"))
ATLAS = [sc for sc in scenario.shipped() if sc.project != "bullmq"] + [scenario.load(p) for p in BEE_QUEUE]
BULLMQ = [sc for sc in scenario.shipped() if sc.project == "bullmq"]

#: the most runs a case may take: a search that needs more fails, naming BOUNDS
LIMIT = 600
#: the cases whose search without a preemption bound runs more than LIMIT interleavings, and the bound they
#: are compared at: the largest of 2, 1, 0 within LIMIT (the interleavings without a bound → at it)
BOUNDS = {
    ("rq-cleanup-after-success", "split"): 2,  # 1,256 → 206 (its own declared bound)
    ("abandoned-after-success", "split"): 2,  # 8,469 → 158
    ("attempts-overrun", "split"): 2,  # 758 → 345
    ("cancel-active", "split"): 2,  # 11,895,489,627 → 345
    ("late-finish-deleted", "split"): 1,  # 10,688 → 581 (3,842 at bound 2)
    ("metrics-drift", "split"): 2,  # 678 → 598
    ("recovery-by-identity", "split"): 2,  # 739 → 118
    ("shutdown-requeue", "split"): 2,  # 8,848 → 65
    ("split-promoter", "split"): 2,  # 625 → 89
    ("two-workers", "split"): 1,  # 10,688 → 581 (3,842 at bound 2)
}


@dataclass
class Comparison:
    """What a comparison found: the runs compared and, for each run on which the two checkers differ, its
    schedule with the engine's findings and the checker's."""

    runs: int = 0
    differ: list[tuple[str, set[Finding], set[Finding]]] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)


def compare(sc: Scenario, mode: str, *, bound: int | None = None, engine: Any = None) -> Comparison:
    """Run every schedule of ``sc`` in ``mode`` (up to ``bound`` preemptions), each checked by ``engine``
    (default: emqlab's :func:`emqlab.analysis.anomalies.checker`) and by the independent checker."""
    check = engine or anomalies.checker
    snaps = Snapshots()
    out = Comparison()

    def both(h: History, s: Scenario) -> tuple[Sequence[Anomaly], Sequence[str]]:
        found, unchecked = check(h, s)
        assert not unchecked, unchecked
        full = h.with_findings(found)
        theirs, mine = as_findings(full, s), findings(record(full, snaps, s), s, full)
        out.runs += 1
        out.kinds |= {k for k, _ in theirs}
        if theirs != mine:
            out.differ.append((h.schedule, theirs, mine))
        return found, unchecked

    with Runner(sc, mode, check=both, instruments=[snaps]) as r:
        rep = Explorer(r).exhaustive(reduce=False, preemption_bound=bound, max_runs=LIMIT)
    assert rep.complete, f"{sc.name} {mode}: more than {LIMIT} runs at bound {bound}: give it a bound in BOUNDS"
    assert rep.explored == out.runs, (rep.explored, out.runs)
    return out


def _shown(c: Comparison) -> str:
    return "\n".join(f"{s}: engine {sorted(t)} checker {sorted(m)}" for s, t, m in c.differ[:8])


ATLAS_CASES = [(sc, mode) for sc in ATLAS for mode in sc.modes]


@pytest.mark.parametrize(("sc", "mode"), ATLAS_CASES, ids=[f"{sc.name}-{m}" for sc, m in ATLAS_CASES])
def test_the_engine_and_the_independent_checker_agree_run_by_run_on_the_atlas(sc: Scenario, mode: str) -> None:
    if sc.project == "bee-queue":
        bee_queue_release()
    bound = BOUNDS.get((sc.name, mode))
    c = compare(sc, mode, bound=bound)
    assert c.runs > 0
    assert not c.differ, f"bound {bound}: {len(c.differ)} of {c.runs} runs differ:\n{_shown(c)}"
    # (the comparison saw what the scenario is about: its expected kinds show in some run)
    assert set(sc.expect[mode].anomalies) <= c.kinds, (sorted(sc.expect[mode].anomalies), sorted(c.kinds))


def test_every_atlas_project_is_compared() -> None:
    assert {sc.project for sc in ATLAS} >= {"arq", "asynq", "bee-queue", "horizon", "laravel", "rq", "saq", "sidekiq"}
    assert len(ATLAS_CASES) >= 2 * len(ATLAS)


BULLMQ_CASES = [(sc.name, mode) for sc in BULLMQ for mode in sc.modes]


@pytest.mark.parametrize(("name", "mode"), BULLMQ_CASES, ids=[f"{n}-{m}" for n, m in BULLMQ_CASES])
def test_the_engine_and_the_independent_checker_agree_on_bullmq_shaped_scenarios(name: str, mode: str) -> None:
    sc = scenario.load(name)
    bound = BOUNDS.get((sc.name, mode))
    c = compare(sc, mode, bound=bound)
    assert not c.differ, f"bound {bound}: {len(c.differ)} of {c.runs} runs differ:\n{_shown(c)}"


# -- the checker can fail ---------------------------------------------------------------------------------------


def _without(kind: str) -> Any:
    """emqlab's check with the check of ``kind`` dropped."""
    kept = tuple(replace(spec, run=lambda h, s: []) if spec.kind == kind else spec for spec in anomalies.CHECKS)

    def check(h: History, s: Scenario) -> tuple[list[Anomaly], list[str]]:
        saved = anomalies.CHECKS
        anomalies.CHECKS = kept
        try:
            return anomalies.checker(h, s)
        finally:
            anomalies.CHECKS = saved

    return check


@pytest.mark.parametrize(("name", "mode", "kind"), [
    ("saq-sweep-before-process", "split", "duplicate-execution"),
    ("saq-heartbeat-overwrites-abort", "split", "orphan-data"),
    ("laravel-pop-lost", "split", "lost-job"),
    ("horizon-late-release", "split", "double-placement"),
    ("horizon-late-record", "split", "invariant:status-agrees"),
    ("asynq-stale-recovery", "split", "work-thrown-away"),
])
def test_an_engine_that_drops_a_kind_is_caught(name: str, mode: str, kind: str) -> None:
    sc = scenario.load(name)
    if kind.startswith("invariant:"):
        broken = _no_invariants
    else:
        broken = _without(kind)
    c = compare(sc, mode, engine=broken)
    assert c.differ, f"no run of {c.runs} tells an engine without {kind} apart"
    assert all(kind in {k for k, _ in mine} - {k for k, _ in theirs} for _, theirs, mine in c.differ)


def _no_invariants(h: History, s: Scenario) -> tuple[list[Anomaly], list[str]]:
    found, unchecked = anomalies.checker(h, s)
    return [a for a in found if not a.kind.startswith("invariant:")], unchecked


def test_an_engine_that_names_what_is_not_there_is_caught() -> None:
    """An engine that calls every refused finish stolen-lock (a plausible slip: a refusal for a lock that
    lapsed) is told apart on the runs where nobody stole the lock."""

    def broken(h: History, s: Scenario) -> tuple[list[Anomaly], list[str]]:
        found, unchecked = anomalies.checker(h, s)
        extra = [Anomaly("stolen-lock", e.job, "(planted)") for e in h.executions
                 if e.outcome is not None and e.outcome.refused]
        return [*found, *extra], unchecked

    c = compare(scenario.load("lease-lapse"), "atomic", engine=broken)
    assert c.differ and all(("stolen-lock", "1") in theirs - mine for _, theirs, mine in c.differ)


def test_every_bound_names_a_case_that_is_compared() -> None:
    cases = {(sc.name, mode) for sc in (*ATLAS, *BULLMQ) for mode in sc.modes}
    assert set(BOUNDS) <= cases and all(b in (0, 1, 2) for b in BOUNDS.values())
