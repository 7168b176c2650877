"""Anomaly checks: pure functions over a run's typed :class:`~emqlab.engine.history.History` (its steps and their
effects, the executions, the final state). Each finding names its job, the steps that cause it, and a
"because" sentence that explains it in terms of those steps, in the manner of Elle's explanations.

Definitions (``docs/concepts.md`` explains each with an example). An *execution* is one worker running one
job: from the step that gave it the job (0 = it held the job from the start) to the end of its finish. A
job's *incarnation* changes when an add script creates its hash again: a re-added id is a new job (the
step's ``script`` says which script it ran — an emqlab producer's, or a Python actor's EVALSHA resolved by
its SHA1). An execution *finished* its job when its finish put the job in completed or failed, or succeeded
and deleted it (keepJobs 0): a successful finish is a finish whether or not the hash survives.

==================== ================ =====================================================================
kind                 needs            definition
==================== ================ =====================================================================
double-placement     final            at the end, one job id is held more than once by wait, active,
                                      prioritized, delayed, paused, completed, failed (two structures, or
                                      two copies in one)
lost-job             final            at the end, a job's hash with its payload is in no structure, and no
                                      execution of that incarnation finished it
stolen-lock          effects          a job's lock was deleted or overwritten by an actor other than its
                                      owner (the execution that took it, not one holding a copy of its
                                      token) while the owner's execution was open (a lease lapsing is
                                      expiry, not theft)
duplicate-execution  effects          an execution of a job started after another execution of the same
                                      incarnation had started, unless that one had already handed the job
                                      on for a retry (its finish put the job back to wait, delayed or
                                      prioritized before the second started); the because-sentence
                                      names the finish when the earlier one had finished it
metrics-drift        effects          with metrics on, ``metrics:<target>``'s count differs from the number
                                      of jobs that reached <target>
attempts-overrun     final            a job's attempts made (``atm``) exceed its attempt ceiling
orphan-data          final            at the end, a job's hash is in no structure although the job was
                                      finished or the hash is a fragment without the job's payload
phantom-job          final            at the end, an id is placed in a structure but has no job hash
stuck-active         final            at the end, a job is in ``active`` with no lock and no open
                                      execution, and no actor of the run plays the recovery role (runs a
                                      moveStalledJobsToWait pass: the built-in sweep or a Python actor)
work-thrown-away     effects          an execution's finish was refused although no one had touched its
                                      lock (in a queue without a lock key: nothing lapsed or took its
                                      claim), and the job did not end up finished (no final placement, and no
                                      other execution of the same incarnation finished it): its result
                                      was the only one, and it is lost
non-owner-finish     effects,         a finish was accepted although another worker had taken the job's
                     lock-changes     lock after the execution began and before the finish did (a lock that
                                      only lapsed is no other owner: the lapse and a finish that never
                                      reads the lock come in either order with the same outcome)
==================== ================ =====================================================================

"needs" is what the check reads: the final state (always recorded), the per-step effects (recorded by
the :class:`emqlab.engine.recorder.EffectRecorder`, or by an instrument that records the few a check needs,
as the timed model's does) and every change of a lock, acquisitions included (``lock-changes``: the
EffectRecorder's full reads). A history recorded without an input gets the checks that do not need it,
and the others are reported as *unchecked* rather than guessed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emqlab.analysis.invariants import check_invariants
from emqlab.engine.effects import Effect as _Effect
from emqlab.engine.effects import HashCreated, HashDeleted, LockChanged, Marked, Placed, Removed, Unmarked
from emqlab.engine.history import Anomaly, Execution, History, Step
from emqlab.engine.scenario import Scenario
from emqlab.protocol.keys import PLACEMENTS, WAITING

PLACES = PLACEMENTS
FINAL_PLACES = ("completed", "failed")
ADD_SCRIPTS = frozenset({"addStandardJob", "addDelayedJob", "addPrioritizedJob", "addJob"})

Checker = Callable[[History, "Scenario | None"], list[Anomaly]]


@dataclass(frozen=True)
class CheckSpec:
    kind: str
    needs: frozenset[str]
    run: Checker


def checker(h: History, scenario: Scenario | None = None) -> tuple[list[Anomaly], list[str]]:
    """Every anomaly in ``h`` and the kinds that could not be checked (their inputs were not recorded)."""
    found: list[Anomaly] = []
    unchecked: list[str] = []
    available = {"final", *h.recorded}
    for spec in CHECKS:
        if not spec.needs <= available:
            unchecked.append(spec.kind)
            continue
        found += spec.run(h, scenario)
    if scenario is not None and scenario.invariants:  # the scenario's own rules (final state only)
        found += check_invariants(h, scenario)
    return [_with_faults(h, a) for a in found], unchecked


def _with_faults(h: History, a: Anomaly) -> Anomaly:
    """``a`` with the crashes and lost replies that concern its job appended to its because-sentence: a
    fault is part of the explanation ("W1 crashed at step 12 holding job 1; its lock lapsed at step 13")."""
    notes = []
    involved = list(a.steps)
    for e in h.executions:
        if e.crashed is None or e.job != a.job:
            continue
        note = f"{e.actor} crashed at step {e.crashed} holding job {e.job}"
        crash = h.steps[e.crashed - 1]
        lapse = next((s for s in h.steps[e.crashed:] if s.kind == "clock" and s.actor == crash.actor
                      and s.keys and s.keys[0] == f"{e.job}:lock"), None)
        if lapse is not None:
            cleared = any(isinstance(x, LockChanged) for x in lapse.effects) or lapse.reply == 1
            note += (f"; its lock lapsed at step {lapse.index}" if cleared
                     else f"; its lock was already gone when its TTL ran out (step {lapse.index})")
            involved.append(lapse.index)
        restarted = next((s for s in h.steps[e.crashed:] if s.actor == crash.actor and s.kind != "clock"), None)
        if restarted is not None:
            note += f"; it restarted as {crash.actor} (step {restarted.index})"
        involved.append(e.crashed)
        notes.append(note)
    for s in h.steps:
        concerns = a.job in s.args or any(k == a.job or k.startswith(f"{a.job}:") for k in s.keys)
        if s.outcome == "info" and concerns:
            notes.append(f"{s.actor}'s {s.op} at step {s.index} lost its reply "
                         f"({'it had run' if s.applied else 'it never reached the server'})")
            involved.append(s.index)
    if not notes:
        return a
    return Anomaly(a.kind, a.job, a.because + "; " + "; ".join(notes), tuple(sorted(set(involved))))


def check(h: History, scenario: Scenario | None = None, *, kinds: Sequence[str] | None = None) -> list[Anomaly]:
    """Every anomaly in ``h``, in a stable order (check, then job). With ``kinds``, only those checks;
    raises :class:`CheckInputMissing` when one of them needs an input the history did not record."""
    if kinds is None:
        return checker(h, scenario)[0]
    available = {"final", *h.recorded}
    out: list[Anomaly] = []
    for spec in CHECKS:
        if spec.kind not in kinds:
            continue
        if not spec.needs <= available:
            missing = ", ".join(sorted(spec.needs - available))
            raise CheckInputMissing(f"{spec.kind} needs {missing}, which this history did not record")
        out += spec.run(h, scenario)
    if scenario is not None and any(i.kind in kinds for i in scenario.invariants):
        out += [a for a in check_invariants(h, scenario) if a.kind in kinds]
    return out


class CheckInputMissing(ValueError):
    """A check was asked for whose input (the per-step effects) the history did not record."""


# -- helpers ----------------------------------------------------------------------------------------------


def _describe(effect: _Effect) -> str:
    if isinstance(effect, Placed):
        return f"put it in {effect.place}"
    if isinstance(effect, Removed):
        return f"took it out of {effect.place}"
    if isinstance(effect, Marked):
        return "marked it stalled"
    if isinstance(effect, Unmarked):
        return "took it out of stalled"
    if isinstance(effect, LockChanged):
        return "cleared the lock" if effect.after is None else f"set the lock to {effect.after}"
    if isinstance(effect, HashCreated):
        return "created its hash"
    if isinstance(effect, HashDeleted):
        return "deleted its hash"
    return str(effect)


def _ref(step: Step | None) -> str:
    if step is None:
        return "in the initial state"
    return f"{step.actor} step {step.index}, {step.op}"


def _copies(h: History, job: str) -> list[tuple[str, Step | None]]:
    """The copies of ``job`` held at the end, each with the step that placed it (``None``: the initial
    state). A removal takes the oldest copy, as the queue's consumers do (FIFO)."""
    final = list(h.final.placements.get(job, h.final.others.get(job, [])))
    placed: dict[str, int] = {}
    removed: dict[str, int] = {}
    for s in h.steps:
        for e in s.effects:
            if isinstance(e, Placed) and e.job == job:
                placed[e.place] = placed.get(e.place, 0) + e.count
            elif isinstance(e, Removed) and e.job == job:
                removed[e.place] = removed.get(e.place, 0) + e.count
    queues: dict[str, deque[Step | None]] = {}
    for place in set(final) | set(placed):
        initial = final.count(place) - placed.get(place, 0) + removed.get(place, 0)
        queues[place] = deque([None] * max(0, initial))
    for s in h.steps:
        for e in s.effects:
            if isinstance(e, Placed) and e.job == job:
                queues[e.place].extend([s] * e.count)
            elif isinstance(e, Removed) and e.job == job:
                q = queues.setdefault(e.place, deque())
                for _ in range(min(e.count, len(q))):
                    q.popleft()
    out: list[tuple[str, Step | None]] = []
    for place in dict.fromkeys((*PLACES, *final)):  # the queue's places, then a scenario's own (places:)
        q = queues.get(place, deque())
        want = final.count(place)
        items: list[Step | None] = list(q)[-want:] if want else []
        pad: list[Step | None] = [None] * (want - len(items))
        items = pad + items
        out += [(place, s) for s in items]
    return out


def _window(h: History, inner: Step, outer_actor: str) -> tuple[Step | None, Step | None]:
    """``outer_actor``'s last step before ``inner`` and first after it, when both are commands of one split
    script run."""
    before = next((s for s in reversed(h.steps[: inner.index - 1]) if s.actor == outer_actor), None)
    after = next((s for s in h.steps[inner.index:] if s.actor == outer_actor), None)
    if before and after and before.kind == after.kind == "command":
        same = before.run == after.run if before.run is not None else before.note == after.note
        if same:
            return before, after
    return None, None


def _incarnation_steps(h: History, job: str) -> list[int]:
    """Steps at which an add script created ``job``'s hash (each begins a new incarnation): the step's
    ``script`` — an emqlab producer's EVALSHA, a Python actor's EVALSHA or EVAL, or a command of a split
    add — is one of :data:`ADD_SCRIPTS`."""
    return [s.index for s in h.steps
            if ADD_SCRIPTS.intersection(s.scripts) and any(isinstance(e, HashCreated) and e.job == job
                                                           for e in s.effects)]


def _same_job(h: History, job: str, a: int, b: int) -> bool:
    """Steps ``a`` and ``b`` (a ≤ b) see the same incarnation of ``job``."""
    return not any(a < i <= b for i in _incarnation_steps(h, job))


def _finish_steps(h: History, e: Execution) -> list[Step]:
    """The steps of ``e``'s actor from its start to its end (its processing and its finish)."""
    end = e.end if e.end is not None else len(h.steps)
    return [s for s in h.steps if e.start < s.index <= end and s.actor == e.actor]


def _current(h: History, e: Execution) -> bool:
    """``e`` ran the incarnation of its job that exists at the end of the run (no add came after its start)."""
    return _same_job(h, e.job, e.start, len(h.steps))


def _finished_by(h: History, e: Execution) -> tuple[Step, bool] | None:
    """The step at which ``e``'s finish filed its job as done, and whether it deleted the job doing so: it
    put the job in completed or failed, or — a successful finish with keepJobs 0 (removeOnComplete,
    removeOnFail) — deleted its hash. A successful finish is a finish whether or not the hash survives."""
    for s in _finish_steps(h, e):
        for x in s.effects:
            if isinstance(x, Placed) and x.job == e.job and x.place in FINAL_PLACES:
                return s, False
            if isinstance(x, HashDeleted) and x.job == e.job and e.released and e.end is not None:
                return s, True
    return None


def _placed_by(h: History, e: Execution, places: Sequence[str]) -> Step | None:
    """The first step of ``e``'s finish that placed its job in one of ``places``."""
    for s in _finish_steps(h, e):
        if any(isinstance(x, Placed) and x.job == e.job and x.place in places for x in s.effects):
            return s
    return None


# -- the checks ----------------------------------------------------------------------------------------------


def double_placement(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    jobs = {**h.final.others, **h.final.placements}
    for job, places in sorted(jobs.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if len(places) < 2:  # (the final state's places: the queue's, and a scenario's own)
            continue
        copies = _copies(h, job)
        copies.sort(key=lambda ps: ps[1].index if ps[1] else 0)
        (p1, s1), (p2, s2) = copies[0], copies[-1]
        sentence = f"job {job} is in {p1} ({_ref(s1)}) and in {p2} ({_ref(s2)})"
        involved = [s.index for _, s in copies if s]
        because = ""
        # Which placement happened inside the other actor's split run?
        for inner, outer in ((s1, s2), (s2, s1)):
            if inner is None or outer is None or inner.actor == outer.actor:
                continue
            before, after = _window(h, inner, outer.actor)
            if before and after:
                effects = before.effects_on(job)
                if effects:
                    did = f"{outer.actor} {_describe(effects[0])} (step {before.index}, {before.op})"
                elif before.read_only:
                    did = f"{outer.actor}'s read (step {before.index}, {before.op})"
                else:
                    did = f"{outer.actor}'s step {before.index} ({before.op}, which did not change job {job})"
                what = after.note or "script"
                inside = (f"{outer.actor}'s transaction" if what == "transaction" else
                          f"{outer.actor}'s sequence of separate commands" if what == "commands" else
                          f"{outer.actor}'s split {what}")
                because = (f" because {inner.actor} ran after {did} and before {outer.actor}'s next command"
                           f" (step {after.index}, {after.op}), inside {inside}")
                lapses = [s for s in h.steps[before.index:inner.index - 1]
                          if s.kind == "clock" and any(isinstance(e, LockChanged) and e.job == job for e in s.effects)]
                if lapses:
                    because += f"; {outer.actor}'s lease had lapsed in between (step {lapses[0].index})"
                    involved.append(lapses[0].index)
                involved += [before.index, after.index]
                break
        if not because and s1 is not None and s2 is not None and s1.actor != s2.actor:
            because = (f" because {s2.actor}'s {s2.op} (step {s2.index}) did not check that the job had"
                       f" already been placed in {p1}")
        elif not because and s1 is not None and s2 is not None and s1 is not s2:
            because = (f" because {s2.actor}'s {s2.op} (step {s2.index}) placed it again after its own"
                       f" {s1.op} (step {s1.index})")
        out.append(Anomaly("double-placement", job, sentence + because, tuple(sorted(set(involved)))))
    return out


def _unplaced(h: History) -> list[tuple[str, bool, list[Execution]]]:
    """Jobs whose hash exists at the end in no structure: (job, the hash lacks its payload, the executions
    that finished the job). lost-job and orphan-data split this set between them. A finish that succeeded by
    putting the job back for a retry did not finish it (:func:`_finished_by`)."""
    out = []
    for job, places in sorted(h.final.placements.items()):
        info = h.final.jobs.get(job, {})
        if places or not info.get("exists"):
            continue
        done = [e for e in h.executions if e.job == job and _finished_by(h, e) is not None and _current(h, e)]
        out.append((job, not info.get("payload", True), done))
    return out


def lost_job(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    for job, fragment, done in _unplaced(h):
        if fragment or done:
            continue  # left-over data, not a lost job
        removed = None
        gone: Removed | None = None
        for s in h.steps:
            for e in s.effects:
                if isinstance(e, Removed) and e.job == job:
                    removed, gone = s, e
        because = f"job {job} exists but is in no list or set"
        own = next((p for p in scenario.places if gone is not None and p.key == gone.place), None) \
            if scenario is not None else None
        if removed is not None and own is not None and own.index is not None and own.index in removed.keys \
                and own.key not in removed.keys:
            # (the job is still in the list: only the index that leads a poll to it is gone)
            because = (f"job {job} exists but no poll can find it: {_ref(removed)} took {own.member} out of the"
                       f" index {own.index} while the job was in {own.key}, and nothing put it back")
        elif removed is not None and own is not None:
            because += f": {_ref(removed)} took it out of {own.key} and nothing put it back"
        elif removed is not None:
            because += f": {_ref(removed)} took it out and nothing put it back"
        out.append(Anomaly("lost-job", job, because, (removed.index,) if removed else ()))
    # a job wiped with the server's data (a restart without persistence) is lost too, hash and all
    for s in h.steps:
        if s.kind != "fault":
            continue
        for e in s.effects:
            if isinstance(e, HashDeleted) and not h.final.jobs.get(e.job, {}).get("exists", False) and \
                    not any(a.job == e.job for a in out):
                places = sorted({x.place for x in s.effects if isinstance(x, Removed) and x.job == e.job})
                where = f" and its place in {', '.join(places)}" if places else ""
                out.append(Anomaly("lost-job", e.job, f"job {e.job} was lost with the server's data (step"
                                   f" {s.index}, {s.op}: no persistence): its hash{where} are gone and nothing"
                                   " put it back", (s.index,)))
    return out


def orphan_data(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    for job, fragment, done in _unplaced(h):
        if not fragment and not done:
            continue  # a lost job, not left-over data
        wrote = [s for s in h.steps if any(isinstance(e, HashCreated) and e.job == job for e in s.effects)]
        if fragment:
            because = f"job {job}'s hash is a fragment without its payload and is in no list or set"
            if wrote:
                because += f": {_ref(wrote[-1])} wrote into the job after it had been deleted"
        else:
            because = (f"job {job}'s hash is in no list or set although {done[0].actor} finished it"
                       f" (step {done[0].end})")
        out.append(Anomaly("orphan-data", job, because, (wrote[-1].index,) if wrote else ()))
    for job, places in sorted(h.final.placements.items(), key=lambda kv: (len(kv[0]), kv[0])):
        info = h.final.jobs.get(job, {})
        if not places or not info.get("exists") or info.get("payload", True):
            continue  # (a fragment in no structure is reported above)
        wrote = [s for s in h.steps if any(isinstance(e, HashCreated) and e.job == job for e in s.effects)]
        where = ", ".join(dict.fromkeys(places))
        because = f"job {job}'s hash in {where} is a fragment without its payload"
        if wrote:
            because += f": {_ref(wrote[-1])} wrote into the job after it had been deleted"
        out.append(Anomaly("orphan-data", job, because, (wrote[-1].index,) if wrote else ()))
    return out


def phantom_job(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    ids = {j: p for j, p in h.final.placements.items() if p and not h.final.jobs.get(j, {}).get("exists")}
    ids.update({j: p for j, p in h.final.others.items() if p})
    for job, places in sorted(ids.items(), key=lambda kv: (len(kv[0]), kv[0])):
        copies = [(p, s) for p, s in _copies(h, job) if p in places]
        where = ", ".join(dict.fromkeys(places))
        placed = next((s for _, s in reversed(copies) if s is not None), None)
        deleted = next((s for s in reversed(h.steps)
                        if any(isinstance(e, HashDeleted) and e.job == job for e in s.effects)), None)
        because = f"job {job} is in {where} but has no job hash"
        steps: tuple[int, ...] = ()
        if placed is not None and (deleted is None or placed.index > deleted.index):
            because += f": {_ref(placed)} placed the id after the job had been removed"
            steps = (placed.index,) if deleted is None else (deleted.index, placed.index)
        elif deleted is not None:  # (the id was placed first, or held from the start: the delete left it)
            since = f"{_ref(placed)} put it there" if placed is not None else "it was there from the start"
            because += (f": {_ref(deleted)} deleted the job while its id was still in {where} ({since}),"
                        " and nothing took the id out")
            steps = (placed.index, deleted.index) if placed is not None else (deleted.index,)
        out.append(Anomaly("phantom-job", job, because, steps))
    return out


def stuck_active(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    recovery = _recovers(h)
    for job, places in sorted(h.final.placements.items()):
        if "active" not in places or h.final.locks.get(job):
            continue
        if any(e.job == job and e.open for e in h.executions):
            continue
        if recovery:
            continue  # the recovery role marks every lock-less job in active and moves it back the next time
        ended = [e for e in h.executions if e.job == job and e.end is not None]
        last = max(ended, key=lambda e: e.end or 0) if ended else None
        because = f"job {job} is in active with no lock and no worker holding it after every actor ended"
        if last is not None and last.end is not None:
            because += f" ({last.actor}'s finish at step {last.end} answered {last.result})"
        out.append(Anomaly("stuck-active", job, because, (last.end,) if last and last.end else ()))
    return out


#: the script of the recovery role: a pass marks every lock-less job in active stalled and moves the jobs a
#: pass before marked, and still finds lock-less, back to wait (BullMQ's stalled-job check)
RECOVERY_SCRIPT = "moveStalledJobsToWait"


def _recovers(h: History) -> bool:
    """Whether an actor plays the recovery role in this run: a step of it ran :data:`RECOVERY_SCRIPT` (the
    built-in sweep, or a Python actor's EVALSHA of it). The role is periodic (BullMQ's stalled-job check runs
    on a timer), so a lock-less job in active at the end is one its next pass finds, whenever this run's
    pass came."""
    return any(RECOVERY_SCRIPT in (st.scripts or (st.script,)) for st in h.steps)


def stolen_lock(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    for s in h.steps:
        if s.kind in ("clock", "fault"):  # a lapse, or a lock lost with the server's data: nobody stole it
            continue
        for e in s.effects:
            if not isinstance(e, LockChanged) or e.before is None:
                continue
            ex = _owner(h, scenario, e.job, e.before)
            if ex is None or ex.actor == s.actor:
                continue
            if ex.start > s.index or (ex.end is not None and ex.end < s.index):
                continue
            owner = ex.actor
            action = "deleted" if e.after is None else f"overwrote (with {e.after})"
            until = f"until step {ex.end}" if ex.end is not None else "to the end of the run"
            since = f"since step {ex.start}" if ex.start else "from the start"
            out.append(Anomaly(
                "stolen-lock", e.job,
                f"{s.actor} {action} {owner}'s lock on job {e.job} (step {s.index}, {s.op}) while {owner}"
                f" still held the job ({since}, {until})",
                (s.index,)))
    return out


def _owner(h: History, scenario: Scenario | None, job: str, token: str) -> Execution | None:
    """The execution whose lock ``token`` on ``job`` is: of the executions under that token, the one that took
    it — its start step set the lock to it, or it held the job from the start and the scenario's ``locks:``
    gives the lock to its actor — else the first. Another execution under the same token (a copied token, as
    in shared-token) holds the lock without owning it, whatever order the actors are declared in."""
    holders = [x for x in h.executions if x.token == token and x.job == job]
    for x in holders:
        if x.start == 0 and scenario is not None and scenario.locks.get(job) == x.actor:
            return x
        if 0 < x.start <= len(h.steps) and any(isinstance(c, LockChanged) and c.job == job and c.after == token
                                               for c in h.steps[x.start - 1].effects):
            return x
    return holders[0] if holders else None


def duplicate_execution(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    by_job: dict[str, list[Execution]] = {}
    for e in h.executions:
        by_job.setdefault(e.job, []).append(e)
    for job, runs in sorted(by_job.items()):
        runs = sorted(runs, key=lambda e: e.start)
        for i, later in enumerate(runs):
            for earlier in reversed(runs[:i]):
                if not _same_job(h, job, earlier.start, later.start):
                    continue
                retry = _placed_by(h, earlier, WAITING) if earlier.released else None
                if retry is not None and retry.index < later.start:
                    continue  # a legitimate retry: the earlier finish handed the job on
                since = f"since step {earlier.start}" if earlier.start else "from the start"
                finished = _finished_by(h, earlier)
                # (<=: a finish that fetches the next job files this one before it takes the next, in one step)
                if finished is not None and finished[0].index <= later.start:
                    done, deleted = finished
                    if deleted:
                        because = (f"{later.actor} started job {job} (step {later.start}) after {earlier.actor} had"
                                   f" already finished it: its finish succeeded and deleted the job (step"
                                   f" {done.index}, {done.op}; keepJobs 0)")
                    else:
                        verb = "completed" if any(isinstance(x, Placed) and x.job == job and x.place == "completed"
                                                  for x in done.effects) else "failed"
                        because = (f"{later.actor} started job {job} (step {later.start}) after {earlier.actor} had"
                                   f" already {verb} it (step {done.index})")
                        if done.index == later.start:  # (one fetch_next finish: it filed the job, then took it)
                            because = (f"{later.actor} started job {job} again (step {later.start}): its own"
                                       f" finish had just {verb} it in that step and fetched it as the next job")
                    steps: tuple[int, ...] = (later.start, done.index)
                elif earlier.end is not None and earlier.end <= later.start and earlier.outcome is not None \
                        and earlier.outcome.refused:
                    because = (f"{later.actor} started job {job} (step {later.start}) although {earlier.actor} had"
                               f" already run it ({since}); {earlier.actor}'s finish was refused at step"
                               f" {earlier.end} ({earlier.result}: {earlier.outcome.meaning})")
                    steps = (later.start, earlier.end)
                elif later.start == earlier.start:  # both before the first step: the history orders neither
                    because = (f"{earlier.actor} and {later.actor} both ran job {job} from the start: two"
                               " executions of one job, neither released when the run began")
                    steps = ()
                else:
                    because = (f"{later.actor} started job {job} (step {later.start}) while {earlier.actor}'s"
                               f" execution ({since}) had not released it")
                    steps = (later.start,)
                out.append(Anomaly("duplicate-execution", job, because, steps))
                break
    return out


def metrics_drift(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    if not h.final.metrics_on:
        return []
    out = []
    for target in FINAL_PLACES:
        reached = {e.job for s in h.steps for e in s.effects if isinstance(e, Placed) and e.place == target}
        count = h.final.metrics.get(target) or 0
        if count != len(reached):
            out.append(Anomaly(
                "metrics-drift", ",".join(sorted(reached)) or "-",
                f"metrics:{target} counts {count} but {len(reached)} job(s) reached {target}", ()))
    return out


def attempts_overrun(h: History, scenario: Scenario | None) -> list[Anomaly]:
    if scenario is None:
        return []
    out = []
    for job, info in sorted(h.final.jobs.items()):
        spec = scenario.jobs.get(job)
        ceiling = spec.attempts if spec else 0
        if not ceiling:
            continue
        made = int(info.get("atm", 0) or 0)
        if made > ceiling:
            out.append(Anomaly("attempts-overrun", job,
                               f"job {job} has {made} attempts made, over its ceiling of {ceiling}", ()))
    return out


def work_thrown_away(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    for e in h.executions:
        if e.end is None or e.outcome is None or not e.outcome.refused:
            continue
        if any(p in FINAL_PLACES for p in h.final.placements.get(e.job, [])):
            continue  # someone's result stands
        if any(x.job == e.job and x is not e and _finished_by(h, x) is not None
               and _same_job(h, e.job, min(x.start, e.start), max(x.start, e.start)) for x in h.executions):
            continue  # another run of this job finished it (with keepJobs 0, its result went with the job)
        touched = [s for s in h.steps
                   if e.start < s.index <= e.end and s.actor != e.actor
                   and any(isinstance(x, LockChanged) and x.job == e.job and x.before == e.token for x in s.effects)]
        if touched:
            continue  # its lock lapsed or was taken: the refusal is the protocol working
        # (a queue that keeps no lock key, such as asynq's lease set, shows no lock effect: the sentence then
        # does not speak of a lock, and names the actor that moved the job away under the execution)
        has_lock = e.job in h.final.locks or (scenario is not None and e.job in scenario.locks) or any(
            isinstance(x, LockChanged) and x.job == e.job for s in h.steps for x in s.effects)
        claim = f"no one had touched its lock {e.token}" if has_lock else \
            f"nothing lapsed or took its claim on job {e.job} (this queue keeps no lock for it)"
        moved = next(((s, x) for s in h.steps if e.start < s.index < e.end and s.actor != e.actor
                      for x in s.effects if isinstance(x, Removed) and x.job == e.job), None)
        away = f"; {moved[0].actor} took job {e.job} out of {moved[1].place} (step {moved[0].index}) while" \
            f" {e.actor} ran it" if moved else ""
        out.append(Anomaly(
            "work-thrown-away", e.job,
            f"{e.actor}'s finish of job {e.job} was refused (step {e.end}: {e.result}, {e.outcome.meaning})"
            f" although {claim}{away}, and no result of the job stands: {e.actor}'s work was thrown away",
            (e.end, *((moved[0].index,) if moved else ()))))
    return out


def non_owner_finish(h: History, scenario: Scenario | None = None) -> list[Anomaly]:
    out = []
    for e in h.executions:
        if not e.released or e.end is None or not e.token or e.token == "0":
            continue  # (token "0": the caller said it holds no lock, and the finish skips the check)
        end = next((st for st in h.steps if st.index == e.end), None)
        if end is None:
            continue
        first = min((st.index for st in h.steps if st.actor == end.actor and end.run is not None
                     and st.run == end.run), default=end.index)
        # another worker took the job's lock after this execution began and before its finish did: that
        # acquisition (a fetch, into active) and the finish (out of active) touch the same keys, so every
        # interleaving of the run has them in this order. (A lock that merely lapsed is no other owner: the
        # lapse and a finish that never reads the lock may come in either order, with the same outcome.)
        taken = next(((st, x) for st in h.steps if e.start < st.index < first for x in st.effects
                      if isinstance(x, LockChanged) and x.job == e.job and x.after not in (None, e.token)), None)
        if taken is None:
            continue
        st, x = taken
        out.append(Anomaly(
            "non-owner-finish", e.job,
            f"{e.actor}'s finish of job {e.job} was accepted (step {e.end}: {e.result}) although {st.actor} had"
            f" taken the job's lock ({x.after}, step {st.index}) before it began (step {first}): a finish must"
            f" check that the lock is still the caller's ({e.token})",
            (st.index, e.end)))
    return out


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("double-placement", frozenset({"final"}), double_placement),
    CheckSpec("lost-job", frozenset({"final"}), lost_job),
    CheckSpec("stolen-lock", frozenset({"effects"}), stolen_lock),
    CheckSpec("duplicate-execution", frozenset({"effects"}), duplicate_execution),
    CheckSpec("metrics-drift", frozenset({"effects"}), metrics_drift),
    CheckSpec("attempts-overrun", frozenset({"final"}), attempts_overrun),
    CheckSpec("orphan-data", frozenset({"final"}), orphan_data),
    CheckSpec("phantom-job", frozenset({"final"}), phantom_job),
    CheckSpec("stuck-active", frozenset({"final"}), stuck_active),
    CheckSpec("work-thrown-away", frozenset({"effects"}), work_thrown_away),
    CheckSpec("non-owner-finish", frozenset({"effects", "lock-changes"}), non_owner_finish),
)

KINDS: tuple[str, ...] = tuple(c.kind for c in CHECKS)

__all__ = ["Anomaly", "CHECKS", "CheckInputMissing", "KINDS", "check", "checker"]
