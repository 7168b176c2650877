"""The home of what every exploration strategy shares: one :class:`Strategy` runs over one
:class:`~emqlab.engine.runner.Runner` and tallies each run into its :class:`~emqlab.explore.report.Report`
(:meth:`Strategy._record`), counts the runs that infrastructure errors aborted or retried, and says what it
found as a :class:`~emqlab.explore.report.Part` (:meth:`Strategy.part`). The strategies are
:class:`emqlab.explore.dpor.Exhaustive` and :class:`emqlab.explore.sampling.Sampling`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from emqlab.backend.connect import FaultScope
from emqlab.engine.history import History
from emqlab.engine.runner import Runner
from emqlab.explore.report import INFRASTRUCTURE, RUN_RETRIES, Abort, Part, Report, multinomial
from emqlab.protocol.outcome import Outcome
from emqlab.protocol.schedules import format_schedule


class Strategy:
    """What every strategy shares over one :class:`Runner`: the :class:`Report` it fills (``report``, else a
    new one), the tallies behind it (:meth:`part`), and a ``deadline``.

    ``progress(done, total_or_None)`` is called after each run (for progress bars)."""

    def __init__(self, runner: Runner, *, progress: Callable[[int, int | None], None] | None = None,
                 report: Report | None = None) -> None:
        self.runner = runner
        self.progress = progress
        from emqlab.backend.connect import describe

        sc = runner.scenario
        self.order = [a.id for a in sc.actors]
        #: what the strategy finds goes here (``report``: a report to add to, e.g. a merged one)
        self.report = report if report is not None else Report(sc.name, runner.mode, "", describe(runner.conn))
        self._results: dict[str, Counter[str]] = {a.id: Counter() for a in sc.actors}
        self._codes: dict[str, Counter[Outcome]] = {a.id: Counter() for a in sc.actors}
        self._best: dict[str, tuple[int, int, tuple[int, ...], list[str], History]] = {}
        #: stop (``complete`` False) once ``time.time()`` passes this
        self.deadline: float | None = None

    def _rank(self, choices: Sequence[str]) -> tuple[int, ...]:
        idx = {a: i for i, a in enumerate(self.order)}
        return tuple(idx[c] for c in choices)

    def _record(self, h: History, preempt: int, choices: Sequence[str], weight: int = 1) -> None:
        rep = self.report
        rep.explored += 1
        counts = Counter(s.actor for s in h.steps)
        for a, n in counts.items():
            if n > rep.steps_per_actor.get(a, 0):
                rep.steps_per_actor[a] = n
        for k in h.kinds:
            rep.runs_with[k] = rep.runs_with.get(k, 0) + 1
            rep.interleavings_with[k] = rep.interleavings_with.get(k, 0) + weight
            key = (preempt, len(h.steps), self._rank(choices))
            best = self._best.get(k)
            if best is None or key < best[:3]:
                self._best[k] = (*key, list(choices), h)
        rep.outcomes.add(h.final.logical())
        for actor, res in h.results.items():
            for r in res:
                self._results[actor][str(r)] += 1
                if r.kind in ("finish", "cancel") and r.outcome is not None:
                    self._codes[actor][r.outcome] += 1
        if self.progress:
            self.progress(rep.explored, None)

    def _retry(self, error: BaseException, tries: int) -> bool:
        """Whether to run the run an :data:`INFRASTRUCTURE` error just ended again, from its start, along the
        same choices: a run-scoped fault (a passing OOM, another client's BUSY script) may not recur, and a
        run that then completes is as true as any other (counted in ``retried``)."""
        cause, scope = Abort.of(error)
        if scope is not FaultScope.RUN or tries >= RUN_RETRIES:
            return False
        self.report.retried[cause] = self.report.retried.get(cause, 0) + 1
        return True

    def _abort(self, error: BaseException) -> bool:
        """Count the run an :data:`INFRASTRUCTURE` error ended: True when only that run is lost (it is in
        ``aborted``; the exploration goes on), False when the exploration must stop (``stopped``)."""
        cause, scope = Abort.of(error)
        rep = self.report
        if scope is FaultScope.RUN:
            rep.aborted[cause] = rep.aborted.get(cause, 0) + 1
            return True
        rep.stopped = cause
        rep.complete = False
        return False

    def _finish(self, started: float, *, replay_witnesses: bool = False) -> Report:
        rep = self.report
        for k, (pre, _n, _rank, choices, h) in sorted(self._best.items()):
            w = h
            if replay_witnesses and rep.stopped is None and choices != [s.actor for s in h.steps]:
                r = self.runner
                try:
                    r.reset()
                    replayed = r.run(choices)
                except INFRASTRUCTURE:  # the run that showed it stands (a true history, one more step or so)
                    replayed = h
                if k in replayed.kinds:
                    w = replayed
            rep.witnesses[k] = w
            rep.min_preemptions[k] = pre
        rep.elapsed_s = time.perf_counter() - started
        rep.distinct_outcomes = len(rep.outcomes)
        rep.results = {a: dict(sorted(c.items())) for a, c in self._results.items() if c}
        rep.codes = {a: dict(sorted(c.items(), key=lambda kv: str(kv[0]))) for a, c in self._codes.items() if c}
        return rep

    def _measure_default(self) -> bool:
        """The default run's step counts (the estimate's multinomial); False when an infrastructure error
        stopped the exploration (an aborted run leaves the counts to the sampled runs)."""
        r = self.runner
        try:
            r.reset()
            h = r.run()
        except INFRASTRUCTURE as e:
            return self._abort(e)
        counts = Counter(s.actor for s in h.steps)
        self.report.steps_per_actor = {a.id: counts.get(a.id, 0) for a in r.scenario.actors}
        self.report.raw_interleavings = multinomial(list(counts.values()))
        self.report.raw_exact = False
        return True

    def part(self, index: int = 0) -> Part:
        """What this search found so far, as a :class:`Part` (numbered ``index``): its counts, final states,
        results, aborted runs, and per anomaly its best witness key (preemptions, steps, rank, the witness's
        schedule, the schedule of the run that showed it). :meth:`Report.merge` adds parts up."""
        rep = self.report
        return Part(index, complete=rep.complete, explored=rep.explored, pruned=rep.pruned,
                    outside_bound=rep.outside_bound,
                    raw=rep.raw_interleavings if rep.strategy == "exhaustive" else 0,
                    steps_executed=rep.steps_executed, steps_per_actor=dict(rep.steps_per_actor),
                    runs_with=dict(rep.runs_with), interleavings_with=dict(rep.interleavings_with),
                    best={k: (pre, n, rank, format_schedule(choices), h.schedule)
                          for k, (pre, n, rank, choices, h) in self._best.items()},
                    outcomes=set(rep.outcomes), results={a: dict(c) for a, c in self._results.items() if c},
                    codes={a: dict(c) for a, c in self._codes.items() if c}, aborted=dict(rep.aborted),
                    stopped=rep.stopped, retried=dict(rep.retried))


__all__ = ["Strategy"]
