"""The round-trip slider: anomaly rate, round trips per job and jobs/s of every finish mode against the RTT,
the current setting marked on both figures (:class:`RoundTripSlider`; ``docs/slider.md``)."""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import ipywidgets as W

from emqlab.timing import (
    DEFAULT_RTTS,
    MODES,
    PRESETS,
    Sweep,
    TimedResult,
    TimingConfig,
    mode_of,
    simulate,
    sweep_rtt,
)
from emqlab.ui import plots
from emqlab.ui.roundtrip import preset_of, summary
from emqlab.ui.view import View

RTT_MIN, RTT_MAX = 0.03, 250.0


def fast() -> bool:
    """True when ``$EMQLAB_FAST`` is set (CI): widgets and notebooks shrink their runs."""
    return os.environ.get("EMQLAB_FAST", "").lower() not in ("", "0", "false", "no")


def default_config() -> TimingConfig:
    """The slider's default runs: 100 jobs (30 with ``$EMQLAB_FAST``), otherwise :class:`TimingConfig`'s
    defaults."""
    return TimingConfig(jobs=30 if fast() else 100)


# -- the round-trip slider ------------------------------------------------------------------------------------


class RoundTripSlider(View):
    """RTT on a log scale (0.03–250 ms) with preset buttons (Unix socket 0.03 ms, loopback 0.05, LAN 0.2,
    cross-AZ 1, cross-region 75, slow link 250), a finish-mode toggle (atomic / split) and a fetch_next
    toggle, driving the anomaly-rate plot, the cost plot (round trips per job, jobs/s) and a one-line
    summary.

    ``sweep`` is the grid behind the plots' curves (computed with :func:`~emqlab.timing.sweep_rtt` over
    ``rtts`` × ``modes`` when not given — pass one computed earlier to start at once). The current point is a
    timed run of the selected mode at the selected RTT (cached by mode, RTT and seed).

    Controls: ``rtt`` (FloatLogSlider), ``presets`` (name → Button), ``mode`` (ToggleButtons ``"atomic"`` /
    ``"split"``), ``fetch_next`` (ToggleButton). Data: ``data`` (dict), ``summary`` (str), ``result`` (the
    current :class:`~emqlab.timing.TimedResult`), ``rate_figure`` / ``cost_figure`` and the PNG ``Image``
    widgets ``rate_image`` / ``cost_image``.
    """

    def __init__(self, config: TimingConfig | None = None, *, sweep: Sweep | None = None,
                 rtts: tuple[float, ...] | list[float] = DEFAULT_RTTS, modes: tuple[str, ...] | list[str] = MODES,
                 conn: Any = None, rtt: float = 1.0, finish: str = "atomic", fetch_next: bool = True,
                 progress: Callable[[int, int], None] | None = None) -> None:
        from emqlab.backend.connect import connect

        self.config = config or default_config()
        self.conn = conn if conn is not None else connect()
        self.sweep = sweep if sweep is not None else sweep_rtt(rtts, modes, self.config, self.conn, progress=progress)
        self._cache: dict[tuple[str, float, int], TimedResult] = {}
        self.result: TimedResult | None = None

        self.rtt = W.FloatLogSlider(value=rtt, base=10, min=math.log10(RTT_MIN), max=math.log10(RTT_MAX),
                                    step=0.01, continuous_update=False, description="RTT (ms)",
                                    readout_format=".3g", layout=W.Layout(width="520px"))
        self.presets = {name: W.Button(description=f"{name} {ms:g} ms", layout=W.Layout(width="auto"),
                                       tooltip=f"set the RTT to {ms:g} ms") for name, ms in PRESETS.items()}
        for name, button in self.presets.items():
            button.on_click(lambda _b, ms=PRESETS[name]: setattr(self.rtt, "value", ms))
        self.mode = W.ToggleButtons(options=[("atomic finish (one EVALSHA)", "atomic"),
                                             ("split finish (one command per round trip)", "split"),
                                             ("transaction (WATCH/MULTI/EXEC)", "transaction")],
                                    value=finish, description="finish",
                                    style={"button_width": "auto"})
        self.fetch_next = W.ToggleButton(value=fetch_next, description="fetch_next = 1",
                                         tooltip="the finish also fetches the next job (else a separate fetch)")
        self.label = W.HTML()
        self.rate_figure = plots.plot_rate(plots.rate_data(self.sweep), marker=rtt)
        self.cost_figure = plots.plot_cost(plots.cost_data(self.sweep), marker=rtt)
        self.rate_image = W.Image(format="png")
        self.cost_image = W.Image(format="png")
        self.widget = W.VBox([
            W.HBox(list(self.presets.values()), layout=W.Layout(flex_flow="row wrap")),
            self.rtt,
            W.HBox([self.mode, self.fetch_next]),
            self.label,
            W.HBox([self.rate_image]),
            W.HBox([self.cost_image]),
        ])
        for control in (self.rtt, self.mode, self.fetch_next):
            control.observe(lambda _change: self.refresh(), names="value")
        self.refresh()

    @property
    def finish_mode(self) -> str:
        """The selected mode: atomic, finish-then-fetch, split, split-then-fetch or transaction (which has no
        fetch-next: the toggle is disabled while it is selected)."""
        transaction = self.mode.value == "transaction"
        self.fetch_next.disabled = transaction
        return mode_of(self.mode.value, bool(self.fetch_next.value) and not transaction)

    def run(self, mode: str, rtt: float) -> TimedResult:
        """The timed run behind a point (cached)."""
        key = (mode, round(float(rtt), 6), self.config.seed)
        if key not in self._cache:
            self._cache[key] = simulate(mode, replace(self.config, rtt_ms=float(rtt)), self.conn, keep_history=False)
        return self._cache[key]

    def refresh(self) -> None:
        """Recompute the current point and update the summary and both figures (in place)."""
        rtt = float(self.rtt.value)
        mode = self.finish_mode
        self.fetch_next.description = "fetch_next = 1" if self.fetch_next.value else "fetch_next = 0"
        self.result = r = self.run(mode, rtt)
        self.label.value = f"<b>{html.escape(self.summary)}</b>"
        current = {"rtt": rtt, "mode": mode, "per_1000": r.anomalies_per_1000,
                   "round_trips_per_job": r.round_trips_per_job, "jobs_per_s": r.jobs_per_s}
        plots.update_rate(self.rate_figure, plots.rate_data(self.sweep), marker=rtt)
        plots.update_cost(self.cost_figure, plots.cost_data(self.sweep), marker=rtt)
        plots.mark_current(self.rate_figure, current, "per_1000", 0)
        plots.mark_current(self.cost_figure, current, "round_trips_per_job", 0)
        plots.mark_current(self.cost_figure, current, "jobs_per_s", 1)
        self.rate_image.value = plots.to_png(self.rate_figure)
        self.cost_image.value = plots.to_png(self.cost_figure)

    @property
    def preset(self) -> str | None:
        return preset_of(float(self.rtt.value))

    @property
    def summary(self) -> str:
        """One line (:func:`emqlab.ui.roundtrip.summary`): ``RTT 1 ms (cross-AZ) · atomic finish, fetch_next
        = 1 [atomic]: 1.00 round trips/job · 149 jobs/s · 0.0 anomalies per 1,000 jobs``."""
        assert self.result is not None
        return summary(self.result, float(self.rtt.value))

    @property
    def data(self) -> dict[str, Any]:
        """What the widget shows, as data: the current point and the plotted series."""
        r = self.result
        assert r is not None
        return {"rtt_ms": float(self.rtt.value), "preset": self.preset, "finish": self.mode.value,
                "fetch_next": bool(self.fetch_next.value), "mode": r.mode,
                "round_trips_per_job": r.round_trips_per_job, "jobs_per_s": r.jobs_per_s,
                "anomalies_per_1000": r.anomalies_per_1000, "anomalies": dict(r.anomalies),
                "expected_per_1000": r.expected_per_1000, "gap_hits": r.gap_hits, "aborts_per_job": r.aborts_per_job,
                "summary": self.summary,
                "rate": plots.rate_data(self.sweep), "cost": plots.cost_data(self.sweep),
                "result": r.to_dict()}


