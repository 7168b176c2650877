"""The home of a scenario as data: the jobs, the actors and what is expected of each finish mode
(:class:`Scenario`), and the kinds they are made of. :mod:`emqlab.engine.scenario` reads them from YAML."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from emqlab.engine.effects import ExtraPlace

ANOMALY_KINDS = (
    "double-placement",
    "lost-job",
    "stolen-lock",
    "duplicate-execution",
    "metrics-drift",
    "attempts-overrun",
    "orphan-data",
    "phantom-job",
    "stuck-active",
    "work-thrown-away",
    "non-owner-finish",
)
ACTOR_KINDS = ("worker", "sweep", "lease", "producer", "canceller", "crash", "disconnect", "script-flush", "restart",
               "python")
#: the actor kinds that are fault events (docs/concepts.md, "Faults")
FAULT_KINDS = ("crash", "disconnect", "script-flush", "restart")
#: what a worker does when a round trip fails (a lost connection, NOSCRIPT without a fallback)
ON_ERROR = ("none", "retry", "refetch")
PLACEMENT_FIELDS = ("wait", "active", "paused", "prioritized", "delayed", "completed", "failed", "stalled")


@dataclass
class JobSpec:
    id: str
    name: str = "job"
    data: Any = field(default_factory=dict)
    attempts: int = 0
    backoff: int = 0
    priority: int = 0
    delay: int = 0
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class ActorSpec:
    id: str
    kind: str
    # worker
    holds: str | None = None
    jobs: int = 1
    finish: str = "completed"
    value: Any = "done"
    mode: str | None = None
    fetch_next: bool = True
    fetch_attempts: int = 1
    keep_jobs: Any = None
    attempts: int | None = None
    renewals: int = 0
    #: after a failed round trip: give the job up (none), send the same call once more (retry), or give
    #: the job up and fetch another (refetch)
    on_error: str = "none"
    #: NOSCRIPT from EVALSHA: load the script and run it (fallback, as redis-py and ioredis clients do) or
    #: treat it as a failed round trip (fail)
    noscript: str = "fallback"
    #: transaction mode: the keys the finish WATCHes (lock, active, stalled)
    watch: tuple[str, ...] = ("lock", "active", "stalled")
    # sweep
    max_stalled: int = 1
    runs: int = 1
    # lease / producer / canceller
    job: str | None = None
    of: str | None = None
    # crash: the crashed process's lock lapses afterwards (its TTL runs out); it restarts as a new process
    lapse: bool = True
    restart: bool = False
    # disconnect: the lost request reached the server and ran (only its reply was lost)
    applied: bool = True
    # python: the function (a callable, or "module:function" imported from the scenario file's folder)
    python: Any = None
    #: python: the jobs this actor adds during the run (declared under jobs:, not written initially)
    adds: tuple[str, ...] = ()
    #: python: the actor's parameters (``with:`` in the file; ``q.params`` in the function)
    params: dict[str, Any] = field(default_factory=dict)
    #: worker / sweep / canceller: a script file or folder (``<name>-<numkeys>.lua``, or a variant folder)
    #: used by this actor in place of the run's script of that name; resolved to an absolute path
    script: str | None = None
    line: int = 0

    @property
    def added(self) -> tuple[str, ...]:
        """The jobs this actor adds during the run (a producer's job, a Python actor's ``adds``)."""
        if self.kind == "producer" and self.job is not None:
            return (self.job,)
        return self.adds

    @property
    def letter(self) -> str:
        return self.id


@dataclass
class Expectation:
    anomalies: list[str]
    codes: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class InvariantSpec:
    """A rule of the scenario's own that every final state must keep (``invariants:``; docs/scenarios.md),
    named ``invariant:<name>`` in a report. One shape each:

    * ``field`` + ``agrees``: a job hash field must hold ``agrees[place]`` while the job is in ``place``;
    * ``counter`` (+ ``counter_field`` for a hash field) + ``equals_count_in``: the counter must equal the
      number of jobs in that place;
    * ``exists_while_active``: a key (``{job}`` stands for the job id) must exist while the job is active;
    * ``python`` (``module:function``): ``function(final, history)`` returns None or True when the rule
      holds, False or a sentence (or a list of sentences) when it does not; ``reads`` are the keys (relative
      to the queue's base) it reads from ``final.values``.
    """

    name: str
    field: str | None = None
    agrees: tuple[tuple[str, str], ...] = ()
    counter: str | None = None
    counter_field: str | None = None
    equals_count_in: str | None = None
    exists_while_active: str | None = None
    #: ``module:function``, or the function itself (from the Python API)
    python: str | Callable[..., Any] | None = None
    reads: tuple[str, ...] = ()
    #: the line of the scenario file it was declared on (for errors)
    line: int = 0

    @property
    def kind(self) -> str:
        """The name a report gives a broken rule: ``invariant:<name>``."""
        return f"invariant:{self.name}"

    def keys(self, job_ids: list[str]) -> list[str]:
        """The keys (relative to the queue's base) whose final values the rule reads."""
        if self.counter is not None:
            return [self.counter]
        if self.exists_while_active is not None:
            return [self.exists_while_active.replace("{job}", j) for j in job_ids]
        return list(self.reads)


@dataclass
class Scenario:
    """A parsed scenario. ``state`` maps placement names to job ids (``delayed``/``prioritized`` map ids to
    scores), ``locks`` maps job ids to the actor holding them."""

    name: str
    title: str
    lesson: str
    source: list[str]
    #: the queue project whose race this is (``bullmq`` for emqlab's BullMQ-shaped scripts)
    project: str
    anomaly: str
    queue: str
    jobs: dict[str, JobSpec]
    state: dict[str, Any]
    locks: dict[str, str]
    meta: dict[str, str]
    metrics: bool
    actors: list[ActorSpec]
    expect: dict[str, Expectation]
    modes: list[str]
    path: str = ""
    #: the folder a ``python: module:function`` actor is imported from (the scenario file's)
    base_dir: str | None = None
    #: Lua sources the run's script cache holds from the start (besides emqlab's set), as if loaded
    #: before the run: a Python actor's EVALSHA of them needs no NOSCRIPT / SCRIPT LOAD round trips
    loaded_scripts: tuple[bytes, ...] = ()
    #: default preemption bound for exhaustive exploration (None = unbounded)
    preemptions: int | None = None
    #: keys the checks treat as places a job can be in besides the queue's (``places:``)
    places: tuple[ExtraPlace, ...] = ()
    #: the scenario's own rules for the final state (``invariants:``)
    invariants: tuple[InvariantSpec, ...] = ()
    #: where a job's data lives, relative to the queue's base (``{job}``: the id; ``job_key:``): BullMQ's job
    #: hash by default, another queue's own (``asynq:t:{job}``, ``horizon:{job}``)
    job_key: str = "{job}"
    #: with ``job_key: {key, field}``: the field of that one hash holding a job's data (``{job}``: the id)
    job_field: str | None = None
    #: writes of the initial state in another queue's own layout (``seed:``): (command, key relative to the
    #: base, arguments…)
    seed: tuple[tuple[str, ...], ...] = ()

    def final_reads(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What the final state must read for the invariants: (job hash fields, ``*`` for all of them; keys
        relative to the base)."""
        jobs = list(self.jobs)
        fields = tuple(dict.fromkeys(i.field for i in self.invariants if i.field is not None))
        if any(i.python is not None for i in self.invariants):
            fields = ("*",)  # (a rule in Python may read any field of a job's hash)
        keys = tuple(dict.fromkeys(k for i in self.invariants for k in i.keys(jobs)))
        return fields, keys

    def actor(self, actor_id: str) -> ActorSpec:
        for a in self.actors:
            if a.id == actor_id:
                return a
        raise KeyError(actor_id)


__all__ = ["ACTOR_KINDS", "ANOMALY_KINDS", "FAULT_KINDS", "ON_ERROR", "PLACEMENT_FIELDS", "ActorSpec", "Expectation",
           "InvariantSpec",
           "JobSpec", "Scenario"]
