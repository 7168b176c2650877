"""What the client-side host asks a server about its state (:mod:`emqlab.scripting.serverstate`), step by step
against scripted replies: a ``#!lua`` script's check before it runs, a stale replica's ``MASTERDOWN``,
``redis.acl_check_cmd``'s ``ACL WHOAMI`` / ``ACL DRYRUN``, and ``TIME`` where the dialect freezes it. The same
rules against Redis itself: ``tests/test_redis_scripting_cases.py`` (the ``oom_*``, ``noreplicas_*``,
``stale_*``, ``acl_check_*`` cases) and ``tests/test_host_differential.py`` (``TIME``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from emqlab.backend.connect import command_executor, connect
from emqlab.protocol import messages
from emqlab.scripting.dialect import REDIS7, VALKEY
from emqlab.scripting.host import LuaHost, LuaScriptError

MASTERDOWN = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
OOM = "OOM command not allowed when used memory > 'maxmemory'."


def _server(answer: Callable[[tuple[bytes, ...]], Any]) -> tuple[Callable[..., Any], list[tuple[bytes, ...]]]:
    """An executor whose replies ``answer(command)`` gives (an exception is raised), and the commands it got."""
    sent: list[tuple[bytes, ...]] = []

    def execute(*cmd: Any) -> Any:
        words = tuple(w if isinstance(w, bytes) else str(w).encode() for w in cmd)
        sent.append(words)
        out = answer(words)
        if isinstance(out, BaseException):
            raise out
        return out

    return execute, sent


# -- a #!lua script is put to the server first ----------------------------------------------------------------


def test_a_shebang_script_refused_up_front_sends_nothing_else() -> None:
    execute, sent = _server(lambda c: redis.exceptions.OutOfMemoryError(OOM) if c[0] == b"EVAL" else b"v")
    with pytest.raises(LuaScriptError) as e:
        LuaHost().run(execute, "#!lua\nreturn redis.call('get', KEYS[1])", ["k"])
    assert str(e.value) == OOM  # (no script suffix: Redis refused the EVAL itself)
    assert e.value.reply == OOM.encode()
    assert sent == [(b"EVAL", b"#!lua flags=\nreturn 1", b"1", b"k")]  # (its keys too: a cluster routes by them)


def test_the_probe_carries_the_scripts_flags_and_a_pass_runs_the_script() -> None:
    execute, sent = _server(lambda c: 1 if c[0] == b"EVAL" else b"v")
    assert LuaHost().run(execute, "#!lua flags=no-writes,allow-stale\nreturn redis.call('get', KEYS[1])",
                         ["k"]) == b"v"
    assert sent == [(b"EVAL", b"#!lua flags=allow-stale,no-writes\nreturn 1", b"1", b"k"), (b"get", b"k")]


def test_an_error_that_is_no_up_front_refusal_lets_the_script_run() -> None:
    # (a user without the right to EVAL: the server says nothing of the script, which runs as before)
    noperm = redis.exceptions.NoPermissionError("this user has no permissions to run the 'eval' command")
    execute, sent = _server(lambda c: noperm if c[0] == b"EVAL" else b"v")
    assert LuaHost().run(execute, "#!lua\nreturn redis.call('get', KEYS[1])", ["k"]) == b"v"
    assert sent[1:] == [(b"get", b"k")]


def test_no_probe_without_a_shebang_or_when_asked_not_to() -> None:
    execute, sent = _server(lambda c: b"v")
    host = LuaHost()
    host.run(execute, "return redis.call('get', KEYS[1])", ["k"])
    host.run(execute, "#!lua\nreturn redis.call('get', KEYS[1])", ["k"], server_checks=False)
    assert sent == [(b"get", b"k"), (b"get", b"k")]


# -- a stale replica -------------------------------------------------------------------------------------------


def test_masterdown_refuses_the_whole_run_even_under_pcall() -> None:
    host = LuaHost()
    run = host.start("redis.call('select', 1) local r = redis.pcall('get', KEYS[1]) return 'went on'", ["k"],
                     server_checks=True)
    run.resume(b"OK")
    run.resume(redis.exceptions.MasterDownError(MASTERDOWN))
    assert run.pending == (b"SELECT", b"0") and run.restoring  # (the caller's database is still restored)
    run.resume(b"OK")
    with pytest.raises(LuaScriptError) as e:
        run.value()
    assert str(e.value) == MASTERDOWN and e.value.reply == MASTERDOWN.encode()
    assert host.live_runs == 0


def test_masterdown_in_an_allow_stale_script_is_redis_own_refusal_of_the_command() -> None:
    run = LuaHost().start("#!lua flags=allow-stale,no-writes\nreturn redis.pcall('get', KEYS[1]).err", ["k"],
                          server_checks=True)
    run.resume(redis.exceptions.MasterDownError(MASTERDOWN))
    assert run.value() == messages.STALE_REPLICA_COMMAND.encode()


def test_without_server_checks_masterdown_is_the_commands_error() -> None:
    # (start's default, for a run a scheduler steps: the engine's step itself stops at the server fault)
    run = LuaHost().start("return redis.pcall('get', KEYS[1]).err", ["k"])
    run.resume(redis.exceptions.MasterDownError(MASTERDOWN))
    assert run.value() == MASTERDOWN.encode()


# -- redis.acl_check_cmd asks the server ----------------------------------------------------------------------

_ACL = "return {redis.acl_check_cmd('set', KEYS[1], 'v') and 1 or 0, redis.acl_check_cmd('get', KEYS[1]) and 1 or 0}"


def test_acl_check_asks_whoami_once_then_dryrun() -> None:
    run = LuaHost().start(_ACL, ["k"], server_checks=True)
    assert run.pending == (b"ACL", b"WHOAMI")
    run.resume(b"bob")
    assert run.pending == (b"ACL", b"DRYRUN", b"bob", b"set", b"k", b"v")
    run.resume(b"This user has no permissions to run the 'set' command")
    assert run.pending == (b"ACL", b"DRYRUN", b"bob", b"get", b"k")
    run.resume(b"OK")
    assert run.value() == [0, 1]
    assert run.commands == 0 and run.acl_user == b"bob"


def test_acl_check_where_the_server_cannot_tell_answers_true() -> None:
    run = LuaHost().start(_ACL, ["k"], acl_user=b"bob", server_checks=True)
    assert run.pending == (b"ACL", b"DRYRUN", b"bob", b"set", b"k", b"v")  # (the user known: no WHOAMI)
    run.resume(redis.exceptions.NoPermissionError("this user has no permissions to run the 'acl|dryrun' command"))
    run.resume(redis.exceptions.ResponseError("unknown subcommand 'DRYRUN'"))
    assert run.value() == [1, 1]
    run = LuaHost().start(_ACL, ["k"], server_checks=True)
    run.resume(redis.exceptions.NoPermissionError("this user has no permissions to run the 'acl|whoami' command"))
    assert run.pending == (b"ACL", b"WHOAMI")  # (no user learnt: asked again)


def test_acl_check_without_server_checks_does_not_ask() -> None:
    # (start's default: the engine's split runs take no steps of their own for it, the old answer)
    run = LuaHost().start(_ACL, ["k"])
    assert run.done and run.value() == [1, 1]


def test_acl_check_inside_a_c_callback_keeps_the_old_answer() -> None:
    # (nothing yields out of table.sort's comparator: a redis.call there fails, the question is not asked)
    src = ("local seen = {} local t = {3, 1, 2} table.sort(t, function(a, b)"
           " seen[#seen + 1] = redis.acl_check_cmd('set', KEYS[1], 'v') return a < b end) return #seen > 0 and"
           " seen[1] and 1 or 0")
    run = LuaHost().start(src, ["k"], server_checks=True)
    assert run.done and run.value() == 1


def test_run_remembers_the_user_of_its_connection() -> None:
    execute, sent = _server(lambda c: b"bob" if c[1] == b"WHOAMI" else b"OK")
    host = LuaHost()
    assert host.run(execute, _ACL, ["k"]) == [1, 1]
    assert host.run(execute, _ACL, ["k"]) == [1, 1]
    assert [c[1] for c in sent] == [b"WHOAMI", b"DRYRUN", b"DRYRUN", b"DRYRUN", b"DRYRUN"]


def test_acl_check_on_fakeredis_keeps_its_answer() -> None:
    # fakeredis has no ACL DRYRUN: true, as before; the embedded server's own EVAL does not ask at all
    conn = connect()
    with contextlib.closing(command_executor(conn)) as ex:
        assert LuaHost().run(ex, _ACL, ["k"]) == [1, 1]
    assert conn.eval(_ACL, 1, "k") == [1, 1]


# -- TIME where the dialect freezes it ---------------------------------------------------------------------------

_TWO_TIMES = "local a = redis.call('time') local b = redis.call('time') return {a[2], b[2]}"


@pytest.mark.parametrize(("dialect", "second"), [(VALKEY, b"1"), (REDIS7, b"2")])
def test_time_is_the_runs_first_on_valkey_and_still_a_step(dialect: Any, second: bytes) -> None:
    run = LuaHost(dialect=dialect).start(_TWO_TIMES, [])
    assert run.pending == (b"time",)
    run.resume([b"1700000000", b"1"])
    assert run.pending == (b"time",)  # (still sent: the same steps as before)
    run.resume([b"1700000000", b"2"])
    assert run.value() == [b"1", second]
    assert run.commands == 2
