"""The division oracle: a search divided as finely as it can be — handing a node on after its first run, then
after gaps of 1, 2, 4 … runs (``divide=True, donate_every=1``), every part doing the same — claims exactly
what the undivided search claims (interleavings, distinct final states, anomaly kinds, interleavings with
each, minimal preemptions, witnesses), for every shipped scenario × mode at preemption bounds 0, 1 and 2 and
for random scenarios (:mod:`tests.random_scenarios`) at 0, 1 and without a bound.

What it holds: a part explores only the children a race had asked for when its node was handed on; a race
that later asks for another (in any part, above or at the part's node) is a request, and the child is
handed on as a new part (:class:`emqlab.explore.divide._Asked`). A request lost, or met wrongly, loses
interleavings here. And every run a part
executes is kept, blocked or repeats a trace."""

from __future__ import annotations

import pytest

from emqlab.engine import scenario
from emqlab.explore import explore
from tests.random_scenarios import mode_of, random_scenario

SHIPPED = [(sc.name, mode, bound) for sc in scenario.shipped() for mode in sc.modes for bound in (0, 1, 2)]
#: random scenarios small enough for the suite at every bound here (test_reduction_random.py's list)
RANDOM = [(seed, bound) for seed in range(30) for bound in (0, 1, None)
          if seed not in (0, 8, 9) and (seed, bound) not in {(1, None), (6, None), (16, 1), (16, None), (18, None),
                                                              (22, None), (23, None), (26, None)}]


def _finest(sc: scenario.Scenario, mode: str, **how: object) -> None:
    whole = explore(sc, mode, **how)
    divided = explore(sc, mode, jobs=1, divide=True, donate_every=1, **how)
    assert divided.complete and divided.raw_exact
    assert divided.executed == divided.explored + divided.blocked + divided.repeated + divided.outside_bound
    assert divided.claims() == whole.claims()
    assert divided.outcomes == whole.outcomes


@pytest.mark.parametrize(("name", "mode", "bound"), SHIPPED, ids=[f"{n}-{m}-bound{b}" for n, m, b in SHIPPED])
def test_the_finest_division_claims_what_the_whole_search_does(name: str, mode: str, bound: int) -> None:
    _finest(scenario.load(name), mode, preemptions=bound)


@pytest.mark.parametrize(("seed", "bound"), RANDOM,
                         ids=[f"{s}-{'unbounded' if b is None else f'bound{b}'}" for s, b in RANDOM])
def test_the_finest_division_of_random_scenarios_claims_what_the_whole_search_does(seed: int,
                                                                                    bound: int | None) -> None:
    _finest(random_scenario(seed), mode_of(seed), **({"unbounded": True} if bound is None else
                                                      {"preemptions": bound}))


def test_a_child_asked_for_is_handed_on_once_though_handing_on_takes_in_more_parts() -> None:
    """Handing a part on takes in the parts that finished meanwhile (the pool's pump), which may ask for the
    same child again: it is still handed on once (a second copy ran the subtree twice, and only with two
    processes, so the report depended on the worker count)."""
    from emqlab.engine.footprints import Footprint
    from emqlab.explore.divide import _Asked
    from emqlab.explore.report import Part
    from emqlab.explore.tree import Branch, NodeState, Request

    class Dispatch:
        order = ["W1", "W2", "S1"]

        def __init__(self) -> None:
            given = Branch({}, frozenset({"W2"}), {"W2": Footprint()}, ("W1", "S1"), {}, frozenset())
            self.prefixes = [([], None), (["W2"], given), (["W2", "W2"], given)]
            self.on_part = None
            self.submitted: list[tuple[list[str], Branch]] = []
            self.later: list[tuple[int, Part]] = [(2, Part(2, requests=[Request(("W2",), "W1")]))]

        def submit(self, prefix: list[str], branch: Branch) -> None:
            self.submitted.append((prefix, branch))
            while self.later:  # (as the pool's pump does: a part that finished comes in here)
                asked.took(*self.later.pop())

    d = Dispatch()
    asked = _Asked(d)  # type: ignore[arg-type]
    skipper = Part(1, root_state=NodeState(("W2",), {}, {}, {}, ("W1", "S1")))
    asked.took(1, Part(3, requests=[Request(("W2",), "W1"), Request(("W2",), "S1")]))
    asked.took(1, skipper)
    assert [(p, b.children) for p, b in d.submitted] == [(["W2"], ("S1",)), (["W2"], ("W1",))]
    late = d.submitted[1][1]
    assert late.done == {"W2", "S1"} and late.unplanned == {"S1"} and late.planned is None
