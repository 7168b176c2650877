"""Connections: fakeredis (the embedded default) or a live Redis server, and the rules that keep a live
server safe.

* ``connect()`` — a fresh in-process fakeredis server with Lua ready: fakeredis runs scripts in its own
  ``lupa`` Lua 5.1 runtime, which lacks Redis's ``cmsgpack`` and ``bit`` modules (``PROTOCOL.md`` §9.1);
  the embedded server (:mod:`emqlab.backend.fakeserver`) gives it Redis 7's sandbox from ``lua/lib/`` with
  emqlab's pure-Lua ``cjson``, ``cmsgpack`` and ``bit``, so ``EVALSHA`` runs the queue scripts unchanged.
* ``connect("redis://host:port/db")`` — a live server; ``connect("live")`` takes ``$EMQLAB_REDIS_URL`` or
  ``redis://127.0.0.1:6379/0``. A URL of one node of a Redis Cluster (its ``HELLO`` says
  ``mode cluster``) gives a :class:`emqlab.backend.cluster.ClusterClient` instead: every function here takes it,
  or a :class:`redis.cluster.RedisCluster` of your own, and sends each command to the node owning its key's
  slot (:mod:`emqlab.backend.cluster`).

Live safety (:class:`Namespace`): a run writes and deletes only keys under its own queue's base
(``emq:{<queue>}:``), refuses to start where such keys already exist, and its clean-up deletes only those.
Nothing here ever sends FLUSHDB or FLUSHALL to a server emqlab did not start (on a cluster, no keyless
command but ``SCRIPT LOAD``/``EXISTS``/``KILL`` is sent at all).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import cast
from urllib.parse import urlsplit

import redis

from emqlab.backend import cluster as _cluster
from emqlab.backend.clients import FAKE, adopt, describe, is_fake, pipeline, raw_client, scan_keys, session_client
from emqlab.backend.executor import Executor, command_executor
from emqlab.backend.faults import (
    EXPLORATION_FAULTS,
    SERVER_FAULT_PREFIXES,
    BackendError,
    FaultScope,
    KeysExist,
    ServerFault,
    fault_code,
    server_fault,
)
from emqlab.backend.namespace import (
    HEARTBEAT_MS,
    RUN_INDEX,
    RUN_LEASE_MS,
    RUN_MARKS,
    SAFETY_TTL_FLOOR_MS,
    SAFETY_TTL_MS,
    TTL_OBSERVED,
    AbandonedRun,
    Namespace,
    abandoned_runs,
    clean,
    has_expiry,
    unique_queue,
)
from emqlab.scripting.clock import frozen_clock as frozen_clock  # documented as emqlab.backends.frozen_clock

DEFAULT_LIVE_URL = "redis://127.0.0.1:6379/0"


def live_url() -> str:
    """``$EMQLAB_REDIS_URL`` or the default live server ``redis://127.0.0.1:6379/0``."""
    return os.environ.get("EMQLAB_REDIS_URL") or DEFAULT_LIVE_URL


def connect(url: str | None = None, *, ping: bool = True) -> redis.Redis:
    """A redis-py client: fakeredis when ``url`` is ``None``/``"fakeredis"``, else the live server at ``url``
    (``"live"`` = :func:`live_url`). Replies are bytes (no decoding). When the server at ``url`` is a node of a
    Redis Cluster, the client is a :class:`emqlab.backend.cluster.ClusterClient` on the whole cluster (found through
    that node; database 0 only); ``ping=False`` connects to nothing, so it cannot tell and gives a standalone
    client.

    Raises :class:`BackendError` with a one-line message for a malformed URL, an unreachable server, a
    failed AUTH, or a server without scripting.
    """
    if url is None or url == FAKE or url == "fake":
        return _connect_fake()
    if url == "live":
        url = live_url()
        if os.environ.get("EMQLAB_REDIS_URL"):
            try:
                return _connect_live(url, ping=ping)
            except BackendError as e:
                raise type(e)(f"{e} (from $EMQLAB_REDIS_URL)") from None
    return _connect_live(url, ping=ping)


def _connect_fake() -> redis.Redis:
    # One home for the embedded server (modules, sandbox, INFO, empty script cache): emqlab.backend.fakeserver.
    from emqlab.backend.fakeserver import new_server, sync_client

    conn = sync_client(new_server(), protocol=2)
    conn._emqlab_owned = True  # type: ignore[attr-defined]  # this process made the server: it may flush it
    conn._emqlab_claimed = set()  # type: ignore[attr-defined]  # the namespaces runs have claimed on it
    return conn


class BadURL(BackendError, ValueError):
    """The Redis URL is malformed (a usage error, not an unreachable server)."""


#: URL query options ``_connect_live`` passes on to redis-py; any other is refused (redis-py would fail with a
#: TypeError when it builds the connection). ``protocol`` is left out: emqlab speaks RESP2.
URL_OPTIONS = ("db", "username", "password", "client_name", "socket_timeout", "socket_connect_timeout",
               "socket_keepalive", "health_check_interval", "retry_on_timeout", "max_connections",
               "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname",
               "ssl_min_version")


def _connect_live(url: str, *, ping: bool) -> redis.Redis:
    from urllib.parse import parse_qsl

    known = url_secrets(url)
    safe = _redact(url, known)
    usage = "expected redis://[[user]:password@]host[:port][/db], rediss://… or unix:///path/to/socket"
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as e:  # e.g. an unbalanced [ in the host
        raise BadURL(f"malformed Redis URL {safe!r}: {_redact(str(e), known)}") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise BadURL(f"malformed Redis URL {safe!r}: {usage}")
    unknown = sorted({k for k, _ in query} - set(URL_OPTIONS))
    if unknown:
        raise BadURL(f"malformed Redis URL {safe!r}: unknown option {', '.join(unknown)} "
                     f"(known: {', '.join(URL_OPTIONS)})")
    if parts.scheme != "unix":
        if not parts.hostname:
            raise BadURL(f"malformed Redis URL {safe!r}: no host ({usage})")
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            shown = repr(db) if "@" not in db and not any(k and k in db for k in known) else "in the path"
            raise BadURL(f"malformed Redis URL {safe!r}: the database {shown} is not a number")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as e:
            raise BadURL(f"malformed Redis URL {safe!r}: {e}") from None
    try:
        conn = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=10, protocol=2)
    except (ValueError, TypeError) as e:
        raise BadURL(f"malformed Redis URL {safe!r}: {_redact(str(e), known)}") from None
    if ping:
        try:
            conn.ping()
        except redis.exceptions.AuthenticationError as e:
            raise BackendError(f"authentication failed at {safe}: {_redact(str(e), known)}") from None
        except redis.exceptions.ResponseError as e:
            if "NOAUTH" in str(e) or "WRONGPASS" in str(e):
                raise BackendError(f"authentication failed at {safe}: {_redact(str(e), known)}") from None
            if "SELECT is not allowed in cluster mode" in str(e):
                db = conn.connection_pool.connection_kwargs.get("db", 0)
                raise BadURL(f"Redis at {safe} is a cluster node: a cluster has only database 0, not {db}") from None
            fault = server_fault(e)  # (BUSY: another client's script; LOADING: a restart)
            if fault is not None:
                raise ServerFault(f"Redis at {safe} refused PING: {_redact(fault, known)}",
                                  detail=_redact(fault, known)) from None
            raise BackendError(f"Redis at {safe} refused PING: {_redact(str(e), known)}") from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
            raise BackendError(f"cannot reach Redis at {safe}: {_redact(str(e), known)}") from None
        except (ValueError, TypeError) as e:  # an option value redis-py only parses when it connects
            raise BadURL(f"malformed Redis URL {safe!r}: {_redact(str(e), known)}") from None
        if _cluster.cluster_enabled(conn):
            return _connect_cluster(conn, url, safe, known)
    return conn


def _connect_cluster(node: redis.Redis, url: str, safe: str, known: Iterable[str]) -> redis.Redis:
    """The :class:`emqlab.backend.cluster.ClusterClient` for the cluster ``node`` (at ``url``) belongs to."""
    db = node.connection_pool.connection_kwargs.get("db", 0) or 0
    node.close()
    node.connection_pool.disconnect()
    if int(db) != 0:
        raise BadURL(f"Redis at {safe} is a cluster node: a cluster has only database 0, not {db}")
    if urlsplit(url).scheme == "unix":
        raise BadURL(f"Redis at {safe} is a cluster node: reach a cluster over TCP (redis://host:port)")
    try:
        client = _cluster.ClusterClient.from_url(url, socket_connect_timeout=3, socket_timeout=10, protocol=2)
    except redis.exceptions.RedisError as e:
        raise BackendError(f"cannot use the Redis Cluster at {safe}: {_redact(str(e), known)}") from None
    return cast(redis.Redis, client)


_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s:/?#@'\"]*):(?P<pw>[^\s/?#'\"]*)@")
_QUERY_SECRET = re.compile(r"(?P<key>[?&;](?:password|pass|pwd|auth|token)=)(?P<pw>[^&#\s'\"]*)", re.IGNORECASE)


def _redact(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with every URL password masked: ``redis://user:***@host``, ``?password=***``; and each of
    ``known`` (passwords known to the caller, e.g. of the URL it was given) replaced by ``***`` wherever
    it appears. The one masking function for every output: messages, replay lines, JSON, files.

    A URL's user-info runs to the last ``@`` before the host (a password may hold an ``@``)."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['key']}***", text)
    for secret in known:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def url_secrets(url: str | None) -> list[str]:
    """The passwords in a Redis URL (user-info and ``?password=``), raw and percent-decoded, for
    :func:`_redact`'s ``known``."""
    from urllib.parse import parse_qsl, unquote

    if not url:
        return []
    found: list[str] = []
    try:
        parts = urlsplit(url)
        pw = parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        pw, query = None, []
    # also what a reader would take for the password: after the scheme, up to the last @ (a / or ? in it
    # breaks urlsplit's reading, not the user's intent)
    rest = url.split("://", 1)[-1]
    if "@" in rest and ":" in rest.rpartition("@")[0]:
        found.append(rest.rpartition("@")[0].split(":", 1)[1])
    if pw:
        found += [pw, unquote(pw)]
    found += [v for k, v in query if k.lower() in ("password", "pass", "pwd", "auth", "token") and v]
    return sorted(set(found), key=len, reverse=True)


# the names of the old path emqlab.backends, whose code is in the modules beside this one
__all__ = ["DEFAULT_LIVE_URL", "EXPLORATION_FAULTS", "FAKE", "HEARTBEAT_MS", "RUN_INDEX", "RUN_LEASE_MS", "RUN_MARKS",
           "SAFETY_TTL_FLOOR_MS", "SAFETY_TTL_MS", "SERVER_FAULT_PREFIXES", "TTL_OBSERVED", "AbandonedRun",
           "BackendError", "BadURL", "Executor", "FaultScope", "KeysExist", "Namespace", "ServerFault",
           "abandoned_runs", "adopt", "clean", "command_executor", "connect", "describe", "fault_code",
           "frozen_clock", "has_expiry", "is_fake", "live_url", "pipeline", "raw_client", "scan_keys",
           "server_fault", "session_client", "unique_queue", "url_secrets"]
