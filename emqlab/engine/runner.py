"""The Runner: executes a scenario's actors one step at a time, in the order a schedule says, against
fakeredis or a live Redis, and records the history.

Every timestamp comes from a virtual clock (step *k* runs at ``T0 + k`` ms; on fakeredis ``TIME`` answers it
too: :mod:`emqlab.scripting.clock`), every lock token is deterministic (``W1:1`` = W1's first acquisition), and
time-driven events (a lock lapsing, the stalled interval passing) are explicit steps or clock effects, never
wall-clock TTLs, so replaying a schedule gives the same history on fakeredis and on a live server.

Each kind of step (a command, an atomic script, a pipeline or MULTI … EXEC, a Python actor's round trip, a
fault, a request a dropped connection never delivered) is one method of :attr:`Runner.STEP_KINDS`; the rest
of a step is the same for all. For each step the Runner records its *footprint* (the keys it read and
wrote, :mod:`emqlab.engine.footprints`), observed as it ran: the exploration's partial-order reduction uses it.
Instruments see each step; the :class:`EffectRecorder` (on by default) describes what the step did to the
queue as typed effects. The anomaly check is given to the Runner (``check=``); the Runner knows no anomaly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import redis

import emqlab.engine.pyactors  # noqa: F401 - adds the "python" actor kind to FACTORIES
from emqlab.backend.busy import release_interrupted
from emqlab.backend.connect import (
    Executor,
    FaultScope,
    Namespace,
    ServerFault,
    adopt,
    command_executor,
    describe,
    is_fake,
    server_fault,
    unique_queue,
)
from emqlab.backend.faults import FaultRefused
from emqlab.engine import footprints, live
from emqlab.engine.actors import FACTORIES, ActorGen, Op
from emqlab.engine.atomic import atomic_step
from emqlab.engine.context import Check, Fault, Instrument, OwnScripts, StepRecord
from emqlab.engine.effects import QueueView, read_view
from emqlab.engine.footprints import Footprint
from emqlab.engine.history import Execution, FinalState, History, Step, read_final_state, step_reply
from emqlab.engine.live import Safety, SameServer, Sessions, fault_of, kill_script, sorted_smembers
from emqlab.engine.pywire import NOSCRIPT, PyWire, shown
from emqlab.engine.recorder import EffectRecorder
from emqlab.engine.seed import LOCK_MS, T0, seed_commands
from emqlab.engine.specs import FAULT_KINDS, Scenario
from emqlab.protocol.commands import command_keys, is_read_only, key_access
from emqlab.protocol.keys import PLACEMENTS, QueueKeys
from emqlab.protocol.outcome import Outcome, Result
from emqlab.protocol.schedules import ScheduleError, format_schedule, preemptions
from emqlab.scripting.clock import virtual_clock
from emqlab.scripting.dialect import REDIS7, server_dialect
from emqlab.scripting.host import LuaHost, ScriptRun, Status
from emqlab.scripting.registry import ScriptSet, default_scripts

#: what an actor sees when its connection drops mid round trip (whether or not the request ran)
LOST = "Connection lost while the request was in flight: the reply never came"


@dataclass
class StepDone:
    """A step's request carried out by the function of its kind (:attr:`Runner.STEP_KINDS`): the reply, how
    the step is shown (``name``, ``args``, ``keys``), its footprint, and what its record says of it."""

    reply: Any
    name: str
    args: list[str]
    keys: list[str]
    footprint: Footprint = field(default_factory=Footprint)
    command: tuple[bytes, ...] | None = None
    #: keys the step wrote (from the command table); ``None`` when unknown
    written: Sequence[bytes] | None = None
    read_only: bool = False
    #: the commands of a pipelined or MULTI … EXEC step
    batch: Sequence[tuple[bytes, ...]] | None = None
    #: an atomic step's KEYS (live: they get the safety TTL again)
    script_keys: Sequence[Any] = ()
    outcome: str = "ok"
    applied: bool = True
    #: every command the step sent with its reply, when known (:attr:`emqlab.engine.context.StepRecord.calls`)
    calls: Sequence[tuple[Sequence[Any], Any]] | None = None


def step_kind(op: Op, armed: bool | None) -> str:
    """Which method of :attr:`Runner.STEP_KINDS` carries out ``op``: ``fault``, ``unsent`` (a disconnect
    fault dropped the request before it arrived: ``armed`` is False), ``python`` (a Python actor's round
    trip), ``batch`` (a pipeline or MULTI … EXEC), else the op's kind (``script``, ``clock``, ``command``)."""
    if op.kind == "fault":
        return "fault"
    if armed is False:
        return "unsent"
    if op.python:
        return "python"
    if op.batch is not None:
        return "batch"
    return op.kind


def recorded_inputs(instruments: Sequence[Any]) -> frozenset[str]:
    """The check inputs the ``instruments`` record (each instrument's ``records``: a name or several)."""
    out: set[str] = set()
    for i in instruments:
        r = getattr(i, "records", None)
        out.update((r,) if isinstance(r, str) else r or ())
    return frozenset(out)


class Runner:
    """Runs one scenario in one finish mode, one step at a time.

    ``conn`` is the backend (default: a new fakeredis server). On a live server the queue gets a unique
    name (``q-1a2b3c4d``) unless ``queue`` is given; the run claims the queue's namespace (refusing if its
    keys exist) and :meth:`close` deletes them. ``scripts`` selects the script set (emqlab's by default;
    BullMQ's shipped set to replay the upstream scripts). ``instruments`` observe every step; by default an
    :class:`EffectRecorder` (``effects=False`` leaves it out: faster, and the checks that need effects are
    then reported as unchecked instead of guessed). ``check`` is the anomaly check run on each history.
    ``clock`` replaces the step-counting virtual clock (timed runs); ``factories`` maps actor kinds to
    generator functions, overriding or adding to :data:`emqlab.engine.actors.FACTORIES`.

    On fakeredis (``local_scripts=True``, the default) an atomic step runs the script through the Lua host
    with its commands executed back to back inside the one step, instead of fakeredis's own EVALSHA: nothing
    can run between them (the scheduler is single-threaded and owns the in-process server), so the step is
    exactly as atomic, and its footprint is observed. ``local_scripts=False`` uses fakeredis's EVALSHA. On a
    live server an atomic step of one of emqlab's own scripts is one EVALSHA, of any other script a run
    through the Lua host, kept to the run's keys like every script the host runs (:mod:`emqlab.engine.atomic`;
    a set marked :meth:`~emqlab.scripting.registry.ScriptSet.trusted` is sent as EVALSHA too)."""

    def __init__(self, scenario: Scenario, mode: str = "split", conn: redis.Redis | None = None, *,
                 scripts: ScriptSet | None = None, queue: str | None = None, effects: bool = True,
                 instruments: Sequence[Any] | None = None, check: Check | None = None,
                 clock: Callable[[], int] | None = None,
                 factories: dict[str, Callable[..., ActorGen]] | None = None,
                 local_scripts: bool = True) -> None:
        from emqlab.backend.connect import connect

        self.scenario = scenario
        self.mode = mode
        #: the backend (a client of yours that speaks RESP3 or decodes replies is replaced:
        #: emqlab.backend.clients.adopt)
        self.conn, self._own_conn = adopt(conn) if conn is not None else (connect(), False)
        if queue is None:
            queue = scenario.queue if is_fake(self.conn) else unique_queue(scenario.queue)
        self.keys = QueueKeys(queue, job_key=scenario.job_key, job_field=scenario.job_field)
        with live.as_fault(f"registering the run on {describe(self.conn)}", "no run can start"):
            self.namespace = Namespace(self.conn, self.keys).claim()
        try:  # from here on the run owns keys: anything that stops the constructor deletes them
            self.scripts = scripts or default_scripts()
            #: actors with a ``script:`` of their own: their script set (the run's, with that script in place)
            self._actor_scripts: dict[str, ScriptSet] = {
                a.id: self.scripts.overlay(a.script) for a in scenario.actors if a.script is not None}
            self._executor: Executor = command_executor(self.conn)
            self._fake = fake = is_fake(self.conn)
            #: the safety TTLs of the run's keys (on a live server)
            self._safety = Safety(self.namespace)
            self.exec: Callable[..., Any] = (sorted_smembers(self._executor) if fake
                                             else self._safety.tracking(self._executor))
            self._local_scripts = local_scripts and fake
            self._specs = {a.id: a for a in scenario.actors}
            #: the scenario injects faults: every step also reads its process's liveness (a crash or a
            #: disconnect of that process writes it), and atomic steps read the script cache (a flush writes it)
            self._faulty = any(a.kind in FAULT_KINDS for a in scenario.actors)
            if any(a.kind == "restart" for a in scenario.actors) and not fake:
                raise FaultRefused(f"the restart fault needs a server emqlab owns (fakeredis): emqlab never restarts "
                                   f"{describe(self.conn)}, a server it did not start")
            if any(a.kind == "script-flush" for a in scenario.actors) and not fake:
                raise FaultRefused(f"the script-flush fault needs a server emqlab owns (fakeredis): SCRIPT FLUSH would "
                                   f"empty the script cache of every client of {describe(self.conn)}")
            #: the host follows the server's dialect (Redis 7 or Valkey: its texts, the commands a script may call)
            self.host = LuaHost(dialect=REDIS7 if fake else server_dialect(self.conn))
            chosen = list(instruments) if instruments is not None else []
            if effects and not any(isinstance(i, EffectRecorder) for i in chosen):
                chosen.insert(0, EffectRecorder())
            self.instruments: list[Instrument] = chosen
            self._before_hooks = [h for h in (getattr(i, "before_step", None) for i in chosen) if h is not None]
            self._after_hooks = [h for h in (getattr(i, "after_step", None) for i in chosen) if h is not None]
            self.check = check
            self.clock = clock
            self.factories = {**FACTORIES, **(factories or {})}
            self.job_ids = list(scenario.jobs)
            self._closed = False
            #: the keys could not be deleted at close() (the server was unreachable)
            self.left_behind = False
            self._initial: list[tuple[bytes, ...]] | None = None
            self._initial_view: QueueView | None = None
            #: an argument's text as a step shows it, by the bytes sent (a search sends the same few hundred)
            self._shown: dict[bytes, str] = {}
            self._runs: list[ScriptRun] = []
            self._gens: dict[str, ActorGen] = {}
            #: each actor's own connection (its WATCH and MULTI state)
            self._sessions = Sessions(self.conn, fake, self.keys.base, self._safety.tracking)
            #: notices a restart or a failover of the live server (emqlab.engine.live.ServerWatch)
            self.same_server = SameServer(self.conn, fake)
            #: a run-scoped server fault of the constructor's reset: raised by step() and history() until a
            #: reset() succeeds (an exploration resets before every run, so it aborts only that run)
            self._deferred: ServerFault | None = None
            #: the Python actors' round trips (the run's script cache, each connection's WATCH / MULTI)
            self._wire = PyWire(self.keys.base, fake, self.exec, self._executor, self._sessions.tracked,
                                self.host if self._local_scripts else None, self._kill_script, self.scripts,
                                scenario.loaded_scripts)
            try:
                self.reset()
            except ServerFault as e:
                if e.scope is not FaultScope.RUN:
                    raise
                self._deferred = e
        except BaseException:  # (an error, a Ctrl-C, a SIGTERM while the initial state is written)
            self._abandon()
            raise

    @property
    def effects(self) -> bool:
        """Effects are recorded (an :class:`EffectRecorder` is among the instruments)."""
        return "effects" in recorded_inputs(self.instruments)

    # -- lifecycle -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the scenario's initial state: drop every unfinished actor and script run, delete the
        namespace, write the initial keys, restart every actor."""
        self._drop_actors()
        self.pending: dict[str, Op] = {}
        self._safety.clear()
        self._same_server("starting a run")
        self.namespace.heartbeat()  # (a live run: its claim in the run index stays fresh while it runs)
        if self.namespace.sole_owner:
            self.exec(b"FLUSHDB")  # a fakeredis server this process created, holding only this run's keys
        else:
            with live.as_fault("deleting the last run's keys"):
                self.namespace.reset()
        self._write_initial_state()
        self.index = 0
        self.choices: list[str] = []
        self.enabled_at: list[list[str]] = []
        self.steps: list[Step] = []
        #: footprint of each step taken, in order (the exploration reads it)
        self.footprints: list[Footprint] = []
        #: (script, its KEYS, footprint) observed for each atomic step run through the Lua host
        self.observed: list[tuple[str, tuple[Any, ...], Footprint]] = []
        #: step number → the calls an atomic step's script made through the Lua host, in order: (command,
        #: raw reply or the error it raised) each; a script sent to the server as one EVALSHA has none here
        self.script_calls: dict[int, tuple[tuple[tuple[Any, ...], Any], ...]] = {}
        self.executions: list[Execution] = []
        self.results: dict[str, list[Result]] = {a.id: [] for a in self.scenario.actors}
        self._tokens: dict[str, int] = {}
        self._run_count = 0
        self.actor_steps: dict[str, int] = {a.id: 0 for a in self.scenario.actors}
        self.pending = {}
        #: actors whose next round trip loses its reply (a disconnect fault armed it); whether it runs
        self._armed: dict[str, bool] = {}
        #: actors whose last reply was lost
        self._lost: set[str] = set()
        #: scripts the server's cache holds (all, until a script-flush fault)
        self._cached: set[str] | None = None
        #: actor -> the step (0-based) of the crash that ended it while it had a step pending
        self.kills: dict[str, int] = {}
        self._sessions.watched = {}
        self._wire.reset()
        for inst in self.instruments:
            start = getattr(inst, "start", None)
            if start is not None:
                start(self)
        for spec in self.scenario.actors:
            own = self._actor_scripts.get(spec.id)
            gen = self.factories[spec.kind](self if own is None else OwnScripts(self, own), spec)
            try:
                self.pending[spec.id] = next(gen)
                self._gens[spec.id] = gen
            except StopIteration:
                pass
        self._deferred = None

    def _drop_actors(self) -> None:
        for gen in self._gens.values():
            gen.close()
        self._gens = {}
        self._sessions.close_all()  # an actor's WATCH and any open MULTI go with its connection
        for run in self._runs:
            run.close()
        self._runs = []

    def _abandon(self) -> None:
        """The constructor did not finish: delete what the run claimed and wrote, whatever state it got to."""
        try:
            self._drop_actors()
        except Exception:  # noqa: BLE001 - half-built: best effort, the claim's release below matters
            pass
        self.left_behind = not live.release(self.namespace)
        if (executor := getattr(self, "_executor", None)) is not None:
            executor.close()
        self._closed = True

    def close(self) -> None:
        """Delete the run's keys (only those under its queue's base) and release the connection. When the
        server cannot be reached any more (the exploration stopped on a lost connection) or stays busy with a
        script (:func:`emqlab.engine.live.release`), the keys are left to their safety TTL and the run index's
        lease (:mod:`emqlab.backend.namespace`), and ``left_behind`` is True."""
        if not self._closed:
            release_interrupted(self.conn)  # (when an interrupt closes it)
            self._drop_actors()
            self.left_behind = not live.release(self.namespace)
            self._executor.close()
            if self._own_conn:
                self.conn.close()
            self._closed = True

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the actor context -----------------------------------------------------------------------
    def now(self) -> int:
        """Virtual time in ms: step *k* runs at ``T0 + k``, unless a ``clock`` was given (timed runs)."""
        if self.clock is not None:
            return self.clock()
        return T0 + self.index

    def script_text(self, name: str) -> bytes:
        return self.scripts[name].text

    def new_token(self, actor: str) -> str:
        n = self._tokens.get(actor, 0) + 1
        self._tokens[actor] = n
        return f"{actor}:{n}"

    def begin(self, actor: str, job: str, token: str) -> None:
        self.executions.append(Execution(actor, job, token, self.index))

    def end(self, actor: str, job: str, outcome: Outcome) -> None:
        for i in range(len(self.executions) - 1, -1, -1):
            e = self.executions[i]
            if e.actor == actor and e.job == job and e.open:
                self.executions[i] = replace(e, end=self.index, result=str(outcome), released=outcome.ok,
                                             outcome=outcome)
                return

    def current_token(self, actor: str | None, job: str) -> str | None:
        for e in reversed(self.executions):
            if e.actor == actor and e.job == job:
                return e.token
        return None

    def note(self, actor: str, result: Result) -> None:
        self.results[actor].append(result)

    def connection_lost(self, actor: str) -> bool:
        return actor in self._lost

    def split(self, script: str | bytes, keys: Sequence[Any], args: Sequence[Any], *,
              read_only: bool = False) -> ScriptRun:
        text = self.scripts[script].text if isinstance(script, str) else script
        run = self.host.start(text, keys, args, confine=self.keys.base.encode(), read_only=read_only)
        self._runs = [r for r in self._runs if not r.closed]
        self._runs.append(run)
        return run

    @property
    def split_runs(self) -> tuple[ScriptRun, ...]:
        """The split script runs of this run still open (read-only: a copy), oldest first."""
        return tuple(r for r in self._runs if not r.closed)

    def script_source(self, sha: bytes) -> bytes | None:
        """The source of the script ``sha`` (lower-case hex) if the run's script cache holds it (see
        :mod:`emqlab.engine.pyactors`)."""
        return self._wire.cache.get(sha)

    def script_run(self) -> int:
        """A new script-run number (the steps of one split script share it; numbers count from 1 per run)."""
        self._run_count += 1
        return self._run_count

    # -- stepping --------------------------------------------------------------------------------
    @property
    def enabled(self) -> list[str]:
        """Actors with a step left, in scenario order."""
        return [a.id for a in self.scenario.actors if a.id in self.pending]

    done = property(lambda self: not self.pending, doc="Whether every actor took all its steps.")

    def step(self, actor: str) -> Step:
        """Let ``actor`` take its next step. Raises :class:`ScheduleError` if it has none, and
        :class:`ServerFault` for an infrastructure error (the step is not recorded; with scope
        :attr:`~emqlab.backend.faults.FaultScope.RUN` a :meth:`reset` starts the next run afresh).

        The step's request is carried out by the function of its kind in :attr:`STEP_KINDS` (see
        :func:`step_kind`); what is around it — the clock, the instruments, the server-fault check, the
        record, the reply handed back to the actor — is the same for every kind."""
        if self._deferred is not None:
            raise self._deferred
        op = self.pending.get(actor)
        if op is None:
            left = ", ".join(self.enabled) or "none"
            took = self.actor_steps.get(actor)
            raise ScheduleError(f"actor {actor} has no step left at step {self.index + 1} (it took all its"
                                f" {took} step{'' if took == 1 else 's'}; actors with steps left: {left})")
        self.enabled_at.append(self.enabled)
        self.choices.append(actor)
        self.index += 1
        now = self.now()
        base = self.keys.base
        fp = Footprint()
        with live.as_fault(f"{actor}'s step {self.index}"):  # (an instrument's reads, the step's own first)
            for hook in self._before_hooks:
                hook(self, actor, op)
            for cmd in op.pre:
                self.exec(*cmd)
                fp = fp | footprints.of_command(cmd, base)
        armed = self._armed.pop(actor, None)
        self._lost.discard(actor)
        if self._faulty:
            fp = fp | Footprint(reads=frozenset({("proc", actor)}))
        with virtual_clock(now if self._fake else None):
            done = self.STEP_KINDS[step_kind(op, armed)](self, actor, op, now)
        fp = fp | done.footprint
        reply, name = done.reply, done.name
        outcome = "info" if armed is not None else done.outcome
        fault = server_fault(reply)
        if op.python:  # (NOSCRIPT there is the run's script cache answering, a reply like any other)
            faults = (server_fault(r) for r in (reply if isinstance(reply, list) else [reply]))
            fault = next((f for f in faults if f is not None and not f.startswith("NOSCRIPT")), None)
        if fault is not None and outcome != "fail":  # (a script-flush fault's NOSCRIPT is the point of it)
            raise fault_of(f"{actor}'s {name} at step {self.index} got a server error ({fault}): a run cannot"
                            " go on truthfully past a server fault (its result would count an error as the"
                            " step's answer)", fault)
        if not is_fake(self.conn):
            self._safety.protect(done.script_keys)
        self.actor_steps[actor] += 1
        rec = StepRecord(actor, op.kind, name, done.args, reply, done.command, written=done.written,
                         read_only=done.read_only, batch=done.batch, calls=done.calls)
        with live.as_fault(f"reading what {actor}'s step {self.index} did"):
            for hook in self._after_hooks:
                hook(self, actor, op, rec)
        shown = step_reply(reply)
        if name == "XADD" and isinstance(shown, str) and not shown.startswith("ERR"):
            shown = "<entry id>"  # server time: differs between backends and runs
        step = Step(self.index, actor, self.actor_steps[actor], op.kind, name, tuple(rec.args), tuple(done.keys),
                    shown, now, tuple(rec.effects), op.section if op.kind == "command" else "", op.run,
                    read_only=done.read_only, outcome=outcome, applied=done.applied,  # type: ignore[arg-type]
                    script=op.script, scripts=op.scripts)
        self.steps.append(step)
        self.footprints.append(fp)
        if armed is not None:  # the actor sees the same error whether or not its request ran
            reply = redis.exceptions.ConnectionError(LOST)
            self._lost.add(actor)
            if op.python:  # its connection is gone, and with it any WATCH or open MULTI
                self._close_conn(op.conn or actor)
        gen = self._gens[actor]
        try:
            self.pending[actor] = gen.send(reply)
        except StopIteration:
            del self.pending[actor]
            del self._gens[actor]
        return step

    # -- the step kinds: each carries out one kind of request and says how the step is shown -------------
    def _fault_step(self, actor: str, op: Op, now: int) -> StepDone:
        assert op.fault is not None
        reply, fp = self._fault(op.fault)
        return StepDone(reply, op.label, [op.section], [], fp)

    def _unsent_step(self, actor: str, op: Op, now: int) -> StepDone:
        """A disconnect fault dropped the request before it reached the server: nothing runs."""
        if op.batch is not None:
            name, args, keys = self._batch_shown(op, op.batch(now))
        elif op.kind == "script":
            assert op.build is not None
            call = op.build(now)
            name, args = call.name, [self._show(a) for a in call.args]
            keys = [self.keys.relative(k) for k in call.keys]
        else:
            command = op.lazy() if op.lazy is not None else op.command
            assert command is not None
            name, args = command[0].decode().upper(), [self._show(a) for a in command[1:]]
            keys = [self.keys.relative(k) for k in (command_keys(command) or ())]
            return StepDone(None, name, args, keys, command=command, outcome="info", applied=False)
        return StepDone(None, name, args, keys, outcome="info", applied=False)

    def _python_step(self, actor: str, op: Op, now: int) -> StepDone:
        reply, fp, command, batch = self._wire.round_trip(op.conn or actor, op, now)
        if batch is not None:
            name, args, keys = self._batch_shown(op, batch)
            return StepDone(reply, name, args, keys, fp, batch=batch, read_only=all(is_read_only(c[0]) for c in batch))
        assert command is not None
        name, args, written = shown(command, self._show)
        keys = [self.keys.relative(k) for k in (command_keys(command) or ())]
        return StepDone(reply, name, args, keys, fp, command=command, written=written,
                    read_only=is_read_only(command[0]))

    def _batch_step(self, actor: str, op: Op, now: int) -> StepDone:
        assert op.batch is not None
        cmds = op.batch(now)
        reply, fp = self._sessions.batch(actor, cmds, op.multi)
        name, args, keys = self._batch_shown(op, cmds)
        return StepDone(reply, name, args, keys, fp, batch=cmds,
                    read_only=not op.multi and all(is_read_only(c[0]) for c in cmds))

    def _script_step(self, actor: str, op: Op, now: int) -> StepDone:
        assert op.build is not None
        call = op.build(now)
        reply, observed, written = self._atomic(call.name, call.keys, call.args, actor)
        failed = isinstance(reply, redis.exceptions.ResponseError) and str(reply) == NOSCRIPT
        # (the keys it wrote are known only where the Lua host ran it, and saw every call it made)
        calls = None if written is None else self.script_calls.get(self.index, ())
        return StepDone(reply, call.name, [self._show(a) for a in call.args],
                        [self.keys.relative(k) for k in call.keys], observed, script_keys=call.keys,
                        written=written, outcome="fail" if failed else "ok", calls=calls)

    def _command_step(self, actor: str, op: Op, now: int) -> StepDone:
        """One command (a clock event is one too: its lapse script's EVAL, shown as the event)."""
        command = op.lazy() if op.lazy is not None else op.command
        assert command is not None
        execute = self._safety.tracking(self._sessions.execute(actor)) if op.session else self.exec
        try:
            reply = execute(*command)
        except redis.exceptions.ResponseError as e:
            reply = e
        base = self.keys.base
        access = key_access(command)
        fp = footprints.of_command(command, base, access)
        if command[0].upper() == b"WATCH":  # its EXEC's fate depends on every later write to these keys
            self._sessions.watched[actor] = tuple(command[1:])
            fp = fp | footprints.of_commands([(b"EXISTS", *command[1:])], base)
        written = access.writes if access is not None and not access.writes_any else None
        # (a command of a MULTI is queued, not run: what it does is its EXEC's)
        calls = None if op.session else ((command, reply),)
        if op.kind == "clock":  # (its script, LAPSE_LUA, writes only its one KEY)
            return StepDone(reply, op.label, [op.section], [self.keys.relative(command[3])], fp, command=command,
                            written=written, calls=calls)
        return StepDone(reply, command[0].decode().upper(), [self._show(a) for a in command[1:]],
                    [self.keys.relative(k) for k in (command_keys(command) or ())], fp, command=command,
                    written=written, read_only=is_read_only(command[0]) and not op.pre, calls=calls)

    #: step kind (:func:`step_kind`) -> the method that carries out its request
    STEP_KINDS: ClassVar[dict[str, Callable[[Runner, str, Op, int], StepDone]]] = {
        "fault": _fault_step, "unsent": _unsent_step, "python": _python_step, "batch": _batch_step,
        "script": _script_step, "command": _command_step, "clock": _command_step}

    def run(self, choices: Sequence[str] = (), *, choose: Callable[[Runner], str] | None = None,
            max_steps: int = 10_000) -> History:
        """Replay ``choices`` from the current state, then continue with ``choose`` (default: the first
        enabled actor, i.e. no further preemption) until every actor is done. Returns the history."""
        for c in choices:
            self.step(c)
        pick = choose or (lambda r: r.enabled[0])
        while not self.done:
            if self.index >= max_steps:
                raise ScheduleError(f"the run did not end within {max_steps} steps")
            self.step(pick(self))
        return self.history()

    # -- results ---------------------------------------------------------------------------------
    @property
    def schedule(self) -> str:
        return format_schedule(self.choices)

    @property
    def preemptions(self) -> int:
        return preemptions(self.choices, self.enabled_at)

    def history(self) -> History:
        """The history so far, with the final state and, when the Runner has a check, the anomalies."""
        if self._deferred is not None:
            raise self._deferred
        recorded = recorded_inputs(self.instruments)
        self._same_server(f"ending the run at step {self.index}")
        if not is_fake(self.conn):  # (the run is over: no script of it can see a TTL set now)
            self._safety.protect([self.keys.job(j).encode() for j in self.job_ids], fresh=True)
        h = History(self.scenario.name, self.mode, self.schedule, tuple(self.steps), tuple(self.executions),
                    self.final_state(), results={k: tuple(v) for k, v in self.results.items()},
                    recorded=recorded)
        for inst in self.instruments:
            hook = getattr(inst, "after_run", None)
            if hook is not None:
                hook(self, h)
        if self.check is not None:
            found, unchecked = self.check(h, self.scenario)
            h = h.with_findings(found, unchecked)
        return h

    def initial_view(self) -> QueueView:
        """The queue's view in the initial state (read once per Runner)."""
        if self._initial_view is None:
            with live.as_fault("reading the initial state"):
                self._initial_view = read_view(self.exec, self.keys, self.job_ids, extra=self.scenario.places)
        return self._initial_view

    def final_state(self) -> FinalState:
        """The queue's state now (:func:`emqlab.engine.history.read_final_state`); its placements and locks
        from the effect recorder's view when that is current (it holds what a read would give:
        :mod:`emqlab.engine.derived`)."""
        view = None
        for inst in self.instruments:
            if isinstance(inst, EffectRecorder):
                view = inst.view if inst.at == self.index else None
                break
        with live.as_fault(f"reading the final state at step {self.index}"):
            return read_final_state(self.exec, self.keys, self.job_ids, self.scenario.places, self.scenario.metrics,
                                    self.scenario.final_reads(), view=view)

    # -- internals -------------------------------------------------------------------------------
    def _atomic(self, name: str, keys: Sequence[Any], args: Sequence[Any],
                actor: str = "") -> tuple[Any, Footprint, tuple[bytes, ...] | None]:
        """One atomic script step, its footprint and the keys it wrote (:func:`emqlab.engine.atomic.atomic_step`)."""
        return atomic_step(self, name, keys, args, actor)

    def _kill_script(self, name: str) -> ServerFault:
        """SCRIPT KILL for script ``name`` that ran past the socket timeout (:func:`emqlab.engine.live.kill_script`)."""
        return kill_script(self.conn, self.keys.base, name)

    def _same_server(self, when: str) -> None:
        self.same_server.check(when)

    # -- Python actors (emqlab.engine.pyactors; their round trips: emqlab.engine.pywire) ---------------------------
    def _close_conn(self, conn: str) -> None:
        self._sessions.close(conn)
        self._wire.forget(conn)

    def _batch_shown(self, op: Op, cmds: Sequence[tuple[bytes, ...]]) -> tuple[str, list[str], list[str]]:
        names = " ".join(c[0].decode().upper() for c in cmds)
        keys = list(dict.fromkeys(self.keys.relative(k) for c in cmds for k in (command_keys(c) or ())))
        if op.multi:
            return "EXEC", [f"MULTI {names} EXEC"], keys
        return "PIPELINE", [names], keys

    def _fault(self, fault: Fault) -> tuple[Any, Footprint]:
        """Carry out a fault event; returns the reply its actor gets and its footprint (what it changes:
        the target's liveness, or the script cache)."""
        if fault.kind == "restart":
            lost = self.namespace.reset()
            self._cached = set()
            self._wire.cache = {}
            self._sessions.close_all()
            self._sessions.watched = {}
            self._wire.conns = {}
            for other in self.pending:  # its connection is dead: its next request never arrives
                self._armed[other] = False
            fp = Footprint.everything()
            return f"restarted: {lost} key(s) lost", fp | Footprint(writes=frozenset(("proc", a) for a in self.pending))
        if fault.kind == "script-flush":
            self._cached = set()
            self._wire.cache = {}
            return Status(b"OK"), Footprint(writes=frozenset(("scripts", n) for n in self.scripts.names()))
        target = fault.target
        assert target is not None
        fp = Footprint(writes=frozenset({("proc", target)}))
        if target not in self.pending:
            return "already ended" if fault.kind == "crash" else "no request in flight", fp
        if fault.kind == "disconnect":
            self._armed[target] = fault.applied
            return "armed", fp
        gen = self._gens.pop(target)
        del self.pending[target]
        self.kills[target] = self.index - 1
        self._armed.pop(target, None)
        gen.close()  # a split script it was running stops where it was
        held = []
        for i, e in enumerate(self.executions):
            if e.actor == target and e.open:
                self.executions[i] = replace(e, crashed=self.index)
                held.append((e.job, e.token))
        return tuple(held), fp

    def _show(self, a: Any) -> str:
        if type(a) is bytes:
            found = self._shown.get(a)
            if found is None:
                if len(self._shown) >= 4096:
                    self._shown.clear()
                found = self._shown[a] = self._show_text(a)
            return found
        return self._show_text(a)

    def _show_text(self, a: Any) -> str:
        if isinstance(a, bytes):
            try:
                text = a.decode()
            except UnicodeDecodeError:
                return "<msgpack>"
            if not text.isprintable():
                return "<msgpack>"
        else:
            text = str(a)
        return self.keys.relative(text) if text.startswith(self.keys.base) else text

    def _write_initial_state(self) -> None:
        if self._initial is None:
            self._initial = seed_commands(self.scenario, self.keys)
        if is_fake(self.conn):
            for cmd in self._initial:
                self.exec(*cmd)
            return
        self._safety.seed(self.conn, self.keys, self._initial)

__all__ = ["EffectRecorder", "LOCK_MS", "PLACEMENTS", "Runner", "T0", "seed_commands"]
