"""The one home of where the servers emqlab's Lua host talks to differ: a small typed *server dialect* that
the host's rules (:mod:`emqlab.scripting.rules`), its error texts (:mod:`emqlab.scripting.host`) and its
sandbox (``lua/lib/sandbox.lua``) consult.

Two dialects: :data:`REDIS7` (Redis 7.0, and the embedded fakeredis server, which stays Redis 7-flavoured)
and :data:`VALKEY` (Valkey 8 and later, checked against Valkey 9.1). Where they differ for a script:

* texts: Valkey says ``Unknown command called from script``, ``This Valkey command is not allowed from
  script``, ``Command arguments must be strings or integers``, ``server.log() requires …`` where Redis says
  ``Unknown Redis command …``, ``This Redis command …``, ``Lua redis lib command arguments …``,
  ``redis.log() requires …`` (``_VALKEY_TEXTS``; the texts themselves are in :mod:`emqlab.protocol.messages`),
  and ``Could not find scripting engine 'x'`` for a ``#!x`` line, which it checks after the flags;
* the suffix of a script's error: Redis names the script's SHA1 (``script: <sha1>, on @user_script:1.``),
  Valkey does not (``script: on @user_script:1.``);
* blocking commands: Redis refuses ``BLPOP``, ``BRPOP``, ``BRPOPLPUSH``, ``BLMOVE``, ``BZPOPMIN``,
  ``BZPOPMAX`` and ``WAIT`` in a script (flagged ``noscript``) and ``XREAD``/``XREADGROUP`` with ``BLOCK``;
  Valkey runs them without blocking, as both run ``BLMPOP``/``BZMPOP``; an unknown subcommand of a
  container command (``CLIENT NOSUCH``) Redis refuses in the script, Valkey sends it (the command answers);
* numbers: a Lua number passed to ``redis.call`` and a ``{double=…}`` reply are ``%.17g`` text on Redis
  7.0 (``0.10000000000000001``); on Valkey an integer up to 2^62 is written as one, any other number in
  the shortest text that reads back the same (``0.1``, ``1e+21``), and a ``{double=…}`` NaN is ``nan``;
* ``TIME``: Valkey answers every ``TIME`` of a script with the same instant, Redis 7.0 reads its clock each time
  (:attr:`Dialect.frozen_time`);
* the sandbox: Valkey's has the ``server`` global (the ``redis`` table under another name), ``os`` with
  ``os.clock`` only, ``__server__err__handler``, and ``redis.SERVER_NAME``, ``VALKEY_VERSION``,
  ``VALKEY_VERSION_NUM``; its ``REDIS_VERSION`` is the Redis release it answers as (``7.2.4``).

:func:`server_dialect` asks a server once per connection pool (``HELLO``'s ``server`` and ``version``
fields, which every user may send) and keeps the answer.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emqlab.protocol import messages

#: the commands Redis 7.0 flags ``noscript`` that Valkey runs inside a script, without blocking
VALKEY_SCRIPT_BLOCKING = frozenset({"blpop", "brpop", "brpoplpush", "blmove", "bzpopmin", "bzpopmax", "wait"})


def _version_num(version: str) -> int:
    parts = [int(p) for p in (version.split(".") + ["0", "0", "0"])[:3] if p.isdigit()] + [0, 0, 0]
    return (parts[0] << 16) | (parts[1] << 8) | parts[2]


#: the texts Valkey words otherwise than Redis 7.0: Redis's text (:mod:`emqlab.protocol.messages`), Valkey's
_VALKEY_TEXTS = {
    messages.UNKNOWN_COMMAND: messages.VALKEY_UNKNOWN_COMMAND,
    messages.SCRIPT_ARITY: messages.VALKEY_SCRIPT_ARITY,
    messages.NOSCRIPT_COMMAND: messages.VALKEY_NOSCRIPT_COMMAND,
    messages.NO_ARGUMENTS: messages.VALKEY_NO_ARGUMENTS,
    messages.ARGUMENT_TYPE: messages.VALKEY_ARGUMENT_TYPE,
    messages.ACL_CHECK_COMMAND: messages.VALKEY_ACL_CHECK_COMMAND,
    messages.SETRESP_ARGUMENTS: messages.VALKEY_SETRESP_ARGUMENTS,
    messages.LOG_ARGUMENTS: messages.VALKEY_LOG_ARGUMENTS,
    messages.LOG_LEVEL: messages.VALKEY_LOG_LEVEL,
    messages.SET_REPL_ARGUMENTS: messages.VALKEY_SET_REPL_ARGUMENTS,
}


@dataclass(frozen=True)
class Dialect:
    """What a script sees of one kind of server. ``server``: ``"redis"`` or ``"valkey"``; ``version``: the
    server's own release; ``redis_version``: what its ``redis.REDIS_VERSION`` says (Valkey answers as Redis
    7.2.4)."""

    server: str
    version: str
    redis_version: str = field(default="")

    @property
    def valkey(self) -> bool:
        return self.server == "valkey"

    @property
    def name(self) -> str:
        """The server as people write it, with its release: ``Redis 7.0.15``, ``Valkey 9.1.2``."""
        return f"{'Valkey' if self.valkey else 'Redis'} {self.version}"

    def text(self, redis_text: str) -> str:
        """``redis_text`` (a Redis 7.0 text of :mod:`emqlab.protocol.messages`, ``messages.UNKNOWN_COMMAND``) as
        this server words it."""
        return _VALKEY_TEXTS.get(redis_text, redis_text) if self.valkey else redis_text

    def lua_texts(self) -> dict[bytes, bytes]:
        """:func:`emqlab.protocol.messages.lua_table` as this server words it (the sandbox's ``msg``)."""
        return {k: self.text(v.decode()).encode() for k, v in messages.lua_table().items()}

    def allowed_in_script(self, name: str) -> bool:
        """Whether a command the command table (Redis 7.0's) flags ``noscript`` runs in a script here."""
        return self.valkey and name in VALKEY_SCRIPT_BLOCKING

    @property
    def frozen_time(self) -> bool:
        """``TIME`` answers one instant all through a script (Valkey 9.1: the script's start); Redis 7.0.15's
        ``TIME`` reads the moving clock (only key expiry is frozen there)."""
        return self.valkey

    def error_suffix(self, sha: str, source: str, line: int) -> str:
        """What follows a script's error text: `` script: <sha1>, on @user_script:3.`` on Redis, `` script: on
        @user_script:3.`` on Valkey."""
        return f" script: on {source}:{line}." if self.valkey else f" script: {sha}, on {source}:{line}."

    def lua_options(self) -> dict[bytes, Any]:
        """The sandbox's ``dialect`` option (``lua/lib/sandbox.lua``): the version texts and numbers, and
        whether Valkey's globals and number texts apply."""
        out: dict[bytes, Any] = {b"redis_version": self.redis_version.encode(),
                                 b"redis_version_num": _version_num(self.redis_version)}
        if self.valkey:
            out.update({b"valkey": True, b"server_name": b"valkey", b"valkey_version": self.version.encode(),
                        b"valkey_version_num": _version_num(self.version)})
        return out


#: Redis 7.0 (what the host reproduces by default, and the embedded fakeredis server's flavour)
REDIS7 = Dialect("redis", "7.0.15", "7.0.15")
#: Valkey 9.1 (any Valkey that :func:`server_dialect` finds gets its own release in ``version``)
VALKEY = Dialect("valkey", "9.1.2", "7.2.4")


def from_hello(reply: Any) -> Dialect:
    """The dialect a ``HELLO`` reply (RESP2: a flat list of names and values, or a dict) describes; any
    server that does not call itself ``valkey`` is Redis 7-flavoured."""
    if isinstance(reply, (list, tuple)):
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    fields = {_text(k): v for k, v in dict(reply or {}).items()}
    server, version = _text(fields.get("server", "")), _text(fields.get("version", ""))
    if server.lower() == "valkey":
        # Valkey answers as Redis 7.2.4 (its redis_version and redis.REDIS_VERSION) from release 8 on
        return Dialect("valkey", version or VALKEY.version, VALKEY.redis_version)
    return REDIS7


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


_known: weakref.WeakKeyDictionary[Any, Dialect] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def server_dialect(conn: Any, execute: Callable[..., Any] | None = None) -> Dialect:
    """The dialect of the server behind ``conn`` (a redis-py client), asked once per connection pool with
    ``HELLO`` (through ``execute`` when given, else ``conn.execute_command``; Redis checks no ACL rule for
    it, so a restricted user may send it; a cluster client asks its default node) and remembered. A server
    that refuses ``HELLO`` (an old Redis, a proxy) is taken for Redis 7; so is one that cannot be reached,
    without remembering it (the caller meets that error on its next command)."""
    import redis

    key = getattr(conn, "connection_pool", None) or conn
    with _lock:
        known = _known.get(key)
    if known is not None:
        return known
    # (a cluster client routes no keyless command by itself: ask its default node, a node like the others)
    options = {"target_nodes": conn.get_default_node()} if execute is None and hasattr(conn, "get_default_node") else {}
    try:
        found = from_hello((execute or conn.execute_command)("HELLO", **options))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        return REDIS7
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, TypeError, ValueError):
        found = REDIS7
    with _lock:
        try:
            _known[key] = found
        except TypeError:  # pragma: no cover - a key that takes no weak reference: ask again next time
            pass
    return found
