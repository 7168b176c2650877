"""The embedded server on a TCP port, for any client in any language (``emqlab server``): fakeredis's TCP
front end (``fakeredis.TcpFakeServer``) over an emqlab embedded server (:func:`emqlab.backend.fakeserver.new_server`:
Redis 7's Lua sandbox, cjson / cmsgpack / bit, the busy-script rules), with what a client expects of a real
server that fakeredis's front end lacks:

* every connection is an emqlab one (``INFO`` answers, with the real ``tcp_port``);
* ``QUIT`` answers ``+OK`` and closes the connection (ioredis sends it on every ``quit()``);
* ``MONITOR`` streams every command any client runs, a script's own commands too (``redis-cli MONITOR``:
  watch an exploration run against the server, one round trip a line);
* a client that hangs up during a blocking command (``BLPOP``, ``XREAD BLOCK``) has its connection closed
  then, not at the block's timeout (ioredis's ``disconnect()`` waits for the server's close);
* replies go out at once (``TCP_NODELAY``, as Redis sets it): with Nagle's algorithm a reply waited for the
  client's ACK of the one before, up to the client's delayed-ACK time (~40 ms);
* ``CLIENT LIST`` gives each address as one word (``addr=127.0.0.1:50421``);
* an error reply is one line: a script error whose text holds a newline (the sandbox's errors do) is sent with
  its line breaks as spaces — a raw newline breaks the RESP stream (``redis-cli`` prints "Bad simple string
  value", redis-py waits for its timeout).

RESP2 and RESP3 (``HELLO 3``) as fakeredis's front end speaks them. Started from Python with
:func:`serve` (``with serve() as tcp: … tcp.url``), from the shell with ``emqlab server``.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import socketserver
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

# isort: off
from emqlab.backend._fakeredis import fakeredis  # (first: fakeredis without NumPy)
# isort: on
from fakeredis._clients._tcp_server import TCPFakeRequestHandler, TcpFakeServer, Writer, encode_reply
from fakeredis._commands import SUPPORTED_COMMANDS, command
from fakeredis._helpers import SimpleError, SimpleString
from fakeredis._typing import RaiseErrorTypes

from emqlab.backend import fakeserver as _fs
from emqlab.backend.respinput import ProtocolError, RequestReader
from emqlab.protocol.messages import SERVER_ERROR

__all__ = ["EmbeddedTcp", "serve"]

#: the most bytes taken from a client's socket at a time
_READ_SIZE = 64 * 1024


class QuitCommandMixin:
    """``QUIT``: ``+OK``, then the front end closes the connection (:class:`_Handler`)."""

    @command(name="QUIT", fixed=(), repeat=())
    def quit(self) -> SimpleString:
        self._emqlab_quit = True
        return SimpleString(b"OK")


#: serializes the lines written to the MONITOR connections (each handler thread writes its own commands)
_MONITOR_LOCK = threading.Lock()


class MonitorCommandMixin:
    """``MONITOR``: ``+OK``, then every command any client of the server runs, as a line of its own
    (``+1767225600.123456 [0 127.0.0.1:50421] "SET" "k" "v"``; a script's commands from ``[0 lua]``), until
    the monitoring client disconnects."""

    _server: fakeredis.FakeServer

    @command(name="MONITOR", fixed=(), repeat=())
    def monitor(self) -> SimpleString:
        writer = getattr(self, "_emqlab_writer", None)
        if writer is not None:
            with _MONITOR_LOCK:
                self._server.__dict__.setdefault("_emqlab_monitors", []).append(writer)
        return SimpleString(b"OK")


def _quoted(arg: Any) -> str:
    data = arg if isinstance(arg, bytes) else str(arg).encode()
    text = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{chr(b)}" if b in (34, 92)
                   else f"\\x{b:02x}" for b in data)
    return f'"{text}"'


def _publish(sock: Any, name: str, args: list[Any], from_script: bool) -> None:
    """Write one command to every monitoring connection (one that has gone away is dropped)."""
    who = "lua" if from_script else getattr(sock, "_emqlab_addr", "?")
    db = getattr(sock, "_db_num", 0)
    words = [w.encode() for w in name.upper().split()]  # (a container's subcommand is a word of its own)
    line = (f"+{time.time():.6f} [{db} {who}] " + " ".join(_quoted(a) for a in [*words, *args])
            + "\r\n").encode()
    monitors = sock._server.__dict__.get("_emqlab_monitors", [])
    with _MONITOR_LOCK:
        for writer in list(monitors):
            try:
                writer.write(line)
                writer.writer.flush()
            except (OSError, ValueError):  # (the monitoring client left)
                monitors.remove(writer)


# As INFO (emqlab.backend.fakeserver): the signatures kept in emqlab's own table, fakeredis's left as it was.
_fs._EXTRA_COMMANDS["quit"] = SUPPORTED_COMMANDS.pop("quit")
_fs._EXTRA_COMMANDS["monitor"] = SUPPORTED_COMMANDS.pop("monitor")


class _TcpSocket(QuitCommandMixin, MonitorCommandMixin, _fs._EmbeddedSocket):
    """An embedded server's socket that also answers QUIT and MONITOR, and shows its commands to monitors."""

    def _run_command(self, func: Any, sig: Any, args: list[Any], from_script: bool) -> Any:
        if self._server.__dict__.get("_emqlab_monitors") and sig.name != "monitor":
            _publish(self, sig.name, args, from_script)
        return super()._run_command(func, sig, args, from_script)

    def _process_command(self, fields: list[bytes]) -> None:
        # A fault of fakeredis's inside a command (a TypeError in its GEO code, say) is answered as an error
        # reply: raised, it ended the client's connection and left the others none the wiser
        try:
            super()._process_command(fields)
        except (ConnectionError, redis.ConnectionError):
            raise
        except Exception as e:
            name = fields[0].decode(errors="replace").upper() if fields else "?"
            where = traceback.extract_tb(e.__traceback__)[-1]
            self.put_response(SimpleError(
                f"{SERVER_ERROR}internal error in {name}: {type(e).__name__}: {e} "
                f"({os.path.basename(where.filename)}:{where.lineno})"))

    def _decode_error(self, error: SimpleError) -> Any:
        # written to the client as it is, its code kept: parsed into redis-py's ResponseError, "-x y" and
        # "-MY code" would come back out as "-ERR x y" and "-ERR MY code"
        return error

    def _decode_result(self, result: Any) -> Any:
        # a status reply stays one (_encode writes it "+…", and any other string as a bulk string)
        if isinstance(result, list):
            return [self._decode_result(x) for x in result]
        return result


class _TcpConnection(_fs.EmbeddedConnection):
    def _connect(self) -> Any:
        server = self._server
        if server is None or not server.connected:
            raise self._connection_error_class("embedded Redis server is disconnected")
        sock = _TcpSocket(server, client_class=self._client_class, db=self.db, lua_modules=self._lua_modules,
                          client_info=self._client_info)
        info = dict(self._client_info or {})
        sock._emqlab_writer = self._writer  # type: ignore[attr-defined]  # (MONITOR writes to it)
        sock._emqlab_addr = info.get("-monitor") or info.get("addr") or "?"  # type: ignore[attr-defined]
        return sock


def _host_port(address: Any) -> str:
    """A socket address as CLIENT LIST shows it (``127.0.0.1:50421``, ``[::1]:50421``; a Unix socket's as
    ``/path:0``, as Redis does): one word, so that a client splitting the line at spaces (BullMQ's
    ``getWorkers``) reads every field."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return f"{address or ''}:0"


class _OneLineWriter(Writer):
    """fakeredis's reply writer, with a status reply written ``+…`` and any other string as a bulk string (as
    Redis does; fakeredis's writes a top-level string ``+…`` whenever it can) and error texts kept to one
    line (a CR or LF in ``-ERR …`` breaks RESP)."""

    def dump(self, value: Any) -> None:
        self.write(_encode(value, self.request_handler.protocol_version))
        self.writer.flush()


def _encode(value: Any, protocol: int) -> bytes:
    if isinstance(value, SimpleString):  # (one line, as Redis writes a status)
        return b"+" + value.value.replace(b"\r", b" ").replace(b"\n", b" ") + b"\r\n"
    if isinstance(value, (bytes, str)):
        return encode_reply(value, protocol, nested=True)
    if isinstance(value, Exception) and value.args and isinstance(value.args[0], str):
        if "\n" in value.args[0] or "\r" in value.args[0]:
            value = type(value)(" ".join(value.args[0].replace("\r", "\n").split()), *value.args[1:])
        return encode_reply(value, protocol)
    if isinstance(value, (list, tuple)):
        return b"*%d\r\n" % len(value) + b"".join(_encode(x, protocol) for x in value)
    if isinstance(value, dict) and protocol == 3:
        return b"%%%d\r\n" % len(value) + b"".join(_encode(x, protocol) for kv in value.items() for x in kv)
    return encode_reply(value, protocol, nested=True)


class _Handler(TCPFakeRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.writer = _OneLineWriter(self.client_address, self.wfile, self)
        old = self.current_client
        unix = self.connection.family == getattr(socket, "AF_UNIX", None)
        if not unix:  # (as Redis does for every client: a small reply is sent at once, not held by Nagle's
            # algorithm until the client ACKs the one before it, up to its delayed-ACK time, ~40 ms)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.current_client = _TcpConnection(
            server=self.server.fake_server, writer=self.writer, lua_modules=set(_fs.LUA_MODULES),
            client_info={"laddr": _host_port(self.connection.getsockname()),
                         "addr": _host_port(self.connection.getsockname() if unix else self.connection.getpeername()),
                         "fd": self.connection.fileno(), "-monitor": "unix" if unix else None},
            protocol=2)
        # (this in-process connection is the client's stand-in: it must not name itself redis-py in CLIENT
        # LIST, the client's own CLIENT SETINFO does that; redis-py >= 8 reads driver_info, older lib_name)
        for attr in ("driver_info", "lib_name", "lib_version"):
            setattr(self.current_client, attr, None)
        old.disconnect()
        self.server.clients[self.client_address] = self.current_client
        self.server.hangups.add(self)

    def finish(self) -> None:
        self.server.hangups.discard(self)
        super().finish()

    def handle(self) -> None:
        """Serve the connection: the client's bytes are cut into commands as Redis does
        (:class:`~emqlab.backend.respinput.RequestReader`, with Redis's limits), each run on the embedded socket
        and its reply sent back as it is ready; the connection ends when the client closes it, after a QUIT's
        reply, after a request Redis refuses (its ``-ERR Protocol error: …`` sent first), or when the server
        stops."""
        conn = self.current_client
        stop = self.server._shutdown_event
        reader = RequestReader()
        while not stop.is_set():
            try:
                if conn.can_read():
                    try:
                        reply = conn.read_response()
                    except RaiseErrorTypes as e:  # (an error reply: sent, and the connection goes on)
                        reply = e
                    self.writer.dump(reply)
                    if getattr(conn.get_socket(), "_emqlab_quit", False) and not conn.can_read():
                        return
                    continue
                try:
                    command = reader.next_command()
                    if command is None:  # (the next command is not whole yet: wait for the client's bytes)
                        ready, _, _ = select.select([self.connection], [], [], 0.01)
                        if not ready:
                            continue
                        data = self.connection.recv(_READ_SIZE)
                        if not data:  # (the client closed it)
                            return
                        reader.feed(data)
                        continue
                except ProtocolError as e:  # (as Redis: the error, then the connection is closed)
                    self.writer.write(b"-" + str(e).encode() + b"\r\n")
                    self.writer.writer.flush()
                    return
                if command and not self._run(command):
                    return
            except BlockingIOError:  # (select saw the socket ready, but nothing came)
                continue
            except (ConnectionError, redis.ConnectionError):
                return

    def _run(self, command: list[bytes]) -> bool:
        """Run one command on the embedded socket (its reply queued); False if the connection has been killed
        (CLIENT KILL) or the server has stopped."""
        sock = self.current_client.get_socket()
        if getattr(sock, "_killed", False) or sock._server is None or not sock._server.connected:
            return False
        sock._process_command(command)
        return True


def _peer_gone(conn: socket.socket) -> bool:
    """Whether the client at the other end of ``conn`` has closed it (an EOF waits in the socket)."""
    try:
        ready, _, _ = select.select([conn], [], [], 0)
        return bool(ready) and conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class _HangUpWatch:
    """Ends a blocking command (BLPOP, XREAD BLOCK, …) whose client has hung up, as Redis does: the handler's
    thread waits inside the command and cannot see the EOF itself, so the client would wait for the block's
    timeout before its close is answered (ioredis's ``disconnect()`` waits for it: BullMQ's
    ``QueueEvents.close()`` took seconds). One thread a server looks at the blocked connections every
    ``interval`` seconds."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.handlers: set[_Handler] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, handler: _Handler) -> None:
        with self._lock:
            self.handlers.add(handler)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="emqlab-hangups", daemon=True)
                self._thread.start()

    def discard(self, handler: _Handler) -> None:
        with self._lock:
            self.handlers.discard(handler)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                handlers = list(self.handlers)
            for handler in handlers:
                try:
                    sock = handler.current_client.get_socket()
                except Exception:  # (not connected yet, or gone)
                    continue
                if getattr(sock, "_blocked", False) and _peer_gone(handler.connection):
                    condition = sock._db.condition  # (the server's lock: a command's wait gives it up)
                    with condition:
                        if getattr(sock, "_blocked", False):
                            sock._unblock_reason = b"timeout"  # (CLIENT UNBLOCK's way: the command ends empty)
                            condition.notify_all()


class _Server(TcpFakeServer):
    def __init__(self, address: tuple[str, int], embedded: fakeredis.FakeServer) -> None:
        super().__init__(address, bind_and_activate=True)
        self.RequestHandlerClass = _Handler
        self.fake_server = embedded
        self.daemon_threads = True
        self.hangups = _HangUpWatch()

    def shutdown(self) -> None:
        self.hangups.stop()
        super().shutdown()


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The same front end on a Unix socket. Its clients have no address, so each connection gets a number
    of its own (``("unix", n)``): the front end keeps one embedded connection per client address."""

    daemon_threads = True

    def __init__(self, path: str, embedded: fakeredis.FakeServer) -> None:
        super().__init__(path, _Handler)
        self.fake_server = embedded
        self.clients: dict[Any, Any] = {}
        self._shutdown_event = threading.Event()
        self._ids = itertools.count(1)
        self.hangups = _HangUpWatch()

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.RequestHandlerClass(request, ("unix", next(self._ids)), self)  # type: ignore[arg-type]

    def shutdown(self) -> None:
        self._shutdown_event.set()
        self.hangups.stop()
        super().shutdown()


@dataclass
class EmbeddedTcp:
    """A running :func:`serve`: its ``host`` and ``port`` (TCP) or ``path`` (a Unix socket), its ``url``
    (``redis://host:port/0`` or ``unix:///path?db=0``), the embedded ``server`` (a fakeredis ``FakeServer``:
    share it with in-process clients); :meth:`close` stops it."""

    host: str
    port: int
    server: fakeredis.FakeServer
    _tcp: Any
    _thread: threading.Thread
    path: str | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.path}?db=0" if self.path else f"redis://{self.host}:{self.port}/0"

    def close(self) -> None:
        """Stop accepting connections, close the open ones, and wait for the serving thread."""
        self._tcp.shutdown()
        self._tcp.server_close()
        self._thread.join(timeout=10)


@contextmanager
def serve(host: str = "127.0.0.1", port: int = 0, server: fakeredis.FakeServer | None = None, *,
          unix: str | None = None, **new_server: Any) -> Iterator[EmbeddedTcp]:
    """The embedded server on ``host``:``port`` (0: a free port), or on the Unix socket ``unix`` (a path
    where nothing is yet; removed when it stops), while the block runs, in a thread of this process;
    ``server`` an existing embedded server to expose (default: a new one, ``new_server`` its options:
    :func:`emqlab.backend.fakeserver.new_server`). Raises ``OSError`` when the port is taken or the path
    exists."""
    embedded = server if server is not None else _fs.new_server(**new_server)
    if unix is not None:
        if os.path.lexists(unix):
            raise FileExistsError(17, "something is there already", unix)
        front: Any = _UnixServer(unix, embedded)
        bound = 0
    else:
        front = _Server((host, port), embedded)
        bound = int(front.server_address[1])
        embedded._emqlab_tcp_port = bound  # type: ignore[attr-defined]
    thread = threading.Thread(target=front.serve_forever, kwargs={"poll_interval": 0.1}, name="emqlab-server",
                              daemon=True)
    thread.start()
    running = EmbeddedTcp(host, bound, embedded, front, thread, unix)
    try:
        yield running
    finally:
        running.close()
        if unix is not None and os.path.exists(unix):
            os.unlink(unix)


@contextmanager
def server(port: int = 0, host: str = "127.0.0.1", *, unix: str | None = None, **options: Any) -> Iterator[str]:
    """``with emqlab.server() as url:`` — :func:`serve` for a caller that needs only the URL:
    ``redis://127.0.0.1:PORT/0`` (``port`` 0: a free one) or ``unix:///PATH?db=0``, for any client in any
    language, while the block runs. ``options`` go to :func:`emqlab.backend.fakeserver.new_server`. Raises
    ``OSError`` when the port is taken or something is at the path. The command line's ``emqlab server`` and
    the pytest fixture ``emqlab_server`` serve the same way."""
    with serve(host, port, unix=unix, **options) as running:
        yield running.url
