"""The home of sweeps over the round-trip time: every finish mode at every RTT (:func:`sweep_rtt`), the grid
of :class:`~emqlab.timing.run.TimedResult` it gives (:class:`Sweep`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import redis

from emqlab.timing.model import DEFAULT_RTTS, MODES, TimingConfig, parts_of
from emqlab.timing.run import TimedResult, simulate


@dataclass
class Sweep:
    """A grid of timed runs: every mode at every RTT (same seed and config otherwise)."""

    modes: list[str]
    rtts: list[float]
    config: dict[str, Any]
    results: list[TimedResult]
    wall_s: float = 0.0

    def get(self, mode: str, rtt: float) -> TimedResult:
        for r in self.results:
            if r.mode == mode and math.isclose(r.rtt_ms, rtt):
                return r
        raise KeyError((mode, rtt))

    def series(self, metric: str) -> dict[str, list[float]]:
        """``{mode: [value at each RTT]}`` for a :class:`TimedResult` field (``"anomalies_per_1000"``,
        ``"round_trips_per_job"``, ``"jobs_per_s"``, ``"expected_per_1000"``, …)."""
        return {m: [float(getattr(self.get(m, x), metric)) for x in self.rtts] for m in self.modes}

    def rows(self) -> list[dict[str, Any]]:
        """Flat rows for a table or CSV."""
        out = []
        for r in self.results:
            row = {"mode": r.mode, "rtt_ms": r.rtt_ms, "round_trips_per_job": round(r.round_trips_per_job, 3),
                   "aborts_per_job": round(r.aborts_per_job, 3),
                   "jobs_per_s": round(r.jobs_per_s, 2), "anomalies_per_1000": round(r.anomalies_per_1000, 2),
                   "expected_per_1000": round(r.expected_per_1000, 2), "anomalies": r.anomaly_total,
                   "gap_hits": r.gap_hits, "finishes": r.finishes, "executions": r.executions, "jobs": r.jobs,
                   "unfinished": r.unfinished_total, "workers": r.workers,
                   "sweep_runs": r.sweep_runs, "makespan_ms": round(r.makespan_ms, 2), "seed": r.seed,
                   "truncated": r.truncated}
            for kind in sorted({k for x in self.results for k in x.anomalies}):
                row[kind] = r.anomalies.get(kind, 0)
            out.append(row)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"modes": self.modes, "rtts": self.rtts, "config": self.config,
                "results": [r.to_dict() for r in self.results], "wall_s": round(self.wall_s, 3)}


def _cell(mode: str, cfg: TimingConfig, url: str | None) -> TimedResult:
    """One run of a sweep's grid in a worker process (fakeredis there, or the live server at ``url``)."""
    from emqlab.backend.connect import connect

    conn = connect(url)
    try:
        return simulate(mode, cfg, conn, keep_history=False)
    finally:
        conn.close()


def sweep_rtt(rtts: Iterable[float] = DEFAULT_RTTS, modes: Sequence[str] = MODES,
              config: TimingConfig | None = None, conn: redis.Redis | None = None, *,
              progress: Callable[[int, int], None] | None = None, processes: int = 1,
              **overrides: Any) -> Sweep:
    """Every mode at every RTT. ``progress(done, total)`` counts jobs finished over the whole grid (total =
    runs x jobs). One backend connection is reused (each run claims and deletes its own queue). With
    ``processes`` > 1 the runs of the grid go to a local pool (:func:`emqlab.explore.pool.run_in_order`), each
    on a fakeredis of its worker's or, on a live server, under its own queue; every run is a pure function
    of the mode and the configuration (virtual time, seeded draws), so the sweep is the same. A stop signal
    (Ctrl-C; SIGTERM or SIGHUP under the CLI) stops the runs in flight there too, each deleting its keys,
    before it is raised here, whether the workers were sent it or this process alone."""
    from emqlab.backend.connect import connect

    started = time.perf_counter()
    cfg = replace(config or TimingConfig(), **overrides)
    rtt_list = [float(x) for x in rtts]
    mode_list = list(modes)
    for m in mode_list:
        parts_of(m)
    conn = conn if conn is not None else connect()
    total = len(rtt_list) * len(mode_list) * cfg.jobs
    results: list[TimedResult] = []
    if processes > 1:
        from emqlab.explore.pool import run_in_order, url_of

        url = url_of(conn)

        def done(i: int, _result: TimedResult) -> None:
            if progress:
                progress((i + 1) * cfg.jobs, total)

        calls = [(m, replace(cfg, rtt_ms=x), url) for m in mode_list for x in rtt_list]
        results = run_in_order(_cell, calls, processes, live=url is not None, each=done)
        return Sweep(mode_list, rtt_list, _shared(cfg), results, time.perf_counter() - started)
    for m in mode_list:
        for x in rtt_list:
            base = len(results) * cfg.jobs

            def each(done: int, _total: int, base: int = base) -> None:
                if progress:
                    progress(min(base + done, total), total)

            results.append(simulate(m, replace(cfg, rtt_ms=x), conn, keep_history=False, progress=each))
            if progress:
                progress(len(results) * cfg.jobs, total)
    return Sweep(mode_list, rtt_list, _shared(cfg), results, time.perf_counter() - started)


def _shared(cfg: TimingConfig) -> dict[str, Any]:
    """The configuration every run of a grid shares: all but the RTT, which is each run's own (``rtts``)."""
    return {k: v for k, v in asdict(cfg).items() if k != "rtt_ms"}


__all__ = ["Sweep", "sweep_rtt"]
