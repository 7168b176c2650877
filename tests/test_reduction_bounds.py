"""The reduction oracle at preemption bounds 0, 1 and 2 (``test_reduction.py`` holds each scenario's own bound and
none): for every shipped scenario × mode, the reduced search claims exactly what the search that runs every
schedule with at most that many preemptions finds."""

from __future__ import annotations

import pytest

from emqlab.engine import scenario
from emqlab.explore import explore
from tests.test_reduction import assert_same

#: skip the unreduced side above this many interleavings (about 15 ms each on fakeredis)
LIMIT = 4_000

CASES = [(sc.name, mode, bound) for sc in scenario.shipped() for mode in sc.modes for bound in (0, 1, 2)
         if bound != sc.preemptions]


@pytest.mark.parametrize(("name", "mode", "bound"), CASES, ids=[f"{n}-{m}-bound{b}" for n, m, b in CASES])
def test_reduced_search_claims_what_the_unreduced_one_finds(name: str, mode: str, bound: int) -> None:
    sc = scenario.load(name)
    reduced = explore(sc, mode, preemptions=bound)
    assert reduced.complete and reduced.raw_exact
    if reduced.raw_interleavings > LIMIT:
        pytest.skip(f"{reduced.raw_interleavings:,} interleavings: too many to enumerate without reduction")
    assert_same(reduced, explore(sc, mode, reduce=False, preemptions=bound))
