"""Exploring interleavings: exhaustive (with dynamic partial-order reduction, or every schedule),
random(seed), PCT(seed, depth) and replay(schedule).

Every run starts from the scenario's initial state (the runner resets the queue's keys), so no state leaks
between runs. Exploration is *stateless* in the sense of CHESS and loom: a run is re-executed from the
start along a schedule prefix rather than restored from a snapshot.

**Reduction.** Two steps of different actors are *independent* when their footprints — the keys each read
and wrote, observed as it ran (:mod:`emqlab.footprints`) — do not conflict: running them in either order
gives the same state and the same replies. Interleavings that differ only in the order of independent
steps form one Mazurkiewicz trace and end in the same state with the same anomalies. With ``reduce=True``
(the default) the exhaustive search runs Source-DPOR (Abdulla, Aronis, Jonsson, Sagonas, "Optimal dynamic
partial order reduction", POPL 2014, Algorithm 1: source sets and sleep sets): at least one run per trace,
and never two complete runs of one trace. A run that a sleep set blocks before it completes is *cut short*
and counted as such.

**Counts are exact.** Each complete run stands for its trace; the number of interleavings of a trace is
the number of linear extensions of its happens-before order, counted by dynamic programming over the
actors' positions. Their sum is the exact number of interleavings (``raw``), and the interleavings showing
each anomaly are counted the same way. ``tests/test_reduction.py`` checks both against the unreduced
search.

**A preemption bound** (CHESS's: context switches away from an actor that could still run) is, with
reduction, a filter over traces rather than a cut of the search: a trace is within bound ``K`` when one of
its interleavings has at most ``K`` preemptions (the minimum is found by the same dynamic programming), and
only interleavings with at most ``K`` preemptions are counted. This finds exactly the final states and
anomalies the unreduced bounded search finds (sleep sets and bounding do not combine soundly — Coons,
Musuvathi, McKinley, "Bounded partial-order reduction", OOPSLA 2013 — so the bound never prunes the reduced
search). ``reduce=False`` with a bound runs every schedule with at most ``K`` preemptions and cuts the rest.

**Infrastructure errors** (:class:`emqlab.backends.ServerFault`, a lost connection) are never a step's
answer. One whose scope is the run (:class:`emqlab.backends.FaultScope`: OOM, a BUSY script that SCRIPT
KILL stopped, …) has the exhaustive search run that run again from its start, up to :data:`RUN_RETRIES`
times (:attr:`Report.retried`; the same choices, so a run that then completes is as true as any other);
when it comes back each time it *aborts* that run: it is counted in
:attr:`Report.aborted` by cause and in no other figure (no interleaving count, final state, result or
witness), and the exploration goes on with the next run. The aborted run's trace is partial — the races
below the step that failed were never seen — so the reduction may have missed subtrees below it: the counts
are then lower bounds and the verdict is inconclusive. One that spoils every later run (the server
restarted or failed over, READONLY, a lost connection, …) stops the exploration: :attr:`Report.stopped`
says why, and the figures are what the runs before it covered. A fault a scenario injects on purpose (a
crash, disconnect, script-flush or restart actor) is neither: it is the scenario's subject.

**The witness** of an anomaly is, among the interleavings that show it, the one with the fewest
preemptions, then the fewest steps, then the earliest in scenario order (the actors' order in the
scenario file, compared step by step); it is replayed to print its history.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import redis

from emqlab.backend.connect import FaultScope, ServerFault
from emqlab.engine import footprints as _fp
from emqlab.engine.actors import Op
from emqlab.engine.footprints import Footprint
from emqlab.engine.history import History
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import Scenario
from emqlab.explore.checked import Runner as _CheckedRunner
from emqlab.protocol.outcome import Outcome
from emqlab.protocol.schedules import ScheduleError, format_schedule, parse_schedule
from emqlab.protocol.schedules import preemptions as _preemptions

STRATEGIES = ("exhaustive", "random", "pct", "replay")
#: the most runs PCT's depth check may execute (an exhaustive search at ``depth - 1`` preemptions)
DEPTH_CHECK_RUNS = 20_000
#: Kept for code written against the first release: the declared footprints, now in emqlab.footprints.
SCRIPT_FOOTPRINTS = _fp.SCRIPT_PRIORS


def footprint(op: Op | None, base: str = "") -> Footprint:
    """The footprint an op *may* have, before it runs: exact for one command (the command table), the
    declared prior for a script, everything otherwise. The exploration itself uses observed footprints."""
    if op is None:
        return Footprint.everything()
    if op.kind == "script" and op.build is not None:
        call = op.build(0)
        return _fp.prior(call.name, call.keys, base)
    command = op.lazy() if op.lazy is not None else op.command
    if command is None:
        return Footprint.everything()
    fp = _fp.of_command(command, base)
    for pre in op.pre:
        fp = fp | _fp.of_command(pre, base)
    return fp


def independent(a: Op | None, b: Op | None, base: str = "") -> bool:
    """True when the two ops commute by their footprints (see :func:`footprint`)."""
    return not footprint(a, base).conflicts(footprint(b, base))


#: what aborts a run or stops an exploration: a server fault, or a connection that failed under redis-py
INFRASTRUCTURE = (ServerFault, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


#: how many times an exhaustive search runs a run again after a run-scoped server error before it counts
#: the run as aborted (sampled strategies never retry: a retry would draw another schedule)
RUN_RETRIES = 2


@dataclass(frozen=True)
class Abort:
    """The cause of aborted runs or of a stopped exploration: the error's ``code`` (``OOM``, ``NOSCRIPT``,
    ``BUSY``, ``READONLY``, ``RESTARTED``, ``CONNECTION``, … — :class:`emqlab.backends.ServerFault`) and
    ``reason``, the server's words in one line (no actor, no step: one cause for every run it aborted)."""

    code: str
    reason: str

    @classmethod
    def of(cls, error: BaseException) -> tuple[Abort, FaultScope]:
        """The cause and scope of an :data:`INFRASTRUCTURE` error."""
        if isinstance(error, ServerFault):
            return cls(error.code, " ".join(error.detail.split())), error.scope
        what = "timed out" if isinstance(error, redis.exceptions.TimeoutError) else "was lost"
        return cls("CONNECTION", f"the connection to the server {what} ({' '.join(str(error).split())})"), \
            FaultScope.EXPLORATION

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "reason": self.reason}


@dataclass
class Report:
    """What an exploration found.

    ``explored`` counts runs executed to completion, ``pruned`` runs cut short by a sleep set (the
    reduction knew they would repeat a trace), ``raw_interleavings`` the interleavings the exploration
    covers (within the preemption bound, if any) — exact when ``raw_exact``, else the multinomial estimate
    from the default run's step counts — and ``distinct_outcomes`` the distinct final states (by
    :meth:`emqlab.history.FinalState.logical`). ``runs_with[k]`` counts explored runs showing anomaly
    ``k``, ``interleavings_with[k]`` the interleavings showing it (exact with ``raw_exact``).

    ``aborted`` counts the runs an infrastructure error aborted, by cause (:class:`Abort`); they are in no
    other figure, and with any of them ``raw_exact`` is False (the reduction may have missed subtrees below
    them). ``stopped`` is the cause that stopped the exploration (every later run would have been
    untrustworthy), ``None`` if none did; ``complete`` is then False."""

    scenario: str
    mode: str
    strategy: str
    backend: str
    steps_per_actor: dict[str, int] = field(default_factory=dict)
    raw_interleavings: int = 0
    raw_exact: bool = False
    explored: int = 0
    pruned: int = 0
    outside_bound: int = 0
    distinct_outcomes: int = 0
    runs_with: dict[str, int] = field(default_factory=dict)
    interleavings_with: dict[str, int] = field(default_factory=dict)
    min_preemptions: dict[str, int] = field(default_factory=dict)
    witnesses: dict[str, History] = field(default_factory=dict)
    #: kind -> the witness's schedule, for a kind whose witness the server failed to replay (no history)
    unreplayed: dict[str, str] = field(default_factory=dict)
    results: dict[str, dict[str, int]] = field(default_factory=dict)
    #: per actor, the outcomes of its finishes and cancels → runs (typed: ``Outcome(code=-2)``)
    codes: dict[str, dict[Outcome, int]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    complete: bool = True
    reduction: str = "off"
    steps_executed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    #: what the reader must know about the figures (a PCT depth too shallow for an expected anomaly)
    warnings: list[str] = field(default_factory=list)
    outcomes: set[Any] = field(default_factory=set, repr=False)
    aborted: dict[Abort, int] = field(default_factory=dict)
    stopped: Abort | None = None
    #: the times a run was run again from its start after a run-scoped server error (:data:`RUN_RETRIES`),
    #: by cause: a retried run that then completed counts like any other; one that never did is in ``aborted``
    retried: dict[Abort, int] = field(default_factory=dict)

    @property
    def aborted_runs(self) -> int:
        """How many runs infrastructure errors aborted (the run in which one stopped the exploration aside)."""
        return sum(self.aborted.values())

    def infrastructure(self) -> str:
        """One sentence on what infrastructure errors did to this exploration ('' when none occurred)."""
        causes = "; ".join(f"{a.reason} ×{n}" for a, n in sorted(self.aborted.items(), key=lambda kv: -kv[1]))
        aborted = (f"{self.aborted_runs:,} run(s) aborted by server errors ({causes}): no count includes them,"
                   " and the reduction may have missed interleavings below them") if self.aborted else ""
        if self.stopped is None:
            return aborted
        done = f"{self.explored:,} complete run(s)" + (f" and {self.aborted_runs:,} aborted" if self.aborted else "")
        return (f"the exploration stopped after {done}: {self.stopped.reason} — later runs could not be trusted,"
                " so the counts are lower bounds and a missing anomaly proves nothing")

    @property
    def anomaly_kinds(self) -> list[str]:
        return sorted(k for k, n in self.runs_with.items() if n)

    @property
    def runs_per_second(self) -> float:
        return self.explored / self.elapsed_s if self.elapsed_s else 0.0

    def share(self, kind: str) -> float:
        """The fraction of the covered interleavings that show ``kind``."""
        if self.raw_exact and self.raw_interleavings:
            return self.interleavings_with.get(kind, 0) / self.raw_interleavings
        return self.runs_with.get(kind, 0) / max(1, self.explored)

    def claims(self) -> dict[str, Any]:
        """What the exploration says about the system, without how much work it took: the same on every
        backend and with or without reduction (where the counts are exact)."""
        d = self.to_dict()
        inter = d["interleavings"]
        return {"scenario": self.scenario, "mode": self.mode, "strategy": self.strategy,
                "steps_per_actor": self.steps_per_actor,
                "interleavings": {k: inter[k] for k in ("raw", "raw_exact", "distinct_outcomes", "complete")},
                "interleavings_with": d["interleavings_with"], "min_preemptions": d["min_preemptions"],
                "witnesses": d["witnesses"], "infrastructure": {k: d["infrastructure"][k]
                                                                for k in ("aborted_runs", "stopped")}}

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "mode": self.mode, "strategy": self.strategy, "backend": self.backend,
            "params": self.params, "steps_per_actor": self.steps_per_actor,
            "interleavings": {"raw": self.raw_interleavings, "raw_exact": self.raw_exact,
                              "explored": self.explored, "pruned": self.pruned,
                              "outside_bound": self.outside_bound,
                              "distinct_outcomes": self.distinct_outcomes, "complete": self.complete,
                              "reduction": self.reduction, "steps_executed": self.steps_executed},
            "runs_with": dict(sorted(self.runs_with.items())),
            "interleavings_with": dict(sorted(self.interleavings_with.items())),
            "min_preemptions": dict(sorted(self.min_preemptions.items())),
            "results": self.results, "warnings": self.warnings,
            "witnesses": {k: {"schedule": h.schedule, "anomalies": [a for a in h.anomalies if a["kind"] == k],
                              "steps": len(h.steps)} for k, h in sorted(self.witnesses.items())}
            | {k: {"schedule": s, "replayed": False} for k, s in sorted(self.unreplayed.items())},
            "infrastructure": {"aborted_runs": self.aborted_runs,
                               "aborted": [{**a.to_dict(), "runs": n} for a, n in sorted(
                                   self.aborted.items(), key=lambda kv: (-kv[1], kv[0].code, kv[0].reason))],
                               "stopped": self.stopped.to_dict() if self.stopped else None,
                               "retried": [{**a.to_dict(), "times": n} for a, n in sorted(
                                   self.retried.items(), key=lambda kv: (-kv[1], kv[0].code, kv[0].reason))],
                               "note": self.infrastructure()},
            "elapsed_s": round(self.elapsed_s, 4), "runs_per_second": round(self.runs_per_second, 1),
        }


def multinomial(counts: list[int]) -> int:
    """(n1 + n2 + …)! / (n1! n2! …): the number of interleavings of sequences of these lengths."""
    total = math.factorial(sum(counts))
    for c in counts:
        total //= math.factorial(c)
    return total


# -- linear extensions of one trace ----------------------------------------------------------------------


class Trace:
    """A complete run's happens-before order: ``actors[i]`` took event ``i``; ``preds[i]`` is the bit set
    of events that happen before it (dependent events earlier in the run, transitively, program order
    included). Answers questions about all interleavings of the trace by dynamic programming over the
    actors' positions."""

    def __init__(self, actors: Sequence[str], preds: Sequence[int], order: Sequence[str],
                 kills: dict[str, int] | None = None) -> None:
        self.order = [a for a in order if a in set(actors)]
        idx = {a: i for i, a in enumerate(self.order)}
        self.lanes: list[list[int]] = [[] for _ in self.order]
        pos_of: dict[int, tuple[int, int]] = {}  # event -> (its lane, its position in the lane)
        for i, a in enumerate(actors):
            pos_of[i] = (idx[a], len(self.lanes[idx[a]]))
            self.lanes[idx[a]].append(i)
        self.lengths = tuple(len(lane) for lane in self.lanes)
        # need[e][b]: how many of lane b's events must have run before event e can
        self.need: dict[int, tuple[int, ...]] = {}
        for e in range(len(actors)):
            n = [0] * len(self.order)
            bits = preds[e]
            while bits:
                low = bits & -bits
                p = low.bit_length() - 1
                bits ^= low
                lane, k = pos_of[p]
                n[lane] = max(n[lane], k + 1)
            self.need[e] = tuple(n)
        # ``kills``: actor -> the event (a crash) that ended it while it still had a step to take; until that
        # event has run, switching away from the actor is a preemption even after its last event
        self.killed: dict[int, tuple[int, int]] = {}
        for a, e in (kills or {}).items():
            if a in idx:
                self.killed[idx[a]] = pos_of[e]

    def _moves(self, pos: tuple[int, ...]) -> list[int]:
        out = []
        for lane, k in enumerate(pos):
            if k < self.lengths[lane]:
                e = self.lanes[lane][k]
                if all(pos[b] >= self.need[e][b] for b in range(len(pos))):
                    out.append(lane)
        return out

    def _cost(self, pos: tuple[int, ...], last: int, lane: int) -> int:
        if last < 0 or lane == last:
            return 0
        if pos[last] < self.lengths[last]:
            return 1
        kill = self.killed.get(last)
        return int(kill is not None and pos[kill[0]] <= kill[1])

    def counts(self, bound: int | None) -> tuple[int, int]:
        """(interleavings of this trace, those with at most ``bound`` preemptions)."""

        @cache
        def go(pos: tuple[int, ...], last: int) -> tuple[int, ...]:
            # ways[u] = completions from here using exactly u more preemptions (u capped at cap)
            if pos == self.lengths:
                return (1,) + (0,) * cap
            acc = [0] * (cap + 1)
            for lane in self._moves(pos):
                c = self._cost(pos, last, lane)
                nxt = list(pos)
                nxt[lane] += 1
                sub = go(tuple(nxt), lane)
                for u, w in enumerate(sub):
                    acc[min(cap, u + c)] += w
            return tuple(acc)

        cap = bound + 1 if bound is not None else 0
        ways = go(tuple(0 for _ in self.order), -1)
        total = sum(ways)
        within = total if bound is None else sum(ways[: bound + 1])
        go.cache_clear()
        return total, within

    def best(self) -> tuple[int, list[str]]:
        """The fewest preemptions of any interleaving, and the earliest such interleaving in scenario
        order."""

        @cache
        def least(pos: tuple[int, ...], last: int) -> int:
            if pos == self.lengths:
                return 0
            return min(self._cost(pos, last, lane) + least(_adv(pos, lane), lane) for lane in self._moves(pos))

        pos, last = tuple(0 for _ in self.order), -1
        total = least(pos, last)
        out: list[str] = []
        while pos != self.lengths:
            target = least(pos, last)
            for lane in self._moves(pos):
                if self._cost(pos, last, lane) + least(_adv(pos, lane), lane) == target:
                    out.append(self.order[lane])
                    pos, last = _adv(pos, lane), lane
                    break
        least.cache_clear()
        return total, out


def _adv(pos: tuple[int, ...], lane: int) -> tuple[int, ...]:
    nxt = list(pos)
    nxt[lane] += 1
    return tuple(nxt)


@dataclass(frozen=True)
class Branch:
    """A node of the exhaustive search handed to another search (:class:`emqlab.parallel.Donor`): its sleep
    set, the children already explored (``done``; ``fps`` their footprints), and the ``children`` the other
    search explores there, in this order."""

    sleep: dict[str, Footprint]
    done: frozenset[str]
    fps: dict[str, Footprint]
    children: tuple[str, ...]


@dataclass
class _Node:
    """One scheduling point on the current path of the exhaustive search."""

    enabled: list[str]
    sleep: dict[str, Footprint]
    backtrack: list[str] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    fps: dict[str, Footprint] = field(default_factory=dict)
    current: str | None = None
    child_sleep: dict[str, Footprint] = field(default_factory=dict)


class Explorer:
    """Runs a strategy over one :class:`Runner` and collects a :class:`Report`.

    ``progress(done, total_or_None)`` is called after each run (for progress bars)."""

    def __init__(self, runner: Runner, *, progress: Callable[[int, int | None], None] | None = None) -> None:
        self.runner = runner
        self.progress = progress
        from emqlab.backend.connect import describe

        sc = runner.scenario
        self.order = [a.id for a in sc.actors]
        self.report = Report(sc.name, runner.mode, "", describe(runner.conn))
        self._results: dict[str, Counter[str]] = {a.id: Counter() for a in sc.actors}
        self._codes: dict[str, Counter[Outcome]] = {a.id: Counter() for a in sc.actors}
        self._best: dict[str, tuple[int, int, tuple[int, ...], list[str], History]] = {}
        #: stop (``complete`` False) once ``time.time()`` passes this
        self.deadline: float | None = None
        #: a divided exploration's subtree: called with the search path and the root's length after each
        #: run; it may mark children of a path node explored because another part will explore them
        #: (:class:`emqlab.parallel.Donor`)
        self.donate: Callable[[list[_Node], int], None] | None = None

    # -- bookkeeping -------------------------------------------------------------------------------
    def _rank(self, choices: Sequence[str]) -> tuple[int, ...]:
        idx = {a: i for i, a in enumerate(self.order)}
        return tuple(idx[c] for c in choices)

    def _record(self, h: History, preempt: int, choices: Sequence[str], weight: int = 1) -> None:
        rep = self.report
        rep.explored += 1
        counts = Counter(s.actor for s in h.steps)
        for a, n in counts.items():
            if n > rep.steps_per_actor.get(a, 0):
                rep.steps_per_actor[a] = n
        for k in h.kinds:
            rep.runs_with[k] = rep.runs_with.get(k, 0) + 1
            rep.interleavings_with[k] = rep.interleavings_with.get(k, 0) + weight
            key = (preempt, len(h.steps), self._rank(choices))
            best = self._best.get(k)
            if best is None or key < best[:3]:
                self._best[k] = (*key, list(choices), h)
        rep.outcomes.add(h.final.logical())
        for actor, res in h.results.items():
            for r in res:
                self._results[actor][str(r)] += 1
                if r.kind in ("finish", "cancel") and r.outcome is not None:
                    self._codes[actor][r.outcome] += 1
        if self.progress:
            self.progress(rep.explored, None)

    def _retry(self, error: BaseException, tries: int) -> bool:
        """Whether to run the run an :data:`INFRASTRUCTURE` error just ended again, from its start, along the
        same choices: a run-scoped fault (a passing OOM, another client's BUSY script) may not recur, and a
        run that then completes is as true as any other (counted in ``retried``)."""
        cause, scope = Abort.of(error)
        if scope is not FaultScope.RUN or tries >= RUN_RETRIES:
            return False
        self.report.retried[cause] = self.report.retried.get(cause, 0) + 1
        return True

    def _abort(self, error: BaseException) -> bool:
        """Count the run an :data:`INFRASTRUCTURE` error ended: True when only that run is lost (it is in
        ``aborted``; the exploration goes on), False when the exploration must stop (``stopped``)."""
        cause, scope = Abort.of(error)
        rep = self.report
        if scope is FaultScope.RUN:
            rep.aborted[cause] = rep.aborted.get(cause, 0) + 1
            return True
        rep.stopped = cause
        rep.complete = False
        return False

    def _finish(self, started: float, *, replay_witnesses: bool = False) -> Report:
        rep = self.report
        for k, (pre, _n, _rank, choices, h) in sorted(self._best.items()):
            w = h
            if replay_witnesses and rep.stopped is None and choices != [s.actor for s in h.steps]:
                r = self.runner
                try:
                    r.reset()
                    replayed = r.run(choices)
                except INFRASTRUCTURE:  # the run that showed it stands (a true history, one more step or so)
                    replayed = h
                if k in replayed.kinds:
                    w = replayed
            rep.witnesses[k] = w
            rep.min_preemptions[k] = pre
        rep.elapsed_s = time.perf_counter() - started
        rep.distinct_outcomes = len(rep.outcomes)
        rep.results = {a: dict(sorted(c.items())) for a, c in self._results.items() if c}
        rep.codes = {a: dict(sorted(c.items(), key=lambda kv: str(kv[0]))) for a, c in self._codes.items() if c}
        return rep

    def _measure_default(self) -> bool:
        """The default run's step counts (the estimate's multinomial); False when an infrastructure error
        stopped the exploration (an aborted run leaves the counts to the sampled runs)."""
        r = self.runner
        try:
            r.reset()
            h = r.run()
        except INFRASTRUCTURE as e:
            return self._abort(e)
        counts = Counter(s.actor for s in h.steps)
        self.report.steps_per_actor = {a.id: counts.get(a.id, 0) for a in r.scenario.actors}
        self.report.raw_interleavings = multinomial(list(counts.values()))
        self.report.raw_exact = False
        return True

    # -- exhaustive --------------------------------------------------------------------------------
    def exhaustive(self, *, preemption_bound: int | None = None, reduce: bool = True,
                   max_runs: int | None = None) -> Report:
        """Every interleaving (up to ``preemption_bound`` preemptions). With ``reduce``, one run per
        Mazurkiewicz trace (Source-DPOR) and exact counts; without, every schedule is run. Stops after
        ``max_runs`` complete runs (``complete`` is then False and counts are lower bounds)."""
        started = time.perf_counter()
        rep = self.report
        rep.strategy = "exhaustive"
        rep.params = {"preemption_bound": preemption_bound, "reduce": reduce, "max_runs": max_runs}
        rep.reduction = "source-dpor" if reduce else "off"
        rep.steps_per_actor = {a: 0 for a in self.order}
        if reduce:
            self._dpor(preemption_bound, max_runs)
        else:
            self._dfs(preemption_bound, max_runs)
        rep.raw_exact = rep.complete and not rep.aborted
        return self._finish(started, replay_witnesses=reduce)

    def _dfs(self, bound: int | None, max_runs: int | None) -> None:
        """Every schedule with at most ``bound`` preemptions, depth-first, continuing the same actor first."""
        r = self.runner
        rep = self.report
        frames: list[_Node] = []
        prefix: list[str] = []
        tries = 0  # retries of this run (run-scoped server errors)
        while True:
            try:
                r.reset()
                for c in prefix:
                    r.step(c)
                rep.steps_executed += len(prefix)
                while not r.done:
                    d = len(r.choices)
                    if d == len(frames):
                        frames.append(_Node(list(r.enabled), {}))
                    frame = frames[d]
                    choice = self._pick(frame, r.choices, r.preemptions, bound, prefer_prev=True)
                    assert choice is not None  # some actor is enabled and continuing it costs no preemption
                    frame.done.add(choice)
                    frame.current = choice
                    r.step(choice)
                    rep.steps_executed += 1
                self._record(r.history(), r.preemptions, r.choices)
                rep.raw_interleavings += 1
                if max_runs is not None and rep.explored >= max_runs:
                    rep.complete = False
                    return
            except INFRASTRUCTURE as e:  # the run is lost, and the schedules below its failed step with it
                if self._retry(e, tries):
                    tries += 1
                    del frames[len(prefix):]  # the frames this attempt made: the same run again
                    continue
                if not self._abort(e):
                    return
            tries = 0
            if self.deadline is not None and time.time() > self.deadline:
                rep.complete = False
                return
            # the path as the frames hold it (an aborted run's choices may stop short of it)
            path, enabled_at = [f.current or "" for f in frames], [f.enabled for f in frames]
            while frames:
                d = len(frames) - 1
                frame = frames[d]
                head = path[:d]
                alt = self._pick(frame, head, _preemptions(head, enabled_at[:d]), bound, prefer_prev=False)
                if alt is not None:
                    frame.current = alt
                    frame.done.add(alt)
                    prefix = [*head, alt]
                    break
                frames.pop()
            if not frames:
                return

    def _pick(self, frame: _Node, head: list[str], used: int, bound: int | None, prefer_prev: bool) -> str | None:
        prev = head[-1] if head else None
        order = list(frame.enabled)
        if prefer_prev and prev in order:  # continue the same actor first: no preemption
            order.remove(prev)
            order.insert(0, prev)
        for a in order:
            if a in frame.done or a in frame.sleep:
                continue
            if bound is not None and prev is not None and a != prev and prev in frame.enabled and used + 1 > bound:
                continue
            return a
        return None

    def _dpor(self, bound: int | None, max_runs: int | None, root: Sequence[str] = (),
              branch: Branch | None = None) -> None:
        """Source-DPOR with sleep sets over observed footprints (the module docstring). With ``root`` (a
        schedule prefix), only the runs that begin with it: its steps are fixed, and races that would
        reverse one of them are left to the subtrees of the other prefixes (:mod:`emqlab.parallel`). With
        ``branch`` too, the node at the end of ``root`` starts as another search left it: its sleep set, the
        children it explored (with their footprints: they sleep in the later ones) and the children to
        explore here, in order."""
        r = self.runner
        rep = self.report
        nodes: list[_Node] = []
        cut = len(root)
        if root or branch is not None:
            try:
                r.reset()
                for c in root:
                    if c not in r.enabled:
                        raise ScheduleError(f"actor {c} has no step left at step {len(r.choices) + 1} of the prefix")
                    nodes.append(_Node(list(r.enabled), {}, backtrack=[c], done={c}, current=c))
                    r.step(c)
                if branch is not None:
                    nodes.append(_Node(list(r.enabled), dict(branch.sleep), backtrack=list(branch.children),
                                       done=set(branch.done), fps=dict(branch.fps), current=branch.children[0]))
            except INFRASTRUCTURE as e:  # the whole subtree is lost
                self._abort(e)
                return
            rep.steps_executed += cut
        actors: list[str] = []  # events of the current path: who took each
        fps: list[Footprint] = []
        preds: list[int] = []  # bit set of happens-before predecessors of each event
        keep = 0
        tries = 0  # retries of this run (run-scoped server errors)
        while True:
            at = keep  # the node whose step the run is taking: an infrastructure error loses its subtree
            try:
                r.reset()
                for c in _path(nodes, keep):
                    r.step(c)
                rep.steps_executed += keep
                del actors[keep:], fps[keep:], preds[keep:]
                depth = keep
                blocked = False
                while True:
                    if depth == len(nodes):
                        if r.done:
                            break
                        sleep = dict(nodes[depth - 1].child_sleep) if depth else {}
                        node = _Node(list(r.enabled), sleep)
                        first = self._first(node, r.choices[-1] if r.choices else None)
                        if first is None:
                            blocked = True
                            break
                        node.backtrack.append(first)
                        node.current = first
                        nodes.append(node)
                    node = nodes[depth]
                    p = node.current
                    assert p is not None
                    at = depth
                    r.step(p)
                    rep.steps_executed += 1
                    fp = r.footprints[-1]
                    node.fps[p] = fp
                    node.done.add(p)
                    self._races(nodes, actors, fps, preds, p, fp)
                    actors.append(p)
                    fps.append(fp)
                    # sleeping actors stay asleep past p only if independent of it; earlier siblings join (an
                    # actor whose step an infrastructure error aborted has no footprint: it stays awake)
                    node.child_sleep = {q: f for q, f in {**node.sleep, **{q: node.fps[q] for q in node.done
                                                                            if q != p and q in node.fps}}.items()
                                        if q != p and not f.conflicts(fp)}
                    depth += 1
                at = len(nodes)
                if blocked:
                    rep.pruned += 1
                else:
                    self._record_trace(actors, preds, bound)
                    if max_runs is not None and rep.explored >= max_runs:
                        rep.complete = False
                        return
            except INFRASTRUCTURE as e:
                if self._retry(e, tries):  # the same run again: every node it reached picks as it did
                    tries += 1
                    continue
                if not self._abort(e):
                    return
                if at < len(nodes):  # never again down this branch: below it, the races were not all seen
                    current = nodes[at].current
                    assert current is not None
                    nodes[at].done.add(current)
                    del nodes[at + 1:]
            tries = 0
            if self.donate is not None and len(nodes) > cut:
                self.donate(nodes, cut)  # a divided exploration may hand some of this subtree to others
            if self.deadline is not None and time.time() > self.deadline:
                rep.complete = False
                return
            # backtrack to the deepest node with an awake, unexplored backtrack entry (not into the root)
            while len(nodes) > cut:
                d = len(nodes) - 1
                node = nodes[d]
                alt = next((a for a in node.backtrack if a not in node.done and a not in node.sleep), None)
                if alt is not None:
                    node.current = alt
                    keep = d
                    break
                nodes.pop()
            if len(nodes) <= cut:
                return

    def _first(self, node: _Node, prev: str | None) -> str | None:
        order = list(node.enabled)
        if prev in order:
            order.remove(prev)
            order.insert(0, prev)
        return next((a for a in order if a not in node.sleep), None)

    def _races(self, nodes: list[_Node], actors: list[str], fps: list[Footprint], preds: list[int],
               p: str, fp: Footprint) -> None:
        """Add the happens-before predecessors of the new event ``j`` (actor ``p``) and, for each race
        ``i ⋖ j``, make sure a source set at node ``i`` can reverse it (Source-DPOR, Algorithm 1)."""
        j = len(actors)
        mine = 0
        direct: list[int] = []
        for i in range(j):
            if actors[i] == p:
                mine |= (1 << i) | preds[i]
            elif fps[i].conflicts(fp):
                mine |= (1 << i) | preds[i]
                direct.append(i)
        preds.append(mine)
        covered = 0
        bits = mine
        while bits:
            low = bits & -bits
            covered |= preds[low.bit_length() - 1]
            bits ^= low
        for i in direct:
            if covered >> i & 1:
                continue  # not an immediate race: something in between orders them
            # v = the events after i that do not happen after it, then p's event
            v = [k for k in range(i + 1, j) if not (preds[k] >> i & 1)]
            initials: list[str] = []
            vmask = 0
            for k in v:
                if not (preds[k] & vmask) and actors[k] not in initials:
                    initials.append(actors[k])
                vmask |= 1 << k
            if not (mine & vmask) and p not in initials:
                initials.append(p)
            node = nodes[i]
            if not any(q in node.backtrack for q in initials):
                q = p if p in initials else min(initials, key=self.order.index)
                node.backtrack.append(q)

    def _record_trace(self, actors: list[str], preds: list[int], bound: int | None) -> None:
        rep = self.report
        trace = Trace(actors, preds, self.order, kills=self.runner.kills)
        _total, within = trace.counts(bound)
        least, schedule = trace.best()
        if bound is not None and least > bound:
            rep.outside_bound += 1
            return
        h = self.runner.history()
        rep.raw_interleavings += within
        self._record(h, least, schedule, weight=within)

    # -- sampled strategies ------------------------------------------------------------------------
    def random(self, runs: int, seed: int = 0) -> Report:
        """``runs`` runs, each choosing uniformly among the enabled actors (seeded)."""
        started = time.perf_counter()
        self.report.strategy = "random"
        self.report.params = {"runs": runs, "seed": seed}
        rng = random.Random(seed)
        for _ in range(runs if self._measure_default() else 0):
            r = self.runner
            try:
                r.reset()
                h = r.run(choose=lambda rr: rng.choice(rr.enabled))
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            self.report.steps_executed += len(h.steps)
            self._record(h, r.preemptions, r.choices)
        self.report.raw_interleavings = multinomial(list(self.report.steps_per_actor.values()))
        return self._finish(started)

    def pct(self, runs: int, seed: int = 0, depth: int = 2, *, check_depth: bool = True) -> Report:
        """Probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010): random actor priorities and
        ``depth - 1`` priority-change points per run; each run finds a given bug *of depth at most*
        ``depth`` with probability at least 1/(n·k^(d−1)) for n actors and k steps (k: the longest run
        seen). A bug that needs a deeper ordering gets no guarantee at all."""
        started = time.perf_counter()
        rep = self.report
        rep.strategy = "pct"
        go_on = self._measure_default()
        k = max(1, sum(rep.steps_per_actor.values()))
        n = len(self.runner.scenario.actors)
        rng = random.Random(seed)
        longest = k
        for _ in range(runs if go_on else 0):
            r = self.runner
            ids = [a.id for a in r.scenario.actors]
            prio = dict(zip(ids, rng.sample(range(depth, depth + len(ids)), len(ids)), strict=True))
            changes = sorted(rng.sample(range(1, k + 1), min(depth - 1, k)))
            change_at = {step: depth - 1 - i for i, step in enumerate(changes)}

            def choose(rr: Runner, prio: dict[str, int] = prio, change_at: dict[int, int] = change_at) -> str:
                a = max(rr.enabled, key=lambda x: prio[x])
                step_no = len(rr.choices) + 1
                if step_no in change_at:
                    prio[a] = change_at[step_no]
                    a = max(rr.enabled, key=lambda x: prio[x])
                return a

            try:
                r.reset()
                h = r.run(choose=choose)
            except INFRASTRUCTURE as e:
                if self._abort(e):
                    continue
                break
            longest = max(longest, len(h.steps))
            rep.steps_executed += len(h.steps)
            self._record(h, r.preemptions, r.choices)
        rep.raw_interleavings = multinomial(list(rep.steps_per_actor.values()))  # (the longest each actor ran)
        rep.params = {"runs": runs, "seed": seed, "depth": depth, "longest_run": longest,
                      "bound_per_run": f"1/({n}*{longest}^{depth - 1})",
                      "p_per_run_at_least": 1 / (n * longest ** (depth - 1)),
                      "assumes": f"a bug of depth <= {depth}"}
        self._finish(started)
        if check_depth and rep.stopped is None:  # a swarm (emqlab.parallel) checks once, after merging its parts
            self._check_depth(depth)
        rep.elapsed_s = time.perf_counter() - started
        return rep

    def _check_depth(self, depth: int, budget: int = DEPTH_CHECK_RUNS) -> None:
        """Which anomaly kinds PCT at ``depth`` can find at all. PCT's runs switch away from a running
        actor only at its ``depth - 1`` priority-change points (our actors never block), so they have at
        most ``depth - 1`` preemptions: a kind that no schedule with that few preemptions shows has
        probability 0, whatever the bound says. The kinds looked for are the scenario's expected ones for
        the mode plus those PCT found; an exhaustive search at ``depth - 1`` preemptions (at most
        ``budget`` runs) decides. Sets ``params["within_depth"]`` / ``params["beyond_depth"]`` and a
        warning; when the budget runs out, says the check is incomplete."""
        rep = self.report
        sc = self.runner.scenario
        expected = set(sc.expect[rep.mode].anomalies) if rep.mode in sc.expect else set()
        wanted = expected | set(rep.anomaly_kinds)
        if not wanted:
            rep.params["depth_check"] = "nothing to check: no anomaly expected or found"
            return
        probe = Explorer(self.runner).exhaustive(preemption_bound=depth - 1, max_runs=budget)
        if probe.stopped is not None or probe.aborted:
            rep.params["depth_check"] = f"incomplete: {probe.infrastructure()}"
            rep.warnings.append(f"could not check which anomalies PCT at depth {depth} can reach: "
                                f"{probe.infrastructure()}")
            return
        if not probe.complete:
            rep.params["depth_check"] = f"incomplete: more than {budget} runs at {depth - 1} preemptions"
            rep.warnings.append(f"could not check which anomalies PCT at depth {depth} can reach "
                                f"(more than {budget:,} runs at {depth - 1} preemptions)")
            return
        within = sorted(wanted & set(probe.anomaly_kinds))
        beyond = sorted(wanted - set(probe.anomaly_kinds))
        rep.params["depth_check"] = "complete"
        rep.params["within_depth"] = within
        rep.params["beyond_depth"] = beyond
        if beyond:
            n = depth - 1
            rep.warnings.append(
                f"PCT at depth {depth} cannot find {', '.join(beyond)}: every schedule that shows "
                f"{'it' if len(beyond) == 1 else 'them'} needs more than {n} preemption{'' if n == 1 else 's'} "
                f"(try --depth {depth + 1} or more); the bound per run applies only to "
                f"{', '.join(within) if within else 'no expected anomaly'}")

    def replay(self, schedule: str) -> Report:
        """One run along ``schedule`` (a schedule string); if it ends before every actor is done, the run
        continues without further preemption. Raises :class:`ScheduleError` for a schedule that does not
        fit the scenario."""
        started = time.perf_counter()
        self.report.strategy = "replay"
        self.report.params = {"schedule": schedule}
        r = self.runner
        choices = parse_schedule(schedule, self.order)
        try:
            r.reset()
            h = r.run(choices)
        except INFRASTRUCTURE as e:
            self._abort(e)
            self.report.steps_per_actor = {a: choices.count(a) for a in self.order}
            return self._finish(started)
        counts = Counter(s.actor for s in h.steps)
        self.report.steps_per_actor = {a: counts.get(a, 0) for a in self.order}
        self.report.raw_interleavings = multinomial(list(counts.values()))
        self.report.steps_executed = len(h.steps)
        self._record(h, r.preemptions, r.choices)
        return self._finish(started)


def _path(nodes: list[_Node], keep: int) -> list[str]:
    """The choices that lead to node ``keep`` on the current path."""
    out = []
    for n in nodes[:keep]:
        assert n.current is not None
        out.append(n.current)
    return out


def shrink(runner: Runner, history: History, kind: str) -> History:
    """A smaller witness for anomaly ``kind``: the shortest prefix of the schedule that, continued without
    further preemption, still shows the anomaly (fewer preemptions, same anomaly)."""
    choices = parse_schedule(history.schedule)
    best = history
    boundaries = [i for i in range(1, len(choices)) if choices[i] != choices[i - 1]]
    for cut in boundaries:
        try:
            runner.reset()
            h = runner.run(choices[:cut])
        except (ScheduleError, *INFRASTRUCTURE):  # (a server fault: the witness found stands)
            continue
        if kind in h.kinds:
            if (runner.preemptions, len(h.steps)) <= (len(boundaries) + 1, len(best.steps)):
                best = h
                break
    return best


def explore(scenario: Scenario, mode: str, *, strategy: str = "exhaustive", conn: Any = None,
            runs: int = 100, seed: int = 0, depth: int = 2, preemptions: int | None = None,
            reduce: bool = True, schedule: str | None = None, scripts: Any = None,
            progress: Callable[[int, int | None], None] | None = None, unbounded: bool = False) -> Report:
    """One call: build a runner for ``scenario`` in ``mode`` and run ``strategy``. The preemption bound is
    ``preemptions`` if given, else the scenario's (``unbounded=True``: none). The runner's keys are deleted
    afterwards."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (one of: {', '.join(STRATEGIES)})")
    with _CheckedRunner(scenario, mode, conn, scripts=scripts) as runner:
        ex = Explorer(runner, progress=progress)
        if strategy == "exhaustive":
            bound = None if unbounded else (preemptions if preemptions is not None else scenario.preemptions)
            rep = ex.exhaustive(preemption_bound=bound, reduce=reduce)
            rep.params["bound_from"] = "none" if unbounded else ("option" if preemptions is not None else "scenario")
        elif strategy == "random":
            rep = ex.random(runs, seed)
        elif strategy == "pct":
            rep = ex.pct(runs, seed, depth)
        else:
            if not schedule:
                raise ScheduleError("replay needs a schedule string")
            rep = ex.replay(schedule)
        if strategy in ("random", "pct"):
            for kind, h in list(rep.witnesses.items()):
                rep.witnesses[kind] = shrink(runner, h, kind)
        return rep


__all__ = ["Abort", "Explorer", "INFRASTRUCTURE", "Report", "Trace", "explore",
           "format_schedule", "independent", "multinomial", "shrink"]
