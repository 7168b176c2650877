"""The home of :func:`explore`, the one way to explore a scenario: in this process, or divided over
processes (:mod:`emqlab.explore.divide`) when the :class:`~emqlab.explore.config.ExploreConfig` asks for it.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from emqlab.analysis.anomalies import checker
from emqlab.engine.context import MODES
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import Scenario
from emqlab.explore.config import ExploreConfig
from emqlab.explore.divide import Stats, explore_divided
from emqlab.explore.explorer import Explorer
from emqlab.explore.report import Report
from emqlab.explore.stops import interrupts_kept
from emqlab.protocol.schedules import ScheduleError, parse_schedule


def explore(scenario: Scenario, mode: str, config: ExploreConfig | None = None, *, conn: Any = None,
            url: str | None = None, scripts: Any = None, executor: str | cf.Executor | None = None,
            progress: Callable[[int, int | None], None] | None = None, stats: Stats | None = None,
            **options: Any) -> Report:
    """Explore ``scenario`` in ``mode`` as ``config`` says (default :class:`ExploreConfig`), its fields
    replaced by ``options`` (``explore(sc, "split", runs=40, seed=7, strategy="random")``), with emqlab's
    anomaly check (:data:`emqlab.analysis.anomalies.checker`).

    In this process, on a runner over ``conn`` (default: a fakeredis server; its keys are deleted
    afterwards), unless the config asks for a division (``jobs``, ``max_seconds`` or ``divide`` set) or an
    ``executor`` is given: then an exhaustive, random or PCT exploration is divided over processes
    (:func:`emqlab.explore.divide.explore_divided`: workers connect to ``url``, default ``conn``'s; ``stats``
    is filled in). ``progress(done, total_or_None)`` is called as it goes: runs here (total None); divided,
    parts finished of parts known so far (the total grows as parts are handed on).

    Raises TypeError for an option that is no :class:`ExploreConfig` field, ValueError for a bad config or
    a ``mode`` that is none of :data:`emqlab.engine.context.MODES`,
    :class:`~emqlab.protocol.schedules.ScheduleError` for a replay without a schedule, one of no steps
    (``v1:``) or one that does not fit (before any key is written)."""
    with interrupts_kept():  # (a notebook's interrupt that a finalizer swallowed still stops it)
        return _explore(scenario, mode, config, conn=conn, url=url, scripts=scripts, executor=executor,
                        progress=progress, stats=stats, **options)


def _explore(scenario: Scenario, mode: str, config: ExploreConfig | None, *, conn: Any, url: str | None,
             scripts: Any, executor: str | cf.Executor | None, progress: Callable[[int, int | None], None] | None,
             stats: Stats | None, **options: Any) -> Report:
    config = ExploreConfig.of(config, **options)
    if mode not in MODES:  # (an unknown mode would run as the atomic finish and claim it holds)
        raise ValueError(f"unknown mode {mode!r} (one of: {', '.join(MODES)})")
    if config.strategy == "replay":  # (before a queue is claimed: a bad schedule writes nothing)
        if not config.schedule:
            raise ScheduleError("replay needs a schedule string")
        parse_schedule(config.schedule, [a.id for a in scenario.actors], empty=False)
    if config.strategy != "replay" and (config.divided or executor is not None):
        return explore_divided(scenario, mode, config, conn=conn, url=url, scripts=scripts, executor=executor,
                               progress=progress, stats=stats)
    return _explore_here(scenario, mode, config, conn=conn, scripts=scripts, progress=progress)


def _explore_here(scenario: Scenario, mode: str, config: ExploreConfig, *, conn: Any,
                  scripts: Any, progress: Callable[[int, int | None], None] | None) -> Report:
    """The exploration in this process, undivided, on one runner (its keys deleted afterwards)."""
    strategy = config.strategy
    with Runner(scenario, mode, conn, scripts=scripts, check=checker) as runner:
        ex = Explorer(runner, progress=progress)
        if strategy == "exhaustive":
            rep = ex.exhaustive(preemption_bound=config.bound(scenario.preemptions), reduce=config.reduce)
            return replace(rep, params={**rep.params, "bound_from": config.bound_from})
        if strategy == "replay":
            assert config.schedule is not None
            return ex.replay(config.schedule)
        return ex.random(config.runs, config.seed) if strategy == "random" else ex.pct(config.runs, config.seed,
                                                                                         config.depth)


def check_case(scenario: Scenario, mode: str) -> tuple[list[str], dict[str, set[Any]]]:
    """One case of ``emqlab scenarios --check``, in a worker: the anomaly kinds an exhaustive exploration of
    ``scenario`` in ``mode`` finds (fakeredis), and the return codes each actor's finish saw."""
    rep = explore(scenario, mode)
    return rep.anomaly_kinds, {a: {o.code for o in c} for a, c in rep.codes.items()}


__all__ = ["check_case", "explore"]
