"""A run either completes truthfully or says it could not (issue 15, item 1): an error reply about the
server's state — out of memory here, on a server the test starts itself — stops the run with exit code 4
and a one-line message, instead of becoming the step's answer and a wrong count."""

from __future__ import annotations

import pytest
import redis
from click.testing import CliRunner

from emqlab import scenario
from emqlab.backends import ServerFault, connect, server_fault
from emqlab.cli import main
from emqlab.explore import explore
from tests.conftest import own_redis_server


@pytest.mark.parametrize(("text", "fault"), [
    ("OOM command not allowed when used memory > 'maxmemory'.", True),
    ("READONLY You can't write against a read only replica.", True),
    ("BUSY Redis is busy running a script.", True),
    ("MOVED 3999 127.0.0.1:6381", True),
    ("NOSCRIPT No matching script. Please use EVAL.", True),
    ("ERR Error running script: @user_script:12: OOM command not allowed", True),
    ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
    ("ERR emqlab: opts.token is required", False),
])
def test_server_errors_are_told_from_answers(text: str, fault: bool) -> None:
    assert (server_fault(redis.exceptions.ResponseError(text)) is not None) == fault
    assert server_fault(b"OOM") is None and server_fault(-2) is None
    assert server_fault(redis.exceptions.OutOfMemoryError("command not allowed")) == "OOM command not allowed"


def test_an_out_of_memory_server_stops_the_run_instead_of_answering_it() -> None:
    with own_redis_server("--maxmemory-policy", "noeviction") as url:
        own = redis.Redis.from_url(url)  # (the test's own server: it may be filled and reconfigured)
        own.set("emqlab-test-filler", b"x" * 2_000_000)
        own.config_set("maxmemory", "1mb")
        own.close()
        with pytest.raises(ServerFault) as e:
            explore(scenario.load("stalled-finish"), "atomic", conn=connect(url))
        assert "OOM" in str(e.value) and "\n" not in str(e.value)
        res = CliRunner().invoke(main, ["simulate", "--atomic", "--redis", url])
        assert res.exit_code == 4, res.output
        assert "error:" in res.output and "OOM" in res.output and "the exploration stops" in res.output


def test_a_server_fault_in_the_middle_of_a_run_stops_it_at_that_step() -> None:
    from emqlab.schedule import Runner

    with Runner(scenario.load("stalled-finish"), "split") as r:
        real = r.exec

        def refusing(*command: object) -> object:
            if command[0] == b"ZADD":
                return redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
            return real(*command)

        r.exec = refusing
        with pytest.raises(ServerFault) as e:
            r.run()
    assert str(e.value).startswith("W1's ZADD at step 13 got a server error (READONLY You can't write against a"
                                   " read only replica.): a run cannot go on truthfully")


def test_a_looping_script_on_a_live_server_is_killed_and_the_server_freed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Never hold a shared server (issue 15, item 3): a script step past the socket timeout gets SCRIPT
    KILL from a connection of its own, and the run stops with one line; the server answers again."""
    from emqlab.registry import default_scripts

    (tmp_path / "moveToFinished-14.lua").write_text("local n = 0 while true do n = n + 1 end return n\n")
    looping = default_scripts().overlay(tmp_path)
    with own_redis_server("--lua-time-limit", "50") as url:
        conn = redis.Redis.from_url(url, socket_timeout=2, protocol=2)
        with pytest.raises(ServerFault) as e:
            explore(scenario.load("stalled-finish"), "atomic", conn=conn, scripts=looping)
        assert "the script moveToFinished ran past the socket timeout" in str(e.value)
        assert "emqlab sent SCRIPT KILL and the server is free again" in str(e.value)
        assert redis.Redis.from_url(url).ping() is True


def test_a_script_flush_loop_never_yields_a_wrong_count() -> None:
    """The reproducer of issue 15: SCRIPT FLUSH looping from another client while an atomic exploration runs
    (on a server the test starts). Every EVALSHA that meets NOSCRIPT loads the script and runs it again; a
    second NOSCRIPT in a row stops the run (exit 4). Either way no count includes an error: the claims are
    fakeredis's, or the exploration says it could not finish."""
    import threading

    sc = scenario.load("two-workers")
    expected = explore(sc, "atomic", conn=connect()).claims()
    with own_redis_server() as url:
        stop = threading.Event()

        def flush() -> None:
            flusher = redis.Redis.from_url(url)
            while not stop.is_set():
                flusher.script_flush()
            flusher.close()

        t = threading.Thread(target=flush, daemon=True)
        t.start()
        outcomes = []
        try:
            for _ in range(3):
                try:
                    outcomes.append(explore(sc, "atomic", conn=connect(url)).claims() == expected)
                except ServerFault as e:
                    assert "NOSCRIPT" in str(e) and "the exploration stops" in str(e)
                    outcomes.append(None)
        finally:
            stop.set()
            t.join(timeout=10)
    assert all(o is not False for o in outcomes), outcomes  # never a run that completed with other counts
