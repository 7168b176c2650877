"""The home of what every exploration strategy shares: one :class:`Strategy` runs over one
:class:`~emqlab.engine.runner.Runner`, tallies each run into a :class:`~emqlab.explore.report.Part`
(:meth:`Strategy._record`), counts the runs that infrastructure errors aborted or retried, and builds its
:class:`~emqlab.explore.report.Report` with :meth:`Report.merge` from that one part (:meth:`Strategy._report`),
as a divided exploration builds one from many.

The strategies, one module each: :class:`emqlab.explore.dpor.Exhaustive`,
:class:`emqlab.explore.randomwalk.RandomWalk`, :class:`emqlab.explore.pct.PCT`,
:class:`emqlab.explore.replay.Replay`; :class:`emqlab.explore.explorer.Explorer` offers them all over one runner.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from emqlab.backend.connect import FaultScope
from emqlab.engine.history import History
from emqlab.engine.runner import Runner
from emqlab.explore.report import INFRASTRUCTURE, RUN_RETRIES, Abort, Part, Report
from emqlab.protocol.outcome import Outcome
from emqlab.protocol.schedules import format_schedule

#: ``progress(done, total_or_None)``: called after each run (for progress bars)
Progress = Callable[[int, int | None], None]


class Strategy:
    """What every strategy shares over one :class:`Runner`: the tally of its runs (``tally``, a
    :class:`Part`; :meth:`part` hands out a copy), a ``deadline``, and the report built from the tally.

    ``progress(done, total_or_None)`` is called after each run (for progress bars)."""

    #: the strategy's name in reports (``Report.strategy``)
    name: ClassVar[str] = ""

    def __init__(self, runner: Runner, *, progress: Progress | None = None) -> None:
        from emqlab.backend.connect import describe

        self.runner = runner
        self.progress = progress
        self.order = [a.id for a in runner.scenario.actors]
        self.backend = describe(runner.conn)
        #: what the runs found so far (counters, aborted runs, the stopping cause)
        self.tally = Part(0)
        self._results: dict[str, Counter[str]] = {a: Counter() for a in self.order}
        self._codes: dict[str, Counter[Outcome]] = {a: Counter() for a in self.order}
        self._best: dict[str, tuple[int, int, tuple[int, ...], list[str], History]] = {}
        #: stop (``complete`` False) once ``time.time()`` passes this
        self.deadline: float | None = None

    def _rank(self, choices: Sequence[str]) -> tuple[int, ...]:
        idx = {a: i for i, a in enumerate(self.order)}
        return tuple(idx[c] for c in choices)

    def _record(self, h: History, preempt: int, choices: Sequence[str], weight: int = 1) -> None:
        t = self.tally
        t.explored += 1
        counts = Counter(s.actor for s in h.steps)
        for a, n in counts.items():
            if n > t.steps_per_actor.get(a, 0):
                t.steps_per_actor[a] = n
        for k in h.kinds:
            t.runs_with[k] = t.runs_with.get(k, 0) + 1
            t.interleavings_with[k] = t.interleavings_with.get(k, 0) + weight
            key = (preempt, len(h.steps), self._rank(choices))
            best = self._best.get(k)
            if best is None or key < best[:3]:
                self._best[k] = (*key, list(choices), h)
        t.outcomes.add(h.final.logical())
        for s in h.steps:
            t.scripts_run.update(s.scripts)
        for actor, res in h.results.items():
            for r in res:
                self._results[actor][str(r)] += 1
                if r.kind in ("finish", "cancel") and r.outcome is not None:
                    self._codes[actor][r.outcome] += 1
        if self.progress:
            self.progress(t.explored, None)

    def _retry(self, error: BaseException, tries: int) -> bool:
        """Whether to run the run an :data:`INFRASTRUCTURE` error just ended again, from its start, along the
        same choices: a run-scoped fault (a passing OOM, another client's BUSY script) may not recur, and a
        run that then completes is as true as any other (counted in ``retried``)."""
        cause, scope = Abort.of(error)
        if scope is not FaultScope.RUN or tries >= RUN_RETRIES:
            return False
        self.tally.retried[cause] = self.tally.retried.get(cause, 0) + 1
        return True

    def _abort(self, error: BaseException) -> bool:
        """Count the run an :data:`INFRASTRUCTURE` error ended: True when only that run is lost (it is in
        ``aborted``; the exploration goes on), False when the exploration must stop (``stopped``)."""
        cause, scope = Abort.of(error)
        t = self.tally
        if scope is FaultScope.RUN:
            t.aborted[cause] = t.aborted.get(cause, 0) + 1
            return True
        t.stopped = cause
        t.complete = False
        return False

    def _measure_default(self) -> bool:
        """The default run's step counts (a sampled strategy's estimate of the interleavings); False when an
        infrastructure error stopped the exploration (an aborted run leaves the counts to the sampled runs)."""
        r = self.runner
        try:
            r.reset()
            h = r.run()
        except INFRASTRUCTURE as e:
            return self._abort(e)
        counts = Counter(s.actor for s in h.steps)
        self.tally.steps_per_actor = {a: counts.get(a, 0) for a in self.order}
        return True

    def part(self, index: int = 0) -> Part:
        """What this search found so far, as a :class:`Part` (numbered ``index``; a copy): its counts, final
        states, results, aborted runs, and per anomaly its best witness key (preemptions, steps, rank, the
        witness's schedule, the schedule of the run that showed it). :meth:`Report.merge` adds parts up."""
        t = self.tally
        return Part(index, complete=t.complete, explored=t.explored, blocked=t.blocked,
                    outside_bound=t.outside_bound, repeated=t.repeated, raw=t.raw if self.name == "exhaustive" else 0,
                    steps_executed=t.steps_executed, steps_per_actor=dict(t.steps_per_actor),
                    runs_with=dict(t.runs_with), interleavings_with=dict(t.interleavings_with),
                    best={k: (pre, n, rank, format_schedule(choices), h.schedule)
                          for k, (pre, n, rank, choices, h) in self._best.items()},
                    outcomes=set(t.outcomes), scripts_run=set(t.scripts_run),
                    results={a: dict(c) for a, c in self._results.items() if c},
                    codes={a: dict(c) for a, c in self._codes.items() if c}, aborted=dict(t.aborted),
                    stopped=t.stopped, retried=dict(t.retried), traces=dict(t.traces))

    def _report(self, started: float, params: dict[str, Any], *, raw: int | None = None,
                reduction: str | None = None, warnings: Sequence[str] = (),
                replay_witnesses: bool = False) -> Report:
        """The report of this search (:meth:`Report.merge` of its one :meth:`part`). Each witness is the run
        that showed it; with ``replay_witnesses`` (an exhaustive search, whose witness is the least
        interleaving of that run's trace) it is that interleaving, run again, when it still shows the
        anomaly."""
        replay = self._replay if replay_witnesses and self.tally.stopped is None else self._shown
        off = self.runner.same_server.off  # (restart detection is off on this server: said once, here)
        return Report.merge([self.part()], scenario=self.runner.scenario.name, mode=self.runner.mode,
                            strategy=self.name, backend=self.backend, order=self.order, replay=replay,
                            params=params, raw=raw, reduction=reduction,
                            warnings=[*([off] if off else []), *warnings],
                            elapsed_s=time.perf_counter() - started)

    def _shrink_witnesses(self) -> None:
        """Shrink each anomaly's witness (:func:`emqlab.explore.shrink.shrink`; a sampled strategy's, before it
        is reported) and key it by the shrunk run, so that its preemptions and steps are the witness's own and
        parts compare their shrunk witnesses."""
        from emqlab.explore.shrink import shrink
        from emqlab.protocol.schedules import parse_schedule

        for kind, (*_key, h) in list(self._best.items()):
            shrunk, pre = shrink(self.runner, h, kind)
            if pre is not None:
                choices = parse_schedule(shrunk.schedule)
                self._best[kind] = (pre, len(shrunk.steps), self._rank(choices), choices, shrunk)

    def _shown(self, kind: str, _schedule: str, _ran: str) -> History:
        return self._best[kind][4]

    def _replay(self, kind: str, _schedule: str, _ran: str) -> History:
        *_key, choices, h = self._best[kind]
        if choices == [s.actor for s in h.steps]:
            return h
        r = self.runner
        try:
            r.reset()
            replayed = r.run(choices)
        except INFRASTRUCTURE:  # the run that showed it stands (a true history, one more step or so)
            return h
        return replayed if kind in replayed.kinds else h


__all__ = ["Progress", "Strategy"]
