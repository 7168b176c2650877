"""A second anomaly checker, written from ``docs/concepts.md`` and ``docs/scenarios.md`` alone (issue 26, item 6),
to hold the engine's (``emqlab/analysis/anomalies.py``, ``invariants.py``) to the documented definitions.

It shares no logic with the engine's checks and reads none of the inputs the engine derives for them: not the
recorded effects (the diffs of the queue's view that the engine's recorder reads only where the command table
says a step wrote), not the final state the engine reads. Its record of a run is

* **its own snapshots** (:class:`Snapshots`, an instrument): before the first step and after every step
  (a lone read command, from its own list :data:`READS`, keeps the last one), the whole queue as the docs
  name it — every place (BullMQ's seven structures and the scenario's own ``places:``, an indexed place only
  while its index holds its member, a ``json_id`` place's members decoded), every job's lock token, every
  job's data (its hash's fields, or its field of a shared hash), the metrics counters and the keys the
  scenario's invariants read;
* **the steps** as the Runner recorded them: actor, kind (a clock step is a lapse), the script run a command
  belongs to, the scripts a step ran;
* **the executions**: what each worker said it did (which job, under which token, from which step to which,
  the finish's reply, whether it crashed).

Each kind is decided by :func:`findings` from its definition in the docs; where a definition leaves a choice
open, the docstring of the function that decides it says which reading it takes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emqlab.engine.history import Execution, History, Step
from emqlab.engine.pyref import resolve
from emqlab.engine.specs import InvariantSpec, Scenario

#: BullMQ's places, as docs/concepts.md lists them for double-placement
BUILT_IN_PLACES = ("wait", "active", "prioritized", "delayed", "paused", "completed", "failed")
#: the lists among them (the others are sorted sets: docs/concepts.md, "The 14 keys")
BUILT_IN_LISTS = ("wait", "active", "paused")
#: where a finish hands a job on for a retry (duplicate-execution: "back to wait, paused, delayed or prioritized")
RETRY_PLACES = ("wait", "paused", "delayed", "prioritized")
#: where a finished job is filed
DONE_PLACES = ("completed", "failed")
#: the recovery role's script (stuck-active: "any actor … that runs a moveStalledJobsToWait pass")
RECOVERY = "moveStalledJobsToWait"
METRICS = ("completed", "failed")
#: commands that only read (Redis's command reference): after one, the queue is as it was. Any other step —
#: a write, a script, a pipeline, a clock or fault step — is followed by a fresh snapshot
READS = frozenset({"EXISTS", "GET", "HGET", "HMGET", "HGETALL", "HEXISTS", "HLEN", "LPOS", "LLEN", "LRANGE",
                   "LINDEX", "ZSCORE", "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZRANK", "SCARD", "SISMEMBER",
                   "SMEMBERS", "TYPE", "TTL", "PTTL", "MGET", "STRLEN", "XLEN"})

#: a finding: (kind, job), the job "" for the kinds about the whole run (metrics-drift, a counter or a Python
#: rule broken)
Finding = tuple[str, str]


@dataclass(frozen=True)
class Snapshot:
    """The queue at one moment: ``places`` (place → the job ids it holds, one per copy), ``locks`` (job →
    token or ``None``), ``data`` (job → its hash's fields, ``None`` when there is no data), ``metrics``
    (target → the counter or ``None``; read with metrics on), ``values`` (an invariant's key → its value).
    The stalled set is left out: no kind's definition reads it."""

    places: Mapping[str, tuple[str, ...]]
    locks: Mapping[str, str | None]
    data: Mapping[str, Mapping[str, str] | None]
    metrics: Mapping[str, int | None]
    values: Mapping[str, Any] = field(default_factory=dict)

    def copies(self, job: str) -> int:
        return sum(members.count(job) for members in self.places.values())

    def where(self, job: str) -> list[str]:
        return [p for p, members in self.places.items() for m in members if m == job]

    def ids(self) -> set[str]:
        return {m for members in self.places.values() for m in members}


def _text(v: Any) -> str:
    v = getattr(v, "value", v)  # (a status reply)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class Snapshots:
    """An instrument that reads the whole queue (:class:`Snapshot`) before the first step and after every
    step. ``taken[0]`` is the initial state, ``taken[i]`` the state after step *i*."""

    records = None  # (it records nothing the engine's checks read)

    def __init__(self) -> None:
        self.taken: list[Snapshot] = []

    def start(self, runner: Any) -> None:
        self.taken = [self.read(runner)]

    def after_step(self, runner: Any, actor: str, op: Any, rec: Any) -> None:
        if rec.kind == "command" and rec.op.upper() in READS and not op.pre:
            self.taken.append(self.taken[-1])  # (a read changes nothing: the last snapshot stands)
        else:
            self.taken.append(self.read(runner))

    @staticmethod
    def read(runner: Any) -> Snapshot:
        ex: Callable[..., Any] = runner.exec
        keys = runner.keys
        sc: Scenario = runner.scenario
        own = {p.key: p for p in sc.places}
        places: dict[str, tuple[str, ...]] = {}
        for name in (*BUILT_IN_PLACES, *own):
            key = keys.key(name).encode()
            spec = own.get(name)
            if spec is not None and spec.index is not None and \
                    ex(b"ZSCORE", keys.key(spec.index).encode(), (spec.member or "").encode()) is None:
                places[name] = ()  # (no poll finds a list its index does not name: no place)
                continue
            kind = spec.type if spec is not None else ("list" if name in BUILT_IN_LISTS else "zset")
            if kind == "list":
                raw = ex(b"LRANGE", key, b"0", b"-1")
            elif kind == "zset":
                raw = ex(b"ZRANGE", key, b"0", b"-1")
            else:
                raw = sorted(ex(b"SMEMBERS", key) or [])
            members = [_text(m) for m in raw or []]
            if spec is not None and spec.json_id is not None:
                members = [_json_job(m, spec.json_id) for m in members]
            places[name] = tuple(members)
        jobs = list(dict.fromkeys([*runner.job_ids, *(m for ms in places.values() for m in ms)]))
        locks = {j: _opt(ex(b"GET", keys.lock(j).encode())) for j in jobs}
        data: dict[str, Mapping[str, str] | None] = {}
        for j in jobs:
            key = keys.job(j).encode()
            fld = keys.job_field_of(j)
            if fld is not None:
                v = ex(b"HGET", key, fld.encode())
                data[j] = None if v is None else {fld: _text(v)}
            else:
                raw = ex(b"HGETALL", key) or []
                fields = {_text(raw[i]): _text(raw[i + 1]) for i in range(0, len(raw) - 1, 2)}
                data[j] = fields if fields else None
        metrics = {t: _int(ex(b"HGET", keys.key(f"metrics:{t}").encode(), b"count")) for t in METRICS} \
            if sc.metrics else {}
        values = {k: _value(ex, keys.key(k).encode()) for inv in sc.invariants for k in _reads(inv, jobs)}
        return Snapshot(places, locks, data, metrics, values)


def _opt(v: Any) -> str | None:
    return None if v is None else _text(v)


def _int(v: Any) -> int | None:
    return None if v is None else int(_text(v))


def _json_job(member: str, id_field: str) -> str:
    """The job a JSON member stands for (its ``id_field``); any other member stands for itself."""
    try:
        v = json.loads(member)
    except ValueError:
        return member
    got = v.get(id_field) if isinstance(v, dict) else None
    if isinstance(got, bool) or not isinstance(got, (str, int)):
        return member
    return str(got)


def _reads(inv: InvariantSpec, jobs: Sequence[str]) -> list[str]:
    if inv.counter is not None:
        return [inv.counter]
    if inv.exists_while_active is not None:
        return [inv.exists_while_active.replace("{job}", j) for j in jobs]
    return []


def _value(ex: Callable[..., Any], key: bytes) -> Any:
    kind = _text(ex(b"TYPE", key))
    if kind == "none":
        return None
    if kind == "string":
        return _text(ex(b"GET", key))
    if kind == "hash":
        raw = ex(b"HGETALL", key) or []
        return {_text(raw[i]): _text(raw[i + 1]) for i in range(0, len(raw) - 1, 2)}
    return kind  # (a counter is a string or a hash field; other keys only need to exist)


# -- the record of a run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One run as this checker sees it: the steps, the executions, the snapshots (``snaps[i]``: after step
    *i*, ``snaps[0]``: the initial state), and whether the job data has BullMQ's layout (a ``data`` field
    is the payload: docs/scenarios.md looks for a fragment only there)."""

    steps: Sequence[Step]
    executions: Sequence[Execution]
    snaps: Sequence[Snapshot]
    bullmq_layout: bool

    @property
    def final(self) -> Snapshot:
        return self.snaps[-1]

    def before(self, step: int) -> Snapshot:
        return self.snaps[step - 1]

    def after(self, step: int) -> Snapshot:
        return self.snaps[step]

    def added(self, step: int, place: str, job: str) -> bool:
        """Step ``step`` put a copy of ``job`` in ``place``."""
        return self.after(step).places.get(place, ()).count(job) > self.before(step).places.get(place, ()).count(job)

    def payload(self, fields: Mapping[str, str] | None) -> bool:
        return fields is not None and ("data" in fields if self.bullmq_layout else True)

    def re_adds(self, job: str) -> list[int]:
        """The steps that added ``job`` anew (each begins a new job under the old id: "a job re-added under
        the same id is a new job"): an add script ran, and the job's data with its payload appeared."""
        return [s.index for s in self.steps
                if any(name.startswith("add") for name in s.scripts)
                and not self.payload(self.before(s.index).data.get(job))
                and self.payload(self.after(s.index).data.get(job))]

    def same_job(self, job: str, a: int, b: int) -> bool:
        """Steps ``a`` ≤ ``b`` see the same job ``job`` (no re-add in between)."""
        return not any(a < i <= b for i in self.re_adds(job))


def _refused(e: Execution) -> bool:
    """The finish answered a negative code (the script checked something and wrote nothing)."""
    try:
        return e.result is not None and int(e.result) < 0
    except ValueError:
        return False


def _finished(r: Record, e: Execution) -> bool:
    """``e`` finished its job: a step of its own put the job in completed or failed, or its finish succeeded
    and a step of its own deleted the job's data (keepJobs 0). A finish that put the job back for a retry
    succeeded without finishing it."""
    end = e.end if e.end is not None else len(r.steps)
    for s in r.steps[e.start:end]:
        if s.actor != e.actor:
            continue
        b, a = r.before(s.index), r.after(s.index)
        if any(r.added(s.index, p, e.job) for p in DONE_PLACES):
            return True
        if e.released and e.end is not None and b.data.get(e.job) is not None and a.data.get(e.job) is None:
            return True
    return False


def _open_at(e: Execution, step: int) -> bool:
    """``e`` holds its job at ``step``: it began before it and had neither ended nor crashed before it."""
    if e.start >= step:
        return False
    if e.end is not None and e.end < step:
        return False
    return not (e.crashed is not None and e.crashed < step)


def _lock_changes(r: Record, job: str) -> list[tuple[Step, str | None, str | None]]:
    """Every step that changed ``job``'s lock, with the token before and after it."""
    out = []
    for s in r.steps:
        b, a = r.before(s.index).locks.get(job), r.after(s.index).locks.get(job)
        if b != a:
            out.append((s, b, a))
    return out


# -- the kinds, each from its definition in docs/concepts.md ----------------------------------------------------


def double_placement(r: Record) -> set[Finding]:
    """At the end, one job id is held more than once by the places (two structures, or two copies in one)."""
    return {("double-placement", j) for j in r.final.ids() if r.final.copies(j) > 1}


def lost_job(r: Record) -> set[Finding]:
    """At the end, a job's data with its payload is in no place, and no execution of that job finished it
    (:func:`_finished`)."""
    out = set()
    end = len(r.steps)
    for j, fields in r.final.data.items():
        if not r.payload(fields) or r.final.copies(j):
            continue
        if not any(e.job == j and _finished(r, e) and r.same_job(j, e.start, end) for e in r.executions):
            out.add(("lost-job", j))
    return out


def orphan_data(r: Record) -> set[Finding]:
    """At the end, a job's data is in no place although the job was finished (:func:`_finished`), or the
    data is a fragment without the job's payload (in a place or not; BullMQ's layout only)."""
    out = set()
    end = len(r.steps)
    for j, fields in r.final.data.items():
        if fields is None:
            continue
        if not r.payload(fields):
            out.add(("orphan-data", j))
        elif not r.final.copies(j) and any(e.job == j and _finished(r, e) and r.same_job(j, e.start, end)
                                           for e in r.executions):
            out.add(("orphan-data", j))
    return out


def phantom_job(r: Record) -> set[Finding]:
    """At the end, an id is placed in a place but has no job data."""
    return {("phantom-job", j) for j in r.final.ids() if r.final.data.get(j) is None}


def stolen_lock(r: Record, sc: Scenario) -> set[Finding]:
    """A job's lock was deleted or overwritten by an actor other than its owner while the owner's execution
    was open. A clock step (a lease lapsing) is expiry, and a fault step (a server restart) is no actor's
    write. The owner is the execution that took the token the lock held before the step (:func:`_owner`); an
    execution that crashed is no longer open after its crash."""
    out = set()
    for j in r.final.locks:
        for s, before, _after in _lock_changes(r, j):
            if before is None or s.kind in ("clock", "fault"):
                continue
            owner = _owner(r, sc, j, before)
            if owner is not None and owner.actor != s.actor and _open_at(owner, s.index):
                out.add(("stolen-lock", j))
    return out


def _owner(r: Record, sc: Scenario, job: str, token: str) -> Execution | None:
    """The execution whose lock ``token`` on ``job`` is: the one that took it (its start step set the lock
    to it, or it held the job from the start and the scenario's ``locks:`` gives the lock to its actor).
    Another execution under the same token (a copied token: shared-token) holds it without owning it."""
    holders = [e for e in r.executions if e.job == job and e.token == token]
    took = [e for e in holders
            if (e.start == 0 and sc.locks.get(job) == e.actor)
            or (e.start > 0 and r.before(e.start).locks.get(job) != token == r.after(e.start).locks.get(job))]
    found = took or holders
    return found[0] if found else None


def duplicate_execution(r: Record) -> set[Finding]:
    """An execution of a job started after another execution of the same job had started (two executions
    that both hold the job from the start count: neither had released it), unless that one had already
    handed the job on for a retry: a step of its own finish put the job in wait, paused, delayed or prioritized
    before the second started."""
    out = set()
    for later in r.executions:
        for earlier in r.executions:
            if earlier is later or earlier.job != later.job or earlier.start > later.start:
                continue
            if earlier.start == later.start and r.executions.index(earlier) > r.executions.index(later):
                continue  # (the pair once)
            if not r.same_job(later.job, earlier.start, later.start):
                continue
            end = earlier.end if earlier.end is not None else len(r.steps)
            handed_on = any(
                s.actor == earlier.actor and earlier.start < s.index <= end and s.index < later.start
                and any(r.added(s.index, p, later.job) for p in RETRY_PLACES)
                for s in r.steps)
            if not handed_on:
                out.add(("duplicate-execution", later.job))
    return out


def metrics_drift(r: Record, sc: Scenario) -> set[Finding]:
    """With metrics on, ``metrics:<target>`` counts differently from the number of jobs that reached
    ``<target>`` (were put there by a step of the run)."""
    if not sc.metrics:
        return set()
    out = set()
    for target in METRICS:
        reached = {j for s in r.steps for j in r.after(s.index).places.get(target, ()) if r.added(s.index, target, j)}
        if (r.final.metrics.get(target) or 0) != len(reached):
            out.add(("metrics-drift", ""))
    return out


def attempts_overrun(r: Record, sc: Scenario) -> set[Finding]:
    """A job's attempts made (``atm``) exceed its attempt ceiling (the scenario's ``attempts``)."""
    out = set()
    for j, fields in r.final.data.items():
        spec = sc.jobs.get(j)
        if spec is None or not spec.attempts or not fields:
            continue
        if int(fields.get("atm", 0) or 0) > spec.attempts:
            out.add(("attempts-overrun", j))
    return out


def stuck_active(r: Record) -> set[Finding]:
    """At the end, a job is in ``active`` with no lock and no open execution, and no actor of the run plays
    the recovery role (a step of it ran a moveStalledJobsToWait pass)."""
    if any(RECOVERY in s.scripts for s in r.steps):
        return set()
    end = len(r.steps) + 1
    return {("stuck-active", j) for j in set(r.final.places.get("active", ()))
            if r.final.locks.get(j) is None and not any(e.job == j and _open_at(e, end) for e in r.executions)}


def work_thrown_away(r: Record) -> set[Finding]:
    """An execution's finish was refused although nobody had touched its lock (no step of another actor
    changed it away from the execution's token while the execution ran), and the job did not end up
    finished: it is in neither completed nor failed at the end, and no other execution of the same job
    finished it."""
    out = set()
    for e in r.executions:
        if e.end is None or not _refused(e):
            continue
        if any(p in DONE_PLACES for p in r.final.where(e.job)):
            continue
        if any(x is not e and x.job == e.job and _finished(r, x)
               and r.same_job(e.job, min(x.start, e.start), max(x.start, e.start)) for x in r.executions):
            continue
        touched = any(s.actor != e.actor and e.start < s.index <= e.end and before == e.token and after != e.token
                      for s, before, after in _lock_changes(r, e.job))
        if not touched:
            out.add(("work-thrown-away", e.job))
    return out


def non_owner_finish(r: Record) -> set[Finding]:
    """An execution's finish was accepted although another worker had taken the job's lock (set it to a
    token of its own) after the execution began and before the finish did. The finish begins at the first
    command of the script run its last step belongs to (a split finish), or at that step."""
    out = set()
    for e in r.executions:
        if not e.released or e.end is None:
            continue
        last = r.steps[e.end - 1]
        begun = min((s.index for s in r.steps if last.run is not None and s.actor == last.actor
                     and s.run == last.run), default=last.index)
        if any(e.start < s.index < begun and after is not None and after != e.token
               for s, _before, after in _lock_changes(r, e.job)):
            out.add(("non-owner-finish", e.job))
    return out


def invariants(r: Record, sc: Scenario, h: History) -> set[Finding]:
    """The scenario's own rules (docs/scenarios.md, "Your own invariants") over the final snapshot: a hash
    field that must hold ``agrees[place]`` while the job is in that place (a job without data is not
    checked); a counter that must equal the number of jobs in a place (missing: 0); a key that must exist
    while the job is in active; a Python rule, given the run's final state and history, whose answer None,
    True or ``[]`` holds and anything else — an exception too — does not."""
    out: set[Finding] = set()
    final = r.final
    for inv in sc.invariants:
        kind = f"invariant:{inv.name}"
        if inv.field is not None:
            agrees = dict(inv.agrees)
            for j, fields in final.data.items():
                if fields is None:
                    continue
                if any(p in agrees and fields.get(inv.field) != agrees[p] for p in final.where(j)):
                    out.add((kind, j))
        elif inv.counter is not None:
            raw = final.values.get(inv.counter)
            if inv.counter_field is not None:
                raw = raw.get(inv.counter_field) if isinstance(raw, dict) else None
            count = int(raw) if isinstance(raw, str) and raw.lstrip("-").isdigit() else 0
            if count != len({j for j in final.ids() if j in final.places.get(inv.equals_count_in or "", ())}):
                out.add((kind, ""))
        elif inv.exists_while_active is not None:
            for j in set(final.places.get("active", ())):
                if final.values.get(inv.exists_while_active.replace("{job}", j)) is None:
                    out.add((kind, j))
        elif inv.python is not None:
            try:
                verdict = resolve(inv.python, sc.base_dir, takes="(final, history)")(h.final, h)
            except Exception:  # noqa: BLE001 - a rule that raises is broken (docs/scenarios.md)
                verdict = False
            if not (verdict is None or verdict is True or (isinstance(verdict, (list, tuple)) and not verdict)):
                if hasattr(verdict, "close"):
                    verdict.close()
                out.add((kind, ""))
    return out


def findings(r: Record, sc: Scenario, h: History) -> set[Finding]:
    """Every (kind, job) this checker finds in the run."""
    return (double_placement(r) | lost_job(r) | orphan_data(r) | phantom_job(r) | stolen_lock(r, sc)
            | duplicate_execution(r) | metrics_drift(r, sc) | attempts_overrun(r, sc) | stuck_active(r)
            | work_thrown_away(r) | non_owner_finish(r) | invariants(r, sc, h))


def record(h: History, snaps: Snapshots, sc: Scenario) -> Record:
    """The run ``h`` with the snapshots ``snaps`` took of it."""
    assert len(snaps.taken) == len(h.steps) + 1, (len(snaps.taken), len(h.steps))
    return Record(h.steps, h.executions, tuple(snaps.taken), sc.job_key == "{job}" and sc.job_field is None)


#: the kinds a finding of the engine's names the whole run by (its job is a list of jobs or "-")
RUN_KINDS = frozenset({"metrics-drift"})


def as_findings(h: History, sc: Scenario) -> set[Finding]:
    """The engine's findings of ``h`` in this checker's terms: (kind, job), the job "" for a whole run's."""
    python_rules = {f"invariant:{i.name}" for i in sc.invariants if i.python is not None or i.counter is not None}
    return {(a.kind, "" if a.kind in RUN_KINDS or a.kind in python_rules else a.job) for a in h.findings}


__all__ = ["Finding", "Record", "Snapshot", "Snapshots", "as_findings", "findings", "record"]
