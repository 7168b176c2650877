"""The home of one timed run (:class:`TimedRun`, :func:`simulate`) and its result (:class:`TimedResult`):
the engine's Runner with a virtual clock, the timed worker, sweep and lease generators, and the exposure
instrument. :mod:`emqlab.timing.model` says what the model is and why.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import redis

from emqlab.analysis.anomalies import checker
from emqlab.engine.actors import (
    ActorGen,
    Op,
    _next_job,
    deferred_failure,
    fetch,
    finish,
    lapse,
    renew,
    sweep_once,
    transaction_finish,
)
from emqlab.engine.context import StepRecord
from emqlab.engine.effects import LockChanged, Placed, Removed
from emqlab.engine.history import History
from emqlab.engine.runner import Runner
from emqlab.engine.seed import T0
from emqlab.engine.specs import ActorSpec
from emqlab.protocol.outcome import Outcome
from emqlab.scripting import calls as api
from emqlab.text import sig3
from emqlab.timing.model import (
    INF,
    SERVER_LOCK_PX,
    TimingConfig,
    _fmt_ms,
    parts_of,
    timed_scenario,
)


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    if sigma <= 0 or mean <= 0:
        return mean
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


# -- the result -----------------------------------------------------------------------------------------------


@dataclass
class TimedResult:
    """What one timed run measured.

    ``round_trips`` counts the workers' round trips; ``round_trips_per_job`` leaves out each worker's first
    fetch and divides by the finishes (job executions): exactly 1 for ``atomic``, 2 for
    ``finish-then-fetch``, the split script's command count for ``split``. ``jobs_per_s`` = distinct jobs
    finished per second of virtual time. ``anomalies`` counts :func:`emqlab.analysis.anomalies.check`'s findings per
    kind; ``gap_hits`` the sweeps that requeued a job while a split finish of it was running;
    ``expected_per_1000`` the window exposure (see the module docstring). ``unfinished`` counts the jobs
    that ended in neither ``completed`` nor ``failed``, by where the run left them (``{"active": 29}``: the
    structures holding the job, comma-joined; ``"nowhere"`` for a job in none). A job whose finish gave up
    (every WATCH … EXEC of a transaction finish aborted) is left in ``active`` under its worker's lock: it is
    not ``stuck-active`` (that needs no lock and no sweep, and here the lock lapses ``lock_ms`` after it was
    set, after which the sweep recovers the job and a worker runs it again); a run that ends first leaves the
    job never done."""

    mode: str
    rtt_ms: float
    seed: int
    jobs: int
    workers: int
    finishes: int
    jobs_done: int
    round_trips: int
    round_trips_per_job: float
    sweep_runs: int
    clock_events: int
    makespan_ms: float
    jobs_per_s: float
    anomalies: dict[str, int]
    anomalies_per_1000: float
    gap_hits: int
    expected_per_1000: float
    marked_finishes: int
    window_ms: float
    truncated: bool
    steps: int
    wall_s: float
    config: dict[str, Any] = field(default_factory=dict)
    #: round trips one finish took → number of finishes (1 for atomic; the split script's command counts)
    finish_round_trips: dict[int, int] = field(default_factory=dict)
    #: transaction mode: EXECs aborted because a watched key changed, and attempts made (WATCH … EXEC
    #: rounds: one per finish plus one per abort that was tried again)
    aborts: int = 0
    attempts: int = 0
    #: the first few anomalies with their "because" sentences
    examples: list[dict[str, Any]] = field(default_factory=list)
    #: jobs in neither completed nor failed at the end, by the structures holding them → number of jobs
    unfinished: dict[str, int] = field(default_factory=dict)
    #: job executions begun (a worker's run of a job, from its fetch), finished or not: ``finishes`` plus the
    #: ones still running when the run stopped (at the execution cap, :attr:`truncated`)
    executions: int = 0
    history: History | None = field(default=None, repr=False)

    @property
    def anomaly_total(self) -> int:
        return sum(self.anomalies.values())

    @property
    def unfinished_total(self) -> int:
        """Jobs the run left in neither completed nor failed (``jobs - jobs_done``)."""
        return sum(self.unfinished.values())

    @property
    def aborts_per_job(self) -> float:
        """Aborted EXECs per job execution (transaction mode; 0 otherwise)."""
        return self.aborts / self.finishes if self.finishes else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("history")
        d["anomaly_total"] = self.anomaly_total
        d["unfinished_total"] = self.unfinished_total
        for k in ("round_trips_per_job", "makespan_ms", "jobs_per_s", "anomalies_per_1000", "expected_per_1000",
                  "window_ms", "wall_s"):
            d[k] = round(d[k], 4)
        return d

    def summary(self) -> str:
        """One line: ``split @ 1 ms: 21.6 round trips/job, 150 jobs/s, 35.0 anomalies per 1,000 jobs …``, and
        the jobs left unfinished when there are any (``; 29 of 30 jobs left unfinished: active 29``)."""
        anomalies = ", ".join(f"{k} {n}" for k, n in sorted(self.anomalies.items())) or "none"
        left = ""
        if self.unfinished:
            where = ", ".join(f"{k} {n}" for k, n in self.unfinished.items())
            left = f"; {self.unfinished_total} of {self.jobs} jobs left unfinished: {where}"
        return (f"{self.mode} @ {_fmt_ms(self.rtt_ms)}: {self.round_trips_per_job:.2f} round trips/job, "
                f"{sig3(self.jobs_per_s)} jobs/s, {self.anomalies_per_1000:.1f} anomalies per 1,000 jobs "
                f"({anomalies}; expected from the window {self.expected_per_1000:.1f}){left}")


# -- the run ----------------------------------------------------------------------------------------------------


class _Exposure:
    """The timed model's instrument: before a split finish's ``DEL <job>:lock`` it reads the lock's holder
    and the job's stalled mark, and after each step it measures the finish's exposed window and sweep
    hits (into the :class:`TimedRun`'s counters); with ``annotate`` (no effect recorder runs: the default,
    counting runs) it records the few effects the checks need (lock clears, the sweep's and the finish's
    moves) itself."""

    records = "effects"

    def __init__(self, run: TimedRun, annotate: bool) -> None:
        self.run = run
        self.annotate = annotate
        self.observed: tuple[str | None, bool] | None = None

    def before_step(self, runner: Runner, actor: str, op: Op) -> None:
        """Reads before a split ``DEL <job>:lock``: the lock's holder and whether the job is marked."""
        self.observed = self._observe(runner, op)

    def _observe(self, runner: Runner, op: Op) -> tuple[str | None, bool] | None:
        if op.kind != "command" or op.command is None or op.command[0].upper() != b"DEL":
            return None
        key = op.command[1]
        if not key.endswith(b":lock"):
            return None
        if not self.run.observe:
            return None, False
        ex = runner.exec
        holder = ex(b"GET", key)
        job = runner.keys.relative(key)[: -len(":lock")]
        marked = bool(ex(b"SISMEMBER", runner.keys.stalled.encode(), job.encode()))
        return (holder.decode() if isinstance(holder, bytes) else None), marked

    def after_step(self, runner: Runner, actor: str, op: Op, step: StepRecord) -> None:
        """After each step: a finish's exposed window and the sweep's hits, and (``annotate``) the effects."""
        run = self.run
        annotate = self.annotate
        if op.kind == "clock":
            run.clock_events += 1
            if annotate and step.reply == 1 and step.command is not None:  # the lapse deleted the lock
                job = runner.keys.relative(step.command[3])[: -len(":lock")]
                step.effects.append(LockChanged(job, step.command[4].decode(), None))
            run._lapsed(run._owner(actor))
            return
        # a finish's window: from its DEL of the lock to its next command
        gap = next(((j, g) for j, g in run._open_gap.items() if g[0] == actor), None)
        if gap is not None:
            job, (_, opened, exposed) = gap
            del run._open_gap[job]
            width = run.t - opened
            run.window_ms += width
            if exposed:
                run.expected_hits += min(1.0, width / run.spacing)
        observed = self.observed
        if observed is not None:
            job = runner.keys.relative(op.command[1])[: -len(":lock")]  # type: ignore[index]
            holder, marked = observed
            lease = run.leases.get(actor)
            since = lease.since if lease is not None and lease.job == job else run.t
            # A sweep recovers only a job marked by the *previous* sweep: marked, and active for at least
            # one sweep spacing before this window opened.
            exposed = marked and run.t - since >= run.spacing
            run.marked_finishes += marked
            run._open_gap[job] = (actor, run.t, exposed)
            run._finishing[job] = actor
            if annotate and holder is not None:
                step.effects.append(LockChanged(job, holder, None))
        if op.kind == "script" and step.op == "moveStalledJobsToWait":
            run.sweep_runs += 1
            run.sweep_times.append(run.t)
            for raw in step.reply if isinstance(step.reply, list) else []:
                job = raw.decode() if isinstance(raw, bytes) else str(raw)
                if job in run._finishing:
                    run.gap_hits += 1
                if annotate:
                    step.effects += [Removed(job, "active"), Placed(job, "wait")]
        elif annotate and op.kind == "script" and step.op == "moveToFinished":
            if Outcome.of(step.reply).ok:
                step.effects += [Removed(step.args[0], "active"), Placed(step.args[0], step.args[4])]
        elif annotate and step.op == "EXEC" and isinstance(step.reply, list) and step.batch:
            step.effects += self._exec_effects(runner, actor, step.batch, step.reply)
        elif annotate and op.kind == "command" and step.op == "ZADD" and len(step.args) == 3 \
                and step.args[0] in ("completed", "failed") and step.reply == 1:  # 1 = newly added
            step.effects.append(Placed(step.args[2], step.args[0]))

    def _exec_effects(self, runner: Runner, actor: str, batch: Sequence[tuple[bytes, ...]],
                      replies: list[Any]) -> list[Any]:
        """The effects the checks need of a committed transaction, from its commands and their replies."""
        k = runner.keys
        out: list[Any] = []
        places = {k.completed.encode(): "completed", k.failed.encode(): "failed", k.delayed.encode(): "delayed"}
        for c, rr in zip(batch, replies, strict=False):
            if c[0] == b"DEL" and c[1].endswith(b":lock") and rr == 1:
                job = k.relative(c[1])[: -len(":lock")]
                out.append(LockChanged(job, runner.current_token(actor, job), None))
            elif c[0] == b"LREM" and c[1] == k.active.encode() and rr:
                out.append(Removed(c[3].decode(), "active"))
            elif c[0] == b"ZADD" and c[1] in places and rr == 1:
                out.append(Placed(c[3].decode(), places[c[1]]))
            elif c[0] == b"LPUSH" and c[1] == k.wait.encode():
                out.append(Placed(c[2].decode(), "wait"))
        return out


@dataclass
class _Lease:
    job: str
    token: str
    since: float  # server time the lock was set
    expiry: float  # virtual time it lapses unless renewed




class TimedRun:
    """One timed run of ``mode`` under ``config`` on ``conn`` (default: a new fakeredis server).

    Use :func:`simulate` for the one-call form. The object form lets a caller bracket exactly the run's
    round trips (the live round-trip count does)::

        run = TimedRun("split", TimingConfig(jobs=20))   # the queue is written here
        run.run()                                         # only the actors' commands are sent here
        result = run.result()                             # reads the final state, runs the checks
        run.close()                                       # deletes the run's keys

    ``progress(done, total)`` is called after each finish (done = distinct jobs finished so far, total = jobs).
    """

    def __init__(self, mode: str, config: TimingConfig | None = None, conn: redis.Redis | None = None, *,
                 effects: bool = False, observe: bool = True, keep_history: bool = True,
                 progress: Callable[[int, int], None] | None = None, queue: str | None = None,
                 local_scripts: bool = True) -> None:
        self.mode = mode
        self.finish_mode, self.fetch_next = parts_of(mode)
        self.config = config or TimingConfig()
        self.observe = observe
        self.keep_history = keep_history
        self.progress = progress
        cfg = self.config
        self.scenario = timed_scenario(cfg)
        self.worker_ids = [f"W{i}" for i in range(1, cfg.workers + 1)]
        # virtual time (ms): t = the server time of the step being run; reply_at = when its reply is back
        self.t = 0.0
        self.reply_at = 0.0
        self.t_end = 0.0
        proc_rng = random.Random(f"{cfg.seed}/processing")
        self.processing = {j: _lognormal(proc_rng, cfg.processing_ms, cfg.processing_jitter)
                           for j in self.scenario.jobs}
        self._rngs: dict[str, random.Random] = {}
        self._arrive: dict[str, float] = {}
        self._rtt: dict[str, float] = {}
        self._order: dict[str, int] = {a.id: i for i, a in enumerate(self.scenario.actors)}
        # the lock each worker holds, as the lease clocks see it
        self.leases: dict[str, _Lease] = {}
        # the locks of finishes that gave up (the job still in active under the worker's token), by worker:
        # nobody renews them, and each lapses at its expiry for the sweep to recover the job
        self._left: dict[str, list[_Lease]] = {}
        self._next_lease: dict[str, _Lease] = {}
        self.finishes = 0
        self._done_jobs: set[str] = set()
        self.finish_commands: Counter[int] = Counter()  # round trips per finish -> how many finishes
        self._ops_in_finish: dict[str, int] = {}
        self.sweep_runs = 0
        self.clock_events = 0
        self.gap_hits = 0
        self.expected_hits = 0.0
        self.marked_finishes = 0
        self.window_ms = 0.0
        self.sweep_times: list[float] = []
        self.truncated = False
        self._open_gap: dict[str, tuple[str, float, bool]] = {}  # job -> (worker, DEL time, marked)
        self._finishing: dict[str, str] = {}  # job -> worker, from its split DEL to the end of its finish
        self._started = time.perf_counter()
        # without an effect recorder of its own, the exposure instrument records the effects the checks need
        self._annotator = _Exposure(self, annotate=not effects)
        self.runner = Runner(self.scenario, mode, conn, effects=effects, clock=self.now, queue=queue,
                             local_scripts=local_scripts, instruments=[self._annotator], check=checker,
                             factories={"worker": self._worker, "sweep": self._sweep, "lease": self._lease})
        for actor, op in self.runner.pending.items():
            self._schedule(actor, op, 0.0)

    # -- time ----------------------------------------------------------------------------------------
    def now(self) -> int:
        """The runner's clock: T0 + the current virtual time in whole ms."""
        return T0 + int(self.t)

    def _draw_rtt(self, actor: str) -> float:
        rng = self._rngs.get(actor)
        if rng is None:
            rng = self._rngs[actor] = random.Random(f"{self.config.seed}/rtt/{actor}")
        return _lognormal(rng, self.config.rtt_ms, self.config.jitter)

    def _schedule(self, actor: str, op: Op, reply_at: float) -> None:
        if op.kind == "clock":
            return  # its time is the lease's expiry, read when choosing
        rtt = self._draw_rtt(actor)
        self._rtt[actor] = rtt
        self._arrive[actor] = reply_at + op.delay_ms + rtt / 2

    def when(self, actor: str) -> float:
        """When ``actor``'s pending step reaches the server (a clock event: when it fires); ``inf`` = never."""
        op = self.runner.pending.get(actor)
        if op is None:
            return INF
        if op.kind == "clock":
            lease = self._due(self._owner(actor))
            return lease.expiry if lease else INF
        return self._arrive[actor]

    def _due(self, worker: str) -> _Lease | None:
        """The lease of ``worker``'s that lapses first: its current lock's, or one its gave-up finishes left."""
        held = [*self._left.get(worker, ()), *([self.leases[worker]] if worker in self.leases else [])]
        return min(held, key=lambda lease: lease.expiry, default=None)

    def _lapsed(self, worker: str) -> None:
        """After a lapse event of ``worker``'s lease clock: forget the lease it ended."""
        lease = self._due(worker)
        if lease is None or lease.expiry > self.t:
            return
        if self.leases.get(worker) is lease:
            del self.leases[worker]
        else:
            self._left[worker].remove(lease)

    def _owner(self, lease_actor: str) -> str:
        return "W" + lease_actor[1:]

    def choose(self, runner: Runner | None = None) -> str | None:
        """The chooser: the actor whose next step reaches the server first (ties: scenario order); ``None``
        when no step will ever happen."""
        r = runner or self.runner
        best, best_key = None, (INF, 0)
        for a in r.pending:
            key = (self.when(a), self._order[a])
            if key < best_key:
                best, best_key = a, key
        return best

    # -- stepping ------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not any(w in self.runner.pending for w in self.worker_ids)

    def run(self) -> TimedRun:
        """Step until every worker has stopped (or the execution cap is hit)."""
        r = self.runner
        cap = self.config.execution_cap
        while not self.done:
            if len(r.executions) >= cap:
                self.truncated = True
                break
            actor = self.choose()
            if actor is None:
                break
            self.step(actor)
        return self

    def step(self, actor: str) -> None:
        """Run ``actor``'s pending step at its arrival time and schedule its next one."""
        r = self.runner
        op = r.pending[actor]
        t = self.when(actor)
        self.t = t
        self.reply_at = t if op.kind == "clock" else t + self._rtt[actor] / 2
        r.step(actor)  # the exposure instrument's hooks run inside (before_step / after_step)
        nxt = r.pending.get(actor)
        if nxt is not None:
            self._schedule(actor, nxt, self.reply_at)
        elif actor in self.worker_ids:
            self.t_end = max(self.t_end, self.reply_at)

    # -- bookkeeping the generators call -------------------------------------------------------------
    @property
    def spacing(self) -> float:
        """The mean time between two sweeps reaching the server: the interval plus one round trip."""
        return self.config.stalled_interval_ms + self.config.rtt_ms

    def _acquired(self, worker: str, job: str, token: str, at: float) -> None:
        self.leases[worker] = _Lease(job, token, at, at + self.config.lock_ms)

    def _finished(self, worker: str, job: str, reply: Any) -> None:
        self.finishes += 1
        self._done_jobs.add(job)
        self.finish_commands[self._ops_in_finish.pop(worker, 0)] += 1
        if self._finishing.get(job) == worker:
            del self._finishing[job]
        lease = self.leases.pop(worker, None)
        # A finish that ended in an error left its lock as it was: of the timed model's finishes only the
        # transaction's gives up so (its EXEC never ran), while a success or a refusal (-2, -3, -6) leaves no
        # lock of this token. (Read from the outcome: a GET here would be a command the model never sent.)
        if lease is not None and Outcome.of(reply).error is not None:
            self._left.setdefault(worker, []).append(lease)
        nxt = self._next_lease.pop(worker, None)
        if nxt is not None:  # the lock a split fetch-next set, at the server time it ran
            self.leases[worker] = nxt
        if self.progress:
            self.progress(len(self._done_jobs), self.config.jobs)

    # -- the timed actors ----------------------------------------------------------------------------
    def _tracked(self, worker: str, token: str, sub: Generator[Op, Any, Any], delay: float = 0.0
                 ) -> Generator[Op, Any, Any]:
        """Pass ``sub``'s ops through, giving the first one ``delay`` ms of client time and noting a lock
        set by a split fetch-next (``SET <job>:lock <token> PX …``) at the server time it ran."""
        try:
            op = next(sub)
        except StopIteration as e:
            return e.value
        op.delay_ms = delay
        counting = op.label in ("moveToFinished", "transaction")
        while True:
            if counting:
                self._ops_in_finish[worker] = self._ops_in_finish.get(worker, 0) + 1
            reply = yield op
            cmd = op.command
            if op.kind == "command" and cmd is not None and cmd[0] == b"SET" and cmd[1].endswith(b":lock") \
                    and cmd[2] == token.encode():
                job = self.runner.keys.relative(cmd[1])[: -len(":lock")]
                self._next_lease[worker] = _Lease(job, token, self.t, self.t + self.config.lock_ms)
            try:
                op = sub.send(reply)
            except StopIteration as e:
                return e.value

    def _worker(self, runner: Runner, spec: ActorSpec) -> ActorGen:
        cfg = self.config
        wid = spec.id
        token = runner.new_token(wid)
        reply = yield from fetch(runner, wid, token, lock_duration=SERVER_LOCK_PX)
        while True:
            job = _next_job(reply)
            if job is None:
                return
            if wid not in self.leases:  # (a split fetch-next already noted its lock when it was set)
                self._acquired(wid, job, token, self.t)
            runner.begin(wid, job, token)
            defa = deferred_failure(reply)
            start = self.reply_at
            work = 0.0 if defa else self.processing[job]
            renewals = 0
            every = cfg.renew_every
            while every > 0 and (renewals + 1) * every < work:
                renewals += 1
                delay = max(0.0, start + renewals * every - self.reply_at)
                ext = yield from self._tracked(wid, token, renew(runner, wid, job, token, SERVER_LOCK_PX), delay)
                lease = self.leases.get(wid)
                if ext == 1 and lease is not None:
                    lease.expiry = self.t + cfg.lock_ms
            delay = max(0.0, start + work - self.reply_at)
            target: api.Target = "failed" if defa else "completed"
            value = defa if defa else {"ok": True}
            opts = api.FinishOpts(token=token, lock_duration=SERVER_LOCK_PX, name=wid)
            if self.finish_mode == "transaction":
                sub = transaction_finish(runner, wid, job, target, value, opts)
            else:
                sub = finish(runner, wid, self.finish_mode, job, target, value, opts, self.fetch_next)
            reply = yield from self._tracked(wid, token, sub, delay)
            self._finished(wid, job, reply)
            if not (Outcome.of(reply).ok and self.fetch_next):  # fetch separately: finish-then-fetch, or refused
                reply = yield from fetch(runner, wid, token, lock_duration=SERVER_LOCK_PX)

    def _sweep(self, runner: Runner, spec: ActorSpec) -> ActorGen:
        interval = self.config.stalled_interval_ms
        px = max(1, int(interval))
        while True:
            yield from self._tracked(spec.id, "", sweep_once(runner, spec.id, spec.max_stalled, "atomic", px),
                                     interval)

    def _lease(self, runner: Runner, spec: ActorSpec) -> ActorGen:
        owner = spec.of or "W1"

        def lock() -> tuple[str, str | None]:
            held = self._due(owner) or _Lease("", "", 0.0, 0.0)
            return held.job, held.token

        while True:
            yield from lapse(runner, spec.id, None, lock, f"the lease of {owner}'s lock lapses")

    # -- results -------------------------------------------------------------------------------------
    def result(self) -> TimedResult:
        """Read the final state, run the anomaly checks and measure."""
        r = self.runner
        h = r.history()
        kinds = Counter(a["kind"] for a in h.anomalies)
        worker_rts = sum(1 for s in h.steps if s.actor in self.worker_ids and s.kind != "clock")
        first_fetches = sum(1 for w in self.worker_ids if any(s.actor == w for s in h.steps))
        per_job = (worker_rts - first_fetches) / self.finishes if self.finishes else 0.0
        placements = h.final["placements"]
        done = sum(1 for j, p in placements.items() if "completed" in p or "failed" in p)
        # A job in neither is not an anomaly kind by itself (a gave-up finish leaves it in active under a lock
        # that lapses later, for the sweep to recover), yet a run that leaves most jobs so must not read as a
        # clean one: the result names them and where they are.
        unfinished = Counter(", ".join(dict.fromkeys(p)) or "nowhere" for j, p in placements.items()
                             if "completed" not in p and "failed" not in p)
        makespan = self.t_end or self.t
        cfg = self.config
        return TimedResult(
            mode=self.mode, rtt_ms=cfg.rtt_ms, seed=cfg.seed, jobs=cfg.jobs, workers=cfg.workers,
            finishes=self.finishes, executions=len(r.executions), jobs_done=done, round_trips=worker_rts,
            round_trips_per_job=per_job,
            sweep_runs=self.sweep_runs, clock_events=self.clock_events, makespan_ms=makespan,
            jobs_per_s=done / (makespan / 1000) if makespan > 0 else 0.0,
            anomalies=dict(sorted(kinds.items())), anomalies_per_1000=1000 * sum(kinds.values()) / cfg.jobs,
            gap_hits=self.gap_hits, expected_per_1000=1000 * self.expected_hits / cfg.jobs,
            marked_finishes=self.marked_finishes, window_ms=self.window_ms, truncated=self.truncated,
            steps=len(h.steps), wall_s=time.perf_counter() - self._started, config=asdict(cfg),
            finish_round_trips=dict(sorted(self.finish_commands.items())),
            aborts=sum(1 for s in h.steps if s.op == "EXEC" and s.reply is None),
            attempts=sum(1 for s in h.steps if s.op == "WATCH" and s.actor in self.worker_ids),
            examples=h.anomalies[:3], unfinished=dict(sorted(unfinished.items())),
            history=h if self.keep_history else None)

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> TimedRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def simulate(mode: str = "split", config: TimingConfig | None = None, conn: redis.Redis | None = None, *,
             effects: bool = False, observe: bool = True, keep_history: bool = True,
             progress: Callable[[int, int], None] | None = None, local_scripts: bool = True,
             **overrides: Any) -> TimedResult:
    """One timed run: ``simulate("split", rtt_ms=75)``. ``overrides`` replace fields of ``config``.
    Deterministic for a seed (same config and mode → same history and result, wall time aside)."""
    cfg = replace(config or TimingConfig(), **overrides)
    with TimedRun(mode, cfg, conn, effects=effects, observe=observe, keep_history=keep_history,
                  progress=progress, local_scripts=local_scripts) as run:
        run.run()
        return run.result()


__all__ = ["TimedResult", "TimedRun", "simulate"]
