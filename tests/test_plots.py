"""Plots: each checked by its data and rendered to PNG bytes (matplotlib Agg, no display)."""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from emqlab.engine.scenario import load  # noqa: E402
from emqlab.explore import explore  # noqa: E402
from emqlab.timing import MODES, TimingConfig, simulate, sweep_rtt  # noqa: E402
from emqlab.ui import plots  # noqa: E402


def _png_ok(fig: Figure) -> bytes:
    png = plots.to_png(fig)
    assert png[:8] == plots.PNG_SIGNATURE
    assert len(png) > 1000
    return png


@pytest.fixture(scope="module")
def reports():  # type: ignore[no-untyped-def]
    sc = load("stalled-finish")
    return explore(sc, "split"), explore(sc, "atomic")


@pytest.fixture(scope="module")
def sweep():  # type: ignore[no-untyped-def]
    return sweep_rtt([0.05, 1.0, 75.0], MODES, TimingConfig(jobs=20, workers=4))


def test_timeline_of_the_witness(reports) -> None:  # type: ignore[no-untyped-def]
    h = reports[0].witnesses["double-placement"]
    data = plots.timeline_data(h)
    assert data["lanes"] == ["W1", "S1"]
    assert [s["index"] for s in data["steps"]] == list(range(1, len(h.steps) + 1))
    sweep_step = next(s for s in data["steps"] if s["actor"] == "S1")
    assert sweep_step["kind"] == "script" and sweep_step["op"] == "moveStalledJobsToWait"
    (a,) = data["anomalies"]
    assert a["kind"] == "double-placement" and a["job"] == "1"
    # the window spans the steps that cause it: the DEL of the lock, the sweep, the SREM, the ZADD
    assert a["window"] == [float(min(a["steps"])), float(max(a["steps"]))]
    ops = {s["index"]: s["op"] for s in data["steps"]}
    assert {ops[i] for i in a["steps"]} >= {"DEL", "moveStalledJobsToWait", "ZADD"}
    assert "because" in a["because"]
    fig = plots.plot_timeline(data)  # rows: one per step, a column per actor
    assert len(fig.axes) == 1 and [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["W1", "S1"]
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert "DEL 1:lock" in labels and "moveStalledJobsToWait" in labels
    _png_ok(fig)
    # updated in place from another history (the atomic run: no anomaly)
    atomic = plots.timeline_data(reports[1].witnesses.get("double-placement") or _atomic_history())
    assert plots.update_timeline(fig, atomic) is fig and atomic["anomalies"] == []
    _png_ok(fig)


def _atomic_history():  # type: ignore[no-untyped-def]
    from emqlab.explore.checked import Runner

    with Runner(load("stalled-finish"), "atomic") as r:
        return r.run()


def test_timeline_of_a_timed_run_uses_virtual_time() -> None:
    r = simulate("split", TimingConfig(jobs=6, workers=2, rtt_ms=20.0), effects=True)
    data = plots.timeline_data(r.history, x="time")
    assert data["x"] == "time" and data["steps"][0]["x"] == 0.0
    xs = [s["x"] for s in data["steps"]]
    assert xs == sorted(xs) and xs[-1] > 100
    assert data["lanes"][:2] == ["W1", "W2"]
    _png_ok(plots.plot_timeline(data))


def test_rate_vs_rtt(sweep) -> None:  # type: ignore[no-untyped-def]
    data = plots.rate_data(sweep)
    assert data["rtts"] == [0.05, 1.0, 75.0] and data["jobs"] == 20
    assert set(data["modes"]) == set(MODES)
    assert data["modes"]["atomic"]["per_1000"] == [0.0, 0.0, 0.0]
    assert data["modes"]["finish-then-fetch"]["per_1000"] == [0.0, 0.0, 0.0]
    split = data["modes"]["split"]
    assert split["per_1000"][-1] > 0 and split["expected"] == sorted(split["expected"])
    fig = plots.plot_rate(data, marker=1.0)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["split"].get_ydata()) == split["per_1000"]
    _png_ok(fig)
    marker = plots.artists(fig)["marker"]
    assert plots.update_rate(fig, data, marker=75.0) is fig
    assert list(marker.get_xdata()) == [75.0, 75.0]  # the same artist, moved
    _png_ok(fig)


def test_rate_of_one_kind_and_modes_at_zero_all_visible(sweep) -> None:  # type: ignore[no-untyped-def]
    """Double placements apart from duplicate runs (their sum is the all-kinds rate), and the modes that stay
    at 0 drawn each with its own marker and line style, labelled as such."""
    both = plots.rate_data(sweep)
    dp, dup = plots.rate_data(sweep, "double-placement"), plots.rate_data(sweep, "duplicate-execution")
    assert dp["kind"] == "double-placement" and both["kind"] is None
    split = [a + b for a, b in zip(dp["modes"]["split"]["per_1000"], dup["modes"]["split"]["per_1000"], strict=True)]
    assert split == pytest.approx(both["modes"]["split"]["per_1000"])
    assert not any(dp["modes"]["split"]["expected"])  # (the window model predicts gap hits: all kinds only)
    ax = plots.plot_rate(dp).axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    zero = [lines["atomic (0 at every RTT)"], lines["finish-then-fetch (0 at every RTT)"]]
    assert len({(ln.get_marker(), ln.get_markersize(), ln.get_linestyle()) for ln in zero}) == 2
    assert "double-placement" in ax.get_title() and "double-placement" in ax.get_ylabel()


def test_round_trips_and_throughput_vs_rtt(sweep) -> None:  # type: ignore[no-untyped-def]
    data = plots.cost_data(sweep)
    assert data["modes"]["atomic"]["round_trips_per_job"] == [1.0, 1.0, 1.0]
    assert data["modes"]["finish-then-fetch"]["round_trips_per_job"] == [2.0, 2.0, 2.0]
    assert min(data["modes"]["split"]["round_trips_per_job"]) > 15
    at_75 = {m: v["jobs_per_s"][-1] for m, v in data["modes"].items()}
    assert at_75["atomic"] > at_75["finish-then-fetch"] > at_75["split"]  # 1 vs 2 vs N round trips
    fig = plots.plot_cost(data, marker=1.0)
    assert len(fig.axes) == 2 and all(ax.get_xscale() == "log" for ax in fig.axes)
    rt_line = next(ln for ln in fig.axes[0].get_lines() if ln.get_label() == "finish-then-fetch")
    assert list(rt_line.get_ydata()) == [2.0, 2.0, 2.0]
    _png_ok(fig)
    assert plots.update_cost(fig, data, marker=75.0) is fig
    _png_ok(fig)
    _png_ok(plots.plot_sweep(sweep, marker=75.0))


def test_interleaving_counts(reports) -> None:  # type: ignore[no-untyped-def]
    data = plots.interleaving_data(list(reports))
    split, atomic = data["reports"]
    assert data["kinds"] == ["double-placement"]
    assert (split["label"], atomic["label"]) == ("split", "atomic")
    assert split["raw"] == reports[0].raw_interleavings > atomic["raw"] == 2
    assert split["with"]["double-placement"] >= 1 and atomic["with"]["double-placement"] == 0
    fig = plots.plot_interleavings(data)
    bars = [p for p in fig.axes[0].patches]
    # 2 reports x (raw, explored, double-placement), but the atomic 0 has no bar: a log axis has no 0
    assert len(bars) == 5 and all(b.get_height() >= 1 for b in bars)
    assert "0" in {t.get_text() for t in fig.axes[0].texts}
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["interleavings", "runs (one per trace)", "interleavings with double-placement"]
    _png_ok(fig)
    one = plots.interleaving_data(reports[1])
    assert one["kinds"] == [] and one["reports"][0]["raw"] == 2
    assert plots.update_interleavings(fig, one) is fig
    _png_ok(fig)


def test_save_svg(tmp_path, sweep) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "sweep.svg"
    plots.save(plots.plot_sweep(sweep), str(path))
    assert path.read_text().lstrip().startswith("<?xml")


# -- readable at 100 % zoom ------------------------------------------------------------------------------------

NOTEBOOK_DPI = 90  # what the notebooks' show() renders at


def _drawn_texts(fig: Figure, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every non-empty text artist the renderer really draws (tick labels outside the view are not drawn),
    with its window extent in pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    drawn: list[tuple[Any, Any]] = []
    original = Text.draw

    def spy(self: Text, renderer: Any) -> None:
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self, self.get_window_extent(renderer)))

    canvas = FigureCanvasAgg(fig)
    fig.set_dpi(NOTEBOOK_DPI)
    with monkeypatch.context() as m:
        m.setattr(Text, "draw", spy)
        canvas.draw()
    return drawn


def _assert_readable(fig: Figure, monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, Any]]:
    drawn = _drawn_texts(fig, monkeypatch)
    assert drawn, name
    box = fig.bbox
    for text, ext in drawn:
        assert text.get_fontsize() >= plots.MIN_FONT, f"{name}: {text.get_text()!r} at {text.get_fontsize()} pt"
        inside = (ext.x0 >= box.x0 - 1 and ext.y0 >= box.y0 - 1 and ext.x1 <= box.x1 + 1 and ext.y1 <= box.y1 + 1)
        assert inside, f"{name}: {text.get_text()!r} is cut off: {ext} outside the figure {box}"
    return drawn


def test_plots_are_readable_and_nothing_is_clipped(reports, sweep, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    witness = reports[0].witnesses["double-placement"]
    timed = simulate("split", TimingConfig(jobs=4, workers=2, rtt_ms=20.0), effects=True)
    rate = plots.plot_rate(plots.rate_data(sweep), marker=1.0)
    cost = plots.plot_cost(plots.cost_data(sweep), marker=1.0)
    figures = {
        "timeline": plots.plot_timeline(plots.timeline_data(witness)),
        "timeline (atomic)": plots.plot_timeline(plots.timeline_data(_atomic_history())),
        "timeline (timed)": plots.plot_timeline(plots.timeline_data(timed.history, x="time")),
        "rate": rate, "cost": cost, "sweep": plots.plot_sweep(sweep, marker=75.0),
        "interleavings": plots.plot_interleavings(plots.interleaving_data(list(reports))),
    }
    # the widget's diamond for a mode the sweep has no curve for: it gets a legend entry
    plots.mark_current(rate, {"rtt": 1.0, "mode": "split-then-fetch", "per_1000": 50.0}, "per_1000", 0)
    plots.mark_current(cost, {"rtt": 1.0, "mode": "split-then-fetch", "round_trips_per_job": 26.0},
                       "round_trips_per_job", 0)
    plots.mark_current(cost, {"rtt": 1.0, "mode": "split-then-fetch", "jobs_per_s": 40.0}, "jobs_per_s", 1)
    for fig in (rate, cost):
        entries = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert "this setting: split-then-fetch" in entries
    for name, fig in figures.items():
        _assert_readable(fig, monkeypatch, name)


def test_timeline_labels_stay_inside_their_boxes(reports, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Horizontal labels, each inside its own step's box (not rotated, not spilling into the next step)."""
    from matplotlib.patches import Rectangle

    fig = plots.plot_timeline(plots.timeline_data(reports[0].witnesses["double-placement"]))
    drawn = dict(_drawn_texts(fig, monkeypatch))
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, Rectangle) and (p.get_gid() or "").startswith("step-")]
    labels = [t for t in ax.texts if t in drawn]
    assert len(labels) == len(boxes) == len(reports[0].witnesses["double-placement"].steps)
    for text, patch in zip(labels, boxes, strict=True):
        assert text.get_rotation() == 0
        ext, rect = drawn[text], patch.get_window_extent()
        assert rect.x0 <= ext.x0 and ext.x1 <= rect.x1 and rect.y0 <= ext.y0 and ext.y1 <= rect.y1, text.get_text()


def test_zero_throughput_is_not_drawn_as_a_small_number() -> None:
    data = {"rtts": [1.0, 75.0], "modes": {"transaction": {"round_trips_per_job": [4.0, 10.0],
                                                           "jobs_per_s": [50.0, 0.0]}}}
    fig = plots.plot_cost(data)
    line = plots.artists(fig)["transaction:tput"]
    assert line.get_ydata()[0] == 50.0 and math.isnan(line.get_ydata()[1])
    assert list(plots.artists(fig)["zeros:transaction:tput"].get_xdata()) == [75.0]
    _png_ok(fig)


def test_svg_is_reproducible(reports) -> None:  # type: ignore[no-untyped-def]
    data = plots.timeline_data(reports[0].witnesses["double-placement"])
    a, b = plots.to_svg(plots.plot_timeline(data)), plots.to_svg(plots.plot_timeline(data))
    assert a == b and a.lstrip().startswith("<?xml") and "<svg" in a


def test_without_matplotlib_the_data_works_and_a_figure_says_what_is_missing() -> None:
    # the browser site's JupyterLite has no matplotlib: importing the plots and making their data must work
    # there, and only drawing a figure fails, with the reason (a fresh interpreter: this one has matplotlib)
    import subprocess
    import sys

    code = """
import sys
sys.modules["matplotlib"] = None  # (an import of it raises ImportError, as where it is not installed)
from emqlab.engine.scenario import load
from emqlab.explore import explore
from emqlab.ui import plots
data = plots.timeline_data(explore(load("stalled-finish"), "split").witnesses["double-placement"])
print(data["lanes"], len(data["steps"]))
try:
    plots.plot_timeline(data)
except ImportError as e:
    print("ImportError:", e)
try:
    plots.new_figure(4, 3)
except ImportError as e:
    print("ImportError:", e)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lanes, error, made = done.stdout.splitlines()
    assert lanes == "['W1', 'S1'] 18"
    assert made.startswith("ImportError: emqlab draws its figures with matplotlib, which is not installed here")
    assert error.startswith("ImportError:") and "matplotlib" in error
