"""The home of what an exploration found: the :class:`Report` (and :meth:`Report.merge`, one report from the
parts of a divided exploration), the tallies of one search (:class:`Part`), the causes of aborted runs
(:class:`Abort`, :data:`INFRASTRUCTURE`), and the exact counts over one trace's interleavings
(:class:`Trace`, :func:`multinomial`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from emqlab.backend.connect import FaultScope, ServerFault
from emqlab.engine.history import History
from emqlab.protocol.outcome import Outcome

#: what aborts a run or stops an exploration: a server fault, or a connection that failed under redis-py
INFRASTRUCTURE = (ServerFault, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


#: the strategies that sample interleavings: their reports never cover every one (``complete`` in the JSON)
SAMPLED = ("random", "pct")
#: how many times an exhaustive search runs a run again after a run-scoped server error before it counts
#: the run as aborted (sampled strategies never retry: a retry would draw another schedule)
RUN_RETRIES = 2


@dataclass(frozen=True)
class Abort:
    """The cause of aborted runs or of a stopped exploration: the error's ``code`` (``OOM``, ``NOSCRIPT``,
    ``BUSY``, ``READONLY``, ``RESTARTED``, ``CONNECTION``, … — :class:`emqlab.backend.faults.ServerFault`) and
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


@dataclass(frozen=True)
class Report:
    """What an exploration found: a value, built by :meth:`merge` from what the search tallied (one
    :class:`Part`, or the parts of a divided search); a changed figure is a new report
    (:func:`dataclasses.replace`).

    ``explored`` counts the runs kept (an exhaustive search with reduction keeps one per trace within the
    preemption bound), ``blocked`` the runs a sleep set stopped before their end (the reduction knew they
    would repeat a trace), ``outside_bound`` the runs an exhaustive search with reduction ran in full and
    then set aside because every interleaving of their trace has more preemptions than the bound (0: the
    bound is inside the search, which starts no branch past it, :mod:`emqlab.explore.dpor`; kept as a
    check), ``repeated`` the runs a bounded search ran in full and set aside because they repeat a trace it
    kept (under a preemption bound some sleep sets must stay open: :mod:`emqlab.explore.dpor`);
    :attr:`executed` is all the runs started.
    ``raw_interleavings`` counts the interleavings the exploration covers (within the preemption bound, if any) —
    exact when ``raw_exact``, else the multinomial estimate from the default run's step counts — and
    ``distinct_outcomes`` the distinct final states (by :meth:`emqlab.engine.history.FinalState.logical`).
    ``runs_with[k]`` counts explored runs showing anomaly ``k``,
    ``interleavings_with[k]`` the interleavings showing it (exact with ``raw_exact``).

    ``aborted`` counts the runs an infrastructure error aborted, by cause (:class:`Abort`); they are in no
    other figure, and with any of them ``raw_exact`` is False (the reduction may have missed subtrees below
    them). ``stopped`` is the cause that stopped the exploration (every later run would have been
    untrustworthy), ``None`` if none did; ``complete`` is then False. In :meth:`to_dict` ``complete`` says
    every interleaving was covered: never for a sampled strategy (:data:`SAMPLED`)."""

    scenario: str
    mode: str
    strategy: str
    backend: str
    steps_per_actor: dict[str, int] = field(default_factory=dict)
    raw_interleavings: int = 0
    raw_exact: bool = False
    explored: int = 0
    blocked: int = 0
    outside_bound: int = 0
    repeated: int = 0
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
    #: the names of the scripts the recorded runs ran (a step's ``scripts``): which of a script set an
    #: exploration exercised (``emqlab check`` tells a scenario that never runs a replaced script)
    scripts_run: frozenset[str] = field(default_factory=frozenset, repr=False)
    #: the times a run was run again from its start after a run-scoped server error (:data:`RUN_RETRIES`),
    #: by cause: a retried run that then completed counts like any other; one that never did is in ``aborted``
    retried: dict[Abort, int] = field(default_factory=dict)

    @property
    def executed(self) -> int:
        """Every run the search started: kept, blocked by a sleep set, beyond the bound, repeating a kept
        trace, or aborted."""
        return self.explored + self.blocked + self.outside_bound + self.repeated + self.aborted_runs

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
        """Runs executed (:attr:`executed`: kept, blocked, beyond the bound, aborted) per second of wall time."""
        return self.executed / self.elapsed_s if self.elapsed_s else 0.0

    def share(self, kind: str) -> float:
        """The fraction of the covered interleavings that show ``kind``."""
        if self.raw_exact and self.raw_interleavings:
            return self.interleavings_with.get(kind, 0) / self.raw_interleavings
        return self.runs_with.get(kind, 0) / max(1, self.explored)

    def claims(self) -> dict[str, Any]:
        """What the exploration says about the system, without how much work it took: the same on every
        backend and with or without reduction (where the counts are exact)."""
        return self.claims_of(self.to_dict())

    @staticmethod
    def claims_of(d: dict[str, Any]) -> dict[str, Any]:
        """:meth:`claims` of the report whose :meth:`to_dict` (a JSON report, as ``--json`` prints it) is ``d``."""
        inter = d["interleavings"]
        return {"scenario": d["scenario"], "mode": d["mode"], "strategy": d["strategy"],
                "steps_per_actor": d["steps_per_actor"],
                "interleavings": {k: inter[k] for k in ("raw", "raw_exact", "distinct_outcomes", "complete")},
                "interleavings_with": d["interleavings_with"], "min_preemptions": d["min_preemptions"],
                "witnesses": d["witnesses"], "infrastructure": {k: d["infrastructure"][k]
                                                                for k in ("aborted_runs", "stopped")}}

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "mode": self.mode, "strategy": self.strategy, "backend": self.backend,
            "params": self.params, "steps_per_actor": self.steps_per_actor,
            "interleavings": {"raw": self.raw_interleavings, "raw_exact": self.raw_exact,
                              "explored": self.explored, "blocked": self.blocked,
                              "outside_bound": self.outside_bound, "repeated": self.repeated,
                              "executed": self.executed,
                              "distinct_outcomes": self.distinct_outcomes,
                              # (every interleaving covered: a sampled strategy's never are, whatever it ran)
                              "complete": self.complete and self.strategy not in SAMPLED,
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

    @classmethod
    def merge(cls, parts: Sequence[Part], *, scenario: str, mode: str, strategy: str, backend: str,
              order: Sequence[str], replay: Callable[[str, str, str], History], params: dict[str, Any] | None = None,
              raw: int | None = None, reduction: str | None = None, warnings: Sequence[str] = (),
              elapsed_s: float = 0.0) -> Report:
        """One report from the ``parts`` of an exploration (one part for a search in one process), in part
        order (so the same whatever ran them, wherever): their counts added up, their final states united, the
        witness of each anomaly the least (preemptions, steps, schedule in scenario order) over the parts.
        ``replay(kind, schedule, ran)`` gives the witness's history (``ran``: the schedule of the run that
        showed it); when it raises an :data:`INFRASTRUCTURE` error the report keeps the witness's schedule
        only (``unreplayed``) and says the exploration stopped.

        ``raw`` replaces the parts' summed interleavings (a sampled strategy's estimate), ``reduction`` the
        default (``source-dpor`` for an exhaustive search, else ``off``); ``params``, ``warnings`` and
        ``elapsed_s`` are taken as given."""
        complete, stopped = True, None
        explored = blocked = outside = repeated = summed = executed = 0
        steps: dict[str, int] = {a: 0 for a in order}
        runs_with: dict[str, int] = {}
        inter_with: dict[str, int] = {}
        outcomes: set[Any] = set()
        scripts_run: set[str] = set()
        results: dict[str, Counter[str]] = {a: Counter() for a in order}
        codes: dict[str, Counter[Outcome]] = {a: Counter() for a in order}
        aborted: dict[Abort, int] = {}
        retried: dict[Abort, int] = {}
        kept: set[str] = set()
        best: dict[str, tuple[int, int, tuple[int, ...], str, str]] = {}
        for p in parts:
            complete = complete and p.complete
            explored += p.explored
            blocked += p.blocked
            outside += p.outside_bound
            repeated += p.repeated
            summed += p.raw
            executed += p.steps_executed
            for a, n in p.steps_per_actor.items():
                steps[a] = max(steps.get(a, 0), n)
            _add(runs_with, p.runs_with)
            _add(inter_with, p.interleavings_with)
            for k, b in p.best.items():
                if k not in best or b[:3] < best[k][:3]:
                    best[k] = b
            outcomes |= p.outcomes
            scripts_run |= p.scripts_run
            for a, c in p.results.items():
                results[a].update(c)
            for a, oc in p.codes.items():
                codes[a].update(oc)
            _add(aborted, p.aborted)
            _add(retried, p.retried)
            stopped = stopped or p.stopped
            for key, rec in p.traces.items():  # a divided search's parts may repeat each other's traces
                if key not in kept:
                    kept.add(key)
                    continue
                explored, repeated, summed = explored - 1, repeated + 1, summed - rec.weight
                for k in rec.kinds:
                    runs_with[k] -= 1
                    inter_with[k] -= rec.weight
                for a, r in rec.results:
                    results[a][r] -= 1
                for a, o in rec.codes:
                    codes[a][o] -= 1
        runs_with = {k: n for k, n in runs_with.items() if n}
        inter_with = {k: n for k, n in inter_with.items() if n}
        for counter in results.values():
            for r in [r for r, n in counter.items() if not n]:
                del counter[r]
        for outcomes_of in codes.values():
            for o in [o for o, n in outcomes_of.items() if not n]:
                del outcomes_of[o]
        witnesses: dict[str, History] = {}
        unreplayed: dict[str, str] = {}
        least: dict[str, int] = {}
        for k, (pre, _n, _rank, schedule, ran) in sorted(best.items()):
            least[k] = pre
            try:
                witnesses[k] = replay(k, schedule, ran)
            except INFRASTRUCTURE as e:  # the server failed the replay: the report says so, without this witness
                stopped = stopped or Abort.of(e)[0]
                complete = False
                unreplayed[k] = schedule
        exhaustive = strategy == "exhaustive"
        return cls(scenario, mode, strategy, backend, steps_per_actor=steps,
                   raw_interleavings=summed if raw is None else raw,
                   raw_exact=exhaustive and complete and not aborted, explored=explored, blocked=blocked,
                   outside_bound=outside, repeated=repeated, distinct_outcomes=len(outcomes), runs_with=runs_with,
                   interleavings_with=inter_with, min_preemptions=least, witnesses=witnesses,
                   unreplayed=unreplayed, results={a: dict(sorted(c.items())) for a, c in results.items() if c},
                   codes={a: dict(sorted(c.items(), key=lambda kv: str(kv[0]))) for a, c in codes.items() if c},
                   elapsed_s=elapsed_s, complete=complete,
                   reduction=reduction or ("source-dpor" if exhaustive else "off"), steps_executed=executed,
                   params=dict(params or {}), warnings=list(warnings), outcomes=outcomes, aborted=aborted,
                   stopped=stopped, retried=retried, scripts_run=frozenset(scripts_run))


def _add(into: dict[Any, int], counts: dict[Any, int]) -> None:
    for k, n in counts.items():
        into[k] = into.get(k, 0) + n


@dataclass(frozen=True)
class TraceRecord:
    """What one kept trace added to a search's counts (:attr:`Part.traces`): its interleavings within the
    bound (``weight``), its anomaly kinds, and its run's results and finish outcomes by actor."""

    weight: int
    kinds: tuple[str, ...]
    results: tuple[tuple[str, str], ...]
    codes: tuple[tuple[str, Outcome], ...]

    @classmethod
    def of(cls, h: History, weight: int) -> TraceRecord:
        results = tuple((a, str(r)) for a, res in h.results.items() for r in res)
        codes = tuple((a, r.outcome) for a, res in h.results.items() for r in res
                      if r.kind in ("finish", "cancel") and r.outcome is not None)
        return cls(weight, tuple(h.kinds), results, codes)


@dataclass
class Part:
    """What one search found, or one part of a divided exploration (:mod:`emqlab.explore.parts`): the
    counters of its :class:`Report`, the best witness key per anomaly (the merge replays the winner), and
    where and how it ran. :meth:`Report.merge` builds one report from parts."""

    index: int
    complete: bool = True
    started: bool = True
    explored: int = 0
    blocked: int = 0
    outside_bound: int = 0
    repeated: int = 0
    raw: int = 0
    steps_executed: int = 0
    steps_per_actor: dict[str, int] = field(default_factory=dict)
    runs_with: dict[str, int] = field(default_factory=dict)
    interleavings_with: dict[str, int] = field(default_factory=dict)
    #: kind -> (preemptions, steps, rank, witness schedule, schedule of the run that showed it)
    best: dict[str, tuple[int, int, tuple[int, ...], str, str]] = field(default_factory=dict)
    outcomes: set[Any] = field(default_factory=set)
    results: dict[str, dict[str, int]] = field(default_factory=dict)
    codes: dict[str, dict[Outcome, int]] = field(default_factory=dict)
    #: the scripts its recorded runs ran (Report.scripts_run)
    scripts_run: set[str] = field(default_factory=set)
    longest: int = 0
    #: a PCT part's change-point range (:attr:`emqlab.explore.pct.PCT.k`): its bound per run divides by it
    #: where it is longer than the longest run
    k: int = 0
    seconds: float = 0.0
    worker: str = ""
    peak_rss_kb: int = 0
    #: the base of the queue it ran under (``emq:{q-1a2b3c4d}:`` on a live server)
    queue: str = ""
    #: CPU seconds the part took in its worker (wall ``seconds`` also counts waiting for a shared core)
    cpu_s: float = 0.0
    #: the nodes it handed on (:class:`emqlab.explore.parts.Donor`): each a prefix (schedule string) and the
    #: node's branch (:class:`emqlab.explore.tree.Branch`)
    donated: list[tuple[str, Any]] = field(default_factory=list)
    #: runs infrastructure errors aborted, by cause, and the one that stopped it (Report.aborted, .stopped)
    aborted: dict[Abort, int] = field(default_factory=dict)
    stopped: Abort | None = None
    #: a bounded or divided exhaustive search's kept traces (by their earliest least-preemption
    #: interleaving), with what each added to the counts: the merge sets aside a trace two parts both kept
    traces: dict[str, TraceRecord] = field(default_factory=dict)
    #: runs run again after a run-scoped server error, by cause (Report.retried)
    retried: dict[Abort, int] = field(default_factory=dict)
    #: how many nodes it handed on through the worker's channel (:data:`~emqlab.explore.parts._back`) instead
    #: of in ``donated``
    streamed: int = 0
    #: the server refused this worker a queue of its own (registering it got a server error, e.g. OOM while
    #: the other queues hold their keys): the part did not start, and the coordinator runs it itself
    refused: str | None = None
    #: a divided exhaustive search's races that ask for children at nodes it does not own
    #: (:class:`emqlab.explore.tree.Request`), and what it did at the node handed on to it
    #: (:class:`emqlab.explore.tree.NodeState`)
    requests: list[Any] = field(default_factory=list)
    root_state: Any = None


def multinomial(counts: list[int]) -> int:
    """(n1 + n2 + …)! / (n1! n2! …): the number of interleavings of sequences of these lengths."""
    total = math.factorial(sum(counts))
    for c in counts:
        total //= math.factorial(c)
    return total


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
        # need[e][b]: how many of lane b's events must have run before event e can: one more than the position
        # of lane b's latest event among e's predecessors (a lane's events are in run order: its highest bit)
        masks = [sum(1 << i for i in lane) for lane in self.lanes]
        self.need: dict[int, tuple[int, ...]] = {}
        for e in range(len(actors)):
            bits = preds[e]
            self.need[e] = tuple(pos_of[(bits & m).bit_length() - 1][1] + 1 if bits & m else 0 for m in masks)
        # ``kills``: actor -> the event (a crash) that ended it while it still had a step to take; until that
        # event has run, switching away from the actor is a preemption even after its last event
        self.killed: dict[int, tuple[int, int]] = {}
        self._memo: dict[tuple[tuple[int, ...], int], int] = {}
        for a, e in (kills or {}).items():
            if a in idx:
                self.killed[idx[a]] = pos_of[e]
        # what the next event of each lane waits for in the other lanes: (lane, events) where events > 0
        # (its own lane's earlier events are implied by the position); and the lanes movable from each
        # position, remembered: both searches below meet every position many times
        self._waits: list[list[tuple[tuple[int, int], ...]]] = [
            [tuple((b, n) for b, n in enumerate(self.need[e]) if n and b != lane) for e in self.lanes[lane]]
            for lane in range(len(self.lanes))]
        self._mv: dict[tuple[int, ...], list[int]] = {}
        # with no preemption left, a lane that still runs must go on while it can: the searches below jump to
        # where it stops, and remember only the positions where no lane runs any more (a free choice): the
        # completions from each (:meth:`_free`), and whether there is one (:meth:`_free_ok`)
        self._frees: dict[tuple[int, ...], int] = {self.lengths: 1}
        self._oks: dict[tuple[int, ...], bool] = {self.lengths: True}

    def _moves(self, pos: tuple[int, ...]) -> list[int]:
        found = self._mv.get(pos)
        if found is not None:
            return found
        out = []
        lengths, waits = self.lengths, self._waits
        for lane, k in enumerate(pos):
            if k < lengths[lane]:
                for b, n in waits[lane][k]:
                    if pos[b] < n:
                        break
                else:
                    out.append(lane)
        self._mv[pos] = out
        return out

    def _cost(self, pos: tuple[int, ...], last: int, lane: int) -> int:
        if last < 0 or lane == last:
            return 0
        return int(self._running(pos, last))

    def _running(self, pos: tuple[int, ...], lane: int) -> bool:
        """Whether switching away from ``lane`` at ``pos`` is a preemption: it has events left, or it was
        killed and its kill has not run yet."""
        if pos[lane] < self.lengths[lane]:
            return True
        kill = self.killed.get(lane)
        return kill is not None and pos[kill[0]] <= kill[1]

    def _stop(self, pos: tuple[int, ...], lane: int, k: int) -> tuple[int, ...]:
        """Where ``lane``, at its event ``k`` with the other lanes at ``pos``, stops when it goes on while
        it can (at its end, or at an event that waits for another lane)."""
        n, waits = self.lengths[lane], self._waits[lane]
        while k < n:
            for b, need in waits[k]:
                if pos[b] < need:
                    return pos[:lane] + (k,) + pos[lane + 1:]
            k += 1
        return pos[:lane] + (k,) + pos[lane + 1:]

    def _zero(self, pos: tuple[int, ...], lane: int, k: int) -> int:
        """The completions with no more preemptions once ``lane`` took an event and is at its event ``k``
        (the other lanes at ``pos``)."""
        at = self._stop(pos, lane, k)
        if at == self.lengths:
            return 1
        return 0 if self._running(at, lane) else self._free(at)

    def _free(self, pos: tuple[int, ...]) -> int:
        """The completions with no more preemptions from ``pos``, where no lane runs (any may move)."""
        found = self._frees.get(pos)
        if found is None:
            found = self._frees[pos] = sum(self._zero(pos, lane, pos[lane] + 1) for lane in self._moves(pos))
        return found

    def _zero_ok(self, pos: tuple[int, ...], last: int) -> bool:
        """Whether an interleaving completes from ``pos`` (after lane ``last``) with no more preemptions."""
        if last >= 0 and self._running(pos, last):
            return self._ok_from(pos, last, pos[last])
        return self._free_ok(pos)

    def _ok_from(self, pos: tuple[int, ...], lane: int, k: int) -> bool:
        """Whether one completes with no more preemptions once ``lane`` took an event and is at its event
        ``k`` (the other lanes at ``pos``)."""
        at = self._stop(pos, lane, k)
        if at == self.lengths:
            return True
        return not self._running(at, lane) and self._free_ok(at)

    def _free_ok(self, pos: tuple[int, ...]) -> bool:
        found = self._oks.get(pos)
        if found is None:
            found = self._oks[pos] = any(self._ok_from(pos, lane, pos[lane] + 1) for lane in self._moves(pos))
        return found

    def counts(self, bound: int | None) -> tuple[int, int]:
        """(interleavings of this trace, those with at most ``bound`` preemptions)."""
        total = self._every()
        return total, total if bound is None else self.count_within(bound)

    def _every(self) -> int:
        end = self.lengths
        moves = self._moves
        ways: dict[tuple[int, ...], int] = {end: 1}

        def every(pos: tuple[int, ...]) -> int:
            # the completions from ``pos``, whatever they cost (a position alone decides them)
            found = ways.get(pos)
            if found is None:
                found = ways[pos] = sum(every(pos[:lane] + (pos[lane] + 1,) + pos[lane + 1:]) for lane in moves(pos))
            return found

        return every(tuple(0 for _ in self.order))

    def count_within(self, bound: int | None) -> int:
        """The interleavings of this trace with at most ``bound`` preemptions (``None``: all of them)."""
        if bound is None:
            return self._every()
        if bound == 0:
            return self._free(tuple(0 for _ in self.order))
        end = self.lengths
        moves, zero = self._moves, self._zero
        cheap: dict[tuple[tuple[int, ...], int, int], int] = {}

        def within(pos: tuple[int, ...], last: int, budget: int) -> int:
            # the completions from ``pos`` (after lane ``last``) with at most ``budget`` (> 0) more preemptions
            if pos == end:
                return 1
            key = (pos, last, budget)
            found = cheap.get(key)
            if found is None:
                found = 0
                switch = last >= 0 and self._running(pos, last)  # (what a move to another lane costs: _cost)
                for lane in moves(pos):
                    left = budget - 1 if switch and lane != last else budget
                    if left > 0:
                        found += within(pos[:lane] + (pos[lane] + 1,) + pos[lane + 1:], lane, left)
                    elif left == 0:
                        found += zero(pos, lane, pos[lane] + 1)
                cheap[key] = found
            return found

        return within(tuple(0 for _ in self.order), -1, bound)

    def _least(self, pos: tuple[int, ...], last: int) -> int:
        """The fewest preemptions that complete an interleaving from ``pos`` after lane ``last`` ran."""
        memo = self._memo
        key = (pos, last)
        if key not in memo:
            memo[key] = 0 if pos == self.lengths else min(
                self._cost(pos, last, lane) + self._least(_adv(pos, lane), lane) for lane in self._moves(pos))
        return memo[key]

    #: :meth:`best` looks for interleavings of at most 0, 1, … this many preemptions, each search kept to
    #: the positions that budget reaches, before it computes the fewest over every position
    SHALLOW = 3

    def _within(self, pos: tuple[int, ...], last: int, budget: int,
                memo: dict[tuple[tuple[int, ...], int], tuple[int, int]]) -> bool:
        """Whether an interleaving completes from ``pos`` (after lane ``last``) with at most ``budget``
        preemptions. ``memo`` holds, per position, the largest budget known to fall short and the smallest
        known to be enough (a budget between them is searched)."""
        if pos == self.lengths:
            return True
        if budget == 0:
            return self._zero_ok(pos, last)
        key = (pos, last)
        short, enough = memo.get(key, (-1, 1 << 30))
        if budget <= short:
            return False
        if budget >= enough:
            return True
        found = False
        switch = last >= 0 and self._running(pos, last)  # (what a move to another lane costs: _cost)
        for lane in self._moves(pos):
            left = budget - 1 if switch and lane != last else budget
            if left > 0:
                found = self._within(_adv(pos, lane), lane, left, memo)
            elif left == 0:
                found = self._ok_from(pos, lane, pos[lane] + 1)
            if found:
                break
        short, enough = memo.get(key, (short, enough))
        memo[key] = (short, min(enough, budget)) if found else (max(short, budget), enough)
        return found

    def best(self) -> tuple[int, list[str]]:
        """The fewest preemptions of any interleaving, and the earliest such interleaving in scenario
        order."""
        pos, last = tuple(0 for _ in self.order), -1
        short: dict[tuple[tuple[int, ...], int], tuple[int, int]] = {}
        fits: Callable[[tuple[int, ...], int, int], bool] | None = None
        for k in range(self.SHALLOW + 1):
            if self._within(pos, last, k, short):
                total = k
                fits = lambda p, a, b: self._within(p, a, b, short)  # noqa: E731
                break
        else:
            total = self._least(pos, last)
        out: list[str] = []
        budget = total
        while pos != self.lengths:
            for lane in self._moves(pos):
                c = self._cost(pos, last, lane)
                nxt = _adv(pos, lane)
                if c <= budget and (fits(nxt, lane, budget - c) if fits is not None
                                    else c + self._least(nxt, lane) == budget):
                    out.append(self.order[lane])
                    pos, last, budget = nxt, lane, budget - c
                    break
        return total, out

    def least_starting(self, prefix: Sequence[str]) -> int | None:
        """The fewest preemptions of an interleaving of this trace that begins with ``prefix`` (actors, one
        per step), or None when none does."""
        idx = {a: i for i, a in enumerate(self.order)}
        pos, last, spent = tuple(0 for _ in self.order), -1, 0
        for a in prefix:
            lane = idx.get(a)
            if lane is None or lane not in self._moves(pos):
                return None
            spent += self._cost(pos, last, lane)
            pos, last = _adv(pos, lane), lane
        return spent + self._least(pos, last)


def _adv(pos: tuple[int, ...], lane: int) -> tuple[int, ...]:
    nxt = list(pos)
    nxt[lane] += 1
    return tuple(nxt)


__all__ = ["Abort", "INFRASTRUCTURE", "Part", "RUN_RETRIES", "Report", "SAMPLED", "Trace", "TraceRecord", "multinomial"]
