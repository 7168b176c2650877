"""Timed runs: how *often* a split finish goes wrong, and what each finish mode costs, in virtual time.

The logical explorer (:mod:`emqlab.explore`) answers "can it happen?". A timed run answers "how often, and
at what price?": N jobs go through W workers while the recovery sweep runs on its interval, every command
costs a round trip, and the run reports, per finish mode, anomalies per kind and per 1,000 jobs, round
trips per job, and jobs per second of virtual time.

It is a discrete-event simulation over the **same** engine: a :class:`~emqlab.schedule.Runner` with a
``clock`` (virtual time) and timed actor generators passed as ``factories`` (worker, sweep, lease), stepped
by :meth:`TimedRun.choose`, a chooser that picks the actor whose next command reaches the server first
(ties: the actor listed first, so equal times stay deterministic, as in SimPy's event heap). The scripts
are the real ones: EVALSHA on the backend, or split through the Lua host, one command per round trip.

The model
---------
* **Round trip.** Every command or EVALSHA costs one RTT: it reaches the server RTT/2 after it is sent and
  its reply is back RTT/2 later. The RTT is fixed (``jitter=0``) or drawn per round trip from a lognormal
  whose mean is ``rtt_ms`` (``jitter`` is its sigma), from a seeded stream per actor.
* **Processing.** A worker spends ``processing_ms`` (lognormal, ``processing_jitter``; drawn per job from
  the seed, so all modes see the same work) between receiving a job and sending its finish.
* **Finish modes.** ``atomic`` = one EVALSHA of moveToFinished-14 with fetch_next = 1 (1 round trip per
  job); ``finish-then-fetch`` = EVALSHA with fetch_next = 0, then moveToActive-11 (2); ``split`` = the same
  moveToFinished-14 run client-side, fetch-next included, one round trip per ``redis.call`` (~25);
  ``split-then-fetch`` = a split finish without fetch-next, then moveToActive (the widget's fourth corner).
* **Locks.** A lock lives ``lock_ms`` of *virtual* time from the server step that set it; a worker renews
  it every ``renew_ms`` while processing (extendLock, one round trip each; processing is paused during a
  renewal's round trip, a simplification). Expiry is an explicit clock event (a lease actor per worker that
  runs :data:`emqlab.actors.LAPSE_LUA`: the lock lapses only if it still holds that acquisition's token).
  The server's PX TTLs are set to an hour so that wall-clock expiry never interferes.
* **Sweep.** moveStalledJobsToWait-8 runs, waits ``stalled_interval_ms`` after its reply (BullMQ's stalled
  checker re-arms its timer after each run), and runs again; each run starts a new stalled interval (the
  sweep deletes ``stalled-check`` first, see :func:`emqlab.actors.sweep`). Its CHECK recovers jobs marked
  by the previous run whose lock is gone; its MARK marks every active job.
* **Workers** take jobs until a fetch comes back empty. A job carrying a deferred failure (``defa``: the
  sweep recovered it more than ``max_stalled`` times) is failed at once, as BullMQ's worker does.

Why a split finish goes wrong, and why it grows with RTT
--------------------------------------------------------
A split finish sends ``DEL <job>:lock`` and then, one round trip later, ``SREM stalled <job>``. A sweep
that reaches the server inside that one-RTT window finds the job still marked in ``stalled`` — marked by
the *previous* sweep, which saw it active — and without a lock, and pushes it back to ``wait`` (right end:
taken next); the finish then files it as completed anyway. With fetch-next the same split script usually
hands the job straight back to a worker: it runs twice (duplicate execution); otherwise it stays in
``completed`` and ``wait`` (double placement). Sweeps reach the server every ``stalled_interval + RTT``,
so per finish of a job that was active for at least one sweep spacing the chance is::

    RTT / (stalled_interval + RTT)

The run measures the exposure itself: at each split ``DEL`` it reads whether the job is marked and sums
``min(1, window / spacing)`` over the finishes whose job was marked and active for at least one spacing —
``expected_per_1000`` — next to the observed ``gap_hits`` (sweeps that requeued a job while its finish was
running) and the anomalies :func:`emqlab.anomalies.check` finds. Atomic finishes have no window: 0.

Defaults, and why
-----------------
``processing_ms = 50``, ``stalled_interval_ms = 30``, ``workers = 8``, ``jobs = 200``, ``lock_ms = 30 000``
(renewed every 15 000), ``jitter = 0.3``.

* **The interval is compressed 1000x**: BullMQ's stalled interval is 30 s; here it is 30 ms of virtual
  time, so that a 200-job run spans enough sweeps to measure a rate, while the RTTs stay real. To read a
  figure for a production queue, scale RTT/interval back: at RTT 1 ms and a 30 s interval the split rate
  is ~1000x lower (rare — but a queue running millions of jobs a day still meets it).
* **Processing (50 ms) is longer than the sweep spacing (~30 ms)**, like any job that runs longer than
  BullMQ's 30 s interval: every job gets marked before its finish, so the window is live. (With jobs much
  shorter than the interval — say 5 ms — the sweep that could land in the window is the one right after
  the marking sweep, which comes a whole spacing later: the window has passed. Short jobs are safe for
  this reason, not because the finish is correct.)

With these defaults (measured, 200 jobs, seed 0; see ``docs/round-trips.md``):

* RTT 0.05 ms (loopback): a window of 1/600 of the spacing: ~1.6 expected per 1,000 jobs — usually 0 in a
  200-job run, which is exactly why the race survives testing on a laptop; the split finish's ~25 round
  trips cost 2% of throughput;
* RTT 1 ms (cross-AZ): ~1 finish in 31 is caught: tens per 1,000 jobs, and a third of the throughput gone;
* RTT 75 ms (cross-region): the window (75 ms) is longer than the interval: ~70% of split finishes are
  caught, jobs run two or three times, and throughput collapses to a few % of the atomic finish's, which
  still does one round trip per job.

Locks are *not* compressed (30 s, BullMQ's default): a lock that lapsed during a 50 ms job would be the
other lesson (``lease-lapse``: at-least-once, even atomic) and would hide this one. Set ``lock_ms`` below
the processing time with a long ``renew_ms`` to see it. Workers are 8 rather than 4 only to halve the
virtual time (and the number of sweeps to simulate) per run.

Cost: counting runs use ``Runner(effects=False)`` (no full state read per step). The anomaly checks that
need effects are stolen-lock (lock changes) and metrics-drift (metrics are off here); the "because"
sentences of double placement use effects too. So a timed run records the few effects that matter itself:
at each split ``DEL <job>:lock`` it reads the lock first (one GET, a stolen lock if another worker's token
is there) and whether the job is marked (one SISMEMBER), and it notes the sweep's requeues and the
finishes' placements from their replies. ``observe=False`` turns the two reads off (the live round-trip
count test does); ``effects=True`` gives full effects (slow: two reads per job per step).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
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
from emqlab.engine.runner import T0, Runner
from emqlab.engine.scenario import ActorSpec, JobSpec, Scenario
from emqlab.protocol.outcome import Outcome
from emqlab.scripting import calls as api

#: Finish modes, in the order tables and plots show them.
MODES = ("atomic", "finish-then-fetch", "transaction", "split")
#: Every (finish, fetch_next) combination: the four modes plus a split finish followed by a separate fetch.
ALL_MODES = (*MODES, "split-then-fetch")
#: round trips of one transaction finish that commits at once: WATCH, the pipelined reads, MULTI … EXEC
TRANSACTION_ROUND_TRIPS = 3
#: The round-trip slider's presets (ms): name → RTT.
PRESETS: dict[str, float] = {
    "Unix socket": 0.03,
    "loopback": 0.05,
    "LAN": 0.2,
    "cross-AZ": 1.0,
    "cross-region": 75.0,
    "slow link": 250.0,
}
DEFAULT_RTTS = (0.03, 0.05, 0.2, 1.0, 75.0, 250.0)
#: PX (ms) the scripts put on locks on the server: long enough that wall-clock expiry never happens during
#: a run; expiry is modelled in virtual time.
SERVER_LOCK_PX = 3_600_000
INF = math.inf


def mode_of(finish: str, fetch_next: bool) -> str:
    """``("atomic", True)`` → ``"atomic"``; ``("atomic", False)`` → ``"finish-then-fetch"``;
    ``("split", True)`` → ``"split"``; ``("split", False)`` → ``"split-then-fetch"``; ``("transaction",
    False)`` → ``"transaction"`` (a transaction has no fetch-next)."""
    if finish == "transaction":
        if fetch_next:
            raise ValueError("a transaction finish has no fetch-next")
        return "transaction"
    if finish not in ("atomic", "split"):
        raise ValueError(f"finish must be 'atomic', 'split' or 'transaction', not {finish!r}")
    if finish == "atomic":
        return "atomic" if fetch_next else "finish-then-fetch"
    return "split" if fetch_next else "split-then-fetch"


def parts_of(mode: str) -> tuple[str, bool]:
    """The inverse of :func:`mode_of`. Raises ``ValueError`` for an unknown mode."""
    table = {"atomic": ("atomic", True), "finish-then-fetch": ("atomic", False), "split": ("split", True),
             "split-then-fetch": ("split", False), "transaction": ("transaction", False)}
    if mode not in table:
        raise ValueError(f"unknown finish mode {mode!r} (one of: {', '.join(ALL_MODES)})")
    return table[mode]


@dataclass(frozen=True)
class TimingConfig:
    """The parameters of a timed run (times in virtual ms). See the module docstring for the defaults."""

    rtt_ms: float = 1.0
    jitter: float = 0.3
    processing_ms: float = 50.0
    processing_jitter: float = 0.3
    jobs: int = 200
    workers: int = 8
    stalled_interval_ms: float = 30.0
    sweep: bool = True
    max_stalled: int = 1
    lock_ms: float = 30_000.0
    renew_ms: float | None = None
    seed: int = 0
    #: stop a run after this many job executions (a guard against endless requeue loops; None = 5 x jobs)
    max_executions: int | None = None

    def __post_init__(self) -> None:
        if self.rtt_ms < 0 or self.processing_ms < 0:
            raise ValueError("rtt_ms and processing_ms must be >= 0")
        if self.jobs < 1 or self.workers < 1:
            raise ValueError("jobs and workers must be >= 1")
        if self.stalled_interval_ms <= 0 or self.lock_ms <= 0:
            raise ValueError("stalled_interval_ms and lock_ms must be > 0")
        if self.jitter < 0 or self.processing_jitter < 0:
            raise ValueError("jitter must be >= 0")

    @property
    def renew_every(self) -> float:
        """The renewal interval: ``renew_ms`` or half the lock duration (BullMQ's lockRenewTime)."""
        return self.renew_ms if self.renew_ms is not None else self.lock_ms / 2

    @property
    def execution_cap(self) -> int:
        return self.max_executions if self.max_executions is not None else 5 * self.jobs


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    if sigma <= 0 or mean <= 0:
        return mean
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def timed_scenario(config: TimingConfig) -> Scenario:
    """The scenario of a timed run: jobs ``1``…``N`` in ``wait`` (``1`` taken first), workers ``W1``…,
    the sweep ``S1`` (if enabled) and one lease clock ``L<i>`` per worker. The queue's meta holds
    ``opts.maxLenEvents`` (as a BullMQ queue's does once created), so every finish takes the same path."""
    ids = [str(i) for i in range(1, config.jobs + 1)]
    jobs = {j: JobSpec(id=j, name="job", data={"n": int(j)}) for j in ids}
    actors = [ActorSpec(id=f"W{i}", kind="worker", finish="completed", value={"ok": True})
              for i in range(1, config.workers + 1)]
    if config.sweep:
        actors.append(ActorSpec(id="S1", kind="sweep", max_stalled=config.max_stalled))
    actors += [ActorSpec(id=f"L{i}", kind="lease", job=ids[0], of=f"W{i}") for i in range(1, config.workers + 1)]
    return Scenario(name="timed", title=f"{config.jobs} jobs, {config.workers} workers and the sweep",
                    lesson="", source=[], anomaly="double-placement", queue="q", jobs=jobs,
                    state={"wait": ids}, locks={}, meta={"opts.maxLenEvents": "10000"}, metrics=False,
                    actors=actors, expect={},
                    modes=list(ALL_MODES))


# -- the result -----------------------------------------------------------------------------------------------


@dataclass
class TimedResult:
    """What one timed run measured.

    ``round_trips`` counts the workers' round trips; ``round_trips_per_job`` leaves out each worker's first
    fetch and divides by the finishes (job executions): exactly 1 for ``atomic``, 2 for
    ``finish-then-fetch``, the split script's command count for ``split``. ``jobs_per_s`` = distinct jobs
    finished per second of virtual time. ``anomalies`` counts :func:`emqlab.anomalies.check`'s findings per
    kind; ``gap_hits`` the sweeps that requeued a job while a split finish of it was running;
    ``expected_per_1000`` the window exposure (see the module docstring)."""

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
    history: History | None = field(default=None, repr=False)

    @property
    def anomaly_total(self) -> int:
        return sum(self.anomalies.values())

    @property
    def aborts_per_job(self) -> float:
        """Aborted EXECs per job execution (transaction mode; 0 otherwise)."""
        return self.aborts / self.finishes if self.finishes else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("history")
        d["anomaly_total"] = self.anomaly_total
        for k in ("round_trips_per_job", "makespan_ms", "jobs_per_s", "anomalies_per_1000", "expected_per_1000",
                  "window_ms", "wall_s"):
            d[k] = round(d[k], 4)
        return d

    def summary(self) -> str:
        """One line: ``split @ 1 ms: 21.6 round trips/job, 150 jobs/s, 35.0 anomalies per 1,000 jobs …``."""
        anomalies = ", ".join(f"{k} {n}" for k, n in sorted(self.anomalies.items())) or "none"
        return (f"{self.mode} @ {_fmt_ms(self.rtt_ms)}: {self.round_trips_per_job:.2f} round trips/job, "
                f"{_sig(self.jobs_per_s)} jobs/s, {self.anomalies_per_1000:.1f} anomalies per 1,000 jobs "
                f"({anomalies}; expected from the window {self.expected_per_1000:.1f})")


def _fmt_ms(ms: float) -> str:
    return f"{ms:g} ms"


def _sig(x: float) -> str:
    """Three significant digits, no exponent: 152, 39.4, 0.384."""
    if x == 0:
        return "0"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{digits}f}"


# -- the run ----------------------------------------------------------------------------------------------------


class _TimedRunner(Runner):
    """The engine's :class:`Runner` (on fakeredis: sorted ``SMEMBERS`` and atomic scripts run through the
    Lua host inside one step — see :class:`emqlab.schedule.Runner`)."""

    def __init__(self, *args: Any, local_scripts: bool = True, **kw: Any) -> None:
        super().__init__(*args, local_scripts=local_scripts, **kw)


class _Exposure:
    """The timed model's instrument: before a split finish's ``DEL <job>:lock`` it reads the lock's holder
    and the job's stalled mark, and after each step it measures the finish's exposed window and sweep
    hits; when no effect recorder runs (the default: counting runs) it records the few effects the checks
    need (lock clears, the sweep's and the finish's moves) itself."""

    records = "effects"

    def __init__(self, run: TimedRun) -> None:
        self.run = run
        self.observed: tuple[str | None, bool] | None = None

    def before_step(self, runner: Runner, actor: str, op: Op) -> None:
        self.observed = self.run._before(actor, op)

    def after_step(self, runner: Runner, actor: str, op: Op, rec: StepRecord) -> None:
        self.run._after(actor, op, rec, self.observed)


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
        self._annotator = _Exposure(self)
        self.runner = _TimedRunner(self.scenario, mode, conn, effects=effects, clock=self.now, queue=queue,
                                   check=checker, local_scripts=local_scripts, instruments=[self._annotator],
                                   factories={"worker": self._worker, "sweep": self._sweep, "lease": self._lease})
        # without an effect recorder of its own, the exposure instrument records the effects the checks need
        self._annotate = not effects
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
            lease = self.leases.get(self._owner(actor))
            return lease.expiry if lease else INF
        return self._arrive[actor]

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

    def _before(self, actor: str, op: Op) -> tuple[str | None, bool] | None:
        """Reads before a split ``DEL <job>:lock``: the lock's holder and whether the job is marked."""
        if op.kind != "command" or op.command is None or op.command[0].upper() != b"DEL":
            return None
        key = op.command[1]
        if not key.endswith(b":lock"):
            return None
        if not self.observe:
            return None, False
        ex = self.runner.exec
        holder = ex(b"GET", key)
        job = self.runner.keys.relative(key)[: -len(":lock")]
        marked = bool(ex(b"SISMEMBER", self.runner.keys.stalled.encode(), job.encode()))
        return (holder.decode() if isinstance(holder, bytes) else None), marked

    def _after(self, actor: str, op: Op, step: StepRecord, observed: tuple[str | None, bool] | None) -> None:
        r = self.runner
        annotate = self._annotate
        if op.kind == "clock":
            self.clock_events += 1
            if annotate and step.reply == 1 and step.command is not None:  # the lapse deleted the lock
                job = r.keys.relative(step.command[3])[: -len(":lock")]
                step.effects.append(LockChanged(job, step.command[4].decode(), None))
            lease = self.leases.get(self._owner(actor))
            if lease is not None and lease.expiry <= self.t:
                del self.leases[self._owner(actor)]
            return
        # a finish's window: from its DEL of the lock to its next command
        gap = next(((j, g) for j, g in self._open_gap.items() if g[0] == actor), None)
        if gap is not None:
            job, (_, opened, exposed) = gap
            del self._open_gap[job]
            width = self.t - opened
            self.window_ms += width
            if exposed:
                self.expected_hits += min(1.0, width / self.spacing)
        if observed is not None:
            job = r.keys.relative(op.command[1])[: -len(":lock")]  # type: ignore[index]
            holder, marked = observed
            lease = self.leases.get(actor)
            since = lease.since if lease is not None and lease.job == job else self.t
            # A sweep recovers only a job marked by the *previous* sweep: marked, and active for at least
            # one sweep spacing before this window opened.
            exposed = marked and self.t - since >= self.spacing
            self.marked_finishes += marked
            self._open_gap[job] = (actor, self.t, exposed)
            self._finishing[job] = actor
            if annotate and holder is not None:
                step.effects.append(LockChanged(job, holder, None))
        if op.kind == "script" and step.op == "moveStalledJobsToWait":
            self.sweep_runs += 1
            self.sweep_times.append(self.t)
            for raw in step.reply if isinstance(step.reply, list) else []:
                job = raw.decode() if isinstance(raw, bytes) else str(raw)
                if job in self._finishing:
                    self.gap_hits += 1
                if annotate:
                    step.effects += [Removed(job, "active"), Placed(job, "wait")]
        elif annotate and op.kind == "script" and step.op == "moveToFinished":
            if Outcome.of(step.reply).ok:
                step.effects += [Removed(step.args[0], "active"), Placed(step.args[0], step.args[4])]
        elif annotate and step.op == "EXEC" and isinstance(step.reply, list) and step.batch:
            step.effects += self._exec_effects(actor, step.batch, step.reply)
        elif annotate and op.kind == "command" and step.op == "ZADD" and len(step.args) == 3 \
                and step.args[0] in ("completed", "failed") and step.reply == 1:  # 1 = newly added
            step.effects.append(Placed(step.args[2], step.args[0]))

    def _exec_effects(self, actor: str, batch: Sequence[tuple[bytes, ...]], replies: list[Any]) -> list[Any]:
        """The effects the checks need of a committed transaction, from its commands and their replies."""
        k = self.runner.keys
        out: list[Any] = []
        places = {k.completed.encode(): "completed", k.failed.encode(): "failed", k.delayed.encode(): "delayed"}
        for c, rr in zip(batch, replies, strict=False):
            if c[0] == b"DEL" and c[1].endswith(b":lock") and rr == 1:
                job = k.relative(c[1])[: -len(":lock")]
                out.append(LockChanged(job, self.runner.current_token(actor, job), None))
            elif c[0] == b"LREM" and c[1] == k.active.encode() and rr:
                out.append(Removed(c[3].decode(), "active"))
            elif c[0] == b"ZADD" and c[1] in places and rr == 1:
                out.append(Placed(c[3].decode(), places[c[1]]))
            elif c[0] == b"LPUSH" and c[1] == k.wait.encode():
                out.append(Placed(c[2].decode(), "wait"))
        return out

    # -- bookkeeping the generators call -------------------------------------------------------------
    @property
    def spacing(self) -> float:
        """The mean time between two sweeps reaching the server: the interval plus one round trip."""
        return self.config.stalled_interval_ms + self.config.rtt_ms

    def _acquired(self, worker: str, job: str, token: str, at: float) -> None:
        self.leases[worker] = _Lease(job, token, at, at + self.config.lock_ms)

    def _finished(self, worker: str, job: str) -> None:
        self.finishes += 1
        self._done_jobs.add(job)
        self.finish_commands[self._ops_in_finish.pop(worker, 0)] += 1
        if self._finishing.get(job) == worker:
            del self._finishing[job]
        self.leases.pop(worker, None)
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
            self._finished(wid, job)
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
            held = self.leases.get(owner) or _Lease("", "", 0.0, 0.0)
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
        makespan = self.t_end or self.t
        cfg = self.config
        return TimedResult(
            mode=self.mode, rtt_ms=cfg.rtt_ms, seed=cfg.seed, jobs=cfg.jobs, workers=cfg.workers,
            finishes=self.finishes, jobs_done=done, round_trips=worker_rts, round_trips_per_job=per_job,
            sweep_runs=self.sweep_runs, clock_events=self.clock_events, makespan_ms=makespan,
            jobs_per_s=done / (makespan / 1000) if makespan > 0 else 0.0,
            anomalies=dict(sorted(kinds.items())), anomalies_per_1000=1000 * sum(kinds.values()) / cfg.jobs,
            gap_hits=self.gap_hits, expected_per_1000=1000 * self.expected_hits / cfg.jobs,
            marked_finishes=self.marked_finishes, window_ms=self.window_ms, truncated=self.truncated,
            steps=len(h.steps), wall_s=time.perf_counter() - self._started, config=asdict(cfg),
            finish_round_trips=dict(sorted(self.finish_commands.items())),
            aborts=sum(1 for s in h.steps if s.op == "EXEC" and s.reply is None),
            attempts=sum(1 for s in h.steps if s.op == "WATCH" and s.actor in self.worker_ids),
            examples=h.anomalies[:3], history=h if self.keep_history else None)

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


# -- sweeps over RTT -------------------------------------------------------------------------------------------


@dataclass
class Sweep:
    """A grid of timed runs: every mode at every RTT (same seed and config otherwise)."""

    modes: list[str]
    rtts: list[float]
    config: dict[str, Any]
    results: list[TimedResult]
    wall_s: float = 0.0

    def get(self, mode: str, rtt: float) -> TimedResult:
        for r in self.results:
            if r.mode == mode and math.isclose(r.rtt_ms, rtt):
                return r
        raise KeyError((mode, rtt))

    def series(self, metric: str) -> dict[str, list[float]]:
        """``{mode: [value at each RTT]}`` for a :class:`TimedResult` field (``"anomalies_per_1000"``,
        ``"round_trips_per_job"``, ``"jobs_per_s"``, ``"expected_per_1000"``, …)."""
        return {m: [float(getattr(self.get(m, x), metric)) for x in self.rtts] for m in self.modes}

    def rows(self) -> list[dict[str, Any]]:
        """Flat rows for a table or CSV."""
        out = []
        for r in self.results:
            row = {"mode": r.mode, "rtt_ms": r.rtt_ms, "round_trips_per_job": round(r.round_trips_per_job, 3),
                   "aborts_per_job": round(r.aborts_per_job, 3),
                   "jobs_per_s": round(r.jobs_per_s, 2), "anomalies_per_1000": round(r.anomalies_per_1000, 2),
                   "expected_per_1000": round(r.expected_per_1000, 2), "anomalies": r.anomaly_total,
                   "gap_hits": r.gap_hits, "finishes": r.finishes, "jobs": r.jobs, "workers": r.workers,
                   "sweep_runs": r.sweep_runs, "makespan_ms": round(r.makespan_ms, 2), "seed": r.seed,
                   "truncated": r.truncated}
            for kind in sorted({k for x in self.results for k in x.anomalies}):
                row[kind] = r.anomalies.get(kind, 0)
            out.append(row)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"modes": self.modes, "rtts": self.rtts, "config": self.config,
                "results": [r.to_dict() for r in self.results], "wall_s": round(self.wall_s, 3)}


def _cell(mode: str, cfg: TimingConfig, url: str | None) -> TimedResult:
    """One run of a sweep's grid in a worker process (fakeredis there, or the live server at ``url``)."""
    from emqlab.backend.connect import connect

    conn = connect(url)
    try:
        return simulate(mode, cfg, conn, keep_history=False)
    finally:
        conn.close()


def sweep_rtt(rtts: Iterable[float] = DEFAULT_RTTS, modes: Sequence[str] = MODES,
              config: TimingConfig | None = None, conn: redis.Redis | None = None, *,
              progress: Callable[[int, int], None] | None = None, processes: int = 1,
              **overrides: Any) -> Sweep:
    """Every mode at every RTT. ``progress(done, total)`` counts jobs finished over the whole grid (total =
    runs x jobs). One backend connection is reused (each run claims and deletes its own queue). With
    ``processes`` > 1 the runs of the grid go to a local pool (:func:`emqlab.parallel.make_executor`), each
    on a fakeredis of its worker's or, on a live server, under its own queue; every run is a pure function
    of the mode and the configuration (virtual time, seeded draws), so the sweep is the same."""
    from emqlab.backend.connect import connect

    started = time.perf_counter()
    cfg = replace(config or TimingConfig(), **overrides)
    rtt_list = [float(x) for x in rtts]
    mode_list = list(modes)
    for m in mode_list:
        parts_of(m)
    conn = conn if conn is not None else connect()
    total = len(rtt_list) * len(mode_list) * cfg.jobs
    results: list[TimedResult] = []
    if processes > 1:
        from emqlab.explore.pool import make_executor, url_of

        url = url_of(conn)
        pool, close = make_executor(processes, live=url is not None)
        try:
            futures = [pool.submit(_cell, m, replace(cfg, rtt_ms=x), url) for m in mode_list for x in rtt_list]
            for f in futures:
                results.append(f.result())
                if progress:
                    progress(len(results) * cfg.jobs, total)
        finally:
            close()
        return Sweep(mode_list, rtt_list, asdict(cfg), results, time.perf_counter() - started)
    for m in mode_list:
        for x in rtt_list:
            base = len(results) * cfg.jobs

            def each(done: int, _total: int, base: int = base) -> None:
                if progress:
                    progress(min(base + done, total), total)

            results.append(simulate(m, replace(cfg, rtt_ms=x), conn, keep_history=False, progress=each))
            if progress:
                progress(len(results) * cfg.jobs, total)
    return Sweep(mode_list, rtt_list, asdict(cfg), results, time.perf_counter() - started)


def model_round_trips(mode: str, split_commands: float | None = None, attempts_per_job: float = 1.0) -> float:
    """The model's round trips per job: 1 (atomic), 2 (finish-then-fetch), the split script's command count
    (``split``; pass it), that count + 1 (``split-then-fetch``), and for ``transaction`` 3 per attempt (WATCH,
    the pipelined reads, MULTI … EXEC; an aborted EXEC starts another, up to the attempt limit) + 1 for
    the fetch."""
    finish, fetch = parts_of(mode)
    if finish == "transaction":
        return TRANSACTION_ROUND_TRIPS * attempts_per_job + 1
    if finish == "atomic":
        return 1.0 if fetch else 2.0
    if split_commands is None:
        raise ValueError("split modes need the split script's command count")
    return split_commands if fetch else split_commands + 1


__all__ = ["ALL_MODES", "DEFAULT_RTTS", "MODES", "PRESETS", "Sweep", "TimedResult", "TimedRun", "TimingConfig",
           "mode_of", "model_round_trips", "parts_of", "simulate", "sweep_rtt", "timed_scenario"]
