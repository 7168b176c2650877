"""The reduction oracle at preemption bounds 0, 1 and 2 (``test_reduction.py`` holds each scenario's own bound and
none): for every shipped scenario × mode, the reduced search claims exactly what the search that runs every
schedule with at most that many preemptions finds, and runs nothing beyond the bound (BPOR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emqlab.engine import scenario
from emqlab.explore import explore
from tests.test_reduction import assert_same

#: the benchmarks' scenarios (not shipped)
SCALING = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"

#: skip the unreduced side above this many interleavings (about 15 ms each on fakeredis)
LIMIT = 4_000

CASES = [(sc.name, mode, bound) for sc in scenario.shipped() for mode in sc.modes for bound in (0, 1, 2)
         if bound != sc.preemptions]


@pytest.mark.parametrize(("name", "mode", "bound"), CASES, ids=[f"{n}-{m}-bound{b}" for n, m, b in CASES])
def test_reduced_search_claims_what_the_unreduced_one_finds(name: str, mode: str, bound: int) -> None:
    sc = scenario.load(name)
    reduced = explore(sc, mode, preemptions=bound)
    assert reduced.complete and reduced.raw_exact
    # BPOR never starts a branch past the bound: each run executed is kept, blocked by a sleep set, or
    # repeats a kept trace (a sleep set the bound kept open), never beyond the bound
    assert reduced.outside_bound == 0
    assert reduced.executed == reduced.explored + reduced.blocked + reduced.repeated
    if reduced.raw_interleavings > LIMIT:
        pytest.skip(f"{reduced.raw_interleavings:,} interleavings: too many to enumerate without reduction")
    assert_same(reduced, explore(sc, mode, reduce=False, preemptions=bound))


def test_a_trace_two_parts_both_kept_counts_once() -> None:
    """The merge of a divided bounded search sets aside a trace kept by two parts (their sleep sets may both
    leave it open) and takes back everything it added to the counts."""
    from emqlab.explore.report import Part, Report, TraceRecord
    from emqlab.protocol.outcome import Outcome

    shared = TraceRecord(7, ("duplicate-execution",), (("W1", "finish:1:0"),), (("W1", Outcome(code=0)),))
    only = TraceRecord(2, (), (("W1", "finish:1:-2"),), (("W1", Outcome(code=-2)),))
    a = Part(0, explored=1, raw=7, runs_with={"duplicate-execution": 1}, interleavings_with={"duplicate-execution": 7},
             results={"W1": {"finish:1:0": 1}}, codes={"W1": {Outcome(code=0): 1}}, traces={"k1": shared})
    b = Part(1, explored=2, raw=9, runs_with={"duplicate-execution": 1}, interleavings_with={"duplicate-execution": 7},
             results={"W1": {"finish:1:0": 1, "finish:1:-2": 1}},
             codes={"W1": {Outcome(code=0): 1, Outcome(code=-2): 1}}, traces={"k1": shared, "k2": only})
    rep = Report.merge([a, b], scenario="s", mode="split", strategy="exhaustive", backend="fakeredis",
                       order=["W1"], replay=lambda *_: None)  # type: ignore[arg-type,return-value]
    assert (rep.explored, rep.repeated, rep.raw_interleavings) == (2, 1, 9)
    assert rep.runs_with == {"duplicate-execution": 1} and rep.interleavings_with == {"duplicate-execution": 7}
    assert rep.results == {"W1": {"finish:1:-2": 1, "finish:1:0": 1}}
    assert rep.codes == {"W1": {Outcome(code=-2): 1, Outcome(code=0): 1}}


def test_three_split_workers_and_a_sweep_at_bound_1() -> None:
    """The oracle where several actors race for one job: three split workers and a sweep (the scaling
    scenario of ``benchmarks/scenarios``; 1,872 interleavings within the bound, 248 traces). The shipped
    scenarios have at most two workers racing, and a reduction can pass every one of them and the random ones
    and still lose traces here (cutting a run as soon as no interleaving of its steps fits the bound, the
    bound counted per trace rather than per run, does)."""
    sc = scenario.load(str(SCALING / "three-split-workers.yaml"))
    reduced = explore(sc, "split", preemptions=1)
    assert reduced.complete and reduced.outside_bound == 0
    assert_same(reduced, explore(sc, "split", reduce=False, preemptions=1))
