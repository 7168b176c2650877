"""Where fakeredis answers otherwise than Redis 7.0, the embedded server answers as Redis does.

Each rule here was seen to differ by a test that sends the same command to the embedded server and to a
live Redis (``tests/test_embedded_scripts.py``, ``tests/test_fake_server.py``); the rest of fakeredis's
differences that remain are pinned there with the reason. Relies on fakeredis internals (checked with 2.41):
``_expireat``, ``_empty_stream_read_reply``, ``_resp_version``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RedisRepliesMixin"]


class RedisRepliesMixin:
    """A fakeredis socket mixin (before fakeredis's classes in the bases)."""

    _db: Any

    def _expireat(self, key: Any, timestamp: float, *args: bytes, invalid_in: str | None = None) -> int:
        # Redis deletes a key whose new expiry is not in the future at once (db.c: checkAlreadyExpired); fakeredis
        # keeps it until its clock moves on, which inside a script (one instant) it never does
        done: int = super()._expireat(key, timestamp, *args, invalid_in=invalid_in)  # type: ignore[misc]
        if done and timestamp <= self._db.time:
            key.value = None
        return done

    def _empty_stream_read_reply(self, res: Any) -> Any:
        # an XREAD/XREADGROUP that matched nothing: null on Redis 7.0 (RESP2's null array, RESP3's null; nil
        # inside a script), where fakeredis answers an empty array or map
        return None if not res else res
