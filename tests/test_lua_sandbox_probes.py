"""Escape probes for Redis 7's scripting sandbox (``lua/lib/sandbox.lua``), run on its two homes and on Redis:
the embedded fakeredis server (:func:`emqlab.backend.fakeserver.new_server`, through redis-py's ``EVAL``), the
client-side host on fakeredis (:meth:`emqlab.scripting.host.LuaHost.run`) and the live Redis (``EVAL``).

Each probe is a script that tries to reach outside the sandbox — Python, ``debug``, the file system, bytecode,
a global of its own, a library table changed for the next script — and what Redis 7.0 answers: the text its
error contains, or the value it returns. Every target must answer the same (0 escapes), and after each probe
the globals a script relies on are intact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import pytest
import redis

from emqlab.backend import fakeserver
from emqlab.backend.connect import command_executor, connect
from emqlab.backend.fakeserver import new_server, sync_client
from emqlab.scripting.host import LuaHost
from tests.conftest import live_conn, live_dialect

MISSING = "Script attempted to access nonexistent global variable '{}'"
READONLY = "Attempt to modify a readonly table"
#: a Lua 5.1 chunk of bytecode (what ``string.dump`` gives): Redis 7 compiles such a text as Lua source
BYTECODE: bytes = lua51.LuaRuntime(encoding=None).eval("string.dump(function() return 1 end)")

#: (probe, script, what Redis 7.0 answers: an error containing the str, or the returned bytes)
PROBES: list[tuple[str, bytes, str | bytes]] = [
    ("python.eval", b"return python.eval('__import__(\"os\").getpid()')", MISSING.format("python")),
    ("python global", b"return type(python)", MISSING.format("python")),
    ("python via rawget", b"return type(rawget(_G, 'python'))", b"nil"),
    ("debug", b"return debug.getinfo(1).currentline", MISSING.format("debug")),
    ("debug.getregistry", b"return type(debug.getregistry())", MISSING.format("debug")),
    ("os", b"return os.execute('true')", MISSING.format("os")),
    ("io", b"return io.open('/etc/passwd')", MISSING.format("io")),
    ("require", b"return require('os')", MISSING.format("require")),
    ("dofile", b"return dofile('/etc/passwd')", MISSING.format("dofile")),
    ("loadfile", b"return loadfile('/etc/passwd')", MISSING.format("loadfile")),
    ("package", b"return package.loaded", MISSING.format("package")),
    ("module", b"return module('x')", MISSING.format("module")),
    ("getfenv", b"return getfenv(0)", MISSING.format("getfenv")),
    ("setfenv", b"return setfenv(1, {})", MISSING.format("setfenv")),
    ("print", b"print('x') return 1", MISSING.format("print")),
    ("newproxy", b"return newproxy(true)", MISSING.format("newproxy")),
    ("bytecode via loadstring", b"return loadstring(string.dump(function() return 1 end))()",
     "attempt to call a nil value"),
    ("bytecode via load", b"local s = string.dump(function() return 1 end) local done = false "
                          b"return load(function() if done then return nil end done = true return s end)()",
     "attempt to call a nil value"),
    ("bytecode as the script", BYTECODE, "unexpected symbol near 'char(27)'"),
    ("a new global", b"x = 1 return x", READONLY),
    ("rawset on _G", b"rawset(_G, 'x', 1) return 1", READONLY),
    ("setmetatable on _G", b"setmetatable(_G, nil) x = 1 return 1", READONLY),
    ("_G's metatable", b"getmetatable(_G).__index = nil return 1", READONLY),
    ("_G._G", b"_G._G.x = 1 return 1", READONLY),
    ("an existing global", b"redis = nil return 1", READONLY),
    ("redis.call replaced", b"redis.call = nil return 1", READONLY),
    ("a library table", b"string.rep = nil return 1", READONLY),
    ("the string metatable", b"getmetatable('').__index = {} return 1", READONLY),
    ("an undefined global", b"return undefined_global_xyz", MISSING.format("undefined_global_xyz")),
    ("into cjson.null", b"return tostring(cjson.null.__class__)", "attempt to index field 'null' (a userdata value)"),
    ("into redis.call", b"return tostring(redis.call.__globals__)", "attempt to index field 'call' (a function value)"),
    ("into a caught error", b"local ok, e = pcall(redis.call, 'NOSUCHCMD') return tostring(e.__traceback__)", b"nil"),
]

#: where Valkey (emqlab.scripting.dialect) answers a probe otherwise, still refusing it: its sandbox has ``os``
#: with ``os.clock`` alone
VALKEY_ANSWERS: dict[str, str | bytes] = {"os": "attempt to call field 'execute' (a nil value)"}

#: what every script relies on, checked after each probe (nothing a probe did may outlive it)
INTACT = b"return {type(redis.call), type(string.rep), type(cjson.encode), type(KEYS), tostring(rawget(_G, 'x'))}"
INTACT_REPLY = [b"function", b"function", b"function", b"table", b"nil"]


@pytest.fixture(scope="module", params=["server", "host", pytest.param("live", marks=pytest.mark.live)])
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[bytes], Any]]:
    """``run(script)``: what ``EVAL script 0`` answers on the target."""
    if request.param == "server":
        client = sync_client(new_server(), protocol=2)
        yield lambda script: client.eval(script, 0)
        client.close()
    elif request.param == "host":
        host = LuaHost()
        with command_executor(connect()) as execute:
            yield lambda script: host.run(execute, script, [], [])
    else:
        live = live_conn()
        yield lambda script: live.eval(script, 0)


@pytest.mark.parametrize(("script", "expected"), [p[1:] for p in PROBES], ids=[p[0] for p in PROBES])
def test_probe_is_refused_as_redis_refuses_it(run: Callable[[bytes], Any], script: bytes,
                                              expected: str | bytes, request: pytest.FixtureRequest) -> None:
    if request.node.callspec.params["run"] == "live" and live_dialect().valkey:
        expected = VALKEY_ANSWERS.get(request.node.callspec.id.split("-", 1)[1], expected)
    if isinstance(expected, bytes):
        assert run(script) == expected
    else:
        with pytest.raises(redis.ResponseError) as e:
            run(script)
        assert expected in str(e.value)
    assert run(INTACT) == INTACT_REPLY


#: error objects the host must read without running them (never sent to a live server: Redis reads an error
#: table's fields with their metamethods, so the looping one would hang it)
ERROR_OBJECTS = [
    ("a forged interrupt mark", b"error({err='x', interrupted=true})"),
    ("a forged budget mark", b"error({err='x', budget=true})"),
    ("an __index that loops", b"error(setmetatable({err='x'}, {__index=function() while true do end end}))"),
    ("an __index that raises", b"error(setmetatable({err='x'}, {__index=function() error('boom') end}))"),
]


@pytest.mark.parametrize("script", [e[1] for e in ERROR_OBJECTS], ids=[e[0] for e in ERROR_OBJECTS])
@pytest.mark.parametrize("where", ["server", "host"])
def test_an_error_object_is_only_its_text(where: str, script: bytes) -> None:
    """A script's error table is read raw, once, as a fresh table of its text: its metamethods never run
    outside the budget (the looping one hung the server past SCRIPT KILL) and its fields never pose as the
    host's own marks (a forged interrupt ended a run as a Ctrl-C would)."""
    if where == "server":
        client = sync_client(new_server(), protocol=2)
        try:
            with pytest.raises(redis.ResponseError) as e:
                client.eval(script, 0)
            assert str(e.value).startswith("x") and client.ping()
        finally:
            client.close()
    else:
        from emqlab.scripting.replies import LuaScriptError

        with command_executor(connect()) as execute, pytest.raises(LuaScriptError) as e:
            LuaHost().run(execute, script, [], [])
        assert str(e.value).startswith("x")


#: pattern matches whose work the bound refuses before they run (each took minutes, past the CPU limit, in C
#: where no hook runs): optional items ('?' backtracks as '*' does), a balance (%b) scanned from every start
COSTLY_MATCHES = [
    ("optional items", b"return string.find(string.rep('a', 300), string.rep('a?', 300) .. string.rep('a', 300))"),
    ("a balance", b"return string.find(string.rep('(', 1000000), '%b()')"),
]


@pytest.mark.parametrize("script", [e[1] for e in COSTLY_MATCHES], ids=[e[0] for e in COSTLY_MATCHES])
@pytest.mark.parametrize("where", ["server", "host"])
def test_a_costly_match_is_refused_before_it_runs(where: str, script: bytes) -> None:
    if where == "server":
        client = sync_client(new_server(), protocol=2)
        try:
            with pytest.raises(redis.ResponseError, match="matcher steps"):
                client.eval(script, 0)
        finally:
            client.close()
    else:
        from emqlab.scripting.replies import LuaScriptError

        with command_executor(connect()) as execute, pytest.raises(LuaScriptError, match="matcher steps"):
            LuaHost().run(execute, script, [], [])


def test_embedded_server_stops_an_endless_script() -> None:
    """A script past its budget of Lua instructions fails, and a ``pcall`` or a coroutine cannot catch that;
    the server runs the next script normally."""
    client = sync_client(new_server(max_instructions=2_000_000), protocol=2)
    loops = [b"while true do end",
             b"while true do pcall(function() while true do end end) end",
             b"while true do pcall(coroutine.wrap(function() while true do end end)) end",
             b"local co = coroutine.create(function() while true do end end) "
             b"while true do coroutine.resume(co) end"]
    for script in loops:
        with pytest.raises(redis.ResponseError, match="emqlab server: the script ran more than 2000000 Lua"):
            client.eval(script, 0)
        assert client.eval(b"local n = 0 for i = 1, 1000 do n = n + i end return n", 0) == 500500
    client.close()


def test_embedded_server_functions_reach_no_python() -> None:
    """``FUNCTION LOAD``/``FCALL`` run in the sandbox ``EVAL`` runs in (the server's Lua host): a Python
    object a function holds shows it nothing, and ``python`` is no global there."""
    client = sync_client(new_server(), protocol=2)
    library = (b"#!lua name=probe0\nredis.register_function('probe0', function() "
               b"local ok, e = pcall(redis.call, 'NOSUCHCMD') return tostring(e.__class__) end)")
    client.execute_command("FUNCTION", "LOAD", library)
    assert client.execute_command("FCALL", "probe0", 0) == b"nil"
    client.execute_command("FUNCTION", "LOAD", b"#!lua name=probe1\nredis.register_function('probe1', function() "
                                               b"return tostring(cjson.null.__class__) end)")
    with pytest.raises(redis.ResponseError, match="attempt to index field 'null' \\(a userdata value\\)"):
        client.execute_command("FCALL", "probe1", 0)
    client.execute_command("FUNCTION", "LOAD", b"#!lua name=py\nredis.register_function('py', function() "
                                               b"return python.eval('1') end)")
    with pytest.raises(redis.ResponseError, match=MISSING.format("python")):
        client.execute_command("FCALL", "py", 0)
    client.close()


def test_embedded_server_functions_reach_no_os_and_end(tmp_path: Path) -> None:
    """A chunk a function makes with ``loadstring`` runs in the sandbox's globals too (in fakeredis's own
    runtime it ran in the real ones, where ``os.execute`` ran a shell command): no such name is there, and a
    function that loops — bare, under ``pcall``, in a coroutine — ends at its limits; the next call runs
    normally."""
    client = sync_client(new_server(), protocol=2)
    marker = tmp_path / "escaped"

    def call(body: bytes) -> Any:
        client.execute_command("FUNCTION", "LOAD", "REPLACE",
                               b"#!lua name=probe\nredis.register_function('f', function() " + body + b" end)")
        return client.execute_command("FCALL", "f", 0)

    for name in (b"os", b"io", b"debug", b"package", b"require", b"python", b"dofile", b"getfenv"):
        with pytest.raises(redis.ResponseError, match=MISSING.format(name.decode())):
            call(b"return type(loadstring('return " + name + b"')())")
    with pytest.raises(redis.ResponseError, match=MISSING.format("os")):
        call(b"return loadstring('os.execute([[touch " + str(marker).encode() + b"]])')()")
    assert not marker.exists()
    for body in (b"while true do end", b"while true do pcall(function() while true do end end) end",
                 b"while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
                 b"while true do coroutine.wrap(function() while true do end end)() end"):
        with pytest.raises(redis.ResponseError, match="emqlab server: the script ran more than"):
            call(body)
        assert call(b"local ok, e = pcall(error, 'x') return {ok and 1 or 0, e}") == [0, b"x"]
    # one match that backtracks for seconds inside the C matcher, where the hook never runs: refused up front
    for body in (b"return string.find(string.rep('a', 600), '.-.-.-b')", b"return ('a'):rep(600):find('.-.-.-b')"):
        with pytest.raises(redis.ResponseError, match="matcher steps"):
            call(body)
        with pytest.raises(redis.ResponseError, match="matcher steps"):
            client.eval(body, 0)
    assert call(b"return {('12-34'):match('(%d+)-(%d+)')}") == [b"12", b"34"]
    client.close()


def test_embedded_server_caps_the_lua_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that fills the Lua heap fails at :data:`emqlab.backend.fakeserver.LUA_MAX_MEMORY` (lowered
    here to keep the test quick) instead of taking the process's memory; the next script runs."""
    monkeypatch.setattr(fakeserver, "LUA_MAX_MEMORY", 32 << 20)
    client = sync_client(new_server(), protocol=2)
    with pytest.raises(redis.ResponseError, match="emqlab server: not enough memory"):
        client.eval(b"local t = {} while true do t[#t + 1] = string.rep('x', 1e6) .. #t end", 0)
    assert client.eval(b"return #string.rep('x', 1000)", 0) == 1000
    client.close()
