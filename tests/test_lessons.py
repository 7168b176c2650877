"""Every level's lesson checked by the engine (issue 27, item 1), over every trace of the level's run:

(a) every winning run shows the mechanism the level teaches (``teaches.because``, in the because-sentence of
    the goal's anomaly), and the victory the game prints comes with that run's own because-sentence;
(b) without each of the level's ingredients (``teaches.without``: an actor taken out, or another finish mode)
    no run reaches the goal — and an unsolvable level's goal is reached in the modes it contrasts with
    (``teaches.reachable_in``), so what closes it is the level's mode;
(c) the stored solution and the hint's schedule, followed literally, both win;
(d) each level is its own trick: no level's solution wins another level.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from emqlab.analysis.anomalies import checker
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import load
from emqlab.explore import Explorer
from emqlab.protocol.schedules import ScheduleError, parse_schedule
from emqlab.teaching.levels import Game, Level, play, shipped_levels

LEVELS = shipped_levels()
SOLVABLE = [lv for lv in LEVELS if lv.solvable]


def winning_runs(level: Level, scenario: Any = None, mode: str | None = None) -> tuple[int, list[Any]]:
    """(runs explored, the histories that reach the level's goal): one run per trace, unbounded."""
    sc = scenario if scenario is not None else load(level.scenario)
    wins: list[Any] = []

    def check(h: Any, s: Any) -> Any:
        kinds, unchecked = checker(h, s)
        full = h.with_findings(kinds, unchecked)
        if level.goal.met(full):
            wins.append(full)
        return kinds, unchecked

    with Runner(sc, mode or level.mode, check=check) as r:
        rep = Explorer(r).exhaustive()
    assert rep.complete
    return rep.explored, wins


def _play(level: Level, schedule: str) -> Game:
    game = Game(level)
    for actor in parse_schedule(schedule, game.actors):
        game.step(actor)
    game.finish()
    return game


def test_every_solvable_level_declares_what_it_teaches() -> None:
    for lv in SOLVABLE:
        assert lv.teaches.get("because") and lv.teaches.get("without"), lv.name
        assert lv.solution and lv.hint_schedule, lv.name
    for lv in LEVELS:
        if not lv.solvable:
            assert lv.teaches.get("reachable_in"), lv.name
    assert len([lv for lv in LEVELS if not lv.solvable]) >= 2


@pytest.mark.parametrize("level", SOLVABLE, ids=[lv.name for lv in SOLVABLE])
def test_every_winning_run_shows_the_mechanism_the_level_teaches(level: Level) -> None:
    explored, wins = winning_runs(level)
    assert wins, f"{level.name}: no run of {explored} wins"
    for h in wins:
        reasons = level.goal.reasons(h)
        assert reasons, (level.name, h.schedule)
        assert any(re.search(level.teaches["because"], r) for r in reasons), (level.name, h.schedule, reasons)


@pytest.mark.parametrize("level", SOLVABLE, ids=[lv.name for lv in SOLVABLE])
def test_without_each_ingredient_no_run_reaches_the_goal(level: Level) -> None:
    sc = load(level.scenario)
    for ingredient in level.teaches["without"]:
        if ingredient in ("split", "atomic", "finish-then-fetch", "transaction"):
            explored, wins = winning_runs(level, sc, ingredient)
        else:
            assert ingredient in [a.id for a in sc.actors], (level.name, ingredient)
            fewer = replace(sc, actors=[a for a in sc.actors if a.id != ingredient])
            explored, wins = winning_runs(level, fewer)
        assert explored > 0 and not wins, f"{level.name} without {ingredient}: {wins[0].schedule} wins"


@pytest.mark.parametrize("level", [lv for lv in LEVELS if not lv.solvable],
                         ids=[lv.name for lv in LEVELS if not lv.solvable])
def test_an_unsolvable_levels_goal_is_reached_in_the_mode_it_contrasts_with(level: Level) -> None:
    explored, wins = winning_runs(level)
    assert explored > 0 and not wins
    for mode in level.teaches["reachable_in"]:
        assert winning_runs(level, mode=mode)[1], f"{level.name}: nothing wins in {mode} either"


@pytest.mark.parametrize("level", SOLVABLE, ids=[lv.name for lv in SOLVABLE])
def test_the_solution_and_the_hint_both_win_and_the_win_says_why(level: Level) -> None:
    for schedule in (level.solution, level.hint_schedule):
        game = _play(level, schedule)
        try:
            assert game.won(), (level.name, schedule, game.history().kinds)
        finally:
            game.close()
    moves = iter(parse_schedule(level.solution, [a.id for a in load(level.scenario).actors]))
    out: list[str] = []
    won = play(level, read=lambda _p: next(moves, "f"), write=out.append)
    text = "\n".join(out)
    assert won and "*** You win!" in text
    why = re.search(r"\n  why: (.*)\n", text)
    assert why and re.search(level.teaches["because"], why.group(1)), text[-600:]


def test_each_level_is_its_own_trick() -> None:
    """No level's solution (the moves a player makes) wins another level."""
    for a in SOLVABLE:
        for b in LEVELS:
            if a is b:
                continue
            try:
                game = _play(b, a.solution)
            except ScheduleError:
                continue  # (another cast of actors: the moves do not apply)
            try:
                assert not game.won(), f"{a.name}'s solution {a.solution} also wins {b.name}"
            finally:
                game.close()
