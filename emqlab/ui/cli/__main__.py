"""The home of ``python -m emqlab.ui.cli``: the console script, :func:`emqlab.ui.entry.entry`, as ``emqlab``
runs it."""

from __future__ import annotations

from emqlab.ui.entry import entry

if __name__ == "__main__":  # pragma: no cover
    entry()
