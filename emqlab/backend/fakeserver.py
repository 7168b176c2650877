"""An embedded Redis for other people's tests: emqlab's fakeredis server, able to run BullMQ.

Plain fakeredis cannot run BullMQ: its Lua runtime has no ``cmsgpack`` (every BullMQ script that adds a job
uses it) and it has no ``INFO`` command (BullMQ reads ``redis_version`` and ``maxmemory_policy`` from it:
``QueueEvents`` before it listens, ``Queue.getJobState`` before it picks a script). The server made here has
both:

* Redis 7's scripting: ``EVAL``, ``EVALSHA``, ``EVAL_RO`` and ``EVALSHA_RO`` run on the client-side host
  (:mod:`emqlab.scripting.host`, by :mod:`emqlab.backend.scripts`), in its sandbox ``lua/lib/sandbox.lua``
  with its shebang flags, refusals, error texts and replies: read-only globals and library tables, an error
  for reading an undefined global, no ``python``, ``debug``, ``os``, ``io``, ``require``, ``loadfile``,
  ``dofile`` or bytecode, Lua code that cannot reach into a Python object, emqlab's pure-Lua ``cjson``,
  ``cmsgpack`` and ``bit``, and a budget of Lua instructions and CPU seconds per script (:func:`new_server`'s
  ``max_instructions``, ``max_seconds``) and of Lua heap (:data:`LUA_MAX_MEMORY`); past Redis's busy-reply
  threshold other clients get ``BUSY`` and ``SCRIPT KILL``/``FUNCTION KILL`` work
  (:mod:`emqlab.backend.busy`);
* ``INFO`` with the ``server``, ``clients``, ``memory``, ``persistence``, ``replication``, ``cluster`` and
  ``keyspace`` sections (:func:`info_text`), from clients and from ``redis.call`` inside scripts.

Use it through :func:`fake_server`::

    with fake_server() as fake:               # every redis:// pool made inside goes to `fake`
        r = fake.client()                      # a redis.Redis on it
        queue = bullmq.Queue("q", {"connection": "redis://localhost:6379"})   # lands on `fake` too

or, in pytest, through the ``emqlab_redis`` fixture of :mod:`emqlab.check.pytest_plugin`.

Routing works by wrapping ``redis.ConnectionPool.__init__`` and ``redis.asyncio.ConnectionPool.__init__``
while the context is active: a pool asked for a TCP, TLS or Unix-socket connection gets a connection to the
embedded server instead (whatever the host, port or password; the database number is kept). Pools made
before the context was entered, fakeredis's own pools and cluster clients (``RedisCluster``) are not routed.

This relies on fakeredis internals (checked with fakeredis 2.41): the ``@command`` registry, the socket
classes and the connections' ``_connect``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

# isort: off
from emqlab.backend._fakeredis import fakeredis  # (first: fakeredis without NumPy)
# isort: on
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection
from fakeredis import _msgs as fake_msgs
from fakeredis._clients._async import FakeAsyncRedisConnection, FakeReader, FakeWriter
from fakeredis._clients._base import FakeBaseConnectionMixin
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._command_args_parsing import Int
from fakeredis._commands import SUPPORTED_COMMANDS, Signature, command
from fakeredis._helpers import SimpleError
from fakeredis._socket import AsyncFakeSocket, FakeSocket
from fakeredis._socket._base import BaseFakeSocket as _BaseFakeSocket

from emqlab.backend.busy import DEFAULT_BUSY_REPLY_THRESHOLD_MS, BusyMixin, install
from emqlab.backend.fidelity import RedisRepliesMixin
from emqlab.backend.scripts import LUA_MAX_MEMORY, HostFunctionsEngine, HostScriptsMixin, call_function
from emqlab.protocol import messages
from emqlab.scripting import sandbox as _sandbox
from emqlab.scripting.dialect import REDIS7
from emqlab.scripting.registry import lua_dir

__all__ = [
    "DEFAULT_SECTIONS",
    "DEFAULT_VERSION",
    "LUA_MAX_MEMORY",
    "LUA_MODULES",
    "EmbeddedAsyncConnection",
    "EmbeddedConnection",
    "EmbeddedRedis",
    "InfoCommandMixin",
    "async_client",
    "fake_server",
    "info_text",
    "new_server",
    "sync_client",
]

LUA_MODULES = frozenset({"cmsgpack", "bit"})
"""The Lua modules every embedded server loads besides ``cjson`` (emqlab's ``lua/lib/*.lua``; the sandbox
loads them, fakeredis's own ``require`` is not used)."""

DEFAULT_VERSION = tuple(int(p) for p in REDIS7.version.split("."))
"""The Redis version :func:`new_server` emulates by default: the one its scripting follows (Redis 7.0, the
host's :data:`emqlab.scripting.dialect.REDIS7`) and whose command table ``commands.json`` holds."""

DEFAULT_SECTIONS = ("server", "clients", "memory", "persistence", "replication", "cluster", "keyspace")
"""The sections ``INFO`` (no argument), ``INFO default``, ``INFO all`` and ``INFO everything`` return."""

# -- INFO ------------------------------------------------------------------------------------------------------

_started_lock = threading.Lock()


def _server_identity(server: fakeredis.FakeServer) -> tuple[float, str]:
    with _started_lock:
        found = getattr(server, "_emqlab_started", None)
        if found is None:
            found = (time.time(), secrets.token_hex(20))
            server._emqlab_started = found  # type: ignore[attr-defined]
        return found


def _human(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def _approx_size(value: Any) -> int:
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, dict):
        return sum(_approx_size(k) + _approx_size(v) for k, v in value.items())
    if isinstance(value, list | set | frozenset | tuple):
        return sum(_approx_size(v) for v in value)
    try:
        return 16 * len(value)
    except TypeError:
        return 16


def _version_text(version: tuple[int, ...]) -> str:
    parts = [*version, 0, 0, 0][:3]
    return ".".join(str(p) for p in parts)


def info_text(server: fakeredis.FakeServer, sections: tuple[str, ...] = ()) -> str:
    """The text of ``INFO <sections…>`` on ``server``: ``# Section`` headers and ``field:value`` lines joined
    with CRLF, sections separated by an empty line, as Redis formats it.

    ``sections`` are names, case-insensitive; empty, ``default``, ``all`` and ``everything`` mean
    :data:`DEFAULT_SECTIONS`. Unknown names contribute nothing (as on Redis). Values: ``redis_version`` is
    the server's emulated version (``(7, 4)`` → ``7.4.0``); ``maxmemory`` / ``maxmemory_policy`` come from
    the server's config (``CONFIG SET``), default ``0`` / ``noeviction``; ``used_memory`` is an estimate in
    bytes of the stored keys and values; ``keyspace`` counts live keys per database.
    """
    wanted: list[str] = []
    for name in sections or ("default",):
        low = name.lower()
        names = DEFAULT_SECTIONS if low in ("default", "all", "everything") else (low,)
        wanted.extend(n for n in names if n not in wanted)
    started, run_id = _server_identity(server)
    now = time.time()
    config = server.config
    blocks: list[str] = []
    for name in wanted:
        fields: list[tuple[str, object]]
        if name == "server":
            uptime = int(now - started)
            fields = [
                ("redis_version", _version_text(tuple(server.version))),
                ("redis_git_sha1", "00000000"),
                ("redis_git_dirty", 0),
                ("redis_mode", "standalone"),
                ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
                ("arch_bits", 64),
                ("process_id", os.getpid()),
                ("run_id", run_id),
                ("tcp_port", getattr(server, "_emqlab_tcp_port", 0)),  # (emqlab.backend.tcp: the port it serves)
                ("server_time_usec", int(now * 1_000_000)),
                ("uptime_in_seconds", uptime),
                ("uptime_in_days", uptime // 86400),
                ("hz", 10),
                ("executable", ""),
                ("config_file", ""),
            ]
        elif name == "clients":
            sockets = list(server.sockets)
            fields = [
                ("connected_clients", len(sockets)),
                ("maxclients", 10000),
                ("blocked_clients", sum(1 for s in sockets if getattr(s, "_blocked", False))),
            ]
        elif name == "memory":
            used = sum(_approx_size(k) + _approx_size(getattr(item, "value", None))
                       for db in list(server.dbs.values()) for k, item in list(db.items()))
            maxmemory = int(config.get(b"maxmemory", b"0"))
            fields = [
                ("used_memory", used),
                ("used_memory_human", _human(used)),
                ("maxmemory", maxmemory),
                ("maxmemory_human", _human(maxmemory)),
                ("maxmemory_policy", config.get(b"maxmemory-policy", b"noeviction").decode()),
            ]
        elif name == "persistence":
            fields = [("loading", 0), ("rdb_last_save_time", server.lastsave), ("aof_enabled", 0)]
        elif name == "replication":
            fields = [("role", "master"), ("connected_slaves", 0)]
        elif name == "cluster":
            fields = [("cluster_enabled", 0)]
        elif name == "keyspace":
            fields = []
            for index in sorted(server.dbs):
                items = list(server.dbs[index].items())
                if items:
                    expires = sum(1 for _, item in items if getattr(item, "expireat", None) is not None)
                    fields.append((f"db{index}", f"keys={len(items)},expires={expires},avg_ttl=0"))
        else:
            continue
        lines = [f"# {name.capitalize()}", *(f"{k}:{v}" for k, v in fields)]
        blocks.append("\r\n".join(lines) + "\r\n")
    return "\r\n".join(blocks)


_UPSTREAM_INFO = SUPPORTED_COMMANDS.get("info")  # None with fakeredis 2.41; kept should a later one add INFO


class InfoCommandMixin:
    """The ``INFO [section …]`` command as a fakeredis command mixin (a bulk string reply, see :func:`info_text`)."""

    _server: fakeredis.FakeServer

    @command(name="INFO", fixed=(), repeat=(bytes,))
    def info(self, *sections: bytes) -> bytes:
        try:
            names = tuple(s.decode("ascii") for s in sections)
        except UnicodeDecodeError:
            raise SimpleError(messages.SYNTAX_ERROR) from None
        return info_text(self._server, names).encode()

    def hello(self, *args: bytes) -> dict[str, Any]:
        # the server's name and version as INFO gives them (fakeredis answers with its own)
        data: dict[str, Any] = super().hello(*args)  # type: ignore[misc]
        data.update(server="redis", version=_version_text(self._server.version))
        return data


# The decorator registered INFO in fakeredis's global table, which every fakeredis socket consults: a plain
# socket (without the method) would then crash on INFO instead of answering "unknown command". Keep the
# signature in a table of our own, consulted only by the sockets below, and put the table back as it was.
_EXTRA_COMMANDS: dict[str, Signature] = {name: SUPPORTED_COMMANDS.pop(name)
                                         for name in ("info", "eval_ro", "evalsha_ro")}
if _UPSTREAM_INFO is not None:
    SUPPORTED_COMMANDS["info"] = _UPSTREAM_INFO


def _server_lookup(self: Any, cmd_name: str) -> Any:
    """fakeredis's command lookup, first asking the server for commands of its own (an emqlab server's INFO):
    a connection of fakeredis's own classes on :func:`new_server` answers INFO too. Other servers are
    looked up as before."""
    own = getattr(self._server, "_emqlab_server_commands", None)
    if own is not None and cmd_name in own and not isinstance(self, HostScriptsMixin):
        impl, sig = own[cmd_name]
        return functools.partial(impl, self), sig
    return _plain_lookup(self, cmd_name)


_plain_lookup = _BaseFakeSocket._name_to_func
_BaseFakeSocket._name_to_func = _server_lookup  # type: ignore[method-assign]


def _lookup(sock: Any, name: str, fallback: Callable[[str], Any]) -> Any:
    sig = _EXTRA_COMMANDS.get(name)
    if sig is None or not hasattr(sock, sig.func_name):  # (QUIT, MONITOR: only the TCP front end's sockets)
        return fallback(name)
    return getattr(sock, sig.func_name), sig


# -- the Lua sandbox ----------------------------------------------------------------------------------------------


class _SandboxMixin:
    """The server's ``FUNCTION``/``FCALL`` and its scripts (``EVAL`` …) run on the server's host
    (:mod:`emqlab.backend.scripts`): one sandbox (``lua/lib/sandbox.lua``), never fakeredis's own runtime."""

    load_lua_modules: set[str]
    _server: fakeredis.FakeServer

    def _get_server_runtime(self, server: fakeredis.FakeServer) -> Any:
        # (fakeredis's own EVAL path, never taken: the server's scripts run on its host, emqlab.backend.scripts)
        raise SimpleError(messages.SERVER_ERROR + "scripts run on the server's host")

    def _convert_lua_result(self, result: Any, nested: bool = True) -> Any:
        # The RESP3-shaped tables as Redis 7 writes them (checked in its order: err, ok, double, big_number,
        # map, set, verbatim_string); fakeredis knows err, ok, and double and map for RESP3 clients only
        lua_type = _sandbox.lua51.lua_type
        if lua_type(result) != "table" or result[b"err"] is not None or result[b"ok"] is not None:
            return super()._convert_lua_result(result, nested)  # type: ignore[misc]
        resp2 = int(getattr(self, "_client_info", {}).get("resp", 2) or 2) == 2  # (after HELLO 3: RESP3)
        double = result[b"double"]
        if double is not None:
            if resp2 and isinstance(double, (int, float)) and not isinstance(double, bool):
                return b"%.17g" % double  # (a bulk string, as Redis 7 writes a double for RESP2)
            return super()._convert_lua_result(result, nested)  # type: ignore[misc]
        big = result[b"big_number"]
        if isinstance(big, bytes):
            return big.replace(b"\r", b" ").replace(b"\n", b" ")
        members = result[b"map"]
        if members is not None:
            if resp2 and lua_type(members) == "table":
                return [x for k, v in members.items()
                        for x in (self._convert_lua_result(k), self._convert_lua_result(v))]
            return super()._convert_lua_result(result, nested)  # type: ignore[misc]
        members = result[b"set"]
        if lua_type(members) == "table":
            return [self._convert_lua_result(k) for k in members.keys()]
        verbatim = result[b"verbatim_string"]
        if lua_type(verbatim) == "table" and isinstance(verbatim[b"string"], bytes):
            return verbatim[b"string"]
        return super()._convert_lua_result(result, nested)  # type: ignore[misc]

    def _functions(self) -> Any:
        # the server's libraries, loaded and called on its host: one Lua environment with EVAL's
        found = getattr(self._server, "_lua_functions", None)
        if found is None:
            with _functions_lock:
                found = getattr(self._server, "_lua_functions", None)
                if found is None:
                    found = self._server._lua_functions = HostFunctionsEngine(self._server)  # type: ignore[attr-defined]
        return found

    def _fcall(self, command_name: str, function_name: bytes, numkeys_arg: bytes, keys_and_args: tuple[bytes, ...],
               read_only_command: bool) -> Any:
        # fakeredis's checks, in its order, then the function run on the host (emqlab.backend.scripts)
        self._require_functions(command_name)  # type: ignore[attr-defined]
        function = self._functions().find(function_name)
        if function is None:
            raise SimpleError(fake_msgs.FUNCTION_NOT_FOUND_MSG)
        numkeys = Int.decode(numkeys_arg, decode_error=fake_msgs.FUNCTION_BAD_NUMKEYS_MSG)
        if numkeys > len(keys_and_args):
            raise SimpleError(fake_msgs.TOO_MANY_KEYS_MSG)
        if numkeys < 0:
            raise SimpleError(fake_msgs.NEGATIVE_KEYS_MSG)
        if read_only_command and b"no-writes" not in function.flags:
            raise SimpleError(fake_msgs.FUNCTION_WRITE_FLAG_RO_MSG)
        return call_function(self, function, numkeys, keys_and_args, read_only_command)


_functions_lock = threading.Lock()


class _EmbeddedSocket(HostScriptsMixin, RedisRepliesMixin, BusyMixin, _SandboxMixin, InfoCommandMixin, FakeSocket):
    def _name_to_func(self, cmd_name: str) -> Any:
        return _lookup(self, cmd_name, super()._name_to_func)


class _EmbeddedAsyncSocket(HostScriptsMixin, RedisRepliesMixin, BusyMixin, _SandboxMixin, InfoCommandMixin,
                           AsyncFakeSocket):
    def _name_to_func(self, cmd_name: str) -> Any:
        return _lookup(self, cmd_name, super()._name_to_func)


class EmbeddedConnection(FakeRedisConnection):
    """A redis-py connection to an embedded server (pass ``server=``): fakeredis's, with ``INFO``."""

    def _connect(self) -> FakeSocket:
        server = self._server
        if server is None or not server.connected:
            raise self._connection_error_class("embedded Redis server is disconnected")
        return _EmbeddedSocket(server, client_class=self._client_class, db=self.db,
                               lua_modules=self._lua_modules, client_info=self._client_info)


class EmbeddedAsyncConnection(FakeAsyncRedisConnection):
    """A ``redis.asyncio`` connection to an embedded server (pass ``server=``): fakeredis's, with ``INFO``."""

    async def _connect(self) -> None:
        server = self._server
        if server is None or not server.connected:
            raise self._connection_error_class("embedded Redis server is disconnected")
        sock = _EmbeddedAsyncSocket(server, self.db, client_class=self._client_class,
                                    lua_modules=self._lua_modules, client_info=self._client_info)
        self._sock = sock
        self._reader = FakeReader(sock)
        self._writer = FakeWriter(sock)


# -- the server ------------------------------------------------------------------------------------------------

#: the commands an embedded server answers to a connection of fakeredis's own classes too: name -> (the
#: function taking the socket, its signature)
_SERVER_COMMANDS = {"info": (InfoCommandMixin.info, _EXTRA_COMMANDS["info"]),
                    **{name: (getattr(HostScriptsMixin, name), SUPPORTED_COMMANDS[name])
                       for name in ("eval", "evalsha")},
                    **{name: (getattr(HostScriptsMixin, name), _EXTRA_COMMANDS[name])
                       for name in ("eval_ro", "evalsha_ro")},
                    **{f"script {sub}": (getattr(HostScriptsMixin, f"script_{sub}"),
                                         SUPPORTED_COMMANDS[f"script {sub}"]) for sub in ("flush", "load", "exists")}}


def new_server(version: tuple[int, ...] | None = None, *,
               max_instructions: int = _sandbox.DEFAULT_MAX_INSTRUCTIONS,
               max_seconds: float = _sandbox.DEFAULT_MAX_SECONDS,
               busy_reply_threshold_ms: int = DEFAULT_BUSY_REPLY_THRESHOLD_MS) -> fakeredis.FakeServer:
    """A fresh fakeredis server ready for queue scripts: its Lua runtime created with Redis 7's sandbox
    (``lua/lib/sandbox.lua``) and :data:`LUA_MODULES` loaded, its script cache left empty (as on a new server).

    ``version`` is the Redis version fakeredis emulates, and ``INFO`` and ``HELLO`` report (default
    :data:`DEFAULT_VERSION`, the Redis whose scripting the server's ``EVAL`` follows). ``max_instructions``
    is the budget of Lua instructions of one script or function call (0: none), ``max_seconds`` its CPU
    seconds (0: none); past either the script fails with an ``emqlab server:`` error (an endless loop ends
    instead of hanging its caller; Redis has no such limit). ``busy_reply_threshold_ms`` is Redis's
    ``busy-reply-threshold``: once a script has run that long (wall clock), other clients get ``BUSY`` and
    ``SCRIPT KILL``/``FUNCTION KILL`` may end it (:mod:`emqlab.backend.busy`). Raises ``ValueError`` for a
    negative threshold, ``RuntimeError`` when the modules do not load (fakeredis without its ``lua`` extra,
    or ``lua/lib`` missing).
    """
    server = fakeredis.FakeServer(version=DEFAULT_VERSION if version is None else version)
    install(server, int(busy_reply_threshold_ms))
    server._emqlab_max_seconds = float(max_seconds)  # type: ignore[attr-defined]
    _server_identity(server)
    server._emqlab_max_instructions = int(max_instructions)  # type: ignore[attr-defined]
    # INFO and the scripts answered by the server, whatever the connection's class (fakeredis's own too)
    server._emqlab_server_commands = _SERVER_COMMANDS  # type: ignore[attr-defined]
    conn = fakeredis.FakeRedis(server=server, connection_class=EmbeddedConnection, lua_modules=set(), protocol=2)
    try:
        loaded = conn.eval("return {type(cjson), type(cmsgpack), type(bit)}", 0)
        if loaded != [b"table", b"table", b"table"]:
            raise RuntimeError(f"the Lua modules cjson, cmsgpack and bit did not load from {lua_dir() / 'lib'}")
        conn.script_flush()
    finally:
        conn.close()
        conn.connection_pool.disconnect()
    return server


def sync_client(server: fakeredis.FakeServer, **kwargs: Any) -> fakeredis.FakeRedis:
    """A ``redis.Redis`` (a ``fakeredis.FakeRedis``) on ``server``; ``kwargs`` go to ``redis.Redis``
    (``db``, ``decode_responses``, ``protocol``, …)."""
    return fakeredis.FakeRedis(server=server, connection_class=EmbeddedConnection,
                               lua_modules=set(LUA_MODULES), **kwargs)


def async_client(server: fakeredis.FakeServer, **kwargs: Any) -> fakeredis.FakeAsyncRedis:
    """A ``redis.asyncio.Redis`` (a ``fakeredis.FakeAsyncRedis``) on ``server``; ``kwargs`` as for
    :func:`sync_client`. Create it inside the event loop that uses it."""
    return fakeredis.FakeAsyncRedis(server=server, connection_class=EmbeddedAsyncConnection,
                                    lua_modules=set(LUA_MODULES), **kwargs)


# Connection keyword arguments a TCP connection does not take: those of Unix-socket and TLS connections.
def _tcp_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k != "path" and not k.startswith("ssl")}


class EmbeddedRedis:
    """One embedded server and the clients on it (what :func:`fake_server` yields).

    * ``server`` — the ``fakeredis.FakeServer``;
    * ``url`` — a ``redis://`` URL for code that wants one (any URL is routed while the context is active);
    * ``client(**kw)`` / ``async_client(**kw)`` — new ``redis.Redis`` / ``redis.asyncio.Redis`` clients;
    * ``connection_kwargs(asyncio=False)`` — ``connection_class`` and ``server`` for a pool of your own.

    ``routing`` tells whether new ``redis://`` pools currently go to this server.
    """

    url = "redis://localhost:6379/0"

    def __init__(self, server: fakeredis.FakeServer | None = None) -> None:
        self.server = server if server is not None else new_server()
        self.routing = False

    def client(self, **kwargs: Any) -> fakeredis.FakeRedis:
        """A new ``redis.Redis`` on the server (``kwargs``: ``db``, ``decode_responses``, ``protocol``, …)."""
        return sync_client(self.server, **kwargs)

    def async_client(self, **kwargs: Any) -> fakeredis.FakeAsyncRedis:
        """A new ``redis.asyncio.Redis`` on the server; create it inside the event loop that uses it."""
        return async_client(self.server, **kwargs)

    def connection_kwargs(self, asyncio: bool = False) -> dict[str, Any]:
        """Keyword arguments that make a redis-py ``ConnectionPool`` (``redis.asyncio``'s when ``asyncio``)
        connect to the server: ``connection_class``, ``server`` and ``lua_modules``."""
        cls = EmbeddedAsyncConnection if asyncio else EmbeddedConnection
        return {"connection_class": cls, "server": self.server, "lua_modules": set(LUA_MODULES)}

    def keys(self, pattern: str = "*", db: int = 0) -> list[bytes]:
        """The server's keys matching ``pattern`` in database ``db``, sorted."""
        conn = self.client(db=db)
        try:
            return sorted(conn.scan_iter(match=pattern, count=1000))
        finally:
            conn.close()

    def flushall(self) -> None:
        """Delete every key of every database of the embedded server (never of another server)."""
        with self.server.lock:
            for db in self.server.dbs.values():
                db.clear()

    def _route(self, kwargs: dict[str, Any], asyncio: bool) -> dict[str, Any]:
        cls = kwargs.get("connection_class")
        real: tuple[type, type] = ((redis.asyncio.connection.AbstractConnection, redis.asyncio.connection.Connection)
                                   if asyncio else (redis.connection.AbstractConnection, redis.connection.Connection))
        real_base = real[0]
        if cls is None:
            cls = real[1]
        if not isinstance(cls, type) or not issubclass(cls, real_base) or issubclass(cls, FakeBaseConnectionMixin):
            return kwargs
        routed = _tcp_kwargs(kwargs)
        routed.update(self.connection_kwargs(asyncio))
        return routed


@contextlib.contextmanager
def _routing(target: EmbeddedRedis) -> Iterator[None]:
    originals: list[tuple[type, Callable[..., None]]] = []

    def wrap(pool_cls: type, asyncio: bool) -> None:
        original = pool_cls.__dict__["__init__"]

        def __init__(pool: Any, *args: Any, **kwargs: Any) -> None:
            if args:  # connection_class given positionally
                kwargs["connection_class"], args = args[0], args[1:]
            original(pool, *args, **target._route(kwargs, asyncio))

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        originals.append((pool_cls, original))
        setattr(pool_cls, "__init__", __init__)  # noqa: B010

    wrap(redis.connection.ConnectionPool, False)
    wrap(redis.asyncio.connection.ConnectionPool, True)
    target.routing = True
    try:
        yield
    finally:
        target.routing = False
        for pool_cls, original in reversed(originals):
            setattr(pool_cls, "__init__", original)  # noqa: B010


@contextlib.contextmanager
def fake_server(*, route: bool = True, version: tuple[int, ...] | None = None) -> Iterator[EmbeddedRedis]:
    """A fresh embedded server (:func:`new_server`) for the duration of the ``with`` block.

    With ``route`` (the default), every redis-py connection pool created inside the block — sync or
    ``redis.asyncio``, from ``Redis(host=…)``, ``Redis.from_url("redis://…")``, ``rediss://`` or
    ``unix://`` — connects to this server instead of the network, so third-party code such as BullMQ's
    ``Queue("name", {"connection": "redis://…"})`` uses it unchanged. On exit the pool classes are restored
    (pools created inside keep pointing at the embedded server) and the server's keys are deleted. Contexts
    nest; exit them in reverse order.
    """
    fake = EmbeddedRedis(new_server(version))
    try:
        if route:
            with _routing(fake):
                yield fake
        else:
            yield fake
    finally:
        fake.flushall()
