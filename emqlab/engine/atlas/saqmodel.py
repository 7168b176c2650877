"""SAQ's commands, modelled in our own words as Python actors over redis-py: ``python:
"emqlab.engine.atlas.saqmodel:<actor>"``.

Modelled, not run: SAQ is asyncio; its Redis queue names every key ``saq:<queue>:…`` and ``saq:job:<queue>:…``
(not under a run's prefix without overriding its methods), its dequeue is a blocking ``BLMOVE`` (which
nothing else could ever unblock under the scheduler: one actor runs at a time), and its sweep waits on a
pub/sub message with a timeout. Each actor sends the commands SAQ's released code sends for one transition
(named in its docstring), in the same round trips, with the blocking move as its non-blocking form.

Keys, relative to the run's base: ``saq:queued`` (a list, taken from the left), ``saq:active`` (a list),
``saq:incomplete`` (a sorted set of the jobs not finished) and a job's record ``<id>`` (the run's job
hash, standing for SAQ's serialized ``saq:job:<queue>:<id>``; its ``status`` field is SAQ's job status).
"""

from __future__ import annotations

from typing import Any

# SAQ's dequeue, fixed in our own words: the move and the status change in one step
_TAKE = """
local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
if id then redis.call('HSET', ARGV[1] .. id, 'status', 'active') end
return id
"""


def worker(r: Any, q: Any) -> None:
    """A worker that takes the next job and runs it: SAQ's ``dequeue`` (the job moved from ``queued`` to
    ``active``, then its record read), then ``process``, whose first write marks the job ``active``, then
    the job runs and ``finish`` (one MULTI: out of ``active`` and ``incomplete``, the record ``complete``,
    or deleted when its ``ttl`` field is ``-1``, SAQ's option to keep none).
    In an atomic run the move and the ``active`` mark are one script (the fix, in our words)."""
    k = q.keys
    queued, active = k.key("saq:queued"), k.key("saq:active")
    if q.mode == "atomic":
        got = r.eval(_TAKE, 2, queued, active, k.base)
    else:
        got = r.lmove(queued, active, "LEFT", "RIGHT")
    if got is None:
        return
    job = got.decode()
    record = r.hgetall(k.job(job))
    if not record:  # SAQ's dequeue returns no job for an id whose record is gone (a later sweep drops the id)
        return
    q.begin(job, q.token())
    if q.mode != "atomic":  # SAQ's process: the record written whole from the copy read, now "active"
        r.hset(k.job(job), mapping={**{a.decode(): b.decode() for a, b in record.items()}, "status": "active"})
    with r.pipeline(transaction=True) as tr:
        tr.lrem(active, 1, job).zrem(k.key("saq:incomplete"), job)
        if record.get(b"ttl") == b"-1":  # SAQ's ttl -1: no record kept after the finish
            tr.delete(k.job(job))
        else:
            tr.hset(k.job(job), "status", "complete")
        tr.execute()
    q.end(job, 0)


def sweep(r: Any, q: Any) -> None:
    """SAQ's ``sweep`` (give it ``mode: atomic``: SAQ's script is one step in every run). One script reads
    every job in ``active`` with its record (it runs once per lock period). Each job whose status is not
    ``active`` is aborted: one MULTI out of ``queued`` and ``incomplete``, the record ``aborting``; not found
    in ``queued``, out of ``active``. Then, with retries left (the record's ``retries``, default 1, above its
    ``attempts``), it is retried: one MULTI out of ``active`` and ``queued``, back in ``incomplete`` and at
    the tail of ``queued``, the record ``queued``; else one MULTI finishes it ``aborted``. (SAQ waits up to
    ``abort`` seconds for the abort to be seen between the two; the model does not wait.)"""
    k = q.keys
    active, queued, incomplete = k.key("saq:active"), k.key("saq:queued"), k.key("saq:incomplete")
    seen = r.eval("local out = {} for i, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do"
                  " out[i] = {id, redis.call('HGET', ARGV[1] .. id, 'status') or false} end return out",
                  1, active, k.base)
    for job_id, status in seen:
        if status == b"active":
            continue
        job = job_id.decode()
        with r.pipeline(transaction=True) as tr:
            tr.lrem(queued, 0, job).zrem(incomplete, job).hset(k.job(job), "status", "aborting")
            dequeued = tr.execute()[0]
        if not dequeued:
            r.lrem(active, 0, job)
        retries, attempts = r.hmget(k.job(job), "retries", "attempts")
        if int(retries or 1) > int(attempts or 0):
            with r.pipeline(transaction=True) as tr:
                tr.lrem(active, 1, job).lrem(queued, 1, job).zadd(incomplete, {job: 0}).rpush(queued, job)
                tr.hset(k.job(job), "status", "queued")
                tr.execute()
        else:
            with r.pipeline(transaction=True) as tr:
                tr.lrem(active, 1, job).zrem(incomplete, job).hset(k.job(job), "status", "aborted")
                tr.execute()


__all__ = ["sweep", "worker"]
