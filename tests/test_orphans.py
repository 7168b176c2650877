"""Nothing outlives emqlab (issue 25, item 5): after `kill -9` of a `--jobs 2` run on a live server, its
fork server, pool workers and resource tracker end within seconds, so a caller that reads the dead
command's output to the end is not kept waiting; and every key the run left has its safety TTL, which a live
run gives a key in the same transaction that creates it."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from emqlab.backend.connect import (
    RUN_INDEX,
    RUN_MARKS,
    SAFETY_TTL_MS,
    Namespace,
    clean,
    command_executor,
    live_url,
    scan_keys,
    unique_queue,
)
from emqlab.backend.namespace import SECRET_ENV, run_mark
from emqlab.engine.live import Safety
from emqlab.protocol.keys import QueueKeys
from tests.conftest import live_conn
from tests.procs import alive, descendants

pytestmark = pytest.mark.live


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc (Linux)")
def test_after_kill_9_of_a_divided_live_run_nothing_of_it_lives_on_and_its_output_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    conn = live_conn()
    # The killed command marks its runs under a secret of its own: they are told from the runs another test
    # worker registers meanwhile (alive, marked under this machine's secret), which nothing here may expire.
    bystander = Namespace(conn, QueueKeys(unique_queue()))  # (such a run, alive all along)
    bystander.claim()
    conn.set(bystander.keys.key("wait"), "x")
    monkeypatch.setenv(SECRET_ENV, secrets.token_hex(32))

    def killed_runs() -> list[str]:
        marks = conn.hgetall(RUN_MARKS)
        return [m.decode() for m in conn.zrange(RUN_INDEX, 0, -1)
                if marks.get(m, b"").decode() == run_mark(m.decode())]

    proc = subprocess.Popen(
        [sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate", "--split", "-s",
         "two-workers", "--preemptions", "6", "--jobs", "2", "--redis", live_url()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "EMQLAB_REDIS_URL": live_url()})
    try:
        helpers: set[int] = set()
        deadline = time.monotonic() + 60
        while len(helpers) < 3 and time.monotonic() < deadline:  # the fork server and two workers at least
            time.sleep(0.2)
            helpers = descendants(proc.pid)
        assert len(helpers) >= 3, "the run did not start its pool"
        time.sleep(1.0)  # the workers are exploring now
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        read: list[bytes] = []
        reader = threading.Thread(target=lambda: read.append(proc.stdout.read() + proc.stderr.read()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(timeout=5)
        assert not reader.is_alive(), f"the dead command's output stays open: {alive(helpers)} still run"
        gone_by = time.monotonic() + 5
        while alive(helpers) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert alive(helpers) == set()
        runs = killed_runs()
        assert runs and all(queue.startswith("q-") for queue in runs)  # (the two-workers scenario's queue is q)
        for queue in runs:
            for key in scan_keys(conn, QueueKeys.from_index_name(queue).pattern):
                assert 0 < conn.pttl(key) <= SAFETY_TTL_MS, key
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in alive(descendants(proc.pid)):
            os.kill(p, signal.SIGKILL)
        for queue in killed_runs():
            conn.zadd(RUN_INDEX, {queue: 1})
        clean(conn)  # (under the killed command's secret: its runs only)
        kept = conn.exists(bystander.keys.key("wait")) and conn.zscore(RUN_INDEX, bystander.keys.name)
        bystander.release()
    assert kept, "the clean-up of the killed command's runs took another run's keys"


def test_a_live_key_has_its_safety_ttl_from_the_command_that_creates_it() -> None:
    """No round trip between a key's creation and its TTL: the command and ``PEXPIRE … NX`` go in one
    MULTI … EXEC, every time a command writes it (a key emptied is gone and written anew); a read goes alone."""
    conn = live_conn()
    ns = Namespace(conn, QueueKeys(unique_queue())).claim()
    safety = Safety(ns)
    sent: list[tuple[bytes, ...]] = []
    executor = command_executor(conn)
    real = executor.transaction  # type: ignore[attr-defined]

    def spy(command: tuple[bytes, ...], after: list[tuple[bytes, ...]]) -> object:
        sent.append(command)
        return real(command, after)

    executor.transaction = spy  # type: ignore[attr-defined]
    run = safety.tracking(executor)
    wait = ns.keys.key("wait").encode()
    try:
        assert run(b"RPUSH", wait, b"1") == 1
        assert 0 < conn.pttl(wait) <= SAFETY_TTL_MS and sent == [(b"RPUSH", wait, b"1")]
        assert run(b"RPUSH", wait, b"2") == 2 and run(b"LRANGE", wait, b"0", b"-1") == [b"1", b"2"]
        assert len(sent) == 2  # the write went with its PEXPIRE again; the read alone
        assert run(b"LPOP", wait, b"2") == [b"1", b"2"] and conn.exists(wait) == 0  # emptied: gone
        assert run(b"RPUSH", wait, b"3") == 1 and 0 < conn.pttl(wait) <= SAFETY_TTL_MS  # created anew, with it
        limiter = ns.keys.key("limiter").encode()
        run(b"INCR", limiter)
        assert conn.pttl(limiter) == -1  # a key whose TTL a script reads never gets one
        x = ns.keys.key("x").encode()
        conn.hset(x, b"f", b"v")  # (written outside the run: not protected)
        with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):  # an error inside the transaction
            run(b"LPUSH", x, b"v")
        assert sent[-1] == (b"LPUSH", x, b"v")
    finally:
        ns.release()
