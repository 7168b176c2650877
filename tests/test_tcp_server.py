"""`emqlab server` (issue 28, item 1, part): the embedded server on a TCP port answers redis-py and redis-cli,
QUIT closes the connection after +OK, an error whose text holds a newline goes out as one line, INFO says the
real port, RESP3 works, and the command runs until Ctrl-C."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from emqlab.backend.fakeserver import EmbeddedConnection
from emqlab.backend.tcp import EmbeddedTcp, serve
from tests.conftest import stops_by_default


def _raw(port: int, payload: bytes, *, until_closed: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        out = b""
        deadline = time.time() + 5
        while time.time() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return out + b"<closed>"
            out += chunk
            if not until_closed and out.endswith(b"\r\n"):
                return out
        return out


def test_clients_over_tcp_get_what_a_redis_server_gives() -> None:
    with serve() as tcp:
        r = redis.Redis.from_url(tcp.url)
        assert r.ping() and r.set("k", "v") and r.get("k") == b"v"
        assert r.info("server")["tcp_port"] == tcp.port
        assert r.eval("return {cjson.encode({1, 2}), type(cmsgpack), type(bit)}", 0) == [b"[1,2]", b"table",
                                                                                         b"table"]
        with pytest.raises(redis.ResponseError, match="line one line two"):  # (one line: RESP intact)
            r.eval("error('line one\\nline two')", 0)
        assert r.ping()  # the connection still works after the error
        script = b"error('a\\r\\nb\\nc')"  # (Lua reads the escapes: a CR LF and an LF in the message)
        raw = _raw(tcp.port, b"*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(script), script))
        assert raw.startswith(b"-") and raw.count(b"\r\n") == 1 and b"a  b c" in raw  # (as Redis: each CR, LF a space)
        assert _raw(tcp.port, b"*1\r\n$4\r\nQUIT\r\n", until_closed=True) == b"+OK\r\n<closed>"
        r3 = redis.Redis.from_url(tcp.url, protocol=3)
        assert r3.ping() and r3.hset("h", "f", "1") == 1 and r3.hgetall("h") == {b"f": b"1"}
        if shutil.which("redis-cli"):
            cli = subprocess.run(["redis-cli", "-p", str(tcp.port), "EVAL", "error('x\\ny')", "0"],
                                 capture_output=True, text=True, timeout=10)
            assert "x y" in cli.stdout and "Bad simple string" not in cli.stdout + cli.stderr


def test_the_command_serves_until_ctrl_c() -> None:
    """``emqlab server`` serves until a Ctrl-C (its child started with a terminal's stop signals, whatever the
    suite was started with)."""
    proc = subprocess.Popen([sys.executable, "-m", "emqlab", "server", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=stops_by_default)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("redis://127.0.0.1:")
        assert "Ctrl-C stops it" in proc.stderr.readline()  # (serving: the banner comes last)
        assert redis.Redis.from_url(url).ping()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped" in err, (proc.returncode, out, err)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        res = subprocess.run([sys.executable, "-m", "emqlab", "server", "--port", str(taken.getsockname()[1])],
                             capture_output=True, text=True, timeout=30)
    finally:
        taken.close()
    assert res.returncode == 2 and "cannot listen on" in res.stderr


def test_a_ctrl_c_the_kernel_hands_to_a_serving_thread_still_stops_the_command() -> None:
    """A Ctrl-C to the process goes to any thread that does not block it; when a serving thread took it,
    the command slept on (an hour at a time) and went on serving. Here it is handed to the serving thread
    on purpose: the command still stops, within a second."""
    code = ("import signal, sys, threading, time\n"
            "def kick():\n"  # (once the serving thread is up: a loaded machine starts it late)
            "    while not (serving := [t for t in threading.enumerate() if t.name == 'emqlab-server']):\n"
            "        time.sleep(0.1)\n"
            "    time.sleep(1)\n"
            "    signal.pthread_kill(serving[0].ident, signal.SIGINT)\n"
            "threading.Thread(target=kick, daemon=True).start()\n"
            "sys.argv = ['emqlab', 'server', '--port', '0']\n"
            "from emqlab.ui.entry import entry\n"
            "entry()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=stops_by_default)
    assert done.returncode == 0 and "stopped" in done.stderr, (done.returncode, done.stderr)


def test_a_unix_socket_with_a_connection_per_client(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "emq.sock")
    with serve(unix=path) as srv:
        assert srv.url == f"unix://{path}?db=0"
        one, two = redis.Redis(unix_socket_path=path, db=1), redis.Redis(unix_socket_path=path)
        assert one.set("x", "1") and two.get("x") is None and one.get("x") == b"1"  # (each its own db)
        assert two.ping()
    (tmp_path / "taken").write_text("mine")
    with pytest.raises(FileExistsError), serve(unix=str(tmp_path / "taken")):
        pass
    assert (tmp_path / "taken").read_text() == "mine"


def test_monitor_shows_every_clients_commands_and_a_scripts_own() -> None:
    with serve() as tcp:
        watch = socket.create_connection(("127.0.0.1", tcp.port), timeout=5)
        watch.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        assert watch.recv(16) == b"+OK\r\n"
        r = redis.Redis.from_url(tcp.url)
        r.set("k", "a b")
        r.eval("return redis.call('GET', KEYS[1])", 1, "k")
        seen = b""
        deadline = time.time() + 5
        while b'[0 lua] "GET" "k"' not in seen and time.time() < deadline:
            seen += watch.recv(65536)
        watch.close()
        lines = seen.decode().splitlines()
        assert any(re.fullmatch(r'\+\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] "SET" "k" "a b"', line) for line in lines)
        assert any(line.endswith('[0 lua] "GET" "k"') for line in lines)
        assert r.ping()  # (the monitor gone, the server goes on)


def test_an_in_process_client_still_gets_unknown_command_for_quit_and_monitor() -> None:
    from emqlab.backend.fakeserver import new_server, sync_client

    r = sync_client(new_server())
    for name in ("QUIT", "MONITOR"):  # (only the TCP front end's connections have them)
        with pytest.raises(redis.ResponseError, match="unknown command"):
            r.execute_command(name)
    assert r.ping()


def test_emqlab_server_context_manager_gives_a_url_any_client_can_use(tmp_path: Path) -> None:
    import emqlab

    with emqlab.server() as url:
        assert re.fullmatch(r"redis://127\.0\.0\.1:\d+/0", url)
        r = redis.Redis.from_url(url)
        assert r.eval("return redis.call('set', KEYS[1], ARGV[1])", 1, "k", "v") == b"OK" and r.get("k") == b"v"
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert r.info("server")["tcp_port"] == port
        r.close()
    with pytest.raises(redis.ConnectionError):  # stopped with the block
        redis.Redis(port=port, socket_connect_timeout=1).ping()
    path = str(tmp_path / "emqlab.sock")
    with emqlab.server(unix=path) as url:
        assert url == f"unix://{path}?db=0" and redis.Redis.from_url(url).ping()


def test_the_pytest_fixture_serves_one_test(emqlab_server: EmbeddedTcp) -> None:
    r = redis.Redis(port=emqlab_server.port)
    assert r.set("k", "1") and emqlab_server.server is not None
    assert redis.Redis.from_url(emqlab_server.url).get("k") == b"1"


def test_client_list_gives_each_address_as_one_word(tmp_path: Path) -> None:
    """CLIENT LIST's ``addr`` / ``laddr`` as Redis writes them (``127.0.0.1:50421``; a Unix socket's
    ``/path:0``): BullMQ's ``getWorkers`` splits each line at spaces to read ``name=`` (bullmq-node-suite)."""
    with serve() as tcp:
        one, two = redis.Redis.from_url(tcp.url), redis.Redis.from_url(tcp.url)
        one.client_setname("bull:q")
        line = [ln for ln in two.execute_command("CLIENT", "LIST").decode().split("\n") if "name=bull:q" in ln][0]
        fields = dict(word.split("=", 1) for word in line.split(" "))  # (every word a key=value)
        assert re.fullmatch(r"127\.0\.0\.1:\d+", fields["addr"]) and fields["laddr"] == f"127.0.0.1:{tcp.port}"
        assert two.execute_command("CLIENT", "INFO").decode().split(" ")[0].startswith("addr=127.0.0.1:")
    path = str(tmp_path / "emq.sock")
    with serve(unix=path):
        info = redis.Redis(unix_socket_path=path).execute_command("CLIENT", "INFO").decode()
        assert f"addr={path}:0 laddr={path}:0 " in info


@pytest.mark.parametrize("command", [[b"BLPOP", b"nothing", b"10"],
                                     [b"XREAD", b"BLOCK", b"10000", b"STREAMS", b"nothing", b"$"]])
def test_a_client_hanging_up_in_a_blocking_command_is_let_go_at_once(command: list[bytes]) -> None:
    """Redis closes a connection whose client hung up while it waited in BLPOP / XREAD BLOCK at once; ioredis's
    ``disconnect()`` waits for that close (BullMQ's ``QueueEvents.close()``), so the block's timeout must not."""
    with serve() as tcp:
        s = socket.create_connection(("127.0.0.1", tcp.port), timeout=5)
        s.sendall(b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in command))
        time.sleep(0.3)  # (the command is waiting)
        start = time.monotonic()
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):  # (an empty reply may come first; then the server's close)
            pass
        assert time.monotonic() - start < 10  # (the close comes: the command does not hold the connection)
        s.close()
        assert redis.Redis.from_url(tcp.url).ping()


def test_a_subscriber_gets_another_clients_messages_promptly() -> None:
    """A PUBLISH from another client reaches an idle subscriber at once (its connection looks for pushed
    replies every 10 ms)."""
    with serve() as tcp:
        sub = redis.Redis.from_url(tcp.url).pubsub(ignore_subscribe_messages=True)
        sub.subscribe("news")
        time.sleep(0.3)  # (the subscriber is idle)
        start = time.monotonic()
        assert redis.Redis.from_url(tcp.url).publish("news", "hi") == 1
        message = None
        while message is None and time.monotonic() - start < 5:
            message = sub.get_message(timeout=1)
        # (promptly: well within the 1 s a blocking read of the subscriber's socket would take; generous for a
        # loaded machine, the figure itself is no target here)
        assert message is not None and message["data"] == b"hi" and time.monotonic() - start < 0.9
        sub.close()


def test_replies_are_not_held_by_nagles_algorithm() -> None:
    """Every client socket has TCP_NODELAY, as Redis sets it: without it a small reply waited for the client's
    ACK of the one before (up to its delayed-ACK time, ~40 ms) whenever one client's commands interleave with
    another's on a shared connection (BullMQ's Queue and Worker on one ioredis connection: retryJobs lagged a
    job behind)."""
    with serve() as tcp:
        r = redis.Redis.from_url(tcp.url)
        assert r.ping()
        handlers = list(tcp._tcp.hangups.handlers)
        assert handlers and all(h.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for h in handlers)


_SHAPED = ["return {big_number='123'}", "return {big_number='1\\r\\n2'}", "return {big_number=''}",
           "return {double=1.5}", "return {double=1/3}", "return {map={a=1}}", "return {set={a=true}}",
           "return {verbatim_string={format='txt', string='ab'}}", "return {ok='fine'}",
           "return {1, {big_number='7'}, {set={x=true}}, {map={b=2}}, {double=2}}"]


@pytest.mark.live
def test_resp3_shaped_script_replies_reach_a_resp2_client_as_redis_writes_them() -> None:
    """A script's ``{big_number=…}``, ``{double=…}``, ``{map=…}``, ``{set=…}`` and ``{verbatim_string=…}`` replies
    on the embedded server, over TCP and in process, as Redis 7 writes them for a RESP2 client (the live server
    answers the same scripts)."""
    from tests.conftest import live_conn, live_is_valkey

    live = live_conn()
    with serve() as tcp:
        over_tcp = redis.Redis.from_url(tcp.url, protocol=2)
        for src in _SHAPED:
            if live_is_valkey() and "double" in src:  # (Valkey writes a double's shortest text: its dialect)
                continue
            want = live.eval(src, 0)
            assert over_tcp.eval(src, 0) == want, src
            assert redis.Redis(connection_pool=redis.ConnectionPool(
                connection_class=EmbeddedConnection, server=tcp.server, protocol=2)).eval(src, 0) == want, src


def test_replies_keep_their_type_and_code_and_the_client_its_own_name() -> None:
    """Over TCP a bulk string stays a bulk string and a status reply a status reply, an error reply keeps its
    code, and a client that sent no CLIENT SETINFO is not named after the server's own stand-in connection."""
    def cmd(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    with serve() as tcp:
        assert _raw(tcp.port, cmd(b"SET", b"k", b"v")) == b"+OK\r\n"
        assert _raw(tcp.port, cmd(b"GET", b"k")) == b"$1\r\nv\r\n"
        assert _raw(tcp.port, cmd(b"TYPE", b"k")) == b"+string\r\n"
        assert _raw(tcp.port, cmd(b"EVAL", b"return redis.error_reply('MY code')", b"0")) == b"-MY code\r\n"
        assert _raw(tcp.port, cmd(b"EVAL", b"return {err='no code'}", b"0")) == b"-no code\r\n"
        assert _raw(tcp.port, cmd(b"EVAL", b"return redis.status_reply('FINE')", b"0")) == b"+FINE\r\n"
        assert b"lib-name=redis-py" not in _raw(tcp.port, cmd(b"CLIENT", b"LIST"), until_closed=False)
        # a status reply stays one line (its CR and LF as spaces), and the connection in step
        two = cmd(b"EVAL", b"return {ok='A\\rB\\nC'}", b"0") + cmd(b"PING")
        assert _raw(tcp.port, two, until_closed=False).startswith(b"+A B C\r\n")
        # SCRIPT LOAD compiles first; SCRIPT EXISTS takes a SHA1 in any case, as EVALSHA does
        assert _raw(tcp.port, cmd(b"SCRIPT", b"LOAD", b"return {")).startswith(b"-ERR Error compiling script")
        assert _raw(tcp.port, cmd(b"SCRIPT", b"LOAD", b"#!lua flags=bogus\nreturn 1")) == \
            b"-ERR Unexpected flag in script shebang: bogus\r\n"
        sha = _raw(tcp.port, cmd(b"SCRIPT", b"LOAD", b"return 7")).split(b"\r\n")[1]
        assert _raw(tcp.port, cmd(b"SCRIPT", b"EXISTS", sha, sha.upper())) == b"*2\r\n:1\r\n:1\r\n"


def _refused(port: int, payload: bytes) -> bytes:
    """What the server answers ``payload`` (sent on a connection of its own) until it closes the connection."""
    return _raw(port, payload, until_closed=True)


@pytest.mark.parametrize("payload, error", [
    (b"*1\r\n$999999999999\r\n", b"invalid bulk length"),
    (b"*1\r\n$%d\r\n" % (512 * 1024 * 1024 + 1), b"invalid bulk length"),  # (one past proto-max-bulk-len)
    (b"PING" * (16 * 1024) + b"X", b"too big inline request"),  # (64 KB + 1, no newline yet)
    (b"*1\r\n$" + b"1" * (64 * 1024 + 1), b"too big bulk count string"),
])
def test_an_oversize_request_is_refused_as_redis_refuses_it(payload: bytes, error: bytes) -> None:
    """Redis's limits (proto-max-bulk-len 512 MB, 64 KB inline): refused at once with Redis's text and the
    connection closed — the server used to buffer whatever came; the server goes on serving others."""
    with serve() as tcp:
        assert _refused(tcp.port, payload) == b"-ERR Protocol error: " + error + b"\r\n<closed>"
        assert _raw(tcp.port, b"*1\r\n$4\r\nPING\r\n") == b"+PONG\r\n"


@pytest.mark.parametrize("payload, error", [
    (b"*abc\r\n", b"invalid multibulk length"),
    (b"*3000000000\r\n", b"invalid multibulk length"),
    (b"*1\r\n$abc\r\n", b"invalid bulk length"),
    (b"*1\r\n$+4\r\nPING\r\n", b"invalid bulk length"),
    (b"*1\r\n$-1\r\n", b"invalid bulk length"),
    (b"*1\r\nxyz\r\n", b"expected '$', got 'x'"),
    (b'ECHO "a\r\n', b"unbalanced quotes in request"),
    (b"*1\r\n$4\r\nPING\r\n*x\r\n", b"invalid multibulk length"),  # (the PING before it is answered first)
])
def test_a_malformed_request_gets_redis_protocol_error_before_the_close(payload: bytes, error: bytes) -> None:
    """Each text as a Redis 7 server answers it (the connection used to close without a word)."""
    with serve() as tcp:
        first = b"+PONG\r\n" if payload.startswith(b"*1\r\n$4\r\nPING") else b""
        assert _refused(tcp.port, payload) == first + b"-ERR Protocol error: " + error + b"\r\n<closed>"


def test_requests_are_cut_into_commands_as_redis_cuts_them() -> None:
    """An empty multibulk is skipped, an inline command runs (its quotes read), and a bulk length that does not
    match its data leaves the rest to be read as the next command — as on Redis 7."""
    with serve() as tcp:
        assert _raw(tcp.port, b"*-5\r\n*0\r\n*1\r\n$4\r\nPING\r\n") == b"+PONG\r\n"
        assert _raw(tcp.port, b'ECHO "a\\x41 b"\r\n') == b"$4\r\naA b\r\n"
        assert _raw(tcp.port, b"*1\r\n$3\r\nPINGPONG\r\n", until_closed=False).startswith(
            b"-ERR unknown command 'pin'")


def test_a_fault_inside_a_command_is_answered_and_the_connection_goes_on() -> None:
    """fakeredis raises TypeError in GEORADIUS_RO on a sorted set that is no geo set: an error reply naming
    the command, and the same connection (and the server) still answers."""
    def send(s: socket.socket, *args: bytes) -> bytes:
        s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        out = b""
        while not out.endswith(b"\r\n"):
            chunk = s.recv(65536)
            assert chunk, "the server closed the connection"
            out += chunk
        return out

    with serve() as tcp, socket.create_connection(("127.0.0.1", tcp.port), timeout=5) as s:
        assert send(s, b"ZADD", b"gz", b"1", b"a") == b":1\r\n"
        reply = send(s, b"GEORADIUS_RO", b"gz", b"0", b"0", b"1", b"km")
        assert reply.startswith(b"-ERR emqlab server: internal error in GEORADIUS_RO: TypeError")
        assert reply.count(b"\r\n") == 1
        assert send(s, b"PING") == b"+PONG\r\n"
        assert send(s, b"ZSCORE", b"gz", b"a") == b"$1\r\n1\r\n"
