"""The Runner: executes a scenario's actors one step at a time, in the order a schedule says, against
fakeredis or a live Redis, and records the history.

Every timestamp comes from a virtual clock (step *k* runs at ``T0 + k`` ms), every lock token is
deterministic (``W1:1`` = W1's first acquisition), and time-driven events (a lock lapsing, the stalled
interval passing) are explicit steps or clock effects, never wall-clock TTLs, so replaying a schedule gives
the same history on fakeredis and on a live server.

For each step the Runner records its *footprint* (the keys it read and wrote, :mod:`emqlab.footprints`),
observed as it ran: the exploration's partial-order reduction uses it. Instruments see each step; the
:class:`EffectRecorder` (on by default) describes what the step did to the queue as typed effects. The
anomaly check is given to the Runner (``check=``); the Runner itself knows nothing of anomalies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from emqlab.backend.connect import (
    SAFETY_TTL_MS,
    TTL_OBSERVED,
    BackendError,
    Executor,
    FaultScope,
    Namespace,
    ServerFault,
    adopt,
    command_executor,
    describe,
    is_fake,
    pipeline,
    server_fault,
    session_client,
    unique_queue,
)
from emqlab.engine import footprints
from emqlab.engine.actors import FACTORIES, ActorGen, Op
from emqlab.engine.context import Check, Fault, Instrument, StepRecord
from emqlab.engine.effects import IntervalElapsed, QueueView, diff, read_view, touched_components
from emqlab.engine.footprints import Footprint
from emqlab.engine.history import Execution, FinalState, History, Step
from emqlab.engine.scenario import FAULT_KINDS, Scenario
from emqlab.protocol.commands import DROPS_TTL, command_keys, is_read_only, key_access
from emqlab.protocol.keys import PLACEMENTS, QueueKeys
from emqlab.protocol.outcome import Outcome, Result
from emqlab.protocol.schedules import ScheduleError, format_schedule, preemptions
from emqlab.scripting.host import LuaHost, ScriptRun, Status
from emqlab.scripting.registry import ScriptSet, default_scripts, evalsha

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the virtual clock's origin (ms)
#: what an actor sees when its connection drops mid round trip (whether or not the request ran)
LOST = "Connection lost while the request was in flight: the reply never came"
NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
LOCK_MS = 30000

_JOB_FIELDS = ("atm", "ats", "stc", "defa", "returnvalue", "failedReason", "finishedOn", "processedOn")


class EffectRecorder:
    """The instrument that records effects: reads the queue's view after each step that can have changed
    it (only the components a single command wrote; everything after a script) and appends the
    difference to the step. Costs one to a few reads per step."""

    records = "effects"

    def __init__(self) -> None:
        self.view: QueueView | None = None

    def start(self, runner: Runner) -> None:
        self.view = runner.initial_view()

    def after_step(self, runner: Runner, actor: str, op: Op, rec: StepRecord) -> None:
        if rec.read_only or self.view is None:
            return
        touched = None
        if rec.command is not None and op.kind == "command":
            touched = touched_components(rec.command, runner.keys, runner.job_ids, rec.written, runner.scenario.places)
        after = read_view(runner.exec, runner.keys, runner.job_ids, self.view, touched, runner.scenario.places)
        effects = list(diff(self.view, after))
        if op.pre:
            effects.insert(0, IntervalElapsed("stalled"))
        rec.effects.extend(effects)
        self.view = after


class Runner:
    """Runs one scenario in one finish mode, one step at a time.

    ``conn`` is the backend (default: a new fakeredis server). On a live server the queue gets a unique
    name (``q-1a2b3c4d``) unless ``queue`` is given; the run claims the queue's namespace (refusing if its
    keys exist) and :meth:`close` deletes them. ``scripts`` selects the script set (emqlab's by default;
    BullMQ's shipped set to replay the upstream scripts). ``instruments`` observe every step; by default an
    :class:`EffectRecorder` (``effects=False`` leaves it out: faster, and the checks that need effects are
    then reported as unchecked instead of guessed). ``check`` is the anomaly check run on each history.
    ``clock`` replaces the step-counting virtual clock (timed runs); ``factories`` maps actor kinds to
    generator functions, overriding or adding to :data:`emqlab.actors.FACTORIES`.

    On fakeredis (``local_scripts=True``, the default) an atomic step runs the script through the Lua host
    with its commands executed back to back inside the one step, instead of fakeredis's own EVALSHA: nothing
    can run between them (the scheduler is single-threaded and owns the in-process server), so the step is
    exactly as atomic, and its footprint is observed. ``local_scripts=False`` uses fakeredis's EVALSHA. On a
    live server an atomic step is always one EVALSHA (its footprint is the script's declared prior).
    """

    def __init__(self, scenario: Scenario, mode: str = "split", conn: redis.Redis | None = None, *,
                 scripts: ScriptSet | None = None, queue: str | None = None, effects: bool = True,
                 instruments: Sequence[Any] | None = None, check: Check | None = None,
                 clock: Callable[[], int] | None = None,
                 factories: dict[str, Callable[..., ActorGen]] | None = None,
                 local_scripts: bool = True) -> None:
        from emqlab.backend.connect import connect

        self.scenario = scenario
        self.mode = mode
        #: the backend (a client of yours that speaks RESP3 or decodes replies is replaced: backends.adopt)
        self.conn, self._own_conn = adopt(conn) if conn is not None else (connect(), False)
        if queue is None:
            queue = scenario.queue if is_fake(self.conn) else unique_queue(scenario.queue)
        self.keys = QueueKeys(queue)
        self.namespace = Namespace(self.conn, self.keys).claim()
        try:  # from here on the run owns keys: anything that stops the constructor deletes them
            self.scripts = scripts or default_scripts()
            #: actors with a ``script:`` of their own: their script set (the run's, with that script in place)
            self._actor_scripts: dict[str, ScriptSet] = {
                a.id: self.scripts.overlay(a.script) for a in scenario.actors if a.script is not None}
            self._executor: Executor = command_executor(self.conn)
            fake = is_fake(self.conn)
            #: keys commands wrote since the last step (live: they get the safety TTL after the step)
            self._touched: list[bytes] = []
            #: keys of this run given the safety TTL (and not since stripped of it by a SET, DEL, …)
            self._protected: set[bytes] = set()
            #: every key written in this run (given the safety TTL again when it ends)
            self._written: set[bytes] = set()
            self.exec: Callable[..., Any] = (_sorted_smembers(self._executor) if fake
                                             else self._tracking(self._executor))
            self._local_scripts = local_scripts and fake
            self._specs = {a.id: a for a in scenario.actors}
            #: the scenario injects faults: every step also reads its process's liveness (a crash or a
            #: disconnect of that process writes it), and atomic steps read the script cache (a flush writes it)
            self._faulty = any(a.kind in FAULT_KINDS for a in scenario.actors)
            if any(a.kind == "restart" for a in scenario.actors) and not fake:
                raise BackendError(f"the restart fault needs a server emqlab owns (fakeredis): emqlab never restarts "
                                   f"{describe(self.conn)}, a server it did not start")
            if any(a.kind == "script-flush" for a in scenario.actors) and not fake:
                raise BackendError(f"the script-flush fault needs a server emqlab owns (fakeredis): SCRIPT FLUSH would "
                                   f"empty the script cache of every client of {describe(self.conn)}")
            self.host = LuaHost()
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
            self._runs: list[ScriptRun] = []
            self._gens: dict[str, ActorGen] = {}
            self._sessions: dict[str, redis.Redis] = {}
            self._shas: dict[bytes, bytes] | None = None
            #: the live server's run_id when the Runner started (a restart or a failover changes it)
            self._server_id = None if fake else _server_id(self._executor)
            #: a run-scoped server fault of the constructor's reset: raised by step() and history() until a
            #: reset() succeeds (an exploration resets before every run, so it aborts only that run)
            self._deferred: ServerFault | None = None
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
        return any(getattr(i, "records", None) == "effects" for i in self.instruments)

    # -- lifecycle -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the scenario's initial state: drop every unfinished actor and script run, delete the
        namespace, write the initial keys, restart every actor."""
        self._drop_actors()
        self.pending: dict[str, Op] = {}
        self._touched, self._protected, self._written = [], set(), set()
        self._same_server("starting a run")
        self.namespace.heartbeat()  # (a live run: its claim in the run index stays fresh while it runs)
        if self.namespace.sole_owner:
            self.exec(b"FLUSHDB")  # a fakeredis server this process created, holding only this run's keys
        else:
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
        #: the keys each actor's open WATCH covers
        self._watched: dict[str, tuple[bytes, ...]] = {}
        #: the run's script cache as Python actors see it (sha -> source; emqlab's set when a run starts)
        self._py_cache: dict[bytes, bytes] = dict(self._script_shas())
        #: each Python-actor connection's WATCH / MULTI state
        self._py_conns: dict[str, _Conn] = {}
        for inst in self.instruments:
            start = getattr(inst, "start", None)
            if start is not None:
                start(self)
        for spec in self.scenario.actors:
            own = self._actor_scripts.get(spec.id)
            gen = self.factories[spec.kind](self if own is None else _OwnScripts(self, own), spec)
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
        for client in self._sessions.values():
            client.close()  # its WATCH and any open MULTI go with the connection
        self._sessions = {}
        for run in self._runs:
            run.close()
        self._runs = []

    def _abandon(self) -> None:
        """The constructor did not finish: delete what the run claimed and wrote, whatever state it got to."""
        try:
            self._drop_actors()
        except Exception:  # noqa: BLE001 - half-built: best effort, the claim's release below matters
            pass
        self.namespace.release()
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.close()
        self._closed = True

    def close(self) -> None:
        """Delete the run's keys (only those under its queue's base) and release the connection. When the
        server cannot be reached any more (the exploration stopped on a lost connection), the keys are left
        to their safety TTL and the run index's lease (:mod:`emqlab.backends`), and ``left_behind`` is True."""
        if not self._closed:
            self._drop_actors()
            try:
                self.namespace.release()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                self.left_behind = True
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

    def split(self, script: str | bytes, keys: Sequence[Any], args: Sequence[Any]) -> ScriptRun:
        text = self.scripts[script].text if isinstance(script, str) else script
        run = self.host.start(text, keys, args)
        self._runs = [r for r in self._runs if not r.closed]
        self._runs.append(run)
        return run

    @property
    def split_runs(self) -> tuple[ScriptRun, ...]:
        """The split script runs of this run still open (read-only: a copy), oldest first."""
        return tuple(r for r in self._runs if not r.closed)

    def script_source(self, sha: bytes) -> bytes | None:
        """The source of the script ``sha`` (lower-case hex) if the run's script cache holds it (see
        :mod:`emqlab.pyactors`)."""
        return self._py_cache.get(sha)

    def script_run(self) -> int:
        """A new script-run number (the steps of one split script share it; numbers count from 1 per run)."""
        self._run_count += 1
        return self._run_count

    # -- stepping --------------------------------------------------------------------------------
    @property
    def enabled(self) -> list[str]:
        """Actors with a step left, in scenario order."""
        return [a.id for a in self.scenario.actors if a.id in self.pending]

    @property
    def done(self) -> bool:
        return not self.pending

    def step(self, actor: str) -> Step:
        """Let ``actor`` take its next step. Raises :class:`ScheduleError` if it has none, and
        :class:`ServerFault` for an infrastructure error (the step is not recorded; with scope
        :attr:`~emqlab.backends.FaultScope.RUN` a :meth:`reset` starts the next run afresh)."""
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
        for hook in self._before_hooks:
            hook(self, actor, op)
        base = self.keys.base
        fp = Footprint()
        for cmd in op.pre:
            self.exec(*cmd)
            fp = fp | footprints.of_command(cmd, base)
        reply: Any
        args: list[str]
        keys: list[str]
        command: tuple[bytes, ...] | None = None
        written: Sequence[bytes] | None = None
        read_only = False
        outcome = "ok"
        applied = True
        batch: Sequence[tuple[bytes, ...]] | None = None
        script_keys: Sequence[Any] = ()  # an atomic step's KEYS (live: they get the safety TTL again)
        armed = self._armed.pop(actor, None)
        self._lost.discard(actor)
        if self._faulty:
            fp = fp | Footprint(reads=frozenset({("proc", actor)}))
        if op.kind == "fault":
            assert op.fault is not None
            reply, ffp = self._fault(op.fault)
            fp = fp | ffp
            name, args, keys = op.label, [op.section], []
        elif armed is False:  # the request never reached the server
            outcome, applied, reply = "info", False, None
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
        elif op.python:
            reply, pfp, command, batch = self._python(actor, op, now)
            fp = fp | pfp
            if batch is not None:
                name, args, keys = self._batch_shown(op, batch)
                read_only = all(is_read_only(c[0]) for c in batch)
            else:
                assert command is not None
                name = command[0].decode("utf-8", "replace").upper()
                args = [self._show(a) for a in command[1:]]
                if name == "SCRIPT" and len(command) == 3:  # SCRIPT LOAD <source>
                    args[1] = _script_ref(command[2])
                elif name in ("EVAL", "EVAL_RO"):
                    args[0] = _script_ref(command[1])
                keys = [self.keys.relative(k) for k in (command_keys(command) or ())]
                access = key_access(command)
                if access is not None and not access.writes_any and name not in _UNSEEN_WRITES:
                    written = access.writes
                read_only = is_read_only(command[0])
        elif op.batch is not None:
            cmds = batch = op.batch(now)
            reply, bfp = self._batch(actor, cmds, op.multi)
            fp = fp | bfp
            name, args, keys = self._batch_shown(op, cmds)
            read_only = not op.multi and all(is_read_only(c[0]) for c in cmds)
        elif op.kind == "script":
            assert op.build is not None
            call = op.build(now)
            reply, observed = self._atomic(call.name, call.keys, call.args, actor)
            script_keys = call.keys
            fp = fp | observed
            args = [self._show(a) for a in call.args]
            keys = [self.keys.relative(k) for k in call.keys]
            name = call.name
            if isinstance(reply, redis.exceptions.ResponseError) and str(reply) == NOSCRIPT:
                outcome = "fail"
        else:
            command = op.lazy() if op.lazy is not None else op.command
            assert command is not None
            execute = self._tracking(self._session(actor)) if op.session else self.exec
            try:
                reply = execute(*command)
            except redis.exceptions.ResponseError as e:
                reply = e
            access = key_access(command)
            fp = fp | footprints.of_access(access, base)
            if command[0].upper() == b"WATCH":  # its EXEC's fate depends on every later write to these keys
                self._watched[actor] = tuple(command[1:])
                fp = fp | footprints.of_commands([(b"EXISTS", *command[1:])], base)
            if op.kind == "clock":
                name, args, keys = op.label, [op.section], [self.keys.relative(command[3])]
            else:
                name = command[0].decode().upper()
                args = [self._show(a) for a in command[1:]]
                keys = [self.keys.relative(k) for k in (command_keys(command) or ())]
                written = access.writes if access is not None and not access.writes_any else None
                read_only = is_read_only(command[0]) and not op.pre
        if armed is not None:
            outcome = "info"
        fault = server_fault(reply)
        if op.python:  # (NOSCRIPT there is the run's script cache answering, a reply like any other)
            faults = (server_fault(r) for r in (reply if isinstance(reply, list) else [reply]))
            fault = next((f for f in faults if f is not None and not f.startswith("NOSCRIPT")), None)
        if fault is not None and outcome != "fail":  # (a script-flush fault's NOSCRIPT is the point of it)
            raise _fault_of(f"{actor}'s {name} at step {self.index} got a server error ({fault}): a run cannot"
                            " go on truthfully past a server fault (its result would count an error as the"
                            " step's answer)", fault)
        if not is_fake(self.conn):
            self._protect(script_keys)
        self.actor_steps[actor] += 1
        rec = StepRecord(actor, op.kind, name, args, reply, command, written=written, read_only=read_only,
                         batch=batch)
        for hook in self._after_hooks:
            hook(self, actor, op, rec)
        shown = _render(reply)
        if name == "XADD" and isinstance(shown, str) and not shown.startswith("ERR"):
            shown = "<entry id>"  # server time: differs between backends and runs
        step = Step(self.index, actor, self.actor_steps[actor], op.kind, name, tuple(rec.args), tuple(keys),
                    shown, now, tuple(rec.effects), op.section if op.kind == "command" else "", op.run,
                    read_only=read_only, outcome=outcome, applied=applied,  # type: ignore[arg-type]
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
        recorded = frozenset(r for r in (getattr(i, "records", None) for i in self.instruments) if r)
        self._same_server(f"ending the run at step {self.index}")
        if not is_fake(self.conn):  # (the run is over: no script of it can see a TTL set now)
            self._protect([self.keys.job(j).encode() for j in self.job_ids], fresh=True)
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
            self._initial_view = read_view(self.exec, self.keys, self.job_ids, extra=self.scenario.places)
        return self._initial_view

    def final_state(self) -> FinalState:
        view = read_view(self.exec, self.keys, self.job_ids, extra=self.scenario.places)
        jobs: dict[str, dict[str, Any]] = {}
        for jid in self.job_ids:
            raw = self.exec(b"HGETALL", self.keys.job(jid).encode()) or []
            fields = {raw[i].decode(): raw[i + 1].decode("utf-8", "replace") for i in range(0, len(raw) - 1, 2)}
            jobs[jid] = {k: fields[k] for k in _JOB_FIELDS if k in fields}
            jobs[jid]["exists"] = bool(raw)
            if raw:
                jobs[jid]["payload"] = "data" in fields
        metrics: dict[str, int | None] = {}
        for target in ("completed", "failed"):
            c = self.exec(b"HGET", self.keys.metrics(target).encode(), b"count")
            metrics[target] = int(c) if c is not None else None
        placed = view.placements()
        ids = set(self.job_ids)
        return FinalState(placements={j: placed.get(j, []) for j in self.job_ids},
                          locks={j: t for j, t in view.locks.items() if t},
                          jobs=jobs, metrics=metrics, metrics_on=self.scenario.metrics,
                          others={j: p for j, p in sorted(placed.items()) if j not in ids})

    # -- internals -------------------------------------------------------------------------------
    def _atomic(self, name: str, keys: Sequence[Any], args: Sequence[Any], actor: str = "") -> tuple[Any, Footprint]:
        """One atomic script step and its footprint: on fakeredis with ``local_scripts``, the script run to
        its end through the Lua host inside this one step (every command observed); otherwise EVALSHA
        (loading the script on NOSCRIPT), with the script's declared prior as footprint.

        After a script-flush fault, the script's first EVALSHA gets NOSCRIPT: with the actor's ``noscript:
        fallback`` (the default) the client loads the script and runs it (one more round trip, inside this
        step), with ``noscript: fail`` the step fails with Redis's NOSCRIPT error."""
        if self._cached is not None and name not in self._cached:
            cache = Footprint(reads=frozenset({("scripts", name)}))
            spec = self._specs.get(actor)
            if spec is not None and spec.noscript == "fail":
                return redis.exceptions.ResponseError(NOSCRIPT), cache
            self._cached.add(name)
            reply, fp = self._atomic(name, keys, args, actor)
            return reply, fp | Footprint(writes=frozenset({("scripts", name)}))
        if self._faulty:
            reply, fp = self._atomic_run(name, keys, args, actor)
            return reply, fp | Footprint(reads=frozenset({("scripts", name)}))
        return self._atomic_run(name, keys, args, actor)

    def _atomic_run(self, name: str, keys: Sequence[Any], args: Sequence[Any],
                    actor: str = "") -> tuple[Any, Footprint]:
        base = self.keys.base
        scripts = self._actor_scripts.get(actor, self.scripts)
        if self._local_scripts:
            script = scripts[name]
            script.check_keys(keys)
            seen: list[tuple[bytes, ...]] = []

            def observe(*command: Any) -> Any:
                seen.append(command)
                return self.exec(*command)

            try:
                reply = self.host.run(observe, script.text, keys, args)
            except redis.exceptions.ResponseError as e:
                reply = e
            observed = footprints.of_commands(seen, base)
            self.observed.append((name, tuple(keys), observed))
            return reply, observed
        try:
            reply = scripts.call(self._executor, name, keys, args)
        except redis.exceptions.ResponseError as e:
            reply = e
        except redis.exceptions.TimeoutError:
            raise self._kill_script(name) from None
        return reply, footprints.prior(name, keys, base)

    def _kill_script(self, name: str) -> ServerFault:
        """A script step ran past the socket timeout: the server is busy with it, for every client. Send
        SCRIPT KILL from a connection of its own; returns the fault to raise (code ``BUSY``, which aborts the
        run, once the server is free; ``UNKILLABLE`` — Redis refuses to kill a script that has written, only
        SHUTDOWN NOSAVE stops it then, which emqlab never sends — or ``CONNECTION``, which stop the
        exploration)."""
        killer = session_client(self.conn)
        code = "BUSY"
        try:
            killer.execute_command("SCRIPT", "KILL")
            done = "emqlab sent SCRIPT KILL and the server is free again"
        except redis.exceptions.ResponseError as e:
            if "UNKILLABLE" in str(e):
                code = "UNKILLABLE"
                done = ("Redis refuses SCRIPT KILL because the script already wrote; the server stays busy until"
                        " it ends — only an operator's SHUTDOWN NOSAVE stops it, which emqlab never sends")
            else:  # NOTBUSY: it ended meanwhile
                done = f"the script ended on its own ({e})"
        except redis.exceptions.RedisError as e:
            code = "CONNECTION"
            done = f"SCRIPT KILL could not be sent ({e})"
        finally:
            killer.close()
        return _fault_of(f"the script {name} ran past the socket timeout ({self.keys.base}…): {done}; a run cannot"
                         " go on truthfully past it", f"{code} the script {name} ran past the socket timeout: {done}",
                         code)

    def _tracking(self, execute: Callable[..., Any]) -> Callable[..., Any]:
        """``execute`` that notes the keys each command may write (live: :meth:`_protect` gives them the
        safety TTL after the step); a command that may drop a key's TTL (SET, DEL, RENAME, …) forgets that
        the key had it."""

        def run(*command: Any) -> Any:
            try:
                return execute(*command)
            finally:
                access = key_access(command) if command else None
                if access is not None:
                    self._touched.extend(k if isinstance(k, bytes) else str(k).encode() for k in access.writes)
                    self._written.update(self._touched)
                    name = command[0]
                    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
                    if name.upper() in DROPS_TTL:
                        self._protected.difference_update(access.writes)

        return run

    def _protect(self, script_keys: Sequence[Any] = (), *, fresh: bool = False) -> None:
        """Give the keys written since the last call (and an atomic script's KEYS, which it may have deleted
        and written again) the safety TTL, between two steps: :meth:`emqlab.backends.Namespace.protect` says
        why no script and no state reader can tell. ``fresh``: these keys too, whether written or not."""
        extra = [k if isinstance(k, bytes) else str(k).encode() for k in script_keys]
        self._protected.difference_update(extra)
        chosen = [k for k in dict.fromkeys([*self._touched, *extra]) if k not in self._protected]
        if fresh:
            chosen += [k for k in self._written if k not in chosen]
        self._touched = []
        if chosen:
            self.namespace.protect(chosen)
            self._protected.update(chosen)

    def _session(self, actor: str) -> Callable[..., Any]:
        """``actor``'s own connection (its WATCH and MULTI state), opened at its first use in a run."""
        client = self._sessions.get(actor)
        if client is None:
            client = self._sessions[actor] = session_client(self.conn)
        return client.execute_command

    def _same_server(self, when: str) -> None:
        """On a live server: raise :class:`ServerFault` when the server is not the one the run started on
        (its ``run_id`` changed: a restart, or a failover to another node). redis-py reconnects silently, so
        without this a run would read an emptied database and report its state as the run's."""
        if self._server_id is None:
            return
        now = _server_id(self._executor)
        if now is not None and now != self._server_id:
            raise _fault_of(f"the server at {describe(self.conn)} restarted or failed over ({when}: its run_id"
                            f" changed from {self._server_id[:8]}… to {now[:8]}…), so this run's keys are gone"
                            " and its state cannot be reported truthfully",
                            f"the server restarted or failed over (its run_id changed from {self._server_id[:8]}…"
                            f" to {now[:8]}…)", "RESTARTED")

    # -- Python actors (emqlab.pyactors) ---------------------------------------------------------------
    def _script_shas(self) -> dict[bytes, bytes]:
        if self._shas is None:
            self._shas = {_sha1_hex(self.scripts[n].text): self.scripts[n].text for n in self.scripts.names()}
            self._shas.update((_sha1_hex(text), text) for text in self.scenario.loaded_scripts)
        return self._shas

    def _close_conn(self, conn: str) -> None:
        client = self._sessions.pop(conn, None)
        if client is not None:
            client.close()
        self._py_conns.pop(conn, None)

    def _python(self, actor: str, op: Op, now: int) -> tuple[Any, Footprint, tuple[bytes, ...] | None,
                                                             Sequence[tuple[bytes, ...]] | None]:
        """A Python actor's round trip on its connection ``op.conn``: one command (its reply) or a batch
        (the list of replies, errors as values). Returns the reply, the footprint, the command, the batch."""
        conn = op.conn or actor
        if op.batch is not None:
            cmds = op.batch(now)
            out: list[Any] = []
            fp = Footprint()
            for c in cmds:
                r, f = self._py_command(conn, c)
                out.append(r)
                fp = fp | f
            return out, fp, None, cmds
        assert op.command is not None
        reply, fp = self._py_command(conn, op.command)
        return reply, fp, op.command, None

    def _py_command(self, conn: str, cmd: tuple[bytes, ...]) -> tuple[Any, Footprint]:
        base = self.keys.base
        name = cmd[0].upper()
        if name == b"SCRIPT":
            sub = cmd[1].upper()
            if sub == b"LOAD" and len(cmd) == 3:
                sha = _sha1_hex(cmd[2])
                self._py_cache[sha] = cmd[2]
                if not is_fake(self.conn):  # so that its EVALSHA finds it on the server too
                    self._executor(b"SCRIPT", b"LOAD", cmd[2])
                return sha, Footprint(writes=frozenset({("scripts", sha.decode())}))
            if sub == b"EXISTS":
                shas = [c.lower() for c in cmd[2:]]
                return ([int(s in self._py_cache) for s in shas],
                        Footprint(reads=frozenset(("scripts", s.decode("utf-8", "replace")) for s in shas)))
        st = self._py_conns.setdefault(conn, _Conn())
        if name in _SCRIPT_CALLS and len(cmd) >= 3:
            if not st.multi:
                return self._py_script(cmd)
            # inside MULTI the server queues it and runs it at EXEC, in its place among the others: as EVAL
            # of the run's cached text (an unknown SHA1 fails there with NOSCRIPT, as on Redis)
            source = self._py_cache.get(cmd[1].lower()) if name.startswith(b"EVALSHA") else cmd[1]
            if source is None:
                source = b"return redis.error_reply('" + NOSCRIPT.encode() + b"')"
            cmd = (b"EVAL_RO" if name.endswith(b"_RO") else b"EVAL", source, *cmd[2:])
            st.queued = st.queued | Footprint.everything()  # (what it touches is not seen)
        stateful = name in _SESSION_COMMANDS or st.multi or bool(st.watched)
        execute = self._py_session(conn) if stateful else self.exec
        try:
            reply = execute(*cmd)
        except redis.exceptions.ResponseError as e:
            reply = e
        if name == b"MULTI":
            st.multi = st.multi or not isinstance(reply, Exception)
            return reply, Footprint()
        if name in (b"EXEC", b"DISCARD"):
            fp = st.queued if name == b"EXEC" else Footprint()
            if st.watched and name == b"EXEC":  # its fate depends on every write to the watched keys
                fp = fp | footprints.of_commands([(b"EXISTS", *st.watched)], base)
            self._py_conns[conn] = _Conn()
            return reply, fp
        if name == b"WATCH":
            st.watched = tuple(dict.fromkeys((*st.watched, *cmd[1:])))
            return reply, footprints.of_commands([(b"EXISTS", *cmd[1:])], base)
        if name == b"UNWATCH":
            st.watched = ()
            return reply, Footprint()
        if st.multi:  # queued: it takes effect at EXEC
            if not isinstance(reply, Exception):
                st.queued = st.queued | footprints.of_command(cmd, base)
            return reply, Footprint()
        return reply, footprints.of_command(cmd, base)

    def _py_session(self, conn: str) -> Callable[..., Any]:
        execute = self._session(conn)
        return _sorted_smembers(execute) if is_fake(self.conn) else self._tracking(execute)

    def _py_script(self, cmd: tuple[bytes, ...]) -> tuple[Any, Footprint]:
        """EVAL / EVALSHA of a Python actor, answered from the run's script cache and run atomically: on
        fakeredis through the Lua host with every command observed, on a server as one EVALSHA (its
        footprint: everything, since a server does not tell what a script touched)."""
        name = cmd[0].upper()
        if name.startswith(b"EVALSHA"):
            sha = cmd[1].lower()
            source = self._py_cache.get(sha)
            cache = Footprint(reads=frozenset({("scripts", sha.decode("utf-8", "replace"))}))
            if source is None:
                return redis.exceptions.NoScriptError(NOSCRIPT), cache
        else:
            source = cmd[1]
            sha = _sha1_hex(source)
            self._py_cache[sha] = source
            cache = Footprint(writes=frozenset({("scripts", sha.decode())}))
        try:
            n = int(cmd[2])
            if n < 0 or n > len(cmd) - 3:
                raise ValueError
        except ValueError:
            return redis.exceptions.ResponseError("Number of keys can't be greater than number of args"
                                                  if cmd[2].lstrip(b"-").isdigit() and int(cmd[2]) >= 0
                                                  else "value is not an integer or out of range"), cache
        keys, args = cmd[3:3 + n], cmd[3 + n:]
        if self._local_scripts:
            seen: list[tuple[bytes, ...]] = []

            def observe(*command: Any) -> Any:
                seen.append(command)
                return self.exec(*command)

            try:
                reply = self.host.run(observe, source, keys, args)
            except redis.exceptions.ResponseError as e:
                reply = e
            return reply, footprints.of_commands(seen, self.keys.base) | cache
        try:
            reply = evalsha(self._executor, sha, source, keys, args)
        except redis.exceptions.ResponseError as e:
            reply = e
        except redis.exceptions.TimeoutError:
            raise self._kill_script(sha.decode()) from None
        return reply, Footprint.everything() | cache

    def _batch(self, actor: str, cmds: Sequence[tuple[bytes, ...]], multi: bool) -> tuple[Any, Footprint]:
        """Several commands in one round trip on ``actor``'s connection: pipelined (the replies, errors as
        values), or as MULTI … EXEC (EXEC's reply: ``None`` when a watched key changed). The footprint is
        every command's, plus for EXEC a read of the keys the actor WATCHed."""
        execute = self._session(actor)
        if not is_fake(self.conn):
            execute = self._tracking(execute)
        base = self.keys.base
        fp = footprints.of_commands(list(cmds), base)
        if not multi:
            out: list[Any] = []
            for c in cmds:
                try:
                    out.append(execute(*c))
                except redis.exceptions.ResponseError as e:
                    out.append(e)
            return out, fp
        watched = self._watched.pop(actor, ())
        if watched:
            fp = fp | footprints.of_commands([(b"EXISTS", *watched)], base)
        execute(b"MULTI")
        for c in cmds:
            execute(*c)
        try:
            return execute(b"EXEC"), fp
        except redis.exceptions.ResponseError as e:
            return e, fp

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
            self._py_cache = {}
            for client in self._sessions.values():
                client.close()
            self._sessions = {}
            self._py_conns = {}
            self._watched = {}
            for other in self.pending:  # its connection is dead: its next request never arrives
                self._armed[other] = False
            fp = Footprint.everything()
            return f"restarted: {lost} key(s) lost", fp | Footprint(writes=frozenset(("proc", a) for a in self.pending))
        if fault.kind == "script-flush":
            self._cached = set()
            self._py_cache = {}
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
        pipe = pipeline(self.conn, transaction=True)
        for cmd in self._initial:
            pipe.execute_command(*cmd)
        seeded = list(dict.fromkeys(cmd[1] for cmd in self._initial))
        exempt = {self.keys.key(k).encode() for k in TTL_OBSERVED}
        for key in seeded:  # (in the same transaction: before any step, so no script can tell)
            if key not in exempt:
                pipe.execute_command(b"PEXPIRE", key, SAFETY_TTL_MS, b"NX")
        self._protected.update(k for k in seeded if k not in exempt)
        self._written.update(seeded)
        try:
            pipe.execute()
        except redis.exceptions.ResponseError as e:
            fault = server_fault(e)
            if fault is None:
                raise
            prefix, _, rest = fault.partition(" ")
            said = f"{prefix} {rest.split(' of pipeline caused error: ')[-1]}"
            raise _fault_of(f"writing the initial state got a server error ({said}): a run cannot go on truthfully"
                            " past a server fault", said) from None


class _OwnScripts:
    """The actor context of an actor with a ``script:`` of its own: the Runner, but with that actor's script
    set for the scripts it runs split (its atomic steps are looked up by actor in the Runner)."""

    def __init__(self, runner: Runner, scripts: ScriptSet) -> None:
        self._runner = runner
        self.scripts = scripts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def split(self, script: str | bytes, keys: Sequence[Any], args: Sequence[Any]) -> ScriptRun:
        return self._runner.split(self.scripts[script].text if isinstance(script, str) else script, keys, args)

    def script_text(self, name: str) -> bytes:
        return self.scripts[name].text


@dataclass
class _Conn:
    """A Python actor's connection state: its WATCHed keys, an open MULTI and what it queued."""

    watched: tuple[bytes, ...] = ()
    multi: bool = False
    queued: Footprint = field(default_factory=Footprint)


#: commands that hold per-connection state: a Python actor sends them on its own connection
_SESSION_COMMANDS = frozenset({b"WATCH", b"UNWATCH", b"MULTI", b"EXEC", b"DISCARD"})
_SCRIPT_CALLS = frozenset({b"EVAL", b"EVALSHA", b"EVAL_RO", b"EVALSHA_RO"})
#: commands whose writes the command table cannot name (a transaction, a script)
_UNSEEN_WRITES = frozenset({"EXEC", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO"})


def seed_commands(sc: Scenario, k: QueueKeys) -> list[tuple[bytes, ...]]:
    """The commands that write ``sc``'s initial state under ``k`` (the jobs a producer adds are left
    out: they are written by their add during the run)."""
    cmds: list[tuple[Any, ...]] = []
    active = set(sc.state.get("active", []))
    produced = {j for a in sc.actors for j in a.added}
    for jid, j in sc.jobs.items():
        if jid in produced:
            continue
        opts = {"attempts": j.attempts} if j.attempts else {}
        fields = {"name": j.name, "data": json.dumps(j.data, separators=(",", ":")),
                  "opts": json.dumps(opts, separators=(",", ":")), "timestamp": str(T0 - 1000),
                  "delay": str(j.delay), "priority": str(j.priority), **j.fields}
        if jid in active:
            fields.setdefault("processedOn", str(T0 - 500))
            fields.setdefault("ats", "1")
        cmds.append(("HSET", k.job(jid), *[x for kv in fields.items() for x in kv]))
    wait = sc.state.get("wait", [])
    if wait:  # the first listed is the next to be taken: it sits at the right end
        cmds.append(("RPUSH", k.wait, *reversed(wait)))
    for name in ("active", "paused"):
        if sc.state.get(name):
            cmds.append(("RPUSH", k.key(name), *sc.state[name]))
    if sc.state.get("stalled"):
        cmds.append(("SADD", k.stalled, *sc.state["stalled"]))
    for name in ("completed", "failed", "delayed", "prioritized"):
        v = sc.state.get(name)
        if not v:
            continue
        scores = v if isinstance(v, dict) else {jid: i for i, jid in enumerate(v)}
        args: list[Any] = []
        for jid, sc_ in scores.items():
            if name == "delayed":
                score = (T0 + int(sc_)) * 0x1000
            elif name == "prioritized":
                score = int(sc_) * 2**32 + list(scores).index(jid)
            else:
                score = T0 - 100 + int(sc_)
            args += [str(score), jid]
        cmds.append(("ZADD", k.key(name), *args))
    for jid, owner in sc.locks.items():
        cmds.append(("SET", k.lock(jid), f"{owner}:1", "PX", str(LOCK_MS * 100)))
    # as a queue's first add does (PROTOCOL.md §4.2), so no run starts by writing it
    meta = {"opts.maxLenEvents": "10000", **sc.meta}
    cmds.append(("HSET", k.meta, *[x for kv in meta.items() for x in kv]))
    for place in sc.places:  # the scenario's own places (places:)
        cmds += place.seed(k)
    numeric = [int(j) for j in sc.jobs if j.isdigit()]
    if numeric:
        cmds.append(("SET", k.id, str(max(numeric))))
    return [tuple(a.encode() if isinstance(a, str) else a for a in c) for c in cmds]


def _fault_of(head: str, detail: str, code: str = "") -> ServerFault:
    """The :class:`ServerFault` for the error ``detail`` (the server's words; ``code`` from it unless given),
    its message ``head`` and what happens next: the run is aborted, or the exploration stops
    (:class:`emqlab.backends.FaultScope`)."""
    fault = ServerFault(head, code=code, detail=detail)
    then = "the run is aborted" if fault.scope is FaultScope.RUN else "the exploration stops"
    fault.args = (f"{head}; {then}",)
    return fault


def _server_id(execute: Callable[..., Any]) -> str | None:
    """The server's ``run_id`` (``INFO server``), or ``None`` where it cannot be read (a cluster client, an
    ACL user without INFO)."""
    try:
        info = execute(b"INFO", b"server")
    except (redis.exceptions.RedisError, BackendError):
        return None
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line[7:].strip()
    return None


def _sha1_hex(source: bytes) -> bytes:
    return hashlib.sha1(source).hexdigest().encode()


def _script_ref(source: bytes) -> str:
    """How a script's source is shown in a history: by its SHA1's first 12 digits."""
    return f"<script {_sha1_hex(source)[:12].decode()}…>"


def _member_order(m: Any) -> tuple[int, Any]:
    return (0, int(m)) if isinstance(m, bytes) and m.isdigit() else (1, m if isinstance(m, bytes) else str(m))


def _sorted_smembers(execute: Callable[..., Any]) -> Callable[..., Any]:
    """fakeredis keeps a set's members in a Python set, whose order follows ``PYTHONHASHSEED``; Redis
    returns a small set of integer ids (an intset) sorted. Sorting ``SMEMBERS`` on fakeredis keeps runs the
    same from one Python process to the next (the sweep's candidate order decides which job is requeued
    first)."""

    def run(*command: Any) -> Any:
        reply = execute(*command)
        if isinstance(reply, list) and command and command[0].upper() == b"SMEMBERS":
            reply = sorted(reply, key=_member_order)
        return reply

    return run


def _render(reply: Any) -> Any:
    if isinstance(reply, bytes):
        try:
            return reply.decode()
        except UnicodeDecodeError:
            return repr(reply)
    if isinstance(reply, Status):
        return reply.value.decode()
    if isinstance(reply, BaseException):
        msg = str(reply).split(" script:")[0]
        return msg if msg.split(" ", 1)[0].isupper() else f"ERR {msg}"
    if isinstance(reply, list):
        return [_render(x) for x in reply]
    if isinstance(reply, tuple):  # a crash: the executions it cut short
        return "crashed holding " + ", ".join(j for j, _ in reply) if reply else "crashed holding nothing"
    return reply


__all__ = ["EffectRecorder", "LOCK_MS", "PLACEMENTS", "Runner", "T0", "seed_commands"]
