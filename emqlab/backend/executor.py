"""Command executors for the Lua host: :func:`command_executor` sends one command of a split script to a
backend and returns its raw reply (on fakeredis straight into the server, with no socket)."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import redis

from emqlab.backend import cluster as _cluster
from emqlab.backend.cluster import is_cluster
from emqlab.scripting.clock import frozen_now, virtual_time_reply

if TYPE_CHECKING:
    from fakeredis import FakeServer
    from fakeredis._socket import FakeSocket

from emqlab.backend.clients import is_fake, raw_client
from emqlab.backend.fakereplies import fake_reply


class Executor(Protocol):
    """What :func:`command_executor` returns: ``execute(*command) -> reply`` sends one command (arguments
    str, bytes, int or float, encoded as redis-py encodes them) and returns its raw reply; ``close()``
    gives back what the executor holds (idempotent; the executor refuses commands afterwards)."""

    def __call__(self, *command: Any) -> Any: ...

    def close(self) -> None: ...


def command_executor(conn: redis.Redis) -> Executor:
    """A function ``execute(*command) -> reply`` that sends one command and returns its raw reply: bytes,
    int, None, lists, :class:`emqlab.scripting.replies.Status` for a status reply (when the backend can tell), or
    raises ``redis.ResponseError``. Arguments may be bytes, str (UTF-8, or the client's encoding), int or
    float (their decimal text): what redis-py's ``execute_command`` accepts, so the executor can be the
    ``send`` of :meth:`emqlab.scripting.registry.ScriptSet.call`.

    On fakeredis the command goes straight to the in-process server's command table (no RESP encoding):
    the same entry point fakeredis's own ``redis.call`` uses, under the server lock, so each command is
    still one atomic server step. It relies on fakeredis internals (checked at 2.41); if they are not
    there, the executor falls back to a redis-py client with no response callbacks.

    The fakeredis executor holds one connection of ``conn``'s pool: ``close()`` it when done (both kinds
    are context managers too; for the :class:`Executor` type, ``with contextlib.closing(…) as execute:``).
    An executor garbage-collected unclosed gives its connection back when the next fakeredis executor is
    created. On a live server the executor borrows a pooled connection per command; its ``close()`` only
    makes it refuse further commands.

    On a cluster (:class:`emqlab.backend.cluster.ClusterExecutor`): each command goes to the primary owning the slot of
    its first key — ``EVALSHA`` by its KEYS — on that node's pool; ``SCRIPT LOAD``/``EXISTS``/``KILL`` go to
    every primary, any other keyless command is refused (:class:`emqlab.backend.cluster.ClusterError`). Cluster
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
        self._pipe: Any = None

    def __call__(self, *command: Any) -> Any:
        client = self._client
        if client is None:
            raise RuntimeError("this command executor is closed")
        return client.execute_command(*command)

    def transaction(self, command: tuple[Any, ...], after: list[tuple[Any, ...]]) -> Any:
        """``command`` and then the ``after`` commands in one MULTI … EXEC, one round trip: the reply of
        ``command`` (raised when an error), the others' replies dropped. (A live run gives a key its safety
        TTL in the same transaction that creates it: :class:`emqlab.engine.live.Safety`.)"""
        client = self._client
        if client is None:
            raise RuntimeError("this command executor is closed")
        # (one pipeline for the executor's life, reset after each use: a pipeline per call would leave it to
        # Pipeline.__del__, where a Ctrl-C that lands prints "Exception ignored in" with a traceback)
        pipe = self._pipe
        if pipe is None:
            pipe = self._pipe = client.pipeline(transaction=True)
        try:
            pipe.execute_command(*command)
            for c in after:
                pipe.execute_command(*c)
            first = pipe.execute(raise_on_error=False)[0]
        except redis.exceptions.ResponseError as e:  # refused while queued (OOM, BUSY, …): as sent alone
            raise _unannotated(e) from None
        finally:
            pipe.reset()
        if isinstance(first, Exception):
            raise _unannotated(first)
        return first

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owns_pool:
            client.connection_pool.disconnect()

    def __enter__(self) -> _ClientExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _unannotated(error: BaseException) -> BaseException:
    """``error`` as the command alone would have raised it: without the ``Command # 1 (…) of pipeline caused
    error:`` that redis-py's pipeline writes into its text (the code, if any, stays in front)."""
    head, sep, tail = str(error).partition(" of pipeline caused error: ")
    if not sep:
        return error
    code = head.split(" ", 1)[0]
    # (the same exception, its text put back: its class and redis-py's status_code name the server's code)
    error.args = (tail if code == "Command" else f"{code} {tail}", *error.args[1:])
    return error


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

        from fakeredis._helpers import SimpleError
        from fakeredis._socket._resp import extract_command

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
            #: command name -> (method, signature): what the socket's lookup answers for a name never changes
            #: (the command table, the server's kind and the socket's methods are fixed); an unknown name is
            #: asked again (it raises)
            self._found: dict[str, Any] = {}
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
        self._time = time.time
        self._parse_error = redis.connection.DefaultParser(socket_read_size=65536).parse_error

    def __call__(self, *fields: Any) -> object:
        if self._connection is None:
            raise RuntimeError("this command executor is closed")
        encode = self._encode
        cmd, args = self._extract([f if type(f) is bytes else encode(f) for f in fields])
        if cmd == "time" and not args:
            virtual = virtual_time_reply()  # (an exploration's step: its virtual instant, emqlab.scripting.clock)
            if virtual is not None:
                return virtual
        found = self._found.get(cmd)
        if found is None:
            try:
                found = self._found[cmd] = self._lookup(cmd)
            except self._simple_error as e:
                raise self._parse_error(e.value) from None
        func, sig = found
        server = self._server
        lock = server.lock
        lock.acquire()
        try:
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
        finally:
            lock.release()
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

    def _convert(self, r: object) -> object:
        """fakeredis's reply objects → raw RESP2-like values (:func:`fake_reply`); an error at the top is raised."""
        out = fake_reply(r)
        if isinstance(out, BaseException):
            raise out
        return out
