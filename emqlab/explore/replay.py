"""The home of the replay strategy: one run along a given schedule string (``emqlab replay``)."""

from __future__ import annotations

import time
from collections import Counter

from emqlab.explore.report import INFRASTRUCTURE, Report, multinomial
from emqlab.explore.strategy import Strategy
from emqlab.protocol.schedules import parse_schedule


class Replay(Strategy):
    """One run along a schedule over one :class:`~emqlab.engine.runner.Runner` (:meth:`replay`)."""

    name = "replay"

    def replay(self, schedule: str) -> Report:
        """One run along ``schedule`` (a schedule string); if it ends before every actor is done, the run
        continues without further preemption. Raises :class:`~emqlab.protocol.schedules.ScheduleError` for a
        schedule that does not fit the scenario or has no steps."""
        started = time.perf_counter()
        params = {"schedule": schedule}
        r = self.runner
        t = self.tally
        choices = parse_schedule(schedule, self.order, empty=False)
        try:
            r.reset()
            h = r.run(choices)
        except INFRASTRUCTURE as e:
            self._abort(e)
            t.steps_per_actor = {a: choices.count(a) for a in self.order}
            return self._report(started, params)
        counts = Counter(s.actor for s in h.steps)
        t.steps_per_actor = {a: counts.get(a, 0) for a in self.order}
        t.steps_executed = len(h.steps)
        self._record(h, r.preemptions, r.choices)
        return self._report(started, params, raw=multinomial(list(counts.values())))


__all__ = ["Replay"]
