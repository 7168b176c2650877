"""Actors of the race atlas for queues whose code emqlab cannot fetch at run time: asynq (Go modules) and
Laravel's queue with Horizon (Packagist). Each is a Python actor ``f(r, q)`` (:mod:`emqlab.engine.pyactors`)
that does what the project's client does around its scripts, in emqlab's own words, and sends the scripts
of ``lua/atlas/<project>/`` — models of the project's scripts from its protocol facts, not its code
(``lua/atlas/README.md``). A scenario names them as ``python: "emqlab.engine.atlas.luaqueues:<actor>"``.

The keys sit under the run's base, in the project's own layout: asynq's ``asynq:{<queue>}:<suffix>`` as
``asynq:<suffix>`` (``asynq:pending``, ``asynq:active``, ``asynq:lease``, ``asynq:retry``, the task hashes
``asynq:t:<id>``), Laravel's ``queues:<queue>…`` as ``queues:default``, ``queues:default:reserved`` …, and
Horizon's job records ``horizon:<id>``.

Where a scenario sets the code as reported against its fix, the actor reads the run's mode (``q.mode``): a
split run sends what the report describes (separate round trips, or the released script without a check),
an atomic run the fix (the read and the write in one script, or the script with its check). Each actor's
docstring says which.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from emqlab.scripting.registry import lua_dir

#: asynq's lease (ms; asynq renews a 30 s lease while the handler runs)
ASYNQ_LEASE_MS = 30_000
#: Laravel's retry_after (ms): how long a reservation lasts
LARAVEL_RETRY_AFTER_MS = 90_000


@cache
def _lua(project: str, name: str) -> str:
    """The text of ``lua/atlas/<project>/<name>.lua``."""
    return (lua_dir() / "atlas" / project / f"{name}.lua").read_text("utf-8")


# -- asynq -----------------------------------------------------------------------------------------------------


def _asynq(q: Any, suffix: str) -> str:
    return str(q.keys.key(f"asynq:{suffix}"))


def asynq_worker(r: Any, q: Any) -> None:
    """A worker's turn: dequeue the next pending task (``dequeue.lua``: to active, its state, its lease) and,
    with ``complete: true``, run it and mark it complete for the retention period (``complete.lua``; -3 =
    the task was no longer active). The dequeue is one script; a split run sends its commands one by one.
    ``forward_after_ms``: first, the same server's forwarder runs one pass that long after the virtual now
    (:func:`asynq_forwarder`)."""
    if "forward_after_ms" in q.params:
        r.eval(_lua("asynq", "forward"), 2, _asynq(q, "retry"), _asynq(q, "pending"), _asynq(q, "t:"),
               q.now() + int(q.params["forward_after_ms"]))
    got = r.eval(_lua("asynq", "dequeue"), 3, _asynq(q, "pending"), _asynq(q, "active"), _asynq(q, "lease"),
                 _asynq(q, "t:"), q.now() + ASYNQ_LEASE_MS)
    if got is None:
        return
    task = got.decode()
    q.begin(task, q.token())
    if q.params.get("complete", True):
        q.end(task, r.eval(_lua("asynq", "complete"), 3, _asynq(q, "active"), _asynq(q, "lease"),
                           _asynq(q, "completed"), _asynq(q, "t:"), task, q.now() + 86_400_000))


def asynq_recoverer(r: Any, q: Any) -> None:
    """asynq's recoverer: retry every active task whose lease expired (``after_ms``: the pass runs that
    long after the virtual now, default 0). Split: as reported in asynq#717, the expired leases are listed
    in one round trip and each task retried in its own (``retry.lua``: only a task still active moves; one
    script, as asynq's retry is, sent in a MULTI so that a split run keeps it whole: the gap is between
    the listing and the retry); atomic: the fix, the listing and the retries in one script
    (``recover.lua``)."""
    cutoff = q.now() + int(q.params.get("after_ms", 0))
    keys = (_asynq(q, "lease"), _asynq(q, "active"), _asynq(q, "retry"))
    if q.mode == "atomic":
        r.eval(_lua("asynq", "recover"), 3, *keys, _asynq(q, "t:"), cutoff, q.now())
        return
    for task in r.zrangebyscore(keys[0], "-inf", cutoff):
        pipe = r.pipeline(transaction=True)
        pipe.eval(_lua("asynq", "retry"), 3, keys[1], keys[0], keys[2], _asynq(q, "t:"), task, q.now())
        pipe.execute()


def asynq_enqueue(r: Any, q: Any) -> None:
    """A scheduler's enqueue of its periodic task under the task id ``job`` (asynq's TaskID option):
    ``enqueue.lua``, whose existence check refuses an id already taken. One script; a split run sends its
    check and its writes one by one."""
    job = str(q.params.get("job", "1"))
    r.eval(_lua("asynq", "enqueue"), 2, q.keys.job(job), _asynq(q, "pending"), job,
           json.dumps({"type": str(q.params.get("type", "report:daily"))}), q.now())


def asynq_forwarder(r: Any, q: Any) -> None:
    """asynq's forwarder: the due tasks of the retry set back to pending (``forward.lua``); ``after_ms``: the
    pass runs that long after the virtual now (default 0; a retry's backoff has passed by then)."""
    r.eval(_lua("asynq", "forward"), 2, _asynq(q, "retry"), _asynq(q, "pending"), _asynq(q, "t:"),
           q.now() + int(q.params.get("after_ms", 0)))


# -- Laravel (and Horizon) ------------------------------------------------------------------------------------


def _laravel(q: Any, suffix: str = "") -> str:
    queue = str(q.params.get("queue", "default"))
    return str(q.keys.key(f"queues:{queue}{suffix}"))


def payload(job: str) -> str:
    """The payload that stands for ``job`` in a scenario's initial state (``places:`` with ``json_id: id``:
    the smallest JSON object naming it)."""
    return json.dumps({"id": job}, separators=(",", ":"))


def laravel_migrate(r: Any, q: Any) -> None:
    """A worker's migration of the due jobs of ``from`` (``reserved``, default, or ``delayed``) onto the
    queue, as its pop does first. Split: as reported in laravel/framework#4912, the due jobs are read, then
    removed, then pushed, each in its own round trip; atomic: one script (``migrate.lua``), Laravel's fix."""
    src = _laravel(q, ":" + str(q.params.get("from", "reserved")))
    queue, notify, now = _laravel(q), _laravel(q, ":notify"), q.now()
    if q.mode == "atomic":
        r.eval(_lua("laravel", "migrate"), 3, src, queue, notify, now)
        return
    due = r.zrangebyscore(src, "-inf", now)
    if due:
        r.zremrangebyscore(src, "-inf", now)
        r.rpush(queue, *due)


def laravel_pop(r: Any, q: Any) -> None:
    """A worker's pop, and the job then runs (its execution stays open: the worker is busy with it). Split:
    as before laravel/framework#13035, the payload is taken off the list and filed as reserved in separate
    round trips; atomic: one script (``pop.lua``)."""
    queue, reserved, notify = _laravel(q), _laravel(q, ":reserved"), _laravel(q, ":notify")
    expires = q.now() + LARAVEL_RETRY_AFTER_MS
    if q.mode == "atomic":
        got = r.eval(_lua("laravel", "pop"), 3, queue, reserved, notify, expires)
        job = got[0] if got else None
    else:
        job = r.lpop(queue)
        if job is not None:
            body = json.loads(job)
            body["attempts"] = int(body.get("attempts", 0)) + 1
            r.zadd(reserved, {json.dumps(body, separators=(",", ":")): expires})
            r.lpop(notify)
    if job is not None:
        q.begin(str(json.loads(job)["id"]), q.token())


def laravel_release(r: Any, q: Any) -> None:
    """A worker whose job ``job`` failed releases it to the delayed set (``delay_ms``, default 10 s), from
    the reservation it holds from the start. Split: the release as Laravel sends it (``release.lua``: the
    filing does not depend on the removal); atomic: the guarded fix (``release-guarded.lua``). Its finish
    code is the script's reply (1 released; 0 the job had left the reserved set, queued again already)."""
    job = str(q.params.get("job", "1"))
    q.begin(job, q.token())
    name = "release-guarded" if q.mode == "atomic" else "release"
    reply = r.eval(_lua("laravel", name), 2, _laravel(q, ":delayed"), _laravel(q, ":reserved"), payload(job),
                   q.now() + int(q.params.get("delay_ms", 10_000)))
    q.end(job, reply)



def asynq_leased_while_active(final: Any, history: Any) -> list[str]:
    """The rule ``leased-while-active`` (reads ``asynq:lease``): every task in the active list has a lease.
    The recoverer finds tasks only through the lease set, so an active task without a lease is never
    recovered if its worker is gone. The sentence names the step that put the task in ``asynq:active``."""
    from emqlab.engine.effects import Placed

    leased = set(final.values.get("asynq:lease") or [])
    out = []
    for task, places in sorted(final.placements.items()):
        if "asynq:active" not in places or task in leased:
            continue
        put = next((s for s in reversed(history.steps)
                    if any(isinstance(e, Placed) and e.job == task and e.place == "asynq:active" for e in s.effects)),
                   None)
        how = f" ({put.actor}'s {put.op}, step {put.index}, put it there)" if put is not None else ""
        out.append(f"task {task} is in asynq:active{how} but has no lease in asynq:lease, so no recoverer"
                   " will find it")
    return out


def asynq_retried_once(final: Any, history: Any) -> list[str]:
    """The rule ``retried-once``: a task whose lease expired once is retried once (its hash's ``retried``
    counts the retries): two recoverers that both act on one expiry count two. The sentence names the
    steps that filed the task in ``asynq:retry``."""
    from emqlab.engine.effects import Placed

    out = []
    for task, info in sorted(final.jobs.items()):
        if int(info.get("retried", 0) or 0) <= 1:
            continue
        counted = [f"{s.actor}'s {s.op} (step {s.index})" for s in history.steps
                   if any(isinstance(e, Placed) and e.job == task and e.place == "asynq:retry" for e in s.effects)]
        out.append(f"task {task} was retried {info['retried']} times for one expired lease"
                   + (f": {' and '.join(counted)} each filed it in asynq:retry" if counted else ""))
    return out


def horizon_dispatch(r: Any, q: Any) -> None:
    """A dispatch of job ``job`` with Horizon: the payload onto the queue, and the job's record (status
    ``pending``, in ``horizon:pending_jobs``). Split: as Horizon does it, the push first and the record in
    the next round trip (the record is written when the push's event is handled); atomic: the fix, both in
    one script (``push-recorded.lua``)."""
    job = str(q.params.get("job", "1"))
    body, record, pending, now = payload(job), q.keys.job(job), q.keys.key("horizon:pending_jobs"), q.now()
    if q.mode == "atomic":
        r.eval(_lua("laravel", "push-recorded"), 4, _laravel(q), _laravel(q, ":notify"), record, pending, body,
               job, now)
        return
    r.rpush(_laravel(q), body)
    r.rpush(_laravel(q, ":notify"), 1)
    pipe = r.pipeline(transaction=True)
    pipe.hset(record, mapping={"id": job, "status": "pending", "payload": body, "created_at": now})
    pipe.zadd(pending, {job: now})
    pipe.execute()


def horizon_worker(r: Any, q: Any) -> None:
    """A Horizon worker's turn: pop the next job (``pop.lua``), mark its record ``reserved``, run it, then
    delete its reservation and mark its record ``completed`` (out of ``horizon:pending_jobs``, into
    ``horizon:completed_jobs``) in one MULTI."""
    got = r.eval(_lua("laravel", "pop"), 3, _laravel(q), _laravel(q, ":reserved"), _laravel(q, ":notify"),
                 q.now() + LARAVEL_RETRY_AFTER_MS)
    if not got:
        return
    job = str(json.loads(got[0])["id"])
    q.begin(job, q.token())
    r.hset(q.keys.job(job), mapping={"status": "reserved", "reserved_at": q.now()})
    pipe = r.pipeline(transaction=True)
    pipe.zrem(_laravel(q, ":reserved"), got[1])
    pipe.hset(q.keys.job(job), mapping={"status": "completed", "completed_at": q.now()})
    pipe.zrem(q.keys.key("horizon:pending_jobs"), job)
    pipe.zadd(q.keys.key("horizon:completed_jobs"), {job: q.now()})
    pipe.execute()
    q.end(job, 0)



def horizon_retry_trail(r: Any, q: Any) -> None:
    """Horizon's bookkeeping of a failed job's retries in its record's ``retried_by`` list (JSON): ``op:
    append`` stores a new retry (``retry`` id, status ``pending``), ``op: update`` sets a finished retry's
    status (``status``, default ``completed``); ``parent`` is the failed job. Split: as reported in
    laravel/horizon#1744, the list is read, changed here and written back in separate round trips;
    atomic: one script (``retried-by.lua``), the fix the report proposes."""
    record = q.keys.job(str(q.params.get("parent", "1")))
    retry, op = str(q.params["retry"]), str(q.params.get("op", "append"))
    status = "pending" if op == "append" else str(q.params.get("status", "completed"))
    if q.mode == "atomic":
        r.eval(_lua("laravel", "retried-by"), 1, record, retry, status, op)
        return
    raw = r.hget(record, "retried_by")
    trail = json.loads(raw) if raw else []
    if op == "append":
        trail.append({"id": retry, "status": status})
    else:
        for entry in trail:
            if entry.get("id") == retry:
                entry["status"] = status
    r.hset(record, "retried_by", json.dumps(trail, separators=(",", ":")))


def horizon_trail_kept(final: Any, history: Any) -> list[str]:
    """The rule ``trail-kept`` of ``horizon-retry-trail``: job 1's ``retried_by`` holds both retries, ``r1``
    (which finished: ``completed``) and ``r2`` (stored during the run: ``pending``). The sentence names
    the entry that is missing or stale and the step that wrote the list last."""
    raw = final.jobs.get("1", {}).get("retried_by")
    trail = {e.get("id"): e.get("status") for e in json.loads(raw)} if raw else {}
    wrong = [f"{rid} is {'missing' if rid not in trail else repr(trail[rid])}, not {want!r}"
             for rid, want in (("r1", "completed"), ("r2", "pending")) if trail.get(rid) != want]
    if not wrong:
        return []
    last = next((s for s in reversed(history.steps) if "horizon:1" in s.keys and not s.read_only), None)
    by = f": the last write of the list was {last.actor}'s {last.op} (step {last.index})" if last else ""
    return [f"job 1's retried_by lost an update ({'; '.join(wrong)}){by}"]


# -- Sidekiq ---------------------------------------------------------------------------------------------------


def sidekiq_enq(r: Any, q: Any) -> None:
    """Sidekiq's poller: every due job of the scheduled set (``schedule``) onto its queue (``queue:default``,
    its name in ``queues``). Split: as before sidekiq/sidekiq#1495, the due payloads are read, each is
    removed, and each is pushed whatever its removal answered; atomic: one due payload at a time taken by
    one script (``zpop.lua``) and pushed, Sidekiq's later fix."""
    sched, queue, now = q.keys.key("schedule"), q.keys.key("queue:default"), q.now()
    if q.mode == "atomic":
        while (job := r.eval(_lua("sidekiq", "zpop"), 1, sched, now)) is not None:
            r.sadd(q.keys.key("queues"), "default")
            r.lpush(queue, job)
        return
    for job in r.zrangebyscore(sched, "-inf", now):
        r.zrem(sched, job)
        r.sadd(q.keys.key("queues"), "default")
        r.lpush(queue, job)


__all__ = ["ASYNQ_LEASE_MS", "LARAVEL_RETRY_AFTER_MS", "asynq_enqueue", "asynq_forwarder", "asynq_leased_while_active",
           "asynq_recoverer", "asynq_retried_once", "asynq_worker", "horizon_dispatch", "horizon_retry_trail",
           "horizon_trail_kept", "horizon_worker",
           "laravel_migrate", "laravel_pop", "laravel_release", "payload", "sidekiq_enq"]
