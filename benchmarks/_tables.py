"""Appending a measured table to a markdown page, with the date, the machine and the command."""

from __future__ import annotations

import platform
import time
from pathlib import Path


def append_table(path: Path, title: str, command: str, table: str) -> None:
    """Append ``table`` under a ``### title (date, machine, Python)`` heading with the ``command`` that
    produced it."""
    stamp = time.strftime("%Y-%m-%d")
    with path.open("a") as f:
        f.write(f"\n### {title} ({stamp}, {platform.machine()}, Python {platform.python_version()})\n\n"
                f"`{command}`\n\n{table}\n")
