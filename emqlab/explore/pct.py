"""The home of the PCT strategy (probabilistic concurrency testing, Burckhardt, Kothari, Musuvathi,
Nagarakatte, ASPLOS 2010): random actor priorities and ``depth - 1`` priority-change points per run, and the
check of which anomalies a given depth can reach at all (:func:`depth_check`)."""

from __future__ import annotations

import functools
import random
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from emqlab.engine.runner import Runner
from emqlab.explore.dpor import Exhaustive
from emqlab.explore.report import INFRASTRUCTURE, Report, multinomial
from emqlab.explore.strategy import Strategy

#: the most runs PCT's depth check may execute (an exhaustive search at ``depth - 1`` preemptions)
DEPTH_CHECK_RUNS = 20_000


class PCT(Strategy):
    """PCT runs over one :class:`Runner` (:meth:`pct`); ``longest`` is the longest run seen, ``k`` the range
    of the change points, ``serial`` what each priority order's run would be without a change point."""

    name = "pct"

    def __init__(self, runner: Runner, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        #: the most steps any run took
        self.longest = 0
        #: the steps the change points are placed over (:meth:`pct`; set when it runs)
        self.k = 0
        #: per priority order (the actors, highest first) the choice points (steps where 2+ actors can go) of
        #: its run without a change point: the actors one after another in that order. The earliest change
        #: point of a run with that order falls among them or changes nothing.
        self.serial: dict[tuple[str, ...], int] = {}
        #: per actor the most steps it took in the serial runs
        self._most: dict[str, int] = {}

    def pct(self, runs: int, seed: int = 0, depth: int = 2, *, check_depth: bool = True) -> Report:
        """``runs`` PCT runs (seeded): each finds a given bug *of depth at most* ``depth`` with probability at
        least 1/(n·k^(d−1)) for n actors and the ``k`` steps its change points range over (Burckhardt et al.
        2010, Theorem 9); a bug that needs a deeper ordering gets no guarantee at all. Each run gives the
        actors a random priority order and ``depth - 1`` priority-change points, distinct steps among the
        first ``k`` where 2+ actors can go (a change anywhere else changes nothing): at one, the running
        actor's priority drops below every initial one. ``k`` is the sum of the most steps each actor took in
        the serial runs (this call's first runs, one per actor going first, not counted), which no run's
        choice points exceed unless an actor takes more steps than it does alone (``k`` then grows for the
        runs after). Where a priority order's serial run is known (:attr:`serial`), its earliest change point
        is drawn among that run's choice points only: one beyond them leaves the run that serial run, a
        repeat. With two actors the later change points lower the running actor below the earlier ones (each
        switches to the other actor); with more, the lowered priorities are a random permutation, as in the
        paper, so that an actor preempted later can also resume first. With ``check_depth``,
        :func:`depth_check` says which expected anomalies the runs missed because no run of that depth has
        them (a divided swarm checks once, after merging its parts)."""
        started = time.perf_counter()
        t = self.tally
        go_on = self._measure_default()
        self.longest = max(1, sum(t.steps_per_actor.values()))
        n = len(self.order)
        if go_on:
            self.serial[tuple(self.order)] = self._choices_made()
            go_on = self._serial_runs()
        k = self.k = max(self.longest, sum(self._most.values()), *self.serial.values())
        go_on = go_on and t.stopped is None  # (an error in a serial run may have stopped it)
        rng = random.Random(seed)
        lowered = list(range(depth - 1, 0, -1))  # the values a change point gives: below every initial one
        for _ in range(runs if go_on else 0):
            r = self.runner
            prio = dict(zip(self.order, rng.sample(range(depth, depth + n), n), strict=True))
            top = tuple(sorted(self.order, key=lambda a: -prio[a]))
            changes = self._change_points(rng, k, depth - 1, self.serial.get(top))
            values = lowered[:len(changes)]
            if n > 2:
                rng.shuffle(values)
            change_at = dict(zip(changes, values, strict=True))

            seen = [0]  # the steps so far where 2+ actors were enabled (a change point elsewhere changes nothing)

            def choose(rr: Runner, prio: dict[str, int] = prio, change_at: dict[int, int] = change_at,
                       seen: list[int] = seen) -> str:
                enabled = rr.enabled
                a = max(enabled, key=lambda x: prio[x])
                if len(enabled) > 1:
                    seen[0] += 1
                    if seen[0] in change_at:
                        prio[a] = change_at[seen[0]]
                        a = max(enabled, key=lambda x: prio[x])
                return a

            try:
                r.reset()
                h = r.run(choose=choose)
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            if not changes or seen[0] < changes[0]:  # no change point was reached: the serial run of ``top``
                self.serial[top] = seen[0]
            k = self.k = max(k, seen[0])
            self.longest = max(self.longest, len(h.steps))
            t.steps_executed += len(h.steps)
            self._record(h, r.preemptions, r.choices)
        steps = max(k, self.longest)  # (the change points' range, or the longest run if that is longer)
        params: dict[str, Any] = {"runs": runs, "seed": seed, "depth": depth, "longest_run": self.longest,
                                  "bound_per_run": f"1/({n}*{steps}^{depth - 1})",
                                  "p_per_run_at_least": 1 / (n * steps ** (depth - 1)),
                                  "assumes": f"a bug of depth <= {depth}"}
        warnings: list[str] = []
        if check_depth and t.stopped is None:
            found = [kind for kind, runs_with in t.runs_with.items() if runs_with]
            more, warnings = depth_check(self.runner, found, depth)
            params.update(more)
        self._shrink_witnesses()
        # the estimate from the longest each actor ran
        return self._report(started, params, raw=multinomial(list(t.steps_per_actor.values())), warnings=warnings)

    @staticmethod
    def _change_points(rng: random.Random, k: int, count: int, serial: int | None) -> list[int]:
        """``count`` distinct steps of ``1 .. k`` (fewer if ``k`` is smaller), ascending, drawn uniformly among
        the sets whose earliest step is at most ``serial`` (the choice points of the run without a change
        point) when that is known: the other sets repeat that run. Every set that can change the run keeps
        at least its unconditioned probability, so the bound per run holds."""
        if serial == 0:
            return []  # (one actor can go at every step: no change point changes anything)
        while True:
            changes = sorted(rng.sample(range(1, k + 1), min(count, k)))
            if serial is None or not changes or changes[0] <= serial:
                return changes

    def _choices_made(self) -> int:
        """The choice points (steps where 2+ actors could go) of the run the runner just made."""
        return sum(len(e) > 1 for e in self.runner.enabled_at)

    def _serial_runs(self) -> bool:
        """One serial run for each actor but the first going first (the rest in scenario order; the default
        run starts with the first), not counted as explored: each one's choice points go into :attr:`serial`
        and each actor's most steps into ``_most`` (``k`` is their sum). The default run alone can be far
        shorter than the others (an actor that finds nothing to do ends at once), which left a bug whose
        change point lies beyond it with probability 0. False when an infrastructure error stopped the
        exploration."""
        r = self.runner
        self._most = dict(self.tally.steps_per_actor)
        for first in self.order[1:]:
            try:
                r.reset()
                h = r.run(choose=functools.partial(_first_then_order, first))
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                return False
            self.serial[tuple([first] + [a for a in self.order if a != first])] = self._choices_made()
            for a, steps in Counter(s.actor for s in h.steps).items():
                self._most[a] = max(self._most.get(a, 0), steps)
        return True


def _first_then_order(first: str, runner: Runner) -> str:
    """A serial run's choice: ``first`` while it has steps, then the actors in scenario order."""
    return first if first in runner.enabled else runner.enabled[0]


def depth_check(runner: Runner, found: Iterable[str], depth: int,
                budget: int = DEPTH_CHECK_RUNS) -> tuple[dict[str, Any], list[str]]:
    """Which anomaly kinds PCT at ``depth`` can find at all, as (params, warnings) for its report. PCT's runs
    switch away from a running actor only at its ``depth - 1`` priority-change points (our actors never
    block), so they have at most ``depth - 1`` preemptions: a kind that no schedule with that few
    preemptions shows has probability 0, whatever the bound says. The kinds looked for are the scenario's
    expected ones for the runner's mode plus those ``found``; an exhaustive search at ``depth - 1``
    preemptions (at most ``budget`` runs, on ``runner``) decides, unless every expected kind is among those
    ``found`` (a PCT run has at most ``depth - 1`` preemptions, so a kind it showed is within reach and no
    search is needed: the check costs nothing when PCT found what it looked for). The params: ``depth_check``, and
    ``within_depth`` / ``beyond_depth`` when it completed; a warning when the budget ran out or an
    expected kind is beyond reach."""
    sc = runner.scenario
    expected = set(sc.expect[runner.mode].anomalies) if runner.mode in sc.expect else set()
    wanted = expected | set(found)
    if not wanted:
        return {"depth_check": "nothing to check: no anomaly expected or found"}, []
    if not expected - set(found):  # (a run of PCT's own reached each of them: they are within its depth)
        return {"depth_check": "complete: PCT's own runs showed every kind looked for",
                "within_depth": sorted(wanted), "beyond_depth": []}, []
    probe = Exhaustive(runner).exhaustive(preemption_bound=depth - 1, max_runs=budget)
    if probe.stopped is not None or probe.aborted:
        return ({"depth_check": f"incomplete: {probe.infrastructure()}"},
                [f"could not check which anomalies PCT at depth {depth} can reach: {probe.infrastructure()}"])
    if not probe.complete:
        return ({"depth_check": f"incomplete: more than {budget} runs at {depth - 1} preemptions"},
                [f"could not check which anomalies PCT at depth {depth} can reach "
                 f"(more than {budget:,} runs at {depth - 1} preemptions)"])
    within = sorted(wanted & set(probe.anomaly_kinds))
    beyond = sorted(wanted - set(probe.anomaly_kinds))
    params: dict[str, Any] = {"depth_check": "complete", "within_depth": within, "beyond_depth": beyond}
    if not beyond:
        return params, []
    n = depth - 1
    return params, [
        f"PCT at depth {depth} cannot find {', '.join(beyond)}: every schedule that shows "
        f"{'it' if len(beyond) == 1 else 'them'} needs more than {n} preemption{'' if n == 1 else 's'} "
        f"(try --depth {depth + 1} or more); the bound per run applies only to "
        f"{', '.join(within) if within else 'no expected anomaly'}"]


__all__ = ["DEPTH_CHECK_RUNS", "PCT", "depth_check"]
