"""The terminal game's two ways to show a level (``emqlab play``): one screen, redrawn after every move, when
the game runs in a terminal (:func:`play_screen`), and plain lines, one block per move, when its output goes
to a pipe, a file or a test (:func:`play_lines`). Both read the same keys through a :class:`Session`.

The screen (:func:`render`) fits the terminal it is drawn in, whose size is read again before every redraw
(80×24 and up; a smaller one is cut, never wrapped): the level and the step counter, the goal, each actor
with the Lua lines around the one it runs next (the current line marked ``▶``), the board (the lists, the
locks, every job's counts and the queue's counters: every value a goal names), the last reply or the answer
to the last key, and the keys. A frame starts with the cursor sent home and the screen cleared, on the
terminal's alternate screen, so nothing scrolls; the game leaves the alternate screen when it ends and
prints its outcome as plain lines, which stay in the terminal.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from rich.cells import cell_len, set_cell_size

from emqlab.teaching.level_view import board, excerpt, position, result_text
from emqlab.teaching.levels import Session, board_text, board_values, met_so_far, tokens

#: the smallest screen the layout is made for (a smaller terminal still gets a screen, cut to its size)
MIN_COLUMNS, MIN_LINES = 80, 24
#: the widest line the game draws (a wider terminal leaves the rest blank: long lines are hard to read)
MAX_COLUMNS = 120
#: lines of Lua shown around an actor's current line at most (before, after), when the screen has room
CODE_CONTEXT = (3, 3)
#: the keys, as the screen's last line shows them (``1-N`` is put in front)
SCREEN_KEYS = "x expand · f finish · u undo · r restart · s solve · h hint · q quit"
CLEAR = "\x1b[H\x1b[2J"  # cursor home, then clear the screen: every frame starts with it
ALT_ON, ALT_OFF = "\x1b[?1049h", "\x1b[?1049l"  # the alternate screen: the game leaves no scrollback
_STYLE = {"title": "\x1b[1m", "current": "\x1b[1;7m", "broken": "\x1b[1;31m", "warn": "\x1b[33m",
          "dim": "\x1b[2m", "good": "\x1b[1;32m"}
def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells (with ``…`` when cut); tabs become spaces."""
    text = text.replace("\t", "    ").rstrip()
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)) + "…"


def wrap_cells(text: str, width: int, indent: int = 2, most: int = 3) -> list[str]:
    """``text`` broken at spaces into at most ``most`` lines of ``width`` cells (continuations indented
    ``indent``; the last line cut with ``…`` when the text goes on)."""
    lead = len(text) - len(text.lstrip(" "))
    words, lines, cur = text[lead:].split(" "), [], " " * lead
    for w in words:
        probe = f"{cur} {w}" if cur.strip() else (cur + w)
        if cell_len(probe) <= width or not cur.strip():
            cur = probe
        else:
            lines.append(cur)
            cur = " " * indent + w
    lines.append(cur)
    if len(lines) > most:
        lines = [*lines[:most - 1], " ".join([lines[most - 1], *(x.strip() for x in lines[most:])])]
    return [fit(x, width) for x in lines]



# -- one screen ---------------------------------------------------------------------------------------------

Line = tuple[str, str]  # (text, style: "" or a key of _STYLE)


@dataclass
class Frame:
    """A rendered screen: its ``lines`` ((text, style) each; at most the screen's height less two, for the
    prompt and the line the player's Enter moves to), ``shown`` (how many lines of the message it showed)
    and ``offset`` (the message's first line shown): the expansion's next page starts at ``offset + shown``."""

    lines: list[Line]
    shown: int
    offset: int = 0


def _actor_block(session: Session, i: int, actor: str, width: int, code: int,
                 context: tuple[int, int] = CODE_CONTEXT) -> tuple[list[Line], list[Line], list[Line]]:
    """An actor's lines in three parts: its head (always shown), the next step in words, and its Lua lines
    (``code`` of them around the current one at most, the current one marked)."""
    r = session.game.runner
    pos = position(r, actor)
    if pos is None:
        sweep = any(a.id == actor and a.kind == "sweep" for a in r.scenario.actors)
        done = [result_text(x, recovery=sweep) for x in r.results.get(actor, [])]
        taken = r.actor_steps.get(actor, 0)
        text = f"[{i}] {actor} done ({taken} step{'s' if taken != 1 else ''})" + (
            f" · {'; '.join(done)}" if done else "")
        return [(fit(text, width), "dim")], [], []
    where = [x for x in (pos["script"], pos["section"] if not pos["atomic"] else "whole script, one step",
                         pos["step"]) if x]
    op = r.pending.get(actor)
    if pos["kind"] in ("clock", "fault"):
        head = f"[{i}] {actor} ({pos['kind']}) {op.section if op is not None else ''}"
        return [(fit(head, width), "title")], [(fit("    " + pos["explain"], width), "")], []
    if pos["at"] and code > 0:  # the file and line the Lua lines come from, in place of the script's name
        where = [pos["at"], *where[1:]]
    head = f"[{i}] {actor} " + " · ".join(where or [pos["kind"]])
    if pos["atomic"]:  # (the head says it is one step; what the script is for, from its header comment)
        summary = re.sub(r"^\S+\.lua\s+--\s+", "", pos["summary"] or "")
        return [(fit(head, width), "title")], [], [(fit("    " + summary, width), "dim")] if summary else []
    nxt = [(fit(f"    next: {_pending(r, actor)} — {pos['explain']}", width), "")]
    ex = excerpt(r, pos, *context)
    lines: list[Line] = []
    rows = ex["lines"]
    if rows and code > 0:
        cur = next(k for k, row in enumerate(rows) if row[3])
        lo = max(0, min(cur - (code - 1) // 2, len(rows) - code))
        for _n, file_line, text, current in rows[lo:lo + code]:
            mark = "▶" if current else " "
            lines.append((fit(f"  {mark}{file_line:>4}  {text}", width), "current" if current else ""))
    return [(fit(head, width), "title")], nxt, lines


def _pending(r: Any, actor: str) -> str:
    """An actor's next command, short: ``GET 1:lock``, ``EVALSHA moveToActive``."""
    op = r.pending.get(actor)
    if op is None:
        return "done"
    if op.kind == "script":
        return f"EVALSHA {op.label}"
    if op.batch is not None:
        return ("MULTI … EXEC" if op.multi else "a pipeline")
    if op.command is None:
        return op.kind
    from emqlab.teaching.level_view import _parts

    return fit(" ".join(_parts(r, op.command)), 32)


def render(session: Session, columns: int, rows: int, message: list[str], offset: int = 0) -> Frame:
    """The screen for ``columns`` × ``rows`` cells: at most ``rows - 2`` lines, none wider than ``columns - 1``
    (the last column stays empty: a line that reaches it would wrap on some terminals). ``message`` is the
    answer to the last key (shown from line ``offset``: the expansion's pages). While the message is the
    commands of a script step (``session.expanded``), each actor keeps one Lua line and the message gets the
    rest of the screen; otherwise the message gets 4 lines and the Lua lines the rest."""
    w = max(20, min(columns, MAX_COLUMNS) - 1)
    budget = max(4, rows - 2)
    game, lv = session.game, session.level
    r = game.runner
    done = game.done
    met = not done and met_so_far(lv, game.choices, game.history())
    status = "won" if done and game.won() else ("over" if done else (
        "met so far: let every actor finish" if met else "not reached yet"))
    title = f"Level {lv.number} · {lv.title} · {lv.mode}"
    counter = f"step {r.index}"
    top: list[Line] = [(fit(title, w - len(counter) - 1).ljust(w - len(counter)) + counter, "title")]
    top += [(x, "") for x in wrap_cells(f"goal: {lv.goal.text} [{status}]", w, 6, 2)]
    sep: Line = ("─" * w, "dim")
    b = board(r)
    bottom: list[Line] = [(x, "") for x in wrap_cells(board_text(b).split("\n")[0].strip()[len("board"):].strip(),
                                                      w, 2, 2)]
    bottom += [(x, "") for x in wrap_cells(" · ".join(board_values(b)), w, 2, 2)]
    for d in b["dangers"]:
        bottom += [(x, "broken" if d["level"] == "broken" else "warn")
                   for x in wrap_cells(f"{'!!' if d['level'] == 'broken' else '! '} {d['text']}", w, 3, 2)]
    n = len(game.actors)
    keys = [fit(f"{'1' if n == 1 else f'1-{n}'} step · {SCREEN_KEYS}", w)]
    msg_all = [x for m in message for x in wrap_cells(m, w, 4, 4 if len(message) < 4 else 1)]
    if offset >= len(msg_all):  # past the last page: from the top again
        offset = 0
    msg = msg_all[offset:]
    context = CODE_CONTEXT if rows < 32 else (6, 6)  # a tall terminal shows more of each script
    blocks = [_actor_block(session, i, a, w, 99, context) for i, a in enumerate(game.actors, 1)]
    fixed = len(top) + len(bottom) + len(keys) + 3 + sum(len(h) for h, _, _ in blocks)  # (3 rules)
    room = budget - fixed
    # the room left, in order: up to 3 lines of the message, each actor's next step, its Lua lines (an equal
    # share, at most the context around the current line; one line each while a long message, the commands
    # of a script step, is shown), then the rest of the message
    paging = session.expanded is not None
    take_msg = min(len(msg), 3 if paging else 4, max(room, 0))
    room -= take_msg
    nexts = [len(x) for _, x, _ in blocks]
    show_next = room >= sum(nexts)
    if show_next:
        room -= sum(nexts)
    want_rest = len(msg) - take_msg
    codeful = [k for k, (_, _, c) in enumerate(blocks) if c]
    share: dict[int, int] = {}
    if codeful and room > 0:
        spare = room if not paging else min(room, len(codeful))
        # an equal share each, what one actor needs less going to the others
        for left, k in enumerate(sorted(codeful, key=lambda k: len(blocks[k][2])), start=0):
            share[k] = max(0, min(len(blocks[k][2]), spare // (len(codeful) - left)))
            spare -= share[k]
    blocks = [_actor_block(session, i, a, w, share.get(i - 1, 0), context) for i, a in enumerate(game.actors, 1)]
    room -= sum(min(len(c), share.get(k, 0)) for k, (_, _, c) in enumerate(blocks))
    take_msg += max(0, min(want_rest, room))
    lines: list[Line] = list(top)
    lines.append(sep)
    for k, (head, nxt, code) in enumerate(blocks):
        lines += head + code[:share.get(k, 0)] + (nxt if show_next else [])
    lines.append(sep)
    lines += bottom
    lines.append(sep)
    shown = take_msg
    if take_msg < len(msg) and take_msg > 0 and paging:  # the rest on the next page
        shown = take_msg - 1
        msg_lines = [*msg[:shown], f"  … {len(msg) - shown} more: x for the next page"]
    elif take_msg < len(msg) and take_msg > 0:
        msg_lines = [*msg[:take_msg - 1], fit(msg[take_msg - 1], w - 1) + "…"]
    else:
        msg_lines = msg[:take_msg]
    lines += [(x, "good" if x.startswith("*** You win") else "") for x in msg_lines]
    lines += [(x, "dim") for x in keys]
    if len(lines) > budget:  # a terminal below the layout's size: keep the top and the keys
        lines = lines[:budget - len(keys)] + [(x, "dim") for x in keys][-max(0, budget - 1):]
        lines = lines[:budget]
    return Frame(lines, shown, offset)


def terminal_size() -> tuple[int, int]:
    """The terminal's columns and lines now (``COLUMNS``/``LINES`` when set; 80×24 when it does not say)."""
    size = shutil.get_terminal_size((MIN_COLUMNS, MIN_LINES))
    return size.columns, size.lines


def play_screen(level: Any, read: Callable[[str], str], out: TextIO,
                size: Callable[[], tuple[int, int]] = terminal_size, color: bool = True) -> bool:
    """Play ``level`` on one screen of the terminal ``out``: each move clears it and draws the frame again at
    the terminal's size now (:func:`render`), the prompt on its own line below it; ``read`` reads a line of
    keys. On the alternate screen while it plays; the outcome (the win, the run's why, the lesson, the
    replay command) is printed as plain lines once it is left. True when the level was won."""
    from emqlab.text import command_lines

    session = Session(level)
    game = session.game
    message: list[str] = [level.tagline, level.story]
    offset = 0
    pager: tuple[int, int] | None = None  # (the step expanded on screen, where its next page starts)
    result: list[str] = []
    won = False
    out.write(ALT_ON)
    try:
        while True:
            columns, rows = size()
            if game.done and not game.won():
                message = [*message, *session.over_text(columns)]
            frame = render(session, columns, rows, message, offset)
            text = []
            for line, style in frame.lines:
                text.append(f"{_STYLE[style]}{line}\x1b[0m" if color and style else line)
            pager = (session.expanded, frame.offset + frame.shown) if session.expanded is not None else None
            out.write(CLEAR + "\n".join(text) + "\n")
            out.flush()
            try:
                line = read("> ")
            except EOFError:
                return False  # (a Ctrl-C goes on up: the screen is left below, and the command exits 130)
            message, offset = [], 0
            for key in tokens(line):
                answer = session.handle(key)
                if session.quit:
                    return False
                if session.expanded is not None:  # x again on the step shown: its next page
                    offset = pager[1] if pager is not None and pager[0] == session.expanded else 0
                    message = []
                message += answer
                if session.solved or (game.done and game.won()):
                    won = True
                    result = session.over_text(columns)
                    break
                if game.done:
                    break
            if won:
                return True
    finally:
        out.write(ALT_OFF)
        out.flush()
        if won:
            columns = size()[0]
            w = max(40, min(columns, MAX_COLUMNS) - 1)
            lines = [f"Level {level.number} · {level.title}: step {game.runner.index}, schedule {game.schedule}",
                     *(x for m in result for x in wrap_cells(m, w, 4, 20))]
            if not session.solved:
                lines += command_lines("  replay it: ", level.replay_words(game.schedule), w)
            out.write("\n".join(lines) + "\n")
            out.flush()
        session.close()


__all__ = ["CLEAR", "Frame", "MIN_COLUMNS", "MIN_LINES", "fit", "play_screen", "render", "terminal_size", "wrap_cells"]
