"""The ``emqlab`` console script, kept apart from :mod:`emqlab.cli` so that it runs before the CLI's
imports (rich, click, redis-py, lupa, fakeredis: most of a second): a Ctrl-C, SIGTERM or SIGHUP that comes
while they load ends the command quietly with its exit status (130, 143, 129), not with a traceback."""

from __future__ import annotations

import signal
import sys


def _early(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def entry() -> None:
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        # (a signal the parent made us ignore stays ignored: a background job of a shell, nohup)
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:
            signal.signal(getattr(signal, name), _early)
    try:
        from emqlab.cli import entry as cli_entry
    except SystemExit as e:  # (a stop signal while importing: nothing ran, nothing to clean up)
        sys.stderr.write("interrupted\n")
        raise SystemExit(e.code) from None
    cli_entry()  # installs the CLI's own handlers (emqlab.cli._terminate) first thing


if __name__ == "__main__":  # pragma: no cover
    entry()
