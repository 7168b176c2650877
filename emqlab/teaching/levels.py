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

import functools
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
    script_calls,
    script_source,
)

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


def load_level(which: str | int) -> Level:
    """A shipped level by name or number (``7`` or ``"7"``), or a level file by path."""
    which = str(which)
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


def met_so_far(level: Level, choices: list[str] | tuple[str, ...], history: Any) -> bool:
    """Whether the game may say "the goal is met so far: let every actor finish to win" after ``choices``
    (actor ids, the run's steps so far; ``history`` is that partial run's): the goal holds of the partial
    run *and* the rest of the run in scenario order (what finishing does) wins. A goal about the final
    state can hold of a partial run that finishing undoes (level 15's job 2 is in no list before its
    producer has added it), so the first test alone would tell the player to finish a run that loses."""
    if not level.goal.met(history):
        return False
    return _rest_in_order_wins(level.name, tuple(choices))


@functools.lru_cache(maxsize=1024)
def _rest_in_order_wins(name: str, choices: tuple[str, ...]) -> bool:
    from emqlab.engine.scenario import load
    from emqlab.explore.checked import Runner

    level = load_level(name)
    with Runner(load(level.scenario), level.mode) as r:
        for c in choices:
            r.step(c)
        while not r.done:
            r.step(r.enabled[0])
        return bool(level.goal.met(r.history()))


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


def board_values(b: dict[str, Any]) -> list[str]:
    """What the board shows besides the lists (:func:`board`'s data): each job's counts (``atm`` attempts
    made, ``ats`` attempts started, ``stc`` stalled counter, ``defa``), the attempts its options allow, who
    works on it (``no job data`` when its hash does not exist), and the queue's counters when the scenario keeps
    metrics: every value a level's goal names."""
    out = []
    for job, f in b["jobs"].items():
        if not f.get("exists", True):
            out.append(f"job {job}: no job data")
            continue
        counts = " ".join(f"{k}={f[k]}" for k in ("atm", "ats", "stc", "defa") if k in f)
        if job in b["attempts"]:
            counts += f" (attempts allowed: {b['attempts'][job]})"
        who = b["holders"].get(job)
        out.append(f"job {job}: {counts or 'no counts yet'}" + (f" · worked on by {', '.join(who)}" if who else ""))
    if b["counters"]:
        out.append("counters: " + " ".join(f"{k}={v}" for k, v in b["counters"].items()))
    return out


def board_text(b: dict[str, Any]) -> str:
    """:func:`board` as the terminal shows it: one line of lists and locks, one of the jobs' counts and the
    queue's counters (:func:`board_values`), then a line per danger (``!!`` the damage is done, ``!`` a sweep
    now would do it, or a warning)."""
    cells = [f"{n}: {','.join(v) or '-'}" for n, v in b["lists"].items()]
    locks = ", ".join(f"{j}→{t}" for j, t in b["locks"].items()) or "-"
    line = "  board  " + " · ".join(cells) + f" · locks: {locks}"
    values = board_values(b)
    if values:
        line += "\n         " + " · ".join(values)
    for d in b["dangers"]:
        line += f"\n  {'!!' if d['level'] == 'broken' else '! '} {d['text']}"
    return line


KEYS = ("keys: 1-9 step that actor (or type its id; 1*9 or W1*9: nine steps) · x the commands of the last "
        "whole-script step (x7: of step 7) · f finish the run in order · u undo · r restart · s solve (try every "
        "interleaving) · h hint · q quit")


def intro(level: Level) -> str:
    return "\n".join([f"Level {level.number} · {level.title} ({level.name})", f"  {level.tagline}", "",
                      f"  {level.story}", "", f"  goal: {level.goal.text}", f"  {KEYS}"])


#: the game's lines fit this many columns (wrapped at words, continuation lines indented)
GAME_WIDTH = 80


_TOKEN = re.compile(r"^(?P<who>[A-Za-z0-9_-]+?)(?:\*(?P<times>\d{1,3}))?$")


def tokens(line: str) -> list[str]:
    """A line of keys as moves: ``1 1 2``, ``W1*9 S1`` and ``1*9,2`` (an actor a number of times) each give
    their keys one by one; ``x``, ``x12`` (expand step 12) and the letters stay whole."""
    out: list[str] = []
    for word in re.split(r"[\s,]+", line.strip()):
        m = _TOKEN.match(word)
        if word and m and m.group("times"):
            out += [m.group("who")] * int(m.group("times"))
        elif word:
            out.append(word)
    return out


# -- the keys --------------------------------------------------------------------------------------------------


class Session:
    """One level in play and its keys: :meth:`handle` takes one key (an actor's number or id, or a letter) and
    returns the lines that answer it; ``quit`` (q was pressed), ``solved`` (an unsolvable level won by
    letting the explorer show that no order reaches the goal). Close it (:meth:`close`) to free the run."""

    def __init__(self, level: Any) -> None:
        self.level = level
        self.game = Game(level)
        self.quit = False
        self.solved = False
        #: the step whose commands the last key showed (``x``), if it did
        self.expanded: int | None = None

    def close(self) -> None:
        self.game.close()

    def actor(self, key: str) -> str | None:
        """The actor a key names: its number on the screen (1-based) or its id, any case."""
        actors = self.game.actors
        if key.isascii() and key.isdigit() and 1 <= int(key) <= len(actors):
            return actors[int(key) - 1]
        return key.upper() if key.upper() in actors else None

    def handle(self, key: str) -> list[str]:
        """Carry out one key; the lines that say what it did (an unknown key says so and lists the keys)."""
        game, lv = self.game, self.level
        low = key.lower()
        # (an actor's id comes first: crash levels have an actor X1, and x1 would expand step 1)
        m = re.fullmatch(r"x(\d+)?", low) if low.upper() not in game.actors else None
        self.expanded = None
        if low in ("q", "quit", "exit"):
            self.quit = True
            return []
        if low == "h":
            return [f"hint: {lv.hint or 'no hint for this level'}"]
        if low == "u":
            return ["undone" if game.undo() else "nothing to undo"]
        if low == "r":
            game.restart()
            return ["back to the start"]
        if low == "f":
            game.finish()
            return [f"the rest of the run in scenario order: step {game.runner.index}"]
        if low == "s":
            explored, schedule = solve(lv)
            if schedule is None:
                self.solved = not lv.solvable
                return [f"the explorer tried every interleaving ({explored} runs, one for each set that differs"
                        " only in the order of independent steps): none reaches the goal."]
            return [f"the explorer ran {explored} runs (one for each set of interleavings that differ only in"
                    " the order of independent steps); at least one wins. Keep looking."]
        if m is not None:
            return self.expand(int(m.group(1)) if m.group(1) else None)
        actor = self.actor(key)
        if actor is None:
            return [f"unknown key {key!r}. {KEYS}"]
        if game.done or actor not in game.runner.enabled:
            return [f"{actor} has no step left"]
        s = game.step(actor)
        effects = " ".join(str(e) for e in s.effects)
        line = (f"{s.index:>3} {s.actor} {s.command_text(44)} -> {render_reply(s.reply, 24)}"
                + (f"   {effects}" if effects else ""))
        calls = script_calls(game.runner, s.index) if s.kind == "script" else None
        if calls:
            return [line, f"    one step, {len(calls)} commands inside: x shows them"]
        return [line]

    def expand(self, index: int | None) -> list[str]:
        """The commands whole-script step ``index`` ran (default: the last such step), one a line: the head,
        then ``  n  COMMAND -> reply  in words``. The game's state does not change."""
        r = self.game.runner
        steps = r.history().steps
        if index is None:
            index = next((s.index for s in reversed(steps) if script_calls(r, s.index) is not None), None)
            if index is None:
                return ["no whole-script step yet: x shows the commands of the last one (x7: of step 7)"]
        if not 1 <= index <= len(steps):
            return [f"no step {index} yet (the run has {len(steps)})"]
        s = steps[index - 1]
        calls = script_calls(r, index)
        if calls is None:
            what = (f"one command of {s.actor}'s split {s.script}" if s.kind == "command" and s.script else
                    f"a {s.kind} step" if s.kind != "command" else "one command")
            if s.kind == "script":
                what = "a script the server ran as one EVALSHA: it does not say which commands it ran"
            return [f"step {index} is {what}: nothing to expand"]
        self.expanded = index
        head = (f"step {index} · {s.actor} · EVALSHA {s.op}: {len(calls)} commands in one step · reply"
                f" {render_reply(s.reply, 20)}")
        return [head, *(f"{n:>4}  {c['command']} -> {c['reply']}   {c['explain']}" for n, c in enumerate(calls, 1))]

    def over_text(self, width: int | None) -> list[str]:
        """The lines that end a run: the win (victory, the run's own why, the lesson) or what to do next."""
        lv, game = self.level, self.game
        if self.solved:
            return ["*** You win! " + lv.victory, f"  lesson: {lv.lesson}"]
        if game.won():
            why = lv.goal.reasons(game.history())
            return ["*** You win! " + lv.victory, *([f"  why: {why[0]}"] if why else []), f"  lesson: {lv.lesson}"]
        kinds = game.history().kinds
        return [f"the run is over and the goal is not reached ({', '.join(kinds) or 'no anomaly'}): u to undo, r to"
                " restart, s to let the explorer try every order, q to quit"]


# -- plain lines (a pipe, a file, a test) ---------------------------------------------------------------------


def play(level: Level, read: Callable[[str], str] = input, write: Callable[[str], None] = print,
         width: int | None = None) -> bool:
    """Play ``level`` as plain lines (a pipe, a file, a test; a terminal gets one screen redrawn:
    :func:`emqlab.teaching.screen.play_screen`): ``read`` a line of keys per move, ``write`` the game, every
    line fitted to ``width`` columns (``None``: as it is; the CLI passes the terminal's, at most
    :data:`GAME_WIDTH`). True when it was won."""
    from emqlab.text import command_lines, wrap

    def say(text: str) -> None:  # (every line fitted to width)
        write("\n".join(wrap(text, width)))

    session = Session(level)
    game = session.game
    say(intro(level))
    try:
        while True:
            say(game.status())
            if game.done:
                over = session.over_text(width)
                if game.won():
                    say("\n" + "\n".join(over))
                    for line in command_lines("  replay it: ", level.replay_words(game.schedule), width):
                        write(line)  # (broken with " \\" to paste whole, never re-wrapped)
                    return True
                say("  " + over[0])
            try:
                line = read("> ")
            except EOFError:
                return False
            # (a one-line answer repeated by the next keys, W1*999 past W1's last step, is said once, counted)
            last: list[str] = []
            again = 0
            for key in tokens(line) or [""]:
                answers = session.handle(key)
                if len(answers) == 1 and answers == last:
                    again += 1
                    continue
                if again:
                    say(f"  (the same {again} more time{'s' if again > 1 else ''})")
                again, last = 0, answers if len(answers) == 1 else []
                for answer in answers:
                    say(f"  {answer}")
                if session.quit:
                    return False
                if session.solved:
                    say("\n" + "\n".join(session.over_text(width)))
                    return True
                if game.done:
                    break
            if again:
                say(f"  (the same {again} more time{'s' if again > 1 else ''})")
    finally:
        session.close()


__all__ = ["BOARD", "Danger", "Game", "Goal", "Level", "LevelError", "MODES", "ScriptSource", "board", "board_text",
           "board_values", "describe_op", "explain", "intro", "legend", "load_level", "parse_level", "play", "position",
           "position_text", "result_text", "script_source", "Session", "shipped_levels", "solve", "tokens"]
