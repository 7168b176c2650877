"""arq's commands, modelled in our own words as Python actors over redis-py: ``python:
"emqlab.engine.atlas.arqmodel:<actor>"``.

Modelled, not run: arq is asyncio, and its key names are module constants (``arq:job:``, ``arq:in-progress:``,
``arq:result:``) that no setting moves under a run's prefix; its worker polls on wall-clock timestamps and
runs each job in an event-loop task, which the scheduler cannot order. Each actor sends the commands arq's
released code sends for one transition (named in its docstring), in the same round trips.

Keys, relative to the run's base: the queue ``arq:queue`` (a sorted set of job ids by due time), a job's
definition ``<id>`` (the run's job hash, standing for ``arq:job:<id>``), ``<id>:lock`` (the run's lock
key, standing for ``arq:in-progress:<id>``: ``state.locks`` seeds a job a worker is running),
``arq:retry:<id>`` and ``arq:result:<id>``.
"""

from __future__ import annotations

from typing import Any

QUEUE = "arq:queue"


def _k(q: Any, name: str, job: str) -> str:
    if name == "in-progress":  # the run's lock key stands for it, so state.locks seeds a running job's
        return q.keys.lock(job)
    return q.keys.key(f"arq:{name}:{job}")


def finish(r: Any, q: Any) -> None:
    """A worker that runs job ``job`` (default ``"1"``; its in-progress key seeded) finishes it:
    arq's ``finish_job`` transaction — the result set, the retry counter and the definition deleted, the job
    out of the abort set and the queue (``keep_result: false``: no result, as for a cron job). The
    in-progress key is deleted (arq's releases before the fix for arq#196) or, in an atomic run (unless
    ``keep: false``; ``keep: true`` in any run), kept for 60 s (``keep_cronjob_progress``, arq's later
    releases)."""
    job = str(q.params.get("job", "1"))
    q.begin(job, q.token())
    keep = bool(q.params.get("keep", q.mode == "atomic"))
    with r.pipeline(transaction=True) as tr:
        if keep:
            tr.pexpire(_k(q, "in-progress", job), 60_000)
        if q.params.get("keep_result", True):  # a cron job keeps none (keep_result 0): no result key
            tr.set(_k(q, "result", job), b"ok")
        tr.delete(_k(q, "retry", job), q.keys.job(job))
        tr.zrem(q.keys.key("arq:abort"), job).zrem(q.keys.key(QUEUE), job)
        if not keep:
            tr.delete(_k(q, "in-progress", job))
        tr.execute()
    q.end(job, 0)


def enqueue(r: Any, q: Any) -> None:
    """arq's ``enqueue_job`` with ``_job_id`` (a cron job's id is the same for one intended run): WATCH the
    definition; if neither it nor the result exists, MULTI: the definition and the queue entry. (arq keeps no
    result here: a cron job's ``keep_result`` is 0, so nothing remembers the run.)"""
    job = str(q.params.get("job", "1"))
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(q.keys.job(job))
        if pipe.exists(q.keys.job(job), _k(q, "result", job)):
            pipe.unwatch()
            return
        pipe.multi()
        pipe.hset(q.keys.job(job), mapping={"name": str(q.params.get("name", "cron")), "data": "{}"})
        pipe.zadd(q.keys.key(QUEUE), {job: int(q.params.get("score", 1))})
        try:
            pipe.execute()
        except Exception:  # noqa: BLE001 - a WatchError: another enqueue won
            return


def start(r: Any, q: Any) -> None:
    """arq's ``start_jobs`` for job ``job`` (the poll found it due): WATCH the in-progress key, read whether
    it exists and the job's score; if it is free and still queued, MULTI: PSETEX the in-progress key, and
    the job runs (and finishes: arq's ``finish_job``, the in-progress key deleted)."""
    job = str(q.params.get("job", "1"))
    with r.pipeline(transaction=True) as pipe:
        pipe.watch(_k(q, "in-progress", job))
        ongoing = pipe.exists(_k(q, "in-progress", job))
        score = pipe.zscore(q.keys.key(QUEUE), job)
        if ongoing or not score:
            pipe.unwatch()
            return
        pipe.multi()
        pipe.psetex(_k(q, "in-progress", job), 300_000, b"1")
        try:
            pipe.execute()
        except Exception:  # noqa: BLE001 - a WatchError: another worker started it
            return
    q.begin(job, q.token())
    with r.pipeline(transaction=True) as tr:
        tr.delete(_k(q, "in-progress", job), _k(q, "retry", job), q.keys.job(job))
        tr.zrem(q.keys.key("arq:abort"), job).zrem(q.keys.key(QUEUE), job)
        tr.execute()
    q.end(job, 0)


def status(r: Any, q: Any) -> None:
    """arq's ``Job.status`` of job ``job``: is there a result, is it in progress, is it queued. As arq#329
    reports it, three reads (``split``); in an atomic run, the three in one MULTI (arq's later releases).
    The answer is written to ``arq:seen:<job>`` (our own key, so a rule can read it)."""
    job = str(q.params.get("job", "1"))
    keys = (_k(q, "result", job), _k(q, "in-progress", job))
    if q.mode == "atomic":
        with r.pipeline(transaction=True) as tr:
            tr.exists(keys[0]).exists(keys[1]).zscore(q.keys.key(QUEUE), job)
            done, running, score = tr.execute()
    else:
        done = r.exists(keys[0])
        running = not done and r.exists(keys[1])
        score = None if done or running else r.zscore(q.keys.key(QUEUE), job)
    seen = "complete" if done else "in_progress" if running else "queued" if score is not None else "not_found"
    r.set(_k(q, "seen", job), seen)


def status_found(final: Any, history: Any) -> str | None:
    """A scenario rule (reads ``arq:seen:1``): a reader of a job that existed the whole time never answers
    ``not_found``."""
    seen = (getattr(final, "values", {}) or {}).get("arq:seen:1")
    if isinstance(seen, bytes):
        seen = seen.decode()
    if seen == "not_found":
        return "R1 answered not_found for job 1, which was queued, in progress or complete at every step"
    return None


# the abort, fixed in our own words: the abort is filed only while the job is still queued, in the same step
_ABORT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  return 1
end
return 0
"""


def abort(r: Any, q: Any) -> None:
    """arq's ``Job.abort`` of job ``job``: the job's info read (its definition and its score in the queue),
    then the id filed in the abort set ``arq:abort`` (scored by the time), whether or not the job was still
    there by then. In an atomic run, one script of our own files it only while the job is in the queue."""
    job = str(q.params.get("job", "1"))
    if q.mode == "atomic":
        r.eval(_ABORT, 2, q.keys.key(QUEUE), q.keys.key("arq:abort"), job, q.now())
        return
    with r.pipeline(transaction=False) as p:  # Job.info: the definition and the score, one round trip
        p.hgetall(q.keys.job(job)).zscore(q.keys.key(QUEUE), job)
        p.execute()
    r.zadd(q.keys.key("arq:abort"), {job: q.now()})


def abort_outlives_job(final: Any, history: Any) -> str | None:
    """A scenario rule (reads ``arq:abort``): an id in the abort set belongs to a job that still exists
    (else the abort waits for the next job under that id and aborts it before it starts)."""
    values = getattr(final, "values", {}) or {}
    jobs = getattr(final, "jobs", {}) or {}
    stale = [j for j in values.get("arq:abort") or [] if not (jobs.get(j) or {}).get("exists")]
    if stale:
        return (f"job {', '.join(stale)} is in arq:abort but no longer exists: the next job enqueued under that id"
                " would be aborted before it starts")
    return None


__all__ = ["abort", "abort_outlives_job", "enqueue", "finish", "start", "status", "status_found"]
