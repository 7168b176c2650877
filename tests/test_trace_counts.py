"""A trace's counts and its least-preemption interleaving (:class:`emqlab.explore.report.Trace`) against brute
force over every linearization, on random traces: the budget-kept searches that :meth:`Trace.best` and
:meth:`Trace.counts` use give what enumerating every interleaving gives, and :meth:`Trace.best` agrees with
the DP over every position (:meth:`Trace.least_starting` with no prefix) where a crash's kill is in play."""

from __future__ import annotations

import random

import pytest

from emqlab.explore.report import Trace
from tests.test_reduction import _brute, happens_before, linearizations


def _random_trace(rng: random.Random) -> tuple[list[str], list[int]]:
    n = rng.randint(1, 6)
    actors = [rng.choice("ABC") for _ in range(n)]
    direct = []
    for e in range(n):
        bits = 0
        for p in range(e):
            if actors[p] == actors[e] or rng.random() < 0.25:
                bits |= 1 << p
        direct.append(bits)
    return actors, happens_before(direct)


def _least_brute(actors: list[str], preds: list[int], order: list[str]) -> tuple[int, list[str]]:
    best: tuple[int, list[int]] | None = None
    for seq, pre in linearizations(actors, preds):
        key = (pre, [order.index(a) for a in seq])
        if best is None or key < best:
            best = key
    assert best is not None
    return best[0], [order[i] for i in best[1]]


@pytest.mark.parametrize("shallow", [Trace.SHALLOW, 0])
def test_random_traces_count_and_order_as_brute_force(shallow: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Trace, "SHALLOW", shallow)  # (0: past the first budget, the DP over every position)
    rng = random.Random(24)
    order = ["A", "B", "C"]
    for _ in range(80):
        actors, preds = _random_trace(rng)
        for bound in (None, 0, 1, 2):
            assert Trace(actors, preds, order).counts(bound) == _brute(actors, preds, bound), (actors, preds)
        assert Trace(actors, preds, order).best() == _least_brute(actors, preds, order), (actors, preds)


def test_a_kill_counts_as_the_full_dp_counts_it() -> None:
    rng = random.Random(7)
    order = ["A", "B", "C"]
    seen = 0
    for _ in range(300):
        actors, preds = _random_trace(rng)
        if len(set(actors)) < 2:
            continue
        victim = rng.choice(sorted(set(actors)))
        killers = [e for e, a in enumerate(actors) if a != victim]
        kills = {victim: rng.choice(killers)}
        least, schedule = Trace(actors, preds, order, kills=kills).best()
        assert least == Trace(actors, preds, order, kills=kills).least_starting([])
        assert Trace(actors, preds, order, kills=kills).least_starting(schedule) == least
        seen += least > 0
    assert seen > 20
