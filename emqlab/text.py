"""The one home of how emqlab lays out text for a reader, in every layer: numbers to three significant
digits, text fitted to a width (cut, elided in its middle, wrapped at word boundaries) and the progress bar
of a long run on a terminal.

It imports nothing from emqlab, so that any module of any layer may use it; rich is imported only by the
progress bar, when one is shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: the default line width of everything emqlab prints: witness lines, because-sentences, grade feedback
DEFAULT_WIDTH = 100


# -- numbers ------------------------------------------------------------------------------------------------


def sig3(x: float) -> str:
    """``x`` to three significant digits, no exponent, thousands separated: 0, 152, 39.4, 0.384, 0.0000100,
    12,346 (a number of 1,000 or more keeps all its integer digits). Raises OverflowError for an infinite
    ``x``, ValueError for NaN."""
    if x == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{digits}f}"


# -- fitting text to a width ---------------------------------------------------------------------------------


def elide_end(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, ending in ``…`` when it was longer."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def elide_middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` columns by replacing its middle with ``…``."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    left = (width - 1 + 1) // 2
    return text[:left] + "…" + text[len(text) - (width - 1 - left):]


def elide_words(head: Sequence[str], words: Sequence[str], width: int) -> str:
    """``head`` and ``words`` joined by spaces, in at most ``width`` columns: when too long, words in the
    middle give way to one ``…`` — the head stays, the last word too when it can, and as many of the first
    words as then fit. When no first word would fit, long words (a SHA1, a JSON blob) are elided in their
    own middle first; when not even the head and ``…`` fit, the head is elided in its middle."""
    text = " ".join([*head, *words])
    if len(text) <= width:
        return text
    found = _fewer_words(head, words, width)
    if (found is None or found[0] == 0) and words:
        short = [elide_middle(w, max(16, width // 3)) for w in words]
        if len(" ".join([*head, *short])) <= width:
            return " ".join([*head, *short])
        more = _fewer_words(head, short, width)
        if more is not None and (found is None or more[0] > found[0]):
            found = more
    if found is not None:
        return found[1]
    return elide_middle(" ".join(head), width)  # not even the head and "…": the head, shortened


def _fewer_words(head: Sequence[str], words: Sequence[str], width: int) -> tuple[int, str] | None:
    """The first fit of head + the first k words + ``…`` + the last word (or without it), the most first
    words first: (k, the text), or ``None`` (with no words, the head alone when it fits)."""
    n = len(words)
    if not n:
        return (0, " ".join(head)) if len(" ".join(head)) <= width else None
    for tail in (1, 0):
        for k in range(n - tail - 1, -1, -1):
            cand = " ".join([*head, *words[:k], "…", *words[n - tail:]])
            if len(cand) <= width:
                return k, cand
    return None


def line_breaks(text: str, width: int, indent: int = 0) -> list[tuple[int, int]]:
    """Where to break one paragraph ``text`` to lines of at most ``width`` columns, at spaces (dropped at a
    break), the lines after the first ``indent`` columns narrower: the ``(start, end)`` offsets of each
    line. A word longer than a line stays whole, on a line of its own."""
    out: list[tuple[int, int]] = []
    pos, n, avail = 0, len(text), width
    words_at = n - len(text.lstrip(" "))  # leading spaces are an indentation, not a break
    while n > words_at and text[n - 1] == " ":  # nor are trailing spaces a line's content
        n -= 1
    while True:
        if n - pos <= avail:
            out.append((pos, n))
            return out
        cut = text.rfind(" ", max(pos, words_at), pos + avail + 1)
        if cut <= max(pos, words_at):  # no space in reach: the first word is longer than the line
            cut = text.find(" ", max(pos + avail, words_at))
            if cut == -1:
                out.append((pos, n))
                return out
        end = cut
        while end > pos and text[end - 1] == " ":
            end -= 1
        out.append((pos, end))
        pos = cut
        while pos < n and text[pos] == " ":
            pos += 1
        if pos >= n:
            return out
        avail = max(1, width - indent)


def wrap(text: str, width: int | None = DEFAULT_WIDTH, *, indent: int = 0) -> list[str]:
    """``text`` as lines of at most ``width`` columns, broken at word boundaries. Each line of ``text`` is a
    paragraph: one that fits is kept exactly as it is (a preformatted line, such as a history's inside
    feedback); a longer one is wrapped with its continuation lines indented ``indent`` columns more than
    the paragraph's own leading spaces. ``width=None`` keeps every line as it is."""
    out: list[str] = []
    for para in text.split("\n"):
        if width is None or len(para) <= width:
            out.append(para)
            continue
        lead = len(para) - len(para.lstrip(" "))
        pad = " " * (lead + indent)
        spans = line_breaks(para, width, lead + indent)
        out += [para[a:b] if i == 0 else pad + para[a:b] for i, (a, b) in enumerate(spans)]
    return out


# -- the progress bar ------------------------------------------------------------------------------------------


@contextmanager
def progress_bar(console: Any, label: str, *, eta: bool = False,
                 threadless: bool = False) -> Iterator[Callable[[int, int | None], None]]:
    """A transient rich progress bar on ``console`` (a ``rich.console.Console``): ``label`` (rich markup and a
    format string of the task: no braces), the bar, done of total and the time elapsed; with ``eta``, a
    spinner before them and the time remaining after. The context gives ``update(done, total)`` (``total``
    None while not known yet). With ``threadless`` the bar is redrawn on each update rather than by a thread
    of its own, so that a process with no other thread can fork its pool's workers (the exploration's few
    updates); without it a thread redraws it (the timed runs' update after every finish)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns: list[ProgressColumn] = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    if eta:
        columns = [SpinnerColumn(), *columns, TextColumn("eta"), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=True, auto_refresh=not threadless) as p:
        task = p.add_task(label, total=None)

        def update(done: int, total: int | None) -> None:
            p.update(task, completed=done, total=total, refresh=threadless)

        yield update




def command_lines(label: str, words: Sequence[str], width: int | None) -> list[str]:
    """``label`` and a shell command (its ``words``: pieces it may be broken between, an option with its
    value) on one line, or, too long for ``width``, broken between them with `` \\`` so that it still
    pastes into a shell as it is."""
    line = label + " ".join(words)
    if width is None or len(line) <= width or not words:
        return [line]
    lines, cur = [], label + words[0]
    for w in words[1:]:
        if len(cur) + 1 + len(w) + 2 > width:
            lines.append(cur + " \\")
            cur = "    " + w
        else:
            cur += " " + w
    return [*lines, cur]


__all__ = ["DEFAULT_WIDTH", "command_lines", "elide_end", "elide_middle", "elide_words", "line_breaks", "progress_bar",
           "sig3", "wrap"]
