"""A server restart in the middle of a run (issue 15: "after a server restart between stepper steps, redis-py
reconnects silently to an empty database and the run reports no anomaly"): the run stops with a server fault
instead, on a redis-server this test starts, kills and starts again on the same port — with or without
persistence, under the restricted ACL user too (issue 25: without INFO; emqlab.engine.live.ServerWatch)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from emqlab.backend.connect import FaultScope, ServerFault, connect
from emqlab.engine.live import ServerWatch
from emqlab.engine.scenario import load
from emqlab.explore.checked import Runner
from emqlab.scripting import acl
from tests.conftest import free_port, own_redis_server, start_redis_server


def test_a_restart_between_steps_stops_the_run() -> None:
    port = free_port()
    proc = start_redis_server(port)
    try:
        runner = Runner(load("stalled-finish"), "split", connect(f"redis://127.0.0.1:{port}/0"))
        for _ in range(3):
            runner.step("W1")
        proc.kill()
        proc.wait(timeout=10)
        proc = start_redis_server(port)  # the same address, an empty database
        with pytest.raises(ServerFault, match="restarted or failed over"):
            try:
                runner.run()
            except redis.exceptions.ConnectionError:  # (the dropped socket, if redis-py did not retry)
                runner.history()
        runner.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_same_server_raises_nothing() -> None:
    port = free_port()
    proc = start_redis_server(port)
    try:
        with Runner(load("stalled-finish"), "split", connect(f"redis://127.0.0.1:{port}/0")) as runner:
            h = runner.run()
            assert "double-placement" not in h.kinds  # the default run has no preemption
            runner.reset()
            runner.history()
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.live
def test_an_interrupted_constructor_deletes_what_it_wrote() -> None:
    """A SIGTERM (SystemExit) or Ctrl-C while the Runner writes its initial state and starts its actors left the
    run's keys behind (the constructor never returned, so nothing closed it): now it deletes them."""
    from tests.conftest import live_conn

    live = live_conn()
    seen: list[str] = []

    def interrupted(ctx, spec):  # type: ignore[no-untyped-def]
        seen.append(ctx.keys.base)
        assert live.exists(ctx.keys.active)  # the initial state is written by now
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Runner(load("stalled-finish"), "split", connect("live"), factories={"sweep": interrupted})
    assert seen and not list(live.scan_iter(match=seen[0].replace("{", "\\{").replace("}", "\\}") + "*"))


def test_a_restart_with_persistence_stops_a_restricted_users_run(tmp_path: Path) -> None:
    """Issue 25: emqlab read the server's run_id from INFO, which the documented restricted user is denied,
    so under that user a restart went unnoticed. Now the run notices it without INFO — also when the server
    persists its data (AOF), so that the run's keys are still there after the restart: its script cache is
    not (Redis 7.0 persists no script) and its connections were made again."""
    port = free_port()
    options = ("--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path),
               "--user", "emqlab", *acl.setuser_rules("s3cret"))  # (the user outlives the restart)
    proc = start_redis_server(port, *options)
    try:
        user = f"redis://emqlab:s3cret@127.0.0.1:{port}/0"
        runner = Runner(load("stalled-finish"), "split", connect(user))
        for _ in range(3):
            runner.step("W1")
        admin = redis.Redis(port=port)
        before = sorted(admin.scan_iter(match="emq:*"))
        proc.terminate()  # (SIGTERM: the server shuts down as SHUTDOWN does, its AOF written)
        proc.wait(timeout=10)
        proc = start_redis_server(port, *options)
        assert sorted(admin.scan_iter(match="emq:*")) == before and before  # the data survived
        with pytest.raises(ServerFault, match="restarted or failed over") as e:
            try:
                runner.run()
            except redis.exceptions.ConnectionError:  # (the dropped socket, if redis-py did not retry)
                runner.history()
        assert e.value.code == "RESTARTED" and e.value.scope is FaultScope.EXPLORATION
        runner.close()
        assert admin.acl_log() == []  # nothing was refused: no INFO
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_script_flush_or_a_dropped_connection_alone_is_no_restart() -> None:
    """Either of a restart's two traces alone is something else: SCRIPT FLUSH from another client (the probe
    is loaded again), a dropped connection (CLIENT KILL, a network blip: the cache still holds the probe).
    Both at once look like a restart, and are taken for one (the safe side)."""
    with own_redis_server() as url:
        conn = connect(url)
        watch = ServerWatch(conn)
        admin = redis.Redis.from_url(url)
        assert watch.check() == 0
        admin.script_flush()
        assert watch.check() == 0 and watch.check() == 0
        admin.client_kill_filter(_type="normal", skipme=True)
        assert watch.check() == 0
        admin.script_flush()
        admin.client_kill_filter(_type="normal", skipme=True)
        assert watch.check() == 1 and watch.check() == 1
        watch.close()
        admin.close()
