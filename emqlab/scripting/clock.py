"""The home of the frozen clock: the one instant every command of an atomic client-side script run sees on
fakeredis, as the commands of one script see one instant on Redis (Redis freezes a script's clock for key
expiry and TTLs).

:meth:`emqlab.scripting.host.LuaHost.run` freezes it around a run; the direct fakeredis command executor
(:func:`emqlab.backend.connect.command_executor`) reads it for every command. Live servers are not affected
(their clock is the server's).
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
