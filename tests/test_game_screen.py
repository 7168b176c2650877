"""The terminal game on one screen (issue 27, item 3): ``emqlab play 1`` spawned in a real pseudo-terminal of
80×24, keys sent as a player types them, its output read through a terminal emulator (pyte), so that what is
checked is what the player's terminal shows: every frame starts by sending the cursor home and clearing the
screen (a redraw, not a scroll), fits 80 columns and 23 rows (the 24th takes the player's Enter), shows the
goal, the Lua lines around each actor's current line, the board with the counters; the expand key shows the
commands a whole-script step ran without changing the run; a level is won by keys. Plus the layout itself
(:func:`emqlab.teaching.screen.render`) at several sizes and over every level, without a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from emqlab.teaching.levels import Session, load_level, shipped_levels, tokens
from emqlab.teaching.screen import CLEAR, render

EMQLAB = Path(sys.executable).parent / "emqlab"
COLUMNS, ROWS = 80, 24
HOME_CLEAR = CLEAR.encode()


class Terminal:
    """``emqlab ARGS`` in a pseudo-terminal of ``COLUMNS``×``ROWS``, its output fed to a pyte screen of the same
    size; :meth:`send` types a line and waits for the next prompt (``> `` after a frame)."""

    def __init__(self, *args: str) -> None:
        self.leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = "xterm"
        # (Ctrl-C as a terminal's game gets it: a suite started in the background has SIGINT ignored, and a
        # child keeps an ignored signal ignored)
        self.proc = subprocess.Popen([str(EMQLAB), *args], stdin=follower, stdout=follower, stderr=follower,
                                     close_fds=True, env=env, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(follower)
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        self.frames: list[bytes] = []

    def read_until(self, done: bytes, limit: float = 60.0) -> bytes:
        """Read until ``done`` shows in what came since this call began (``limit`` only guards a hang)."""
        got = b""
        end = time.monotonic() + limit
        while done not in got and time.monotonic() < end:
            ready, _, _ = select.select([self.leader], [], [], 0.5)
            if not ready:
                if self.proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(self.leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
            self.stream.feed(chunk)
        self.raw += got
        self.frames += [b"" + f for f in got.split(HOME_CLEAR)[1:]]
        return got

    def send(self, line: str) -> bytes:
        os.write(self.leader, line.encode() + b"\r")
        return self.read_until(b"\n> ")

    def display(self) -> list[str]:
        return [row.rstrip() for row in self.screen.display]

    def close(self) -> int | None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.leader >= 0:
            os.close(self.leader)
            self.leader = -1
        return self.proc.returncode


@pytest.fixture()
def term() -> Iterator[Terminal]:
    t = Terminal("play", "1")
    try:
        yield t
    finally:
        if t.proc.poll() is None:
            t.proc.kill()
        t.close()


def _fits(frame: bytes) -> None:
    """A frame (what follows the home-and-clear) as the terminal lays it out: at most 23 rows (the prompt
    included; the player's Enter takes the 24th), none over 79 columns, so nothing wraps or scrolls."""
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", frame).decode().replace("\r", "")
    rows = text.split("\n")
    prompt = max(i for i, r in enumerate(rows) if r.startswith("> "))
    assert prompt + 1 <= ROWS - 1 and not "".join(rows[prompt + 1:]), rows  # (after it: the Enter's new line)
    assert all(len(r) < COLUMNS for r in rows), [r for r in rows if len(r) >= COLUMNS]


def test_the_game_redraws_one_screen_that_fits_and_is_won_by_keys(term: Terminal) -> None:
    term.read_until(b"\n> ")
    assert term.raw.startswith(b"\x1b[?1049h") and len(term.frames) == 1  # the alternate screen, one frame
    shown = term.display()
    assert shown[0].startswith("Level 1 · Finished and waiting") and shown[0].endswith("step 0")
    assert "goal: make job 1 land in completed and in wait" in shown[1]
    assert any(re.match(r"\s+▶\s*\d+\s+.*EXISTS", row) for row in shown), shown  # W1's current Lua line
    assert any(row.startswith("[2] S1 moveStalledJobsToWait · whole script, one step") for row in shown)
    assert any(row.startswith("wait: - · active: 1 · stalled: 1") for row in shown)
    for keys, step in [("1", 1), ("1*3", 4), ("1 1 1 1 1", 9)]:
        term.send(keys)
        assert term.display()[0].endswith(f"step {step}")
    assert any("▶" in row and '"SREM"' in row for row in term.display())  # W1 has let the lock go
    term.send("2")  # S1's sweep, one step
    shown = term.display()
    assert any("!! job 1 is in wait and completed at once" in row or "back in wait" in row for row in shown)
    before = shown
    term.send("x")  # the commands the sweep ran; nothing else changes
    shown = term.display()
    assert shown[0] == before[0] and re.search(r"step 10 · S1 · EVALSHA moveStalledJobsToWait: \d+ commands",
                                               "\n".join(shown))
    assert any(re.match(r"\s+1\s+EXISTS stalled-check -> 0", row) for row in shown), shown
    assert any("SMEMBERS stalled" in row or "more: x for the next page" in row for row in shown)
    term.send("x")  # x again: the next page of the same step's commands
    assert term.display()[0] == before[0]
    assert [line for line in term.display() if line.startswith("wait:")] == [
        line for line in before if line.startswith("wait:")]
    for frame in term.frames:
        _fits(frame)
    assert len(term.frames) == 7  # one frame per line of keys, each drawn after home-and-clear
    os.write(term.leader, b"f\r")
    term.read_until(b"replay it:")
    term.read_until(b"--split")
    assert term.close() == 0
    tail = term.raw.split(b"\x1b[?1049l", 1)[1].decode()  # printed after leaving the alternate screen
    assert "*** You win! Job 1 is in completed and in wait" in tail and "why: " in tail
    assert "emqlab replay 'v1:W1*9.S1.W1*8' --scenario stalled-finish --split" in tail
    assert all(len(line) < COLUMNS for line in tail.splitlines())


def test_the_expand_key_in_plain_lines_and_its_refusals() -> None:
    s = Session(load_level("1"))
    try:
        assert s.handle("x") == ["no whole-script step yet: x shows the commands of the last one (x7: of step 7)"]
        s.handle("1")
        assert s.handle("x1") == ["step 1 is one command of W1's split moveToFinished: nothing to expand"]
        assert s.handle("x5") == ["no step 5 yet (the run has 1)"]
        answer = s.handle("2")
        assert answer[1] == "    one step, 9 commands inside: x shows them", answer
        calls = s.handle("x")
        assert calls[0].startswith("step 2 · S1 · EVALSHA moveStalledJobsToWait: 9 commands in one step · reply")
        assert len(calls) == 10 and re.match(r"\s+1\s+EXISTS stalled-check -> 0\s+did a sweep already run", calls[1])
        assert s.game.choices == ["W1", "S1"]  # expanding changed nothing
        assert s.handle("x2") == calls
    finally:
        s.close()
    other = Session(load_level("1"))
    try:  # a digit that is no ASCII digit ('²' passes str.isdigit) is an unknown key, not a crash
        answer = other.handle("²")
        assert other.game.choices == [] and answer and "²" in answer[0], answer
    finally:
        other.close()
    crash = Session(load_level("crash"))  # its fault actor is X1: x1 steps it, not an expansion of step 1
    try:
        for key in tokens("W1*11 x1"):
            crash.handle(key)
        assert crash.game.choices[-1] == "X1"
    finally:
        crash.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_every_level_fits_the_screen_at_every_step(size: tuple[int, int]) -> None:
    """Every level's solution (or its run in scenario order), frame by frame at the size, and the expansion
    of every whole-script step: no frame over the size, and every frame shows the counter and the goal."""
    columns, rows = size
    for lv in shipped_levels():
        s = Session(lv)
        try:
            keys = tokens(lv.solution.split(":", 1)[1].replace(".", " ")) if lv.solution else []
            message: list[str] = []
            for key in [*keys, "f"]:
                frame = render(s, columns, rows, message)
                assert len(frame.lines) <= rows - 2, (lv.name, len(frame.lines))
                assert all(len(text) < min(columns, 120) for text, _ in frame.lines), lv.name
                assert frame.lines[0][0].endswith(f"step {s.game.runner.index}")
                assert frame.lines[1][0].startswith(f"goal: {lv.goal.text[:20]}")
                message = s.handle(key)
                if s.game.runner.history().steps and s.game.runner.history().steps[-1].kind == "script":
                    frame = render(s, columns, rows, s.handle("x"))
                    assert len(frame.lines) <= rows - 2 and any("commands" in t for t, _ in frame.lines), lv.name
        finally:
            s.close()


def test_the_board_shows_the_values_a_goal_names() -> None:
    """Level 7's goal is a counter, level 14's the attempts against the ceiling: the screen shows both."""
    for name, keys, shown in [("7", "W1*9 S1 W2*2 f", "counters: completed=2"),
                              ("14", "W1*7 S1 W1*9 W2*3 f", "atm=3 ats=3 stc=1 (attempts allowed: 2)")]:
        s = Session(load_level(name))
        try:
            for key in tokens(keys):
                s.handle(key)
            assert s.game.won()
            text = "\n".join(t for t, _ in render(s, 80, 24, []).lines)
            assert shown in text, text
        finally:
            s.close()


def test_a_small_terminal_gets_a_cut_screen_not_a_wrapped_one() -> None:
    s = Session(load_level("4"))
    try:
        for columns, rows in [(40, 12), (60, 16), (80, 10)]:
            frame = render(s, columns, rows, ["a message " * 20])
            assert len(frame.lines) <= max(4, rows - 2) and all(len(t) < max(columns, 21) for t, _ in frame.lines)
            assert frame.lines[-1][0].startswith("1-4 step")  # the keys stay
    finally:
        s.close()


DOC = Path(__file__).resolve().parents[1] / "docs" / "levels.md"
CAPTURE = re.compile(r"^<!-- (screen|outcome): level (\d+), keys: (.*?) -->\n```text\n(.*?)^```", re.M | re.S)


def test_the_docs_screens_are_the_game_screens() -> None:
    """docs/levels.md's captures of the 80×24 screen and of the outcome printed after a win are what the game
    draws and prints for the same keys."""
    import io

    from emqlab.teaching.screen import ALT_OFF, play_screen

    found = CAPTURE.findall(DOC.read_text(encoding="utf-8"))
    assert sorted(kind for kind, *_ in found) == ["outcome", "screen", "screen"]
    for kind, level, keys, text in found:
        want = [line.rstrip() for line in text.rstrip("\n").split("\n")]
        if kind == "screen":
            s = Session(load_level(level))
            try:
                message = [s.level.tagline, s.level.story]
                for key in tokens("" if keys == "(none)" else keys):
                    message = s.handle(key)
                got = [t.rstrip() for t, _ in render(s, 80, 24, message).lines] + [">"]
            finally:
                s.close()
        else:
            lines = iter([keys])
            out = io.StringIO()
            assert play_screen(load_level(level), lambda _p, it=lines: next(it), out, lambda: (80, 24), color=False)
            got = [line.rstrip() for line in out.getvalue().split(ALT_OFF, 1)[1].rstrip("\n").split("\n")]
        assert got == want, "\n".join(got)


def _says_met_so_far(s: Session) -> bool:
    return any("met so far" in text for text, _style in render(s, 100, 40, []).lines)


@pytest.mark.parametrize("level", [lv for lv in shipped_levels() if lv.solution], ids=lambda lv: lv.name)
def test_met_so_far_is_said_only_where_finishing_in_order_wins(level) -> None:  # type: ignore[no-untyped-def]
    """Along the level's stored solution and its hint, whenever the screen says "met so far: let every actor
    finish", finishing the run in scenario order (what the game's f does) wins. Level 15 said it from its
    first step, where finishing loses (its job 2 is in no list until its producer adds it)."""
    from emqlab.protocol.schedules import parse_schedule

    for schedule in filter(None, (level.solution, level.hint_schedule)):
        s = Session(level)
        try:
            for actor in parse_schedule(schedule, s.game.actors):
                if s.game.done:
                    break
                if _says_met_so_far(s):
                    rest = Session(level)
                    try:
                        for c in s.game.choices:
                            rest.game.step(c)
                        rest.game.finish()
                        assert rest.game.won(), f"{schedule}: 'met so far' after {s.game.schedule}, finishing loses"
                    finally:
                        rest.close()
                s.game.step(actor)
        finally:
            s.close()


def test_level_15_is_not_met_before_its_producer_adds_the_job() -> None:
    s = Session(load_level(15))
    try:
        for _ in range(3):
            s.game.step("SCHED")
            assert not _says_met_so_far(s)
        s.game.step("PROD")
        s.game.step("PROD")
        assert _says_met_so_far(s)  # (finishing now deletes the list with job 2 in it: a win)
    finally:
        s.close()


def test_a_pass_that_is_not_the_recovery_sweep_does_not_say_it_recovered() -> None:
    """Level 15's scheduler poll records a 'sweep' result (the job it moved to wait): the board said 'sweep
    recovered 1' of it; the recovery sweep S1 of level 1 still says so."""
    poll = Session(load_level("15"))
    try:
        for key in tokens("SCHED*5"):
            poll.handle(key)
        screen = "\n".join(t for t, _ in render(poll, 100, 40, []).lines)
        assert "SCHED done (5 steps) · took 1" in screen and "recovered" not in screen, screen
    finally:
        poll.close()
    sweep = Session(load_level("1"))
    try:
        sweep.handle("S1")
        screen = "\n".join(t for t, _ in render(sweep, 100, 40, []).lines)
        assert "S1 done (1 step) · sweep recovered nothing" in screen, screen
    finally:
        sweep.close()


def test_a_ctrl_c_in_the_game_leaves_the_screen_and_exits_130() -> None:
    t = Terminal("play", "1")
    try:
        t.read_until(b"\n> ")
        t.proc.send_signal(signal.SIGINT)  # (what the terminal sends on Ctrl-C: this pty is not the game's own)
        t.read_until(b"interrupted")
        assert t.close() == 130  # (emqlab --help: 130 = interrupted; a game not won exits 1)
        assert b"\x1b[?1049l" in t.raw  # the alternate screen was left
    finally:
        if t.proc.poll() is None:
            t.proc.kill()
        t.close()


def test_keys_from_a_pipe_get_lines_that_fit_and_a_repeated_refusal_once() -> None:
    """From a pipe no prompt opens the line the answer goes on (it made 82 columns of an 80-column reply), and
    W1*999 past W1's last step says its refusal once, with the count."""
    run = subprocess.run([str(EMQLAB), "play", "9"], input="h\n1*999\nq\n", capture_output=True, text=True,
                         timeout=120)
    lines = run.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert sum("has no step left" in line for line in lines) == 1
    assert any(re.fullmatch(r"\s+\(the same \d+ more times\)", line) for line in lines), run.stdout[-800:]
