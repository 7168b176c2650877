"""The division oracle: a search divided as finely as it can be — handing a node on after its first run, then
after gaps of 1, 2, 4 … runs (``divide=True, donate_every=1``), every part doing the same — claims exactly
what the undivided search claims (interleavings, distinct final states, anomaly kinds, interleavings with
each, minimal preemptions, witnesses), for every shipped scenario × mode at preemption bounds 0, 1 and 2 and
for random scenarios (:mod:`tests.random_scenarios`) at 0, 1 and without a bound.

What it holds: a part explores only the children a race had asked for when its node was handed on; a race
that later asks for another (in any part, above or at the part's node) is a request, which a later round
hands on as a new part (:func:`emqlab.explore.divide._asked_for`). A request lost, or met wrongly, loses
interleavings here. And the division costs no more runs than it saves from repeated work: every run a part
executes is kept, blocked or repeats a trace, and the rounds end."""

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
