"""A server restart in the middle of a run (issue 15: "after a server restart between stepper steps, redis-py
reconnects silently to an empty database and the run reports no anomaly"): the run stops with a server fault
instead, on a redis-server this test starts, kills and starts again on the same port."""

from __future__ import annotations

import pytest
import redis

from emqlab.backends import ServerFault, connect
from emqlab.scenario import load
from emqlab.schedule import Runner
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
