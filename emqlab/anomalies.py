"""Anomaly checks: pure functions over a run's :class:`~emqlab.history.History` (its steps, their effects,
the executions and the final state). Each finding names its job, the steps that cause it, and a "because"
sentence that explains it in terms of those steps, in the manner of Elle's explanations.

==================== =====================================================================================
kind                 definition
==================== =====================================================================================
double-placement     at the end, one job id is in more than one of wait, active, prioritized, delayed,
                     paused, completed, failed
lost-job             at the end, a job that exists and was not finished is in none of them
stolen-lock          a job's lock was deleted or overwritten by an actor other than its owner while the
                     owner's execution was still open (a lease lapsing is expiry, not theft)
duplicate-execution  a job was started by a worker while another execution of it had not released it, or
                     after it had been completed
metrics-drift        with metrics on, ``metrics:<target>``'s count differs from the number of jobs that
                     reached <target>
attempts-overrun     a job's attempts made (``atm``) exceed its attempt ceiling
==================== =====================================================================================
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .history import History, Step
from .scenario import Scenario

PLACES = ("wait", "active", "prioritized", "delayed", "paused", "completed", "failed")
_PLACE_EFFECT = re.compile(r"^(?P<job>\S+) (?P<sign>[+-])(?P<place>[a-z]+)$")
_LOCK_EFFECT = re.compile(r"^(?P<job>\S+):lock (?P<before>\S+) -> (?P<after>\S+)$")


@dataclass
class Anomaly:
    kind: str
    job: str
    because: str
    steps: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    """Every anomaly in ``h``, in a stable order (kind, job)."""
    found: list[Anomaly] = []
    found += double_placement(h)
    found += lost_job(h)
    found += stolen_lock(h)
    found += duplicate_execution(h, scenario)
    found += metrics_drift(h)
    found += attempts_overrun(h, scenario)
    return found


# -- helpers ----------------------------------------------------------------------------------------------


def _describe_effect(effect: str) -> str:
    m = _PLACE_EFFECT.match(effect)
    if m:
        verb = "put it in" if m["sign"] == "+" else "took it out of"
        return f"{verb} {m['place']}"
    m = _LOCK_EFFECT.match(effect)
    if m:
        if m["after"] == "-":
            return "cleared the lock"
        return f"set the lock to {m['after']}"
    return effect


def _what(step: Step, job: str) -> str:
    """``DEL, cleared the lock`` — the command and its effect on ``job``."""
    effects = [e for e in step.effects if e.startswith((f"{job} ", f"{job}:lock "))]
    op = step.op
    return f"{op}, {_describe_effect(effects[0])}" if effects else op


def _placed_by(h: History, job: str, place: str) -> Step | None:
    last = None
    for s in h.steps:
        if f"{job} +{place}" in s.effects:
            last = s
    return last


def _ref(step: Step | None) -> str:
    if step is None:
        return "in the initial state"
    return f"{step.actor} step {step.index}, {step.op}"


def _window(h: History, inner: Step, outer_actor: str) -> tuple[Step | None, Step | None]:
    """``outer_actor``'s last step before ``inner`` and first after it, when both belong to one split
    script run (same section)."""
    before = next((s for s in reversed(h.steps[: inner.index - 1]) if s.actor == outer_actor), None)
    after = next((s for s in h.steps[inner.index:] if s.actor == outer_actor), None)
    if before and after and before.kind == after.kind == "command" and before.note == after.note:
        return before, after
    return None, None


# -- the checks ----------------------------------------------------------------------------------------------


def double_placement(h: History) -> list[Anomaly]:
    out = []
    for job, places in sorted(h.final.get("placements", {}).items()):
        places = [p for p in places if p in PLACES]
        if len(places) < 2:
            continue
        steps = [(p, _placed_by(h, job, p)) for p in places]
        steps.sort(key=lambda ps: ps[1].index if ps[1] else 0)
        (p1, s1), (p2, s2) = steps[0], steps[-1]
        sentence = f"job {job} is in {p1} ({_ref(s1)}) and in {p2} ({_ref(s2)})"
        involved = [s.index for _, s in steps if s]
        because = ""
        # Which placement happened inside the other actor's split run?
        for inner, outer in ((s1, s2), (s2, s1)):
            if inner is None or outer is None or inner.actor == outer.actor:
                continue
            before, after = _window(h, inner, outer.actor)
            if before and after:
                effects = [e for e in before.effects if e.startswith((f"{job} ", f"{job}:lock "))]
                did = f"{outer.actor} {_describe_effect(effects[0])}" if effects else f"{outer.actor}'s read"
                because = (f" because {inner.actor} ran after {did} (step {before.index}, {before.op}) and before"
                           f" {outer.actor}'s next command (step {after.index}, {after.op}), inside {outer.actor}'s"
                           f" split {after.note or 'script'}")
                lapses = [s for s in h.steps[before.index:inner.index - 1]
                          if s.kind == "clock" and f"{job}:lock" in " ".join(s.effects)]
                if lapses:
                    because += f"; {outer.actor}'s lease had lapsed in between (step {lapses[0].index})"
                    involved.append(lapses[0].index)
                involved += [before.index, after.index]
                break
        if not because and s1 is not None and s2 is not None and s1.actor != s2.actor:
            because = (f" because {s2.actor}'s {s2.op} (step {s2.index}) did not check that the job had"
                       f" already been placed in {p1}")
        out.append(Anomaly("double-placement", job, sentence + because, sorted(set(involved))))
    return out


def lost_job(h: History) -> list[Anomaly]:
    out = []
    jobs = h.final.get("jobs", {})
    for job, places in sorted(h.final.get("placements", {}).items()):
        info = jobs.get(job, {})
        if places or not info.get("exists"):
            continue
        removed = None
        for s in h.steps:
            if any(e.startswith(f"{job} -") and not e.endswith("stalled") for e in s.effects):
                removed = s
        because = f"job {job} exists but is in no list or set"
        if removed is not None:
            because += f": {_ref(removed)} took it out and nothing put it back"
        out.append(Anomaly("lost-job", job, because, [removed.index] if removed else []))
    return out


def stolen_lock(h: History) -> list[Anomaly]:
    out = []
    for s in h.steps:
        if s.kind == "clock":
            continue
        for e in s.effects:
            m = _LOCK_EFFECT.match(e)
            if not m or m["before"] == "-":
                continue
            owner_token = m["before"]
            owner = owner_token.split(":", 1)[0]
            if owner == s.actor:
                continue
            ex = next((x for x in h.executions if x.token == owner_token and x.job == m["job"]), None)
            if ex is None or ex.start > s.index or (ex.end is not None and ex.end < s.index):
                continue
            action = "deleted" if m["after"] == "-" else f"overwrote (with {m['after']})"
            until = f"until step {ex.end}" if ex.end is not None else "to the end of the run"
            since = f"since step {ex.start}" if ex.start else "from the start"
            out.append(Anomaly(
                "stolen-lock", m["job"],
                f"{s.actor} {action} {owner}'s lock on job {m['job']} (step {s.index}, {s.op}) while {owner}"
                f" still held the job ({since}, {until})",
                [s.index]))
    return out


def _release_step(h: History, e: Any) -> int | None:
    """When execution ``e`` let go of its job: the first step of its own actor that cleared its own lock
    (a split finish's DEL, or the atomic finish that did it), else the end of a finish that succeeded."""
    mark = f"{e.job}:lock {e.token} -> -"
    for s in h.steps[max(0, e.start - 1):]:
        if s.actor == e.actor and mark in s.effects:
            return s.index
    return e.end if e.released else None


def duplicate_execution(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    by_job: dict[str, list[Any]] = {}
    for e in h.executions:
        by_job.setdefault(e.job, []).append(e)
    completes = {a.id for a in scenario.actors if a.kind == "worker" and a.finish == "completed"} \
        if scenario else None
    for job, runs in sorted(by_job.items()):
        runs.sort(key=lambda e: e.start)
        for i, later in enumerate(runs):
            for earlier in runs[:i]:
                released = _release_step(h, earlier)
                if released is None or released > later.start:
                    since = f"since step {earlier.start}" if earlier.start else "from the start"
                    how = "had not released it" if earlier.end is None or earlier.end > later.start else \
                        f"had not released it (its finish was refused at step {earlier.end}: {earlier.result})"
                    out.append(Anomaly(
                        "duplicate-execution", job,
                        f"{later.actor} started job {job} (step {later.start}) while {earlier.actor}'s execution"
                        f" ({since}) {how}",
                        [later.start]))
                    break
                if earlier.released and (completes is None or earlier.actor in completes) and \
                        earlier.end is not None and earlier.end <= later.start:
                    out.append(Anomaly(
                        "duplicate-execution", job,
                        f"{later.actor} started job {job} (step {later.start}) after {earlier.actor} had already"
                        f" completed it (step {earlier.end})",
                        [later.start, earlier.end]))
                    break
    return out


def metrics_drift(h: History) -> list[Anomaly]:
    if not h.final.get("metrics_on"):
        return []
    out = []
    for target in ("completed", "failed"):
        reached = {s_job for s in h.steps for e in s.effects
                   if (m := _PLACE_EFFECT.match(e)) and m["place"] == target and m["sign"] == "+"
                   for s_job in [m["job"]]}
        count = h.final.get("metrics", {}).get(target) or 0
        if count != len(reached):
            out.append(Anomaly(
                "metrics-drift", ",".join(sorted(reached)) or "-",
                f"metrics:{target} counts {count} but {len(reached)} job(s) reached {target}", []))
    return out


def attempts_overrun(h: History, scenario: Scenario | None) -> list[Anomaly]:
    if scenario is None:
        return []
    out = []
    for job, info in sorted(h.final.get("jobs", {}).items()):
        spec = scenario.jobs.get(job)
        ceiling = spec.attempts if spec else 0
        if not ceiling:
            continue
        made = int(info.get("atm", 0) or 0)
        if made > ceiling:
            out.append(Anomaly("attempts-overrun", job,
                               f"job {job} has {made} attempts made, over its ceiling of {ceiling}", []))
    return out
