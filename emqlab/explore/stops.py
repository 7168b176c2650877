"""The one home of the stop signals: which signals stop a command or a run (:data:`STOP_SIGNALS`) and how a
step holds them back (:func:`stops_held`). Imports nothing but the standard library, so that the console
script's entry (:mod:`emqlab.ui.entry`), which must run before any heavy import, can take them from here;
the pool (:mod:`emqlab.explore.pool`) and the fork server take them too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType

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


def at_next_call(fire: Callable[[], object], after: FrameType | None = None) -> None:
    """Call ``fire`` (which raises a stop's exception) at this thread's next Python call or return, once
    the frame ``after`` has returned when one is given, through a profile function removed before ``fire``
    runs. For a stop that cannot be raised where it came: inside an import (raised there it leaves a
    half-made module) or inside a finalizer (Python prints the exception and drops it)."""
    waiting = [after]

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        if waiting[0] is not None:
            if frame is waiting[0] and event == "return":
                waiting[0] = None
            return
        sys.setprofile(None)
        fire()

    sys.setprofile(hook)


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """While the block runs (main thread): a KeyboardInterrupt that Python would drop — raised inside a
    finalizer's ``__del__`` or a weakref callback, printed as "Exception ignored" — is raised again at the
    next call instead (:func:`at_next_call`), so a notebook's interrupt stops the exploration instead of
    letting the cell run to its end. Any other unraisable exception goes to the hook that was there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():

            def again() -> None:
                raise exc

            at_next_call(again, after=sys._getframe())
            return
        saved(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = saved


#: how often a helper process looks whether its parent is still there (s)
PARENT_POLL_S = 0.2


def exit_with_parent(grace_s: float = 3.0, *, busy: Callable[[], bool] | None = None,
                     clean_up: Callable[[], object] | None = None) -> None:
    """End this helper process (a pool worker, the fork server) when its parent is gone — killed with
    SIGKILL, which runs no clean-up of its own — instead of living on as an orphan that holds the dead
    command's stdout and stderr open (a caller reading them to the end would wait forever). A daemon thread
    looks every :data:`PARENT_POLL_S` seconds whether the parent changed; then it sends this process
    SIGTERM (a worker's handler interrupts the part it runs, which deletes its live keys), waits while
    ``busy()`` says that clean-up runs (at most ``grace_s`` seconds), calls ``clean_up()`` and ends the
    process with ``os._exit``."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        until = time.monotonic() + grace_s
        time.sleep(min(PARENT_POLL_S, grace_s))
        while busy is not None and busy() and time.monotonic() < until:
            time.sleep(PARENT_POLL_S / 4)
        try:
            if clean_up is not None:
                clean_up()
        finally:
            os._exit(1)

    threading.Thread(target=watch, name="emqlab-parent-watch", daemon=True).start()


__all__ = ["PARENT_POLL_S", "STOP_SIGNALS", "at_next_call", "exit_with_parent", "interrupts_kept", "stops_held"]
