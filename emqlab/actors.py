"""The actors of a simulation. Each is a generator of steps; one step is one round trip (or one clock event).

An actor yields an :class:`Op` — the next thing it will send — and receives the reply (or the
``redis.ResponseError``) when the scheduler lets it run. Nothing is sent until the scheduler picks the
actor, so the pending op of every actor is known at each scheduling point (the stepper widget shows them).

* **Worker** — holds a job (or fetches one) and finishes it:
  ``atomic`` = one EVALSHA of moveToFinished-14 (fetch_next = 1 when it wants another job);
  ``finish-then-fetch`` = EVALSHA with fetch_next = 0, then a separate moveToActive-11;
  ``split`` = the same moveToFinished-14 text run client-side, one step per ``redis.call``.
* **RecoverySweep** — moveStalledJobsToWait-8, atomic or split. Each run starts a new stalled interval (the
  ``stalled-check`` throttle key lapses first, a clock effect, not a round trip).
* **LeaseClock** — a lock lapses: its TTL runs out, modelled as an explicit event that deletes the lock key
  if it still holds the acquisition it belonged to (the same on fakeredis and a live server).
* **Producer** — adds a job (addStandardJob-9 / addDelayedJob-6 / addPrioritizedJob-9).
* **Canceller** — an outside finish: moveToFinished-14 to ``failed`` with the bypass token ``"0"``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import scripts as api
from .scenario import ActorSpec

if TYPE_CHECKING:  # pragma: no cover
    from .schedule import Runner

Command = tuple[bytes, ...]

#: Lua for a lock lapsing: the TTL of *this acquisition* ran out (a later SET … PX would have replaced it).
LAPSE_LUA = b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


@dataclass
class Op:
    """The next step of an actor.

    ``kind``: ``command`` (one command of a split script: ``command`` is set), ``script`` (one EVALSHA:
    ``build(now_ms)`` makes the :class:`emqlab.scripts.ScriptCall`) or ``clock`` (``command`` is an EVAL of
    a clock event). ``pre`` are clock effects applied just before (no round trip), ``label`` names the
    script the op belongs to, ``section`` a note for the history."""

    kind: str
    label: str
    command: Command | None = None
    build: Callable[[int], api.ScriptCall] | None = None
    pre: list[Command] = field(default_factory=list)
    section: str = ""
    lazy: Callable[[], Command] | None = None
    #: client-side time (virtual ms) the actor spends before sending this op: processing a job, waiting for
    #: the next sweep period. Ignored by logical exploration; the timed runs (emqlab.timing) use it.
    delay_ms: float = 0.0

    @property
    def round_trip(self) -> bool:
        return self.kind != "clock"


ActorGen = Generator[Op, Any, None]


def _split(runner: Runner, call: api.ScriptCall, label: str,
           pre: list[Command] | None = None) -> Generator[Op, Any, Any]:
    """Run ``call`` client-side through the Lua host, one step per ``redis.call``; returns the script's
    reply (or the ``ResponseError`` it raised)."""
    run = runner.host.start(runner.script_text(call.name), call.keys, call.args)
    first = True
    while run.pending is not None:
        reply = yield Op("command", label, command=run.pending, pre=(pre or []) if first else [],
                         section=label)
        first = False
        run.resume(reply)
    try:
        return run.value()
    except Exception as e:  # a Lua error: what EVALSHA would have raised
        return e


def _script(runner: Runner, mode: str, build: Callable[[int], api.ScriptCall], label: str,
            pre: list[Command] | None = None) -> Generator[Op, Any, Any]:
    """One script, atomic (one EVALSHA step) or split (one step per command)."""
    if mode == "split":
        reply = yield from _split(runner, build(runner.now()), label, pre)
        return reply
    reply = yield Op("script", label, build=build, pre=pre or [])
    return reply


def _code(reply: Any) -> str:
    if isinstance(reply, BaseException):
        return f"ERR {str(reply).split(' script:')[0]}"
    if isinstance(reply, int):
        return str(reply)
    if isinstance(reply, list):
        return "next" if reply and reply[0] not in (0, None) else "0"
    return "0" if reply is None else str(reply)


def _fetch(runner: Runner, spec: ActorSpec, token: str) -> Generator[Op, Any, str | None]:
    """One moveToActive-11 round trip for ``spec``'s worker; the fetched job id, or None."""
    keys = runner.keys
    reply = yield from _script(
        runner, "atomic", lambda now: api.move_to_active_call(keys, token, timestamp=now, name=spec.id),
        "moveToActive")
    runner.result(spec.id, "fetch:" + _code(reply))
    return _next_job(reply)


def worker(runner: Runner, spec: ActorSpec) -> ActorGen:
    mode = spec.mode or runner.mode
    keys = runner.keys
    scenario = runner.scenario
    job = spec.holds
    token = runner.new_token(spec.id) if job is not None else None
    if job is not None:
        runner.begin(spec.id, job, token or "")
    else:
        for _ in range(spec.fetch_attempts):
            token = runner.new_token(spec.id)
            nj = yield from _fetch(runner, spec, token)
            if nj is not None:
                job = nj
                runner.begin(spec.id, job, token)
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
            tok = token
            reply = yield from _script(
                runner, "atomic", lambda now, j=job, tok=tok: api.extend_lock_call(keys, j, tok, 30000), "extendLock")
            runner.result(spec.id, f"extend:{_code(reply)}")
        fetch = spec.fetch_next and wants_more and mode != "finish-then-fetch"
        finish_mode = "split" if mode == "split" else "atomic"
        value = spec.value if spec.finish == "completed" else (spec.value if spec.value != "done" else "failed")
        reply = yield from _script(
            runner, finish_mode,
            lambda now, j=job, o=opts, f=fetch, v=value: api.move_to_finished_call(
                keys, j, o.token, spec.finish, v, o, f, timestamp=now),
            "moveToFinished")
        code = _code(reply)
        runner.result(spec.id, f"finish:{job}:{code}")
        ok = not isinstance(reply, BaseException) and not (isinstance(reply, int) and reply < 0)
        runner.end(spec.id, job, code, released=ok)
        if not wants_more:
            return
        nxt = _next_job(reply) if ok and fetch else None
        if nxt is None and mode == "finish-then-fetch" and spec.fetch_next:
            nxt = yield from _fetch(runner, spec, token)
        job = nxt
        if job is not None:
            runner.begin(spec.id, job, token)


def _next_job(reply: Any) -> str | None:
    if isinstance(reply, list) and len(reply) >= 2 and isinstance(reply[0], list):
        jid = reply[1]
        return jid.decode() if isinstance(jid, bytes) else str(jid)
    return None


def sweep(runner: Runner, spec: ActorSpec) -> ActorGen:
    mode = spec.mode or "atomic"
    keys = runner.keys
    for _ in range(spec.runs):
        # a new stalled interval: the throttle key of the previous sweep has lapsed
        pre: list[Command] = [(b"DEL", keys.stalled_check.encode())]
        reply = yield from _script(runner, mode, lambda now: _sweep_call(runner, spec, now),
                                   "moveStalledJobsToWait", pre)
        if isinstance(reply, list):
            runner.result(spec.id, "sweep:" + ",".join(x.decode() if isinstance(x, bytes) else str(x) for x in reply))
        else:
            runner.result(spec.id, "sweep:" + _code(reply))


def _sweep_call(runner: Runner, spec: ActorSpec, now: int) -> api.ScriptCall:
    call = api.move_stalled_jobs_to_wait_call(runner.keys, spec.max_stalled, 30000, timestamp=now)
    if runner.scripts[call.name].numkeys == len(call.keys) + 1:
        call.keys.append(runner.keys.repeat)  # BullMQ's current sweep (-9) also takes the `repeat` key
    return call


def lease(runner: Runner, spec: ActorSpec) -> ActorGen:
    assert spec.job is not None
    owner = spec.of
    job = spec.job
    lock = runner.keys.lock(job).encode()

    def command() -> Command:
        # the lease's token is read when the event fires (the owner may have re-acquired since)
        token = runner.current_token(owner, job) if owner else None
        return (b"EVAL", LAPSE_LUA, b"1", lock, (token or "").encode())

    yield Op("clock", "lapse", lazy=command, section=f"{job}:lock of {owner} lapses")
    runner.result(spec.id, "lapsed")


def producer(runner: Runner, spec: ActorSpec) -> ActorGen:
    assert spec.job is not None
    j = runner.scenario.jobs[spec.job]
    keys = runner.keys
    reply = yield from _script(
        runner, "atomic",
        lambda now: api.add_job_call(keys, j.name, j.data, job_id=j.id, delay=j.delay, priority=j.priority,
                                     attempts=j.attempts or None, timestamp=now),
        "addJob")
    runner.result(spec.id, "add:" + _code(reply))


def canceller(runner: Runner, spec: ActorSpec) -> ActorGen:
    assert spec.job is not None
    keys = runner.keys
    mode = spec.mode or "atomic"
    reason = spec.value if spec.value != "done" else "cancelled"
    opts = api.FinishOpts(token="0", max_metrics_size=10 if runner.scenario.metrics else "")
    reply = yield from _script(
        runner, mode,
        lambda now: api.move_to_finished_call(keys, spec.job or "", "0", "failed", reason, opts, False, timestamp=now),
        "moveToFinished")
    runner.result(spec.id, f"cancel:{spec.job}:{_code(reply)}")


FACTORIES: dict[str, Callable[[Runner, ActorSpec], ActorGen]] = {
    "worker": worker,
    "sweep": sweep,
    "lease": lease,
    "producer": producer,
    "canceller": canceller,
}
