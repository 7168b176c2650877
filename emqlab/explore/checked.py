"""The deterministic scheduler's public face: schedule strings (:mod:`emqlab.protocol.schedules`) and the
:class:`~emqlab.engine.runner.Runner` with emqlab's anomaly check plugged in (:func:`Runner`; kept for the
documented path ``emqlab.schedule``).

A **schedule** is the sequence of actors chosen at each scheduling point. Its string form is versioned,
short and legible: ``v1:W1*9.S1.W1*8`` (actor ids joined by dots, ``*n`` repeats), case- and
whitespace-insensitive. Replaying a schedule string gives the same history on fakeredis and on a live
server: every timestamp comes from a virtual clock (step *k* runs at ``T0 + k`` ms), every lock token is
deterministic (``W1:1`` = W1's first acquisition), and time-driven events (a lock lapsing, the stalled
interval passing) are explicit steps or clock effects, never wall-clock TTLs.
"""

from __future__ import annotations

from typing import Any

from emqlab.analysis import anomalies
from emqlab.engine.context import Check
from emqlab.engine.runner import LOCK_MS, T0, EffectRecorder, seed_commands
from emqlab.engine.runner import Runner as EngineRunner
from emqlab.engine.scenario import Scenario
from emqlab.protocol.commands import command_keys
from emqlab.protocol.schedules import (
    MAX_SCHEDULE_STEPS,
    SCHEDULE_VERSION,
    ScheduleError,
    format_schedule,
    parse_schedule,
    preemptions,
)


def Runner(scenario: Scenario, mode: str = "split", conn: Any = None, *,  # noqa: N802 - the documented name
           check: Check | None = anomalies.checker, **options: Any) -> EngineRunner:
    """The engine's :class:`~emqlab.engine.runner.Runner` for ``scenario`` in ``mode`` (the same ``options``),
    with emqlab's anomaly check (:data:`emqlab.analysis.anomalies.checker`) unless another ``check`` is
    given: what the documented ``emqlab.schedule.Runner`` gives."""
    return EngineRunner(scenario, mode, conn, check=check, **options)


__all__ = ["EffectRecorder", "LOCK_MS", "MAX_SCHEDULE_STEPS", "Runner", "SCHEDULE_VERSION", "ScheduleError", "T0",
           "command_keys", "format_schedule", "parse_schedule", "preemptions", "seed_commands"]
