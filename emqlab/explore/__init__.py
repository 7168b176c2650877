"""Exploring a scenario's interleavings: exhaustive with partial-order reduction and a preemption bound,
random and PCT samples, a replay; divided over processes (:mod:`emqlab.explore.parallel`).

Imports only the layers below it (protocol, scripting, backend, engine, analysis). The names below are the
documented ``emqlab.explore`` API.
"""

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

__all__ = ["Abort", "Explorer", "INFRASTRUCTURE", "Report", "Trace", "explore",
           "format_schedule", "independent", "multinomial", "shrink"]
