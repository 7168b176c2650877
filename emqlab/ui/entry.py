"""The ``emqlab`` console script, kept apart from :mod:`emqlab.cli` so that it runs before the CLI's
imports (rich, click, redis-py, lupa, fakeredis: most of a second): a Ctrl-C, SIGTERM or SIGHUP that comes
while they load ends the command quietly with its exit status (130, 143, 129), not with a traceback."""

from __future__ import annotations

import signal
import sys

from emqlab.explore.stops import STOP_SIGNALS

#: the stop signal that came while the CLI was imported, if one did
_early_stop: int | None = None


def _early(signum: int, _frame: object) -> None:
    global _early_stop
    hold_stops()  # (this one ends the command; the ones after it change nothing)
    if _early_stop is None:
        _early_stop = signum
    raise SystemExit(128 + signum)


def handle_stops(handler: object) -> None:
    """Install ``handler`` for every stop signal except one the parent made us ignore (a shell's background
    job, nohup: it stays ignored)."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, handler)  # type: ignore[arg-type]


def hold_stops() -> None:
    """From now to the exit, hold the stop signals back: blocked in this thread, so one that comes stays
    pending and is dropped with the process. For a command that a stop signal is ending (its clean-up
    done, or nothing to clean up): the interpreter's shutdown puts the default handlers back, and a Ctrl-C
    that came during it killed the process (status -2, not 130: a double Ctrl-C on a loaded machine)."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is not None:
        mask(signal.SIG_BLOCK, STOP_SIGNALS)


def ignore_stops() -> None:
    """:func:`hold_stops`, then ignore the stop signals in the whole process (a signal to the process goes
    to any thread that does not block it: a library's thread still running at the exit — a burst of Ctrl-C
    then killed the process with status -2). Only on the way out: a signal already caught but not yet
    handled when its handler becomes SIG_IGN makes Python print an OSError ("ignored due to race
    condition"), so the handlers run first, while this thread holds new ones back."""
    hold_stops()
    _handled()
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, signal.SIG_IGN)


def _handled() -> None:
    """Nothing: calling it runs the Python handlers of the signals caught so far (CPython runs pending
    handlers as a Python function starts)."""


def entry() -> None:
    handle_stops(_early)
    try:
        from emqlab.ui.cli import entry as cli_entry
    except SystemExit as e:  # (a stop signal while importing: nothing ran, nothing to clean up)
        ignore_stops()
        sys.stderr.write("interrupted\n")
        raise SystemExit(e.code) from None
    if _early_stop is not None:  # (its SystemExit was swallowed inside an import, and the run went on)
        ignore_stops()
        sys.stderr.write("interrupted\n")
        raise SystemExit(128 + _early_stop)
    cli_entry()  # installs the CLI's own handlers (emqlab.cli._terminate) first thing


if __name__ == "__main__":  # pragma: no cover
    entry()
