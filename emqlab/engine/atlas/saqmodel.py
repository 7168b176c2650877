"""SAQ's commands, modelled in our own words as Python actors over redis-py: ``python:
"emqlab.engine.atlas.saqmodel:<actor>"``.

Modelled, not run: SAQ is asyncio; its Redis queue names every key ``saq:<queue>:…`` and ``saq:job:<queue>:…``
(not under a run's prefix without overriding its methods), its dequeue is a blocking ``BLMOVE`` (which
nothing else could ever unblock under the scheduler: one actor runs at a time), every status update also
``PUBLISH``es on a channel (a command on no key, which a scheduled actor may not send: channels are the
whole server's), and its sweep waits on a pub/sub message with a timeout. Each actor sends the commands
SAQ's released code sends for one transition (named in its docstring), in the same round trips, with the
blocking move as its non-blocking form and without the publishes.

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
    or deleted when its ``ttl`` field is ``-1``, SAQ's option to keep none); with ``finish: false`` the job
    is still running when the run ends.
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
    if not q.params.get("finish", True):  # the job is still running when the scenario ends
        return
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
    every job in ``active`` with its record (it runs once per lock period; SAQ judges from that copy). An id
    whose record is gone only leaves ``active`` and ``incomplete``. Each job whose status is not ``active``
    is aborted: one MULTI out of ``queued`` and ``incomplete``, the record ``aborting``; not found in
    ``queued``, out of ``active``. Then, with retries left (the record's ``retries``, default 1, above its
    ``attempts``), it is retried: one MULTI out of ``active`` and ``queued``, back in ``incomplete`` and at
    the tail of ``queued``, the record ``queued``; else one MULTI finishes it ``aborted``. (SAQ waits up to
    ``abort`` seconds for the abort to be seen between the two; the model does not wait.)"""
    k = q.keys
    active, queued, incomplete = k.key("saq:active"), k.key("saq:queued"), k.key("saq:incomplete")
    seen = r.eval("local out = {} for i, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do"
                  " out[i] = {id, redis.call('HGETALL', ARGV[1] .. id)} end return out", 1, active, k.base)
    for job_id, flat in seen:
        record = dict(zip(flat[::2], flat[1::2], strict=True))
        job = job_id.decode()
        if not record:  # SAQ's "missing job": the id only leaves the lists
            with r.pipeline(transaction=True) as tr:
                tr.lrem(active, 0, job).zrem(incomplete, job)
                tr.execute()
            continue
        if record.get(b"status") == b"active":
            continue
        with r.pipeline(transaction=True) as tr:
            tr.lrem(queued, 0, job).zrem(incomplete, job).hset(k.job(job), "status", "aborting")
            dequeued = tr.execute()[0]
        if not dequeued:
            r.lrem(active, 0, job)
        retries, attempts = record.get(b"retries"), record.get(b"attempts")
        if int(retries or 1) > int(attempts or 0):
            with r.pipeline(transaction=True) as tr:
                tr.lrem(active, 1, job).lrem(queued, 1, job).zadd(incomplete, {job: 0}).rpush(queued, job)
                tr.hset(k.job(job), "status", "queued")
                tr.execute()
        else:
            with r.pipeline(transaction=True) as tr:
                tr.lrem(active, 1, job).zrem(incomplete, job).hset(k.job(job), "status", "aborted")
                tr.execute()



def heartbeat_worker(r: Any, q: Any) -> None:
    """A worker running job ``job`` (default ``"1"``, in ``active``): its heartbeat, then its abort check,
    then the job's end. The heartbeat is SAQ's ``job.update()``: before saq#215 it writes the whole record
    from the worker's copy, status included (``active``); in an atomic run (the fix) only ``touched``. The
    abort check (SAQ's worker reads the statuses of the jobs it runs) reads the status: ``aborting`` cancels
    the job and finishes it ``aborted`` (recorded as a ``cancel``), else the job runs to its end and
    finishes ``complete``; either finish is one MULTI out of ``active`` and ``incomplete`` that deletes the
    record (SAQ's ``ttl: -1``: no record kept) and the abort key."""
    k = q.keys
    job = str(q.params.get("job", "1"))
    q.begin(job, q.token())
    if q.mode == "atomic":
        r.hset(k.job(job), "touched", q.now())
    else:
        r.hset(k.job(job), mapping={"status": "active", "touched": q.now()})
    status = r.hget(k.job(job), "status")
    with r.pipeline(transaction=True) as tr:
        tr.lrem(k.key("saq:active"), 1, job).zrem(k.key("saq:incomplete"), job)
        tr.delete(k.job(job), k.key(f"saq:abort:{job}"))
        tr.execute()
    if status == b"aborting":
        from emqlab.protocol.outcome import Outcome, Result

        q.note(Result("cancel", job=job, outcome=Outcome.of(0)))
    q.end(job, 0)


# SAQ's abort, fixed in our own words: the record is written only if it still exists, in the same step
_ABORT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local dequeued = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'aborting')
redis.call('SET', KEYS[4], ARGV[2], 'EX', ARGV[3])
if dequeued == 0 then redis.call('LREM', KEYS[5], 0, ARGV[1]) end
return dequeued
"""


def abort(r: Any, q: Any) -> None:
    """SAQ's ``queue.abort`` of job ``job``, given the job as its caller fetched it (the record read
    first; nothing to abort if it is gone): one MULTI — out of ``queued`` and ``incomplete``, the record
    written whole from that copy with status ``aborting``, the abort key ``saq:abort:<job>`` set for ``ttl``
    seconds (default 5) — then, the job not being in ``queued``, out of ``active``. (SAQ also publishes the
    status; nothing here listens.) In an atomic run, one script of our own that writes only if the record
    still exists."""
    k = q.keys
    job = str(q.params.get("job", "1"))
    ttl = int(q.params.get("ttl", 5))
    record = r.hgetall(k.job(job))
    if not record:
        return
    if q.mode == "atomic":
        r.eval(_ABORT, 5, k.job(job), k.key("saq:queued"), k.key("saq:incomplete"), k.key(f"saq:abort:{job}"),
               k.key("saq:active"), job, "aborted", ttl)
        return
    copy = {a.decode(): b.decode() for a, b in record.items()}
    with r.pipeline(transaction=True) as tr:
        tr.lrem(k.key("saq:queued"), 0, job).zrem(k.key("saq:incomplete"), job)
        tr.hset(k.job(job), mapping={**copy, "status": "aborting"}).setex(k.key(f"saq:abort:{job}"), ttl, "aborted")
        dequeued = tr.execute()[0]
    if not dequeued:
        r.lrem(k.key("saq:active"), 0, job)


def abort_seen(final: Any, history: Any) -> list[str]:
    """A scenario rule: once a job's abort is asked for (the step that writes its ``saq:abort:`` key), a
    worker's read of the job's status never answers ``active``. Names the read, the abort and the last
    write of the status between them."""
    out: list[str] = []
    steps = list(getattr(history, "steps", ()))
    for a in steps:
        aborts = [key for key in a.keys if key.startswith("saq:abort:")]
        if not aborts or a.read_only:
            continue
        job = aborts[0].split(":")[-1]
        for s in steps:
            if s.index > a.index and s.op == "HGET" and s.args[:2] == (job, "status") and s.reply == "active":
                writes = [w for w in steps if a.index < w.index < s.index and job in w.keys and not w.read_only]
                by = f"; {writes[-1].actor}'s {writes[-1].op} (step {writes[-1].index}) wrote it back" if writes else ""
                out.append(f"{s.actor} read job {job}'s status as active (step {s.index}) after {a.actor} had"
                           f" asked to abort it (step {a.index}){by}")
        break
    return out


__all__ = ["abort", "abort_seen", "heartbeat_worker", "sweep", "worker"]
