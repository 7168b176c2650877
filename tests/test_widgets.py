"""Widgets driven without a browser: set ``.value``, call ``.click()``, assert on the data they display."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from emqlab import plots  # noqa: E402
from emqlab.timing import MODES, TimingConfig, sweep_rtt  # noqa: E402
from emqlab.widgets import RoundTripSlider, SchedulerStepper  # noqa: E402

CONFIG = TimingConfig(jobs=16, workers=4)


@pytest.fixture(scope="module")
def slider() -> RoundTripSlider:
    sweep = sweep_rtt([0.05, 1.0, 75.0], MODES, CONFIG)
    return RoundTripSlider(CONFIG, sweep=sweep)


def test_slider_controls(slider: RoundTripSlider) -> None:
    assert slider.rtt.continuous_update is False
    assert slider.rtt.base == 10 and slider.rtt.min == pytest.approx(-1.5229, abs=1e-3)
    assert set(slider.presets) == {"Unix socket", "loopback", "LAN", "cross-AZ", "cross-region", "slow link"}
    assert slider.data["rtt_ms"] == 1.0 and slider.data["preset"] == "cross-AZ"


def test_slider_round_trips_and_anomalies_per_mode(slider: RoundTripSlider) -> None:
    slider.mode.value = "atomic"
    slider.fetch_next.value = True
    seen = {}
    for preset in ("loopback", "cross-AZ", "cross-region"):
        slider.presets[preset].click()
        d = slider.data
        assert d["preset"] == preset and d["mode"] == "atomic"
        assert d["round_trips_per_job"] == 1.0 and d["anomalies_per_1000"] == 0
        seen[preset] = d["jobs_per_s"]
        assert f"({preset})" in slider.summary and "1.00 round trips/job" in slider.summary
    assert seen["loopback"] > seen["cross-AZ"] > seen["cross-region"]

    slider.fetch_next.value = False  # finish, then fetch: two round trips
    assert slider.data["mode"] == "finish-then-fetch" and slider.data["round_trips_per_job"] == 2.0
    assert slider.data["anomalies"] == {}
    assert slider.fetch_next.description == "fetch_next = 0"

    slider.fetch_next.value = True
    slider.mode.value = "split"  # one round trip per command, and the window
    d = slider.data
    assert d["mode"] == "split" and d["round_trips_per_job"] > 15
    assert d["anomalies_per_1000"] > 0 and d["gap_hits"] > 0 and d["rtt_ms"] == 75.0
    assert "split finish" in slider.summary and "anomalies per 1,000 jobs" in slider.summary


def test_slider_value_moves_the_marker_and_updates_the_pictures(slider: RoundTripSlider) -> None:
    slider.mode.value = "atomic"
    slider.rtt.value = 0.2
    before = bytes(slider.rate_image.value)
    assert before[:8] == plots.PNG_SIGNATURE and len(before) > 1000
    assert bytes(slider.cost_image.value)[:8] == plots.PNG_SIGNATURE
    fig = slider.rate_figure
    slider.rtt.value = 75.0
    assert slider.rate_figure is fig  # the same figure, updated in place
    assert list(fig.emqlab_artists["marker"].get_xdata()) == [75.0, 75.0]
    assert list(fig.emqlab_artists["current:per_1000"].get_xdata()) == [75.0]
    assert bytes(slider.rate_image.value) != before
    # the plotted series are the sweep's
    assert slider.data["cost"]["modes"]["finish-then-fetch"]["round_trips_per_job"] == [2.0, 2.0, 2.0]
    assert slider.data["rate"]["modes"]["atomic"]["per_1000"] == [0.0, 0.0, 0.0]
    slider.rtt.value = 0.3  # not a preset
    assert slider.data["preset"] is None and "RTT 0.3 ms ·" in slider.summary


def test_slider_caches_runs(slider: RoundTripSlider) -> None:
    slider.mode.value = "atomic"
    slider.rtt.value = 1.0
    first = slider.result
    slider.rtt.value = 75.0
    slider.rtt.value = 1.0
    assert slider.result is first


def test_stepper_split_then_atomic() -> None:
    st = SchedulerStepper("stalled-finish")
    d = st.data
    assert d["mode"] == "split" and d["enabled"] == ["W1", "S1"]
    assert d["pending"]["W1"] == "EXISTS 1" and d["pending"]["S1"] == "EVALSHA moveStalledJobsToWait"
    split_choices = d["interleavings"]
    assert d["steps_total"]["W1"] > 15 and split_choices == d["steps_total"]["W1"] + 1
    assert "EXISTS 1" in st.buttons["W1"].description

    while st.data["pending"]["W1"] != "SREM stalled 1":  # the worker runs until it has cleared the lock
        st.buttons["W1"].click()
    assert st.data["state"]["locks"] == {} and st.data["state"]["stalled"] == ["1"]
    st.buttons["S1"].click()  # the sweep runs in the window
    d = st.data
    assert d["state"]["placements"]["1"] == ["wait"]
    assert d["pending"]["W1"] == "SREM stalled 1"
    assert st.buttons["S1"].disabled and "done" in st.buttons["S1"].description
    st.rest_button.click()
    d = st.data
    assert d["done"] and sorted(d["state"]["placements"]["1"]) == ["completed", "wait"]
    (a,) = d["anomalies"]
    assert a["kind"] == "double-placement" and "cleared the lock" in a["because"]
    assert "double-placement" in st.banner.value and "<== double-placement" in d["history"]
    assert "double-placement" in st.summary

    st.atomic.value = True  # one atomic finish: the menu of choices shrinks
    d = st.data
    assert d["mode"] == "atomic" and d["steps"] == 0
    assert d["steps_total"] == {"W1": 1, "S1": 1} and d["interleavings"] == 2 < split_choices
    assert d["pending"]["W1"] == "EVALSHA moveToFinished"
    st.buttons["S1"].click()
    st.buttons["W1"].click()
    d = st.data
    assert d["done"] and d["anomalies"] == [] and d["state"]["placements"]["1"] == ["completed"]
    assert "no anomaly" in st.banner.value


def test_stepper_play_and_reset() -> None:
    st = SchedulerStepper("stalled-finish")
    n = 0
    while st.data["pending"]["W1"] != "SREM stalled 1":  # how many steps until the lock is cleared
        st.step("W1")
        n += 1
    st.play(f"v1:W1*{n}.S1")  # the witness, replayed
    assert st.data["schedule"] == f"v1:W1*{n}.S1" and st.data["state"]["placements"]["1"] == ["wait"]
    st.reset_button.click()
    assert st.data["steps"] == 0 and st.data["state"]["placements"]["1"] == ["active"]
    st2 = SchedulerStepper("two-workers", atomic=True)
    assert set(st2.data["enabled"]) == {"W1", "L1", "S1", "W2"}
    assert st2.data["pending"]["L1"].startswith("(clock)")
