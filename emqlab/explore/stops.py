"""The one home of the stop signals: which signals stop a command or a run (:data:`STOP_SIGNALS`) and how a
step holds them back (:func:`stops_held`). Imports nothing but the standard library, so that the console
script's entry (:mod:`emqlab.ui.entry`), which must run before any heavy import, can take them from here;
the pool (:mod:`emqlab.explore.pool`) and the fork server take them too.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

#: the signals that stop a command or a run: Ctrl-C, SIGTERM (a CI timeout, `kill`), SIGHUP (a closed
#: terminal); every part of emqlab that handles them takes this tuple (the CLI, the pool, the fork server)
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                                                 if hasattr(signal, n))


@contextmanager
def stops_held(signals: Iterable[int] = STOP_SIGNALS) -> Iterator[None]:
    """Hold ``signals`` back in this thread while the block runs (blocked, then the old mask put back, so one
    that came meanwhile is taken when the block ends); nothing where the platform has no
    ``pthread_sigmask``. For a step a stop signal must not land inside: a wait that holds futures' locks, or
    starting a helper process, which inherits the mask."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    old = mask(signal.SIG_BLOCK, set(signals))
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, old)


__all__ = ["STOP_SIGNALS", "stops_held"]
