"""Widgets driven without a browser: set ``.value``, call ``.click()``, assert on the data they display."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from emqlab.timing import MODES, TimingConfig, sweep_rtt  # noqa: E402
from emqlab.ui import plots  # noqa: E402
from emqlab.ui.widgets import RoundTripSlider, SchedulerStepper  # noqa: E402

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

    slider.mode.value = "transaction"  # WATCH, pipelined reads, MULTI … EXEC, then a separate fetch
    d = slider.data
    assert d["mode"] == "transaction" and slider.fetch_next.disabled
    assert d["round_trips_per_job"] >= 4.0 and d["anomalies_per_1000"] == 0
    assert "aborted EXECs per job" in slider.summary and "fetch_next = 0" in slider.summary
    # every attempt aborts at 75 ms: the finishes give up, and the line says so rather than read as clean
    left = d["result"]["unfinished_total"]
    assert left > 0 and f" · {left} of {d['result']['jobs']} jobs left unfinished" in slider.summary
    slider.mode.value = "atomic"
    assert not slider.fetch_next.disabled and slider.data["mode"] == "atomic"


def test_slider_value_moves_the_marker_and_updates_the_pictures(slider: RoundTripSlider) -> None:
    slider.mode.value = "atomic"
    slider.rtt.value = 0.2
    before = bytes(slider.rate_image.value)
    assert before[:8] == plots.PNG_SIGNATURE and len(before) > 1000
    assert bytes(slider.cost_image.value)[:8] == plots.PNG_SIGNATURE
    fig = slider.rate_figure
    slider.rtt.value = 75.0
    assert slider.rate_figure is fig  # the same figure, updated in place
    assert list(plots.artists(fig)["marker"].get_xdata()) == [75.0, 75.0]
    assert list(plots.artists(fig)["current:per_1000"].get_xdata()) == [75.0]
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


# -- the stepper as a game ----------------------------------------------------------------------------------

LUA = Path(__file__).resolve().parents[1] / "lua"


def _file_line(at: str) -> str:
    """The text of ``file:line`` in lua/ (the real file, not the flattened script)."""
    file, _, n = at.rpartition(":")
    return (LUA / file).read_text(encoding="utf-8").split("\n")[int(n) - 1]


def _until(st: SchedulerStepper, actor: str, pending: str) -> None:
    while st.data["pending"][actor] != pending:
        st.buttons[actor].click()


def test_stepper_highlights_the_next_lua_line() -> None:
    st = SchedulerStepper("stalled-finish")
    w1 = st.data["actors"]["W1"]
    assert w1["script"] == "moveToFinished" and w1["section"] == "READ" and w1["step"] == "rule 1: the job exists."
    (current,) = [text for _n, _fl, text, cur in w1["excerpt"] if cur]
    assert 'call("EXISTS", jobKey)' in current and current == _file_line(w1["at"])
    assert w1["at"].startswith("moveToFinished-14.lua:") and w1["access"] == "reads"
    lines = [w1["line"]]
    st.buttons["W1"].click()
    w1 = st.data["actors"]["W1"]
    assert w1["line"] > lines[-1] and "SCARD" in _file_line(w1["at"])  # the highlight moved down the script
    assert "▶" in st.actor_views["W1"].value and html_escape("SCARD") in st.actor_views["W1"].value

    _until(st, "W1", "HMGET meta paused concurrency")  # inside an included helper, called from READ
    w1 = st.data["actors"]["W1"]
    assert w1["at"].startswith("includes/common.lua:") and w1["inside"] == "in queueHeld()"
    assert w1["section"] == "READ" and "queueHeld(" in w1["called_from"][1]
    assert "HMGET" in _file_line(w1["at"])

    _until(st, "W1", "DEL 1:lock")
    w1 = st.data["actors"]["W1"]
    assert w1["section"] == "WRITE" and w1["step"] == "write 1: release the lock." and w1["access"] == "writes"
    assert 'call("DEL", lockKey)' in _file_line(w1["at"]) and w1["explain"] == "release job 1's lock"
    assert "WRITE" in st.actor_views["W1"].value
    s1 = st.data["actors"]["S1"]
    assert s1["atomic"] and s1["section"] == "the whole script" and s1["script"] == "moveStalledJobsToWait"
    assert [t.split()[-1] for _n, _fl, t, _c in s1["excerpt"]] == ["THROTTLE", "CHECK", "MARK"]
    st.rest_button.click()
    assert st.data["actors"] == {} and "done" in st.actor_views["W1"].value
    st.close()


def html_escape(s: str) -> str:
    import html

    return html.escape(s)


def test_stepper_board_marks_the_dangerous_state() -> None:
    st = SchedulerStepper("stalled-finish")
    b = st.data["board"]
    assert b["lists"]["active"] == ["1"] and b["lists"]["stalled"] == ["1"] and b["locks"] == {"1": "W1:1"}
    assert b["dangers"] == [] and "1:lock</code> = <code>W1:1" in st.state.value
    _until(st, "W1", "SREM stalled 1")  # the lock is gone, the mark is not: the window
    b = st.data["board"]
    assert b["locks"] == {} and [(d["kind"], d["level"]) for d in b["dangers"]] == [("exposed", "exposed")]
    assert "active, marked and unlocked" in st.state.value and "a sweep now would recover it" in st.state.value
    st.buttons["S1"].click()  # the sweep walks into it
    b = st.data["board"]
    assert b["lists"]["wait"] == ["1"] and b["jobs"]["1"]["stc"] == "1"
    assert [d["kind"] for d in b["dangers"]] == ["requeued"] and "W1 still works on it" in st.state.value
    st.rest_button.click()
    b = st.data["board"]
    assert b["lists"]["wait"] == ["1"] and b["lists"]["completed"] == ["1"]
    assert [(d["kind"], d["level"]) for d in b["dangers"]] == [("two-places", "broken")]
    assert "more than one place" in st.state.value and "#fde0dd" in st.state.value
    st.close()


def test_stepper_undo_restores_the_previous_history_exactly() -> None:
    st = SchedulerStepper("stalled-finish")
    assert st.undo_button.disabled and st.undo() is False
    _until(st, "W1", "SREM stalled 1")
    before = (st.runner.history().to_dict(), st.data["board"], st.data["actors"], st.state.value)
    st.buttons["S1"].click()
    assert st.data["board"]["lists"]["wait"] == ["1"]
    st.undo_button.click()
    after = (st.runner.history().to_dict(), st.data["board"], st.data["actors"], st.state.value)
    assert after == before and st.data["schedule"] == "v1:W1*9"
    st.undo_button.click()  # one more: the lock is back
    assert st.data["schedule"] == "v1:W1*8" and st.data["board"]["locks"] == {"1": "W1:1"}
    assert st.data["pending"]["W1"] == "DEL 1:lock"
    st.close()


def test_stepper_legend_and_readable_commands() -> None:
    st = SchedulerStepper("stalled-finish")
    lg = st.data["legend"]
    codes = lg["codes"]
    assert {"-1", "-2", "-3", "-6"} <= set(codes)
    assert "lock does not exist" in codes["-2"] and "JobLockMismatch" in codes["-6"]
    assert "hash does not exist" in codes["-1"]
    protocol = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert "or -1 -2 -3 -4 -6 -9" in protocol and set(codes) == {"-1", "-2", "-3", "-4", "-6", "-9"}
    assert {"atm", "defa", "stc", "ats"} <= set(lg["fields"]) and "attempts made" in lg["fields"]["atm"]
    assert "deferred failure" in lg["fields"]["defa"] and "stalled counter" in lg["fields"]["stc"]
    text = st.legend_view.value
    for needle in ("atm", "defa", "stc", "-1", "-2", "-6", "JobLockNotExist", "W1:1", "moveStalledJobsToWait"):
        assert needle in text, needle
    assert st.legend.selected_index is None  # closed until opened
    _until(st, "W1", "HMGET 1 atm defa priority")
    words = st.data["actors"]["W1"]["explain"]
    assert words == "read job 1's attempts made (atm), deferred failure (defa), priority"
    assert st.buttons["W1"].tooltip == words and html_escape(words) in st.actor_views["W1"].value
    st.buttons["W1"].click()
    assert st.data["last"]["explain"] == words and "deferred failure (defa)" in st.last_view.value
    assert st.data["history_words"][-1] == words  # each line of the history has its meaning as a tooltip
    assert f"title='{html_escape(words)}'" in st.history_view.value
    st.close()


def test_stepper_banner_renders_code_not_backticks() -> None:
    st = SchedulerStepper("stalled-finish", atomic=True)
    st.rest_button.click()
    assert "no anomaly" in st.banner.value and "`" not in st.banner.value
    assert "<code>stalled</code>" in st.banner.value
    assert "moveToFinished replied 0: done, nothing fetched" in st.data["history_words"]
    st.close()


def test_explain_commands() -> None:
    from emqlab.teaching.levels import explain

    assert explain(["EXISTS", "1:lock"]) == "is job 1 still locked? (1 yes, 0 no)"
    assert explain(["GET", "1:lock"]).startswith("read job 1's lock")
    assert explain(["ZADD", "completed", "1767225600014", "1"]) == "file job 1 as completed"
    assert explain(["HINCRBY", "1", "stc", "1"]) == "count one more: job 1's stalled counter (stc) + 1"
    assert explain(["HSET", "1", "defa", "job stalled more than allowable limit"]).startswith(
        "give job 1 a deferred failure (defa)")
    assert explain(["RPUSH", "wait", "1"]) == "put job 1 in wait (taken next)"
    assert explain(["XADD", "events", "*", "event", "completed", "jobId", "1"]) == \
        "announce the event \u201ccompleted\u201d in the event stream"


def test_a_split_run_knows_the_line_of_its_pending_call() -> None:
    """The Lua host's accessor the stepper highlights with: the script's lines on the Lua stack when the
    pending ``redis.call`` was made, innermost first."""
    from emqlab.scripting.host import LuaHost

    src = b"""local function get(k)
  return redis.call('GET', k)
end
redis.call('SET', KEYS[1], 'x')
local v = get(KEYS[1])
return v"""
    run = LuaHost().start(src, [b"k"], [])
    assert run.pending == (b"SET", b"k", b"x") and run.lines == (4,) and run.line == 4
    run.resume(b"OK")
    assert run.pending == (b"GET", b"k") and run.lines == (2, 5) and run.line == 2
    run.resume(b"x")
    assert run.done and run.result == b"x" and run.lines == () and run.line == 0


def test_the_line_of_a_call_made_inside_pcall_or_a_coroutine_and_a_long_command() -> None:
    """The lines come from the coroutine that issued the call (a ``pcall``'s or the script's own
    coroutine runs inside the run's); the ``TYPE`` a constant-``BY`` ``SORT`` asks first shows the
    ``SORT``'s line; a closed run shows none; a command of more words than the host returns one by one
    comes through whole."""
    from emqlab.scripting.host import LuaHost

    src = b"""local ok = pcall(function()
  return redis.call('GET', KEYS[1])
end)
local co = coroutine.wrap(function()
  redis.call('INCR', KEYS[1])
end)
co()
redis.call('SORT', KEYS[1], 'BY', 'nosort')
redis.call('RPUSH', KEYS[1], unpack(ARGV))
return redis.call('GET', KEYS[1])"""
    host = LuaHost()
    words = [str(i).encode() for i in range(450)]
    run = host.start(src, [b"k"], words)
    assert run.pending == (b"GET", b"k") and run.lines == (2,)
    run.resume(b"x")
    assert run.pending == (b"INCR", b"k") and run.lines == (5,)
    run.resume(1)
    assert run.pending == (b"TYPE", b"k") and run.lines == (8,)
    run.resume(b"list")
    assert run.pending == (b"SORT", b"k", b"BY", b"nosort") and run.lines == (8,)
    run.resume([])
    assert run.pending == (b"RPUSH", b"k", *words) and run.lines == (9,)
    run.resume(450)
    assert run.pending == (b"GET", b"k") and run.lines == (10,)
    run.close()
    assert run.pending is None and run.lines == ()
    assert host.live_runs == 0
