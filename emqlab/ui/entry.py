"""The ``emqlab`` console script and its stop signals, kept apart from :mod:`emqlab.ui.cli` so that it runs
before the CLI's imports (rich, click, redis-py, lupa, fakeredis: most of a second): a Ctrl-C, SIGTERM or
SIGHUP that comes while they load ends the command quietly with its exit status (130, 143, 129), not with a
traceback; one that comes while the command runs stops it cleanly (:func:`_terminate`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from emqlab.explore.stops import STOP_SIGNALS, at_next_call
from emqlab.protocol import stopped

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


#: stop signals received so far (Ctrl-C, SIGTERM, SIGHUP)
_stops = 0
#: the first stop signal (it decides the exit status and what is said)
_stop_signal: int | None = None


#: a stop signal held until the import it came in has returned (:func:`_terminate`)
_held: int | None = None


def _outer_import(frame: FrameType | None) -> FrameType | None:
    """The outermost frame of the import machinery on ``frame``'s stack, or None when no import runs."""
    outer = None
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            outer = frame
        frame = frame.f_back
    return outer


def _take_held() -> None:
    """Take the held stop signal now, as if it came here."""
    signum = _held
    _terminate(signum if signum is not None else signal.SIGTERM, None, held=False)


def _terminate(signum: int, frame: FrameType | None, held: bool = True) -> None:
    """The first stop signal stops the command: Ctrl-C as KeyboardInterrupt, SIGTERM (a CI timeout, `kill`)
    and SIGHUP (a closed terminal) as SystemExit(128 + signal), which unwind through the runners' context
    managers, so a live run deletes its keys on each. The second is ignored: the terminal signals the whole
    process group, users press Ctrl-C twice, and the clean-up the first started must finish. The third
    exits at once, cleaning nothing (what a live run left, `emqlab clean` deletes once its lease ends).

    One that comes while a module is imported (the commands import theirs lazily) waits until that import
    has returned: raised inside it, it left the module half-made (a submodule in ``sys.modules`` but not
    bound to its package), and the clean-up's own imports then failed with an AttributeError and a
    traceback. The ones that come meanwhile are the same burst and count for nothing."""
    global _stops, _stop_signal, _held
    if held:
        if _held is not None:
            return
        outer = _outer_import(frame) if _stops == 0 else None
        if outer is not None:
            _held = signum
            at_next_call(_take_held, after=outer)
            return
    _held = None
    _stops += 1
    if _stops == 1:
        _stop_signal = signum
        if signum == signal.SIGINT:
            raise stopped.record(KeyboardInterrupt())
        raise stopped.record(SystemExit(128 + signum))
    if _stops >= 3:
        os.write(2, b"stopped at once, without cleaning up (on a live server, `emqlab clean --redis URL` deletes"
                    b" what the run left)\n")
        os._exit(128 + signum)


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """The stop's exception raised where Python cannot raise it (a finalizer's ``__del__``, a weakref
    callback): Python printed it with a traceback and dropped it, and the command ran on until a third
    signal ended it uncleaned. It is raised again at the next call or return instead, and nothing is said."""
    global _stops, _held
    if unraisable.exc_value is not None and unraisable.exc_value is stopped.raised and _stops == 1:
        _stops, _held = 0, _stop_signal
        at_next_call(_take_held, after=sys._getframe())  # (once this hook has returned)
        return
    sys.__unraisablehook__(unraisable)


def _run(main: Callable[[], object]) -> None:
    """The CLI's group ``main`` with Ctrl-C, SIGTERM and SIGHUP each stopping it cleanly once
    (:func:`_terminate`) and a closed pipe (``emqlab scenarios | head``) ending quietly; the CLI's rich
    console on stderr says which signal stopped it."""
    handle_stops(_terminate)
    sys.unraisablehook = _unraisable
    try:
        main()
    except SystemExit:
        if _stops:  # a stop signal ends it, the clean-up done: a later one must not kill it on the way out
            ignore_stops()
            if _stop_signal is not None and _stop_signal != signal.SIGINT:  # SIGTERM, SIGHUP
                _say(f"stopped by {signal.Signals(_stop_signal).name}")
        raise
    except BrokenPipeError:  # (a write outside the commands and rich's console: the same answer as theirs)
        from emqlab.ui.cli.common import reader_left

        reader_left()
    finally:  # (the interpreter's shutdown, which empties the modules this hook reads, uses its own)
        sys.unraisablehook = sys.__unraisablehook__


def _say(text: str) -> None:
    """Say why the command stopped, in the CLI's console where it was loaded whole, else plainly: nothing is
    imported on the way out (an import the stop signal cut short would fail again, with a traceback)."""
    console = getattr(sys.modules.get("emqlab.ui.cli.common"), "err_console", None)
    try:
        if console is not None:
            console.print(f"[bold red]{text}[/]")
        else:
            sys.stderr.write(text + "\n")
    except OSError:  # (SIGHUP: the terminal may be gone)
        pass


def entry() -> None:
    """The console script: the stop signals handled from its first line, then the CLI imported and run."""
    handle_stops(_early)
    try:
        from emqlab.ui.cli import main
    except SystemExit as e:  # (a stop signal while importing: nothing ran, nothing to clean up)
        ignore_stops()
        sys.stderr.write("interrupted\n")
        raise SystemExit(e.code) from None
    if _early_stop is not None:  # (its SystemExit was swallowed inside an import, and the run went on)
        ignore_stops()
        sys.stderr.write("interrupted\n")
        raise SystemExit(128 + _early_stop)
    _run(main)  # installs the CLI's own handlers (_terminate) first thing


if __name__ == "__main__":  # pragma: no cover
    entry()
