"""matplotlib views of emqlab's data: a timeline of one history, anomaly rate and cost against RTT, and the
interleaving counts of an exploration.

Each plot is a pair: a ``*_data`` function that turns emqlab's results into plain data (dicts and lists — what
tests assert on and widgets expose), and a ``plot_*`` function that draws that data and returns the
:class:`~matplotlib.figure.Figure`. ``update_*`` redraws an existing figure in place from new data (lines move
with ``set_data``, the RTT marker with ``set_xdata``), so a widget creates its figures once.

Figures are built with :class:`matplotlib.figure.Figure` directly, never through ``pyplot``: no global figure
registry, no GUI backend, safe under Agg and in a headless notebook. :func:`to_png` renders one to bytes.

==================== =========================================================================================
plot                 data
==================== =========================================================================================
:func:`plot_timeline`      :func:`timeline_data` (a :class:`~emqlab.engine.history.History`): a lane per actor, one box
                           per step; each anomaly's window shaded, the steps that cause it marked
:func:`plot_rate`          :func:`rate_data` (a :class:`~emqlab.timing.Sweep`): anomalies per 1,000 jobs vs RTT
                           per finish mode (log x), with the window model's expectation dashed
:func:`plot_cost`          :func:`cost_data` (a Sweep): round trips per job (1 vs 2 vs N) and jobs/s vs RTT
:func:`plot_interleavings` :func:`interleaving_data` (:class:`~emqlab.explore.Report`\\ s): raw, explored, and
                           with each anomaly
==================== =========================================================================================
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from emqlab.ui.figure import (
    _ARTISTS,
    ANOMALY_COLORS,
    KIND_COLORS,
    MIN_FONT,
    MODE_COLORS,
    PNG_SIGNATURE,
    artists,
    color_of,
    fresh,
    new_figure,
    save,
    to_png,
    to_svg,
)

if TYPE_CHECKING:  # (a figure imports matplotlib when it is made: emqlab.ui.figure.new_figure)
    from matplotlib.figure import Figure

# -- (1) timeline ---------------------------------------------------------------------------------------------


def timeline_data(history: Any, *, x: str = "step", lanes: Sequence[str] | None = None) -> dict[str, Any]:
    """A history as timeline data.

    ``history`` is a :class:`~emqlab.engine.history.History` (or its ``to_json`` dict). ``x`` is ``"step"`` (the
    step index: logical runs) or ``"time"`` (virtual ms since the first step: timed runs). Returns::

        {"title": "stalled-finish · split · v1:W1*9.S1.W1*9", "x": "step",
         "lanes": ["W1", "S1"],
         "steps": [{"index": 1, "actor": "W1", "kind": "command", "op": "EXISTS", "label": "EXISTS 1",
                    "x": 1.0, "effects": [...]}, ...],
         "anomalies": [{"kind": "double-placement", "job": "1", "because": "...", "steps": [9, 10, 11, 14],
                        "window": [9.0, 14.0]}]}
    """
    h = history if isinstance(history, dict) else _history_dict(history)
    steps = h.get("steps", [])
    t0 = steps[0]["time"] if steps else 0
    order: list[str] = list(lanes) if lanes else []
    if not lanes:  # actors grouped by their letter (in order of first appearance), numbered ascending
        groups: list[str] = []
        for s in steps:
            g = s["actor"].rstrip("0123456789")
            if g not in groups:
                groups.append(g)
        found = {s["actor"] for s in steps}
        order = sorted(found, key=lambda a: (groups.index(a.rstrip("0123456789")), len(a), a))
    xs = {}
    out_steps = []
    for s in steps:
        pos = float(s["index"]) if x == "step" else float(s["time"] - t0)
        xs[s["index"]] = pos
        out_steps.append({"index": s["index"], "actor": s["actor"], "kind": s["kind"], "op": s["op"],
                          "label": _label(s), "x": pos, "effects": list(s.get("effects", []))})
    anomalies = []
    for a in h.get("anomalies", []):
        idx = [i for i in a.get("steps", []) if i in xs]
        window = [min(xs[i] for i in idx), max(xs[i] for i in idx)] if idx else None
        anomalies.append({"kind": a["kind"], "job": a["job"], "because": a["because"], "steps": idx,
                          "window": window})
    schedule = str(h.get("schedule", ""))
    if len(schedule) > 48:
        schedule = schedule[:47] + "…"
    title = " · ".join(str(v) for v in (h.get("scenario"), h.get("mode"), schedule) if v)
    return {"title": title, "x": x, "lanes": order, "steps": out_steps, "anomalies": anomalies}


def _history_dict(h: Any) -> dict[str, Any]:
    return {"scenario": h.scenario, "mode": h.mode, "schedule": h.schedule, "anomalies": list(h.anomalies),
            "steps": [{"index": s.index, "actor": s.actor, "kind": s.kind, "op": s.op, "args": list(s.args),
                       "time": s.time, "effects": list(s.effects)} for s in h.steps]}


def _label(s: dict[str, Any]) -> str:
    if s["kind"] == "script":
        return s["op"]
    if s["kind"] == "clock":
        return "lapse"
    args = [a for a in s.get("args", []) if len(a) <= 14][:2]
    return " ".join([s["op"], *args])


def plot_timeline(data: dict[str, Any], fig: Figure | None = None) -> Figure:
    """The steps of a history, one box per step (grey = a command of a split script, blue = a whole script,
    orange = a clock event, black = a fault); each anomaly's window shaded, the steps that cause it outlined
    in its colour and starred.

    A logical history (``x == "step"``, up to :data:`ROWS_MAX` steps) is drawn as **rows**: one row per
    step, top to bottom, a column per actor, and every box carries its command in horizontal text (elided
    to fit its column) — readable at 100 % zoom. A timed history (``x == "time"``) or a longer one is drawn
    as **lanes**: a lane per actor, the boxes along virtual time, labelled only where the label fits."""
    if data["x"] == "step" and len(data["steps"]) <= ROWS_MAX:
        return _timeline_rows(data, fig)
    return _timeline_lanes(data, fig)


#: The most steps :func:`plot_timeline` draws as rows (one labelled row per step).
ROWS_MAX = 80
_LABEL_FONT = 8.5
_KIND_NAMES = {"command": "one command (split script)", "script": "one whole script (EVALSHA)",
               "clock": "clock event", "fault": "fault"}
_TEXT_ON = {"fault": "white"}


def _causes(data: dict[str, Any]) -> dict[int, str]:
    causes: dict[int, str] = {}
    for a in data["anomalies"]:
        for i in a["steps"]:
            causes.setdefault(i, a["kind"])
    return causes


def _elide(text: str, width_pt: float, fontsize: float) -> str:
    """``text`` cut (with an ellipsis) to what fits in ``width_pt`` points at ``fontsize`` (a conservative
    0.62 em per character: DejaVu Sans is wider than most fonts)."""
    fits = max(1, int(width_pt / (0.62 * fontsize)))
    return text if len(text) <= fits else text[: max(1, fits - 1)] + "…"


def _legend_handles(data: dict[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    kinds = [k for k in KIND_COLORS if any(s["kind"] == k for s in data["steps"])]
    handles: list[Any] = [Patch(facecolor=KIND_COLORS[k], edgecolor="#555555", linewidth=0.5,
                                label=_KIND_NAMES[k]) for k in kinds]
    seen: list[str] = []
    for a in data["anomalies"]:
        if a["window"] is not None and a["kind"] not in seen:
            seen.append(a["kind"])
    for kind in seen:
        handles.append(Patch(facecolor=color_of(ANOMALY_COLORS, kind), alpha=0.3, label=f"{kind}: its window"))
    if seen:
        handles.append(Line2D([], [], marker="*", color="#444444", linestyle="none", markersize=10,
                              label="a step that causes it"))
    return handles


def _timeline_rows(data: dict[str, Any], fig: Figure | None) -> Figure:
    from matplotlib.patches import Rectangle

    lanes = data["lanes"] or ["?"]
    steps = data["steps"]
    handles = _legend_handles(data)
    ncol = 2 if len(handles) > 1 else 1
    legend_in = 0.3 + 0.22 * -(-len(handles) // ncol) if handles else 0.0
    col_in = 2.9
    width = min(12.0, 1.2 + col_in * len(lanes))
    height = 1.3 + 0.25 * max(1, len(steps)) + legend_in
    fig, ax = fresh(fig, width, height)
    x_of = {a: i for i, a in enumerate(lanes)}
    causes = _causes(data)
    box_w, box_h = 0.92, 0.82
    box_pt = (width - 1.2) / len(lanes) * box_w * 72 - 6
    for s in steps:
        x, y = x_of.get(s["actor"], 0), s["x"]
        cause = causes.get(s["index"])
        ax.add_patch(Rectangle((x - box_w / 2, y - box_h / 2), box_w, box_h,
                               facecolor=color_of(KIND_COLORS, s["kind"]),
                               edgecolor=color_of(ANOMALY_COLORS, cause) if cause else "white",
                               linewidth=2.0 if cause else 0.5, zorder=2, gid=f"step-{s['index']}"))
        ax.text(x, y, _elide(s["label"], box_pt, _LABEL_FONT), ha="center", va="center", fontsize=_LABEL_FONT,
                color=_TEXT_ON.get(s["kind"], "black"), zorder=3, clip_on=True)
        if cause:
            ax.plot([x + 0.5], [y], marker="*", color=color_of(ANOMALY_COLORS, cause), markersize=10, zorder=4,
                    clip_on=False)
    for a in data["anomalies"]:
        if a["window"] is not None:
            lo, hi = a["window"]
            ax.axhspan(lo - 0.5, hi + 0.5, color=color_of(ANOMALY_COLORS, a["kind"]), alpha=0.15, zorder=0)
    n = max((s["x"] for s in steps), default=1.0)
    ax.set_xlim(-0.55, len(lanes) - 0.45)
    ax.set_ylim(n + 0.6, 0.4)  # step 1 at the top
    ax.xaxis.tick_top()
    ax.set_xticks(range(len(lanes)))
    ax.set_xticklabels(lanes, fontsize=10, fontweight="bold")
    ax.tick_params(axis="x", length=0)
    ticks = [s["x"] for s in steps] if len(steps) <= 40 else list(range(1, int(n) + 1, 5))
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks], fontsize=MIN_FONT)
    ax.set_ylabel("step (one round trip each)", fontsize=9)
    for side in ("right", "bottom"):
        ax.spines[side].set_visible(False)
    title = data["title"] or "timeline"
    ax.set_title(_elide(title, (width - 1.0) * 72, 10.5), fontsize=10.5)
    bottom = 0.0
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=MIN_FONT + 0.5, frameon=False)
        bottom = legend_in / height
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def _timeline_lanes(data: dict[str, Any], fig: Figure | None) -> Figure:
    lanes = data["lanes"]
    handles = _legend_handles(data)
    legend_in = 0.3 + 0.22 * -(-len(handles) // 3) if handles else 0.0
    width, height = 11.0, 1.6 + 0.6 * max(1, len(lanes)) + legend_in
    fig, ax = fresh(fig, width, height)
    y_of = {a: len(lanes) - 1 - i for i, a in enumerate(lanes)}
    steps = data["steps"]
    xs = [s["x"] for s in steps]
    box = _box_width(xs, data["x"])
    causes = _causes(data)
    for actor in lanes:
        mine = [s for s in steps if s["actor"] == actor]
        if not mine:
            continue
        ax.broken_barh([(s["x"] - box / 2, box) for s in mine], (y_of[actor] - 0.3, 0.6),
                       facecolors=[color_of(KIND_COLORS, s["kind"]) for s in mine],
                       edgecolors=[color_of(ANOMALY_COLORS, causes[s["index"]]) if s["index"] in causes else "white"
                                   for s in mine],
                       linewidths=[2.0 if s["index"] in causes else 0.3 for s in mine])
    for a in data["anomalies"]:
        if a["window"] is None:
            continue
        lo, hi = a["window"]
        color = color_of(ANOMALY_COLORS, a["kind"])
        ax.axvspan(lo - box / 2, hi + box / 2, color=color, alpha=0.15, zorder=0)
        for i in a["steps"]:
            s = next(s for s in steps if s["index"] == i)
            ax.plot([s["x"]], [y_of[s["actor"]] + 0.42], marker="*", color=color, markersize=10, zorder=3)
    if xs:
        ax.set_xlim(min(xs) - box, max(xs) + box)
        # a label is written only where it fits in its box, horizontally, at a readable size
        span = (max(xs) - min(xs) + 2 * box) or 1.0
        box_pt = (width - 1.2) * 72 * box / span - 2
        for s in steps:
            if len(s["label"]) * 0.62 * _LABEL_FONT <= box_pt:
                ax.text(s["x"], y_of[s["actor"]], s["label"], ha="center", va="center", fontsize=_LABEL_FONT,
                        color=_TEXT_ON.get(s["kind"], "black"), clip_on=True)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)))
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.set_xlabel("step (one round trip each)" if data["x"] == "step" else "virtual time (ms)")
    ax.set_title(_elide(data["title"] or "timeline", (width - 1.0) * 72, 10.5), fontsize=10.5)
    ax.grid(axis="x", alpha=0.2)
    bottom = 0.0
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=MIN_FONT + 0.5, frameon=False)
        bottom = legend_in / height
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def _box_width(xs: list[float], axis: str) -> float:
    if axis == "step" or len(xs) < 2:
        return 0.8
    gaps = sorted(b - a for a, b in zip(xs, xs[1:], strict=False) if b > a)
    return max(1e-6, (gaps[len(gaps) // 2] if gaps else 1.0) * 0.8)


def update_timeline(fig: Figure, data: dict[str, Any]) -> Figure:
    """Redraw ``fig`` in place from new timeline data."""
    return plot_timeline(data, fig)


# -- sweeps over RTT ------------------------------------------------------------------------------------------


def rate_data(sweep: Any, kind: str | None = None) -> dict[str, Any]:
    """Anomalies per 1,000 jobs against RTT, per mode, from a :class:`~emqlab.timing.Sweep` (or its
    ``to_dict``); with ``kind``, only that kind's (``double-placement``: the finish gap's own damage, apart
    from the duplicate runs a requeued job's next fetch makes)::

        {"rtts": [0.05, 1.0, 75.0], "jobs": 200, "kind": None,
         "modes": {"split": {"per_1000": [0.0, 95.0, 1960.0], "expected": [2.5, 51.8, 1671.5],
                             "gap_hits": [0, 20, 380]}, "atomic": {...}}}

    ``expected`` (the window model's landings per 1,000 jobs) only for all kinds together: it predicts the
    gap hits, which end as a double placement or a duplicate run."""
    rtts, results = _sweep_parts(sweep)
    modes: dict[str, dict[str, list[float]]] = {}
    for r in results:
        m = modes.setdefault(r["mode"], {"per_1000": [], "expected": [], "gap_hits": []})
        if kind is None:
            m["per_1000"].append(float(r["anomalies_per_1000"]))
            m["expected"].append(float(r["expected_per_1000"]))
        else:
            jobs_here = int(r["jobs"]) or 1
            m["per_1000"].append(1000.0 * int(r.get("anomalies", {}).get(kind, 0)) / jobs_here)
            m["expected"].append(0.0)
        m["gap_hits"].append(float(r["gap_hits"]))
    jobs = results[0]["jobs"] if results else 0
    return {"rtts": rtts, "jobs": jobs, "kind": kind, "modes": modes}


def cost_data(sweep: Any) -> dict[str, Any]:
    """Round trips per job and jobs per second (virtual time) against RTT, per mode::

        {"rtts": [...], "modes": {"atomic": {"round_trips_per_job": [1.0, ...], "jobs_per_s": [...]}, ...}}
    """
    rtts, results = _sweep_parts(sweep)
    modes: dict[str, dict[str, list[float]]] = {}
    for r in results:
        m = modes.setdefault(r["mode"], {"round_trips_per_job": [], "jobs_per_s": []})
        m["round_trips_per_job"].append(float(r["round_trips_per_job"]))
        m["jobs_per_s"].append(float(r["jobs_per_s"]))
    return {"rtts": rtts, "modes": modes}


def _sweep_parts(sweep: Any) -> tuple[list[float], list[dict[str, Any]]]:
    d = sweep if isinstance(sweep, dict) else sweep.to_dict()
    rtts = [float(x) for x in d["rtts"]]
    order = {x: i for i, x in enumerate(rtts)}
    results = sorted(d["results"], key=lambda r: (d["modes"].index(r["mode"]), order.get(float(r["rtt_ms"]), 0)))
    return rtts, results


def _log_values(values: Iterable[float]) -> list[float]:
    """Values for a log axis: a 0 (nothing finished) is a gap in the line, never a made-up small number;
    :func:`_mark_zeros` shows where it is."""
    return [v if v > 0 else math.nan for v in values]


def _mark_zeros(ax: Any, xs: Sequence[float], ys: Sequence[float], color: str) -> Any:
    """A downward triangle on the bottom edge of a log axes at each x whose value is 0 (or ``None`` when
    there is none). The first such mark on an axes gets the legend entry "0: no job finished"."""
    from matplotlib.transforms import blended_transform_factory

    at = [x for x, y in zip(xs, ys, strict=True) if not y > 0]
    if not at:
        return None
    first = not getattr(ax, "emqlab_zeros", False)
    ax.emqlab_zeros = True
    (line,) = ax.plot(at, [0.025] * len(at), marker="v", markersize=8, color=color, linestyle="none",
                      transform=blended_transform_factory(ax.transData, ax.transAxes), clip_on=False, zorder=4,
                      label="▼ on the axis: 0 (no job finished)" if first else "_zero")
    return line


def _room_below(ax: Any, values: Iterable[float]) -> None:
    """Lower a log axes' bottom so that the 0 marks on its edge sit below every drawn point."""
    positive = [v for v in values if v > 0]
    if positive:
        ax.set_ylim(bottom=min(positive) / 6)


def _legend(ax: Any, **kw: Any) -> Any:
    """``ax.legend`` with emqlab's size; the arguments are remembered so that :func:`mark_current` can build
    the legend again with its entry."""
    kw = {"fontsize": MIN_FONT + 0.5, **kw}
    ax.emqlab_legend = kw
    return ax.legend(**kw)


def plot_rate(data: dict[str, Any], marker: float | None = None, fig: Figure | None = None) -> Figure:
    """Anomalies per 1,000 jobs vs RTT (log x, symlog y so that 0 shows): one solid line per mode, the window
    model's expectation dashed for split modes, and a vertical marker at ``marker`` ms."""
    fig = fig or new_figure(8.6, 4)
    fig.clear()
    ax = fig.add_subplot(1, 1, 1)
    artists: dict[str, Any] = {}
    zero_modes = [mode for mode, m in data["modes"].items() if not any(m["per_1000"])]
    for mode, m in data["modes"].items():
        color = color_of(MODE_COLORS, mode)
        # modes that stay at 0 draw on one another: each its own marker size and line style, so every one shows
        z = zero_modes.index(mode) if mode in zero_modes else -1
        style: dict[str, Any] = {"marker": "o", "markersize": 6} if z < 0 else \
            {"marker": "os^D"[z % 4], "markersize": 11 - 3 * (z % 3), "fillstyle": "none" if z else "full",
             "linestyle": ("-", ":", "--")[z % 3]}
        label = mode + (" (0 at every RTT)" if z >= 0 else "")
        (artists[f"{mode}:observed"],) = ax.plot(data["rtts"], m["per_1000"], color=color, label=label, **style)
        if any(v > 0 for v in m["expected"]):
            (artists[f"{mode}:expected"],) = ax.plot(data["rtts"], m["expected"], linestyle="--", color=color,
                                                      alpha=0.7, label=f"{mode} (window model)")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0)
    ax.minorticks_off()  # (log axes' minor ticks cost most of a redraw)
    ax.set_xlabel("round-trip time (ms, log)")
    ax.set_ylabel("anomalies per 1,000 jobs")
    what = data.get("kind") or "anomaly"
    ax.set_title(f"{what} rate vs RTT ({data.get('jobs', '?')} jobs per run)", fontsize=10.5)
    if data.get("kind"):
        ax.set_ylabel(f"{data['kind']} per 1,000 jobs")
    artists["marker"] = ax.axvline(marker if marker else data["rtts"][0] if data["rtts"] else 1, color="black",
                                   linewidth=1, alpha=0.6 if marker else 0.0)
    ax.grid(alpha=0.3)
    _over_1000_note(ax, data)
    _legend(ax, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    _ARTISTS[fig] = artists
    return fig


def _over_1000_note(ax: Any, rate: dict[str, Any]) -> None:
    """Say why a rate per 1,000 jobs can pass 1,000 (in the upper-left corner, which the curves leave empty:
    rates grow with the RTT)."""
    if max((v for m in rate["modes"].values() for v in m["per_1000"]), default=0) > 1000:
        ax.text(0.02, 0.97, "above 1,000: a job is counted once per anomaly\n(a requeued job may run 2–3 times)",
                transform=ax.transAxes, ha="left", va="top", fontsize=MIN_FONT, color="#444444")


def update_rate(fig: Figure, data: dict[str, Any], marker: float | None = None) -> Figure:
    """Update ``fig`` (from :func:`plot_rate`) in place: new y values and the marker; redraws when the set
    of modes or RTTs changed."""
    artists = _ARTISTS.get(fig)
    if not artists or any(f"{m}:observed" not in artists for m in data["modes"]) or \
            any(len(a.get_xdata()) != len(data["rtts"]) for k, a in _series(artists)):
        return plot_rate(data, marker, fig)
    for mode, m in data["modes"].items():
        artists[f"{mode}:observed"].set_data(data["rtts"], m["per_1000"])
        if f"{mode}:expected" in artists:
            artists[f"{mode}:expected"].set_data(data["rtts"], m["expected"])
    _move_marker(artists["marker"], marker)
    ax = fig.axes[0]
    ax.relim()
    ax.autoscale_view()
    return fig


def _series(artists: dict[str, Any]) -> list[tuple[str, Any]]:
    """The per-mode lines (not the RTT marker, nor points a widget added)."""
    return [(k, a) for k, a in artists.items() if not k.startswith(("marker", "current", "zeros"))]


def _move_marker(line: Any, marker: float | None) -> None:
    if marker:
        line.set_xdata([marker, marker])
        line.set_alpha(0.6)
    else:
        line.set_alpha(0.0)


def mark_current(fig: Figure, current: dict[str, Any], key: str, axis: int = 0) -> Any:
    """Put (or move) a diamond at the current setting on ``fig.axes[axis]`` (a figure from :func:`plot_rate`
    or :func:`plot_cost`): ``current`` is ``{"rtt": ms, "mode": "split-then-fetch", key: value}``. Its colour
    is the mode's, and an axes that has a legend gets an entry for it ("this setting: split-then-fetch") — a
    mode the sweep has no curve for (a widget's fourth corner) would otherwise be a coloured mark nobody can
    read. Stored as ``artists(fig)["current:<key>"]``; returns the marker's line."""
    artists = _ARTISTS[fig]
    name = f"current:{key}"
    value = float(current[key])
    floor = 0.0 if key == "per_1000" else 1e-3
    y = value if value > 0 else floor
    color = color_of(MODE_COLORS, current["mode"], "black")
    ax = fig.axes[axis]
    label = f"this setting: {current['mode']}"
    if name in artists:
        line = artists[name]
        line.set_data([current["rtt"]], [y])
        line.set_markerfacecolor(color)
        line.set_color(color)
    else:
        (line,) = ax.plot([current["rtt"]], [y], marker="D", markersize=9, color=color, markeredgecolor="black",
                          linestyle="none", zorder=5)
        artists[name] = line
    if ax.get_legend() is not None:
        if line.get_label() != label:
            line.set_label(label)
            ax.legend(**getattr(ax, "emqlab_legend", {"fontsize": MIN_FONT + 0.5}))  # rebuilt: with the entry
            fig.tight_layout()  # (the entry may be wider than the legend was)
    else:
        line.set_label("_" + label)  # no legend on this axes: the other axes' entry explains it
    return line


def plot_cost(data: dict[str, Any], marker: float | None = None, fig: Figure | None = None) -> Figure:
    """Two panels against RTT (log x): round trips per job (log y: 1 for atomic, 2 for finish-then-fetch,
    the split script's command count for split) and jobs per second of virtual time (log y)."""
    fig = fig or new_figure(10, 4)
    fig.clear()
    left = fig.add_subplot(1, 2, 1)
    right = fig.add_subplot(1, 2, 2)
    artists: dict[str, Any] = {}
    for mode, m in data["modes"].items():
        color = color_of(MODE_COLORS, mode)
        (artists[f"{mode}:rt"],) = left.plot(data["rtts"], _log_values(m["round_trips_per_job"]), marker="o",
                                             color=color, label=mode)
        (artists[f"{mode}:tput"],) = right.plot(data["rtts"], _log_values(m["jobs_per_s"]), marker="o",
                                                color=color, label=mode)
    for mode, m in data["modes"].items():  # after every line: the legend lists the 0 mark last
        zeros = _mark_zeros(right, data["rtts"], m["jobs_per_s"], color_of(MODE_COLORS, mode))
        if zeros is not None:
            artists[f"zeros:{mode}:tput"] = zeros
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.minorticks_off()
        ax.set_xlabel("round-trip time (ms, log)")
        ax.grid(alpha=0.3)
    _round_trip_ticks(left, data)
    left.set_ylabel("round trips per job")
    left.set_title("round trips per job: 1 vs 2 vs N", fontsize=10.5)
    right.set_ylabel("jobs per second (virtual time)")
    right.set_title("throughput", fontsize=10.5)
    if any(k.startswith("zeros:") for k in artists):
        _room_below(right, [v for m in data["modes"].values() for v in m["jobs_per_s"]])
    _legend(right, loc="lower left")  # the corner the curves never reach: throughput falls to the right
    x0 = marker if marker else (data["rtts"][0] if data["rtts"] else 1)
    artists["marker:rt"] = left.axvline(x0, color="black", linewidth=1, alpha=0.6 if marker else 0.0)
    artists["marker:tput"] = right.axvline(x0, color="black", linewidth=1, alpha=0.6 if marker else 0.0)
    fig.tight_layout()
    _ARTISTS[fig] = artists
    return fig


def _round_trip_ticks(ax: Any, data: dict[str, Any]) -> None:
    """Readable y ticks for round trips per job (a log axis would label only 1 and 10)."""
    from matplotlib.ticker import FixedLocator, ScalarFormatter

    top = max([v for m in data["modes"].values() for v in m["round_trips_per_job"]] or [1.0])
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100) if t <= top * 1.5]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(ScalarFormatter())


def update_cost(fig: Figure, data: dict[str, Any], marker: float | None = None) -> Figure:
    """Update ``fig`` (from :func:`plot_cost`) in place."""
    artists = _ARTISTS.get(fig)
    if not artists or any(f"{m}:rt" not in artists for m in data["modes"]) or \
            any(len(a.get_xdata()) != len(data["rtts"]) for k, a in _series(artists)):
        return plot_cost(data, marker, fig)
    for mode, m in data["modes"].items():
        if (f"zeros:{mode}:tput" in artists) != any(not v > 0 for v in m["jobs_per_s"]):
            return plot_cost(data, marker, fig)
        artists[f"{mode}:rt"].set_data(data["rtts"], _log_values(m["round_trips_per_job"]))
        artists[f"{mode}:tput"].set_data(data["rtts"], _log_values(m["jobs_per_s"]))
    _move_marker(artists["marker:rt"], marker)
    _move_marker(artists["marker:tput"], marker)
    for ax in fig.axes:
        ax.relim()
        ax.autoscale_view()
    return fig


def plot_sweep(sweep: Any, marker: float | None = None) -> Figure:
    """One figure with the three sweep panels (anomaly rate, round trips per job, jobs/s) — what
    ``emqlab sweep-rtt --out`` writes."""
    fig = new_figure(15, 4.2)
    rate, cost = rate_data(sweep), cost_data(sweep)
    axes = [fig.add_subplot(1, 3, i) for i in (1, 2, 3)]
    zeros = False
    for mode, m in rate["modes"].items():
        color = color_of(MODE_COLORS, mode)
        axes[0].plot(rate["rtts"], m["per_1000"], marker="o", color=color, label=mode)
        if any(v > 0 for v in m["expected"]):
            axes[0].plot(rate["rtts"], m["expected"], linestyle="--", color=color, alpha=0.7,
                         label=f"{mode} (window model)")
        c = cost["modes"][mode]
        axes[1].plot(cost["rtts"], _log_values(c["round_trips_per_job"]), marker="o", color=color, label=mode)
        axes[2].plot(cost["rtts"], _log_values(c["jobs_per_s"]), marker="o", color=color, label=mode)
    for mode, c in cost["modes"].items():
        if _mark_zeros(axes[2], cost["rtts"], c["jobs_per_s"], color_of(MODE_COLORS, mode)) is not None:
            zeros = True
    axes[0].set_yscale("symlog", linthresh=1.0)
    axes[0].set_ylim(bottom=0)
    axes[0].set_ylabel("anomalies per 1,000 jobs")
    _over_1000_note(axes[0], rate)
    axes[1].set_yscale("log")
    _round_trip_ticks(axes[1], cost)
    axes[1].set_ylabel("round trips per job")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("jobs per second (virtual time)")
    for ax in axes:
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xlabel("round-trip time (ms, log)")
        ax.grid(alpha=0.3)
        if marker:
            ax.axvline(marker, color="black", linewidth=1, alpha=0.6)
    handles, labels = axes[0].get_legend_handles_labels()
    if zeros:
        _room_below(axes[2], [v for m in cost["modes"].values() for v in m["jobs_per_s"]])
        more = axes[2].get_legend_handles_labels()
        handles += [h for h, lab in zip(*more, strict=True) if lab.startswith("▼")]
        labels += [lab for lab in more[1] if lab.startswith("▼")]
    axes[2].legend(handles, labels, fontsize=MIN_FONT + 0.5, loc="lower left")  # the empty corner
    fig.suptitle(f"emqlab sweep-rtt · {rate['jobs']} jobs per run", fontsize=11)
    fig.tight_layout()
    return fig


# -- (4) interleavings ------------------------------------------------------------------------------------------


def interleaving_data(reports: Any, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """Counts from one or more :class:`~emqlab.explore.Report` (or their ``to_dict``)::

        {"kinds": ["double-placement"],
         "reports": [{"label": "split", "raw": 21, "explored": 4, "with": {"double-placement": 1},
                      "runs_with": {"double-placement": 1}}, ...]}

    ``raw`` counts interleavings, ``explored`` the runs executed (one per trace), ``with`` the interleavings
    that show each anomaly (``interleavings_with``; a report without it falls back to ``runs_with``) and
    ``runs_with`` the runs that do."""
    items = list(reports) if isinstance(reports, list | tuple) else [reports]
    rows: list[dict[str, Any]] = []
    for i, rep in enumerate(items):
        d = rep if isinstance(rep, dict) else rep.to_dict()
        inter = d.get("interleavings", {})
        label = labels[i] if labels and i < len(labels) else f"{d.get('mode', '?')}"
        runs_with = dict(d.get("runs_with", {}))
        rows.append({"label": label, "scenario": d.get("scenario"), "raw": int(inter.get("raw", 0)),
                     "explored": int(inter.get("explored", 0)),
                     "with": dict(d.get("interleavings_with", runs_with)), "runs_with": runs_with})
    kinds = sorted({k for r in rows for k in (*r["with"], *r["runs_with"])})
    for r in rows:
        r["with"] = {k: int(r["with"].get(k, 0)) for k in kinds}
        r["runs_with"] = {k: int(r["runs_with"].get(k, 0)) for k in kinds}
    return {"kinds": kinds, "reports": rows}


def plot_interleavings(data: dict[str, Any], fig: Figure | None = None) -> Figure:
    """Grouped bars (log y) per report: raw interleavings, runs executed, interleavings with each anomaly;
    every count is written on its bar. A count of 0 has no bar (a log axis has no 0): its "0" sits on the
    baseline."""
    groups = len(data["reports"])
    if fig is None:
        fig = new_figure(max(6.4, 1.6 + 1.5 * groups), 4.4)
    fig.clear()
    from matplotlib.patches import Patch

    ax = fig.add_subplot(1, 1, 1)
    series = ["raw", "explored", *data["kinds"]]
    names = ["interleavings", "runs (one per trace)", *[f"interleavings with {k}" for k in data["kinds"]]]
    colors = ["#969696", "#4393c3", *[color_of(ANOMALY_COLORS, k) for k in data["kinds"]]]
    n = len(series)
    width = 0.8 / max(1, n)
    base = 0.7
    top = 1.0
    handles: list[Any] = []
    for j, (key, name, color) in enumerate(zip(series, names, colors, strict=True)):
        values = [r[key] if key in ("raw", "explored") else r["with"][key] for r in data["reports"]]
        xs = [i + (j - (n - 1) / 2) * width for i in range(groups)]
        shown = [(x, v) for x, v in zip(xs, values, strict=True) if v > 0]
        bars = ax.bar([x for x, _ in shown], [v for _, v in shown], width=width, color=color)
        handles.append(Patch(facecolor=color, label=name))  # an entry even when every count is 0
        for b, (_x, v) in zip(bars, shown, strict=True):
            ax.text(b.get_x() + b.get_width() / 2, v, f"{v:,}", ha="center", va="bottom", fontsize=MIN_FONT)
            top = max(top, v)
        for x, v in zip(xs, values, strict=True):
            if v == 0:
                ax.text(x, base, "0", ha="center", va="bottom", fontsize=MIN_FONT, color="#555555")
    ax.set_yscale("log")
    ax.set_ylim(base, top * 4)
    ax.minorticks_off()
    ax.set_xticks(range(groups))
    ax.set_xticklabels([r["label"] for r in data["reports"]], fontsize=9)
    ax.set_ylabel("interleavings / runs (log)")
    ax.set_title("interleavings: all, runs executed, and those with an anomaly", fontsize=10.5)
    ax.legend(handles=handles, fontsize=MIN_FONT + 0.5, loc="upper right")
    fig.tight_layout()
    return fig


def update_interleavings(fig: Figure, data: dict[str, Any]) -> Figure:
    """Redraw ``fig`` in place from new counts."""
    return plot_interleavings(data, fig)


__all__ = ["ANOMALY_COLORS", "KIND_COLORS", "MIN_FONT", "MODE_COLORS", "PNG_SIGNATURE", "ROWS_MAX", "artists",
           "cost_data", "interleaving_data", "mark_current", "plot_cost", "plot_interleavings", "plot_rate",
           "plot_sweep", "plot_timeline", "rate_data", "save", "timeline_data", "to_png", "to_svg", "update_cost",
           "update_interleavings", "update_rate", "update_timeline"]
