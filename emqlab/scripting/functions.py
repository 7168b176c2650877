"""Redis Functions (``FUNCTION LOAD``, ``FCALL``) on a :class:`emqlab.scripting.host.LuaHost`: the same sandbox,
limits and refusals as its ``EVAL`` scripts (``lua/lib/sandbox.lua``), so that a server has one Lua environment.

A library's code runs once, as a run of the host (its instruction, CPU-second and heap limits apply), in
read-only globals of its own whose ``redis`` table holds only what a library may use while it loads
(``register_function``, ``log``, the ``LOG_*`` levels and the version fields). Each function it registers then
runs as a run of the host too, with its keys and arguments as parameters, in its library's globals with the
whole ``redis`` table: its commands are vetted as a script's (Redis's ``noscript`` refusals, the writes of a
``no-writes`` function), and its errors end ``script: <function name>, on @user_function:<line>.``
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emqlab.scripting.host import LuaHost, ScriptRun
from emqlab.scripting.replies import LuaScriptError, as_bytes, as_text, lua_error_text, wire_error

__all__ = ["Registered", "load_library", "start_function"]


@dataclass(frozen=True)
class Registered:
    """A function a library registered: its ``name`` (bytes), ``flags`` (Redis's names, e.g. ``"no-writes"``),
    ``description`` (bytes or ``None``) and ``entry``, the Lua table :func:`start_function` runs it from."""

    name: bytes
    flags: frozenset[str]
    description: bytes | None
    entry: Any


def load_library(host: LuaHost, text: bytes) -> list[Registered]:
    """Run a library's code (``text``: Lua source, its ``#!lua`` line removed or kept as a blank line) on
    ``host`` and return the functions it registered, in order.

    Raises :class:`LuaScriptError` whose ``reply`` is the error reply: ``ERR Error compiling function: …`` for
    code that does not compile or is Lua bytecode, ``ERR Error registering functions: …`` for an error its code
    raised (a bad ``redis.register_function``, a global it does not have), and the host's own error (``ERR
    emqlab server: …``) for a load stopped by the host's limits or out of Lua heap."""
    if host._orphans:
        host._drop_orphans()
    co, err = host._start_library(text)
    if co is False:
        _raise(b"ERR Error compiling function: " + as_bytes(err))
    out = host._step(co, 0, None)
    if out[0] != 1:
        host._drop(co)
        if out[0] == 2 and host._lua_type(out[1]) == "table" and isinstance(out[1][b"err"], bytes):
            _raise(out[1][b"err"])  # (the host's limits: its own text, its code kept)
        if out[0] == 2 and isinstance(out[1], bytes) and out[1].startswith(b"ERR "):
            _raise(out[1])  # (out of Lua heap: the host's text)
        _raise(b"ERR Error registering functions: " + lua_error_text(out[1]).encode())
    found = out[1]
    registered = []
    for i in range(1, 1 << 30):
        entry = found[i]
        if entry is None:
            break
        flags = entry[b"flags"]
        registered.append(Registered(
            name=bytes(entry[b"name"]), description=entry[b"description"], entry=entry,
            flags=frozenset(as_text(flags[j]) for j in range(1, len(flags) + 1))))
    return registered


def start_function(host: LuaHost, function: Registered, keys: Sequence[bytes], args: Sequence[bytes], *,
                   db: int, read_only: bool = False, resp3: bool = False) -> ScriptRun:
    """A run of ``function`` on ``host`` with ``keys`` and ``args`` as its two parameters, driven as a
    script's (:class:`emqlab.scripting.host.ScriptRun`: pending commands, ``resume``, ``result``/``error``).
    ``db``: the caller's database; ``read_only``: an ``FCALL_RO`` (its writes refused, as a ``no-writes``
    function's); ``resp3``: the result is for a RESP3 client."""
    if host._orphans:
        host._drop_orphans()
    flags = function.flags | ({"no-writes"} if read_only else set())
    co = host._start_function(function.entry, host._table_from(list(keys)), host._table_from(list(args)))
    return ScriptRun(host, co, as_text(function.name), frozenset(flags), db, None, resp3)


def _raise(reply: bytes) -> None:
    raw = wire_error(reply)
    raise LuaScriptError(as_text(raw).removeprefix("ERR "), raw)
