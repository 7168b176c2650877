"""The reduction oracle: for every shipped scenario × mode, the reduced exploration (Source-DPOR over observed
footprints) claims exactly what the unreduced one finds — the same distinct final states, the same anomaly
kinds, the same witnesses — and its exact counts equal the unreduced search's enumeration, at the
scenario's own preemption bound and without one (``test_reduction_bounds.py``: at bounds 1 and 2). Also:
observed footprints stay inside the declared priors, and the linear-extension counting agrees with brute
force."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from emqlab.backend.connect import connect
from emqlab.engine import scenario
from emqlab.engine.footprints import prior
from emqlab.explore import Explorer, Report, Trace, explore
from emqlab.explore.checked import Runner

#: skip the unreduced side where it would enumerate more than this many interleavings: it runs every one of
#: them (about 15 ms each on fakeredis), so a case above this is covered at its scenario's preemption bound
#: instead; only cancel-active's split, with no bound, is left out in every form (11.9 billion interleavings)
LIMIT = 8_000

CASES = [(sc.name, mode, bound) for sc in scenario.shipped() for mode in sc.modes
         for bound in ((sc.preemptions, None) if sc.preemptions is not None else (None,))]


@pytest.mark.parametrize(("name", "mode", "bound"), CASES,
                         ids=[f"{n}-{m}-{'unbounded' if b is None else f'bound{b}'}" for n, m, b in CASES])
def test_reduced_search_claims_what_the_unreduced_one_finds(name: str, mode: str, bound: int | None) -> None:
    sc = scenario.load(name)
    how = {"unbounded": True} if bound is None else {"preemptions": bound}
    reduced = explore(sc, mode, **how)
    assert reduced.complete and reduced.raw_exact
    if reduced.raw_interleavings > LIMIT:
        pytest.skip(f"{reduced.raw_interleavings:,} interleavings: too many to enumerate without reduction")
    every = explore(sc, mode, reduce=False, **how)
    assert_same(reduced, every)


def differences(reduced: Report, every: Report) -> list[str]:
    """What the reduced search claims otherwise than the unreduced one found (``[]``: nothing): final
    states, anomaly kinds, the interleavings (in all and per anomaly), the fewest preemptions, the
    witnesses, and whether it ran more runs than there are interleavings."""
    return [name for name, mine, theirs in (
        ("final states", reduced.outcomes, every.outcomes),
        ("anomaly kinds", reduced.anomaly_kinds, every.anomaly_kinds),
        ("interleavings", (reduced.raw_interleavings, every.raw_interleavings), (every.explored, every.explored)),
        ("interleavings per anomaly", reduced.interleavings_with, every.runs_with),
        ("fewest preemptions", reduced.min_preemptions, every.min_preemptions),
        ("witnesses", {k: h.schedule for k, h in reduced.witnesses.items()},
         {k: h.schedule for k, h in every.witnesses.items()}),
        ("runs kept beyond the interleavings", reduced.explored > every.explored, False)) if mine != theirs]


def assert_same(reduced: Report, every: Report) -> None:
    """The reduced search claims exactly what the unreduced one found (:func:`differences`)."""
    differ = differences(reduced, every)
    assert not differ, f"{', '.join(differ)} differ: reduced {reduced.to_dict()}, unreduced {every.to_dict()}"


def test_observed_footprints_stay_inside_the_declared_priors() -> None:
    escapes: list[str] = []
    seen: set[str] = set()
    for sc in scenario.shipped():
        for mode in sc.modes:
            with Runner(sc, mode, connect()) as r:
                ex = Explorer(r)

                def look(done: int, total: int | None, r: Runner = r, sc: scenario.Scenario = sc) -> None:
                    for name, keys, fp in r.observed:
                        seen.add(name)
                        for problem in fp.within(prior(name, keys, r.keys.base)):
                            escapes.append(f"{sc.name}/{name}: {problem}")

                ex.progress = look
                ex.exhaustive(preemption_bound=sc.preemptions)
    assert {"moveToFinished", "moveStalledJobsToWait", "moveToActive"} <= seen
    assert not escapes, sorted(set(escapes))


def _small(name: str, rest: str) -> scenario.Scenario:
    """A scenario named ``name`` with job 1, then ``rest`` (more jobs, the state, the actors, expect)."""
    return scenario.loads(f"name: {name}\ntitle: t\nlesson: l\nsource: [x]\nanomaly: none\njobs:\n"
                          f'  "1": {{name: a, data: {{}}}}{rest}')


def test_an_add_and_lrem_active_conflict() -> None:
    """The first release declared them independent although both orders end differently (the add reads
    ``active`` through its queue-held check)."""
    sc = _small("add-vs-lrem", """
  "2": {name: b, data: {}}
state:
  active: ["1"]
  locks: {"1": W1}
actors:
  - {id: W1, kind: worker, holds: "1", finish: completed}
  - {id: P1, kind: producer, job: "2"}
expect:
  split: []
""")
    reduced = explore(sc, "split")
    every = explore(sc, "split", reduce=False)
    assert reduced.outcomes == every.outcomes and reduced.raw_interleavings == every.explored


def test_a_crash_races_with_the_next_step_of_the_actor_it_ends() -> None:
    """The crash ends W1 before its finish; the trace where W2's fetch and C4's cancel come first, then W1's
    finish, then the crash (too late: W1 is done) is one no run that crashes W1 early shows. Source-DPOR
    found it only once the crash counted as racing with W1's next step (a random scenario showed it)."""
    sc = _small("crash-regression", """
state:
  active: ["1"]
  locks: {"1": W1}
  stalled: ["1"]
actors:
  - {id: W1, kind: worker, holds: "1", mode: split, finish: completed, fetch_next: false}
  - {id: C2, kind: crash, of: W1, lapse: false}
  - {id: W2, kind: worker, mode: atomic, finish: failed, fetch_next: false}
  - {id: C4, kind: canceller, mode: atomic, job: "1", value: x}
expect: {}
""")
    reduced = explore(sc, "split", preemptions=0)
    every = explore(sc, "split", reduce=False, preemptions=0)
    assert every.explored == 18
    assert_same(reduced, every)


def linearizations(actors: list[str], preds: list[int]) -> Iterator[tuple[list[str], int]]:
    """Every interleaving of a trace (its events' actors, their happens-before bit sets), by brute force:
    the actors in order, and its preemptions (a switch away from an actor with steps left)."""
    n = len(actors)
    for perm in itertools.permutations(range(n)):
        pos = {e: i for i, e in enumerate(perm)}
        if any(pos[p] > pos[e] for e in range(n) for p in range(n) if preds[e] >> p & 1):
            continue
        seq = [actors[e] for e in perm]
        left = {a: actors.count(a) for a in set(actors)}
        pre = 0
        for i, a in enumerate(seq):
            if i and a != seq[i - 1] and left[seq[i - 1]] > 0:
                pre += 1
            left[a] -= 1
        yield seq, pre


def _brute(actors: list[str], preds: list[int], bound: int | None) -> tuple[int, int]:
    total = within = 0
    for _seq, pre in linearizations(actors, preds):
        total += 1
        within += bound is None or pre <= bound
    return total, within


def sample_trace() -> tuple[list[str], list[int]]:
    """A hand-built trace for the brute-force checks: A has 3 steps, B 2, C 2; B's 1st comes after A's 2nd,
    C's 2nd after B's 2nd. Returns the events' actors and their happens-before predecessor bit sets."""
    actors = ["A", "A", "B", "A", "B", "C", "C"]
    prog = {0: 0, 1: 1 << 0, 2: 0, 3: 1 << 1, 4: 1 << 2, 5: 0, 6: 1 << 5}
    extra = {2: 1 << 1, 6: 1 << 4}
    return actors, happens_before([prog[e] | extra.get(e, 0) for e in range(len(actors))])


def happens_before(direct: list[int]) -> list[int]:
    """Each event's predecessor bit set closed under transitivity, from its direct predecessors' bits."""
    preds: list[int] = []
    for e, bits in enumerate(direct):
        closed = bits
        for p in range(e):
            if bits >> p & 1:
                closed |= preds[p]
        preds.append(closed)
    return preds


@pytest.mark.parametrize("bound", [None, 0, 1, 2])
def test_trace_counts_match_brute_force(bound: int | None) -> None:
    actors, preds = sample_trace()
    trace = Trace(actors, preds, ["A", "B", "C"])
    assert trace.counts(bound) == _brute(actors, preds, bound)
    least, schedule = trace.best()
    assert sorted(schedule) == sorted(actors)
