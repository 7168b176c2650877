"""Redis Functions on the embedded server (``FUNCTION LOAD``/``FCALL``) run in the sandbox of its ``EVAL``
scripts: no bytecode, read-only string metatable and library tables, Redis's ``noscript`` refusals,
``cmsgpack`` and ``bit``, and the limits' errors with one ``ERR`` and a message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from emqlab.backend.fakeserver import new_server, sync_client


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = sync_client(new_server(max_seconds=1))
    yield c
    c.close()


def fcall(client: redis.Redis, name: str, body: bytes) -> object:
    """Load a library with one function ``name`` running ``body`` and call it (no keys)."""
    client.execute_command("FUNCTION", "LOAD", "REPLACE", b"#!lua name=lib_" + name.encode()
                           + b"\nredis.register_function('" + name.encode() + b"', function(keys, args) "
                           + body + b" end)")
    return client.execute_command("FCALL", name, 0)


def test_function_cannot_load_bytecode(client: redis.Redis) -> None:
    got = fcall(client, "bc", b"local f, e = loadstring(string.dump(function() return 42 end)) return {type(f), e}")
    assert got[0] == b"nil" and b"char(27)" in got[1]
    with pytest.raises(redis.ResponseError, match="bytecode is refused"):
        client.execute_command("FUNCTION", "LOAD", b"#!lua name=raw\n\x1bLua garbage")


def test_function_string_metatable_is_read_only(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="Attempt to modify a readonly table"):
        fcall(client, "mt", b"getmetatable('').__index = nil")
    with pytest.raises(redis.ResponseError, match="Attempt to modify a readonly table"):
        fcall(client, "st", b"string.rep = nil")
    assert fcall(client, "rep", b"return ('x'):rep(3)") == b"xxx"


@pytest.mark.parametrize("call", [b"'client', 'kill', 'type', 'normal'", b"'config', 'set', 'maxmemory', '1'"])
def test_function_is_refused_noscript_commands(client: redis.Redis, call: bytes) -> None:
    with pytest.raises(redis.ResponseError, match="This Redis command is not allowed from script") as e:
        fcall(client, "bad", b"return redis.call(" + call + b")")
    assert "script: bad, on @user_function:" in str(e.value)


def test_function_has_cmsgpack_and_bit(client: redis.Redis) -> None:
    got = fcall(client, "mods", b"return {cmsgpack.unpack(cmsgpack.pack('hi')), bit.band(7, 3)}")
    assert got == [b"hi", 3]


@pytest.mark.parametrize(("body", "text"), [
    (b"local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end", "emqlab server: "),
    (b"while true do end", "emqlab server: the script ran more than"),
])
def test_function_limit_errors_have_one_err_and_a_message(client: redis.Redis, body: bytes, text: str) -> None:
    conn = client.connection_pool.get_connection("FCALL")
    try:
        conn.send_command("FUNCTION", "LOAD", "REPLACE", b"#!lua name=lim\nredis.register_function('lim', "
                          b"function() " + body + b" end)")
        conn.read_response()
        conn.send_command("FCALL", "lim", 0)
        with pytest.raises(redis.ResponseError) as e:
            conn.read_response()
    finally:
        client.connection_pool.release(conn)
    message = str(e.value)
    assert message.startswith(text) and "ERR" not in message
    assert fcall(client, "after", b"return 1") == 1  # (the server still answers)
