"""RQ's released code as scenario actors: ``python: "emqlab.engine.atlas.rqlib:<actor>"``.

Each actor builds RQ's own objects (``rq.Queue``, ``rq.job.Job``, ``rq.Worker``, ``rq.registry``) on the
actor's client ``r`` and calls the library's methods; RQ's code is the installed release (``rq==1.16.2``,
``pip install "emqlab[atlas]"``), unmodified. Two settings make it run under a scheduler on the run's keys:

* **Key prefixes.** RQ names its keys from class attributes (``Job.redis_job_namespace_prefix``,
  ``Queue.redis_queue_namespace_prefix``, each registry's ``key_template``, …). :func:`configure` sets them
  on RQ's own classes to the run's queue base, since RQ builds its registries and queues internally from
  those classes (a subclass would not reach them): job ``1``'s hash is ``<base>1`` — the hash emqlab's
  checks read — the queue ``default`` is ``<base>rq:queue:default``, its started registry
  ``<base>rq:wip:default``, finished ``<base>rq:finished:default``, failed ``<base>rq:failed:default``.
  Every run of a process shares one base per run, so setting them when an actor starts is enough; when the
  last actor of the run that set them ends (returns, raises, or is ended with its run), RQ's own values come
  back, so that RQ used afterwards in the same process (a notebook's) writes its own keys, not a finished
  run's.
* **No result stream.** RQ 1.16 writes results to a stream under a fixed ``rq:results:<id>`` key (outside
  any prefix) when the server is Redis 5 or later, which it learns once per connection and keeps on the
  connection object. :func:`configure` gives the actor's connection RQ's cached answer ``(4, 0, 0)``, so
  RQ takes its released pre-streams path: the result and the failure text go into the job's hash.
* **The run's clock.** RQ reads the wall clock for the times it writes (a job's ``ended_at``, a registry's
  scores, a heartbeat); while an actor runs, its clock functions (``rq.utils``'s ``utcnow``, ``now``,
  ``current_timestamp`` where RQ's modules hold them, and ``datetime.now`` in those that call it) read the
  run's virtual clock (``q.now()``) instead, given back with the prefixes. A run is then the same each time
  it is run, which the replay driver of :mod:`emqlab.engine.pysync` needs (it runs an actor again from its
  start and checks that it sends the same commands).

Jobs use RQ's ``JSONSerializer``, so a scenario writes a job's RQ payload as JSON in ``data``:
``["module.function", null, [args], {kwargs}]``.

In an ``atomic`` run (the actor's ``mode``, else the run's) the actors send the *fixed* transition instead:
one small Lua script of our own (not RQ's code) whose check and write are one step — a finish or a cleanup
that moves the job only if it takes it out of the started registry itself. A ``split`` run is RQ's code as
released. The scenarios say which is which.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable
from typing import Any

from emqlab.engine.atlas import require

#: RQ's classes and the attribute that names their keys, with RQ's own default (the run's base is put in front)
_PREFIXES: tuple[tuple[str, str, str, str], ...] = (
    ("rq.job", "Job", "redis_job_namespace_prefix", ""),
    ("rq.queue", "Queue", "redis_queue_namespace_prefix", "rq:queue:"),
    ("rq.queue", "Queue", "redis_queues_keys", "rq:queues"),
    ("rq.worker", "Worker", "redis_worker_namespace_prefix", "rq:worker:"),
    ("rq.registry", "BaseRegistry", "key_template", "rq:registry:{0}"),
    ("rq.registry", "StartedJobRegistry", "key_template", "rq:wip:{0}"),
    ("rq.registry", "FinishedJobRegistry", "key_template", "rq:finished:{0}"),
    ("rq.registry", "FailedJobRegistry", "key_template", "rq:failed:{0}"),
    ("rq.registry", "DeferredJobRegistry", "key_template", "rq:deferred:{0}"),
    ("rq.registry", "ScheduledJobRegistry", "key_template", "rq:scheduled:{0}"),
    ("rq.registry", "CanceledJobRegistry", "key_template", "rq:canceled:{0}"),
)


def configure(r: Any, q: Any, version: tuple[int, int, int] = (4, 0, 0)) -> Any:
    """Import RQ (:class:`emqlab.engine.atlas.MissingLibrary` if it is not installed), put the run's base in
    front of RQ's key prefixes and give ``r`` RQ's cached server version ``version`` (default (4, 0, 0): see
    the module's docstring; a worker that only dequeues is given (7, 0, 0), for RQ's LMOVE). Returns the
    ``rq`` module."""
    rq = require("rq")
    import importlib
    import logging

    # RQ logs each abandoned job as a warning; with no handler anywhere Python would print it on stderr
    # (its last-resort handler), once per explored run
    logger = logging.getLogger("rq")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())

    base = q.keys.base
    for module, name, attr, default in _PREFIXES:
        cls = getattr(importlib.import_module(module), name)
        if _running and not any(c is cls and a == attr for c, a, _v in _originals):
            _originals.append((cls, attr, cls.__dict__.get(attr, _INHERITED)))
        # a registry's key_template goes through str.format: the base's hash-tag braces are escaped there
        head = base.replace("{", "{{").replace("}", "}}") if attr == "key_template" else base
        setattr(cls, attr, head + default)
    global _clock_ms
    _clock_ms = q.now  # (one actor's code runs at a time: the handle of the actor that configured last is its own)
    for module, attr in _CLOCK:
        mod = importlib.import_module(module)
        if _running and not any(c is mod and a == attr for c, a, _v in _originals):
            _originals.append((mod, attr, mod.__dict__.get(attr, _INHERITED)))
        setattr(mod, attr, _VIRTUAL[attr])
    setattr(r, "__rq_redis_server_version", version)
    return rq


#: RQ's modules and the clock functions (or the ``datetime`` class) they hold, read at each call
_CLOCK: tuple[tuple[str, str], ...] = (
    ("rq.utils", "utcnow"), ("rq.utils", "now"), ("rq.utils", "current_timestamp"),
    ("rq.job", "utcnow"), ("rq.job", "datetime"), ("rq.queue", "utcnow"), ("rq.queue", "datetime"),
    ("rq.worker", "utcnow"), ("rq.registry", "current_timestamp"), ("rq.registry", "datetime"),
    ("rq.scheduler", "current_timestamp"), ("rq.scheduler", "datetime"), ("rq.intermediate_queue", "now"),
    ("rq.results", "now"),
)
_clock_ms: Callable[[], int] | None = None


def _aware() -> datetime.datetime:
    assert _clock_ms is not None
    return datetime.datetime.fromtimestamp(_clock_ms() / 1000, datetime.timezone.utc)


class _VirtualDatetime(datetime.datetime):
    """``datetime`` whose ``now``/``utcnow`` read the run's clock (naive ones in UTC, as RQ's ``utcnow``)."""

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> _VirtualDatetime:
        t = _aware()
        t = t.astimezone(tz) if tz is not None else t.replace(tzinfo=None)
        return cls.combine(t.date(), t.timetz())

    @classmethod
    def utcnow(cls) -> _VirtualDatetime:
        return cls.now()


_VIRTUAL: dict[str, Any] = {
    "utcnow": lambda: _aware().replace(tzinfo=None),
    "now": _aware,
    "current_timestamp": lambda: int(_aware().timestamp()),
    "datetime": _VirtualDatetime,
}


#: how many actors using RQ's classes are running in this process, and RQ's own values of the attributes
#: :func:`configure` sets, kept while any is
_running = 0
_originals: list[tuple[Any, str, Any]] = []
_INHERITED = object()  # (an attribute the class itself did not hold: removed again, not set)


def _uses_rq(actor: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``actor`` with RQ's key prefixes given back (:data:`_originals`) once no actor using them runs."""

    @functools.wraps(actor)
    def run(r: Any, q: Any) -> None:
        global _running
        _running += 1
        try:
            actor(r, q)
        finally:
            _running -= 1
            if _running == 0:
                for cls, attr, value in _originals:
                    if value is _INHERITED:
                        delattr(cls, attr)
                    else:
                        setattr(cls, attr, value)
                _originals.clear()

    return run


def _objects(r: Any, q: Any, version: tuple[int, int, int] = (4, 0, 0)) -> tuple[Any, Any, Any]:
    """RQ's JSON serializer, the queue ``q.params['queue']`` (default ``default``) and its started registry."""
    rq = configure(r, q, version)
    from rq.registry import StartedJobRegistry
    from rq.serializers import JSONSerializer

    queue = rq.Queue(str(q.params.get("queue", "default")), connection=r, serializer=JSONSerializer)
    return JSONSerializer, queue, StartedJobRegistry(queue.name, connection=r, serializer=JSONSerializer)


# The fixed transitions, in our own words: the job leaves the started registry and is filed in one step,
# and only by the one that took it out (a ZREM that removed nothing means someone else already moved it);
# with a fourth key (a cleanup's), not while that key (the job's lease) still exists.
_GUARDED_MOVE = """
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[3], 'status', ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  return 1
end
return 0
"""


@_uses_rq
def success(r: Any, q: Any) -> None:
    """A worker that ran job ``job`` (default ``"1"``, in the started registry) and succeeded: RQ's
    ``Worker.handle_job_success`` (WATCH the job's dependents, then one MULTI: the worker's counters, the
    job's status ``finished`` and its fields, the finished registry, out of the started registry). Atomic:
    the guarded move to ``finished``. Records ``finish:<job>:0`` (1 from the guarded move when it did not
    move the job: ``-1``)."""
    serializer, queue, started = _objects(r, q)
    job_id = str(q.params.get("job", "1"))
    q.begin(job_id, q.token())
    if q.mode == "atomic":
        moved = r.eval(_GUARDED_MOVE, 3, started.key, queue.finished_job_registry.key, q.keys.job(job_id),
                       job_id, "finished", "1")
        q.end(job_id, 0 if moved else -1)
        return
    import rq
    from rq.job import Job
    from rq.utils import utcnow

    job = Job.fetch(job_id, connection=r, serializer=serializer)
    job._result = q.params.get("value", True)
    job.ended_at = utcnow()
    job.started_at = job.started_at or job.ended_at
    worker = rq.Worker([queue], connection=r, name=q.actor, serializer=serializer, prepare_for_work=False)
    worker.handle_job_success(job, queue, started)
    q.end(job_id, 0)


@_uses_rq
def cleanup(r: Any, q: Any) -> None:
    """RQ's ``StartedJobRegistry.cleanup``: the registry's entries due by ``timestamp`` (default 1: every
    entry a scenario seeds is due), each fetched, failed as abandoned (status ``failed``, the failed
    registry) and the due range removed from the registry, in one MULTI. Atomic: the guarded move to
    ``failed`` for each due entry whose lease (the job's emqlab lock, ``state.locks``; a ``lease`` actor
    lapses it) is gone: the entry's expiry, which RQ's registry score stands for."""
    serializer, queue, started = _objects(r, q)
    due = float(q.params.get("timestamp", 1))
    if q.mode == "atomic":
        for job_id in r.zrangebyscore(started.key, 0, due):
            jid = job_id.decode()
            r.eval(_GUARDED_MOVE, 4, started.key, queue.failed_job_registry.key, q.keys.job(jid),
                   q.keys.lock(jid), jid, "failed", "1")
        return
    started.cleanup(timestamp=due)


_GUARDED_ENQUEUE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[3], 'status', 'queued')
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return 1
end
return 0
"""


@_uses_rq
def schedule(r: Any, q: Any) -> None:
    """A scheduler that believes it holds the queue's scheduler lock: RQ's
    ``RQScheduler.enqueue_scheduled_jobs`` (the due ids of the scheduled registry read, then each job fetched,
    enqueued and removed from the registry in one MULTI). RQ takes the lock under a fixed
    ``rq:scheduler-lock:<queue>`` key and makes its own connection (in a forked process), so the actor gives
    the scheduler its connection and its acquired lock instead (``_connection``, ``_acquired_locks``: the
    state ``acquire_locks`` leaves). Atomic: per due job, one script of our own that enqueues the job only
    if its own ZREM took it out of the registry."""
    serializer, queue, _ = _objects(r, q)
    from rq.registry import ScheduledJobRegistry

    if q.mode == "atomic":
        registry = ScheduledJobRegistry(queue.name, connection=r, serializer=serializer)
        for job_id in r.zrangebyscore(registry.key, 0, "+inf"):
            jid = job_id.decode()
            r.eval(_GUARDED_ENQUEUE, 3, registry.key, queue.key, q.keys.job(jid), jid)
        return
    from rq.scheduler import RQScheduler

    scheduler = RQScheduler([queue], connection=r, serializer=serializer)
    scheduler._connection = r
    scheduler._acquired_locks = {queue.name}
    scheduler.enqueue_scheduled_jobs()


@_uses_rq
def take(r: Any, q: Any) -> None:
    """A worker takes its next job: RQ's ``Queue.dequeue_any`` (listening on one queue, on Redis 6.2 and
    later: one ``LMOVE`` from the queue to its intermediate list; on several: ``LPOP`` from the first that has
    a job), the job fetched, then ``Worker.prepare_job_execution`` (one MULTI: the worker's and the job's
    heartbeat, the job ``started`` in the started registry, out of the intermediate list when it came
    through it, as RQ's worker does). The job then runs (its execution stays open: the scenario is about
    what happens meanwhile). ``queues`` (default ``[queue]``) are the queues it listens on, in order;
    ``queues_atomic`` replaces them in an atomic run."""
    serializer, queue, _ = _objects(r, q, version=(7, 0, 0))
    import rq

    names = q.params.get("queues_atomic") if q.mode == "atomic" else None
    names = names or q.params.get("queues") or [queue.name]
    queues = [rq.Queue(str(n), connection=r, serializer=serializer) for n in names]
    got = rq.Queue.dequeue_any(queues, None, connection=r, serializer=serializer)
    if not got:
        return
    job, _queue = got
    q.begin(job.id, q.token())
    worker = rq.Worker(queues, connection=r, name=q.actor, serializer=serializer, prepare_for_work=False)
    worker.prepare_job_execution(job, remove_from_intermediate_queue=len(queues) == 1)


@_uses_rq
def clean_intermediate(r: Any, q: Any) -> None:
    """A cleanup of the queue's intermediate list (jobs a worker moved out of the queue but never
    registered as started). Atomic: RQ 1.16.2's ``IntermediateQueue.cleanup``, which fails an entry only
    when it has seen it in an earlier pass at least a minute before (a first pass marks it). Split: the
    one-pass cleanup of RQ 1.16.0 (``clean_intermediate_queue``), in our own words since 1.16.2 no longer
    ships it: read the list; for each entry not in the started registry, fetch the job, fail it with RQ's
    own ``Worker.handle_job_failure`` and take it out of the list."""
    serializer, queue, started = _objects(r, q)
    import rq
    from rq.intermediate_queue import IntermediateQueue

    worker = rq.Worker([queue], connection=r, name=q.actor, serializer=serializer, prepare_for_work=False)
    if q.mode == "atomic":
        IntermediateQueue(queue.key, connection=r).cleanup(worker, queue)
        return
    for job_id in [j.decode() for j in r.lrange(queue.intermediate_queue_key, 0, -1)]:
        if job_id not in started:
            job = queue.fetch_job(job_id)
            if job:
                worker.handle_job_failure(job, queue, exc_string="Job was stuck in intermediate queue.")
            r.lrem(queue.intermediate_queue_key, 1, job_id)


__all__ = ["clean_intermediate", "cleanup", "configure", "schedule", "success", "take"]
