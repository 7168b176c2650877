"""Nothing left behind (issue 15, item 2): every live run registers its queue in the run index with a lease
it renews; `emqlab clean` deletes the keys of runs whose lease ran out — a run killed with SIGKILL included —
and leaves alive runs and every other key alone; the refusal to run on existing keys names the command; and
every key a killed run leaves has the safety TTL, so it goes even without `emqlab clean`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emqlab.backend.connect import (
    RUN_INDEX,
    RUN_MARKS,
    SAFETY_TTL_FLOOR_MS,
    SAFETY_TTL_MS,
    KeysExist,
    Namespace,
    abandoned_runs,
    clean,
    has_expiry,
    live_url,
    scan_keys,
    unique_queue,
)
from emqlab.engine.runner import LOCK_MS
from emqlab.protocol.keys import QueueKeys
from emqlab.ui.cli import main
from tests.conftest import admin_conn, live_conn

pytestmark = pytest.mark.live


def _expire(conn: redis.Redis, queue: str) -> None:
    conn.zadd(RUN_INDEX, {queue: time.time() * 1000 - 1})  # as if its owner stopped renewing long ago


def test_a_run_is_indexed_while_it_runs_and_gone_from_the_index_when_it_ends() -> None:
    conn = live_conn()
    keys = QueueKeys(unique_queue())
    ns = Namespace(conn, keys).claim()
    try:
        assert conn.zscore(RUN_INDEX, keys.name) > time.time() * 1000
        conn.set(keys.key("wait"), "x")
    finally:
        ns.release()
    assert conn.zscore(RUN_INDEX, keys.name) is None and conn.exists(keys.key("wait")) == 0


def test_clean_deletes_only_the_keys_of_runs_whose_owner_is_gone() -> None:
    conn = live_conn()
    dead, alive = QueueKeys(unique_queue()), QueueKeys(unique_queue())
    near = QueueKeys(unique_queue())  # not indexed: not emqlab's to touch, although it looks like it
    Namespace(conn, dead).claim()
    live_ns = Namespace(conn, alive).claim()
    try:
        for k in (dead, alive, near):
            conn.set(k.key("wait"), "x")
            conn.set(k.job("1"), "y")
        _expire(conn, dead.name)
        runs = {r.queue: r for r in abandoned_runs(conn)}
        assert runs[dead.name].alive is False and runs[dead.name].keys == 2 and runs[alive.name].alive
        res = CliRunner().invoke(main, ["clean", "--redis", live_url(), "--dry-run"])
        assert res.exit_code == 0 and f"would delete 2 key(s) of run emq:{{{dead.name}}}" in res.output
        assert conn.exists(dead.key("wait")) == 1
        res = CliRunner().invoke(main, ["clean", "--redis", live_url()])
        assert f"deleted 2 key(s) of run emq:{{{dead.name}}} (its owner is gone)" in res.output
        assert f"left run emq:{{{alive.name}}} alone" in res.output
        assert list(scan_keys(conn, dead.pattern)) == [] and conn.zscore(RUN_INDEX, dead.name) is None
        assert conn.exists(alive.key("wait"), alive.job("1"), near.key("wait"), near.job("1")) == 4
    finally:
        live_ns.release()
        conn.delete(near.key("wait"), near.job("1"))
        clean(conn)


def test_the_refusal_names_the_clean_command() -> None:
    conn = live_conn()
    keys = QueueKeys(unique_queue())
    conn.set(keys.key("wait"), "x")
    try:
        with pytest.raises(KeysExist, match="`emqlab clean --redis URL` deletes the keys of runs"):
            Namespace(conn, keys).claim()
    finally:
        conn.delete(keys.key("wait"))


def _killed(code: str) -> str:
    """Run ``code`` (it prints its queue's name when it is ready to be killed) in a process, kill it with
    SIGKILL, and return the queue."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "EMQLAB_REDIS_URL": live_url()})
    try:
        assert proc.stdout is not None
        queue = proc.stdout.readline().strip()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        return queue
    finally:
        if proc.poll() is None:
            proc.kill()


def _all_expire(left: list[bytes]) -> None:
    """Every key ``left`` expires within the safety TTL (a lock's own, shorter TTL included); read as the
    admin user (PTTL is the test's command, not emqlab's: a restricted user is not given it)."""
    admin = admin_conn()
    ttls = {k: admin.pttl(k) for k in left}
    admin.close()
    assert all(0 < t <= SAFETY_TTL_MS for t in ttls.values()), ttls


@pytest.mark.parametrize(("scenario", "mode", "steps"), [("two-workers", "split", None),
                                                         ("stalled-finish", "split", 12),
                                                         ("two-workers", "atomic", 3),
                                                         ("stalled-finish", "transaction", 8)])
def test_every_key_a_killed_run_leaves_expires_within_the_safety_ttl(scenario: str, mode: str,
                                                                    steps: int | None) -> None:
    """kill -9 after a run, or in the middle of one (``steps`` steps in, the sweep first): each key it left
    has a TTL of at most SAFETY_TTL_MS, so nothing stays forever even if nobody runs `emqlab clean`."""
    conn = live_conn()
    walk = "r.run()" if steps is None else f"[r.step(r.enabled[-1]) for _ in range({steps}) if not r.done]"
    queue = _killed("from emqlab.schedule import Runner; from emqlab.scenario import load; "
                    "from emqlab.backends import connect; "
                    f"r = Runner(load({scenario!r}), {mode!r}, connect('live')); {walk}; "
                    "print(r.keys.name, flush=True); import time; time.sleep(60)")
    try:
        left = list(scan_keys(conn, QueueKeys(queue).pattern))
        assert left
        _all_expire(left)
    finally:
        _expire(conn, queue)
        clean(conn)


def test_a_run_killed_with_sigkill_is_cleaned_afterwards() -> None:
    conn = live_conn()
    code = ("import sys; from emqlab.schedule import Runner; from emqlab.scenario import load; "
            "from emqlab.backends import connect; r = Runner(load('two-workers'), 'split', connect('live')); "
            "r.run(); print(r.keys.name, flush=True); import time; time.sleep(60)")
    queue = _killed(code)
    try:
        assert queue in {r.queue for r in abandoned_runs(conn)}
        left = list(scan_keys(conn, QueueKeys(queue).pattern))
        assert left  # kill -9: nothing could clean up
        _all_expire(left)
        _expire(conn, queue)
        cleaned = clean(conn)
        assert queue in {r.queue for r in cleaned}
        assert list(scan_keys(conn, QueueKeys(queue).pattern)) == []
    finally:
        clean(conn)


def test_the_safety_ttl_is_no_expiry_to_the_state_reader() -> None:
    assert has_expiry(30_000) and has_expiry(LOCK_MS * 100)  # the protocol's TTLs, a seeded lock's the longest
    assert not has_expiry(SAFETY_TTL_MS) and not has_expiry(-1) and not has_expiry(-2)
    assert SAFETY_TTL_FLOOR_MS > LOCK_MS * 100


# -- clean trusts no name: the run index is writable by whoever holds the documented restricted user --------


def _dumps(conn: redis.Redis, keys: list[str]) -> dict[str, tuple[bytes | None, int]]:
    return {k: (conn.dump(k), conn.execute_command("PEXPIRETIME", k)) for k in keys}  # type: ignore[misc]


def test_a_planted_index_name_never_gets_a_foreign_key_deleted() -> None:
    """Names added to the index by someone else — foreign queues (`q`, `prod`), a glob (`*`), a name of
    emqlab's shape without a mark, with a made-up mark, with the mark of another run — are reported and left
    alone, their keys byte-identical (DUMP and PEXPIRETIME); a real run of ours whose owner is gone is still
    cleaned, and clean exits 0. The names are planted as the live user (the restricted one, when the suite
    runs under it: it may write the index), the foreign keys written and read as the admin."""
    conn, admin = live_conn(), admin_conn()
    ours = QueueKeys(unique_queue())
    Namespace(conn, ours).claim()
    conn.set(ours.key("wait"), "x")
    _expire(conn, ours.name)
    shaped, forged, copied = (QueueKeys(unique_queue()) for _ in range(3))
    foreign = ["emq:{q}:wait", "emq:{prod}:jobs", "emq:{prod}:1", shaped.key("wait"), forged.key("wait"),
               copied.key("wait"), "emq:{q}:1"]
    planted = ["q", "prod", "*", "emq:*", "q-runs", shaped.name, forged.name, copied.name, "x\x1b[2J"]
    try:
        for k in foreign:
            admin.hset(k, mapping={"data": "precious", "n": "1"}) if k.endswith("1") else admin.set(k, "precious")
        admin.pexpire("emq:{q}:1", 3_600_000)
        before = _dumps(admin, foreign)
        conn.zadd(RUN_INDEX, {name: 1 for name in planted})
        conn.hset(RUN_MARKS, mapping={forged.name: "0" * 64, copied.name: conn.hget(RUN_MARKS, ours.name) or b""})
        res = CliRunner().invoke(main, ["clean", "--redis", live_url()])
        assert res.exit_code == 0, res.output
        assert _dumps(admin, foreign) == before
        assert list(scan_keys(conn, ours.pattern)) == []
        assert f"deleted 1 key(s) of run emq:{{{ours.name}}}" in res.output
        for name in planted:
            assert f"left {name!r} in the run index alone" in " ".join(res.output.split()), name
        assert "\x1b" not in res.output  # a name is shown escaped, never sent to the terminal as is
        refused = {r.queue: r.refused for r in abandoned_runs(conn)}
        assert refused["prod"] == "not a name emqlab gives a run"
        assert "no mark of this machine's emqlab" in str(refused[copied.name])
    finally:
        admin.delete(*foreign)
        conn.zrem(RUN_INDEX, *planted)
        conn.hdel(RUN_MARKS, forged.name, copied.name)
        clean(conn)


def test_runs_are_cleaned_across_machines_only_under_a_shared_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run registered under another secret (another machine's) is not this machine's to clean; under the
    same ``EMQLAB_RUN_SECRET`` it is."""
    conn = live_conn()
    keys = QueueKeys(unique_queue())
    monkeypatch.setenv("EMQLAB_RUN_SECRET", "the other machine's secret")
    Namespace(conn, keys).claim()
    conn.set(keys.key("wait"), "x")
    _expire(conn, keys.name)
    try:
        monkeypatch.setenv("EMQLAB_RUN_SECRET", "this machine's secret")
        assert keys.name not in {r.queue for r in clean(conn)} and conn.exists(keys.key("wait"))
        monkeypatch.setenv("EMQLAB_RUN_SECRET", "the other machine's secret")
        assert keys.name in {r.queue for r in clean(conn)} and not conn.exists(keys.key("wait"))
        assert conn.hget(RUN_MARKS, keys.name) is None and conn.zscore(RUN_INDEX, keys.name) is None
    finally:
        conn.delete(keys.key("wait"))
        conn.zrem(RUN_INDEX, keys.name)
        conn.hdel(RUN_MARKS, keys.name)


def test_the_run_secret_is_kept_private_and_reused(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from emqlab.backend import namespace

    monkeypatch.delenv("EMQLAB_RUN_SECRET", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(namespace, "_secret", None)
    first = namespace.run_secret()
    path = tmp_path / "emqlab" / "run-secret"
    assert path.read_bytes() == first and len(first) == 64 and path.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr(namespace, "_secret", None)
    assert namespace.run_secret() == first  # the next process reads the same one
    assert namespace.run_mark("q-0123abcd") != namespace.run_mark("q-0123abce")
