"""Levels: a scenario, a mode and a goal, played one step at a time (``emqlab play LEVEL``).

A level is data, a YAML file in ``emqlab/levels/``:

``level`` (its number), ``name``, ``title``, ``tagline`` (the question it asks), ``story`` (the intro),
``scenario`` (a shipped scenario name), ``mode`` (``split``, ``atomic`` or ``finish-then-fetch``), ``goal``
(``text`` for the player, and the predicate over the finished run: ``anomaly``, a kind or a list of kinds
any of which wins, and/or ``placements``, job → lists it must all be in), ``victory`` (shown on a win),
``lesson`` (one sentence), ``hint``, ``solvable`` (default true; false for a level no schedule wins,
where the player wins by letting the explorer show that every interleaving fails) and ``solution`` (a
schedule string that wins, for the tests and the instructor; never shown to the player; the run's rest
is in scenario order, as ``emqlab replay`` plays it).

The game keeps the player's choices: a step is one more choice, undo replays the choices but the last on a
fresh run (runs are deterministic), and a win prints the schedule string to replay it.

What the player sees (the board, each actor's position in its script, a command in words, the legend) is
computed as data in :mod:`emqlab.teaching.level_view`, for the terminal (:class:`Game`) and the stepper
widget alike; its names are importable from here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from emqlab.engine.history import render_reply
from emqlab.teaching.level_view import (
    BOARD,
    Danger,
    ScriptSource,
    board,
    explain,
    legend,
    position,
    result_text,
    script_source,
)
from emqlab.text import command_lines

LEVELS_DIR = Path(__file__).resolve().parents[1] / "levels"
MODES = ("split", "atomic", "finish-then-fetch")


class LevelError(ValueError):
    """A level file with a mistake, or no such level: ``file: field: problem``."""


@dataclass(frozen=True)
class Goal:
    """What a run must reach: one of ``anomalies`` — with ``because`` (a regular expression), one whose
    because-sentence shows that mechanism (``lease had lapsed``: the level's trick, not another's) — and
    the ``placements`` (job id → lists it must be in), none of the kinds in ``excludes``, and for each kind
    in ``requires`` an anomaly of it whose because-sentence matches its expression (how the run got there)."""

    text: str
    anomalies: tuple[str, ...] = ()
    placements: dict[str, tuple[str, ...]] = field(default_factory=dict)
    because: str = ""
    excludes: tuple[str, ...] = ()
    requires: dict[str, str] = field(default_factory=dict)

    def reasons(self, history: Any) -> list[str]:
        """The because-sentences of the run's goal anomalies that show the goal's mechanism."""
        return [a["because"] for a in history.anomalies if a["kind"] in self.anomalies
                and (not self.because or re.search(self.because, a["because"]))]

    def met(self, history: Any) -> bool:
        """Whether a finished run's history reaches the goal."""
        if self.anomalies and not self.reasons(history):
            return False
        if set(history.kinds) & set(self.excludes):
            return False
        for kind, pattern in self.requires.items():
            if not any(a["kind"] == kind and re.search(pattern, a["because"]) for a in history.anomalies):
                return False
        for job, lists in self.placements.items():
            if not set(lists) <= set(history.final["placements"].get(job, [])):
                return False
        return True


@dataclass(frozen=True)
class Level:
    number: int
    name: str
    title: str
    tagline: str
    story: str
    scenario: str
    mode: str
    goal: Goal
    victory: str
    lesson: str
    hint: str = ""
    solvable: bool = True
    path: str = ""
    solution: str = ""
    #: the schedule the hint describes, followed literally (it must win too)
    hint_schedule: str = ""
    #: what the level teaches, checked by tests/test_lessons.py: ``because``, a regular expression every
    #: winning run's goal anomaly shows in its because-sentence; ``without``, the ingredients (an actor id,
    #: or a finish mode to play instead) without which no run reaches the goal; for an unsolvable level,
    #: ``reachable_in``, the finish modes in which the same goal is reached (what the level's mode closes)
    teaches: dict[str, Any] = field(default_factory=dict)

    def replay_command(self, schedule: str) -> str:
        """The command that replays ``schedule`` on this level's scenario and mode."""
        return " ".join(self.replay_words(schedule))

    def replay_words(self, schedule: str) -> list[str]:
        """:meth:`replay_command` in the pieces it may be broken between (an option with its value)."""
        return ["emqlab replay", f"'{schedule}'", f"--scenario {self.scenario}", f"--{self.mode}"]


def _text(data: dict[str, Any], key: str, where: str, required: bool = True) -> str:
    v = data.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or not v.strip():
        raise LevelError(f"{where}: {key}: must be a non-empty string")
    return " ".join(v.split())


def parse_level(text: str, where: str) -> Level:
    from emqlab.engine.scenario import ANOMALY_KINDS, shipped_names

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise LevelError(f"{where}: not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise LevelError(f"{where}: a level is a mapping of fields")
    known = {"level", "name", "title", "tagline", "story", "scenario", "mode", "goal", "victory", "lesson",
             "hint", "solvable", "solution", "hint_schedule", "teaches"}
    extra = sorted(set(data) - known)
    if extra:
        raise LevelError(f"{where}: {extra[0]}: unknown field (known: {', '.join(sorted(known))})")
    number = data.get("level")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise LevelError(f"{where}: level: must be a positive integer")
    scenario = _text(data, "scenario", where)
    if scenario not in shipped_names():
        raise LevelError(f"{where}: scenario: no shipped scenario {scenario!r}")
    mode = data.get("mode", "split")
    if mode not in MODES:
        raise LevelError(f"{where}: mode: must be one of {', '.join(MODES)}")
    g = data.get("goal")
    if not isinstance(g, dict) or not set(g) <= {"text", "anomaly", "placements", "because", "excludes", "requires"}:
        raise LevelError(f"{where}: goal: a mapping with text, anomaly, because, excludes, requires and/or"
                         " placements")
    requires = g.get("requires", {})
    if not isinstance(requires, dict) or any(k not in ANOMALY_KINDS or not isinstance(v, str)
                                             for k, v in requires.items()):
        raise LevelError(f"{where}: goal.requires: anomaly kind → regular expression for its because-sentence")
    for pattern in [str(g.get("because", "")), *map(str, requires.values())]:
        try:
            re.compile(pattern)
        except re.error as e:
            raise LevelError(f"{where}: goal: not a regular expression: {pattern!r} ({e})") from None
    excludes = g.get("excludes", [])
    if not isinstance(excludes, list) or any(k not in ANOMALY_KINDS for k in excludes):
        raise LevelError(f"{where}: goal.excludes: anomaly kinds, from {', '.join(ANOMALY_KINDS)}")
    because = g.get("because", "")
    kinds = g.get("anomaly", [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if not isinstance(kinds, list) or any(k not in ANOMALY_KINDS for k in kinds):
        raise LevelError(f"{where}: goal.anomaly: anomaly kinds, from {', '.join(ANOMALY_KINDS)}")
    placements = g.get("placements", {})
    if not isinstance(placements, dict) or not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in placements.values()):
        raise LevelError(f"{where}: goal.placements: job id → list of list names")
    if not kinds and not placements:
        raise LevelError(f"{where}: goal: needs an anomaly or placements to check")
    solvable = data.get("solvable", True)
    if not isinstance(solvable, bool):
        raise LevelError(f"{where}: solvable: true or false")
    teaches = data.get("teaches", {})
    if not isinstance(teaches, dict) or not set(teaches) <= {"because", "without", "reachable_in"} or not all(
            isinstance(x, str) for x in [*teaches.get("without", []), *teaches.get("reachable_in", [])]):
        raise LevelError(f"{where}: teaches: a mapping with because (a regular expression), without (a list"
                         " of actor ids and finish modes) and reachable_in (finish modes)")
    for key in ("solution", "hint_schedule"):
        value = data.get(key, "")
        if not value:
            continue
        if not solvable:
            raise LevelError(f"{where}: {key}: an unsolvable level has none")
        from emqlab.engine.scenario import load
        from emqlab.protocol.schedules import ScheduleError, parse_schedule

        try:
            parse_schedule(str(value), [a.id for a in load(scenario).actors])
        except ScheduleError as e:
            raise LevelError(f"{where}: {key}: {e}") from None
    solution = data.get("solution", "")
    return Level(number, _text(data, "name", where), _text(data, "title", where), _text(data, "tagline", where),
                 _text(data, "story", where), scenario, mode,
                 Goal(_text(g, "text", where + ": goal"), tuple(kinds),
                      {str(k): tuple(v) for k, v in placements.items()}, str(because or ""), tuple(excludes),
                      {str(k): str(v) for k, v in requires.items()}),
                 _text(data, "victory", where), _text(data, "lesson", where), _text(data, "hint", where, False),
                 solvable, where, str(solution or ""), str(data.get("hint_schedule") or ""), dict(teaches))


def shipped_levels() -> list[Level]:
    levels = [parse_level(p.read_text(encoding="utf-8"), p.name) for p in sorted(LEVELS_DIR.glob("*.yaml"))]
    return sorted(levels, key=lambda lv: lv.number)


def load_level(which: str) -> Level:
    """A shipped level by name or number, or a level file by path."""
    p = Path(which)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return parse_level(p.read_text(encoding="utf-8"), str(p))
    levels = shipped_levels()
    for lv in levels:
        if which in (lv.name, str(lv.number)):
            return lv
    raise LevelError(f"no level {which!r}: give a number from {levels[0].number} to {levels[-1].number} or a name"
                     " (emqlab play --list shows them)")


def solve(level: Level) -> tuple[int, str | None]:
    """The level's run explored, every interleaving (up to the explorer's sound reductions): (how many runs,
    the schedule of a run that wins, or None when none does)."""
    from emqlab.engine.scenario import load
    from emqlab.explore import explore

    sc = load(level.scenario)
    g = level.goal
    if not (g.placements or g.because or g.excludes or g.requires):  # the explorer's witnesses answer it
        rep = explore(sc, level.mode)
        for kind in level.goal.anomalies:
            if kind in rep.witnesses:
                return rep.explored, str(rep.witnesses[kind].schedule)
        return rep.explored, None
    return _solve_by_runs(level, sc)


def _solve_by_runs(level: Level, sc: Any) -> tuple[int, str | None]:
    """:func:`solve` for a goal the witnesses cannot answer (a mechanism, placements): every trace's run,
    checked as it is recorded."""
    from emqlab.analysis.anomalies import checker
    from emqlab.engine.runner import Runner
    from emqlab.explore import Explorer

    found: list[str] = []

    def check(h: Any, scenario: Any) -> Any:
        kinds, unchecked = checker(h, scenario)
        if not found and level.goal.met(h.with_findings(kinds, unchecked)):
            found.append(h.schedule)
        return kinds, unchecked

    with Runner(sc, level.mode, check=check) as r:
        rep = Explorer(r).exhaustive()
    return rep.explored, (found[0] if found else None)


# -- the game ------------------------------------------------------------------------------------------------


def describe_op(op: Any) -> str:
    """An actor's next step in one line: the command (or script) and the part of the script it is in."""
    if op is None:
        return "done"
    if op.kind == "command" and op.command is not None:
        parts = [op.command[0].decode("utf-8", "replace").upper()]
        for a in op.command[1:4]:
            s = a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a)
            parts.append(s.split("}:")[-1][:24])
        text = " ".join(parts) + (" …" if len(op.command) > 4 else "")
    elif op.kind == "script":
        text = f"EVALSHA {op.label} (the whole script, one step)"
    else:
        text = f"{op.kind}: {op.label}"
    return text + (f"   [{op.section}]" if op.section and op.section != op.label else f"   [{op.label}]")


class Game:
    """One level in play: step an actor, undo, restart, finish the run; the verdict when it is done."""

    def __init__(self, level: Level) -> None:
        from emqlab.engine.scenario import load

        self.level = level
        self.scenario = load(level.scenario)
        self.actors = [a.id for a in self.scenario.actors]
        self.choices: list[str] = []
        self.runner: Any = None
        self._fresh()

    def _fresh(self) -> None:
        from emqlab.explore.checked import Runner

        if self.runner is not None:
            self.runner.close()
        self.runner = Runner(self.scenario, self.level.mode)
        self.runner.__enter__()
        for c in self.choices:
            self.runner.step(c)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    @property
    def done(self) -> bool:
        return bool(self.runner.done)

    def step(self, actor: str) -> Any:
        s = self.runner.step(actor)
        self.choices.append(actor)
        return s

    def undo(self) -> bool:
        if not self.choices:
            return False
        self.choices.pop()
        self._fresh()
        return True

    def restart(self) -> None:
        self.choices = []
        self._fresh()

    def finish(self) -> None:
        """The rest of the run in scenario order (what a schedule string does when it ends)."""
        while not self.runner.done:
            self.step(self.runner.enabled[0])

    @property
    def schedule(self) -> str:
        return str(self.runner.schedule)

    def history(self) -> Any:
        return self.runner.history()

    def won(self) -> bool:
        return self.done and self.level.goal.met(self.history())

    def board(self) -> str:
        return board_text(board(self.runner))

    def status(self) -> str:
        lines = [f"step {self.runner.index} · schedule {self.schedule}"]
        for i, a in enumerate(self.actors, start=1):
            lines.append(f"  [{i}] {a:<3} next: {describe_op(self.runner.pending.get(a))}")
            pos = position(self.runner, a)
            if pos is not None:
                lines.append(_elide("        " + position_text(pos), GAME_WIDTH))
        lines.append(self.board())
        return "\n".join(lines)


def _elide(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def position_text(pos: dict[str, Any]) -> str:
    """An actor's :func:`position` in one line: ``WRITE · write 1: release the lock. · moveToFinished-14.lua:237 ·
    release job 1's lock``."""
    parts = [p for p in (pos["section"] if not pos["atomic"] else None, pos["step"], pos["inside"], pos["at"])
             if p]
    return " · ".join([*parts, pos["explain"]])


def board_text(b: dict[str, Any]) -> str:
    """:func:`board` as the terminal shows it: one line of lists and locks, then a line per danger (``!!``
    the damage is done, ``!`` a sweep now would do it, or a warning)."""
    cells = [f"{n}: {','.join(v) or '-'}" for n, v in b["lists"].items()]
    locks = ", ".join(f"{j}→{t}" for j, t in b["locks"].items()) or "-"
    line = "  board  " + " · ".join(cells) + f" · locks: {locks}"
    for d in b["dangers"]:
        line += f"\n  {'!!' if d['level'] == 'broken' else '! '} {d['text']}"
    return line


KEYS = ("keys: 1-9 step that actor (or type its id) · f finish the run in order · u undo · r restart · "
        "s solve (try every interleaving) · h hint · q quit")


def intro(level: Level) -> str:
    return "\n".join([f"Level {level.number} · {level.title} ({level.name})", f"  {level.tagline}", "",
                      f"  {level.story}", "", f"  goal: {level.goal.text}", f"  {KEYS}"])


#: the game's lines fit this many columns (wrapped at words, continuation lines indented)
GAME_WIDTH = 80


def play(level: Level, read: Callable[[str], str] = input, write: Callable[[str], None] = print,
         width: int | None = None) -> bool:
    """Play ``level`` on a terminal: ``read`` a line per move, ``write`` the game, every line fitted to ``width``
    columns (``None``: as it is; the CLI passes the terminal's, at most :data:`GAME_WIDTH`). True when it
    was won."""
    from emqlab.text import wrap

    def say(text: str) -> None:  # (every line fitted to width)
        write("\n".join(wrap(text, width)))

    game = Game(level)
    say(intro(level))
    try:
        while True:
            say(game.status())
            if game.done:
                if game.won():
                    why = level.goal.reasons(game.history())
                    say(f"\n*** You win! {level.victory}\n" + (f"  why: {why[0]}\n" if why else "")
                          + f"  lesson: {level.lesson}")
                    for line in command_lines("  replay it: ", level.replay_words(game.schedule), width):
                        write(line)  # (broken with " \\" to paste whole, never re-wrapped)
                    return True
                kinds = game.history().kinds
                say(f"  the run is over and the goal is not reached ({', '.join(kinds) or 'no anomaly'}): "
                      "u to undo, r to restart, s to let the explorer try every order, q to quit")
            try:
                line = read("> ").strip()
            except EOFError:
                return False
            key = line.lower()
            if key in ("q", "quit", "exit"):
                return False
            if key == "h":
                say(f"  hint: {level.hint or 'no hint for this level'}")
            elif key == "u":
                say("  undone" if game.undo() else "  nothing to undo")
            elif key == "r":
                game.restart()
            elif key == "f":
                game.finish()
            elif key == "s":
                explored, schedule = solve(level)
                if schedule is None:
                    say(f"  the explorer tried every interleaving ({explored} runs, one for each set that differs"
                          " only in the order of independent steps): none reaches the goal.")
                    if not level.solvable:
                        say(f"\n*** You win! {level.victory}\n  lesson: {level.lesson}")
                        return True
                else:
                    say(f"  the explorer ran {explored} runs (one for each set of interleavings that differ"
                          " only in the order of independent steps); at least one wins. Keep looking.")
            else:
                actor = _actor(game, line)
                if actor is None:
                    say(f"  unknown key {line!r}. {KEYS}")
                elif game.done or actor not in game.runner.enabled:
                    say(f"  {actor} has no step left")
                else:
                    s = game.step(actor)
                    effects = " ".join(str(e) for e in s.effects)
                    say(f"  {s.index:>3} {s.actor} {s.command_text(44)} -> {render_reply(s.reply, 24)}"
                          + (f"   {effects}" if effects else ""))
    finally:
        game.close()


def _actor(game: Game, line: str) -> str | None:
    if line.isdigit() and 1 <= int(line) <= len(game.actors):
        return game.actors[int(line) - 1]
    up = line.upper()
    return up if up in game.actors else None


__all__ = ["BOARD", "Danger", "Game", "Goal", "Level", "LevelError", "MODES", "ScriptSource", "board", "board_text",
           "describe_op", "explain", "intro", "legend", "load_level", "parse_level", "play", "position",
           "position_text", "result_text", "script_source", "shipped_levels", "solve"]
