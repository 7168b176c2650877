"""The home of an exploration's options: one frozen :class:`ExploreConfig` that :func:`emqlab.explore.explore`
takes, whether it runs in this process or divided over processes (:mod:`emqlab.explore.divide`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

#: the strategies an exploration can run
STRATEGIES = ("exhaustive", "random", "pct", "replay")
#: a divided search's first gap between two hand-ons, in runs; the gaps then double
#: (:class:`emqlab.explore.parts.Donor`)
DONATE_EVERY = 6


@dataclass(frozen=True)
class ExploreConfig:
    """What to explore and how.

    ``strategy``: ``exhaustive`` (every interleaving, within ``preemptions`` — default the scenario's bound;
    ``unbounded``: none — with partial-order reduction unless ``reduce`` is False), ``random`` and ``pct``
    (``runs`` runs from ``seed``; PCT at ``depth``), or ``replay`` (one run along ``schedule``).

    Dividing over processes: ``jobs`` (processes; None: the exploration runs in this process, undivided,
    unless ``max_seconds`` or ``divide`` is set, which mean one job), ``max_seconds`` (a wall-clock budget;
    the report then says what it covered), ``divide`` (True: hand subtrees on from the start; False: never;
    None: once the search outlasts a probe) and ``donate_every`` (runs between the first two hand-ons; the
    gaps then double, :class:`emqlab.explore.parts.Donor`).

    Raises ValueError for an unknown strategy, a ``runs``, ``depth`` or ``jobs`` below 1, a negative
    ``preemptions``, a ``max_seconds`` not above 0 or a ``donate_every`` below 1, and TypeError for a count
    that is no whole number."""

    strategy: str = "exhaustive"
    runs: int = 100
    seed: int = 0
    depth: int = 2
    preemptions: int | None = None
    unbounded: bool = False
    reduce: bool = True
    schedule: str | None = None
    jobs: int | None = None
    max_seconds: float | None = None
    divide: bool | None = None
    donate_every: int = DONATE_EVERY

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r} (one of: {', '.join(STRATEGIES)})")
        for name, low in (("runs", 1), ("seed", None), ("depth", 1), ("preemptions", 0), ("jobs", 1)):
            value = getattr(self, name)
            if value is None and name in ("preemptions", "jobs"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be a whole number, not {value!r}")
            if low is not None and value < low:
                raise ValueError(f"{name} must be at least {low}, not {value}")
        if self.max_seconds is not None and (isinstance(self.max_seconds, bool)
                                             or not isinstance(self.max_seconds, (int, float))
                                             or not self.max_seconds > 0):
            raise ValueError(f"max_seconds must be a number of seconds above 0, not {self.max_seconds!r}")
        if self.donate_every < 1:
            raise ValueError(f"donate_every must be at least 1 (runs between the first two hand-ons), not "
                             f"{self.donate_every}")

    @property
    def divided(self) -> bool:
        """Whether the exploration goes through the division over processes (even with one job)."""
        return self.jobs is not None or self.max_seconds is not None or self.divide is not None

    def bound(self, scenario_bound: int | None) -> int | None:
        """The preemption bound: ``preemptions`` if given, else the scenario's (``unbounded``: None)."""
        return None if self.unbounded else (self.preemptions if self.preemptions is not None else scenario_bound)

    @property
    def bound_from(self) -> str:
        """Where the preemption bound came from: ``none``, ``option`` or ``scenario`` (a report's param)."""
        return "none" if self.unbounded else ("option" if self.preemptions is not None else "scenario")

    @classmethod
    def of(cls, config: ExploreConfig | None = None, **options: Any) -> ExploreConfig:
        """``config`` (default: the defaults) with ``options`` replacing its fields. Raises TypeError for an
        option that is no field, naming the valid ones."""
        names = [f.name for f in dataclasses.fields(cls)]
        wrong = sorted(set(options) - set(names))
        if wrong:
            raise TypeError(f"unknown exploration option{'s' if len(wrong) > 1 else ''} {', '.join(wrong)}"
                            f" (the options are: {', '.join(names)})")
        base = config if config is not None else cls()
        return dataclasses.replace(base, **options) if options else base


__all__ = ["DONATE_EVERY", "ExploreConfig", "STRATEGIES"]
