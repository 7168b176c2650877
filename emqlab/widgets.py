"""ipywidgets for the workshop: the round-trip slider and the scheduler stepper ("you are the scheduler").

Each widget is a thin view over functions that return data (:func:`emqlab.timing.simulate` and
:func:`~emqlab.timing.sweep_rtt`; a :class:`~emqlab.schedule.Runner`), and exposes what it shows as plain
data — ``widget.data`` and ``widget.summary`` — so it can be driven without a browser: set ``.value`` on its
controls, call ``.click()`` on its buttons, and assert on the data::

    s = RoundTripSlider(TimingConfig(jobs=20))
    s.rtt.value = 75
    s.data["round_trips_per_job"]      # 1.0 (atomic, fetch_next = 1)
    s.mode.value = "split"
    s.summary                          # 'RTT 75 ms (cross-region) · split finish …'

Figures are created once (:mod:`emqlab.plots`), updated in place when a control changes, and shown as PNG
in an ``Image`` widget (no ipympl needed; nothing is drawn per slider tick: ``continuous_update=False``).
Display a widget by leaving it as the last expression of a cell (or ``display(w)``).
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import ipywidgets as W

from . import plots
from .explore import multinomial
from .scenario import Scenario, load
from .schedule import Runner, parse_schedule
from .timing import DEFAULT_RTTS, MODES, PRESETS, Sweep, TimedResult, TimingConfig, mode_of, simulate, sweep_rtt

RTT_MIN, RTT_MAX = 0.03, 250.0


def fast() -> bool:
    """True when ``$EMQLAB_FAST`` is set (CI): widgets and notebooks shrink their runs."""
    return os.environ.get("EMQLAB_FAST", "").lower() not in ("", "0", "false", "no")


def default_config() -> TimingConfig:
    """The slider's default runs: 100 jobs (30 with ``$EMQLAB_FAST``), otherwise :class:`TimingConfig`'s
    defaults."""
    return TimingConfig(jobs=30 if fast() else 100)


def _preset_of(rtt: float) -> str | None:
    for name, ms in PRESETS.items():
        if math.isclose(ms, rtt, rel_tol=1e-3):
            return name
    return None


class _View:
    """Displays as its ``widget`` (a VBox)."""

    widget: W.Widget

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


# -- the round-trip slider ------------------------------------------------------------------------------------


class RoundTripSlider(_View):
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
        from .backends import connect

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
                                             ("split finish (one command per round trip)", "split")],
                                    value=finish, description="finish")
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
        """The selected mode: atomic, finish-then-fetch, split or split-then-fetch."""
        return mode_of(self.mode.value, bool(self.fetch_next.value))

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
        _mark_current(self.rate_figure, current, "per_1000", 0)
        _mark_current(self.cost_figure, current, "round_trips_per_job", 0)
        _mark_current(self.cost_figure, current, "jobs_per_s", 1)
        self.rate_image.value = plots.to_png(self.rate_figure)
        self.cost_image.value = plots.to_png(self.cost_figure)

    @property
    def preset(self) -> str | None:
        return _preset_of(float(self.rtt.value))

    @property
    def summary(self) -> str:
        """One line: ``RTT 1 ms (cross-AZ) · atomic finish, fetch_next = 1: 1.00 round trips/job · 149 jobs/s ·
        0 anomalies per 1,000 jobs``."""
        r = self.result
        assert r is not None
        rtt = float(self.rtt.value)
        where = f" ({self.preset})" if self.preset else ""
        kinds = "".join(f"{k} {n}; " for k, n in r.anomalies.items())
        extra = f" ({kinds}the window model expects {r.expected_per_1000:.1f})" if r.mode.startswith("split") else ""
        return (f"RTT {rtt:.3g} ms{where} · {self.mode.value} finish, fetch_next = {int(self.fetch_next.value)}"
                f" [{r.mode}]: {r.round_trips_per_job:.2f} round trips/job · {_num(r.jobs_per_s)} jobs/s · "
                f"{r.anomalies_per_1000:.1f} anomalies per 1,000 jobs{extra}")

    @property
    def data(self) -> dict[str, Any]:
        """What the widget shows, as data: the current point and the plotted series."""
        r = self.result
        assert r is not None
        return {"rtt_ms": float(self.rtt.value), "preset": self.preset, "finish": self.mode.value,
                "fetch_next": bool(self.fetch_next.value), "mode": r.mode,
                "round_trips_per_job": r.round_trips_per_job, "jobs_per_s": r.jobs_per_s,
                "anomalies_per_1000": r.anomalies_per_1000, "anomalies": dict(r.anomalies),
                "expected_per_1000": r.expected_per_1000, "gap_hits": r.gap_hits, "summary": self.summary,
                "rate": plots.rate_data(self.sweep), "cost": plots.cost_data(self.sweep),
                "result": r.to_dict()}


def _num(x: float) -> str:
    if x == 0:
        return "0"
    return f"{x:,.{max(0, 2 - int(math.floor(math.log10(abs(x)))))}f}"


def _mark_current(fig: Any, current: dict[str, Any], key: str, axis: int) -> None:
    """Put (or move) a diamond at the current point on ``fig.axes[axis]``."""
    artists = fig.emqlab_artists
    name = f"current:{key}"
    y = current[key] if current[key] > 0 else (0 if key == "per_1000" else 1e-3)
    color = plots.MODE_COLORS.get(current["mode"], "black")
    if name in artists:
        artists[name].set_data([current["rtt"]], [y])
        artists[name].set_markerfacecolor(color)
    else:
        (artists[name],) = fig.axes[axis].plot([current["rtt"]], [y], marker="D", markersize=9, color=color,
                                               markeredgecolor="black", linestyle="none", zorder=5)


# -- the scheduler stepper ------------------------------------------------------------------------------------


class SchedulerStepper(_View):
    """"You are the scheduler": a button per actor takes that actor's next step (its label shows the pending
    command); the widget shows the live queue state (where each job is, the locks, the stall marks), the
    annotated history so far, and an anomaly banner with its "because". The **one atomic finish** toggle
    switches the runner between split and atomic and resets: the worker's twenty-odd steps collapse into
    one, and the menu of choices (how many interleavings there are) shrinks visibly.

    Controls: ``buttons`` (actor id → Button), ``atomic`` (ToggleButton), ``reset_button``,
    ``rest_button`` (runs the remaining steps in scenario order). Data: ``data`` (dict), ``summary`` (str).
    Programmatic: :meth:`step`, :meth:`play` (a schedule string), :meth:`reset`; :meth:`close` deletes the
    run's keys. The stepper's runner keeps its queue's keys while it lives: give it a connection of its own
    (on fakeredis a scenario's queue name is fixed, so another run of the same scenario on the same server
    would find the keys taken).
    """

    def __init__(self, scenario: str | Scenario = "stalled-finish", conn: Any = None, *, atomic: bool = False) -> None:
        self.scenario = load(scenario) if isinstance(scenario, str) else scenario
        self.runner = Runner(self.scenario, "atomic" if atomic else "split", conn)
        self.atomic = W.ToggleButton(value=atomic, description="one atomic finish",
                                     tooltip="collapse the finish into one EVALSHA step (resets the run)")
        self.buttons = {a.id: W.Button(layout=W.Layout(width="auto")) for a in self.scenario.actors}
        for actor, button in self.buttons.items():
            button.on_click(lambda _b, a=actor: self.step(a))
        self.reset_button = W.Button(description="reset", icon="undo")
        self.reset_button.on_click(lambda _b: self.reset())
        self.rest_button = W.Button(description="run the rest in order")
        self.rest_button.on_click(lambda _b: self.run_rest())
        self.atomic.observe(lambda _c: self.reset(), names="value")
        self.menu = W.HTML()
        self.banner = W.HTML()
        self.state = W.HTML()
        self.history_view = W.HTML()
        self.widget = W.VBox([
            W.HTML(f"<b>{html.escape(self.scenario.title)}</b> — you are the scheduler: pick who sends the next "
                   "command (each click is one round trip)."),
            W.HBox([self.atomic, self.reset_button, self.rest_button]),
            self.menu,
            W.HBox(list(self.buttons.values()), layout=W.Layout(flex_flow="row wrap")),
            self.banner,
            W.HBox([self.state, self.history_view]),
        ])
        self.steps_total: dict[str, int] = {}
        self.reset()

    # -- actions -------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "atomic" if self.atomic.value else "split"

    def reset(self) -> None:
        """Back to the scenario's initial state in the toggle's mode; recount the menu of choices."""
        r = self.runner
        r.mode = self.mode
        r.reset()
        h = r.run()  # one run in scenario order measures how many steps each actor takes in this mode
        counts = {a.id: sum(1 for s in h.steps if s.actor == a.id) for a in self.scenario.actors}
        self.steps_total = counts
        r.reset()
        self._render()

    def step(self, actor: str) -> None:
        """Let ``actor`` take its next step (no-op when it has none)."""
        if actor in self.runner.pending:
            self.runner.step(actor)
        self._render()

    def play(self, schedule: str) -> None:
        """Reset, then step along ``schedule`` (``v1:W1*9.S1``)."""
        self.reset()
        for actor in parse_schedule(schedule, [a.id for a in self.scenario.actors]):
            self.runner.step(actor)
        self._render()

    def close(self) -> None:
        """Delete the run's keys (on a live server: the stepper's own unique queue)."""
        self.runner.close()

    def run_rest(self) -> None:
        """Run every remaining step, each actor to its end in scenario order."""
        r = self.runner
        while not r.done:
            r.step(r.enabled[0])
        self._render()

    # -- data ----------------------------------------------------------------------------------------
    def pending_text(self, actor: str) -> str | None:
        """The command ``actor`` will send next (``DEL 1:lock``, ``EVALSHA moveToFinished``,
        ``(clock) 1:lock of W1 lapses``), or ``None``."""
        op = self.runner.pending.get(actor)
        if op is None:
            return None
        if op.kind == "script":
            return f"EVALSHA {op.label}"
        if op.kind == "clock":
            return f"(clock) {op.section}"
        if op.kind == "fault":
            return f"(fault) {op.section}"
        if op.batch is not None:
            cmds = op.batch(self.runner.now())
            names = " ".join(c[0].decode().upper() for c in cmds)
            text = f"MULTI {names} EXEC" if op.multi else f"PIPELINE {names}"
            return text if len(text) <= 48 else text[:47] + "…"
        assert op.command is not None
        parts = [self.runner.keys.relative(p) if isinstance(p, bytes) and _printable(p) else
                 (p.decode() if isinstance(p, bytes) and _printable(p) else "<msgpack>") for p in op.command]
        text = " ".join(parts)
        return text if len(text) <= 48 else text[:47] + "…"

    @property
    def data(self) -> dict[str, Any]:
        """What the widget shows: mode, who can step and what they would send, the menu of choices, the queue
        state, the history so far and the anomalies in it."""
        r = self.runner
        h = r.history()
        final = h.final
        stalled = sorted(m.decode() if isinstance(m, bytes) else m for m in r.conn.smembers(r.keys.stalled))
        taken = dict(r.actor_steps)
        return {
            "scenario": self.scenario.name, "mode": self.mode, "atomic": bool(self.atomic.value),
            "enabled": list(r.enabled),
            "pending": {a: self.pending_text(a) for a in r.enabled},
            "steps_total": dict(self.steps_total), "steps_taken": taken,
            "interleavings": multinomial(list(self.steps_total.values())),
            "schedule": r.schedule, "done": r.done,
            "state": {"placements": final["placements"], "locks": final["locks"], "stalled": stalled},
            "history": h.annotated(marks={s: a["kind"] for a in h.anomalies for s in a["steps"]}),
            "steps": len(h.steps),
            "anomalies": list(h.anomalies),
            "lesson": self.scenario.lesson,
        }

    @property
    def summary(self) -> str:
        d = self.data
        head = f"{d['mode']} · {d['steps']} step(s) · schedule {d['schedule']}"
        if d["anomalies"]:
            return head + " · " + "; ".join(f"{a['kind']}: {a['because']}" for a in d["anomalies"])
        return head + (" · no anomaly" if d["done"] else "")

    # -- rendering -----------------------------------------------------------------------------------
    def _render(self) -> None:
        d = self.data
        for actor, button in self.buttons.items():
            pending = d["pending"].get(actor)
            total = d["steps_total"].get(actor, 0)
            taken = d["steps_taken"].get(actor, 0)
            if pending is None:
                button.description = f"{actor}: done ({taken} step{'s' if taken != 1 else ''})"
                button.disabled = True
                button.button_style = ""
            else:
                button.description = f"{actor} ▶ {pending}   [{taken + 1}/{max(total, taken + 1)}]"
                button.disabled = False
                button.button_style = "info" if actor.startswith("W") else "warning"
        counts = " · ".join(f"{a}: {n} step{'s' if n != 1 else ''}" for a, n in d["steps_total"].items())
        self.menu.value = (f"<b>{d['mode']}</b> — {counts} → <b>{d['interleavings']:,}</b> possible interleavings"
                           f" (the menu of choices). Schedule so far: <code>{html.escape(d['schedule'])}</code>")
        if d["anomalies"]:
            tag = "final" if d["done"] else "now"
            items = "".join(f"<li><b>{html.escape(a['kind'])}</b> ({tag}): {html.escape(a['because'])}</li>"
                            for a in d["anomalies"])
            self.banner.value = ("<div style='background:#fde0dd;padding:6px;border-left:4px solid #b2182b'>"
                                 f"<ul>{items}</ul></div>")
        elif d["done"]:
            self.banner.value = ("<div style='background:#e5f5e0;padding:6px;border-left:4px solid #1b7837'>"
                                 f"<b>no anomaly</b>. {html.escape(d['lesson'])}</div>")
        else:
            self.banner.value = ""
        self.state.value = _state_table(d["state"])
        self.history_view.value = f"<pre style='font-size:11px;margin:0 0 0 12px'>{html.escape(d['history'])}</pre>"


def _printable(b: bytes) -> bool:
    try:
        return b.decode().isprintable()
    except UnicodeDecodeError:
        return False


def _state_table(state: dict[str, Any]) -> str:
    rows = []
    for job, places in state["placements"].items():
        lock = state["locks"].get(job, "–")
        mark = "yes" if job in state["stalled"] else ""
        where = ", ".join(places) or "<i>nowhere</i>"
        style = " style='color:#b2182b;font-weight:bold'" if len(places) != 1 else ""
        rows.append(f"<tr><td>{html.escape(job)}</td><td{style}>{where}</td><td>{html.escape(lock)}</td>"
                    f"<td>{mark}</td></tr>")
    return ("<table style='font-size:12px'><tr><th>job</th><th>in</th><th>lock</th><th>stalled</th></tr>"
            + "".join(rows) + "</table>")


__all__ = ["RoundTripSlider", "SchedulerStepper", "default_config", "fast"]
