"""Resources a caller abandons come back: Lua coroutines of script runs that are not driven to their end
(:meth:`emqlab.scripting.host.ScriptRun.close`), and pooled connections of command executors
(``command_executor(conn).close()``). Also: an executor is a ``send`` for :meth:`ScriptSet.call` (it takes
the str/int arguments the registry passes), on fakeredis and on the live server."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
import redis

from emqlab.backend.connect import Executor, Namespace, command_executor, connect, unique_queue
from emqlab.backend.executor import _FakeDirect
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting.calls import FinishOpts, move_to_finished_call
from emqlab.scripting.host import LuaHost, ScriptRun
from emqlab.scripting.registry import default_scripts
from tests.conftest import live_conn

TS = 1_700_000_000_000
KEYS = QueueKeys("leaks")

# moveToFinished-14 completing a job: R1 EXISTS job (1 = it exists), R2 SCARD dependencies (0 children
# pending) and ZCARD unsuccessful (0 failed children); the run then waits at R4, GET of the lock.
FIRST_REPLIES: list[tuple[bytes, Any]] = [(b"EXISTS", 1), (b"SCARD", 0), (b"ZCARD", 0)]


def start_finish(host: LuaHost, i: int) -> ScriptRun:
    token = f"token-{i}"
    call = move_to_finished_call(KEYS, str(i), token, "completed", {"result": i}, FinishOpts(token=token),
                                 timestamp=TS + i)
    return host.start(default_scripts()["moveToFinished"], call.keys, call.args)


def advance_three(run: ScriptRun, i: int) -> None:
    for name, reply in FIRST_REPLIES:
        assert run.pending is not None and run.pending[0] == name, run.pending
        run.resume(reply)
    assert run.pending == (b"GET", KEYS.lock(i).encode())  # suspended half-way: a run abandoned mid-script


def in_use(conn: redis.Redis) -> int:
    return len(conn.connection_pool._in_use_connections)


# -- Lua runs ---------------------------------------------------------------------------------------------


def test_closed_runs_free_the_lua_heap() -> None:
    host = LuaHost()
    after_first_10 = 0.0
    for i in range(2000):
        run = start_finish(host, i)
        advance_three(run, i)
        run.close()
        if i == 9:
            gc.collect()
            after_first_10 = host.memory_kib()
    gc.collect()
    after_all = host.memory_kib()
    assert host.live_runs == 0
    # before ScriptRun.close existed, the 2,000 suspended coroutines stayed: ~59,000 KiB against ~430
    assert after_all <= 2 * after_first_10, (after_first_10, after_all)


def test_close_is_idempotent_and_final() -> None:
    host = LuaHost()
    run = start_finish(host, 1)
    advance_three(run, 1)
    assert host.live_runs == 1 and not run.closed
    run.close()
    run.close()
    assert run.closed and run.pending is None and not run.done
    assert host.live_runs == 0
    with pytest.raises(RuntimeError, match="closed"):
        run.resume(b"token-1")
    with pytest.raises(RuntimeError, match="closed"):
        run.value()


def test_runs_driven_to_their_end_release_themselves() -> None:
    host = LuaHost()
    # ends with a value: the job does not exist (-1) ...
    ended = start_finish(host, 1)
    ended.resume(0)
    # ... with a Lua error raised in the script ...
    raised = host.start(b"local x = redis.call('GET', KEYS[1]); return x.field", [b"k"], [])
    raised.resume(None)
    # ... with an error reply from redis.call ...
    replied = host.start(b"return redis.call('INCR', KEYS[1])", [b"k"], [])
    replied.resume(redis.exceptions.ResponseError("value is not an integer or out of range"))
    # ... at its first step, with no command at all, and through LuaHost.run against a backend
    none = host.start(b"return 7", [], [])
    with closing(command_executor(connect())) as execute:
        assert host.run(execute, b"redis.call('SET', KEYS[1], '1'); return redis.call('GET', KEYS[1])",
                        [b"k"]) == b"1"
    assert ended.value() == -1 and none.value() == 7
    assert raised.error is not None and replied.error is not None
    assert all(r.done and r.closed and r.pending is None for r in (ended, raised, replied, none))
    assert host.live_runs == 0
    ended.close()  # closing an ended run changes nothing
    assert ended.value() == -1


def test_run_as_context_manager_and_host_run_close_on_error() -> None:
    host = LuaHost()
    with start_finish(host, 1) as run:
        advance_three(run, 1)
        assert host.live_runs == 1
    assert run.closed and host.live_runs == 0

    def failing(*command: Any) -> Any:
        raise redis.exceptions.ConnectionError("backend gone")

    with pytest.raises(redis.exceptions.ConnectionError):
        host.run(failing, b"return redis.call('GET', KEYS[1])", [b"k"])
    assert host.live_runs == 0


def test_runs_dropped_without_close_are_reclaimed() -> None:
    host = LuaHost()
    for i in range(200):
        advance_three(start_finish(host, i), i)  # the run is garbage the moment this returns
    gc.collect()
    assert host.live_runs == 0


# -- executors ---------------------------------------------------------------------------------------------


def test_executors_give_their_connection_back() -> None:
    conn = connect()
    start = in_use(conn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # no silent fallback to the redis-py path
        for i in range(300):  # the pool holds 100: before close() existed, the 101st found none
            ex = command_executor(conn)
            assert isinstance(ex, _FakeDirect)
            assert ex("SET", "k", i) is not None
            ex.close()
            ex.close()
            assert in_use(conn) == start
    assert conn.get("k") == b"299"
    with pytest.raises(RuntimeError, match="closed"):
        ex(b"PING")
    direct = command_executor(conn)
    assert isinstance(direct, _FakeDirect)
    with direct as ex:  # the fakeredis executor is a context manager
        assert in_use(conn) == start + 1
        assert ex(b"PING") is not None
    assert in_use(conn) == start
    with pytest.raises(RuntimeError, match="closed"):
        direct(b"PING")


def test_a_closed_executor_leaves_no_client_state_behind() -> None:
    conn = connect()
    with closing(command_executor(conn)) as ex:
        ex("SELECT", 1)
        ex("SET", "x", "in db 1")
    assert conn.get("x") is None  # the pooled connection is not left on db 1
    assert conn.execute_command("SELECT", 1) and conn.get("x") == b"in db 1"


def test_unclosed_executors_do_not_exhaust_the_pool() -> None:
    conn = connect()
    start = in_use(conn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        for i in range(150):
            ex = command_executor(conn)
            assert isinstance(ex, _FakeDirect)
            ex("SET", "k", i)
            del ex  # collected: its connection is given back by the next executor
    command_executor(conn).close()
    assert in_use(conn) == start


# -- the ScriptSet.call seam --------------------------------------------------------------------------------


def check_seam(conn: redis.Redis, keys: QueueKeys) -> None:
    execute: Executor = command_executor(conn)
    try:
        lock = keys.lock("1")
        conn.set(lock, "tok-1")
        scripts = default_scripts()
        assert scripts.call(execute, "releaseLock", [lock], ["someone else"]) == 0
        assert conn.get(lock) == b"tok-1"
        assert scripts.call(execute, "releaseLock", [lock], ["tok-1"]) == 1
        assert conn.exists(lock) == 0
        # str, int, float and bytes arguments, encoded as redis-py encodes them
        n, f, s, b = keys.key("n"), keys.key("f"), keys.key("s"), keys.key("b")
        execute("SET", n, 7225344000000000)
        execute("SET", f, 0.1)
        execute("SET", s, "héllo")
        execute(b"SET", b.encode(), b"\x00\xff")
        assert execute("MGET", n, f, s, b) == [b"7225344000000000", b"0.1", "héllo".encode(), b"\x00\xff"]
        assert execute("INCRBY", n, -2) == 7225343999999998
        with pytest.raises(redis.exceptions.DataError):
            execute("SET", n, True)  # redis-py refuses booleans
    finally:
        execute.close()


def test_script_set_call_through_executor_on_fakeredis() -> None:
    conn = connect()
    check_seam(conn, QueueKeys("seam"))
    assert in_use(conn) == 0


@pytest.fixture
def live_namespace() -> Iterator[tuple[redis.Redis, QueueKeys]]:
    """A queue of the live server's own for this test: claimed (refused if its keys exist), deleted after."""
    conn = live_conn()
    keys = QueueKeys(unique_queue("leaks"))
    ns = Namespace(conn, keys).claim()
    try:
        yield conn, keys
    finally:
        ns.release()


@pytest.mark.live
def test_script_set_call_through_executor_on_live(live_namespace: tuple[redis.Redis, QueueKeys]) -> None:
    conn, keys = live_namespace
    start = in_use(conn)
    check_seam(conn, keys)
    assert in_use(conn) == start
