"""Timed runs: how *often* a split finish goes wrong, and what each finish mode costs, in virtual time.

The logical explorer (:mod:`emqlab.explore`) answers "can it happen?". A timed run answers "how often, and
at what price?": N jobs go through W workers while the recovery sweep runs on its interval, every command
costs a round trip, and the run reports, per finish mode, anomalies per kind and per 1,000 jobs, round
trips per job, and jobs per second of virtual time.

It is a discrete-event simulation over the **same** engine: the one :class:`~emqlab.engine.runner.Runner`, with a
``clock`` (virtual time), timed actor generators passed as ``factories`` (worker, sweep, lease) and the
exposure measurement as an instrument, stepped by :meth:`~emqlab.timing.run.TimedRun.choose`, a chooser that
picks the actor whose next command reaches the server first (ties: the actor listed first, so equal times stay
deterministic, as in SimPy's event heap). The scripts are the real ones: EVALSHA on the backend, or split
through the Lua host, one command per round trip.

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
  runs :data:`emqlab.engine.actors.LAPSE_LUA`: the lock lapses only if it still holds that acquisition's token).
  The server's PX TTLs are set to an hour so that wall-clock expiry never interferes.
* **Sweep.** moveStalledJobsToWait-8 runs, waits ``stalled_interval_ms`` after its reply (BullMQ's stalled
  checker re-arms its timer after each run), and runs again; each run starts a new stalled interval (the
  sweep deletes ``stalled-check`` first, see :func:`emqlab.engine.actors.sweep`). Its CHECK recovers jobs marked
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
running) and the anomalies :func:`emqlab.analysis.anomalies.check` finds. Atomic finishes have no window: 0.

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
from dataclasses import dataclass

from emqlab.engine.specs import ActorSpec, JobSpec, Scenario

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
                    lesson="", source=[], project="bullmq", anomaly="double-placement", queue="q", jobs=jobs,
                    state={"wait": ids}, locks={}, meta={"opts.maxLenEvents": "10000"}, metrics=False,
                    actors=actors, expect={},
                    modes=list(ALL_MODES))


def _fmt_ms(ms: float) -> str:
    return f"{ms:g} ms"


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


__all__ = ["ALL_MODES", "DEFAULT_RTTS", "MODES", "PRESETS", "TimingConfig", "mode_of", "model_round_trips", "parts_of",
           "timed_scenario"]
