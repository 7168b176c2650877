"""The actors of a simulation. Each is a generator of steps; one step is one round trip (or one clock event).

An actor yields an :class:`Op` — the next thing it will send — and receives the reply (or the
``redis.ResponseError``) when the scheduler lets it run. Nothing is sent until the scheduler picks the
actor, so the pending op of every actor is known at each scheduling point (the stepper widget shows them).
Actors see the run only through an :class:`emqlab.engine.context.ActorContext`.

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

The building blocks — :func:`script`, :func:`split_run`, :func:`fetch`, :func:`finish`, :func:`renew`,
:func:`sweep_once`, :func:`lapse` and :func:`scripted_finish` (a finish by given Lua) — are what the timed
model (:mod:`emqlab.timing`) and the graders (:mod:`emqlab.teaching.assignments`) build their actors from; only the
pacing (when each op is sent) is theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from emqlab.engine.context import Fault
from emqlab.engine.specs import ActorSpec
from emqlab.protocol import messages
from emqlab.protocol.outcome import Outcome, Result
from emqlab.scripting import calls as api
from emqlab.scripting.replies import LuaScriptError

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.engine.context import ActorContext

Command = tuple[bytes, ...]
OpKind = Literal["command", "script", "clock", "fault"]

#: Lua for a lock lapsing: the TTL of *this acquisition* ran out (a later SET … PX would have replaced it).
LAPSE_LUA = b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


@dataclass
class Op:
    """The next step of an actor.

    ``kind``: ``command`` (one command of a split script: ``command`` is set), ``script`` (one EVALSHA:
    ``build(now_ms)`` makes the :class:`emqlab.scripting.calls.ScriptCall`) or ``clock`` (``command`` — or
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
    #: the fault a ``fault`` op injects (the Runner carries it out)
    fault: Fault | None = None
    #: sent on the actor's own connection (its WATCH and MULTI state are its own)
    session: bool = False
    #: several commands in one round trip, built at the step's time: pipelined, or with ``multi`` one
    #: MULTI … EXEC transaction (the reply is EXEC's: the replies, or ``None`` when a watched key changed)
    batch: Callable[[int], Sequence[Command]] | None = None
    multi: bool = False
    #: a Python actor's round trip (:mod:`emqlab.engine.pyactors`): sent as the actor's code sent it, on its
    #: connection ``conn``, with the run's script cache answering SCRIPT LOAD / EXISTS and EVALSHA
    python: bool = False
    conn: str | None = None
    #: the script of the run's script set this op runs or belongs to (a split script's commands, a Python
    #: actor's EVALSHA / EVAL resolved by SHA1); the Runner records it on the step (``Step.script``). An
    #: atomic ``script`` op's script is its call's name, known when it is built.
    script: str | None = None
    #: a Python actor's pipeline or MULTI … EXEC: every script of the set its commands run, in order
    #: (``script`` is the first); the Runner records them on the step (``Step.scripts``)
    scripts: tuple[str, ...] = ()

    @property
    def round_trip(self) -> bool:
        return self.kind not in ("clock", "fault")


ActorGen = Generator[Op, Any, None]
Sub = Generator[Op, Any, Any]


def split_run(ctx: ActorContext, call: api.ScriptCall | None, label: str, pre: list[Command] | None = None, *,
              source: bytes | None = None, keys: Sequence[Any] = (), args: Sequence[Any] = (),
              on_refused: Callable[[Command], None] | None = None, script: str | None = None,
              read_only: bool = False) -> Sub:
    """Run a script client-side through the Lua host, one step per ``redis.call``; returns the script's
    reply (or the ``ResponseError`` it raised, as EVALSHA would have).

    The script is ``call`` (a script of the context's set), or ``source`` (Lua text: a user's or a
    student's script) with ``keys`` and ``args``. ``on_refused(command)`` is told of each command the Lua
    host refused as Redis does inside a script (EVAL, MULTI, SCRIPT, …: no round trip, no step; the script
    got Redis's error) — the grader notes a student's that way. ``script`` names the script of the run's set
    that ``source`` is (each step records it); a ``call``'s is its name. ``read_only``: an ``EVAL_RO``/
    ``EVALSHA_RO`` (:meth:`emqlab.scripting.host.LuaHost.start`)."""
    if call is not None:
        script = call.name
        run = ctx.split(call.name, call.keys, call.args)
    elif source is not None:
        try:
            run = ctx.split(source, keys, args, read_only=read_only)
        except LuaScriptError as e:
            if not read_only:
                raise
            return e  # EVAL_RO of a script whose shebang allows writes: refused before it runs
    else:
        raise TypeError("split_run needs a call or a source")
    number = ctx.script_run()
    try:
        first = True
        while run.pending is not None:
            reply = yield Op("command", label, command=run.pending, pre=(pre or []) if first else [],
                             section=label, run=number, script=script)
            first = False
            run.resume(reply)
        if on_refused is not None:
            for cmd, _error in run.refused:
                on_refused(cmd)
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
           opts: api.FinishOpts, fetch_next: bool, *, keep_open: bool = False) -> Sub:
    """One finish of ``job`` (split or atomic), recorded as a result and as the end of the execution
    (``keep_open``: the caller ends it, after a retry); returns the raw reply."""
    keys = ctx.keys
    reply = yield from script(
        ctx, "split" if mode == "split" else "atomic",
        lambda now: api.move_to_finished_call(keys, job, opts.token, target, value, opts, fetch_next, timestamp=now),
        "moveToFinished")
    outcome = Outcome.of(reply)
    ctx.note(actor, Result("finish", job=job, outcome=outcome))
    if not keep_open:
        ctx.end(actor, job, outcome)
    return reply


#: what a transaction finish WATCHes by default: the keys its decision reads
WATCHED = ("lock", "active", "stalled")
#: how many times a transaction finish runs again after EXEC was aborted by a change to a watched key
TRANSACTION_ATTEMPTS = 3


def transaction_finish(ctx: ActorContext, actor: str, job: str, target: api.Target, value: Any,
                       opts: api.FinishOpts, watch: Sequence[str] = WATCHED,
                       attempts: int = TRANSACTION_ATTEMPTS, *, keep_open: bool = False) -> Sub:
    """A finish of ``job`` as an optimistic transaction on the actor's own connection: WATCH ``watch``
    (names among ``lock``, ``active``, ``stalled``), read the job, its lock and its place in ``active``
    (one pipelined round trip), decide client-side, then MULTI … EXEC with the writes (one round trip).
    When EXEC is aborted because a watched key changed, the whole transaction runs again, up to
    ``attempts`` times. Three round trips per attempt, no fetch-next (a separate fetch follows).

    The decision and the writes are those of moveToFinished's finish (``docs/protocol.md`` §1.2):
    -1 (no job), -2 (no lock), -6 (another token's lock), -3 (not in active); a failure with attempts
    left goes back to ``wait`` (or ``delayed`` after a backoff); ``keep_jobs`` count 0 deletes the job.
    Returns 0, the code, or a ``ResponseError`` after ``attempts`` aborted EXECs; records the result
    and ends the execution like :func:`finish` (``keep_open``: the caller ends it)."""
    keys = ctx.keys
    names = {"lock": keys.lock(job), "active": keys.active, "stalled": keys.stalled}
    unknown = [w for w in watch if w not in names]
    if unknown:
        raise ValueError(f"cannot WATCH {', '.join(unknown)} (one of: {', '.join(names)})")
    watched = tuple(names[w].encode() for w in watch)
    jkey, lock, active = keys.job(job).encode(), keys.lock(job).encode(), keys.active.encode()
    number = ctx.script_run()
    reply: Any = None
    for _ in range(attempts):
        if watched:
            reply = yield Op("command", "transaction", command=(b"WATCH", *watched), session=True,
                             section="transaction", run=number)
            if ctx.connection_lost(actor) or isinstance(reply, Exception):  # (CROSSSLOT on a cluster)
                break
        reads = yield Op("command", "transaction", session=True, section="transaction", run=number,
                         batch=lambda now: ((b"EXISTS", jkey), (b"GET", lock), (b"LPOS", active, job.encode()),
                                            (b"HGET", jkey, b"atm")))
        if ctx.connection_lost(actor):
            reply = reads
            break
        failed = next((r for r in reads if isinstance(r, Exception)), None)
        if failed is not None:  # a read refused (an error reply): the finish fails with it
            reply = failed
            break
        exists, holder, pos, atm = reads
        code = _transaction_refusal(exists, holder, pos, opts.token)
        if code is not None:
            reply = code
            break
        made = int(atm or 0) + 1
        batch = _transaction_writes(ctx, job, target, value, opts, made)
        reply = yield Op("command", "transaction", session=True, multi=True, section="transaction", run=number,
                         batch=batch)
        if ctx.connection_lost(actor) or isinstance(reply, Exception):
            break
        if reply is not None:
            reply = 0
            break
    else:
        reply = _aborted(attempts)
    outcome = Outcome.of(reply)
    ctx.note(actor, Result("finish", job=job, outcome=outcome))
    if not keep_open:
        ctx.end(actor, job, outcome)
    return reply


def _aborted(attempts: int) -> Exception:
    import redis

    return redis.exceptions.ResponseError(messages.TRANSACTION_ABORTED % attempts)


def _transaction_refusal(exists: Any, holder: Any, pos: Any, token: str) -> int | None:
    """The finish's checks, client-side (the script's codes, ``docs/protocol.md`` §1.2)."""
    if not exists:
        return -1
    if token != "0":
        if holder is None:
            return -2
        if holder.decode() != token:
            return -6
    if pos is None:
        return -3
    return None


def _transaction_writes(ctx: ActorContext, job: str, target: api.Target, value: Any, opts: api.FinishOpts,
                        made: int) -> Callable[[int], Sequence[Command]]:
    keys = ctx.keys
    jkey = keys.job(job).encode()
    jid = job.encode()

    def build(now: int) -> Sequence[Command]:
        ts = str(now).encode()
        cmds: list[Command] = [(b"DEL", keys.lock(job).encode()), (b"SREM", keys.stalled.encode(), jid),
                               (b"LREM", keys.active.encode(), b"-1", jid), (b"HINCRBY", jkey, b"atm", b"1")]
        if target == "failed" and opts.attempts and made < opts.attempts:  # a retry: back to wait / delayed
            cmds.append((b"HSET", jkey, b"failedReason", api._encode_value("failed", value).encode()))
            if opts.backoff:
                cmds.append((b"ZADD", keys.delayed.encode(), str(now + opts.backoff).encode(), jid))
            else:
                cmds.append((b"LPUSH", keys.wait.encode(), jid))
            return cmds
        field = b"returnvalue" if target == "completed" else b"failedReason"
        text = api._encode_value(target, value)
        if opts.keep_jobs_map().get("count") == 0:
            cmds += [(b"DEL", jkey), (b"DEL", f"{keys.job(job)}:logs".encode())]
        else:
            cmds += [(b"ZADD", (keys.completed if target == "completed" else keys.failed).encode(), ts, jid),
                     (b"HSET", jkey, field, text.encode(), b"finishedOn", ts)]
        if opts.max_metrics_size != "":
            cmds.append((b"HINCRBY", keys.metrics(target).encode(), b"count", b"1"))
        return cmds

    return build


def _extend_call(keys: Any, job: str, token: str, duration_ms: int = 30000) -> Callable[[int], api.ScriptCall]:
    def build(now: int) -> api.ScriptCall:
        return api.extend_lock_call(keys, job, token, duration_ms)
    return build


def renew(ctx: ActorContext, actor: str, job: str, token: str, duration_ms: int = 30000) -> Sub:
    """One extendLock round trip: ``job``'s lock under ``token`` for another ``duration_ms``; returns the
    raw reply (1 = extended, 0 = the lock is not ``token``'s)."""
    reply = yield from script(ctx, "atomic", _extend_call(ctx.keys, job, token, duration_ms), "extendLock")
    ctx.note(actor, Result("extend", outcome=Outcome.of(reply)))
    return reply


def sweep_once(ctx: ActorContext, actor: str, max_stalled: int, mode: str = "atomic",
               interval_ms: int = 30000) -> Sub:
    """One run of the recovery sweep (moveStalledJobsToWait), atomic or split, noted as a result. Each run
    starts a new stalled interval: the ``stalled-check`` throttle key of the previous run has lapsed (a
    clock effect before the run, not a round trip). Returns the raw reply (the ids recovered)."""
    pre: list[Command] = [(b"DEL", ctx.keys.stalled_check.encode())]
    reply = yield from script(ctx, mode, lambda now: sweep_call(ctx, max_stalled, now, interval_ms),
                              "moveStalledJobsToWait", pre)
    if isinstance(reply, list):
        ids = tuple(x.decode() if isinstance(x, bytes) else str(x) for x in reply)
        ctx.note(actor, Result("sweep", jobs=ids))
    else:
        ctx.note(actor, Result("sweep", outcome=Outcome.of(reply)))
    return reply


def lapse(ctx: ActorContext, actor: str, job: str | None, lock: Callable[[], tuple[str, str | None]],
          section: str) -> Sub:
    """A lock lapsing, as one clock event: ``lock()`` — called when the event fires — gives the job and the
    token of the acquisition whose TTL ran out; the lock key is deleted only if it still holds that token
    (:data:`LAPSE_LUA`). ``job`` is the job the event concerns when it is known in advance (the reduction
    uses it)."""
    def command() -> Command:
        jid, token = lock()
        return (b"EVAL", LAPSE_LUA, b"1", ctx.keys.lock(jid).encode(), (token or "").encode())

    reply = yield Op("clock", "lapse", lazy=command, section=section, job=job)
    ctx.note(actor, Result("lapsed"))
    return reply


def scripted_finish(ctx: ActorContext, actor: str, job: str, source: bytes, keys: Sequence[Any],
                    args: Sequence[Any], *, on_refused: Callable[[Command], None] | None = None,
                    label: str = "finish") -> Sub:
    """A finish of ``job`` by given Lua (a student's or a user's script), run split: one step per
    ``redis.call``, recorded as a result and as the end of the execution like :func:`finish`. Returns the
    raw reply, or the ``ResponseError`` a Lua error raised."""
    reply = yield from split_run(ctx, None, label, source=source, keys=keys, args=args, on_refused=on_refused)
    outcome = Outcome.of(reply)
    ctx.note(actor, Result("finish", job=job, outcome=outcome))
    ctx.end(actor, job, outcome)
    return reply


def _failed(ctx: ActorContext, actor: str, reply: Any) -> bool:
    """The round trip failed for the client: its connection dropped (the reply is lost, whether or not the
    call ran) or the server answered NOSCRIPT (no fallback)."""
    if ctx.connection_lost(actor):
        return True
    return isinstance(reply, Exception) and str(reply).startswith("NOSCRIPT")


def worker(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    """A worker process: takes the job it holds (or fetches one), processes it (``renewals`` lock
    renewals), finishes it, and goes on with the next job (fetch-next, or a separate fetch in
    finish-then-fetch) until it has finished ``jobs``. A failed round trip (a lost connection, NOSCRIPT
    without a fallback) follows ``on_error``: ``none`` gives the job up and stops, ``retry`` sends the same
    call once more, ``refetch`` gives the job up and fetches another."""
    mode = spec.mode or ctx.mode
    scenario = ctx.scenario
    job = spec.holds
    token = ctx.new_token(spec.id) if job is not None else None
    defa: str | None = None
    if job is not None:
        ctx.begin(spec.id, job, token or "")
    else:
        job, token, defa = yield from _take(ctx, spec, spec.fetch_attempts)
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
            yield from renew(ctx, spec.id, job, token)
        fetch_next = spec.fetch_next and wants_more and mode not in ("finish-then-fetch", "transaction")
        target: api.Target = "failed" if spec.finish == "failed" or defa else "completed"
        if defa:
            value: Any = defa
        elif spec.finish == "completed":
            value = spec.value
        else:
            value = spec.value if spec.value != "done" else "failed"
        if mode == "transaction":
            reply = yield from transaction_finish(ctx, spec.id, job, target, value, opts, spec.watch, keep_open=True)
        else:
            reply = yield from finish(ctx, spec.id, mode, job, target, value, opts, fetch_next, keep_open=True)
            if _failed(ctx, spec.id, reply) and spec.on_error == "retry":
                reply = yield from finish(ctx, spec.id, mode, job, target, value, opts, fetch_next, keep_open=True)
        outcome = Outcome.of(reply)
        ctx.end(spec.id, job, outcome)
        if _failed(ctx, spec.id, reply) or (isinstance(reply, Exception) and spec.on_error != "none"):
            if spec.on_error != "refetch" or not wants_more:
                return  # the job is given up: it stays where the failed round trip left it
            job, token, defa = yield from _take(ctx, spec, 1)
            continue
        if not wants_more:
            return
        nxt = outcome.next_job if outcome.ok and fetch_next else None
        defa = deferred_failure(reply) if nxt is not None else None
        if nxt is None and mode in ("finish-then-fetch", "transaction") and spec.fetch_next:
            reply = yield from fetch(ctx, spec.id, token)
            nxt = _next_job(reply)
            defa = deferred_failure(reply)
        job = nxt
        if job is not None:
            ctx.begin(spec.id, job, token)


def _take(ctx: ActorContext, spec: ActorSpec, attempts: int) -> Generator[Op, Any, tuple[str | None, str | None,
                                                                                          str | None]]:
    """Up to ``attempts`` fetches under fresh tokens; the job taken (begun as an execution), its token and
    its deferred failure, or ``(None, None, None)``. A fetch whose reply was lost counts as an empty one."""
    for _ in range(attempts):
        token = ctx.new_token(spec.id)
        reply = yield from fetch(ctx, spec.id, token)
        if ctx.connection_lost(spec.id):
            continue
        nj = _next_job(reply)
        if nj is not None:
            ctx.begin(spec.id, nj, token)
            return nj, token, deferred_failure(reply)
    return None, None, None


def sweep(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    mode = spec.mode or "atomic"
    for _ in range(spec.runs):
        yield from sweep_once(ctx, spec.id, spec.max_stalled, mode)


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

    def lock() -> tuple[str, str | None]:
        # the lease's token is read when the event fires (the owner may have re-acquired since)
        return job, ctx.current_token(owner, job) if owner else None

    yield from lapse(ctx, spec.id, job, lock, f"{job}:lock of {owner} lapses")


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


def crash(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    """A crash of process ``of`` (a fault event the scheduler places anywhere). Afterwards, with ``lapse``,
    the lock of each job the dead process held lapses when its TTL runs out (one clock event per job,
    also placed by the scheduler); with ``restart``, the worker starts again as a new process (it fetches,
    under this actor's id and fresh tokens)."""
    assert spec.of is not None
    reply = yield Op("fault", "crash", section=f"{spec.of} crashes", fault=Fault("crash", spec.of))
    ctx.note(spec.id, Result("crash"))
    held = list(reply) if isinstance(reply, tuple) else []  # (job, token) of each execution it cut short
    if spec.lapse:
        for job, token in held:
            yield from lapse(ctx, spec.id, job, _fixed(job, token), f"{job}:lock of crashed {spec.of} lapses")
    if spec.restart:
        target = next(a for a in ctx.scenario.actors if a.id == spec.of)
        from dataclasses import replace as _replace

        yield from worker(ctx, _replace(target, id=spec.id, holds=None))


def _fixed(job: str, token: str) -> Callable[[], tuple[str, str | None]]:
    return lambda: (job, token)


def disconnect(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    """``of``'s connection drops while its next round trip is in flight (a fault event): with ``applied``
    the request ran and only the reply is lost, without it the request never arrived."""
    assert spec.of is not None
    how = "its request runs, the reply is lost" if spec.applied else "its request is lost"
    yield Op("fault", "disconnect", section=f"{spec.of}'s connection drops ({how})",
             fault=Fault("disconnect", spec.of, spec.applied))
    ctx.note(spec.id, Result("disconnect"))


def script_flush(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    """The server's script cache is emptied (a fault event): every script's next EVALSHA gets NOSCRIPT."""
    yield Op("fault", "script-flush", section="the script cache is emptied", fault=Fault("script-flush"))
    ctx.note(spec.id, Result("script-flush"))


def restart(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    """The server restarts without persistence (a fault event): the run's keys and the script cache are
    lost, and every process's connection drops."""
    yield Op("fault", "restart", section="the server restarts (no persistence)", fault=Fault("restart"))
    ctx.note(spec.id, Result("restart"))


#: actor kind -> its generator function; :mod:`emqlab.engine.pyactors` adds the ``python`` kind when it is imported
#: (the Runner imports it), so this module does not depend on the Python-actor driver
FACTORIES: dict[str, Callable[[Any, ActorSpec], ActorGen]] = {
    "worker": worker,
    "sweep": sweep,
    "lease": lease,
    "producer": producer,
    "canceller": canceller,
    "crash": crash,
    "disconnect": disconnect,
    "script-flush": script_flush,
    "restart": restart,
}
