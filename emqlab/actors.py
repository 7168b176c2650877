"""The actors of a simulation. Each is a generator of steps; one step is one round trip (or one clock event).

An actor yields an :class:`Op` — the next thing it will send — and receives the reply (or the
``redis.ResponseError``) when the scheduler lets it run. Nothing is sent until the scheduler picks the
actor, so the pending op of every actor is known at each scheduling point (the stepper widget shows them).
Actors see the run only through an :class:`emqlab.context.ActorContext`.

* **Worker** — holds a job (or fetches one) and finishes it:
  ``atomic`` = one EVALSHA of moveToFinished-14 (fetch_next = 1 when it wants another job);
  ``finish-then-fetch`` = EVALSHA with fetch_next = 0, then a separate moveToActive-11;
  ``split`` = the same moveToFinished-14 text run client-side, one step per ``redis.call``.
  A fetched job that carries a deferred failure (``defa``, set by the sweep past ``maxStalledCount``) is
  failed with that reason instead of being processed, as BullMQ's worker does.
* **RecoverySweep** — moveStalledJobsToWait-8, atomic or split. Each run starts a new stalled interval (the
  ``stalled-check`` throttle key lapses first, a clock effect, not a round trip).
* **LeaseClock** — a lock lapses: its TTL runs out, modelled as an explicit event that deletes the lock key
  if it still holds the acquisition it belonged to (the same on fakeredis and a live server).
* **Producer** — adds a job (addStandardJob-9 / addDelayedJob-6 / addPrioritizedJob-9).
* **Canceller** — an outside finish: moveToFinished-14 to ``failed`` with the bypass token ``"0"``, atomic
  or (``--split``, or ``mode: split`` in the scenario) split.

The building blocks (:func:`script`, :func:`fetch`, :func:`finish`) are what the timed model and the
graders build their own actors from.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from . import scripts as api
from .outcome import Outcome, Result
from .scenario import ActorSpec

if TYPE_CHECKING:  # pragma: no cover
    from .context import ActorContext

Command = tuple[bytes, ...]
OpKind = Literal["command", "script", "clock"]

#: Lua for a lock lapsing: the TTL of *this acquisition* ran out (a later SET … PX would have replaced it).
LAPSE_LUA = b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


@dataclass
class Op:
    """The next step of an actor.

    ``kind``: ``command`` (one command of a split script: ``command`` is set), ``script`` (one EVALSHA:
    ``build(now_ms)`` makes the :class:`emqlab.scripts.ScriptCall`) or ``clock`` (``command`` — or
    ``lazy()``, evaluated when the event fires — is an EVAL of a clock event). ``pre`` are clock effects
    applied just before (no round trip), ``label`` names the script the op belongs to, ``section`` a note
    for the history, ``run`` the actor's script-run number (the commands of one split script share it),
    ``job`` the job a clock event concerns."""

    kind: OpKind
    label: str
    command: Command | None = None
    build: Callable[[int], api.ScriptCall] | None = None
    pre: list[Command] = field(default_factory=list)
    section: str = ""
    lazy: Callable[[], Command] | None = None
    #: client-side time (virtual ms) the actor spends before sending this op: processing a job, waiting for
    #: the next sweep period. Ignored by logical exploration; the timed runs (emqlab.timing) use it.
    delay_ms: float = 0.0
    run: int | None = None
    job: str | None = None

    @property
    def round_trip(self) -> bool:
        return self.kind != "clock"


ActorGen = Generator[Op, Any, None]
Sub = Generator[Op, Any, Any]


def split_run(ctx: ActorContext, call: api.ScriptCall, label: str, pre: list[Command] | None = None) -> Sub:
    """Run ``call`` client-side through the Lua host, one step per ``redis.call``; returns the script's
    reply (or the ``ResponseError`` it raised, as EVALSHA would have)."""
    run = ctx.split(call.name, call.keys, call.args)
    number = ctx.script_run()
    try:
        first = True
        while run.pending is not None:
            reply = yield Op("command", label, command=run.pending, pre=(pre or []) if first else [],
                             section=label, run=number)
            first = False
            run.resume(reply)
        try:
            return run.value()
        except Exception as e:  # a Lua error: what EVALSHA would have raised
            return e
    finally:
        run.close()


def script(ctx: ActorContext, mode: str, build: Callable[[int], api.ScriptCall], label: str,
           pre: list[Command] | None = None) -> Sub:
    """One script, atomic (one EVALSHA step) or split (one step per command); returns the raw reply."""
    if mode == "split":
        reply = yield from split_run(ctx, build(ctx.now()), label, pre)
        return reply
    reply = yield Op("script", label, build=build, pre=pre or [])
    return reply


def _next_job(reply: Any) -> str | None:
    return Outcome.of(reply).next_job


def fetch(ctx: ActorContext, actor: str, token: str, *, lock_duration: int = 30000) -> Sub:
    """One moveToActive-11 round trip for ``actor`` under ``token``; returns the raw reply."""
    keys = ctx.keys
    reply = yield from script(
        ctx, "atomic",
        lambda now: api.move_to_active_call(keys, token, timestamp=now, lock_duration=lock_duration, name=actor),
        "moveToActive")
    ctx.note(actor, Result("fetch", outcome=Outcome.of(reply)))
    return reply


def deferred_failure(reply: Any) -> str | None:
    """The ``defa`` reason in a fetch (or fetch-next) reply, if the job carries one."""
    nxt = api.decode_next(reply) if isinstance(reply, list) else None
    return nxt.deferred_failure if nxt is not None else None


def finish(ctx: ActorContext, actor: str, mode: str, job: str, target: api.Target, value: Any,
           opts: api.FinishOpts, fetch_next: bool) -> Sub:
    """One finish of ``job`` (split or atomic), recorded as a result and as the end of the execution;
    returns the raw reply."""
    keys = ctx.keys
    reply = yield from script(
        ctx, "split" if mode == "split" else "atomic",
        lambda now: api.move_to_finished_call(keys, job, opts.token, target, value, opts, fetch_next, timestamp=now),
        "moveToFinished")
    outcome = Outcome.of(reply)
    ctx.note(actor, Result("finish", job=job, outcome=outcome))
    ctx.end(actor, job, outcome)
    return reply


def _extend_call(keys: Any, job: str, token: str, duration_ms: int = 30000) -> Callable[[int], api.ScriptCall]:
    def build(now: int) -> api.ScriptCall:
        return api.extend_lock_call(keys, job, token, duration_ms)
    return build


def worker(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    mode = spec.mode or ctx.mode
    keys = ctx.keys
    scenario = ctx.scenario
    job = spec.holds
    token = ctx.new_token(spec.id) if job is not None else None
    defa: str | None = None
    if job is not None:
        ctx.begin(spec.id, job, token or "")
    else:
        for _ in range(spec.fetch_attempts):
            token = ctx.new_token(spec.id)
            reply = yield from fetch(ctx, spec.id, token)
            nj = _next_job(reply)
            if nj is not None:
                job = nj
                defa = deferred_failure(reply)
                ctx.begin(spec.id, job, token)
                break
        if job is None:
            return
    processed = 0
    while job is not None and token is not None:
        processed += 1
        wants_more = processed < spec.jobs
        jspec = scenario.jobs.get(job)
        attempts = spec.attempts if spec.attempts is not None else (jspec.attempts if jspec else 0)
        opts = api.FinishOpts(token=token, keep_jobs=spec.keep_jobs, attempts=attempts,
                              backoff=jspec.backoff if jspec else 0,
                              max_metrics_size=10 if scenario.metrics else "", name=spec.id)
        for _ in range(spec.renewals):
            reply = yield from script(ctx, "atomic", _extend_call(keys, job, token), "extendLock")
            ctx.note(spec.id, Result("extend", outcome=Outcome.of(reply)))
        fetch_next = spec.fetch_next and wants_more and mode != "finish-then-fetch"
        target: api.Target = "failed" if spec.finish == "failed" or defa else "completed"
        if defa:
            value: Any = defa
        elif spec.finish == "completed":
            value = spec.value
        else:
            value = spec.value if spec.value != "done" else "failed"
        reply = yield from finish(ctx, spec.id, mode, job, target, value, opts, fetch_next)
        if not wants_more:
            return
        outcome = Outcome.of(reply)
        nxt = outcome.next_job if outcome.ok and fetch_next else None
        defa = deferred_failure(reply) if nxt is not None else None
        if nxt is None and mode == "finish-then-fetch" and spec.fetch_next:
            reply = yield from fetch(ctx, spec.id, token)
            nxt = _next_job(reply)
            defa = deferred_failure(reply)
        job = nxt
        if job is not None:
            ctx.begin(spec.id, job, token)


def sweep(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    mode = spec.mode or "atomic"
    keys = ctx.keys
    for _ in range(spec.runs):
        # a new stalled interval: the throttle key of the previous sweep has lapsed
        pre: list[Command] = [(b"DEL", keys.stalled_check.encode())]
        reply = yield from script(ctx, mode, lambda now: sweep_call(ctx, spec.max_stalled, now),
                                  "moveStalledJobsToWait", pre)
        if isinstance(reply, list):
            ids = tuple(x.decode() if isinstance(x, bytes) else str(x) for x in reply)
            ctx.note(spec.id, Result("sweep", jobs=ids))
        else:
            ctx.note(spec.id, Result("sweep", outcome=Outcome.of(reply)))


def sweep_call(ctx: ActorContext, max_stalled: int, now: int, interval_ms: int = 30000) -> api.ScriptCall:
    """The sweep's call for the context's script set: BullMQ's current sweep (``-9``) also takes the
    ``repeat`` key."""
    call = api.move_stalled_jobs_to_wait_call(ctx.keys, max_stalled, interval_ms, timestamp=now)
    if ctx.scripts[call.name].numkeys == len(call.keys) + 1:
        call.keys.append(ctx.keys.repeat)
    return call


def lease(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    assert spec.job is not None
    owner = spec.of
    job = spec.job
    lock = ctx.keys.lock(job).encode()

    def command() -> Command:
        # the lease's token is read when the event fires (the owner may have re-acquired since)
        token = ctx.current_token(owner, job) if owner else None
        return (b"EVAL", LAPSE_LUA, b"1", lock, (token or "").encode())

    yield Op("clock", "lapse", lazy=command, section=f"{job}:lock of {owner} lapses", job=job)
    ctx.note(spec.id, Result("lapsed"))


def producer(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    assert spec.job is not None
    j = ctx.scenario.jobs[spec.job]
    keys = ctx.keys
    reply = yield from script(
        ctx, "atomic",
        lambda now: api.add_job_call(keys, j.name, j.data, job_id=j.id, delay=j.delay, priority=j.priority,
                                     attempts=j.attempts or None, timestamp=now),
        "addJob")
    ctx.note(spec.id, Result("add", outcome=Outcome.of(reply)))


def canceller(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    assert spec.job is not None
    keys = ctx.keys
    mode = spec.mode or ("split" if ctx.mode == "split" else "atomic")
    reason = spec.value if spec.value != "done" else "cancelled"
    opts = api.FinishOpts(token="0", max_metrics_size=10 if ctx.scenario.metrics else "")
    reply = yield from script(
        ctx, mode,
        lambda now: api.move_to_finished_call(keys, spec.job or "", "0", "failed", reason, opts, False, timestamp=now),
        "moveToFinished")
    ctx.note(spec.id, Result("cancel", job=spec.job, outcome=Outcome.of(reply)))


FACTORIES: dict[str, Callable[[Any, ActorSpec], ActorGen]] = {
    "worker": worker,
    "sweep": sweep,
    "lease": lease,
    "producer": producer,
    "canceller": canceller,
}
