"""Connections: fakeredis (the embedded default) or a live Redis server, and the rules that keep a live
server safe.

* ``connect()`` — a fresh in-process fakeredis server with Lua ready: fakeredis runs scripts in its own
  ``lupa`` Lua 5.1 runtime, which lacks Redis's ``cmsgpack`` and ``bit`` modules (``PROTOCOL.md`` §9.1);
  emqlab's pure-Lua ``lua/lib/cmsgpack.lua`` and ``lua/lib/bit.lua`` are put on ``LUA_PATH`` and loaded
  through fakeredis's ``lua_modules`` option, so ``EVALSHA`` runs the queue scripts unchanged.
* ``connect("redis://host:port/db")`` — a live server; ``connect("live")`` takes ``$EMQLAB_REDIS_URL`` or
  ``redis://127.0.0.1:6379/0``.

Live safety (:class:`Namespace`): a run writes and deletes only keys under its own queue's base
(``emq:{<queue>}:``), refuses to start where such keys already exist, and its clean-up deletes only those.
Nothing here ever sends FLUSHDB or FLUSHALL to a server emqlab did not start.
"""

from __future__ import annotations

import os
import secrets
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

import redis

from .keys import QueueKeys
from .registry import lua_dir

if TYPE_CHECKING:
    from fakeredis import FakeServer
    from fakeredis._socket import FakeSocket

DEFAULT_LIVE_URL = "redis://127.0.0.1:6379/0"
FAKE = "fakeredis"


class BackendError(Exception):
    """A backend could not be reached or used; the message is one line meant for a terminal."""


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
    """``fakeredis`` or the live server's ``redis://host:port/db`` (no password)."""
    if is_fake(conn):
        return FAKE
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def connect(url: str | None = None, *, ping: bool = True) -> redis.Redis:
    """A redis-py client: fakeredis when ``url`` is ``None``/``"fakeredis"``, else the live server at ``url``
    (``"live"`` = :func:`live_url`). Replies are bytes (no decoding).

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
                raise BackendError(f"{e} (from $EMQLAB_REDIS_URL)") from None
    return _connect_live(url, ping=ping)


# Run once per fakeredis server, as its first EVAL (which creates the server's Lua runtime and loads the
# modules): make its globals behave like Redis 7's sandbox — a read-only global table, an error for reading
# an undefined global, and no os/io/require/loadfile/dofile/package/debug (Redis docs, "Lua API",
# "Runtime globals"). Without it, a script's typo'd global reads as nil on fakeredis and errors on Redis.
_HARDEN_FAKE_LUA = """
for _, name in ipairs({'os', 'io', 'require', 'loadfile', 'dofile', 'package', 'module', 'newproxy'}) do
  rawset(_G, name, nil)
end
setmetatable(_G, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
  __newindex = function() error('Attempt to modify a readonly table', 2) end,
})
return 1
"""


def _connect_fake() -> redis.Redis:
    import fakeredis

    _ensure_lua_path()
    server = fakeredis.FakeServer()
    conn = fakeredis.FakeRedis(server=server, lua_modules={"cmsgpack", "bit"}, protocol=2)
    conn.eval(_HARDEN_FAKE_LUA, 0)
    conn.script_flush()  # leave the script cache empty, as on a new server
    conn._emqlab_owned = True  # type: ignore[attr-defined]  # this process made the server: it may flush it
    conn._emqlab_claimed = set()  # type: ignore[attr-defined]  # the namespaces runs have claimed on it
    return conn


def _connect_live(url: str, *, ping: bool) -> redis.Redis:
    parts = urlsplit(url)
    usage = "expected redis://[[user]:password@]host[:port][/db], rediss://… or unix:///path/to/socket"
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise BackendError(f"malformed Redis URL {url!r}: {usage}")
    if parts.scheme != "unix":
        if not parts.hostname:
            raise BackendError(f"malformed Redis URL {_redact(url)!r}: no host ({usage})")
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            raise BackendError(f"malformed Redis URL {_redact(url)!r}: the database {db!r} is not a number")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as e:
            raise BackendError(f"malformed Redis URL {_redact(url)!r}: {e}") from None
    try:
        conn = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=10, protocol=2)
    except ValueError as e:
        raise BackendError(f"malformed Redis URL {url!r}: {e}") from None
    if ping:
        safe = _redact(url)
        try:
            conn.ping()
        except redis.exceptions.AuthenticationError as e:
            raise BackendError(f"authentication failed at {safe}: {e}") from None
        except redis.exceptions.ResponseError as e:
            if "NOAUTH" in str(e) or "WRONGPASS" in str(e):
                raise BackendError(f"authentication failed at {safe}: {e}") from None
            raise BackendError(f"Redis at {safe} refused PING: {e}") from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
            raise BackendError(f"cannot reach Redis at {safe}: {e}") from None
    return conn


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


def raw_client(conn: redis.Redis) -> redis.Redis:
    """A client on ``conn``'s connection pool that returns replies exactly as parsed from RESP2 (no
    response callbacks: ``HGETALL`` stays a flat list, ``SET`` stays ``b"OK"``). The Lua host needs raw
    replies to apply Redis's reply → Lua conversion rules."""
    raw = type(conn)(connection_pool=conn.connection_pool) if not is_fake(conn) else _fake_raw(conn)
    raw.response_callbacks = {}  # type: ignore[assignment]
    return raw


def _fake_raw(conn: redis.Redis) -> redis.Redis:
    import fakeredis

    server = conn.connection_pool.connection_kwargs["server"]
    return fakeredis.FakeRedis(server=server, lua_modules={"cmsgpack", "bit"}, protocol=2)


# -- live safety ------------------------------------------------------------------------------------------


def scan_keys(conn: redis.Redis, pattern: str, count: int = 500) -> Iterator[bytes]:
    """Every key matching ``pattern`` (SCAN, never KEYS)."""
    yield from conn.scan_iter(match=pattern, count=count)


@dataclass
class Namespace:
    """The keys one run owns: every key of queue ``keys`` (``emq:{<queue>}:*``).

    ``claim()`` refuses (:class:`KeysExist`) when any such key exists already; ``reset()`` and ``release()``
    delete only such keys. On a fakeredis server that this process created, ``reset()`` may flush it.
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
                f"({shown}{', …' if len(found) > 3 else ''}); pick another queue name (--queue) or delete them"
            )
        claimed = getattr(self.conn, "_emqlab_claimed", None)
        if claimed is not None:
            claimed.add(self.keys.base)
        return self

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
        return n


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
    """
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

        from .luahost import Status

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
