"""fakeredis's reply objects as the Lua host takes a raw RESP2 reply: one conversion for the direct fakeredis
executor (:mod:`emqlab.backend.executor`) and the embedded server's scripts (:mod:`emqlab.backend.scripts`).
Imports nothing of emqlab's backend, and fakeredis only on first use."""

from __future__ import annotations

import functools
from collections.abc import Callable

import redis

__all__ = ["fake_reply"]


@functools.lru_cache(maxsize=1)
def _fake_types() -> tuple[type, type, type, Callable[[str], BaseException]]:
    # (imported on first use: fakeredis is not loaded to start emqlab against a live server)
    from fakeredis._helpers import SimpleError, SimpleString

    from emqlab.scripting.replies import Status

    return SimpleError, SimpleString, Status, redis.connection.DefaultParser(socket_read_size=65536).parse_error


def fake_reply(r: object) -> object:
    """A fakeredis reply object as the host takes a raw RESP2 reply: a status a
    :class:`emqlab.scripting.replies.Status`, an error the ``ResponseError`` redis-py would give (returned, at
    the top or inside an array, never raised), arrays converted throughout."""
    simple_error, simple_string, status, parse_error = _fake_types()
    if isinstance(r, list):
        return [fake_reply(x) for x in r]
    if isinstance(r, simple_error):
        return parse_error(r.value)  # type: ignore[attr-defined]
    if isinstance(r, simple_string):
        return status(r.value)  # type: ignore[attr-defined]
    return r
