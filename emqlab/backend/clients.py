"""What kind of redis-py client a connection is (fakeredis or live, a cluster), its raw and per-session
forms, a pipeline on it, and SCAN over its keys — the helpers every other backend module builds on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import redis

from emqlab.backend import cluster as _cluster
from emqlab.backend.cluster import is_cluster
from emqlab.backend.faults import BackendError

FAKE = "fakeredis"


def is_fake(conn: redis.Redis) -> bool:
    """True for a fakeredis client."""
    return type(conn).__module__.startswith("fakeredis")


def describe(conn: redis.Redis) -> str:
    """``fakeredis`` or the live server's ``redis://host:port/db`` (no password); for a cluster,
    ``redis://host:port/0 (Redis Cluster, N primaries)`` with the first node's address."""
    if is_fake(conn):
        return FAKE
    if is_cluster(conn):
        return _cluster.describe(conn)  # type: ignore[arg-type]
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def adopt(conn: redis.Redis) -> tuple[redis.Redis, bool]:
    """``conn`` as emqlab's engine needs it: a live client that speaks RESP2 and returns bytes. A client of
    your own that does not — redis-py 8's default ``redis.Redis()`` speaks RESP3 (``HGETALL`` answers a
    dict), or one with ``decode_responses=True`` — is replaced by one on the same server, database and
    credentials that does (a pool of its own); returns it and whether it is new (then the caller closes
    it). fakeredis and cluster clients, and clients made by :func:`~emqlab.backend.connect.connect`, come back
    as they are."""
    if is_fake(conn) or is_cluster(conn):
        return conn, False
    pool = conn.connection_pool
    kw = pool.connection_kwargs
    from redis import connection as _conn

    protocol = kw.get("protocol") or getattr(_conn, "DEFAULT_RESP_VERSION", 2)  # None: the library's default
    if str(protocol) == "2" and not kw.get("decode_responses"):
        return conn, False
    # where and as whom it connects (the rest of a pool's arguments are redis-py's own, some RESP3-only)
    keep = {k: v for k, v in kw.items() if k in _ADOPTED or k.startswith("ssl")}
    own = redis.ConnectionPool(connection_class=pool.connection_class, protocol=2, decode_responses=False,
                               **keep)
    return redis.Redis(connection_pool=own), True


#: the connection arguments :func:`adopt` carries over (and any ``ssl_*``)
_ADOPTED = frozenset({"host", "port", "path", "db", "username", "password", "credential_provider", "client_name",
                      "socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options",
                      "encoding", "encoding_errors", "retry", "retry_on_timeout", "health_check_interval"})


def raw_client(conn: redis.Redis) -> redis.Redis:
    """A client on ``conn``'s connection pool that returns replies exactly as parsed from RESP2 (no
    response callbacks: ``HGETALL`` stays a flat list, ``SET`` stays ``b"OK"``). The Lua host needs raw
    replies to apply Redis's reply → Lua conversion rules. Not for a cluster (no one pool serves it): its
    :func:`~emqlab.backend.executor.command_executor` routes raw commands."""
    if is_cluster(conn):
        raise BackendError("raw_client: a Redis Cluster has no single connection pool; use command_executor(conn)")
    raw = type(conn)(connection_pool=conn.connection_pool) if not is_fake(conn) else _fake_raw(conn)
    raw.response_callbacks = {}  # type: ignore[assignment]
    return raw


def session_client(conn: redis.Redis) -> redis.Redis:
    """A client with one connection of its own to ``conn``'s server (same database), replies raw as in
    :func:`raw_client`: per-connection state — WATCH, MULTI — belongs to it alone. ``close()`` it when done
    (that closes the connection and with it any WATCH or open MULTI).

    On a cluster: a :class:`emqlab.backend.cluster.ClusterSession`, whose connection goes to the node that owns the
    slot of its first keyed command (all of a tagged queue's keys are on that node)."""
    if is_cluster(conn):
        return cast(redis.Redis, _cluster.ClusterSession(conn))  # type: ignore[arg-type]
    if is_fake(conn):
        from emqlab.backend.fakeserver import sync_client

        client: redis.Redis = sync_client(conn.connection_pool.connection_kwargs["server"], protocol=2,
                                          single_connection_client=True)
    else:
        pool = conn.connection_pool
        own = redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
        client = redis.Redis(connection_pool=own, single_connection_client=True)
    client.response_callbacks = {}  # type: ignore[assignment]
    return client


def pipeline(conn: redis.Redis, *, transaction: bool) -> Any:
    """``conn.pipeline(transaction=…)``, except on any cluster client — a :class:`redis.cluster.RedisCluster`
    of your own included — where it is emqlab's :class:`emqlab.backend.cluster.SlotPipeline`: raw commands with bytes
    names, one transaction per hash slot (one in all for a tagged queue's keys)."""
    if is_cluster(conn):
        return _cluster.SlotPipeline(conn, transaction)  # type: ignore[arg-type]
    return conn.pipeline(transaction=transaction)


def _fake_raw(conn: redis.Redis) -> redis.Redis:
    from emqlab.backend.fakeserver import sync_client

    return sync_client(conn.connection_pool.connection_kwargs["server"], protocol=2)


def scan_keys(conn: redis.Redis, pattern: str, count: int = 500) -> Iterator[bytes]:
    """Every key matching ``pattern`` (SCAN, never KEYS). On a cluster: on the one node that owns the slot of
    the pattern's hash tag (a queue's :attr:`~emqlab.protocol.keys.QueueKeys.pattern`), else on every primary."""
    if is_cluster(conn):
        yield from _cluster.scan_keys(conn, pattern, count)  # type: ignore[arg-type]
        return
    yield from conn.scan_iter(match=pattern, count=count)
