"""The embedded server's ``EVAL``, ``EVALSHA``, ``EVAL_RO`` and ``EVALSHA_RO``, run by the client-side host.

One Lua environment: a script sent to the embedded server (:mod:`emqlab.backend.fakeserver`, ``emqlab
server``) is compiled, vetted and answered by the same :class:`emqlab.scripting.host.LuaHost` that runs a
split script client-side — its ``#!lua`` shebang and flags, Redis's refusals of commands inside a script
(``noscript`` commands, writes under ``flags=no-writes`` or ``EVAL_RO``), Redis 7.0's error texts with
``script: <sha1>, on @user_script:N.``, the conversion of a Lua value to a reply. The host drives the
script as a coroutine; here each ``redis.call`` it yields is run at once on the calling connection's own
fakeredis socket, under the server's lock, so the script stays atomic (nothing else runs until it ends)
and its commands see one instant (fakeredis sets the clock once per client command).

What stays the server's: ``BUSY`` for other clients past the busy-reply threshold, ``SCRIPT KILL`` (the
host's count hook asks :meth:`emqlab.backend.busy.Busy.tick`), ``MONITOR`` (each command goes through the
socket's ``_run_command``), the limits of :func:`emqlab.backend.fakeserver.new_server` (``max_instructions``,
``max_seconds``, :data:`emqlab.backend.fakeserver.LUA_MAX_MEMORY`; their errors start ``ERR emqlab server:``)
and the script cache (``SCRIPT LOAD``/``EXISTS``/``FLUSH``). A RESP3 client gets a ``{double=…}`` as a double
and a ``{map=…}`` as a map; a RESP2 client gets them as Redis 7.0 writes them.

Relies on fakeredis internals (checked with 2.41): ``_name_to_func``, ``_run_command``, ``_script_resp``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

# isort: off
from emqlab.backend._fakeredis import fakeredis  # (first: fakeredis without NumPy)
# isort: on
import redis
from fakeredis import _msgs as fake_msgs
from fakeredis._command_args_parsing import Int
from fakeredis._commands import command
from fakeredis._helpers import SimpleError, SimpleString
from fakeredis._socket._resp import extract_command
from fakeredis.commands_mixins._lua_functions import FUNCTION_FLAGS, FunctionLibrary, FunctionsEngine, LuaFunction
from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

from emqlab.backend.fakereplies import fake_reply
from emqlab.protocol import messages
from emqlab.scripting import sandbox as _sandbox
from emqlab.scripting.functions import Registered, load_library, start_function
from emqlab.scripting.host import LuaHost, LuaScriptError, ScriptRun, Serving, Status
from emqlab.scripting.replies import MapReply

__all__ = ["LUA_MAX_MEMORY", "HostFunctionsEngine", "HostScriptsMixin", "call_function", "run_script", "server_host"]

LUA_MAX_MEMORY = _sandbox.MAX_MEMORY
"""Bytes of Lua heap an embedded server's scripts may use in all (past it a script fails with ``not enough
memory``)."""

# what a script that ran out of the server's Lua heap fails with (after messages.SERVER_ERROR)
OUT_OF_MEMORY = messages.OUT_OF_MEMORY % ("the server's", "LUA_MAX_MEMORY", LUA_MAX_MEMORY)

_log = logging.getLogger("emqlab.server")
_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}
_hosts_lock = threading.Lock()
_parse_error = redis.connection.DefaultParser(socket_read_size=65536).parse_error


def _log_line(level: Any, message: Any) -> None:
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
    _log.log(_LEVELS.get(int(level), logging.INFO), "%s", text)


def server_host(server: fakeredis.FakeServer) -> LuaHost:
    """The host that runs ``server``'s scripts (made once per server, with its limits: ``new_server``'s
    ``max_instructions`` and ``max_seconds``, :data:`LUA_MAX_MEMORY`, no cap on commands). Used under the
    server's lock only: one script at a time."""
    found = getattr(server, "_emqlab_host", None)
    if found is not None:
        return found
    with _hosts_lock:
        found = getattr(server, "_emqlab_host", None)
        if found is None:
            busy = getattr(server, "_emqlab_busy", None)
            serving = Serving(
                prefix=messages.SERVER_ERROR, memory_text=OUT_OF_MEMORY,
                hints={"budget_hint": b"new_server(max_instructions=...)", "commands_hint": b"",
                       "seconds_hint": b"new_server(max_seconds=...)"},
                tick=busy.tick if busy is not None else (lambda: False),
                stopped_at=busy.stopped_at if busy is not None else (lambda line: None), log=_log_line)
            found = LuaHost(
                max_instructions=getattr(server, "_emqlab_max_instructions", _sandbox.DEFAULT_MAX_INSTRUCTIONS),
                max_seconds=float(getattr(server, "_emqlab_max_seconds", _sandbox.DEFAULT_MAX_SECONDS)),
                max_commands=0, max_memory=LUA_MAX_MEMORY, serving=serving)
            server._emqlab_host = found  # type: ignore[attr-defined]
    return found


class HostScriptsMixin:
    """A fakeredis socket mixin: ``EVAL``/``EVALSHA``/``EVAL_RO``/``EVALSHA_RO`` by :func:`server_host`'s host
    (see the module's docstring); ``SCRIPT LOAD`` compiles a script before it caches it, ``SCRIPT EXISTS``
    takes a SHA1 in any case, ``SCRIPT FLUSH`` empties the host's compiled scripts too. The methods take any
    fakeredis socket as ``self`` (a connection of fakeredis's own classes to the server is given them)."""

    _server: fakeredis.FakeServer

    @command((bytes, Int), (bytes,), flags=fake_msgs.FLAG_NO_SCRIPT)
    def eval(self, script: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        return run_script(self, script, numkeys, keys_and_args, False)

    @command(name="EVALSHA", fixed=(bytes, Int), repeat=(bytes,), flags=fake_msgs.FLAG_NO_SCRIPT)
    def evalsha(self, sha1: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        return run_script(self, _cached(self, sha1), numkeys, keys_and_args, False)

    @command(name="EVAL_RO", fixed=(bytes, Int), repeat=(bytes,), flags=fake_msgs.FLAG_NO_SCRIPT)
    def eval_ro(self, script: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        return run_script(self, script, numkeys, keys_and_args, True)

    @command(name="EVALSHA_RO", fixed=(bytes, Int), repeat=(bytes,), flags=fake_msgs.FLAG_NO_SCRIPT)
    def evalsha_ro(self, sha1: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        return run_script(self, _cached(self, sha1), numkeys, keys_and_args, True)

    def script_load(self, *args: bytes) -> bytes:
        # compiled first, as Redis does: a syntax error or a bad shebang is refused, not cached
        if len(args) == 1:
            try:
                server_host(self._server).compile(args[0])
            except LuaScriptError as e:
                raise SimpleError(_error_reply(e)) from None
        return ScriptingCommandsMixin.script_load(self, *args)

    def script_exists(self, *args: bytes) -> list[int]:
        # a SHA1 in any case, as EVALSHA takes it
        return ScriptingCommandsMixin.script_exists(self, *(a.lower() for a in args))

    def script_flush(self, *args: bytes) -> SimpleString:
        done: SimpleString = ScriptingCommandsMixin.script_flush(self, *args)
        host = getattr(self._server, "_emqlab_host", None)
        if host is not None:
            host._compiled.clear()
        return done


def _cached(sock: Any, sha1: bytes) -> bytes:
    try:
        return sock._server.script_cache[sha1.lower()]
    except KeyError:
        raise SimpleError(fake_msgs.NO_MATCHING_SCRIPT_MSG) from None


def run_script(sock: Any, script: bytes, numkeys: int, keys_and_args: tuple[bytes, ...], read_only: bool) -> Any:
    """``EVAL`` (``EVAL_RO`` with ``read_only``) of ``script`` on fakeredis socket ``sock``: the reply as fakeredis
    writes it, or a ``SimpleError`` with Redis's text; the script cached by its SHA1 for ``EVALSHA``."""
    if numkeys > len(keys_and_args):
        raise SimpleError(fake_msgs.TOO_MANY_KEYS_MSG)
    if numkeys < 0:
        raise SimpleError(fake_msgs.NEGATIVE_KEYS_MSG)
    sock._server.script_cache[hashlib.sha1(script).hexdigest().encode()] = script
    busy = getattr(sock._server, "_emqlab_busy", None)
    if busy is None:
        return _run(sock, script, numkeys, keys_and_args, read_only)
    return busy.call("script", script, _run, sock, script, numkeys, keys_and_args, read_only)


def _run(sock: Any, script: bytes, numkeys: int, keys_and_args: tuple[bytes, ...], read_only: bool) -> Any:
    resp3 = int(getattr(sock, "_client_info", {}).get("resp", 2) or 2) == 3
    keys, args = keys_and_args[:numkeys], keys_and_args[numkeys:]
    return _drive(sock, lambda host: host.start(script, keys, args, db=sock._db_num, read_only=read_only,
                                                resp3=resp3))


def _drive(sock: Any, start: Callable[[LuaHost], ScriptRun]) -> Any:
    # a script's or a function's run on the server's host, its commands run at once on sock
    host = server_host(sock._server)
    sock._script_resp = 2  # the script's commands answer in RESP2, whatever the client speaks
    try:
        try:
            run = start(host)
        except LuaScriptError as e:  # a compile error, a bad shebang, a writing script sent EVAL_RO
            raise SimpleError(_error_reply(e)) from None
        with run:
            while run.pending is not None:
                run.resume(_command(sock, run.pending))
    except KeyboardInterrupt:
        running = getattr(getattr(sock._server, "_emqlab_busy", None), "running", None)
        if running is not None and (running.killed or running.interrupted):
            raise SimpleError("stopped") from None  # (Busy.call answers it: killed, or a Ctrl-C)
        raise
    finally:
        sock._script_resp = None
    if run.error is not None:
        raise SimpleError(_error_reply(run.error))
    return _to_fake(run.result)


def _command(sock: Any, cmd: tuple[bytes, ...]) -> Any:
    """Run one command of a script on ``sock`` (as fakeredis's own ``redis.call`` does): its raw reply as the
    host takes it, an error as the ``ResponseError`` redis-py would raise."""
    name, args = extract_command(list(cmd))
    note = getattr(sock, "_note_write", None)
    if note is not None:  # (busy: a script that wrote cannot be killed)
        note(cmd[0], tuple(cmd[1:]))
    try:
        func, sig = sock._name_to_func(name)
    except SimpleError as e:
        return _parse_error(e.value)
    return fake_reply(sock._run_command(func, sig, args, True))


def _error_reply(e: LuaScriptError) -> str:
    # SimpleError(text) is written "-text": the error as Redis writes it (its code kept)
    raw = e.reply if e.reply is not None else b"ERR " + str(e).encode()
    return raw.decode("utf-8", "surrogateescape")


def _to_fake(v: Any) -> Any:
    """A script's result (:meth:`emqlab.scripting.host.ScriptRun.value`'s shapes) as fakeredis replies."""
    if isinstance(v, MapReply):
        return {_to_fake(v[i]): _to_fake(v[i + 1]) for i in range(0, len(v), 2)}
    if isinstance(v, list):
        return [_to_fake(x) for x in v]
    if isinstance(v, LuaScriptError):
        return SimpleError(_error_reply(v))
    if isinstance(v, Status):
        return SimpleString(v.value)
    return v


# -- Redis Functions on the same host ---------------------------------------------------------------------------


class HostFunctionsEngine(FunctionsEngine):
    """fakeredis's bookkeeping of a server's function libraries (``FUNCTION LIST``/``DUMP``/``RESTORE``/
    ``DELETE``/``FLUSH``), with each library loaded and each function called on :func:`server_host`'s host
    (:mod:`emqlab.scripting.functions`): the sandbox, limits and command refusals of the server's ``EVAL``."""

    def __init__(self, server: fakeredis.FakeServer) -> None:  # (no runtime of fakeredis's own)
        self._server = server
        self._server_type = server.server_type
        self._version = server.version
        self.libraries: dict[bytes, FunctionLibrary] = {}

    def _create_library(self, name: bytes, code: bytes, body: bytes) -> FunctionLibrary:
        try:
            found = load_library(server_host(self._server), body)
        except LuaScriptError as e:
            raise SimpleError(_error_reply(e)) from None
        if not found:
            raise SimpleError(fake_msgs.FUNCTION_NO_FUNCTIONS_MSG)
        functions = {f.name: LuaFunction(name=f.name, callback=f, description=f.description,
                                         flags=[flag for flag in FUNCTION_FLAGS if flag.decode() in f.flags])
                     for f in found}
        return FunctionLibrary(name=name, code=code, functions=functions)


def call_function(sock: Any, function: LuaFunction, numkeys: int, keys_and_args: tuple[bytes, ...],
                  read_only: bool) -> Any:
    """``FCALL`` (``FCALL_RO`` with ``read_only``) of ``function`` (a :class:`HostFunctionsEngine`'s) on
    fakeredis socket ``sock``: the reply as fakeredis writes it, or a ``SimpleError`` with Redis's text."""
    registered: Registered = function.callback
    resp3 = int(getattr(sock, "_client_info", {}).get("resp", 2) or 2) == 3
    keys, args = keys_and_args[:numkeys], keys_and_args[numkeys:]
    return _drive(sock, lambda host: start_function(host, registered, keys, args, db=sock._db_num,
                                                    read_only=read_only, resp3=resp3))
