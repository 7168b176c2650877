"""The home of the embedded server's clocks.

* The frozen clock: the one instant every command of an atomic client-side script run sees on fakeredis, as
  the commands of one script see one instant on Redis (Redis freezes a script's clock for key expiry and
  TTLs). :meth:`emqlab.scripting.host.LuaHost.run` freezes it around a run.
* The virtual clock: inside an exploration's step on the embedded server, ``TIME`` answers the step's
  virtual time (:meth:`emqlab.engine.runner.Runner.now`), the instant the step's actor stamps its values
  with, so that a script whose control flow reads ``TIME`` runs the same way in every run of one schedule
  (an exploration's runs must be repeatable) and sees the instant its own timestamps say.

The direct fakeredis command executor (:func:`emqlab.backend.connect.command_executor`) reads both for every
command. Live servers are not affected (their clock is the server's).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_FROZEN_CLOCK: ContextVar[float | None] = ContextVar("emqlab_frozen_clock", default=None)


@contextmanager
def frozen_clock(now: float | None = None) -> Iterator[None]:
    """Within the block, every command of a direct fakeredis executor sees the instant ``now`` (seconds since
    the epoch; default: the time on entry; an enclosing frozen instant is kept) for key expiry and TTLs, as
    the commands of one Redis script do. Live servers are not affected (their clock is the server's)."""
    if _FROZEN_CLOCK.get() is not None:
        yield
        return
    token = _FROZEN_CLOCK.set(time.time() if now is None else now)
    try:
        yield
    finally:
        _FROZEN_CLOCK.reset(token)


def frozen_now() -> float | None:
    """The frozen instant (seconds since the epoch) inside :func:`frozen_clock`, else ``None``."""
    return _FROZEN_CLOCK.get()


_VIRTUAL_CLOCK: ContextVar[int | None] = ContextVar("emqlab_virtual_clock", default=None)


@contextmanager
def virtual_clock(now_ms: int | None) -> Iterator[None]:
    """Within the block, ``TIME`` on the embedded server answers ``now_ms`` (milliseconds since the epoch) as
    Redis answers it: seconds and microseconds (None: the server's clock). Key expiry keeps the server's
    clock."""
    if now_ms is None:
        yield
        return
    token = _VIRTUAL_CLOCK.set(now_ms)
    try:
        yield
    finally:
        _VIRTUAL_CLOCK.reset(token)


def virtual_time_reply() -> list[bytes] | None:
    """``TIME``'s reply inside :func:`virtual_clock` (``[seconds, microseconds]`` as bulk strings), else None."""
    now = _VIRTUAL_CLOCK.get()
    if now is None:
        return None
    return [str(now // 1000).encode(), str(now % 1000 * 1000).encode()]
