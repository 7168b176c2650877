"""The home of :class:`Explorer`, every strategy over one runner (the documented name): each call runs one
strategy (:mod:`emqlab.explore.strategy` lists them) on the explorer's runner and returns its report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from emqlab.engine.runner import Runner
from emqlab.explore.dpor import Exhaustive
from emqlab.explore.pct import PCT
from emqlab.explore.randomwalk import RandomWalk
from emqlab.explore.replay import Replay
from emqlab.explore.report import Part, Report
from emqlab.explore.strategy import Progress, Strategy
from emqlab.explore.tree import Branch

S = TypeVar("S", bound=Strategy)


class Explorer:
    """Every strategy over one :class:`Runner`: :meth:`exhaustive` (and :meth:`search`, one part of a
    divided search), :meth:`random`, :meth:`pct`, :meth:`replay`. Each call starts a new strategy (nothing
    is carried from one call to the next); :meth:`part` is what the last one found.

    ``progress(done, total_or_None)`` is called after each run (for progress bars); a ``deadline`` (a
    ``time.time()``) stops an exhaustive search there, incomplete."""

    def __init__(self, runner: Runner, *, progress: Progress | None = None) -> None:
        self.runner = runner
        self.progress = progress
        self.order = [a.id for a in runner.scenario.actors]
        self.deadline: float | None = None
        self._last: Strategy | None = None

    def _start(self, kind: type[S]) -> S:
        strategy = kind(self.runner, progress=self.progress)
        strategy.deadline = self.deadline
        self._last = strategy
        return strategy

    def exhaustive(self, *, preemption_bound: int | None = None, reduce: bool = True,
                   max_runs: int | None = None) -> Report:
        """:meth:`emqlab.explore.dpor.Exhaustive.exhaustive`."""
        return self._start(Exhaustive).exhaustive(preemption_bound=preemption_bound, reduce=reduce,
                                                  max_runs=max_runs)

    def search(self, root: Sequence[str] = (), branch: Branch | None = None, *, bound: int | None = None,
               max_runs: int | None = None, donate: Callable[[list[Any], int], None] | None = None) -> Part:
        """:meth:`emqlab.explore.dpor.Exhaustive.search`."""
        return self._start(Exhaustive).search(root, branch, bound=bound, max_runs=max_runs, donate=donate)

    def random(self, runs: int, seed: int = 0) -> Report:
        """:meth:`emqlab.explore.randomwalk.RandomWalk.random`."""
        return self._start(RandomWalk).random(runs, seed)

    def pct(self, runs: int, seed: int = 0, depth: int = 2, *, check_depth: bool = True) -> Report:
        """:meth:`emqlab.explore.pct.PCT.pct`."""
        return self._start(PCT).pct(runs, seed, depth, check_depth=check_depth)

    def replay(self, schedule: str) -> Report:
        """:meth:`emqlab.explore.replay.Replay.replay`."""
        return self._start(Replay).replay(schedule)

    def part(self, index: int = 0) -> Part:
        """What the last strategy run found, as a :class:`Part` (an empty one before any)."""
        return self._last.part(index) if self._last is not None else Part(index)


__all__ = ["Explorer"]
