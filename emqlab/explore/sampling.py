"""The home of the sampled strategies: random(seed), PCT(seed, depth) — each a chooser of the next actor
— and replay(schedule); and :class:`Explorer`, every strategy over one runner (the documented name).
"""

from __future__ import annotations

import random
import time
from collections import Counter

from emqlab.engine.runner import Runner
from emqlab.explore.dpor import Exhaustive
from emqlab.explore.report import INFRASTRUCTURE, Report, multinomial
from emqlab.explore.strategy import Strategy
from emqlab.protocol.schedules import parse_schedule

#: the most runs PCT's depth check may execute (an exhaustive search at ``depth - 1`` preemptions)
DEPTH_CHECK_RUNS = 20_000


class Sampling(Strategy):
    """The sampled strategies over one :class:`Runner`: :meth:`random`, :meth:`pct`, :meth:`replay`."""

    def random(self, runs: int, seed: int = 0) -> Report:
        """``runs`` runs, each choosing uniformly among the enabled actors (seeded)."""
        started = time.perf_counter()
        self.report.strategy = "random"
        self.report.params = {"runs": runs, "seed": seed}
        rng = random.Random(seed)
        for _ in range(runs if self._measure_default() else 0):
            r = self.runner
            try:
                r.reset()
                h = r.run(choose=lambda rr: rng.choice(rr.enabled))
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            self.report.steps_executed += len(h.steps)
            self._record(h, r.preemptions, r.choices)
        self.report.raw_interleavings = multinomial(list(self.report.steps_per_actor.values()))
        return self._finish(started)

    def pct(self, runs: int, seed: int = 0, depth: int = 2, *, check_depth: bool = True) -> Report:
        """Probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010): random actor priorities and
        ``depth - 1`` priority-change points per run; each run finds a given bug *of depth at most*
        ``depth`` with probability at least 1/(n·k^(d−1)) for n actors and k steps (k: the longest run
        seen). A bug that needs a deeper ordering gets no guarantee at all."""
        started = time.perf_counter()
        rep = self.report
        rep.strategy = "pct"
        go_on = self._measure_default()
        k = max(1, sum(rep.steps_per_actor.values()))
        n = len(self.runner.scenario.actors)
        rng = random.Random(seed)
        longest = k
        for _ in range(runs if go_on else 0):
            r = self.runner
            ids = [a.id for a in r.scenario.actors]
            prio = dict(zip(ids, rng.sample(range(depth, depth + len(ids)), len(ids)), strict=True))
            changes = sorted(rng.sample(range(1, k + 1), min(depth - 1, k)))
            change_at = {step: depth - 1 - i for i, step in enumerate(changes)}

            def choose(rr: Runner, prio: dict[str, int] = prio, change_at: dict[int, int] = change_at) -> str:
                a = max(rr.enabled, key=lambda x: prio[x])
                step_no = len(rr.choices) + 1
                if step_no in change_at:
                    prio[a] = change_at[step_no]
                    a = max(rr.enabled, key=lambda x: prio[x])
                return a

            try:
                r.reset()
                h = r.run(choose=choose)
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            longest = max(longest, len(h.steps))
            rep.steps_executed += len(h.steps)
            self._record(h, r.preemptions, r.choices)
        rep.raw_interleavings = multinomial(list(rep.steps_per_actor.values()))  # (the longest each actor ran)
        rep.params = {"runs": runs, "seed": seed, "depth": depth, "longest_run": longest,
                      "bound_per_run": f"1/({n}*{longest}^{depth - 1})",
                      "p_per_run_at_least": 1 / (n * longest ** (depth - 1)),
                      "assumes": f"a bug of depth <= {depth}"}
        self._finish(started)
        if check_depth and rep.stopped is None:  # a swarm (emqlab.explore.divide) checks once, after merging its parts
            self.check_depth(depth)
        rep.elapsed_s = time.perf_counter() - started
        return rep

    def check_depth(self, depth: int, budget: int = DEPTH_CHECK_RUNS) -> None:
        """Which anomaly kinds PCT at ``depth`` can find at all. PCT's runs switch away from a running
        actor only at its ``depth - 1`` priority-change points (our actors never block), so they have at
        most ``depth - 1`` preemptions: a kind that no schedule with that few preemptions shows has
        probability 0, whatever the bound says. The kinds looked for are the scenario's expected ones for
        the mode plus those PCT found; an exhaustive search at ``depth - 1`` preemptions (at most
        ``budget`` runs) decides. Sets ``params["within_depth"]`` / ``params["beyond_depth"]`` and a
        warning; when the budget runs out, says the check is incomplete."""
        rep = self.report
        sc = self.runner.scenario
        expected = set(sc.expect[rep.mode].anomalies) if rep.mode in sc.expect else set()
        wanted = expected | set(rep.anomaly_kinds)
        if not wanted:
            rep.params["depth_check"] = "nothing to check: no anomaly expected or found"
            return
        probe = Exhaustive(self.runner).exhaustive(preemption_bound=depth - 1, max_runs=budget)
        if probe.stopped is not None or probe.aborted:
            rep.params["depth_check"] = f"incomplete: {probe.infrastructure()}"
            rep.warnings.append(f"could not check which anomalies PCT at depth {depth} can reach: "
                                f"{probe.infrastructure()}")
            return
        if not probe.complete:
            rep.params["depth_check"] = f"incomplete: more than {budget} runs at {depth - 1} preemptions"
            rep.warnings.append(f"could not check which anomalies PCT at depth {depth} can reach "
                                f"(more than {budget:,} runs at {depth - 1} preemptions)")
            return
        within = sorted(wanted & set(probe.anomaly_kinds))
        beyond = sorted(wanted - set(probe.anomaly_kinds))
        rep.params["depth_check"] = "complete"
        rep.params["within_depth"] = within
        rep.params["beyond_depth"] = beyond
        if beyond:
            n = depth - 1
            rep.warnings.append(
                f"PCT at depth {depth} cannot find {', '.join(beyond)}: every schedule that shows "
                f"{'it' if len(beyond) == 1 else 'them'} needs more than {n} preemption{'' if n == 1 else 's'} "
                f"(try --depth {depth + 1} or more); the bound per run applies only to "
                f"{', '.join(within) if within else 'no expected anomaly'}")

    def replay(self, schedule: str) -> Report:
        """One run along ``schedule`` (a schedule string); if it ends before every actor is done, the run
        continues without further preemption. Raises :class:`~emqlab.protocol.schedules.ScheduleError` for a
        schedule that does not fit the scenario."""
        started = time.perf_counter()
        self.report.strategy = "replay"
        self.report.params = {"schedule": schedule}
        r = self.runner
        choices = parse_schedule(schedule, self.order)
        try:
            r.reset()
            h = r.run(choices)
        except INFRASTRUCTURE as e:
            self._abort(e)
            self.report.steps_per_actor = {a: choices.count(a) for a in self.order}
            return self._finish(started)
        counts = Counter(s.actor for s in h.steps)
        self.report.steps_per_actor = {a: counts.get(a, 0) for a in self.order}
        self.report.raw_interleavings = multinomial(list(counts.values()))
        self.report.steps_executed = len(h.steps)
        self._record(h, r.preemptions, r.choices)
        return self._finish(started)


class Explorer(Exhaustive, Sampling):
    """Every strategy over one :class:`Runner`, collecting one :class:`Report`: :meth:`exhaustive` (and
    :meth:`search`, one part of a divided search), :meth:`random`, :meth:`pct`, :meth:`replay`.

    ``progress(done, total_or_None)`` is called after each run (for progress bars)."""


__all__ = ["DEPTH_CHECK_RUNS", "Explorer", "Sampling"]
