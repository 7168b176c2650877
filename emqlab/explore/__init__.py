"""Exploring a scenario's interleavings: exhaustive with partial-order reduction and a preemption bound,
random and PCT samples, a replay; divided over processes (:mod:`emqlab.explore.divide`).

Imports only the layers below it (protocol, scripting, backend, engine, analysis). The names below are the
documented ``emqlab.explore`` API. They are loaded when first used, not when the package is imported: the
console script's entry takes the stop signals from :mod:`emqlab.explore.stops` before any heavy import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emqlab.explore.config import ExploreConfig
    from emqlab.explore.divide import Stats
    from emqlab.explore.dpor import independent
    from emqlab.explore.explorer import Explorer
    from emqlab.explore.report import INFRASTRUCTURE, Abort, Report, Trace, multinomial
    from emqlab.explore.run import explore
    from emqlab.explore.shrink import shrink
    from emqlab.protocol.schedules import format_schedule

#: each public name and the module that holds it
_HOMES = {"Abort": "emqlab.explore.report", "Stats": "emqlab.explore.divide", "Explorer": "emqlab.explore.explorer",
          "ExploreConfig": "emqlab.explore.config", "INFRASTRUCTURE": "emqlab.explore.report",
          "Report": "emqlab.explore.report", "Trace": "emqlab.explore.report", "explore": "emqlab.explore.run",
          "format_schedule": "emqlab.protocol.schedules", "independent": "emqlab.explore.dpor",
          "multinomial": "emqlab.explore.report", "shrink": "emqlab.explore.shrink"}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for (AttributeError otherwise)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'emqlab.explore' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = ["Abort", "ExploreConfig", "Explorer", "INFRASTRUCTURE", "Report", "Stats", "Trace", "explore",
           "format_schedule", "independent", "multinomial", "shrink"]
