"""A server restart in the middle of a run (issue 15: "after a server restart between stepper steps, redis-py
reconnects silently to an empty database and the run reports no anomaly"): the run stops with a server fault
instead, on a redis-server this test starts, kills and starts again on the same port."""

from __future__ import annotations

import pytest
import redis

from emqlab.backend.connect import ServerFault, connect
from emqlab.engine.scenario import load
from emqlab.explore.checked import Runner
from tests.conftest import free_port, start_redis_server


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
