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
:func:`plot_timeline`      :func:`timeline_data` (a :class:`~emqlab.history.History`): a lane per actor, one box
                           per step; each anomaly's window shaded, the steps that cause it marked
:func:`plot_rate`          :func:`rate_data` (a :class:`~emqlab.timing.Sweep`): anomalies per 1,000 jobs vs RTT
                           per finish mode (log x), with the window model's expectation dashed
:func:`plot_cost`          :func:`cost_data` (a Sweep): round trips per job (1 vs 2 vs N) and jobs/s vs RTT
:func:`plot_interleavings` :func:`interleaving_data` (:class:`~emqlab.explore.Report`\\ s): raw, explored, and
                           with each anomaly
==================== =========================================================================================
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from matplotlib.figure import Figure

MODE_COLORS = {"atomic": "#1b7837", "finish-then-fetch": "#2166ac", "split": "#b2182b",
               "split-then-fetch": "#e08214", "transaction": "#762a83"}
KIND_COLORS = {"command": "#bdbdbd", "script": "#4393c3", "clock": "#f4a582", "fault": "#000000"}
ANOMALY_COLORS = {"double-placement": "#d6604d", "lost-job": "#8073ac", "stolen-lock": "#e08214",
                  "duplicate-execution": "#b2182b", "metrics-drift": "#35978f", "attempts-overrun": "#762a83"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def to_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (starts with :data:`PNG_SIGNATURE`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def save(fig: Figure, path: str) -> None:
    """Write the figure to ``path``; the format follows the suffix (``.png``, ``.svg``, ``.pdf``)."""
    fig.savefig(path, bbox_inches="tight")


def _color(mapping: dict[str, str], key: str, default: str = "#777777") -> str:
    return mapping.get(key, default)


# -- (1) timeline ---------------------------------------------------------------------------------------------


def timeline_data(history: Any, *, x: str = "step", lanes: Sequence[str] | None = None) -> dict[str, Any]:
    """A history as timeline data.

    ``history`` is a :class:`~emqlab.history.History` (or its ``to_json`` dict). ``x`` is ``"step"`` (the
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
    """Lane per actor, one box per step (grey = a command of a split script, blue = a whole script, orange =
    a clock event); each anomaly's window shaded, the steps that cause it outlined in its colour and starred.
    Step labels are written when there are at most 60 steps."""
    fig = fig or Figure(figsize=(11, 1.4 + 0.6 * max(1, len(data["lanes"]))))
    fig.clear()
    ax = fig.add_subplot(1, 1, 1)
    lanes = data["lanes"]
    y_of = {a: len(lanes) - 1 - i for i, a in enumerate(lanes)}
    steps = data["steps"]
    xs = [s["x"] for s in steps]
    width = _box_width(xs, data["x"])
    causes: dict[int, str] = {}
    for a in data["anomalies"]:
        for i in a["steps"]:
            causes.setdefault(i, a["kind"])
    for actor in lanes:
        mine = [s for s in steps if s["actor"] == actor]
        if not mine:
            continue
        ax.broken_barh([(s["x"] - width / 2, width) for s in mine], (y_of[actor] - 0.3, 0.6),
                       facecolors=[_color(KIND_COLORS, s["kind"]) for s in mine],
                       edgecolors=[_color(ANOMALY_COLORS, causes[s["index"]]) if s["index"] in causes else "white"
                                   for s in mine],
                       linewidths=[2.0 if s["index"] in causes else 0.3 for s in mine])
    seen_kinds: set[str] = set()
    for a in data["anomalies"]:
        if a["window"] is None:
            continue
        lo, hi = a["window"]
        color = _color(ANOMALY_COLORS, a["kind"])
        label = a["kind"] if a["kind"] not in seen_kinds else None
        seen_kinds.add(a["kind"])
        ax.axvspan(lo - width / 2, hi + width / 2, color=color, alpha=0.15, label=label, zorder=0)
        for i in a["steps"]:
            s = next(s for s in steps if s["index"] == i)
            ax.plot([s["x"]], [y_of[s["actor"]] + 0.42], marker="*", color=color, markersize=10, zorder=3)
    if len(steps) <= 60:
        for s in steps:
            ax.text(s["x"], y_of[s["actor"]], s["label"], rotation=90, ha="center", va="center", fontsize=6.5,
                    clip_on=True)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)))
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    if xs:
        ax.set_xlim(min(xs) - width, max(xs) + width)
    ax.set_xlabel("step (one round trip each)" if data["x"] == "step" else "virtual time (ms)")
    ax.set_title(data["title"] or "timeline", fontsize=10)
    if seen_kinds:
        ax.legend(loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.2)
    fig.tight_layout()
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


def rate_data(sweep: Any) -> dict[str, Any]:
    """Anomalies per 1,000 jobs against RTT, per mode, from a :class:`~emqlab.timing.Sweep` (or its
    ``to_dict``)::

        {"rtts": [0.05, 1.0, 75.0], "jobs": 200,
         "modes": {"split": {"per_1000": [0.0, 95.0, 1960.0], "expected": [2.5, 51.8, 1671.5],
                             "gap_hits": [0, 20, 380]}, "atomic": {...}}}
    """
    rtts, results = _sweep_parts(sweep)
    modes: dict[str, dict[str, list[float]]] = {}
    for r in results:
        m = modes.setdefault(r["mode"], {"per_1000": [], "expected": [], "gap_hits": []})
        m["per_1000"].append(float(r["anomalies_per_1000"]))
        m["expected"].append(float(r["expected_per_1000"]))
        m["gap_hits"].append(float(r["gap_hits"]))
    jobs = results[0]["jobs"] if results else 0
    return {"rtts": rtts, "jobs": jobs, "modes": modes}


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


def _positive(values: Iterable[float], floor: float) -> list[float]:
    return [v if v > 0 else floor for v in values]


def plot_rate(data: dict[str, Any], marker: float | None = None, fig: Figure | None = None) -> Figure:
    """Anomalies per 1,000 jobs vs RTT (log x, symlog y so that 0 shows): one solid line per mode, the window
    model's expectation dashed for split modes, and a vertical marker at ``marker`` ms."""
    fig = fig or Figure(figsize=(6.4, 4))
    fig.clear()
    ax = fig.add_subplot(1, 1, 1)
    artists: dict[str, Any] = {}
    for mode, m in data["modes"].items():
        color = _color(MODE_COLORS, mode)
        (artists[f"{mode}:observed"],) = ax.plot(data["rtts"], m["per_1000"], marker="o", color=color, label=mode)
        if any(v > 0 for v in m["expected"]):
            (artists[f"{mode}:expected"],) = ax.plot(data["rtts"], m["expected"], linestyle="--", color=color,
                                                      alpha=0.7, label=f"{mode} (window model)")
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0)
    ax.minorticks_off()  # (log axes' minor ticks cost most of a redraw)
    ax.set_xlabel("round-trip time (ms, log)")
    ax.set_ylabel("anomalies per 1,000 jobs")
    ax.set_title(f"anomaly rate vs RTT ({data.get('jobs', '?')} jobs per run)", fontsize=10)
    artists["marker"] = ax.axvline(marker if marker else data["rtts"][0] if data["rtts"] else 1, color="black",
                                   linewidth=1, alpha=0.6 if marker else 0.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.emqlab_artists = artists  # type: ignore[attr-defined]
    return fig


def update_rate(fig: Figure, data: dict[str, Any], marker: float | None = None) -> Figure:
    """Update ``fig`` (from :func:`plot_rate`) in place: new y values and the marker; redraws when the set
    of modes or RTTs changed."""
    artists = getattr(fig, "emqlab_artists", None)
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
    return [(k, a) for k, a in artists.items() if not k.startswith(("marker", "current"))]


def _move_marker(line: Any, marker: float | None) -> None:
    if marker:
        line.set_xdata([marker, marker])
        line.set_alpha(0.6)
    else:
        line.set_alpha(0.0)


def plot_cost(data: dict[str, Any], marker: float | None = None, fig: Figure | None = None) -> Figure:
    """Two panels against RTT (log x): round trips per job (log y: 1 for atomic, 2 for finish-then-fetch,
    the split script's command count for split) and jobs per second of virtual time (log y)."""
    fig = fig or Figure(figsize=(10, 4))
    fig.clear()
    left = fig.add_subplot(1, 2, 1)
    right = fig.add_subplot(1, 2, 2)
    artists: dict[str, Any] = {}
    for mode, m in data["modes"].items():
        color = _color(MODE_COLORS, mode)
        (artists[f"{mode}:rt"],) = left.plot(data["rtts"], _positive(m["round_trips_per_job"], 0.5), marker="o",
                                             color=color, label=mode)
        (artists[f"{mode}:tput"],) = right.plot(data["rtts"], _positive(m["jobs_per_s"], 1e-3), marker="o",
                                                color=color, label=mode)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.minorticks_off()
        ax.set_xlabel("round-trip time (ms, log)")
        ax.grid(alpha=0.3)
    _round_trip_ticks(left, data)
    left.set_ylabel("round trips per job")
    left.set_title("round trips per job: 1 vs 2 vs N", fontsize=10)
    right.set_ylabel("jobs per second (virtual time)")
    right.set_title("throughput", fontsize=10)
    left.legend(fontsize=8)
    x0 = marker if marker else (data["rtts"][0] if data["rtts"] else 1)
    artists["marker:rt"] = left.axvline(x0, color="black", linewidth=1, alpha=0.6 if marker else 0.0)
    artists["marker:tput"] = right.axvline(x0, color="black", linewidth=1, alpha=0.6 if marker else 0.0)
    fig.tight_layout()
    fig.emqlab_artists = artists  # type: ignore[attr-defined]
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
    artists = getattr(fig, "emqlab_artists", None)
    if not artists or any(f"{m}:rt" not in artists for m in data["modes"]) or \
            any(len(a.get_xdata()) != len(data["rtts"]) for k, a in _series(artists)):
        return plot_cost(data, marker, fig)
    for mode, m in data["modes"].items():
        artists[f"{mode}:rt"].set_data(data["rtts"], _positive(m["round_trips_per_job"], 0.5))
        artists[f"{mode}:tput"].set_data(data["rtts"], _positive(m["jobs_per_s"], 1e-3))
    _move_marker(artists["marker:rt"], marker)
    _move_marker(artists["marker:tput"], marker)
    for ax in fig.axes:
        ax.relim()
        ax.autoscale_view()
    return fig


def plot_sweep(sweep: Any, marker: float | None = None) -> Figure:
    """One figure with the three sweep panels (anomaly rate, round trips per job, jobs/s) — what
    ``emqlab sweep-rtt --out`` writes."""
    fig = Figure(figsize=(15, 4.2))
    rate, cost = rate_data(sweep), cost_data(sweep)
    axes = [fig.add_subplot(1, 3, i) for i in (1, 2, 3)]
    for mode, m in rate["modes"].items():
        color = _color(MODE_COLORS, mode)
        axes[0].plot(rate["rtts"], m["per_1000"], marker="o", color=color, label=mode)
        if any(v > 0 for v in m["expected"]):
            axes[0].plot(rate["rtts"], m["expected"], linestyle="--", color=color, alpha=0.7,
                         label=f"{mode} (window model)")
        c = cost["modes"][mode]
        axes[1].plot(cost["rtts"], _positive(c["round_trips_per_job"], 0.5), marker="o", color=color, label=mode)
        axes[2].plot(cost["rtts"], _positive(c["jobs_per_s"], 1e-3), marker="o", color=color, label=mode)
    axes[0].set_yscale("symlog", linthresh=1.0)
    axes[0].set_ylim(bottom=0)
    axes[0].set_ylabel("anomalies per 1,000 jobs")
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
    axes[0].legend(fontsize=7)
    fig.suptitle(f"emqlab sweep-rtt · {rate['jobs']} jobs per run", fontsize=10)
    fig.tight_layout()
    return fig


# -- (4) interleavings ------------------------------------------------------------------------------------------


def interleaving_data(reports: Any, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """Counts from one or more :class:`~emqlab.explore.Report` (or their ``to_dict``)::

        {"kinds": ["double-placement"],
         "reports": [{"label": "split", "raw": 22, "explored": 22, "with": {"double-placement": 1}},
                     {"label": "atomic", "raw": 2, "explored": 2, "with": {"double-placement": 0}}]}
    """
    items = list(reports) if isinstance(reports, list | tuple) else [reports]
    rows: list[dict[str, Any]] = []
    for i, rep in enumerate(items):
        d = rep if isinstance(rep, dict) else rep.to_dict()
        inter = d.get("interleavings", {})
        label = labels[i] if labels and i < len(labels) else f"{d.get('mode', '?')}"
        rows.append({"label": label, "scenario": d.get("scenario"), "raw": int(inter.get("raw", 0)),
                     "explored": int(inter.get("explored", 0)), "with": dict(d.get("runs_with", {}))})
    kinds = sorted({k for r in rows for k in r["with"]})
    for r in rows:
        r["with"] = {k: int(r["with"].get(k, 0)) for k in kinds}
    return {"kinds": kinds, "reports": rows}


def plot_interleavings(data: dict[str, Any], fig: Figure | None = None) -> Figure:
    """Grouped bars (log y) per report: raw interleavings, explored runs, runs with each anomaly; counts are
    written on the bars."""
    fig = fig or Figure(figsize=(7, 4))
    fig.clear()
    ax = fig.add_subplot(1, 1, 1)
    series = ["raw", "explored", *data["kinds"]]
    colors = ["#969696", "#4393c3", *[_color(ANOMALY_COLORS, k) for k in data["kinds"]]]
    n = len(series)
    width = 0.8 / max(1, n)
    for j, (name, color) in enumerate(zip(series, colors, strict=True)):
        values = [r[name] if name in ("raw", "explored") else r["with"][name] for r in data["reports"]]
        xs = [i + (j - (n - 1) / 2) * width for i in range(len(data["reports"]))]
        bars = ax.bar(xs, [max(v, 0.8) for v in values], width=width, color=color, label=name)
        for b, v in zip(bars, values, strict=True):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), str(v), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)
    ax.set_xticks(range(len(data["reports"])))
    ax.set_xticklabels([r["label"] for r in data["reports"]])
    ax.set_ylabel("interleavings / runs (log)")
    ax.set_title("interleavings: raw, explored, and with each anomaly", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def update_interleavings(fig: Figure, data: dict[str, Any]) -> Figure:
    """Redraw ``fig`` in place from new counts."""
    return plot_interleavings(data, fig)


__all__ = ["PNG_SIGNATURE", "cost_data", "interleaving_data", "plot_cost", "plot_interleavings", "plot_rate",
           "plot_sweep", "plot_timeline", "rate_data", "save", "timeline_data", "to_png", "update_cost",
           "update_interleavings", "update_rate", "update_timeline"]
