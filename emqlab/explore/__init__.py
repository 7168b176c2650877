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
    from emqlab.explore.search import (
        INFRASTRUCTURE,
        Abort,
        Explorer,
        Report,
        Trace,
        explore,
        format_schedule,
        independent,
        multinomial,
        shrink,
    )

#: each public name and the module that holds it
_HOMES = {"Abort": "emqlab.explore.search", "Explorer": "emqlab.explore.search",
          "INFRASTRUCTURE": "emqlab.explore.search", "Report": "emqlab.explore.search",
          "Trace": "emqlab.explore.search", "explore": "emqlab.explore.search",
          "format_schedule": "emqlab.explore.search", "independent": "emqlab.explore.search",
          "multinomial": "emqlab.explore.search", "shrink": "emqlab.explore.search"}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for (AttributeError otherwise)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'emqlab.explore' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = ["Abort", "Explorer", "INFRASTRUCTURE", "Report", "Trace", "explore",
           "format_schedule", "independent", "multinomial", "shrink"]
