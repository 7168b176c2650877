"""emqlab's queue scripts (lua/*.lua) through the Python API (emqlab.scripting.calls), on fakeredis and the live
server.

Every test asserts the final state of the queue's keys (lists, sets, hashes, event stream), not only the
reply. Timestamps are explicit (a fixed epoch ms); lock and throttle TTLs run on the server's clock, so "time
passing" for the sweep's throttle is simulated by deleting ``stalled-check``, as BullMQ's own tests do.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
import redis

from emqlab.protocol.keys import QueueKeys
from emqlab.scripting import calls as S
from emqlab.scripting.calls import FinishError, FinishOpts

TS = 1_700_000_000_000  # a fixed "now" in ms
MINUTE = 60_000


# -- helpers ------------------------------------------------------------------------------------------------


def t(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def lst(conn: redis.Redis, key: str) -> list[str]:
    return [t(x) for x in conn.lrange(key, 0, -1)]


def zset(conn: redis.Redis, key: str) -> list[str]:
    return [t(x) for x in conn.zrange(key, 0, -1)]


def zscores(conn: redis.Redis, key: str) -> dict[str, int]:
    return {t(m): int(s) for m, s in conn.zrange(key, 0, -1, withscores=True)}


def members(conn: redis.Redis, key: str) -> set[str]:
    return {t(x) for x in conn.smembers(key)}


def fields(conn: redis.Redis, k: QueueKeys, job_id: str) -> dict[str, str]:
    return S.job_fields(conn, k, job_id)


def events(conn: redis.Redis, k: QueueKeys) -> list[dict[str, str]]:
    return [{t(a): t(b) for a, b in entry.items()} for _, entry in conn.xrange(k.events)]


def event_names(conn: redis.Redis, k: QueueKeys) -> list[str]:
    return [e["event"] for e in events(conn, k)]


def snapshot(conn: redis.Redis, k: QueueKeys) -> dict[str, Any]:
    """Every key of the queue with its content (TTL'd strings: value + "has a TTL")."""
    out: dict[str, Any] = {}
    for key in sorted(conn.scan_iter(match=k.pattern, count=500)):
        kind = t(conn.type(key))
        if kind == "string":
            value: Any = (conn.get(key), conn.pttl(key) > 0)
        elif kind == "list":
            value = conn.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(conn.smembers(key))
        elif kind == "zset":
            value = conn.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = conn.hgetall(key)
        elif kind == "stream":
            value = conn.xrange(key)
        else:  # pragma: no cover
            value = kind
        out[t(key)] = value
    return out


def add(conn: redis.Redis, k: QueueKeys, n: int = 1, **kw: Any) -> list[str]:
    ts = kw.pop("timestamp", TS)
    return [S.add_job(conn, k, f"job{i}", {"i": i}, timestamp=ts, **kw) for i in range(n)]


def activate(conn: redis.Redis, k: QueueKeys, token: str = "tok-1", ts: int = TS + 1, **kw: Any) -> S.NextJob:
    nxt = S.move_to_active(conn, k, token, timestamp=ts, **kw)
    assert nxt is not None and nxt.is_job, nxt
    return nxt


def opts(token: str = "tok-1", **kw: Any) -> FinishOpts:
    return FinishOpts(token=token, **kw)


def mark_stalled_by_sweep(conn: redis.Redis, k: QueueKeys) -> None:
    """Run the sweep once (marks every active job) and let its throttle lapse."""
    S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS)
    conn.delete(k.stalled_check)


# -- the happy path -----------------------------------------------------------------------------------------


def test_add_activate_complete(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    assert lst(conn, k.wait) == [jid]
    nxt = activate(conn, k, name="w1", lock_duration=15_000)
    assert nxt.job_id == jid and nxt.payload == {"i": 0} and nxt.get("pb") == "w1"
    assert nxt.attempts_started == 1 and nxt.get("processedOn") == str(TS + 1)
    assert t(conn.get(k.lock(jid))) == "tok-1" and 0 < conn.pttl(k.lock(jid)) <= 15_000
    assert lst(conn, k.active) == [jid] and lst(conn, k.wait) == []

    nxt = S.move_to_completed(conn, k, jid, "tok-1", {"ok": 1}, opts(), fetch_next=False, timestamp=TS + 2)
    assert nxt is None
    assert zscores(conn, k.completed) == {jid: TS + 2}
    assert lst(conn, k.active) == [] and conn.exists(k.lock(jid)) == 0
    f = fields(conn, k, jid)
    assert f["returnvalue"] == '{"ok":1}' and f["finishedOn"] == str(TS + 2) and f["atm"] == "1"
    evs = events(conn, k)
    assert [e["event"] for e in evs] == ["added", "waiting", "active", "completed", "drained"]
    assert evs[3] == {"event": "completed", "jobId": jid, "returnvalue": '{"ok":1}', "prev": "active"}
    assert t(conn.hget(k.meta, "opts.maxLenEvents")) == "10000"


def test_finish_removes_stall_mark_and_writes_fields(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    mark_stalled_by_sweep(conn, k)
    assert members(conn, k.stalled) == {jid}
    S.move_to_failed(conn, k, jid, "tok-1", "boom", opts(), fetch_next=False, timestamp=TS + 5,
                     fields={"stacktrace": ["at line 1"]})
    assert members(conn, k.stalled) == set()
    f = fields(conn, k, jid)
    assert f["failedReason"] == "boom" and f["stacktrace"] == '["at line 1"]'
    assert f["finishedOn"] == str(TS + 5)
    assert zset(conn, k.failed) == [jid]
    failed = [e for e in events(conn, k) if e["event"] == "failed"]
    assert failed == [{"event": "failed", "jobId": jid, "failedReason": "boom", "prev": "active"}]


# -- return codes -------------------------------------------------------------------------------------------


def test_missing_job_is_minus_1(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    add(conn, k)
    before = snapshot(conn, k)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, "nope", "tok-1", 1, opts(), timestamp=TS)
    assert (e.value.code, e.value.code_name) == (-1, "JobNotExist")
    assert str(e.value) == "Missing key for job nope. moveToFinished"
    assert snapshot(conn, k) == before


def test_missing_lock_is_minus_2_and_writes_nothing(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    mark_stalled_by_sweep(conn, k)
    conn.delete(k.lock(jid))  # the lock lapsed
    before = snapshot(conn, k)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2, fields={"x": "y"})
    assert (e.value.code, e.value.code_name, e.value.meaning) == (-2, "JobLockNotExist", "missing lock")
    assert str(e.value) == f"Missing lock for job {jid}. moveToFinished"
    assert snapshot(conn, k) == before  # still active, still marked, no field written


def test_lock_mismatch_is_minus_6_and_writes_nothing(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k, token="tok-2")  # another worker owns it now
    before = snapshot(conn, k)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2)
    assert (e.value.code, e.value.code_name) == (-6, "JobLockMismatch")
    assert str(e.value) == f"Lock mismatch for job {jid}. Cmd moveToFinished from active"
    assert snapshot(conn, k) == before
    assert t(conn.get(k.lock(jid))) == "tok-2"


def test_not_active_is_minus_3_and_writes_nothing(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)  # in wait, never activated
    conn.set(k.lock(jid), "tok-1", px=30_000)
    conn.sadd(k.stalled, jid)
    before = snapshot(conn, k)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2, fields={"x": "y"})
    assert (e.value.code, e.value.code_name) == (-3, "JobNotInState")
    assert str(e.value) == f"Job {jid} is not in the active state. moveToFinished"
    assert snapshot(conn, k) == before  # lock and stall mark kept, no field written


def test_bullmq_minus_3_deletes_the_lock_first(conn: redis.Redis, qkeys: QueueKeys) -> None:
    """The contrast: BullMQ's script learns "not active" from its LREM, after it has released the lock."""
    k = qkeys
    bull = S.ScriptSet.bullmq()
    [jid] = add(conn, k)
    conn.set(k.lock(jid), "tok-1", px=30_000)
    conn.sadd(k.stalled, jid)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2, scripts=bull)
    assert e.value.code == -3
    assert conn.exists(k.lock(jid)) == 0 and members(conn, k.stalled) == set()


def test_pending_children_is_minus_4_keeps_lock(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    conn.sadd(k.job(jid) + ":dependencies", "emq:{other}:9")
    before = snapshot(conn, k)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2)
    assert (e.value.code, e.value.code_name) == (-4, "JobPendingChildren")
    assert snapshot(conn, k) == before and t(conn.get(k.lock(jid))) == "tok-1"
    # failing is allowed with pending children (the check is for completion only)
    S.move_to_failed(conn, k, jid, "tok-1", "nope", opts(), fetch_next=False, timestamp=TS + 3)
    assert zset(conn, k.failed) == [jid]


def test_failed_children_is_minus_9(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    conn.zadd(k.job(jid) + ":unsuccessful", {"emq:{other}:9": TS})
    before = snapshot(conn, k)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2)
    assert (e.value.code, e.value.code_name) == (-9, "JobHasFailedChildren")
    assert snapshot(conn, k) == before


def test_token_zero_skips_lock_handling(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k, token="0")  # fetched without a lock
    assert conn.exists(k.lock(jid)) == 0
    conn.sadd(k.stalled, jid)
    S.move_to_completed(conn, k, jid, "0", "r", opts("0"), fetch_next=False, timestamp=TS + 2)
    assert zset(conn, k.completed) == [jid] and lst(conn, k.active) == []
    assert members(conn, k.stalled) == {jid}  # token "0": no lock released, no stall mark removed
    # a lock someone else holds is left alone too
    [j2] = add(conn, k)
    activate(conn, k, token="tok-9")
    S.move_to_completed(conn, k, j2, "0", "r", opts("0"), fetch_next=False, timestamp=TS + 3)
    assert t(conn.get(k.lock(j2))) == "tok-9" and zset(conn, k.completed) == [jid, j2]


def test_malformed_options_fail_before_any_write(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    before = snapshot(conn, k)
    with pytest.raises(redis.ResponseError, match="keepJobs"):
        S.move_to_completed(conn, k, jid, "tok-1", 1, opts(keep_jobs={"count": "many"}), timestamp=TS + 2)
    assert snapshot(conn, k) == before


# -- fetch next ---------------------------------------------------------------------------------------------


def test_fetch_next_takes_the_waiting_job(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2 = add(conn, k, 2)
    activate(conn, k)
    nxt = S.move_to_completed(conn, k, j1, "tok-1", 1, opts(name="w", lock_duration=9_000), timestamp=TS + 2)
    assert nxt is not None and nxt.job_id == j2 and nxt.get("pb") == "w"
    assert nxt.get("processedOn") == str(TS + 2)
    assert lst(conn, k.active) == [j2] and lst(conn, k.wait) == []
    assert t(conn.get(k.lock(j2))) == "tok-1" and 0 < conn.pttl(k.lock(j2)) <= 9_000
    assert event_names(conn, k)[-2:] == ["completed", "active"]  # no "drained": a job is active
    assert zscores(conn, k.marker) == {"0": 0}


def test_fetch_next_with_nothing_waiting(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    assert S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2) is None
    assert event_names(conn, k)[-2:] == ["completed", "drained"]


def test_fetch_next_reports_the_next_delayed_job(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    [later] = add(conn, k, delay=60_000)
    activate(conn, k)
    nxt = S.move_to_completed(conn, k, jid, "tok-1", 1, opts(), timestamp=TS + 2)
    assert nxt is not None and nxt.is_wait and nxt.delay_until == TS + 60_000
    assert zset(conn, k.delayed) == [later]


def test_move_to_active_on_an_empty_queue(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    assert S.move_to_active(conn, k, "tok-1", timestamp=TS) is None
    assert snapshot(conn, k) == {}


def test_both_fetch_paths_share_one_include() -> None:
    scripts = S.default_scripts()
    for name in ("moveToActive", "moveToFinished"):
        assert b"-- >>> includes/fetchNextJob.lua" in scripts[name].text
        assert scripts[name].text.count(b"local function fetchNextJob(") == 1


# -- pause, concurrency, rate limit, priority, delay ----------------------------------------------------


def test_paused_queue_gives_no_job(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    conn.hset(k.meta, "paused", "1")
    [jid] = add(conn, k)
    assert zset(conn, k.marker) == []  # no wake-up while paused
    assert S.move_to_active(conn, k, "tok-1", timestamp=TS + 1) is None
    assert lst(conn, k.wait) == [jid] and lst(conn, k.active) == []
    conn.hdel(k.meta, "paused")
    assert activate(conn, k).job_id == jid


def test_paused_queue_fetch_next_returns_after_finishing(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2 = add(conn, k, 2)
    activate(conn, k)
    conn.hset(k.meta, "paused", "1")
    assert S.move_to_completed(conn, k, j1, "tok-1", 1, opts(), timestamp=TS + 2) is None
    assert zset(conn, k.completed) == [j1] and lst(conn, k.wait) == [j2]


def test_global_concurrency(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    conn.hset(k.meta, "concurrency", "1")
    add(conn, k, 2)
    activate(conn, k)
    assert S.move_to_active(conn, k, "tok-2", timestamp=TS + 2) is None
    assert len(lst(conn, k.active)) == 1 and len(lst(conn, k.wait)) == 1


def test_rate_limit(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2 = add(conn, k, 2)
    limiter = {"max": 1, "duration": 10_000}
    assert activate(conn, k, limiter=limiter).job_id == j1
    assert t(conn.get(k.limiter)) == "1" and 0 < conn.pttl(k.limiter) <= 10_000
    wait = S.move_to_active(conn, k, "tok-2", timestamp=TS + 2, limiter=limiter)
    assert wait is not None and wait.is_wait and 0 < wait.rate_limit_delay <= 10_000
    assert lst(conn, k.wait) == [j2] and lst(conn, k.active) == [j1]
    # the finish's fetch-next is rate limited the same way
    nxt = S.move_to_completed(conn, k, j1, "tok-1", 1, opts(limiter=limiter), timestamp=TS + 3)
    assert nxt is not None and nxt.rate_limit_delay > 0 and lst(conn, k.wait) == [j2]
    # the window ends: the counter key goes away, the job can be taken
    conn.delete(k.limiter)
    assert activate(conn, k, limiter=limiter).job_id == j2


def test_priority_ordering(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [p3] = add(conn, k, priority=3)
    [p1a] = add(conn, k, priority=1)
    [p1b] = add(conn, k, priority=1)
    [p2] = add(conn, k, priority=2)
    [plain] = add(conn, k)
    assert zset(conn, k.prioritized) == [p1a, p1b, p2, p3]
    assert zscores(conn, k.prioritized)[p2] == 2 * 2**32 + 4  # priority << 32 | pc
    order = [activate(conn, k, ts=TS + 10 + i).job_id for i in range(5)]
    assert order == [plain, p1a, p1b, p2, p3]  # wait first, then by priority, FIFO within one
    assert conn.exists(k.pc) == 1
    assert S.move_to_active(conn, k, "tok-1", timestamp=TS + 20) is None
    assert conn.exists(k.pc) == 0  # the counter restarts once prioritized is empty


def test_lifo(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2 = add(conn, k, 2)
    [j3] = add(conn, k, lifo=True)
    assert [activate(conn, k, ts=TS + i).job_id for i in range(3)] == [j3, j1, j2]


def test_delayed_job_promotion(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [d1] = add(conn, k, delay=5_000)
    [d2] = add(conn, k, delay=5_000)
    assert zscores(conn, k.delayed) == {d1: (TS + 5_000) * 4096, d2: (TS + 5_000) * 4096 + 1}
    assert zscores(conn, k.marker) == {"1": TS + 5_000}
    delayed_ev = [e for e in events(conn, k) if e["event"] == "delayed"]
    assert delayed_ev[0] == {"event": "delayed", "jobId": d1, "delay": str(TS + 5_000)}
    early = S.move_to_active(conn, k, "tok-1", timestamp=TS + 4_999)
    assert early is not None and early.is_wait and early.delay_until == TS + 5_000
    assert lst(conn, k.wait) == []
    nxt = activate(conn, k, ts=TS + 5_000)
    assert nxt.job_id == d1 and nxt.get("delay") == "0"
    assert lst(conn, k.wait) == [d2] and zset(conn, k.delayed) == []
    promoted = [e for e in events(conn, k) if e["event"] == "waiting" and e.get("prev") == "delayed"]
    assert [e["jobId"] for e in promoted] == [d1, d2]


def test_delayed_job_with_priority_is_promoted_to_prioritized(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k, delay=1_000, priority=4)
    assert zset(conn, k.delayed) == [jid]
    assert S.move_to_active(conn, k, "tok-1", timestamp=TS + 500).is_wait  # type: ignore[union-attr]
    conn.hset(k.meta, "paused", "1")  # promote without taking it
    assert S.move_to_active(conn, k, "tok-1", timestamp=TS + 1_000) is None
    assert zset(conn, k.prioritized) == [jid] and zset(conn, k.delayed) == []


# -- keepJobs -----------------------------------------------------------------------------------------------


def run_jobs(conn: redis.Redis, k: QueueKeys, n: int, keep: Any, step: int = 1_000) -> list[str]:
    ids = add(conn, k, n)
    for i, jid in enumerate(ids):
        assert activate(conn, k, ts=TS + i * step).job_id == jid
        S.move_to_completed(conn, k, jid, "tok-1", i, opts(keep_jobs=keep), fetch_next=False,
                            timestamp=TS + i * step + 1)
    return ids


def test_keep_jobs_zero_deletes_the_job(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    conn.rpush(k.job(jid) + ":logs", "line")
    S.move_to_completed(conn, k, jid, "tok-1", 42, opts(keep_jobs={"count": 0}), fetch_next=False,
                        timestamp=TS + 2)
    assert conn.exists(k.job(jid), k.job(jid) + ":logs", k.lock(jid)) == 0
    assert zset(conn, k.completed) == [] and lst(conn, k.active) == []
    assert [e for e in events(conn, k) if e["event"] == "completed"][0]["returnvalue"] == "42"
    # a late duplicate finish finds no job
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "tok-1", 42, opts(), timestamp=TS + 3)
    assert e.value.code == -1


def test_keep_jobs_count(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    ids = run_jobs(conn, k, 4, {"count": 2})
    assert zset(conn, k.completed) == ids[2:]
    assert [conn.exists(k.job(j)) for j in ids] == [0, 0, 1, 1]


def test_keep_jobs_age(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    ids = run_jobs(conn, k, 4, {"age": 2}, step=1_000)  # finished at +1, +1001, +2001, +3001
    # at the last finish (TS+3001) the cutoff is TS+1001: jobs finished at or before it are removed
    assert zset(conn, k.completed) == ids[2:]
    assert [conn.exists(k.job(j)) for j in ids] == [0, 0, 1, 1]


def test_keep_jobs_absent_or_minus_one_keeps_all(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    ids = run_jobs(conn, k, 3, None) + run_jobs(conn, k, 2, -1)
    assert sorted(zset(conn, k.completed)) == sorted(ids)


# -- metrics ------------------------------------------------------------------------------------------------


def test_metrics_across_minutes(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2 = add(conn, k, 2)
    o = opts(max_metrics_size=5)
    activate(conn, k)
    S.move_to_completed(conn, k, j1, "tok-1", 1, o, fetch_next=False, timestamp=TS)
    activate(conn, k, ts=TS + 3 * MINUTE - 1)
    S.move_to_completed(conn, k, j2, "tok-1", 1, o, fetch_next=False, timestamp=TS + 3 * MINUTE)
    meta = {t(a): t(b) for a, b in conn.hgetall(k.metrics("completed")).items()}
    assert meta == {"count": "2", "prevCount": "1", "prevTS": str(TS + 3 * MINUTE)}
    assert lst(conn, k.metrics("completed") + ":data") == ["0", "0", "1"]
    assert conn.exists(k.metrics("failed")) == 0


def test_metrics_are_capped_and_off_by_default(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2, j3 = add(conn, k, 3)
    activate(conn, k)
    S.move_to_completed(conn, k, j1, "tok-1", 1, opts(), fetch_next=False, timestamp=TS)
    assert conn.exists(k.metrics("completed")) == 0
    o = opts(max_metrics_size=3)
    activate(conn, k)
    S.move_to_completed(conn, k, j2, "tok-1", 1, o, fetch_next=False, timestamp=TS)
    activate(conn, k)
    S.move_to_completed(conn, k, j3, "tok-1", 1, o, fetch_next=False, timestamp=TS + 60 * MINUTE)
    # 60 minutes elapsed, but at most 3 points are pushed: the delta (1) for the oldest, then zeros
    assert lst(conn, k.metrics("completed") + ":data") == ["0", "0", "1"]


# -- attempts -----------------------------------------------------------------------------------------------


def test_retry_goes_back_to_wait(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    conn.delete(k.marker)
    assert S.move_to_failed(conn, k, jid, "tok-1", "flaky", opts(attempts=3), fetch_next=False,
                            timestamp=TS + 2) is None
    assert lst(conn, k.wait) == [jid] and lst(conn, k.active) == [] and zset(conn, k.failed) == []
    f = fields(conn, k, jid)
    assert f["atm"] == "1" and f["failedReason"] == "flaky" and "finishedOn" not in f
    assert conn.exists(k.lock(jid)) == 0 and zscores(conn, k.marker) == {"0": 0}
    assert events(conn, k)[-1] == {"event": "waiting", "jobId": jid, "prev": "active"}
    assert "failed" not in event_names(conn, k)


def test_retry_with_backoff_goes_to_delayed(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    S.move_to_failed(conn, k, jid, "tok-1", "flaky", opts(attempts=2, backoff=7_000), fetch_next=False,
                     timestamp=TS + 2)
    due = TS + 2 + 7_000
    assert zscores(conn, k.delayed) == {jid: due * 4096}
    assert zscores(conn, k.marker) == {"0": 0, "1": due}
    assert lst(conn, k.wait) == [] and lst(conn, k.active) == [] and zset(conn, k.failed) == []
    assert fields(conn, k, jid)["delay"] == "7000"
    # nothing is waiting or active any more: "drained" follows (delayed jobs do not count)
    assert events(conn, k)[-2:] == [
        {"event": "delayed", "jobId": jid, "delay": str(due)},
        {"event": "drained"},
    ]
    # once due, it is fetched again: second attempt
    nxt = activate(conn, k, ts=due)
    assert nxt.job_id == jid and nxt.attempts_started == 2 and nxt.attempts_made == 1


def test_attempt_ceiling_fails_and_exhausts(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    o = opts(attempts=2)
    activate(conn, k)
    S.move_to_failed(conn, k, jid, "tok-1", "e1", o, fetch_next=False, timestamp=TS + 2)
    assert lst(conn, k.wait) == [jid]
    activate(conn, k, ts=TS + 3)
    S.move_to_failed(conn, k, jid, "tok-1", "e2", o, fetch_next=False, timestamp=TS + 4)
    assert zscores(conn, k.failed) == {jid: TS + 4} and lst(conn, k.wait) == []
    f = fields(conn, k, jid)
    assert f["atm"] == "2" and f["failedReason"] == "e2" and f["finishedOn"] == str(TS + 4)
    evs = events(conn, k)
    assert evs[-3]["event"] == "failed"
    assert evs[-2] == {"event": "retries-exhausted", "jobId": jid, "attemptsMade": "2"}
    assert evs[-1]["event"] == "drained"


def test_no_attempts_means_no_retry(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    S.move_to_failed(conn, k, jid, "tok-1", "fatal", opts(), fetch_next=False, timestamp=TS + 2)
    assert zset(conn, k.failed) == [jid]
    assert "retries-exhausted" in event_names(conn, k)  # attempts 0: 1 >= 0, as BullMQ


def test_deferred_failure_is_never_retried(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    conn.hset(k.job(jid), "defa", S.STALLED_LIMIT_REASON)
    S.move_to_failed(conn, k, jid, "tok-1", S.STALLED_LIMIT_REASON, opts(attempts=5), fetch_next=False,
                     timestamp=TS + 2)
    assert zset(conn, k.failed) == [jid] and lst(conn, k.wait) == []
    assert "defa" not in fields(conn, k, jid)


# -- the sweep ----------------------------------------------------------------------------------------------


def test_sweep_marks_then_recovers(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    j1, j2 = add(conn, k, 2)
    activate(conn, k, token="a")
    activate(conn, k, token="b")
    # MARK phase: every active job becomes a candidate; nothing recovered (the previous set was empty)
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS) == []
    assert members(conn, k.stalled) == {j1, j2}
    assert 0 < conn.pttl(k.stalled_check) <= 30_000
    # j1's worker died (lock gone); j2's is alive
    conn.delete(k.lock(j1), k.stalled_check, k.marker)
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 30_000) == [j1]
    assert lst(conn, k.wait) == [j1] and lst(conn, k.active) == [j2]
    assert members(conn, k.stalled) == {j2}  # CHECK emptied the set, MARK re-added the live job
    assert fields(conn, k, j1)["stc"] == "1" and "defa" not in fields(conn, k, j1)
    assert zscores(conn, k.marker) == {"0": 0}
    assert events(conn, k)[-2:] == [
        {"event": "waiting", "jobId": j1, "prev": "active"},
        {"event": "stalled", "jobId": j1},
    ]


def test_sweep_is_throttled(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS) == []
    conn.srem(k.stalled, jid)
    conn.delete(k.lock(jid))
    before = snapshot(conn, k)
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 1) == []
    assert snapshot(conn, k) == before  # throttled: no mark, no recovery


def test_sweep_ignores_a_marked_job_that_left_active(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    mark_stalled_by_sweep(conn, k)
    conn.delete(k.lock(jid))
    conn.lrem(k.active, 1, jid)  # e.g. finished by a split finish between its LREM and its SREM
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 1) == []
    assert lst(conn, k.wait) == [] and "stc" not in fields(conn, k, jid)


def test_sweep_stall_limit_sets_deferred_failure(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    mark_stalled_by_sweep(conn, k)
    conn.delete(k.lock(jid))
    assert S.move_stalled_jobs_to_wait(conn, k, 0, 30_000, timestamp=TS + 1) == [jid]
    assert fields(conn, k, jid)["defa"] == S.STALLED_LIMIT_REASON
    assert lst(conn, k.wait) == [jid] and zset(conn, k.failed) == []  # lazy: the next worker fails it
    nxt = activate(conn, k, token="b", ts=TS + 2)
    assert nxt.deferred_failure == S.STALLED_LIMIT_REASON and nxt.stalled_counter == 1
    S.move_to_failed(conn, k, jid, "b", nxt.deferred_failure, opts("b", attempts=3), fetch_next=False,
                     timestamp=TS + 3)
    assert zset(conn, k.failed) == [jid] and "defa" not in fields(conn, k, jid)


def test_sweep_recovery_into_paused_queue_wakes_nobody(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k)
    mark_stalled_by_sweep(conn, k)
    conn.delete(k.lock(jid), k.marker)
    conn.hset(k.meta, "paused", "1")
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 1) == [jid]
    assert lst(conn, k.wait) == [jid] and zset(conn, k.marker) == []


def test_late_finish_after_recovery_is_minus_2_then_minus_6(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k, token="old")
    mark_stalled_by_sweep(conn, k)
    conn.delete(k.lock(jid))
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 1) == [jid]
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "old", 1, opts("old"), timestamp=TS + 2)
    assert e.value.code == -2
    activate(conn, k, token="new", ts=TS + 3)
    with pytest.raises(FinishError) as e:
        S.move_to_completed(conn, k, jid, "old", 1, opts("old"), timestamp=TS + 4)
    assert e.value.code == -6
    S.move_to_completed(conn, k, jid, "new", 1, opts("new"), fetch_next=False, timestamp=TS + 5)
    assert zset(conn, k.completed) == [jid] and lst(conn, k.wait) == []


# -- locks --------------------------------------------------------------------------------------------------


def test_extend_lock_clears_the_stall_mark(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k, lock_duration=1_000)
    mark_stalled_by_sweep(conn, k)
    assert members(conn, k.stalled) == {jid}
    assert S.extend_lock(conn, k, jid, "tok-1", 60_000) is True
    assert members(conn, k.stalled) == set() and 1_000 < conn.pttl(k.lock(jid)) <= 60_000
    # a renewed job survives the next sweep
    conn.delete(k.stalled_check)
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 1) == []
    assert lst(conn, k.active) == [jid]


def test_extend_lock_refuses_a_foreign_or_lapsed_lock(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k, token="owner", lock_duration=5_000)
    mark_stalled_by_sweep(conn, k)
    assert S.extend_lock(conn, k, jid, "intruder", 60_000) is False
    assert t(conn.get(k.lock(jid))) == "owner" and conn.pttl(k.lock(jid)) <= 5_000
    assert members(conn, k.stalled) == {jid}
    conn.delete(k.lock(jid))
    assert S.extend_lock(conn, k, jid, "owner", 60_000) is False
    assert conn.exists(k.lock(jid)) == 0  # a lapsed lock is not revived


def test_release_lock(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    [jid] = add(conn, k)
    activate(conn, k, token="owner")
    assert S.release_lock(conn, k, jid, "other") is False
    assert t(conn.get(k.lock(jid))) == "owner"
    assert S.release_lock(conn, k, jid, "owner") is True
    assert conn.exists(k.lock(jid)) == 0
    assert S.release_lock(conn, k, jid, "owner") is False


# -- add ----------------------------------------------------------------------------------------------------


def test_add_custom_id_duplicate(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    assert S.add_job(conn, k, "first", {"v": 1}, job_id="order-7", timestamp=TS) == "order-7"
    assert S.add_job(conn, k, "second", {"v": 2}, job_id="order-7", timestamp=TS + 1) == "order-7"
    f = fields(conn, k, "order-7")
    assert f["name"] == "first" and f["data"] == '{"v":1}' and f["timestamp"] == str(TS)
    assert lst(conn, k.wait) == ["order-7"]
    assert events(conn, k)[-1] == {"event": "duplicated", "jobId": "order-7"}
    assert t(conn.get(k.id)) == "2"  # the counter moves on every add
    assert S.add_job(conn, k, "third", {}, timestamp=TS) == "3"


def test_add_refuses_parents_and_writes_nothing(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    call = S.add_job_call(k, "child", {}, timestamp=TS)
    call.args[0] = msgpack.packb([k.base, "", "child", TS, "emq:{p}:1", "emq:{p}:1:dependencies",
                                  {"id": "1", "queueKey": "emq:{p}"}], use_bin_type=False)
    with pytest.raises(redis.ResponseError, match="parent jobs are not supported"):
        S.run_call(conn, call)
    assert snapshot(conn, k) == {}


def test_add_stores_the_job_hash(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    jid = S.add_job(conn, k, "email", {"to": "a@b"}, priority=2, attempts=3, timestamp=TS)
    f = fields(conn, k, jid)
    assert f["name"] == "email" and f["data"] == '{"to":"a@b"}' and f["priority"] == "2" and f["delay"] == "0"
    assert f["timestamp"] == str(TS)
    assert event_names(conn, k) == ["added", "waiting"]
    assert zscores(conn, k.marker) == {"0": 0}
