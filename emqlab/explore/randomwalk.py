"""The home of the random strategy: each run chooses the next actor uniformly among the enabled ones
(a seeded random walk over the schedules; the CLI's ``--strategy random``)."""

from __future__ import annotations

import random
import time

from emqlab.explore.report import INFRASTRUCTURE, Report, multinomial
from emqlab.explore.strategy import Strategy


class RandomWalk(Strategy):
    """Seeded random runs over one :class:`~emqlab.engine.runner.Runner` (:meth:`random`)."""

    name = "random"

    def random(self, runs: int, seed: int = 0) -> Report:
        """``runs`` runs, each choosing uniformly among the enabled actors (seeded). The interleavings
        figure is the multinomial estimate from the most steps each actor took in any run."""
        started = time.perf_counter()
        rng = random.Random(seed)
        t = self.tally
        for _ in range(runs if self._measure_default() else 0):
            r = self.runner
            try:
                r.reset()
                h = r.run(choose=lambda rr: rng.choice(rr.enabled))
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            t.steps_executed += len(h.steps)
            self._record(h, r.preemptions, r.choices)
        self._shrink_witnesses()
        return self._report(started, {"runs": runs, "seed": seed},
                            raw=multinomial(list(t.steps_per_actor.values())))


__all__ = ["RandomWalk"]
