"""Python actors for tests/test_pyactors.py: the stalled-finish race written as redis-py calls, and actors
that break the rules (each should be refused with a clear message)."""

from __future__ import annotations

from typing import Any

import redis

from emqlab.protocol.outcome import Outcome, Result

FINISH_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -2 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
redis.call('LREM', KEYS[3], 0, ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
return 0
"""


def finish(r: redis.Redis, q: Any) -> None:
    """W1's finish as separate commands: is the lock mine? clear it, unmark, take out of active, complete."""
    k = q.keys
    if r.get(k.lock("1")) != b"W1:1":
        return
    q.begin("1", "W1:1")
    r.delete(k.lock("1"))
    r.srem(k.stalled, "1")
    r.lrem(k.active, 0, "1")
    r.zadd(k.completed, {"1": q.now()})
    q.end("1", 0)


def sweep(r: redis.Redis, q: Any) -> None:
    """A recovery sweep as separate commands: a marked job without a lock goes back to wait."""
    k = q.keys
    for jid in r.smembers(k.stalled):
        if not r.exists(k.lock(jid.decode())):
            if r.lrem(k.active, 1, jid):
                r.rpush(k.wait, jid)
            r.srem(k.stalled, jid)


def script_finish(r: redis.Redis, q: Any) -> None:
    """The same finish as one script (redis-py's register_script: EVALSHA, SCRIPT LOAD on NOSCRIPT)."""
    k = q.keys
    q.begin("1", "W1:1")
    out = r.register_script(FINISH_LUA)(keys=[k.lock("1"), k.stalled, k.active, k.completed],
                                        args=["W1:1", "1", 1000])
    q.end("1", out)


def transaction_finish(r: redis.Redis, q: Any) -> None:
    """The finish as WATCH / MULTI … EXEC, retried on abort."""
    k = q.keys
    with r.pipeline() as p:
        for _ in range(3):
            try:
                p.watch(k.lock("1"), k.stalled, k.active)
                if p.get(k.lock("1")) != b"W1:1":
                    return
                p.multi()
                p.delete(k.lock("1"))
                p.srem(k.stalled, "1")
                p.lrem(k.active, 0, "1")
                p.zadd(k.completed, {"1": 1000})
                p.execute()
                return
            except redis.WatchError:
                continue


def pipelined_sweep(r: redis.Redis, q: Any) -> None:
    """The sweep's reads in one pipeline round trip, then its writes in another."""
    k = q.keys
    with r.pipeline(transaction=False) as p:
        p.smembers(k.stalled)
        p.exists(k.lock("1"))
        marked, locked = p.execute()
    if b"1" in marked and not locked:
        with r.pipeline(transaction=False) as p:
            p.lrem(k.active, 1, "1")
            p.rpush(k.wait, "1")
            p.srem(k.stalled, "1")
            p.execute()


async def async_finish(r: Any, q: Any) -> None:
    k = q.keys
    if await r.get(k.lock("1")) != b"W1:1":
        return
    await r.delete(k.lock("1"))
    await r.srem(k.stalled, "1")
    await r.lrem(k.active, 0, "1")
    await r.zadd(k.completed, {"1": 1000})


def decoded(r: redis.Redis, q: Any) -> None:
    d = q.client(decode_responses=True)
    if d.get(q.keys.lock("1")) == "W1:1" and d.hgetall(q.keys.job("1"))["name"] == "email":
        d.zadd(q.keys.completed, {"1": 1})
        d.lrem(q.keys.active, 0, "1")


def retry_once(r: redis.Redis, q: Any) -> None:
    """Completes the job; after a lost reply, sends the same commands once more."""
    for _ in range(2):
        try:
            r.zadd(q.keys.completed, {"1": 5})
            r.lrem(q.keys.active, 0, "1")
            return
        except redis.ConnectionError:
            continue


# -- actors that break the rules ------------------------------------------------------------------------------

def outside_key(r: redis.Redis, q: Any) -> None:
    r.get("someone-elses-key")


def outside_eval(r: redis.Redis, q: Any) -> None:
    """An EVAL whose key is outside the run (its script long: a refusal shows it by its SHA1, not its text)."""
    r.eval("-- a long script\n" + "local x = 1\n" * 50 + "return redis.call('GET', KEYS[1])", 1, "someone-elses-key")


def outside_fakeredis(r: redis.Redis, q: Any) -> None:
    import fakeredis

    fakeredis.FakeRedis().set("x", 1)


def outside_live(r: redis.Redis, q: Any) -> None:
    redis.Redis(host="127.0.0.1", port=6379).ping()


def raises(r: redis.Redis, q: Any) -> None:
    r.get(q.keys.lock("1"))
    raise ValueError("boom")


def blocking(r: redis.Redis, q: Any) -> None:
    r.blmove(q.keys.wait, q.keys.active, 0)


def flushes(r: redis.Redis, q: Any) -> None:
    r.flushdb()


async def sleeps(r: Any, q: Any) -> None:
    import asyncio

    await r.get(q.keys.lock("1"))
    await asyncio.sleep(0)


def one_argument(r: redis.Redis) -> None:  # wrong signature
    pass


def readd_in_a_transaction(r: redis.Redis, q: Any) -> None:
    """Job 1 added again under its id, the add script's EVALSHA sent inside MULTI … EXEC with a GET beside
    it (one round trip, two commands): the step that creates the hash is a batch."""
    from emqlab.scripting.calls import add_job_call

    call = add_job_call(q.keys, "again", {}, job_id="1", timestamp=q.now())
    add = r.register_script(q.scripts[call.name].text)
    with r.pipeline(transaction=True) as pipe:
        pipe.get(q.keys.lock("1"))
        add(keys=list(call.keys), args=list(call.args), client=pipe)
        pipe.execute()


def recover_stalled(r: redis.Redis, q: Any) -> None:
    """A user's own recoverer: one pass of emqlab's moveStalledJobsToWait by EVALSHA (the recovery role)."""
    from emqlab.scripting.calls import move_stalled_jobs_to_wait_call

    r.delete(q.keys.stalled_check)  # (the throttle of the previous pass has lapsed)
    call = move_stalled_jobs_to_wait_call(q.keys, 1, 30000, timestamp=q.now())
    r.register_script(q.scripts[call.name].text)(keys=list(call.keys), args=list(call.args))


def sleeps_in_another_thread(r: redis.Redis, q: Any) -> None:
    """While its own code runs, another thread of the process sleeps (a client library's thread, a watchdog):
    that thread is not the actor."""
    import threading
    import time

    slept: list[bool] = []
    t = threading.Thread(target=lambda: (time.sleep(0.001), slept.append(True)))
    t.start()
    t.join()
    r.set(q.keys.key("slept"), "yes" if slept else "no")


def finish_with_status(r: redis.Redis, q: Any) -> None:
    """W1's finish as separate commands that also keep a ``status`` field in the job hash."""
    k = q.keys
    q.begin("1", "W1:1")
    r.lrem(k.active, 0, "1")
    r.zadd(k.completed, {"1": q.now()})
    r.hset(k.job("1"), "status", "done")
    r.hincrby(k.key("stats"), "done", 1)
    q.end("1", 0)


def late_status(r: redis.Redis, q: Any) -> None:
    """A progress report that arrives late: it sets the job's status to running."""
    r.hset(q.keys.job("1"), "status", "running")


def status_rule(final: Any, history: Any) -> Any:
    """A user's own rule in Python: a completed job's status says done."""
    if "completed" in final.placements.get("1", []) and final.jobs["1"].get("status") != "done":
        return f"job 1 is completed but its status says {final.jobs['1'].get('status')!r}"
    return None


def stats_rule(final: Any, history: Any) -> Any:
    """A rule over a key it reads (``reads: [stats]``): the done counter never exceeds 1."""
    stats = final.values.get("stats") or {}
    return int(stats.get("done", 0)) <= 1


def rule_returns(final: Any, history: Any) -> Any:
    """A rule whose answer the test picks (``final.values['answer']``, a key it reads)."""
    import json

    return json.loads(final.values.get("answer") or "null")


def check_rule_arity(final: Any) -> None:
    """A rule with the wrong signature (one argument)."""


def read_only_writes(r: redis.Redis, q: Any) -> None:
    """An EVAL_RO that writes, and one of a script whose shebang allows writes: both refused as Redis does."""
    k = q.keys
    for src in ("return redis.call('del', KEYS[1])", "#!lua\nreturn redis.call('get', KEYS[1])"):
        try:
            out: Any = r.eval_ro(src, 1, k.lock("1"))
        except redis.ResponseError as e:
            out = e
        q.note(Result("eval", outcome=Outcome.of(out)))
