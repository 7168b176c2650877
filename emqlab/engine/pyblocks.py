"""Building blocks for scenarios: small Python actors for what the public race reports need beyond emqlab's
built-in actors (``docs/scenarios.md``, "Building blocks" and "The public reports").

Each block is a Python actor ``f(r, q)`` (:mod:`emqlab.engine.pyactors`), named in a scenario file as::

    - {id: P1, python: "emqlab.blocks:progress", with: {job: "1", value: 80}}

``with:`` becomes ``q.params``. A block about one job takes ``job`` (default ``"1"``) and, where a lock is
involved, ``token`` (default: the actor's first token, ``<id>:1`` — what ``state.locks: {"1": <id>}``
writes for it).

Where a report contrasts "separate round trips" with "one script", the block sends **one small Lua script
of this project's own** (an ``EVAL``, or an ``EVALSHA`` of one of emqlab's scripts): in an atomic run it is
one step, in a split run (or with the actor's ``mode: split``) each of its ``redis.call`` commands is one step — as
emqlab's own finish is. Every script checks what it must before it writes, so what ``--atomic`` prevents
and ``--split`` shows is exactly the gap between the check and the write. ``EVAL`` rather than redis-py's
``register_script`` for the blocks' own Lua: the run's script cache starts with emqlab's scripts only, so a
registered script's first call would cost two more scheduling points (NOSCRIPT, then SCRIPT LOAD). The Lua
is kept here as constants (:data:`LUA`), not under ``lua/``: the script set is the ``lua/*.lua`` files.

The blocks (what each does; the keys it touches; the report that needs it):

* :func:`fetch` — move the next job from ``wait`` to ``active`` (or ``into:`` another list), then lock it:
  two commands of one script (wait, the list, the job's lock). Bull's old fetch; reliable fetch (BR-20).
* :func:`progress` — write the job's ``progress`` if its hash still exists (the job hash). BR-11.
* :func:`refresh` — Kue's TTL refresh: re-file a job in the ``active`` index if it is still there
  (active). BR-13.
* :func:`renew` — renew a lock from the renew timer's own connection: emqlab's extendLock (compare, then
  set), or a blind ``SET … PX`` (the lock, stalled). BR-12.
* :func:`promote` — a standalone promoter of due delayed jobs: read them, then ZREM and LPUSH each one
  (delayed, wait). BR-17.
* :func:`finish` — emqlab's moveToFinished under any token: ``"0"`` = an outside complete or fail, a late
  finisher's token, a per-process token shared by several workers (the finish's 14 keys). BR-07, BR-03.
* :func:`record_failure` — a refused finish, then the failure reason and attempt written if the job still
  exists (the finish's keys, the job hash). BR-04.
* :func:`readd` — (remove the job, then) add it again under the same custom id (every placement, the job,
  its lock; addStandardJob's keys). BR-04, BR-11.
* :func:`requeue` — a shutdown requeue gated by the process's lock token (the lock, active, wait). BR-19.
* :func:`success` — a success path that keeps a started registry: one script, or in ``--transaction``
  runs WATCH/MULTI/EXEC with the reported retry that drops a step (the lock, the registry, completed, the
  job). BR-15.
* :func:`clean` — a cleanup of a registry of leases kept as a sorted set by expiry score (the registry,
  failed or wait, the jobs' locks). BR-15, BR-16.
* :func:`retry_all` — "retry all": failed jobs back to ``wait`` while the failed set is not empty (failed,
  wait). BR-21.
* :func:`snapshot_sweep` — Bull's old stalled-job pass: a snapshot of ``active``, checks, ``SET NX``, a
  re-run (active, completed, the jobs, their locks). BR-01.
* :func:`reliable_worker`, :func:`recover_by_identity` — reliable fetch into a per-host in-flight list;
  a startup recovery that requeues the whole list (wait, ``private:<host>``, completed). BR-20.
* :func:`scheduler_poll`, :func:`enqueue_at` — resque-scheduler's delayed jobs: one list per timestamp
  (``delayed:<at>``) and an index of the timestamps; a poll pops the next job to ``wait`` and deletes a list
  it left empty ("empty? then delete"); a producer pushes a job for a timestamp, then indexes it (the list,
  the index, wait). BR-18.

Per-process shared tokens (BR-03) are a parameter, not a block: give two actors the same ``token:``.

Results: a block records what it did like emqlab's own actors do (``finish:1:-2``, ``cancel:1:0``,
``extend:0``, ``sweep:1``, ``add:1``), so a scenario's ``expect: codes:`` can name a block's finish and
cancel codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis

from emqlab.protocol import messages

# -- the blocks' own Lua --------------------------------------------------------------------------------------

#: :func:`fetch`: KEYS wait, the list the job moves to; ARGV keys prefix, token ("" = no lock), lock ms.
FETCH_LUA = """
local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not id then return false end
if ARGV[2] ~= '' then
  redis.call('SET', ARGV[1] .. id .. ':lock', ARGV[2], 'PX', ARGV[3])
end
return id
"""

#: :func:`progress`: KEYS the job hash; ARGV progress. -1 = no such job (written nothing), 0 = written.
PROGRESS_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'progress', ARGV[1])
return 0
"""

#: :func:`refresh`: KEYS active; ARGV job id. Re-files the job at the tail of the active index (its
#: deadline is now the latest) if it is still there; 0 = it had left, nothing written.
REFRESH_LUA = """
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return 0 end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('RPUSH', KEYS[1], ARGV[1])
return 1
"""

#: :func:`promote`: KEYS delayed, wait; ARGV the highest due score, "1" = push only what this ZREM removed.
PROMOTE_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local pushed = 0
for _, id in ipairs(due) do
  local removed = redis.call('ZREM', KEYS[1], id)
  if removed == 1 or ARGV[2] ~= '1' then
    redis.call('LPUSH', KEYS[2], id)
    pushed = pushed + 1
  end
end
return pushed
"""

#: :func:`record_failure`: KEYS the job hash; ARGV reason. -1 = no such job (written nothing).
RECORD_FAILURE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'failedReason', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'atm', 1)
return 0
"""

#: :func:`readd` (remove: true): KEYS wait, active, delayed, prioritized, completed, failed, stalled, the job
#: hash, its lock; ARGV job id. Job.remove's shape: out of every structure, then the hash and the lock.
REMOVE_LUA = """
for i = 1, 2 do redis.call('LREM', KEYS[i], 0, ARGV[1]) end
for i = 3, 6 do redis.call('ZREM', KEYS[i], ARGV[1]) end
redis.call('SREM', KEYS[7], ARGV[1])
redis.call('DEL', KEYS[8], KEYS[9])
return 1
"""

#: :func:`requeue`: KEYS the lock, active, wait; ARGV token, job id. 0 = the lock is not the process's.
REQUEUE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('LREM', KEYS[2], 0, ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[2])
return 1
"""

#: :func:`success` (one script): KEYS lock, started, completed, the job hash; ARGV token, job id, now.
#: -2 = the lock is not the token's (nothing written).
SUCCESS_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -2 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[4], 'status', 'finished', 'finishedOn', ARGV[3])
return 0
"""

#: :func:`clean`: KEYS the registry, the target (failed ZSET or wait LIST); ARGV keys prefix, now, "failed" or
#: "wait". An entry whose score (expiry) has passed and whose job has no lock is abandoned: out of the
#: registry, into the target. Returns the ids.
CLEAN_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
local moved = {}
for _, id in ipairs(due) do
  if redis.call('EXISTS', ARGV[1] .. id .. ':lock') == 0 then
    redis.call('ZREM', KEYS[1], id)
    if ARGV[3] == 'failed' then
      redis.call('ZADD', KEYS[2], ARGV[2], id)
      redis.call('HSET', ARGV[1] .. id, 'failedReason', 'abandoned')
    else
      redis.call('RPUSH', KEYS[2], id)
    end
    moved[#moved + 1] = id
  end
end
return moved
"""

#: :func:`retry_all`: KEYS failed, wait; ARGV the most moves, "1" = bounded by the size read at the start.
RETRY_ALL_LUA = """
local most = tonumber(ARGV[1])
if ARGV[2] == '1' then most = math.min(most, redis.call('ZCARD', KEYS[1])) end
local moved = 0
while moved < most and (ARGV[2] == '1' or redis.call('ZCARD', KEYS[1]) > 0) do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then break end
  redis.call('LPUSH', KEYS[2], popped[1])
  moved = moved + 1
end
return moved
"""

#: :func:`recover_by_identity`: KEYS the host's in-flight list, wait. Every id in the list goes back.
RECOVER_LUA = """
local moved = 0
while redis.call('RPOPLPUSH', KEYS[1], KEYS[2]) do moved = moved + 1 end
return moved
"""

#: :func:`reliable_worker`'s finish: KEYS the in-flight list, completed; ARGV job id, now.
RELIABLE_FINISH_LUA = """
redis.call('LREM', KEYS[1], -1, ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 0
"""

#: :func:`snapshot_sweep`: KEYS active, completed; ARGV keys prefix, token, lock ms. Every job in a snapshot of
#: ``active`` that still has its data, is not in ``completed`` and whose lock it can take (SET NX) is taken.
SNAPSHOT_SWEEP_LUA = """
local taken = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', ARGV[1] .. id) == 1 and not redis.call('ZSCORE', KEYS[2], id)
      and redis.call('SET', ARGV[1] .. id .. ':lock', ARGV[2], 'NX', 'PX', ARGV[3]) then
    taken[#taken + 1] = id
  end
end
return taken
"""

#: :func:`scheduler_poll`: KEYS the timestamp's list, the index of timestamps, wait; ARGV the timestamp (the
#: index's member). The next job of the list goes to ``wait``; a list left empty is deleted and its timestamp
#: taken out of the index ("empty? then delete", resque-scheduler's clean_up_timestamp).
POLL_LUA = """
local id = redis.call('LPOP', KEYS[1])
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if id then redis.call('LPUSH', KEYS[3], id) end
return id
"""

#: the Lua constants above, by block (tests/test_blocks.py compiles each)
LUA: dict[str, str] = {
    "fetch": FETCH_LUA, "progress": PROGRESS_LUA, "refresh": REFRESH_LUA, "promote": PROMOTE_LUA,
    "record_failure": RECORD_FAILURE_LUA, "remove": REMOVE_LUA, "requeue": REQUEUE_LUA, "success": SUCCESS_LUA,
    "snapshot_sweep": SNAPSHOT_SWEEP_LUA, "clean": CLEAN_LUA, "retry_all": RETRY_ALL_LUA, "recover": RECOVER_LUA,
    "reliable_finish": RELIABLE_FINISH_LUA, "poll": POLL_LUA,
}


# -- helpers ---------------------------------------------------------------------------------------------------


def _job(q: Any) -> str:
    return str(q.params.get("job", "1"))


def _token(q: Any) -> str:
    tok = q.params.get("token")
    return str(tok) if tok is not None else q.token()


def _bool(q: Any, name: str, default: bool) -> bool:
    v = q.params.get(name, default)
    if not isinstance(v, bool):
        raise ValueError(f"{q.actor}: with.{name} must be true or false, got {v!r}")
    return v


def _int(q: Any, name: str, default: int) -> int:
    v = q.params.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{q.actor}: with.{name} must be an integer, got {v!r}")
    return v


def _mode(q: Any) -> str:
    """The mode this actor runs in: its own ``mode:``, else the run's finish mode."""
    return str(q.mode)


def _note(q: Any, kind: str, job: str | None, reply: Any, *, next_job: str | None = None,
          jobs: tuple[str, ...] | None = None) -> None:
    """Record ``q.actor``'s result (``finish:1:-2``, ``fetch:next``, ``sweep:1``) as emqlab's own actors
    do, so that ``expect: codes:`` can name it."""
    from emqlab.protocol.outcome import Outcome, Result, ResultKind

    outcome = Outcome(code=None, next_job=next_job, fetched=True) if next_job is not None else Outcome.of(reply)
    kind_ = cast("ResultKind", kind)
    result = Result(kind_, jobs=jobs) if jobs is not None else Result(kind_, job=job, outcome=outcome)
    q.note(result)


def _eval(r: redis.Redis, lua: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """One EVAL of a block's own script; a Lua or server error comes back as the exception (a value)."""
    try:
        return r.eval(lua, len(keys), *keys, *args)
    except redis.exceptions.ResponseError as e:
        return e


def _emqlab_script(r: redis.Redis, q: Any, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """EVALSHA of emqlab's script ``name`` — the run's own version when the handle says which — loading
    it first if the run's script cache does not have it (NOSCRIPT); an error reply is returned."""
    script = r.register_script(q.scripts[name].text)
    try:
        return script(keys=list(keys), args=list(args))
    except redis.exceptions.ResponseError as e:
        return e


def _code(reply: Any) -> int | None:
    return reply if isinstance(reply, int) and not isinstance(reply, bool) else None


# -- the blocks ------------------------------------------------------------------------------------------------


def fetch(r: redis.Redis, q: Any) -> None:
    """A fetch whose move and lock are two round trips (one script: ``RPOPLPUSH wait <into>``, then ``SET
    <id>:lock token PX``): split, a sweep can see the job in ``active`` without a lock in between.

    Parameters: ``into`` (default ``active``; a key under the queue), ``token`` (``""`` = take no lock),
    ``lock_ms`` (30000), ``finish`` (``completed``, ``failed`` or ``none``: after fetching, finish the job
    with emqlab's moveToFinished under the token, as :func:`finish` does; default ``none``). The fetched
    job is begun as this actor's execution. Needed by BR-01 (Bull's old fetch) and BR-20 (reliable fetch).
    """
    k = q.keys
    tok = q.params.get("token")
    token = q.token() if tok is None else str(tok)
    into = k.key(str(q.params.get("into", "active")))
    got = _eval(r, FETCH_LUA, [k.wait, into], [k.base, token, _int(q, "lock_ms", 30000)])
    _note(q, "fetch", None, got, next_job=got.decode() if isinstance(got, bytes) else None)
    if not isinstance(got, bytes):
        return
    job = got.decode()
    q.begin(job, token)
    then = str(q.params.get("finish", "none"))
    if then in ("completed", "failed"):
        reply = _finish_call(r, q, job, token, then, q.params.get("value", "done"))
        q.end(job, reply)


def progress(r: redis.Redis, q: Any) -> None:
    """A progress update: ``HSET <job> progress <value>`` only if the job hash still exists — the check
    bullmq#978 added, and the write, as one script. Split, a removal can land between the check and the
    write, and the write recreates the hash as a fragment (BR-11, bullmq#977).

    Parameters: ``job``, ``value`` (50), ``begin`` (true: this actor is the worker running the job, under
    ``token``; false: someone else's write, e.g. to make a WATCH fail). Records ``extend:<code>``:
    0 = written, -1 = no such job."""
    job = _job(q)
    if _bool(q, "begin", True):
        q.begin(job, _token(q))
    reply = _eval(r, PROGRESS_LUA, [q.keys.job(job)], [str(q.params.get("value", 50))])
    _note(q, "extend", job, reply)


def refresh(r: redis.Redis, q: Any) -> None:
    """A job-TTL refresh, as Kue's progress call makes one: the job is re-filed in the ``active`` index
    with its new deadline (at the tail: the latest), if it is still in it. Split, the job can fail
    between the check and the re-filing, and the refresh puts a failed job back in the active index
    (BR-13, Automattic/kue#1204).

    Parameters: ``job``, ``begin`` (true: this actor is the worker running the job, under ``token``).
    Records ``extend:<1|0>``."""
    job = _job(q)
    if _bool(q, "begin", False):
        q.begin(job, _token(q))
    reply = _eval(r, REFRESH_LUA, [q.keys.active], [job])
    _note(q, "extend", job, reply)


def renew(r: redis.Redis, q: Any) -> None:
    """A lock renewal sent by a worker's renew timer on its own connection — run it as an actor of its
    own, racing the worker's finish. ``cas: true`` (default): emqlab's extendLock (GET, compare, SET …
    PX, SREM stalled) — atomic, a renewal after the finish returns 0; split, a renewal that compared
    before the finish still sets the lock afterwards and recreates it on a finished job. ``cas: false``:
    a blind ``SET <lock> token PX ms`` (Bull in 2016), wrong in every mode.

    Parameters: ``job``, ``token`` (required: the worker's, e.g. ``W1:1``), ``ms`` (30000), ``cas``.
    Records ``extend:<1|0>`` (BR-12: OptimalBits/bull#322, taskforcesh/bullmq#3579)."""
    job = _job(q)
    if "token" not in q.params:
        raise ValueError(f"{q.actor}: renew needs with.token (the worker's lock token, e.g. W1:1)")
    token = str(q.params["token"])
    ms = _int(q, "ms", 30000)
    k = q.keys
    if _bool(q, "cas", True):
        from emqlab.scripting.calls import extend_lock_call

        call = extend_lock_call(k, job, token, ms)
        reply = _emqlab_script(r, q, call.name, call.keys, call.args)
    else:
        r.set(k.lock(job), token, px=ms)
        reply = 1
    _note(q, "extend", job, reply)


def promote(r: redis.Redis, q: Any) -> None:
    """A standalone promoter of due delayed jobs (a scheduler poll): read the due ids, then for each one
    ``ZREM delayed`` and ``LPUSH wait``. Split, a crash between the ZREM and the LPUSH loses the job, and
    two promoters that read the same id both push it — unless ``honour_zrem: true`` (push only what this
    ZREM removed, film42/sidekiq-rs#51). One script: promoted exactly once (BR-17).

    Parameters: ``honour_zrem`` (false). Keys: delayed, wait."""
    k = q.keys
    due = (q.now() + 1) * 0x1000 - 1  # delayed scores are (timestamp << 12) + a counter, as in BullMQ
    _eval(r, PROMOTE_LUA, [k.delayed, k.wait], [due, "1" if _bool(q, "honour_zrem", False) else "0"])


def _finish_call(r: redis.Redis, q: Any, job: str, token: str, target: str, value: Any) -> Any:
    from emqlab.scripting.calls import FinishOpts, move_to_finished_call

    keep = q.params.get("keep")
    metrics = _bool(q, "metrics", False)
    opts = FinishOpts(token=token, keep_jobs=keep, max_metrics_size=10 if metrics else "", name=q.actor)
    call = move_to_finished_call(q.keys, job, token, target, value, opts, False,  # type: ignore[arg-type]
                                 timestamp=q.now())
    reply = _emqlab_script(r, q, call.name, call.keys, call.args)
    _note(q, "cancel" if token == "0" else "finish", job, reply)
    return reply


def finish(r: redis.Redis, q: Any) -> None:
    """A finish by emqlab's moveToFinished-14 (atomic: one EVALSHA; split: its commands one per step)
    with a given token: ``"0"`` (the default) is an **outside complete or fail** — an API call holding no
    lock (BR-07); a late worker's token; or a token shared by several actors, as Bull's one token per
    queue instance was (BR-03: the lock check cannot tell the stale finisher from the owner).

    Parameters: ``job``, ``token`` (``"0"``), ``target`` (``completed`` | ``failed``), ``value`` (the
    return value or the failure reason), ``keep`` (keepJobs: a count, ``0`` = remove the job on finish),
    ``metrics`` (false), ``begin`` (the actor ran the job: default true unless the token is ``"0"``).
    Records ``finish:<job>:<code>`` (``cancel:…`` for token ``"0"``)."""
    job = _job(q)
    token = str(q.params.get("token", "0"))
    target = str(q.params.get("target", "completed"))
    if target not in ("completed", "failed"):
        raise ValueError(f"{q.actor}: with.target must be completed or failed, got {target!r}")
    ran = _bool(q, "begin", token != "0")
    if ran:
        q.begin(job, token)
    reply = _finish_call(r, q, job, token, target, q.params.get("value", "done" if target == "completed"
                                                                   else "failed"))
    if ran:
        q.end(job, reply)


def record_failure(r: redis.Redis, q: Any) -> None:
    """A losing worker's failure bookkeeping (its lease had lapsed, another worker has the job): first its
    finish to ``failed`` under its old token (emqlab's moveToFinished: refused, -2 / -6 / -1 / -3), then,
    because it was refused, the failure reason and the attempt written into the job hash, if the job
    still exists — the check and the writes as one script. Split, a removal between the check and the
    writes lets them recreate the hash as a fragment of failure fields, and the id is then blocked for
    every later add (BR-04, OptimalBits/bull#1416; the fix puts the bookkeeping inside the finish, after
    its checks).

    Parameters: ``job``, ``reason`` (``lock lost``), ``token``, ``finish`` (true: try the finish first;
    a finish that succeeds ends the block), ``begin`` (true: the block's run of the job is an execution
    under ``token``). Records ``finish:<job>:<code>`` and ``extend:<code>`` of the bookkeeping (0 =
    written, -1 = no such job)."""
    job = _job(q)
    token = _token(q)
    reason = str(q.params.get("reason", "lock lost"))
    ran = _bool(q, "begin", True)
    if ran:
        q.begin(job, token)
    code: Any = None
    if _bool(q, "finish", True):
        code = _finish_call(r, q, job, token, "failed", reason)
        if code == 0:
            if ran:
                q.end(job, code)
            return
    reply = _eval(r, RECORD_FAILURE_LUA, [q.keys.job(job)], [reason])
    _note(q, "extend", job, reply)
    if ran:
        q.end(job, code if code is not None else reply)


def readd(r: redis.Redis, q: Any) -> None:
    """Add the job again under the same custom id (emqlab's addStandardJob: a custom id whose hash still
    exists is a duplicate, and nothing is written); with ``remove: true``, remove the job first (out of
    every structure, its hash and lock deleted: Job.remove, one script).

    Parameters: ``job``, ``remove`` (false), ``name`` (``job``), ``data`` (``{}``). Records ``add:<id>``.
    Needed by BR-04 and BR-11 (a re-add that is silently a no-op)."""
    from emqlab.scripting.calls import add_job_call

    job = _job(q)
    k = q.keys
    if _bool(q, "remove", False):
        _eval(r, REMOVE_LUA, [k.wait, k.active, k.delayed, k.prioritized, k.completed, k.failed, k.stalled,
                              k.job(job), k.lock(job)], [job])
    call = add_job_call(k, str(q.params.get("name", "job")), q.params.get("data", {}), job_id=job,
                        timestamp=q.now())
    reply = _emqlab_script(r, q, call.name, call.keys, call.args)
    _note(q, "add", job, reply)


def requeue(r: redis.Redis, q: Any) -> None:
    """A shutdown requeue: when the shutdown deadline passes, a job the process still runs goes back to
    ``wait`` — gated, as one script, by the lock still being the process's (it deletes the lock, so a
    later finish of the same job is refused, and vice versa). Split, the requeue and the worker's own
    finish can both pass the check and both place the job (BR-19, sidekiq/sidekiq#4115).

    Parameters: ``job``, ``token`` (required: the process's lock token, e.g. ``W1:1``). Keys: the lock,
    active, wait. Records ``cancel:<job>:<1|0>``."""
    job = _job(q)
    if "token" not in q.params:
        raise ValueError(f"{q.actor}: requeue needs with.token (the process's lock token, e.g. W1:1)")
    k = q.keys
    reply = _eval(r, REQUEUE_LUA, [k.lock(job), k.active, k.wait], [str(q.params["token"]), job])
    _note(q, "cancel", job, reply)


def _registry(q: Any) -> str:
    return str(q.keys.key(str(q.params.get("registry", "started"))))


def success(r: redis.Redis, q: Any) -> None:
    """The success path of a worker that keeps a **started registry** (RQ's StartedJobRegistry: a sorted
    set of the jobs being run, by expiry). It registers the job (``ZADD started <now + ttl>``), runs it, and
    on success deletes its lock, leaves the registry, and files the job as completed.

    In ``--transaction`` runs that transition is WATCH (lock, job hash) / MULTI … EXEC, retried when EXEC
    is aborted; with ``naive_retry: true`` (default) the retry leaves out the registry removal, as RQ's did
    once the execution handle had been popped (rq/rq#2466). Otherwise it is one script (split: one command
    per step). Parameters: ``job``, ``token``, ``ttl`` (0 ms), ``naive_retry``. Records ``finish:<job>:<code>``
    (BR-15)."""
    job = _job(q)
    token = _token(q)
    k = q.keys
    started = _registry(q)
    lock, jkey = k.lock(job), k.job(job)
    q.begin(job, token)
    r.zadd(started, {job: q.now() + _int(q, "ttl", 0)})
    reply: Any
    if _mode(q) == "transaction":
        reply = _aborted()
        handle = True  # the execution handle: the retry has lost it
        with r.pipeline() as p:
            for _ in range(3):
                try:
                    p.watch(lock, jkey)
                    if p.get(lock) != token.encode():
                        p.reset()
                        reply = -2
                        break
                    p.multi()
                    p.delete(lock)
                    if handle:
                        p.zrem(started, job)
                    now = q.now()
                    p.zadd(k.completed, {job: now})
                    p.hset(jkey, mapping={"status": "finished", "finishedOn": now})
                    p.execute()
                    reply = 0
                    break
                except redis.exceptions.WatchError:
                    handle = not _bool(q, "naive_retry", True)
    else:
        reply = _eval(r, SUCCESS_LUA, [lock, started, k.completed, jkey], [token, job, q.now()])
    _note(q, "finish", job, reply)
    q.end(job, reply)


def _aborted() -> Exception:
    return redis.exceptions.ResponseError(messages.TRANSACTION_ABORTED % 3)


def clean(r: redis.Redis, q: Any) -> None:
    """A cleanup of a registry of leases kept as a sorted set by expiry score (RQ's StartedJobRegistry,
    kombu's unacked set): every entry whose expiry has passed and whose job has no lock (emqlab's worker
    keeps its lease as its lock, so a live worker is never taken for dead) is abandoned — moved to
    ``failed`` with the reason ``abandoned`` (RQ), or back to ``wait`` (``to: wait``, kombu's restorer).

    Parameters: ``registry`` (``started``: a key under the queue), ``to`` (``failed`` | ``wait``). Keys:
    the registry, the target. Records ``sweep:<ids>`` (BR-15, BR-16)."""
    to = str(q.params.get("to", "failed"))
    if to not in ("failed", "wait"):
        raise ValueError(f"{q.actor}: with.to must be failed or wait, got {to!r}")
    k = q.keys
    target = k.failed if to == "failed" else k.wait
    reply = _eval(r, CLEAN_LUA, [_registry(q), target], [k.base, q.now(), to])
    if isinstance(reply, list):
        _note(q, "sweep", None, reply, jobs=tuple(x.decode() for x in reply))
    else:
        _note(q, "sweep", None, reply)


def retry_all(r: redis.Redis, q: Any) -> None:
    """"Retry all" on the failed set: ``while ZCARD failed > 0: ZPOPMIN failed; LPUSH wait`` (sidekiq's
    loop, sidekiq/sidekiq#3436). Split, a job that fails again while the loop runs is seen again and
    retried again — more runs, and the failed counter counts each. One script, or ``snapshot: true`` (move
    only as many as the set held at the start, sidekiq/sidekiq#6481), moves each job once.

    Parameters: ``most`` (10: a bound on the moves, so a run always ends), ``snapshot`` (false). Keys:
    failed, wait (BR-21)."""
    k = q.keys
    _eval(r, RETRY_ALL_LUA, [k.failed, k.wait], [_int(q, "most", 10), "1" if _bool(q, "snapshot", False) else "0"])


def snapshot_sweep(r: redis.Redis, q: Any) -> None:
    """The stalled-job pass of Bull before OptimalBits/bull#359: it reads ``active`` once, then for each
    job in that snapshot checks that its data is there and that it is not completed, and takes its lock
    (``SET … NX``) — and runs the job again, finishing it under its own token. As one script (the fix) a
    job with a live lock is never taken and a finished one is no longer in ``active``; split, the
    snapshot and the checks are stale by the time the lock is taken, and a job that completed and was
    removed in between runs a second time, its finish then failing with -1 (no such job) (BR-01).

    Parameters: ``token``, ``lock_ms`` (30000), ``finish`` (``completed``: how the re-run ends; ``none`` =
    it is not finished), ``value``. Records ``sweep:<ids>`` and the re-runs' ``finish:<job>:<code>``."""
    k = q.keys
    token = _token(q)
    got = _eval(r, SNAPSHOT_SWEEP_LUA, [k.active, k.completed], [k.base, token, _int(q, "lock_ms", 30000)])
    ids = tuple(x.decode() for x in got) if isinstance(got, list) else ()
    _note(q, "sweep", None, got, jobs=ids)
    then = str(q.params.get("finish", "completed"))
    for job in ids:
        q.begin(job, token)
        if then in ("completed", "failed"):
            q.end(job, _finish_call(r, q, job, token, then, q.params.get("value", "done")))


def _private(q: Any) -> str:
    return str(q.keys.key(f"private:{q.params.get('host', 'host')}"))


def _reliable_jobs(r: redis.Redis, q: Any, count: int) -> None:
    k = q.keys
    private = _private(q)
    token = q.token()
    for _ in range(count):
        got = _eval(r, FETCH_LUA, [k.wait, private], [k.base, "", 0])
        if not isinstance(got, bytes):
            return
        job = got.decode()
        q.begin(job, token)
        reply = _eval(r, RELIABLE_FINISH_LUA, [private, k.completed], [job, q.now()])
        q.end(job, reply)


def reliable_worker(r: redis.Redis, q: Any) -> None:
    """A worker with reliable fetch (Sidekiq Pro's, sidekiq/sidekiq#2625): it moves each job from ``wait``
    into its host's private in-flight list (``RPOPLPUSH wait private:<host>``), runs it, and finishes it
    (out of the list, into ``completed``). A job in the private list is in none of the queue's places:
    one left there at the end of a run is a lost job.

    Parameters: ``host`` (``host``), ``jobs`` (1: how many jobs it takes). BR-20."""
    _reliable_jobs(r, q, _int(q, "jobs", 1))


def recover_by_identity(r: redis.Redis, q: Any) -> None:
    """A new process's startup recovery by identity: it takes its host's private in-flight list to be a
    dead process's and moves all of it back to ``wait`` (one script), then works as
    :func:`reliable_worker`. When the old process on the same host is still running, its jobs run twice,
    and a job it takes after the recovery stays in the list until the next restart (BR-20).

    Parameters: ``host``, ``jobs`` (1)."""
    _eval(r, RECOVER_LUA, [_private(q), q.keys.wait], [])
    _reliable_jobs(r, q, _int(q, "jobs", 1))


def _timestamp(q: Any) -> tuple[str, str, str]:
    """A delayed-job block's timestamp ``at`` (1000), its list (``delayed:<at>``) and the index's key
    (``delayed_queue_schedule``), as full keys but the timestamp."""
    at = str(_int(q, "at", 1000))
    k = q.keys
    return at, k.key(str(q.params.get("list", f"delayed:{at}"))), k.key(str(q.params.get("index",
                                                                                        "delayed_queue_schedule")))


def scheduler_poll(r: redis.Redis, q: Any) -> None:
    """resque-scheduler's poll of one due timestamp (``enqueue_delayed_items_for_timestamp``): LPOP the
    timestamp's list, LLEN it, and when it is empty DEL the list and ZREM the timestamp from the index —
    then push the popped job to ``wait``. One script (:data:`POLL_LUA`, the fix: the emptiness check and
    the delete together); split, a job pushed for the same timestamp after the LLEN and before the DEL is
    deleted with the list, and one pushed after the DEL sits in a list the ZREM has just unindexed: no poll
    finds it again (resque/resque-scheduler#46).

    Parameters: ``at`` (1000: the timestamp), ``list`` (``delayed:<at>``), ``index``
    (``delayed_queue_schedule``). Records ``sweep:<id>`` (BR-18)."""
    at, lst, index = _timestamp(q)
    got = _eval(r, POLL_LUA, [lst, index, q.keys.wait], [at])
    _note(q, "sweep", None, got, jobs=(got.decode(),) if isinstance(got, bytes) else ())


def enqueue_at(r: redis.Redis, q: Any) -> None:
    """resque-scheduler's ``delayed_push``: the job for a timestamp (its hash, then ``RPUSH delayed:<at>``,
    one round trip), then ``ZADD delayed_queue_schedule <at> <at>`` (another). Parameters: ``job`` (the id,
    declared under ``adds:``), ``at``, ``list``, ``index``, ``name`` (``job``), ``data`` (``{}``). Records
    ``add:<code>`` (BR-18)."""
    import json

    job = _job(q)
    at, lst, index = _timestamp(q)
    with r.pipeline(transaction=False) as p:
        p.hset(q.keys.job(job), mapping={"name": str(q.params.get("name", "job")),
                                         "data": json.dumps(q.params.get("data", {}), separators=(",", ":")),
                                         "timestamp": q.now()})
        p.rpush(lst, job)
        p.execute()
    reply = r.zadd(index, {at: int(at)})
    _note(q, "add", job, reply)


__all__ = ["LUA", "clean", "enqueue_at", "fetch", "finish", "progress", "promote", "readd", "record_failure",
           "recover_by_identity", "refresh", "reliable_worker", "renew", "requeue", "retry_all", "scheduler_poll",
           "snapshot_sweep", "success"]
