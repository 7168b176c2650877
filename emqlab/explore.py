"""Exploring interleavings: exhaustive DFS (optional preemption bound, Redis-key-aware partial-order
reduction with sleep sets), random(seed), PCT(seed, depth) and replay(schedule).

Every run starts from the scenario's initial state (the runner resets the queue's keys), so no state leaks
between runs. Exploration is *stateless* in the sense of CHESS and loom: a run is re-executed from the
start along a schedule prefix rather than restored from a snapshot.

Partial-order reduction: two pending steps are *independent* when they are single commands of different
actors that touch disjoint keys, or only read (Redis commands' key positions and read/write flags from the
command table; scripts and clock events are treated as touching every key). Sleep sets then skip
interleavings that only reorder independent steps: they reach the same state with the same replies. With
``reduce=False`` every interleaving is run.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .actors import Op
from .history import History
from .scenario import Scenario
from .schedule import READ_ONLY as _READ_ONLY
from .schedule import Runner, ScheduleError, command_keys, format_schedule, parse_schedule

STRATEGIES = ("exhaustive", "random", "pct", "replay")

_ALL = ("*", "*")

Key = tuple[str, str]  # (kind, name): ("q", "wait"), ("job", "1"), ("lock", "1"), ("jobsub", "1:logs")

#: What each script may read and write, as relative keys; "*" in the name matches any job id. An
#: over-approximation from the scripts' code (a footprint that is too large only costs pruning).
_TRIM = [("q", "meta"), ("q", "events")]
SCRIPT_FOOTPRINTS: dict[str, tuple[list[Key], list[Key]]] = {
    "moveStalledJobsToWait": (
        [("lock", "*"), ("q", "meta"), ("q", "paused")],
        [("q", "stalled"), ("q", "stalled-check"), ("q", "wait"), ("q", "active"), ("q", "marker"),
         ("job", "*"), *_TRIM],
    ),
    "moveToActive": (
        [("q", "paused"), ("q", "meta")],
        [("q", "wait"), ("q", "active"), ("q", "prioritized"), ("q", "pc"), ("q", "delayed"), ("q", "marker"),
         ("q", "limiter"), ("job", "*"), ("lock", "*"), *_TRIM],
    ),
    "addStandardJob": ([("q", "paused")], [("q", "id"), ("q", "wait"), ("q", "marker"), ("job", "*"),
                                          ("q", "completed"), *_TRIM]),
    "addDelayedJob": ([], [("q", "id"), ("q", "delayed"), ("q", "marker"), ("job", "*"), ("q", "completed"),
                           *_TRIM]),
    "addPrioritizedJob": ([("q", "paused")], [("q", "id"), ("q", "prioritized"), ("q", "pc"), ("q", "marker"),
                                             ("job", "*"), ("q", "completed"), *_TRIM]),
}


def _classify(rel: str) -> Key:
    """``wait`` and ``metrics:completed`` → queue keys; ``1`` → a job hash; ``1:lock`` → a lock; ``1:logs`` → a
    job's other keys."""
    head, sep, tail = rel.partition(":")
    if head in _QUEUE_NAMES:
        return ("q", rel)
    if not sep:
        return ("job", rel)
    return ("lock", head) if tail == "lock" else ("jobsub", rel)


_QUEUE_NAMES = frozenset(
    "wait active paused prioritized delayed completed failed waiting-children stalled stalled-check limiter "
    "meta id pc events marker repeat metrics".split()
)


@dataclass(frozen=True)
class Footprint:
    """The keys a step may read and may write (relative to the queue's base)."""

    reads: frozenset[Key]
    writes: frozenset[Key]

    @classmethod
    def everything(cls) -> Footprint:
        return cls(frozenset([_ALL]), frozenset([_ALL]))


def _match(a: Key, b: Key) -> bool:
    if a == _ALL or b == _ALL:
        return True
    return a[0] == b[0] and (a[1] == b[1] or a[1] == "*" or b[1] == "*")


def footprint(op: Op | None, base: str = "") -> Footprint:
    """The keys an op may touch: exact for one command (key positions from the command table; read-only
    commands only read), from :data:`SCRIPT_FOOTPRINTS` for a known script (plus its KEYS), the lock key for
    a lease lapsing, everything otherwise."""
    if op is None:
        return Footprint.everything()

    def rel(k: bytes | str) -> str:
        t = k.decode("utf-8", "replace") if isinstance(k, bytes) else k
        return t[len(base):] if base and t.startswith(base) else t

    if op.kind == "clock" and op.label == "lapse" and op.section:
        job = op.section.split(":", 1)[0]
        return Footprint(frozenset(), frozenset([("lock", job)]))
    if op.kind == "script":
        if op.label == "extendLock" and op.build is not None:
            call = op.build(0)
            ks = frozenset(_classify(rel(k)) for k in call.keys)
            return Footprint(ks, ks)
        fp = SCRIPT_FOOTPRINTS.get(op.label)
        if fp is None:
            return Footprint.everything()
        return Footprint(frozenset(fp[0]), frozenset(fp[1]))
    if op.kind != "command" or op.command is None:
        return Footprint.everything()
    keys = command_keys(op.command)
    if keys is None:
        return Footprint.everything()
    ks = frozenset(_classify(rel(k)) for k in keys)
    if op.command[0].upper() in _READ_ONLY:
        return Footprint(ks, frozenset())
    return Footprint(ks, ks)


def independent(a: Op | None, b: Op | None, base: str = "") -> bool:
    """True when the two ops commute: neither writes a key the other reads or writes."""
    fa, fb = footprint(a, base), footprint(b, base)
    for w in fa.writes:
        if any(_match(w, k) for k in fb.reads | fb.writes):
            return False
    for w in fb.writes:
        if any(_match(w, k) for k in fa.reads | fa.writes):
            return False
    return True


@dataclass
class Report:
    """What an exploration found. Counts are of runs (one run = one complete interleaving)."""

    scenario: str
    mode: str
    strategy: str
    backend: str
    steps_per_actor: dict[str, int] = field(default_factory=dict)
    raw_interleavings: int = 0
    explored: int = 0
    pruned: int = 0
    distinct_outcomes: int = 0
    runs_with: dict[str, int] = field(default_factory=dict)
    min_preemptions: dict[str, int] = field(default_factory=dict)
    witnesses: dict[str, History] = field(default_factory=dict)
    results: dict[str, dict[str, int]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    complete: bool = True
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def anomaly_kinds(self) -> list[str]:
        return sorted(k for k, n in self.runs_with.items() if n)

    @property
    def runs_per_second(self) -> float:
        return self.explored / self.elapsed_s if self.elapsed_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "mode": self.mode, "strategy": self.strategy, "backend": self.backend,
            "params": self.params, "steps_per_actor": self.steps_per_actor,
            "interleavings": {"raw": self.raw_interleavings, "explored": self.explored, "pruned": self.pruned,
                              "distinct_outcomes": self.distinct_outcomes, "complete": self.complete},
            "runs_with": dict(sorted(self.runs_with.items())),
            "min_preemptions": dict(sorted(self.min_preemptions.items())),
            "results": self.results,
            "witnesses": {k: {"schedule": h.schedule, "anomalies": [a for a in h.anomalies if a["kind"] == k],
                              "steps": len(h.steps)} for k, h in sorted(self.witnesses.items())},
            "elapsed_s": round(self.elapsed_s, 4), "runs_per_second": round(self.runs_per_second, 1),
        }


def multinomial(counts: list[int]) -> int:
    """(n1 + n2 + …)! / (n1! n2! …): the number of interleavings of sequences of these lengths."""
    total = math.factorial(sum(counts))
    for c in counts:
        total //= math.factorial(c)
    return total


class Explorer:
    """Runs a strategy over one :class:`Runner` and collects a :class:`Report`.

    ``progress(done, total_or_None)`` is called after each run (for progress bars)."""

    def __init__(self, runner: Runner, *, progress: Callable[[int, int | None], None] | None = None) -> None:
        self.runner = runner
        self.progress = progress
        from .backends import describe

        sc = runner.scenario
        self.report = Report(sc.name, runner.mode, "", describe(runner.conn))
        self._outcomes: set[str] = set()
        self._results: dict[str, Counter[str]] = {a.id: Counter() for a in sc.actors}

    # -- bookkeeping -------------------------------------------------------------------------------
    def _record(self, h: History, preempt: int) -> None:
        rep = self.report
        rep.explored += 1
        counts = Counter(s.actor for s in h.steps)
        grew = False
        for a, n in counts.items():
            if n > rep.steps_per_actor.get(a, 0):
                rep.steps_per_actor[a] = n
                grew = True
        if grew:
            rep.raw_interleavings = multinomial(list(rep.steps_per_actor.values()))
        kinds = sorted({a["kind"] for a in h.anomalies})
        for k in kinds:
            rep.runs_with[k] = rep.runs_with.get(k, 0) + 1
            best = rep.witnesses.get(k)
            key = (preempt, len(h.steps), h.schedule)
            if best is None or key < (rep.min_preemptions[k], len(best.steps), best.schedule):
                rep.witnesses[k] = h
                rep.min_preemptions[k] = preempt
        self._outcomes.add(repr(sorted(h.final["placements"].items())) + repr(sorted(h.final["locks"].items())))
        for actor, res in h.results.items():
            for r in res:
                self._results[actor][r] += 1
        if self.progress:
            self.progress(rep.explored, None)

    def _finish(self, started: float) -> Report:
        rep = self.report
        rep.elapsed_s = time.perf_counter() - started
        rep.distinct_outcomes = len(self._outcomes)
        rep.results = {a: dict(sorted(c.items())) for a, c in self._results.items() if c}
        for k in rep.runs_with:
            rep.runs_with.setdefault(k, 0)
        return rep

    def _measure_default(self) -> None:
        r = self.runner
        r.reset()
        h = r.run()
        counts = Counter(s.actor for s in h.steps)
        self.report.steps_per_actor = {a.id: counts.get(a.id, 0) for a in r.scenario.actors}
        self.report.raw_interleavings = multinomial(list(counts.values()))

    # -- strategies --------------------------------------------------------------------------------
    def exhaustive(self, *, preemption_bound: int | None = None, reduce: bool = True,
                   max_runs: int | None = None) -> Report:
        """Every interleaving (up to ``preemption_bound`` preemptions), depth-first; with ``reduce``, sleep
        sets skip reorderings of independent commands. Stops after ``max_runs`` runs (``complete`` is then
        False)."""
        started = time.perf_counter()
        rep = self.report
        rep.strategy = "exhaustive"
        rep.params = {"preemption_bound": preemption_bound, "reduce": reduce, "max_runs": max_runs}
        self._measure_default()
        r = self.runner
        # frames[d]: the actors enabled at depth d, their pending ops, the sleep set, what was explored
        frames: list[dict[str, Any]] = []
        prefix: list[str] = []
        while True:
            r.reset()
            for c in prefix:
                r.step(c)
            blocked = False
            while not r.done:
                d = len(r.choices)
                sleep = frames[d - 1]["child_sleep"] if d else set()
                frame: dict[str, Any] = {"enabled": list(r.enabled), "ops": dict(r.pending),
                                         "sleep": set(sleep), "done": set()}
                frames.append(frame)
                choice = self._choose(frame, r.choices, r.preemptions, preemption_bound, prefer_prev=True)
                if choice is None:
                    blocked = True
                    break
                self._enter(frame, choice, reduce)
                r.step(choice)
            if blocked:
                rep.pruned += 1
            else:
                self._record(r.history(), r.preemptions)
            if max_runs is not None and rep.explored >= max_runs:
                rep.complete = False
                break
            # backtrack: the deepest frame with an unexplored, awake, in-bound alternative
            explored_path = list(r.choices)
            enabled_at = list(r.enabled_at)
            while frames:
                d = len(frames) - 1
                frame = frames[d]
                head = explored_path[:d]
                used = _preemptions(head, enabled_at[:d])
                alt = self._choose(frame, head, used, preemption_bound, prefer_prev=False)
                if alt is not None:
                    self._enter(frame, alt, reduce)
                    prefix = [*head, alt]
                    break
                frames.pop()
            if not frames:
                break
        return self._finish(started)

    @staticmethod
    def _choose(frame: dict[str, Any], head: list[str], used: int, bound: int | None,
                prefer_prev: bool) -> str | None:
        prev = head[-1] if head else None
        order = list(frame["enabled"])
        if prefer_prev and prev in order:  # continue the same actor first: no preemption
            order.remove(prev)
            order.insert(0, prev)
        for a in order:
            if a in frame["sleep"] or a in frame["done"]:
                continue
            if bound is not None and prev is not None and a != prev and prev in frame["enabled"] and used + 1 > bound:
                continue
            return a
        return None

    def _enter(self, frame: dict[str, Any], choice: str, reduce: bool) -> None:
        frame["done"].add(choice)
        frame["chosen"] = choice
        if reduce:
            op = frame["ops"][choice]
            base = self.runner.keys.base
            frame["child_sleep"] = {x for x in (frame["sleep"] | (frame["done"] - {choice}))
                                    if independent(frame["ops"].get(x), op, base)}
        else:
            frame["child_sleep"] = set()

    def random(self, runs: int, seed: int = 0) -> Report:
        """``runs`` runs, each choosing uniformly among the enabled actors (seeded)."""
        started = time.perf_counter()
        self.report.strategy = "random"
        self.report.params = {"runs": runs, "seed": seed}
        self._measure_default()
        rng = random.Random(seed)
        for _ in range(runs):
            r = self.runner
            r.reset()
            h = r.run(choose=lambda rr: rng.choice(rr.enabled))
            self._record(h, r.preemptions)
        return self._finish(started)

    def pct(self, runs: int, seed: int = 0, depth: int = 2) -> Report:
        """Probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010): random actor priorities and
        ``depth - 1`` priority-change points per run; each run finds a given depth-``d`` bug with
        probability at least 1/(n·k^(d−1)) for n actors and k steps."""
        started = time.perf_counter()
        rep = self.report
        rep.strategy = "pct"
        self._measure_default()
        k = max(1, sum(rep.steps_per_actor.values()))
        n = len(self.runner.scenario.actors)
        rep.params = {"runs": runs, "seed": seed, "depth": depth,
                      "bound_per_run": f"1/({n}*{k}^{depth - 1})",
                      "p_per_run_at_least": 1 / (n * k ** (depth - 1))}
        rng = random.Random(seed)
        for _ in range(runs):
            r = self.runner
            r.reset()
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

            h = r.run(choose=choose)
            self._record(h, r.preemptions)
        return self._finish(started)

    def replay(self, schedule: str) -> Report:
        """One run along ``schedule`` (a schedule string); if it ends before every actor is done, the run
        continues without further preemption. Raises :class:`ScheduleError` for a schedule that does not
        fit the scenario."""
        started = time.perf_counter()
        self.report.strategy = "replay"
        self.report.params = {"schedule": schedule}
        r = self.runner
        choices = parse_schedule(schedule, [a.id for a in r.scenario.actors])
        r.reset()
        h = r.run(choices)
        self._measure_default_from(h)
        self._record(h, r.preemptions)
        return self._finish(started)

    def _measure_default_from(self, h: History) -> None:
        counts = Counter(s.actor for s in h.steps)
        self.report.steps_per_actor = {a.id: counts.get(a.id, 0) for a in self.runner.scenario.actors}
        self.report.raw_interleavings = multinomial(list(counts.values()))


def _preemptions(choices: list[str], enabled_at: list[list[str]]) -> int:
    from .schedule import preemptions

    return preemptions(choices, enabled_at)


def shrink(runner: Runner, history: History, kind: str) -> History:
    """A smaller witness for anomaly ``kind``: the shortest prefix of the schedule that, continued without
    further preemption, still shows the anomaly (fewer preemptions, same anomaly)."""
    choices = parse_schedule(history.schedule)
    best = history
    boundaries = [i for i in range(1, len(choices)) if choices[i] != choices[i - 1]]
    for cut in boundaries:
        runner.reset()
        try:
            h = runner.run(choices[:cut])
        except ScheduleError:
            continue
        if any(a["kind"] == kind for a in h.anomalies):
            if (runner.preemptions, len(h.steps)) <= (len(boundaries) + 1, len(best.steps)):
                best = h
                break
    return best


def explore(scenario: Scenario, mode: str, *, strategy: str = "exhaustive", conn: Any = None,
            runs: int = 100, seed: int = 0, depth: int = 2, preemptions: int | None = None,
            reduce: bool = True, schedule: str | None = None, scripts: Any = None,
            progress: Callable[[int, int | None], None] | None = None) -> Report:
    """One call: build a runner for ``scenario`` in ``mode`` and run ``strategy``. The runner's keys are
    deleted afterwards."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (one of: {', '.join(STRATEGIES)})")
    with Runner(scenario, mode, conn, scripts=scripts) as runner:
        ex = Explorer(runner, progress=progress)
        if strategy == "exhaustive":
            bound = preemptions if preemptions is not None else scenario.preemptions
            rep = ex.exhaustive(preemption_bound=bound, reduce=reduce)
            rep.params["bound_from"] = "option" if preemptions is not None else "scenario"
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


__all__ = ["Explorer", "Report", "explore", "format_schedule", "independent", "multinomial", "shrink"]
