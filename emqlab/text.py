"""The one home of how emqlab lays out text for a reader, in every layer: numbers to three significant
digits, text fitted to a width (cut, elided in its middle, wrapped at word boundaries), the progress bar
of a long run on a terminal, and a page as data (:class:`PageBlock`s of marked :class:`Span`s: written as
Markdown here, drawn on a PDF page by :mod:`emqlab.ui.kit`, from the same blocks).

It imports nothing from emqlab, so that any module of any layer may use it; rich is imported only by the
progress bar, when one is shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: the default line width of everything emqlab prints: witness lines, because-sentences, grade feedback
DEFAULT_WIDTH = 100


# -- numbers ------------------------------------------------------------------------------------------------


def share_text(x: float) -> str:
    """A share as a percentage with one decimal that never rounds to a whole it is not: ``>99.9%`` for a
    share under 1 that would print as ``100.0%``, ``<0.1%`` for one above 0 that would print as ``0.0%``."""
    if 0 < x < 0.0005:
        return "<0.1%"
    if 0.9995 <= x < 1:
        return ">99.9%"
    return f"{x:.1%}"


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
           "share_text", "sig3", "wrap"]


# -- a page as data: one set of blocks, written as Markdown and drawn on a PDF page --------------------------


@dataclass(frozen=True)
class Span:
    """A run of text with one mark: ``""`` (plain), ``"bold"``, ``"em"`` or ``"code"``."""

    text: str
    mark: str = ""


def bold(text: str) -> Span:
    return Span(text, "bold")


def em(text: str) -> Span:
    return Span(text, "em")


def code(text: str) -> Span:
    return Span(text, "code")


Inline = tuple[Span, ...]


def spans(*parts: str | Span) -> Inline:
    """Text and marked spans in order (a ``str`` is plain text)."""
    return tuple(p if isinstance(p, Span) else Span(p) for p in parts)


@dataclass(frozen=True)
class PageBlock:
    """One block of a page: ``title`` and ``para`` hold ``inline`` text; ``code`` holds ``lines`` kept as
    they are; ``table`` holds ``rows`` (the first is the header) of cells, each inline text, and per column
    whether it is right-aligned (``right``)."""

    kind: str
    inline: Inline = ()
    lines: tuple[str, ...] = ()
    rows: tuple[tuple[Inline, ...], ...] = ()
    right: tuple[bool, ...] = ()


def title(*parts: str | Span) -> PageBlock:
    return PageBlock("title", spans(*parts))


def para(*parts: str | Span) -> PageBlock:
    return PageBlock("para", spans(*parts))


def code_block(lines: Sequence[str]) -> PageBlock:
    return PageBlock("code", lines=tuple(lines))


def table(header: Sequence[str | Span], rows: Sequence[Sequence[str | Span]],
          right: Sequence[bool] = ()) -> PageBlock:
    """A table block: ``header`` and ``rows`` are cells, each a ``str`` (plain) or one :class:`Span`."""
    cells = tuple(tuple(spans(c) for c in row) for row in (header, *rows))
    return PageBlock("table", rows=cells, right=tuple(right) or (False,) * len(header))


def plain(inline: Inline) -> str:
    """The words of ``inline``, marks left out (what a printed page shows)."""
    return "".join(s.text for s in inline)


_MARKS = {"": "{}", "bold": "**{}**", "em": "*{}*", "code": "`{}`"}


def markdown_inline(inline: Inline) -> str:
    return "".join(_MARKS[s.mark].format(s.text) for s in inline)


def markdown(blocks: Sequence[PageBlock], width: int = 110) -> str:
    """``blocks`` as Markdown: ``# title``, paragraphs wrapped at ``width`` columns, fenced code, tables."""
    out: list[str] = []
    for b in blocks:
        if b.kind == "title":
            out.append(f"# {markdown_inline(b.inline)}")
        elif b.kind == "para":
            out.append("\n".join(wrap(markdown_inline(b.inline), width)))
        elif b.kind == "code":
            out.append("\n".join(["```", *b.lines, "```"]))
        elif b.kind == "table":
            head, *body = b.rows
            rule = "|" + "|".join("---:" if r else "---" for r in b.right) + "|"
            out.append("\n".join([_row(head), rule, *(_row(r) for r in body)]))
        else:
            raise ValueError(f"unknown block kind {b.kind!r}")
    return "\n\n".join(out) + "\n"


def _row(cells: Sequence[Inline]) -> str:
    return "| " + " | ".join(markdown_inline(c) for c in cells) + " |"


def table_lines(b: PageBlock) -> list[str]:
    """A table block as aligned plain-text rows (the header first, no rule): how a page draws it."""
    rows = [[plain(c) for c in row] for row in b.rows]
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if right else c.ljust(w)
                      for c, w, right in zip(r, widths, b.right, strict=True)).rstrip() for r in rows]
