"""Writing a measured table to a markdown page, with the date, the machine and the command: the newest
table of each benchmark replaces the one before it (the history is in git)."""

from __future__ import annotations

import platform
import re
import time
from pathlib import Path

#: a measured table's heading: ``### <title> (<date>, <machine>, Python <version>[, …])``
HEADING = re.compile(r"^### (?P<title>.*) \(\d{4}-\d{2}-\d{2}, [^,()]+, Python [^()]*\)$")


def sections(text: str) -> list[tuple[str | None, str]]:
    """``text`` cut into (title, chunk) pieces: each measured table's section from its heading to the next
    heading or HTML comment line (title None for everything else), in order; joined, they are ``text``."""
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines(keepends=True):
        m = HEADING.match(line.rstrip("\n"))
        if m:
            out.append((m["title"], [line]))
        elif line.startswith(("## ", "### ", "<!--")) and out[-1][0] is not None:
            out.append((None, [line]))
        else:
            out[-1][1].append(line)
    return [(title, "".join(lines)) for title, lines in out if lines]


def write_table(path: Path, title: str, command: str, table: str) -> None:
    """Write ``table`` under a ``### title (date, machine, Python)`` heading with the ``command`` that
    produced it, in place of every earlier table of that title on the page (where the first one was), or
    at the end."""
    stamp = time.strftime("%Y-%m-%d")
    new = (f"### {title} ({stamp}, {platform.machine()}, Python {platform.python_version()})\n\n"
           f"`{command}`\n\n{table}\n\n")
    pieces = sections(path.read_text(encoding="utf-8") if path.exists() else "")
    out, placed = [], False
    for t, chunk in pieces:
        if t == title:
            if not placed:
                out.append(new)
                placed = True
            continue
        out.append(chunk)
    if not placed:
        text = "".join(out)
        out = [text if text.endswith("\n\n") or not text else text.rstrip("\n") + "\n\n", new]
    path.write_text("".join(out).rstrip("\n") + "\n", encoding="utf-8")
