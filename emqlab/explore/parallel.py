"""Kept for the old path ``emqlab.parallel`` while the explore layer is rebuilt; the code is in
:mod:`emqlab.explore.divide`, :mod:`emqlab.explore.pool` and :mod:`emqlab.explore.parts`."""

from __future__ import annotations

from emqlab.explore.divide import PROBE_RUNS, SWARM_CHUNK, Stats, check_case, explore, progress_bar
from emqlab.explore.parts import DONATE_EVERY, Donor, Job, Task, run_part
from emqlab.explore.pool import (
    WARM_AFTER_S,
    ExecutorUnreachable,
    InlineExecutor,
    ParallelError,
    default_jobs,
    make_executor,
    start_method,
    url_of,
)
from emqlab.explore.report import Part

__all__ = ["DONATE_EVERY", "Donor", "ExecutorUnreachable", "InlineExecutor", "Job", "PROBE_RUNS", "ParallelError",
           "Part", "SWARM_CHUNK", "Stats", "Task", "WARM_AFTER_S", "check_case", "default_jobs", "explore",
           "make_executor", "progress_bar", "run_part", "start_method", "url_of"]
