"""Levels: data next to the scenarios, each solvable level won by some schedule (and only the atomic one
not), playable from the terminal (tested through a pty)."""

from __future__ import annotations

import html
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from emqlab.protocol.schedules import parse_schedule
from emqlab.teaching.levels import Game, LevelError, board, load_level, parse_level, play, shipped_levels, solve

LEVELS = shipped_levels()


def test_at_least_eight_levels_one_unsolvable() -> None:
    assert len(LEVELS) >= 8
    assert [lv.number for lv in LEVELS] == list(range(1, len(LEVELS) + 1))
    assert len({lv.name for lv in LEVELS}) == len(LEVELS)
    unsolvable = [lv for lv in LEVELS if not lv.solvable]
    assert unsolvable and all(lv.mode != "split" for lv in unsolvable)  # (the finish is one step there)
    for lv in LEVELS:
        assert lv.tagline.endswith("?"), lv.name
        assert lv.story and lv.victory and lv.lesson and lv.goal.text


@pytest.mark.parametrize("level", LEVELS, ids=[lv.name for lv in LEVELS])
def test_each_level_is_won_exactly_when_it_says(level) -> None:  # type: ignore[no-untyped-def]
    if not level.solvable:
        explored, schedule = solve(level)
        assert explored > 0 and schedule is None  # no interleaving reaches the goal
        assert not level.solution
        return
    assert level.solution, f"{level.name}: a solvable level stores a winning schedule"
    game = Game(level)
    try:
        for actor in parse_schedule(level.solution, game.actors):
            game.step(actor)
        game.finish()
        assert game.won()
    finally:
        game.close()


def test_solve_finds_a_winning_schedule() -> None:
    explored, schedule = solve(load_level("two-places"))
    assert explored > 0 and schedule is not None
    game = Game(load_level("two-places"))
    try:
        for actor in parse_schedule(schedule, game.actors):
            game.step(actor)
        game.finish()
        assert game.won()
    finally:
        game.close()


# -- the levels in the stepper widget -------------------------------------------------------------------------


def shown(text: str) -> str:
    """Level prose as the widget shows it (HTML-escaped, `code` spans as <code>)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv.solvable], ids=[lv.name for lv in LEVELS if lv.solvable])
def test_each_level_is_won_in_the_widget(level) -> None:  # type: ignore[no-untyped-def]
    from emqlab.ui.widgets import SchedulerStepper

    st = SchedulerStepper(level=level)
    try:
        assert shown(level.tagline) in st.header.value and shown(level.story) in st.header.value
        assert shown(level.goal.text) in st.goal_view.value
        assert st.atomic.disabled and st.data["mode"] == level.mode
        for actor in parse_schedule(level.solution, list(st.buttons)):
            assert st.data["level"]["status"] in ("playing", "met")
            st.buttons[actor].click()  # the goal is checked after every step
        st.rest_button.click()
        lv = st.data["level"]
        assert lv["status"] == "won" and lv["won"] and lv["met"]
        assert lv["schedule"].startswith(level.solution.rsplit(".", 1)[0])
        view = st.goal_view.value
        assert "You win!" in view and shown(level.victory) in view and shown(level.lesson) in view
        # the run's own because-sentence, showing what the level teaches
        assert lv["why"] and re.search(level.teaches["because"], lv["why"]) and html.escape(lv["why"]) in view
        assert lv["schedule"] in view
        assert f"--scenario {level.scenario} --{level.mode}" in view
        assert "won" in st.summary
    finally:
        st.close()


@pytest.mark.parametrize("level", [lv for lv in LEVELS if not lv.solvable],
                         ids=[lv.name for lv in LEVELS if not lv.solvable])
def test_an_unsolvable_level_says_so_in_the_widget(level) -> None:  # type: ignore[no-untyped-def]
    from emqlab.ui.widgets import SchedulerStepper

    st = SchedulerStepper(level=level)
    try:
        for first in reversed(list(st.buttons)):  # each actor first
            st.reset_button.click()
            assert st.data["level"]["status"] == "playing"
            st.buttons[first].click()
            st.rest_button.click()
            lv = st.data["level"]
            assert lv["status"] == "unsolvable" and lv["unsolvable"] and not lv["won"]
            assert lv["explored"] >= 2 and "Unsolvable" in st.goal_view.value
            assert "none does" in st.goal_view.value and "You win!" not in st.goal_view.value
    finally:
        st.close()


def test_a_level_lost_in_the_widget_says_how_to_go_on() -> None:
    from emqlab.ui.widgets import SchedulerStepper

    st = SchedulerStepper(level="two-places")
    try:
        st.hint_button.click()
        assert st.level is not None and shown(st.level.hint) in st.goal_view.value
        st.rest_button.click()  # scenario order: no race
        assert st.data["level"]["status"] == "lost" and "undo" in st.goal_view.value
        st.undo_button.click()
        assert st.data["level"]["status"] == "playing" and not st.data["done"]
    finally:
        st.close()


def test_undo_replays_the_choices_but_the_last() -> None:
    game = Game(load_level("two-places"))
    try:
        for _ in range(9):
            game.step("W1")
        game.step("S1")
        assert "wait: 1" in game.board()
        assert game.undo() and game.choices == ["W1"] * 9
        assert "wait: -" in game.board() and "active, marked and unlocked" in game.board()
    finally:
        game.close()


def test_the_unsolvable_level_is_won_by_exhausting_it() -> None:
    out: list[str] = []
    moves = iter(["f", "s"])
    won = play(load_level("one-step"), lambda _p: next(moves), out.append)
    text = "\n".join(out)
    assert won and "none reaches the goal" in text and "You win!" in text
    assert "goal is not reached" in text  # stepping through first does not win


def test_level_files_are_checked() -> None:
    text = (Path(__file__).resolve().parents[1] / "emqlab" / "levels" / "01-two-places.yaml").read_text()
    assert parse_level(text, "x.yaml").name == "two-places"
    with pytest.raises(LevelError, match="scenario: no shipped scenario"):
        parse_level(text.replace("scenario: stalled-finish", "scenario: nope"), "x.yaml")
    with pytest.raises(LevelError, match="goal.anomaly"):
        parse_level(text.replace("anomaly: double-placement", "anomaly: kaboom"), "x.yaml")
    with pytest.raises(LevelError, match="no level 'zzz'"):
        load_level("zzz")
    with pytest.raises(LevelError, match="solution: bad schedule"):
        parse_level(text.replace("solution: v1:W1*9.S1", "solution: v1:W9"), "x.yaml")


def read_until(fd: int, marker: bytes, limit: float = 120.0) -> bytes:
    """Read the pty until ``marker`` shows (``limit`` only guards a hang; nothing asserts on time)."""
    buf = b""
    import time

    end = time.monotonic() + limit
    while marker not in buf and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_play_in_a_terminal() -> None:
    emqlab = Path(sys.executable).parent / "emqlab"
    leader, follower = pty.openpty()
    proc = subprocess.Popen([str(emqlab), "play", "two-places"], stdin=follower, stdout=follower, stderr=follower,
                            close_fds=True)
    os.close(follower)
    try:
        seen = read_until(leader, b"> ")
        assert b"Can one job be finished and waiting at the same time?" in seen
        for key in [b"1"] * 9 + [b"2", b"u", b"2", b"f"]:
            os.write(leader, key + b"\r")
            if key != b"f":
                seen += read_until(leader, b"> ")
        seen += read_until(leader, b"replay it:")
        seen += read_until(leader, b"\n", 10)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    text = seen.decode("utf-8", "replace")
    assert "undone" in text and "You win!" in text
    assert "emqlab replay 'v1:W1*9.S1.W1*8' --scenario stalled-finish --split" in text


def test_the_list_of_levels_fits_80_columns() -> None:
    from click.testing import CliRunner

    from emqlab.ui.cli import main

    res = CliRunner().invoke(main, ["play", "--list"])
    assert res.exit_code == 0 and len(res.output.splitlines()) == len(LEVELS)
    assert all(len(line) <= 80 for line in res.output.splitlines()), res.output


def test_the_game_fits_80_columns() -> None:
    from click.testing import CliRunner

    from emqlab.ui.cli import main

    res = CliRunner().invoke(main, ["play", "lapsed-lease"], input="1\n1\n1\n1\n1\n2\n3\nf\n",
                             env={"COLUMNS": "80"})
    assert "*** You win!" in res.output and "why:" in res.output
    too_wide = [line for line in res.output.splitlines() if len(line) > 80]
    assert not too_wide, too_wide[0]


def test_a_job_in_a_list_its_index_no_longer_names_stays_on_the_board() -> None:
    """Level 15's win: job 2 sits in delayed:1000 after SCHED took 1000 out of the index. The engine counts
    it in no place (no poll finds it), but its list still holds it: the board shows the list as unindexed
    and says why the job is lost, instead of letting job 2 vanish; while the index names the list, it is an
    ordinary place."""
    game = Game(load_level("emptied-list"))
    try:
        assert "delayed:1000: 1" in game.board() and "unindexed" not in game.board()
        for actor in ["SCHED"] * 3 + ["PROD"] * 2:
            game.step(actor)
        assert "delayed:1000: 2" in game.board() and "unindexed" not in game.board()
        game.step("SCHED")  # ZREM: the index no longer names 1000
        b = board(game.runner)
        assert b["lists"]["delayed:1000 (unindexed)"] == ["2"]
        assert [d["kind"] for d in b["dangers"]] == ["unindexed"]
        assert "no poll will find it" in game.board()
    finally:
        game.close()
