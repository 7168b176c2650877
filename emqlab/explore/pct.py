"""The home of the PCT strategy (probabilistic concurrency testing, Burckhardt, Kothari, Musuvathi,
Nagarakatte, ASPLOS 2010): random actor priorities and ``depth - 1`` priority-change points per run, and the
check of which anomalies a given depth can reach at all (:func:`depth_check`)."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterable
from typing import Any

from emqlab.engine.runner import Runner
from emqlab.explore.dpor import Exhaustive
from emqlab.explore.report import INFRASTRUCTURE, Report, multinomial
from emqlab.explore.strategy import Strategy

#: the most runs PCT's depth check may execute (an exhaustive search at ``depth - 1`` preemptions)
DEPTH_CHECK_RUNS = 20_000


class PCT(Strategy):
    """PCT runs over one :class:`Runner` (:meth:`pct`); ``longest`` is the longest run seen."""

    name = "pct"

    def __init__(self, runner: Runner, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        #: the most steps any run took
        self.longest = 0
        #: the steps the change points are placed over (:meth:`pct`; set when it runs)
        self.k = 0

    def pct(self, runs: int, seed: int = 0, depth: int = 2, *, check_depth: bool = True) -> Report:
        """``runs`` PCT runs (seeded): each finds a given bug *of depth at most* ``depth`` with probability at
        least 1/(n·k^(d−1)) for n actors and k steps (the change points are drawn from the first ``k`` steps
        where 2+ actors are enabled: ``k`` is the default run's length or, if more, :meth:`_choice_points`;
        the bound uses the longest run instead where that is longer); a bug that needs a deeper
        ordering gets no guarantee at all. With ``check_depth``, :func:`depth_check` says which anomalies
        that is (a divided swarm checks once, after merging its parts)."""
        started = time.perf_counter()
        t = self.tally
        go_on = self._measure_default()
        self.longest = max(1, sum(t.steps_per_actor.values()))
        k = self.k = max(self.longest, self._choice_points() if go_on else 0)
        go_on = go_on and t.stopped is None  # (an error in a serial run may have stopped it)
        n = len(self.order)
        rng = random.Random(seed)
        for _ in range(runs if go_on else 0):
            r = self.runner
            prio = dict(zip(self.order, rng.sample(range(depth, depth + n), n), strict=True))
            changes = sorted(rng.sample(range(1, k + 1), min(depth - 1, k)))
            change_at = {step: depth - 1 - i for i, step in enumerate(changes)}

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
        # the estimate from the longest each actor ran
        return self._report(started, params, raw=multinomial(list(t.steps_per_actor.values())), warnings=warnings)

    def _choice_points(self) -> int:
        """The most steps where 2+ actors are enabled (the only steps where lowering the running actor's
        priority can switch actors) of the serial runs that start with each actor but the first (the rest in
        scenario order; the default run starts with the first). PCT's k is at least this: the default run
        alone can be far shorter than the others (an actor that finds nothing to do ends at once), which left a
        bug whose change point lies beyond it with probability 0. These runs are not counted as explored."""
        r = self.runner
        most = 0
        for first in self.order[1:]:
            try:
                r.reset()
                r.run(choose=functools.partial(_first_then_order, first))
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            most = max(most, sum(len(e) > 1 for e in r.enabled_at))
        return most


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
