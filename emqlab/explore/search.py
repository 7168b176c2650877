"""The in-process exploration (one call: a runner for a scenario and a strategy). The strategies are
:mod:`emqlab.explore.dpor` and :mod:`emqlab.explore.sampling`; what they find, :mod:`emqlab.explore.report`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emqlab.engine.scenario import Scenario
from emqlab.explore.checked import Runner as _CheckedRunner
from emqlab.explore.dpor import Branch, independent
from emqlab.explore.report import INFRASTRUCTURE, RUN_RETRIES, Abort, Report, Trace, multinomial
from emqlab.explore.sampling import Explorer
from emqlab.explore.shrink import shrink
from emqlab.protocol.schedules import ScheduleError, format_schedule

STRATEGIES = ("exhaustive", "random", "pct", "replay")


def explore(scenario: Scenario, mode: str, *, strategy: str = "exhaustive", conn: Any = None,
            runs: int = 100, seed: int = 0, depth: int = 2, preemptions: int | None = None,
            reduce: bool = True, schedule: str | None = None, scripts: Any = None,
            progress: Callable[[int, int | None], None] | None = None, unbounded: bool = False) -> Report:
    """One call: build a runner for ``scenario`` in ``mode`` and run ``strategy``. The preemption bound is
    ``preemptions`` if given, else the scenario's (``unbounded=True``: none). The runner's keys are deleted
    afterwards."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (one of: {', '.join(STRATEGIES)})")
    with _CheckedRunner(scenario, mode, conn, scripts=scripts) as runner:
        ex = Explorer(runner, progress=progress)
        if strategy == "exhaustive":
            bound = None if unbounded else (preemptions if preemptions is not None else scenario.preemptions)
            rep = ex.exhaustive(preemption_bound=bound, reduce=reduce)
            rep.params["bound_from"] = "none" if unbounded else ("option" if preemptions is not None else "scenario")
        elif strategy == "random":
            rep = ex.random(runs, seed)
        elif strategy == "pct":
            rep = ex.pct(runs, seed, depth)
        else:
            if not schedule:
                raise ScheduleError("replay needs a schedule string")
            rep = ex.replay(schedule)
        if strategy in ("random", "pct"):
            for kind, h in list(rep.witnesses.items()):
                rep.witnesses[kind] = shrink(runner, h, kind)
        return rep


__all__ = ["Abort", "Branch", "Explorer", "INFRASTRUCTURE", "RUN_RETRIES", "Report", "Trace", "explore",
           "format_schedule", "independent", "multinomial", "shrink"]
