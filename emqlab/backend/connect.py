"""Connections: fakeredis (the embedded default) or a live Redis server, and the rules that keep a live
server safe.

* ``connect()`` — a fresh in-process fakeredis server with Lua ready: fakeredis runs scripts in its own
  ``lupa`` Lua 5.1 runtime, which lacks Redis's ``cmsgpack`` and ``bit`` modules (``PROTOCOL.md`` §9.1);
  the embedded server (:mod:`emqlab.backend.fakeserver`) gives it Redis 7's sandbox from ``lua/lib/`` with
  emqlab's pure-Lua ``cjson``, ``cmsgpack`` and ``bit``, so ``EVALSHA`` runs the queue scripts unchanged.
* ``connect("redis://host:port/db")`` — a live server; ``connect("live")`` takes ``$EMQLAB_REDIS_URL`` or
  ``redis://127.0.0.1:6379/0``. A URL of one node of a Redis Cluster (its ``INFO cluster`` says
  ``cluster_enabled:1``) gives a :class:`emqlab.cluster.ClusterClient` instead: every function here takes it,
  or a :class:`redis.cluster.RedisCluster` of your own, and sends each command to the node owning its key's
  slot (:mod:`emqlab.cluster`).

Live safety (:class:`Namespace`): a run writes and deletes only keys under its own queue's base
(``emq:{<queue>}:``), refuses to start where such keys already exist, and its clean-up deletes only those.
Nothing here ever sends FLUSHDB or FLUSHALL to a server emqlab did not start (on a cluster, no keyless
command but ``SCRIPT LOAD``/``EXISTS``/``KILL`` is sent at all).
"""

from __future__ import annotations

import enum
import os
import re
import secrets
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

import redis

from emqlab.backend import cluster as _cluster
from emqlab.backend.cluster import is_cluster
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting.clock import frozen_clock as frozen_clock  # documented as emqlab.backends.frozen_clock
from emqlab.scripting.clock import frozen_now
from emqlab.scripting.registry import lua_dir

if TYPE_CHECKING:
    from fakeredis import FakeServer
    from fakeredis._socket import FakeSocket

DEFAULT_LIVE_URL = "redis://127.0.0.1:6379/0"
FAKE = "fakeredis"


class BackendError(Exception):
    """A backend could not be reached or used; the message is one line meant for a terminal."""


class FaultScope(enum.Enum):
    """How much of an exploration an infrastructure error spoils.

    * ``RUN`` — the run it happened in, only: the next run starts from a fresh initial state and may well
      complete (NOSCRIPT where EVAL cannot answer it, OOM, BUSY with a
      script that SCRIPT KILL stopped or that another client runs, TRYAGAIN, NOREPLICAS, MISCONF, a failed
      initial-state write or run-index renewal). The exploration goes on without that run.
    * ``EXPLORATION`` — every later run too, because the server is no longer the one the exploration began
      on or no longer answers: its run_id changed (restarted, failed over), READONLY (a failover made it a
      replica), LOADING, MOVED/ASK/CLUSTERDOWN/MASTERDOWN (the queue's slot or its primary moved), NOPERM/
      NOAUTH (the user lacks what every run needs), a lost connection or a command timeout, a script Redis
      refuses to kill. The exploration stops and says how much it covered.
    """

    RUN = "run"
    EXPLORATION = "exploration"


#: fault codes (:func:`fault_code`) after which no later run can be trusted (:attr:`FaultScope.EXPLORATION`);
#: every other code aborts one run
EXPLORATION_FAULTS = frozenset({"READONLY", "LOADING", "MOVED", "ASK", "CLUSTERDOWN", "MASTERDOWN", "NOPERM",
                                "NOAUTH", "RESTARTED", "CONNECTION", "UNKILLABLE"})


class ServerFault(BackendError):
    """The server answered with an error about itself, not about the queue (out of memory, read-only
    replica, busy with a script, loading, a cluster redirection, a lost connection): the run cannot go on
    truthfully, so it stops instead of treating the error as the step's answer.

    ``code`` is the error's code (``OOM``, ``NOSCRIPT``, ``BUSY``, …; ``RESTARTED`` for a changed run_id,
    ``CONNECTION`` for a lost connection or a timeout, ``UNKILLABLE`` for a script Redis would not kill),
    ``detail`` the server's words (one line, no actor or step), ``scope`` what it spoils
    (:class:`FaultScope`, from the code by default: :data:`EXPLORATION_FAULTS`). The message (``str()``) is
    one line for a terminal."""

    def __init__(self, message: str, *, code: str = "", detail: str = "", scope: FaultScope | None = None) -> None:
        super().__init__(message)
        self.code = code or fault_code(detail or message)
        self.detail = detail or message
        self.scope = scope or (FaultScope.EXPLORATION if self.code in EXPLORATION_FAULTS else FaultScope.RUN)


def fault_code(text: str) -> str:
    """The code of a server error's text (``"OOM command not allowed …"`` → ``OOM``; a script's
    ``"ERR Error running script: …: OOM …"`` → ``OOM``); ``ERR`` when it names none of
    :data:`SERVER_FAULT_PREFIXES`."""
    for part in (text, text.rsplit(": ", 1)[-1]):
        word = part.split(" ", 1)[0].upper().lstrip("-")
        if word in SERVER_FAULT_PREFIXES:
            return word
    return "ERR"


#: error prefixes that describe the server's state, not the command's answer (redis.io, "Errors")
SERVER_FAULT_PREFIXES = ("NOSCRIPT", "OOM", "READONLY", "BUSY", "LOADING", "MOVED", "ASK", "MASTERDOWN", "CLUSTERDOWN",
                         "TRYAGAIN", "NOREPLICAS", "MISCONF", "NOPERM", "NOAUTH")


def server_fault(reply: object) -> str | None:
    """The error text when ``reply`` is an error about the server's state (:data:`SERVER_FAULT_PREFIXES`),
    also when a script's ``redis.call`` raised it; else ``None``."""
    if not isinstance(reply, redis.exceptions.ResponseError):
        return None
    reply = _cluster.full_error(reply)  # (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, MASTERDOWN: redis-py strips the code)
    text = str(reply)
    e = redis.exceptions
    named = {e.OutOfMemoryError: "OOM", e.ReadOnlyError: "READONLY", e.BusyLoadingError: "LOADING",
             e.NoScriptError: "NOSCRIPT", e.NoPermissionError: "NOPERM", e.AuthenticationError: "NOAUTH"}
    for cls, prefix in named.items():  # redis-py strips the prefix of the errors it has a class for
        if isinstance(reply, cls) and not text.startswith(prefix):
            return f"{prefix} {text}".split(" script:")[0]
    for part in (text, text.rsplit(": ", 1)[-1]):
        if part.split(" ", 1)[0].upper().lstrip("-") in SERVER_FAULT_PREFIXES:
            return text.split(" script:")[0]
    return None


class KeysExist(BackendError):
    """The run's keys already exist on the server: emqlab refuses to touch them."""


def live_url() -> str:
    """``$EMQLAB_REDIS_URL`` or the default live server ``redis://127.0.0.1:6379/0``."""
    return os.environ.get("EMQLAB_REDIS_URL") or DEFAULT_LIVE_URL


def _ensure_lua_path() -> None:
    # Lua reads LUA_PATH when a runtime opens its package library; fakeredis creates its runtime lazily at
    # the first EVAL, after this has run. ";;" keeps Lua's default search path after ours.
    lib = str(lua_dir() / "lib")
    entry = f"{lib}/?.lua"
    current = os.environ.get("LUA_PATH", "")
    if entry not in current.split(";"):
        os.environ["LUA_PATH"] = f"{entry};{current}" if current else f"{entry};;"


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


def connect(url: str | None = None, *, ping: bool = True) -> redis.Redis:
    """A redis-py client: fakeredis when ``url`` is ``None``/``"fakeredis"``, else the live server at ``url``
    (``"live"`` = :func:`live_url`). Replies are bytes (no decoding). When the server at ``url`` is a node of a
    Redis Cluster, the client is a :class:`emqlab.cluster.ClusterClient` on the whole cluster (found through
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
    # One home for the embedded server (modules, sandbox, INFO, empty script cache): emqlab.fakeserver.
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
            raise BackendError(f"Redis at {safe} refused PING: {_redact(str(e), known)}") from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
            raise BackendError(f"cannot reach Redis at {safe}: {_redact(str(e), known)}") from None
        except (ValueError, TypeError) as e:  # an option value redis-py only parses when it connects
            raise BadURL(f"malformed Redis URL {safe!r}: {_redact(str(e), known)}") from None
        if _cluster.cluster_enabled(conn):
            return _connect_cluster(conn, url, safe, known)
    return conn


def _connect_cluster(node: redis.Redis, url: str, safe: str, known: Iterable[str]) -> redis.Redis:
    """The :class:`emqlab.cluster.ClusterClient` for the cluster ``node`` (at ``url``) belongs to."""
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


def adopt(conn: redis.Redis) -> tuple[redis.Redis, bool]:
    """``conn`` as emqlab's engine needs it: a live client that speaks RESP2 and returns bytes. A client of
    your own that does not — redis-py 8's default ``redis.Redis()`` speaks RESP3 (``HGETALL`` answers a
    dict), or one with ``decode_responses=True`` — is replaced by one on the same server, database and
    credentials that does (a pool of its own); returns it and whether it is new (then the caller closes
    it). fakeredis and cluster clients, and clients made by :func:`connect`, come back as they are."""
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
    :func:`command_executor` routes raw commands."""
    if is_cluster(conn):
        raise BackendError("raw_client: a Redis Cluster has no single connection pool; use command_executor(conn)")
    raw = type(conn)(connection_pool=conn.connection_pool) if not is_fake(conn) else _fake_raw(conn)
    raw.response_callbacks = {}  # type: ignore[assignment]
    return raw


def session_client(conn: redis.Redis) -> redis.Redis:
    """A client with one connection of its own to ``conn``'s server (same database), replies raw as in
    :func:`raw_client`: per-connection state — WATCH, MULTI — belongs to it alone. ``close()`` it when done
    (that closes the connection and with it any WATCH or open MULTI).

    On a cluster: a :class:`emqlab.cluster.ClusterSession`, whose connection goes to the node that owns the
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
    of your own included — where it is emqlab's :class:`emqlab.cluster.SlotPipeline`: raw commands with bytes
    names, one transaction per hash slot (one in all for a tagged queue's keys)."""
    if is_cluster(conn):
        return _cluster.SlotPipeline(conn, transaction)  # type: ignore[arg-type]
    return conn.pipeline(transaction=transaction)


def _fake_raw(conn: redis.Redis) -> redis.Redis:
    from emqlab.backend.fakeserver import sync_client

    return sync_client(conn.connection_pool.connection_kwargs["server"], protocol=2)


# -- live safety ------------------------------------------------------------------------------------------


def scan_keys(conn: redis.Redis, pattern: str, count: int = 500) -> Iterator[bytes]:
    """Every key matching ``pattern`` (SCAN, never KEYS). On a cluster: on the one node that owns the slot of
    the pattern's hash tag (a queue's :attr:`~emqlab.keys.QueueKeys.pattern`), else on every primary."""
    if is_cluster(conn):
        yield from _cluster.scan_keys(conn, pattern, count)  # type: ignore[arg-type]
        return
    yield from conn.scan_iter(match=pattern, count=count)


#: the run index on a live server: a sorted set of the queues runs have claimed, scored by the time (ms)
#: until which their owner is known to be alive (refreshed while it runs). Its key sits under emqlab's own
#: prefix pattern (``emq:{q-*``): "runs" is no name ``unique_queue`` makes (its suffix is hexadecimal).
RUN_INDEX = "emq:{q-runs}:index"
#: how long a run's claim lives without a heartbeat (ms); a run refreshes it at least every HEARTBEAT_MS
RUN_LEASE_MS = 15 * 60 * 1000
HEARTBEAT_MS = 60 * 1000


#: the safety TTL of a live run's keys (ms): far above any TTL of the protocol (a lock's 30 s, a seeded lock's
#: 50 min, the stalled-check throttle, a rate-limit window) and above any one run (each run deletes and
#: rewrites its keys, so a key never outlives the run that wrote it but by this), so a run killed with
#: SIGKILL leaves nothing behind for longer than a day
SAFETY_TTL_MS = 24 * 60 * 60 * 1000
#: a PTTL above this (ms) is emqlab's safety TTL, read as "no expiry" by every state reader (no protocol TTL
#: comes near it)
SAFETY_TTL_FLOOR_MS = SAFETY_TTL_MS // 2
#: keys (relative to the queue's base) that never get a safety TTL because a script reads their TTL: the
#: rate limiter's counter (``PTTL`` in fetchNextJob: no TTL there means "no window", a TTL a delay)
TTL_OBSERVED = frozenset({"limiter"})


def has_expiry(pttl: int) -> bool:
    """Whether a key with this ``PTTL`` (ms; -1 none, -2 missing) expires as far as the protocol goes: a
    safety TTL (above :data:`SAFETY_TTL_FLOOR_MS`) is no expiry."""
    return 0 < pttl <= SAFETY_TTL_FLOOR_MS


@dataclass
class Namespace:
    """The keys one run owns: every key of queue ``keys`` (``emq:{<queue>}:*``).

    ``claim()`` refuses (:class:`KeysExist`) when any such key exists already; ``reset()`` and ``release()``
    delete only such keys. On a fakeredis server that this process created, ``reset()`` may flush it. On a
    live server the claim is registered in :data:`RUN_INDEX` with a lease that :meth:`heartbeat` renews, so
    that ``emqlab clean`` can find the keys of a run that died (kill -9, a lost machine) and delete them.

    On a Redis Cluster the same rules hold: a tagged queue's keys all live in the slot of its name, so the
    SCANs go to the one node owning it (an untagged queue's, :func:`emqlab.keys.without_hash_tag`, to every
    primary), and the deletes go to each key's node.
    """

    conn: redis.Redis
    keys: QueueKeys

    def existing(self, limit: int = 5) -> list[bytes]:
        found: list[bytes] = []
        for k in scan_keys(self.conn, self.keys.pattern):
            found.append(k)
            if len(found) >= limit:
                break
        return found

    def claim(self) -> Namespace:
        found = self.existing()
        if found:
            shown = ", ".join(k.decode("utf-8", "replace") for k in found[:3])
            raise KeysExist(
                f"refusing to run on {describe(self.conn)}: keys under {self.keys.base} already exist "
                f"({shown}{', …' if len(found) > 3 else ''}); if a run of emqlab left them behind, "
                f"`emqlab clean --redis URL` deletes the keys of runs whose owner is gone"
            )
        claimed = getattr(self.conn, "_emqlab_claimed", None)
        if claimed is not None:
            claimed.add(self.keys.base)
        self._beat = 0.0
        self.heartbeat(force=True)
        return self

    def heartbeat(self, *, force: bool = False) -> None:
        """Renew the run's lease in :data:`RUN_INDEX` (live servers; at most once per HEARTBEAT_MS)."""
        if is_fake(self.conn):
            return
        import time

        now = time.time() * 1000
        if not force and now - getattr(self, "_beat", 0.0) < HEARTBEAT_MS:
            return
        self._beat = now
        try:
            self.conn.zadd(RUN_INDEX, {self.keys.index_name: now + RUN_LEASE_MS})
        except redis.exceptions.ResponseError as e:
            fault = server_fault(e)
            if fault is None:
                raise
            then = "no run can start" if force else "a run cannot go on truthfully past it; the run is aborted"
            raise ServerFault(f"registering the run in {RUN_INDEX} got a server error ({fault}): {then}",
                              detail=fault) from None

    def protect(self, keys: Iterable[bytes]) -> int:
        """Give each of ``keys`` that has no TTL the safety TTL (:data:`SAFETY_TTL_MS`; ``PEXPIRE … NX``, one
        round trip), except keys outside the namespace and :data:`TTL_OBSERVED`; returns how many were sent.
        Nothing on fakeredis (a process's own server dies with it).

        Why it changes no reply and no compared state: ``NX`` never touches a TTL the protocol set; no shipped
        script reads the TTL of a key it applies to (only the limiter's, which is left out) or sets an expiry
        conditionally; it is far longer than any run, so no key expires because of it; and the state readers
        read a TTL above :data:`SAFETY_TTL_FLOOR_MS` as none (:func:`has_expiry`)."""
        if is_fake(self.conn):
            return 0
        base = self.keys.base.encode()
        exempt = {base + k.encode() for k in TTL_OBSERVED}
        chosen = [k for k in dict.fromkeys(keys) if k.startswith(base) and k not in exempt]
        if not chosen:
            return 0
        pipe = pipeline(self.conn, transaction=False)
        for k in chosen:
            pipe.execute_command("PEXPIRE", k, SAFETY_TTL_MS, "NX")
        try:
            pipe.execute(raise_on_error=False)
        except redis.exceptions.ResponseError:  # pragma: no cover - a server before 7.0 (no NX): leave it
            pass
        return len(chosen)

    @property
    def sole_owner(self) -> bool:
        """True on a fakeredis server this process created where no other namespace is claimed: the whole
        server may then be flushed instead of deleting the namespace key by key."""
        return getattr(self.conn, "_emqlab_owned", False) and getattr(self.conn, "_emqlab_claimed", set()) <= {
            self.keys.base}

    def reset(self) -> int:
        """Delete every key of the namespace; returns how many were deleted."""
        if self.sole_owner:
            n = int(self.conn.dbsize())
            self.conn.flushdb()
            return n
        if is_fake(self.conn):
            n = int(self.conn.dbsize())
            if n:
                # A fakeredis server belongs to this process; still, only flush when every key is ours.
                ours = sum(1 for _ in scan_keys(self.conn, self.keys.pattern))
                if ours == n:
                    self.conn.flushdb()
                    return n
        deleted = 0
        batch: list[bytes] = []
        for k in scan_keys(self.conn, self.keys.pattern):
            if not k.startswith(self.keys.base.encode()):  # belt and braces: SCAN glob vs our base
                continue
            batch.append(k)
            if len(batch) >= 500:
                deleted += int(self.conn.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(self.conn.delete(*batch))
        return deleted

    def release(self) -> int:
        """Delete the namespace's keys and give up the claim."""
        n = self.reset()
        claimed = getattr(self.conn, "_emqlab_claimed", None)
        if claimed is not None:
            claimed.discard(self.keys.base)
        if not is_fake(self.conn):
            self.conn.zrem(RUN_INDEX, self.keys.index_name)
        return n


@dataclass(frozen=True)
class AbandonedRun:
    """A run in :data:`RUN_INDEX`: its queue, when its lease ran (or runs) out, and its keys' count."""

    queue: str
    expires_ms: float
    keys: int
    alive: bool


def abandoned_runs(conn: redis.Redis) -> list[AbandonedRun]:
    """Every run the index lists, with whether its owner's lease still holds (:data:`RUN_LEASE_MS`)."""
    import time

    now = time.time() * 1000
    out = []
    entries: list[tuple[Any, float]] = conn.zrange(RUN_INDEX, 0, -1, withscores=True)  # type: ignore[assignment]
    for member, score in entries:
        queue = member.decode() if isinstance(member, bytes) else str(member)
        n = sum(1 for _ in scan_keys(conn, QueueKeys.from_index_name(queue).pattern))
        out.append(AbandonedRun(queue, float(score), n, float(score) > now))
    return out


def clean(conn: redis.Redis, *, dry_run: bool = False) -> list[AbandonedRun]:
    """Delete the keys of every run in the index whose lease has run out (its owner is gone), and its
    index entry; runs still alive are left alone. Only ``emq:{<queue>}:*`` keys of indexed queues are
    touched. Returns the runs cleaned (or that would be, with ``dry_run``)."""
    gone = [r for r in abandoned_runs(conn) if not r.alive]
    if not dry_run:
        for r in gone:
            Namespace(conn, QueueKeys.from_index_name(r.queue)).reset()
            conn.zrem(RUN_INDEX, r.queue)
    return gone


def unique_queue(base: str = "q") -> str:
    """A queue name for one run on a live server: ``<base>-<8 hex>``."""
    return f"{base}-{secrets.token_hex(4)}"


# -- command executors for the Lua host ---------------------------------------------------------------------


class Executor(Protocol):
    """What :func:`command_executor` returns: ``execute(*command) -> reply`` sends one command (arguments
    str, bytes, int or float, encoded as redis-py encodes them) and returns its raw reply; ``close()``
    gives back what the executor holds (idempotent; the executor refuses commands afterwards)."""

    def __call__(self, *command: Any) -> Any: ...

    def close(self) -> None: ...


def command_executor(conn: redis.Redis) -> Executor:
    """A function ``execute(*command) -> reply`` that sends one command and returns its raw reply: bytes,
    int, None, lists, :class:`emqlab.luahost.Status` for a status reply (when the backend can tell), or
    raises ``redis.ResponseError``. Arguments may be bytes, str (UTF-8, or the client's encoding), int or
    float (their decimal text): what redis-py's ``execute_command`` accepts, so the executor can be the
    ``send`` of :meth:`emqlab.registry.ScriptSet.call`.

    On fakeredis the command goes straight to the in-process server's command table (no RESP encoding):
    the same entry point fakeredis's own ``redis.call`` uses, under the server lock, so each command is
    still one atomic server step. It relies on fakeredis internals (checked at 2.41); if they are not
    there, the executor falls back to a redis-py client with no response callbacks.

    The fakeredis executor holds one connection of ``conn``'s pool: ``close()`` it when done (both kinds
    are context managers too; for the :class:`Executor` type, ``with contextlib.closing(…) as execute:``).
    An executor garbage-collected unclosed gives its connection back when the next fakeredis executor is
    created. On a live server the executor borrows a pooled connection per command; its ``close()`` only
    makes it refuse further commands.

    On a cluster (:class:`emqlab.cluster.ClusterExecutor`): each command goes to the primary owning the slot of
    its first key — ``EVALSHA`` by its KEYS — on that node's pool; ``SCRIPT LOAD``/``EXISTS``/``KILL`` go to
    every primary, any other keyless command is refused (:class:`emqlab.cluster.ClusterError`). Cluster
    errors keep their code (``CROSSSLOT Keys in request don't hash to the same slot``).
    """
    if is_cluster(conn):
        return _cluster.ClusterExecutor(conn)  # type: ignore[arg-type]
    if is_fake(conn):
        try:
            return _FakeDirect(conn)
        except (ImportError, AttributeError, TypeError):  # pragma: no cover - another fakeredis or redis-py layout
            pass
        except redis.exceptions.ConnectionError as e:  # the pool is exhausted: executors left unclosed
            warnings.warn(f"command_executor: no pooled connection for the direct fakeredis path ({e}); "
                          "falling back to a redis-py client. Close executors when done (ex.close()).",
                          ResourceWarning, stacklevel=2)
        return _ClientExecutor(raw_client(conn), owns_pool=True)
    return _ClientExecutor(raw_client(conn), owns_pool=False)


def _encoder(conn: redis.Redis) -> Callable[[Any], bytes]:
    """The argument encoding of redis-py for ``conn``'s client (its ``Encoder``): bytes as they are; str
    in the client's encoding (UTF-8 by default); int and float as ``repr`` text; bool and anything else
    refused with ``redis.DataError``."""
    encode = conn.connection_pool.get_encoder().encode

    def to_bytes(value: Any) -> bytes:
        out = encode(value)
        return out if type(out) is bytes else bytes(out)  # memoryview

    return to_bytes


class _ClientExecutor:
    """The redis-py path: ``execute_command`` on a client without response callbacks (redis-py encodes
    the arguments). ``owns_pool``: the client has a pool of its own, disconnected by ``close()``; else it
    shares the caller's pool, which ``close()`` leaves alone."""

    def __init__(self, client: redis.Redis, *, owns_pool: bool) -> None:
        self._client: redis.Redis | None = client
        self._owns_pool = owns_pool

    def __call__(self, *command: Any) -> Any:
        client = self._client
        if client is None:
            raise RuntimeError("this command executor is closed")
        return client.execute_command(*command)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owns_pool:
            client.connection_pool.disconnect()

    def __enter__(self) -> _ClientExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# Connections of fakeredis executors collected unclosed: (pool, connection), queued by a finalizer (which
# may run at any point, so it only appends) and given back to their pool by the next executor.
_ORPHANED: list[tuple[weakref.ReferenceType[Any], Any]] = []


def _release_orphans() -> None:
    while _ORPHANED:
        pool_ref, connection = _ORPHANED.pop()
        pool = pool_ref()
        if pool is not None:
            _give_back(pool, connection)


def _give_back(pool: Any, connection: Any) -> None:
    # Disconnected first: the fake socket carries per-client state (SELECTed db, MULTI, WATCH) that the
    # pool's next user must not inherit; the pool reconnects it on its next get_connection().
    try:
        connection.disconnect()
    finally:
        pool.release(connection)


class _FakeDirect:
    """The direct fakeredis executor: one pooled connection's fake socket, driven without RESP."""

    def __init__(self, conn: redis.Redis) -> None:
        import time

        from fakeredis._helpers import SimpleError, SimpleString
        from fakeredis._socket._resp import extract_command

        from emqlab.scripting.host import Status

        _release_orphans()
        pool = conn.connection_pool
        connection = pool.get_connection()
        try:
            connection.connect()
            sock = cast("FakeSocket", connection._sock)
            self._sock = sock
            self._server: FakeServer = sock._server
            self._lookup = sock._name_to_func
            self._run = sock._run_command
        except BaseException:
            pool.release(connection)
            raise
        self._pool = pool
        self._connection: Any = connection
        self._finalizer = weakref.finalize(self, _ORPHANED.append, (weakref.ref(pool), connection))
        self._finalizer.atexit = False
        self._extract = extract_command
        self._encode = _encoder(conn)
        self._simple_error = SimpleError
        self._simple_string = SimpleString
        self._status = Status
        self._time = time.time
        self._parse_error = redis.connection.DefaultParser(socket_read_size=65536).parse_error

    def __call__(self, *fields: Any) -> object:
        if self._connection is None:
            raise RuntimeError("this command executor is closed")
        encode = self._encode
        cmd, args = self._extract([f if type(f) is bytes else encode(f) for f in fields])
        try:
            func, sig = self._lookup(cmd)
        except self._simple_error as e:
            raise self._parse_error(e.value) from None
        server = self._server
        with server.lock:
            now = frozen_now()
            if now is None:
                now = self._time()
            for db in server.dbs.values():
                db.time = now
            try:
                sig.check_arity(args, self._sock.version)
            except self._simple_error as e:
                raise self._parse_error(e.value) from None
            result = self._run(func, sig, args, False)
        return self._convert(result)

    def close(self) -> None:
        """Give the connection back to the pool (idempotent); the executor refuses commands afterwards."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        self._finalizer.detach()
        _give_back(self._pool, connection)
        _release_orphans()

    def __enter__(self) -> _FakeDirect:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _convert(self, r: object, nested: bool = False) -> object:
        """fakeredis's reply objects → raw RESP2-like values; an error at the top is raised, an error inside
        an array stays an element (as redis-py parses it)."""
        if isinstance(r, list):
            return [self._convert(x, True) for x in r]
        if isinstance(r, self._simple_error):
            if nested:
                return self._parse_error(r.value)
            raise self._parse_error(r.value)
        if isinstance(r, self._simple_string):
            return self._status(r.value)
        return r
