"""The one home of assignment 1, "Find a schedule that double-places a job": its case (``stalled-finish``)
and the hidden variants the grader builds from it, the arguments its answer functions are probed at, and its
three graders.

``schedule_for`` must double-place on every case of :data:`A1_SCHEDULE_CASES`, ``gap_of`` must name the
window the grader finds there (by replaying the sweep after each of W1's commands: :func:`_window`), and
``runs_with_anomaly`` must count right at every probe of :data:`A1_COUNT_PROBES`: a schedule string, a pair
or a number copied from one run fits that run only. No expected answer is stored here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from emqlab.teaching.assignments.base import Assignment, GradedCell, Verdict, conn, direction, shared

A1_SCENARIO = "stalled-finish"


@dataclass(frozen=True)
class A1Case:
    """A case of assignment 1: ``stalled-finish`` itself, or a variant of it the grader builds in memory
    (no shipped file). ``about`` says what differs, for feedback (never where the window is)."""

    name: str
    about: str
    #: the job W1 holds (and the sweep has marked)
    job: str = "1"
    #: W1 files the job in ``completed`` or, its handler having thrown, in ``failed`` (fewer checks first)
    finish: str = "completed"
    #: W1 asks how long its lock has left (PTTL, one round trip each) this many times before it finishes
    lease_checks: int = 0
    #: how many recovery sweeps run (S1, S2, …)
    sweeps: int = 1
    #: a lease actor (L1) lets W1's lock lapse at some step
    lapse: bool = False

    def scenario(self) -> Any:
        """The case's scenario, a modified copy of ``stalled-finish``."""
        from emqlab.engine.scenario import ActorSpec

        sc = copy.deepcopy(_a1_base())
        if self.job != "1":
            spec = sc.jobs.pop("1")
            spec.id = self.job
            sc.jobs = {self.job: spec, **sc.jobs}
            sc.state = {k: [self.job if x == "1" else x for x in v] if isinstance(v, list) else v
                        for k, v in sc.state.items()}
            sc.locks = {self.job if k == "1" else k: v for k, v in sc.locks.items()}
            sc.actor("W1").holds = self.job
        sc.actor("W1").finish = self.finish
        if self.finish == "failed":
            sc.actor("W1").value = "handler threw"
        sc.actors += [ActorSpec(id=f"S{i}", kind="sweep", max_stalled=1) for i in range(2, self.sweeps + 1)]
        if self.lapse:
            sc.actors.append(ActorSpec(id="L1", kind="lease", job=self.job))
        sc.name = f"{A1_SCENARIO} ({self.name})" if self.name != "assignment" else A1_SCENARIO
        sc.expect = {}
        return sc

    def factories(self) -> dict[str, Callable[..., Any]] | None:
        """A worker that checks its lease before the finish (``lease_checks``), else None (emqlab's own)."""
        if not self.lease_checks:
            return None
        checks = self.lease_checks

        def worker(ctx: Any, spec: Any) -> Any:
            from emqlab.engine.actors import Op
            from emqlab.engine.actors import worker as finish_worker

            for _ in range(checks):
                yield Op("command", "lease check", command=(b"PTTL", ctx.keys.lock(spec.holds).encode()),
                         section="lease check")
            yield from finish_worker(ctx, spec)

        return {"worker": worker}

    def runner(self, mode: str = "split") -> Any:
        from emqlab.explore.checked import Runner

        return Runner(self.scenario(), mode, conn(), factories=self.factories())

    def replay(self, schedule: str, mode: str = "split") -> Any:
        """The history of ``schedule`` on this case (raises :class:`emqlab.protocol.schedules.ScheduleError`)."""
        from emqlab.explore.checked import parse_schedule

        with self.runner(mode) as r:
            return r.run(parse_schedule(schedule, [a.id for a in r.scenario.actors]))

    def solo(self) -> Any:
        """W1's split finish run alone to its end, then the sweep: the history ``schedule_for`` is given."""
        return _a1_solo(self)


@lru_cache(maxsize=1)
def _a1_base() -> Any:
    from emqlab.engine.scenario import load

    return load(A1_SCENARIO)


@shared(maxsize=16)
def _a1_solo(case: A1Case) -> Any:
    with case.runner("split") as r:
        return r.run()


#: Assignment 1's case and the variants the grader builds from it. ``schedule_for`` must double-place on
#: :data:`A1_SCHEDULE_CASES`, ``runs_with_anomaly`` must count right on :data:`A1_COUNT_PROBES`: a schedule
#: string or a number copied from one run fits that run only.
A1_CASES: dict[str, A1Case] = {c.name: c for c in [
    A1Case("assignment", "the assignment's own case"),
    A1Case("another-job", "another job id: W1 holds and finishes job 7, not job 1", job="7"),
    A1Case("lease-checks", "W1 asks how long its lock has left (PTTL) before it finishes, so every "
                           "command of its finish comes later in the history", lease_checks=2),
    A1Case("failed", "W1's handler threw, so W1 files the job in failed: that branch of the finish runs fewer "
                     "checks before it writes", finish="failed"),
    A1Case("two-sweeps", "a second recovery sweep runs too", sweeps=2),
    A1Case("lease-lapse", "W1's lock can also lapse, its lease running out", lapse=True),
]}
A1_SCHEDULE_CASES = ("assignment", "another-job", "lease-checks", "failed")
#: (case, mode) at which ``runs_with_anomaly(scenario, mode)`` is checked; a case here needs no custom
#: worker (the student's function gets a Scenario, explored with emqlab's own actors)
A1_COUNT_PROBES: tuple[tuple[str, str], ...] = (("assignment", "atomic"), ("assignment", "split"),
                                                ("two-sweeps", "split"), ("two-sweeps", "atomic"),
                                                ("lease-lapse", "split"))


def probe_arguments(name: str, key: Sequence[Any]) -> tuple[Any, ...]:
    """The arguments an answer function ``name`` is called with at probe ``key`` (plain data: it crosses
    to the isolated run): assignment 1's functions get typed objects built from the case named in ``key``
    (the solo :class:`~emqlab.engine.history.History`; the :class:`~emqlab.engine.specs.Scenario` and a mode); the
    other functions get ``key`` itself."""
    if name in ("schedule_for", "gap_of"):
        return (A1_CASES[str(key[0])].solo(),)
    if name == "runs_with_anomaly":
        return (A1_CASES[str(key[0])].scenario(), str(key[1]))
    return tuple(key)


def _at(fn: Any, name: str, key: Sequence[Any]) -> Any:
    """``fn`` at probe ``key``: a function that came back from an isolated run is its table of values there
    (:class:`emqlab.teaching.sandbox.ProbedFunction`, called with the key), one from this process is called
    with :func:`probe_arguments`."""
    from emqlab.teaching.sandbox import ProbedFunction

    if isinstance(fn, ProbedFunction):
        return fn(*key)
    return fn(*probe_arguments(name, key))


def _a1_steps(h: Any, case_name: str) -> dict[str, int | None]:
    """Where the sweep ran, and W1's last step before and first step after the window (:func:`_window`),
    in a history of an a1 case."""
    _, opens, closes = _window(case_name)
    sweep = next((s.index for s in h.steps if s.actor.startswith("S")), None)
    w1 = [s.index for s in h.steps if s.actor == "W1"]
    return {"sweep": sweep, "opens": w1[opens - 1] if opens - 1 < len(w1) else None,
            "closes": w1[closes - 1] if closes - 1 < len(w1) else None}


def _a1_replay_verdict(case: A1Case, schedule: str) -> Verdict:
    """``schedule`` replayed on ``case`` (split) must leave its job in two places."""
    from emqlab.explore.checked import ScheduleError

    try:
        h = case.replay(schedule)
    except ScheduleError as e:
        actors = "W1 (the split finish, one step per command) and S1 (the sweep, one EVALSHA)"
        return Verdict(False, f"The schedule does not fit the scenario: {e}. The actors are {actors}.")
    found = next((x for x in h.findings if x.kind == "double-placement"), None)
    if found is not None:
        return Verdict(True, f"Replaying {h.schedule} with a split finish: {found.because}.")
    pos = _a1_steps(h, case.name)
    s, d, r = pos["sweep"], pos["opens"], pos["closes"]
    if s is None:
        why = "S1 never ran, so nothing raced W1's finish. Give S1 a step inside the schedule"
    elif d is not None and s < d:
        why = (f"S1 ran at step {s}, too early: W1 had not yet given up the job's lock, so the lock was still "
               "there and the sweep saw a live job and only marked it again. Look in W1's history for the "
               "command that deletes the lock, and let S1 run later")
    elif r is not None and s > r:
        why = (f"S1 ran at step {s}, too late: W1 had already taken the job out of the stalled set, so it was no "
               "longer marked and the sweep had nothing to recover. Let S1 run earlier")
    else:
        why = f"S1 ran at step {s}, but the job was not recovered"
    places = ", ".join(h.final["placements"].get(case.job, [])) or "no list"
    return Verdict(False, f"Replaying {h.schedule} (split) leaves job {case.job} in {places} only: {why}.")


def grade_a1_schedule(schedule_for: Any) -> Verdict:
    """``schedule_for(history)`` must return, for W1's solo history of each case of
    :data:`A1_SCHEDULE_CASES` (the assignment's and hidden variants), a schedule that double-places there."""
    if isinstance(schedule_for, str):
        return Verdict(False, "schedule_for must be a function that reads W1's solo history and returns a schedule "
                              "string, not a string: one schedule fits one run only, and the grader calls your "
                              "function on other runs too.")
    if not callable(schedule_for):
        return Verdict(False, "schedule_for must be a function of W1's solo history (a History) returning a "
                              "schedule string such as 'v1:W1*3.S1'.")
    for name in A1_SCHEDULE_CASES:
        case = A1_CASES[name]
        where = "On the assignment's case" if name == "assignment" else f"On a hidden variant ({case.about})"
        try:
            schedule = _at(schedule_for, "schedule_for", (name,))
        except NotImplementedError:
            return Verdict(False, "schedule_for still has the stub ('# YOUR CODE HERE' / raise "
                                  "NotImplementedError()): write its body in the answer cell 'a1_schedule_answer'.")
        except Exception as e:  # noqa: BLE001 - the student's function may raise anything
            return Verdict(False, f"{where}, schedule_for raised {type(e).__name__}: {str(e)[:200]}. It must work "
                                  "on any solo history of this finish: look the steps up by what they are (the "
                                  "actor, the command, its keys), not by a position or a name you saw once.")
        if not isinstance(schedule, str):
            return Verdict(False, f"{where}, schedule_for returned a {type(schedule).__name__}; it must return a "
                                  "schedule string such as 'v1:W1*3.S1'.")
        v = _a1_replay_verdict(case, schedule)
        if not v.passed:
            if name == "assignment":
                return v
            return Verdict(False, f"Your schedule fits the assignment's case, but a hidden check gives "
                                  f"schedule_for another run. {where}, {v.feedback[0].lower()}{v.feedback[1:]} "
                                  "A schedule string copied from one run (or a step number written into the "
                                  "function) only fits that run: compute the step from the history you are given.")
    return Verdict(True, "On the assignment's case and on every hidden variant (another job id, extra round trips "
                         "before the finish, the failed branch), your schedule_for puts S1 inside the window and "
                         "the job lands in two places.")


def command_line(step: Any) -> str:
    """A step as the history shows its command: the name and its arguments (keys relative to the queue),
    e.g. ``'GET 1:lock'``."""
    return " ".join([str(step.op), *(str(a) for a in step.args)])


@shared(maxsize=16)
def _window(case_name: str) -> tuple[tuple[str, ...], int, int]:
    """W1's commands on ``case_name`` (split, as :meth:`A1Case.solo` runs them) and the window the grader
    finds by replaying the sweep after each of them: (W1's command lines, the last W1 step before the
    first double-placing sweep, the first W1 step after the last one), steps counted from 1. Computed at
    grade time, never stored. Raises ``ValueError`` when no position double-places."""
    from emqlab.explore.checked import parse_schedule

    case = A1_CASES[case_name]
    lines = tuple(command_line(s) for s in case.solo().steps if s.actor == "W1")
    hits = []
    with case.runner("split") as r:  # one runner, reset before each replay (as an exploration does)
        actors = [a.id for a in r.scenario.actors]
        for k in range(len(lines) + 1):
            r.reset()
            h = r.run(parse_schedule(f"v1:W1*{k}.S1" if k else "v1:S1", actors))
            if any(x.kind == "double-placement" for x in h.findings):
                hits.append(k)
    if not hits:
        raise ValueError(f"{case_name}: no sweep position double-places")
    return lines, hits[0], hits[-1] + 1


def _tokens(line: Any) -> list[str]:
    parts = str(line).split()
    return [parts[0].upper(), *parts[1:]] if parts else []


def _gap_verdict(case_name: str, gap: Any) -> Verdict | None:
    """Feedback when ``gap`` is not the window of ``case_name``, else None."""
    if not isinstance(gap, (tuple, list)) or len(gap) != 2 or not all(isinstance(x, str) for x in gap):
        return Verdict(False, "gap_of must return a pair of W1's commands as the history shows them, each its name "
                              "and arguments, e.g. ('GET 1:lock', 'LPOS active 1').")
    lines, opens, closes = _window(case_name)
    want = [_tokens(lines[opens - 1]), _tokens(lines[closes - 1])]
    got = [_tokens(x) for x in gap]
    if got == want:
        return None
    if [g[:1] for g in got] == [w[:1] for w in want]:
        return Verdict(False, f"gap_of returns {tuple(gap)!r}: the right commands, but not with their arguments as "
                              "this run's history shows them (the job's id and the keys differ from run to run: read "
                              "them from the steps you are given).")
    where = {tuple(_tokens(x)): i + 1 for i, x in enumerate(lines)}
    at = [where.get(tuple(g)) for g in got]
    problems = []
    if got[0] != want[0]:
        if at[0] is not None and at[0] > opens:
            problems.append(f"the window opens before {got[0][0]}: the sweep recovers a job that is active, marked "
                            "and *unlocked*, so look for the command after which W1's job has no lock any more")
        else:
            problems.append(f"the window does not open after {got[0][0] if got[0] else 'an empty command'}: the "
                            "sweep recovers a job that is active, marked and *unlocked*, so look for the command "
                            "after which W1's job has no lock any more")
    if got[1] != want[1]:
        if at[1] is not None and at[1] > closes:
            problems.append(f"it closes earlier than {got[1][0]}: the sweep stops treating the job as a recovery "
                            "candidate as soon as one of its three conditions is gone; which earlier command "
                            "removes one?")
        else:
            problems.append(f"it does not close at {got[1][0] if got[1] else 'an empty command'}: look for the first "
                            "command after the window opens that takes away one of the sweep's three conditions "
                            "(active, marked, unlocked)")
    if at[0] is None or at[1] is None:
        problems.append("(each command must be one of W1's, written as the history shows it)")
    text = "; ".join(problems)
    return Verdict(False, f"gap_of returns {tuple(gap)!r}: {text}" + ("" if text.endswith("?") else "."))


def grade_a1_gap(gap_of: Any) -> Verdict:
    """``gap_of(history)`` must return, for W1's solo history of each case of :data:`A1_SCHEDULE_CASES`, the
    pair of W1's commands (name and arguments) right before and right after the positions at which the
    sweep double-places, which the grader finds by replaying every position."""
    if isinstance(gap_of, (tuple, list, str)):
        return Verdict(False, "gap_of must be a function that reads W1's solo history and returns the pair of "
                              "commands, not the pair itself: the grader calls it on other runs too.")
    if not callable(gap_of):
        return Verdict(False, "gap_of must be a function of W1's solo history (a History) returning a pair of "
                              "W1's commands, e.g. ('GET 1:lock', 'LPOS active 1').")
    for name in A1_SCHEDULE_CASES:
        case = A1_CASES[name]
        where = "On the assignment's case" if name == "assignment" else f"On a hidden variant ({case.about})"
        try:
            gap = _at(gap_of, "gap_of", (name,))
        except NotImplementedError:
            return Verdict(False, "gap_of still has the stub ('# YOUR CODE HERE' / raise NotImplementedError()): "
                                  "write its body in the answer cell 'a1_gap_answer'.")
        except Exception as e:  # noqa: BLE001 - the student's function may raise anything
            return Verdict(False, f"{where}, gap_of raised {type(e).__name__}: {str(e)[:200]}. Look the steps up by "
                                  "what they are (the actor, the command, its keys), not by a position.")
        bad = _gap_verdict(name, gap)
        if bad is not None:
            if name == "assignment":
                return bad
            return Verdict(False, f"Your pair fits the assignment's case, but a hidden check gives gap_of another "
                                  f"run. {where}, {bad.feedback[0].lower()}{bad.feedback[1:]}")
    return Verdict(True, "Right, on the assignment's case and on every hidden variant: the window opens when the "
                         "finish gives up the job's lock while the job is still marked and active, and closes "
                         "when it takes one of those away.")


@shared(maxsize=16)
def _explore_counts(case: str, mode: str) -> tuple[int, int]:
    """(runs explored, the sum of ``runs_with`` over the anomaly kinds) of an exhaustive exploration of an
    a1 case: the grader's own reference, computed, never stored."""
    from emqlab.explore import explore

    rep = explore(A1_CASES[case].scenario(), mode, conn=conn())
    return rep.explored, sum(rep.runs_with.values())


def grade_a1_atomic(ATOMIC_RUNS_WITH_ANOMALY: Any, runs_with_anomaly: Any) -> Verdict:  # noqa: N803
    """ATOMIC_RUNS_WITH_ANOMALY is the count of the assignment's atomic exploration; ``runs_with_anomaly``
    (scenario, mode) must count right at every probe of :data:`A1_COUNT_PROBES` (hidden variants, both
    modes), so a copied or guessed number fails."""
    explored, bad = _explore_counts("assignment", "atomic")
    if isinstance(ATOMIC_RUNS_WITH_ANOMALY, bool) or not isinstance(ATOMIC_RUNS_WITH_ANOMALY, int):
        return Verdict(False, "ATOMIC_RUNS_WITH_ANOMALY must be an integer (a number of runs).")
    if ATOMIC_RUNS_WITH_ANOMALY != bad:
        return Verdict(False, f"ATOMIC_RUNS_WITH_ANOMALY is {ATOMIC_RUNS_WITH_ANOMALY}, which is not the number of "
                              "runs with an anomaly in an exhaustive exploration of the atomic finish. Run "
                              "explore(sc, 'atomic', conn=connect()) and add up report.runs_with; think about "
                              "where the sweep can run relative to one EVALSHA.")
    bad_probe = _a1_count_variants(runs_with_anomaly)
    if bad_probe:
        return Verdict(False, bad_probe)
    return Verdict(True, f"Right: exhaustive exploration of the atomic finish runs {explored} interleavings and "
                         f"finds an anomaly in {bad}: the sweep runs before or after the one EVALSHA, never "
                         "inside it. And runs_with_anomaly counts right on the hidden variants, split and atomic.")


def _a1_count_variants(runs_with_anomaly: Any) -> str | None:
    """Feedback when ``runs_with_anomaly(scenario, mode)`` miscounts at a probe, else None."""
    if not callable(runs_with_anomaly):
        return "runs_with_anomaly must be a function of (scenario, mode) returning a number of runs."
    for name, mode in A1_COUNT_PROBES:
        case = A1_CASES[name]
        where = ("on the assignment's case" if name == "assignment" else f"on a hidden variant ({case.about})")
        try:
            got = _at(runs_with_anomaly, "runs_with_anomaly", (name, mode))
        except NotImplementedError:
            return ("runs_with_anomaly still has the stub: write its body in the answer cell "
                    "'a1_atomic_answer'.")
        except Exception as e:  # noqa: BLE001
            return f"runs_with_anomaly(scenario, {mode!r}) {where} raised {type(e).__name__}: {str(e)[:200]}."
        if isinstance(got, bool) or not isinstance(got, int):
            return f"runs_with_anomaly must return an integer (a number of runs), not a {type(got).__name__}."
        _, want = _explore_counts(name, mode)
        if got != want:
            return (f"Your count for the assignment's atomic finish is right, but runs_with_anomaly(scenario, "
                    f"{mode!r}) {where} is {direction(got, want)} what exhaustive exploration of that scenario "
                    "finds. It must explore the scenario and mode it is given, every time it is called, and "
                    "count the runs that show an anomaly: a number copied from one run only fits that run.")
    return None


def warm() -> None:
    """Compute (and cache) the grader's reference runs, which do not depend on the answers."""
    for case, mode in A1_COUNT_PROBES:
        _explore_counts(case, mode)
    for case in A1_SCHEDULE_CASES:
        A1_CASES[case].solo()
        _window(case)


#: the answer functions of assignment 1 and the probes (case names, and modes) an isolated run evaluates
#: them at (:func:`probe_arguments` turns a probe into the typed arguments)
PROBES: dict[str, list[tuple[Any, ...]]] = {"schedule_for": [(n,) for n in A1_SCHEDULE_CASES],
                                            "gap_of": [(n,) for n in A1_SCHEDULE_CASES],
                                            "runs_with_anomaly": list(A1_COUNT_PROBES)}

ASSIGNMENT = Assignment("a1-double-placement", "Find a schedule that double-places a job",
                        "a1-double-placement.ipynb", [
    GradedCell("a1_schedule", 3, "a1_schedule_answer", ("schedule_for",), grade_a1_schedule,
               "a schedule that double-places the job, from W1's history"),
    GradedCell("a1_gap", 1, "a1_gap_answer", ("gap_of",), grade_a1_gap,
               "the two commands that bound the window, from W1's history"),
    GradedCell("a1_atomic", 1, "a1_atomic_answer", ("ATOMIC_RUNS_WITH_ANOMALY", "runs_with_anomaly"),
               grade_a1_atomic, "anomalous runs with an atomic finish"),
])
