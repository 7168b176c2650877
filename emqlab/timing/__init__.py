"""The timed model: virtual-time runs where each command costs a round trip, and sweeps of them over the
round-trip time.

Imports only the layers below it. The names below are the documented ``emqlab.timing`` API.
"""

from emqlab.timing.model import (
    ALL_MODES,
    DEFAULT_RTTS,
    MODES,
    PRESETS,
    TimingConfig,
    mode_of,
    model_round_trips,
    parts_of,
    timed_scenario,
)
from emqlab.timing.run import TimedResult, TimedRun, simulate
from emqlab.timing.sweep import Sweep, sweep_rtt

__all__ = ["ALL_MODES", "DEFAULT_RTTS", "MODES", "PRESETS", "Sweep", "TimedResult", "TimedRun", "TimingConfig",
           "mode_of", "model_round_trips", "parts_of", "simulate", "sweep_rtt", "timed_scenario"]
