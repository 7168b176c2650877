"""The home of the exhaustive strategy: every interleaving, with dynamic partial-order reduction (one run
per trace) or every schedule (:mod:`emqlab.explore.strategy` lists the others).

Every run starts from the scenario's initial state (the runner resets the queue's keys), so no state leaks
between runs. Exploration is *stateless* in the sense of CHESS and loom: a run is re-executed from the
start along a schedule prefix rather than restored from a snapshot.

**Reduction.** Two steps of different actors are *independent* when their footprints — the keys each read
and wrote, observed as it ran (:mod:`emqlab.engine.footprints`) — do not conflict: running them in either order
gives the same state and the same replies. Interleavings that differ only in the order of independent
steps form one Mazurkiewicz trace and end in the same state with the same anomalies. With ``reduce=True``
(the default) the exhaustive search runs Source-DPOR (Abdulla, Aronis, Jonsson, Sagonas, "Optimal dynamic
partial order reduction", POPL 2014, Algorithm 1: source sets and sleep sets): at least one run per trace,
and never two complete runs of one trace. A run that a sleep set stops before it completes is *blocked* and
counted as such.

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

**Infrastructure errors** (:class:`emqlab.backend.faults.ServerFault`, a lost connection) are never a step's
answer. One whose scope is the run (:class:`emqlab.backend.faults.FaultScope`: OOM, a BUSY script that SCRIPT
KILL stopped, …) has the exhaustive search run that run again from its start, up to
:data:`~emqlab.explore.report.RUN_RETRIES` times (:attr:`Report.retried`; the same choices, so a run that then
completes is as true as any other); when it comes back each time it *aborts* that run: it is counted in
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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from emqlab.engine import footprints as _fp
from emqlab.engine.actors import Op
from emqlab.engine.footprints import Footprint
from emqlab.engine.runner import Runner
from emqlab.explore.report import INFRASTRUCTURE, Part, Report, Trace
from emqlab.explore.strategy import Progress, Strategy
from emqlab.protocol.schedules import ScheduleError
from emqlab.protocol.schedules import preemptions as _preemptions


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


@dataclass(frozen=True)
class Branch:
    """A node of the exhaustive search handed to another search (:class:`emqlab.explore.parts.Donor`): its sleep
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


def _path(nodes: list[_Node], keep: int) -> list[str]:
    """The choices that lead to node ``keep`` on the current path."""
    out = []
    for n in nodes[:keep]:
        assert n.current is not None
        out.append(n.current)
    return out



class Exhaustive(Strategy):
    """The exhaustive strategy over one :class:`Runner` (the module docstring): :meth:`exhaustive` for a whole
    exploration, :meth:`search` for one part of a divided one."""

    name = "exhaustive"

    def __init__(self, runner: Runner, *, progress: Progress | None = None) -> None:
        super().__init__(runner, progress=progress)
        #: a divided exploration's subtree: called with the search path and the root's length after each
        #: run; it may mark children of a path node explored because another part will explore them
        #: (:class:`emqlab.explore.parts.Donor`)
        self.donate: Callable[[list[_Node], int], None] | None = None
        #: crash actor -> the actor it ends
        self._crashes = {a.id: a.of for a in runner.scenario.actors if a.kind == "crash" and a.of}

    def exhaustive(self, *, preemption_bound: int | None = None, reduce: bool = True,
                   max_runs: int | None = None) -> Report:
        """Every interleaving (up to ``preemption_bound`` preemptions). With ``reduce``, one run per
        Mazurkiewicz trace (Source-DPOR) and exact counts; without, every schedule is run. Stops after
        ``max_runs`` complete runs (``complete`` is then False and counts are lower bounds)."""
        started = time.perf_counter()
        if reduce:
            self._dpor(preemption_bound, max_runs)
        else:
            self._dfs(preemption_bound, max_runs)
        return self._report(started, {"preemption_bound": preemption_bound, "reduce": reduce, "max_runs": max_runs},
                            reduction="source-dpor" if reduce else "off", replay_witnesses=reduce)

    def search(self, root: Sequence[str] = (), branch: Branch | None = None, *, bound: int | None = None,
               max_runs: int | None = None, donate: Callable[[list[_Node], int], None] | None = None) -> Part:
        """One part of a divided exhaustive search (:mod:`emqlab.explore.parts`): Source-DPOR over the runs
        that begin with ``root`` (a schedule prefix), at ``branch`` (a node another search handed on), within
        ``bound`` preemptions and ``max_runs`` complete runs; ``donate`` is called after each run with the
        search path and the root's length (:class:`emqlab.explore.parts.Donor`). Returns what it found."""
        self.donate = donate
        try:
            self._dpor(bound, max_runs, root=root, branch=branch)
        finally:
            self.donate = None
        return self.part()

    def _dfs(self, bound: int | None, max_runs: int | None) -> None:
        """Every schedule with at most ``bound`` preemptions, depth-first, continuing the same actor first."""
        r = self.runner
        t = self.tally
        frames: list[_Node] = []
        prefix: list[str] = []
        tries = 0  # retries of this run (run-scoped server errors)
        while True:
            try:
                r.reset()
                for c in prefix:
                    r.step(c)
                t.steps_executed += len(prefix)
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
                    t.steps_executed += 1
                self._record(r.history(), r.preemptions, r.choices)
                t.raw += 1
                if max_runs is not None and t.explored >= max_runs:
                    t.complete = False
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
                t.complete = False
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
        reverse one of them are left to the other parts (:mod:`emqlab.explore.divide`). With ``branch`` too,
        the node at the end of ``root`` starts as another search left it: its sleep set, the children it
        explored (with their footprints: they sleep in the later ones) and the children to explore here, in
        order."""
        r = self.runner
        t = self.tally
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
            t.steps_executed += cut
        actors: list[str] = []  # events of the current path: who took each
        fps: list[Footprint] = []
        preds: list[int] = []  # bit set of happens-before predecessors of each event
        #: steps that ended another actor: (the step, the actor, its next step's footprint as declared)
        ended: list[tuple[int, str, Footprint]] = []
        keep = 0
        tries = 0  # retries of this run (run-scoped server errors)
        while True:
            at = keep  # the node whose step the run is taking: an infrastructure error loses its subtree
            try:
                r.reset()
                for c in _path(nodes, keep):
                    r.step(c)
                t.steps_executed += keep
                del actors[keep:], fps[keep:], preds[keep:]
                ended[:] = [x for x in ended if x[0] < keep]
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
                    target = self._crashes.get(p)
                    op = r.pending.get(target) if target is not None else None
                    r.step(p)
                    t.steps_executed += 1
                    fp = r.footprints[-1]
                    node.fps[p] = fp
                    node.done.add(p)
                    self._races(nodes, actors, fps, preds, p, fp)
                    if op is not None and target is not None and target not in r.pending:
                        # p ended the target with a step still to take: a race with that step
                        fa = footprint(op, r.keys.base) | Footprint(reads=frozenset({("proc", target)}))
                        ended.append((depth, target, fa))
                    actors.append(p)
                    fps.append(fp)
                    # sleeping actors stay asleep past p only if independent of it; earlier siblings join (an
                    # actor whose step an infrastructure error aborted has no footprint: it stays awake)
                    node.child_sleep = {q: f for q, f in {**node.sleep, **{q: node.fps[q] for q in node.done
                                                                            if q != p and q in node.fps}}.items()
                                        if q != p and not f.conflicts(fp)}
                    depth += 1
                at = len(nodes)
                for k, a, fa in ended:
                    if k >= cut:
                        self._ended(nodes[k], actors, fps, preds, k, a, fa)
                if blocked:
                    t.blocked += 1
                else:
                    self._record_trace(actors, preds, bound)
                    if max_runs is not None and t.explored >= max_runs:
                        t.complete = False
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
                t.complete = False
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

    def _ended(self, node: _Node, actors: list[str], fps: list[Footprint], preds: list[int], k: int, a: str,
               fa: Footprint) -> None:
        """Step ``k`` ended actor ``a`` (a crash) while ``a`` had a step to take (footprint ``fa``, as
        declared): a race with that step, which no run where step ``k`` comes first ever shows — the
        disabling transitions of Flanagan and Godefroid's DPOR (POPL 2005). It is reversed as Source-DPOR
        reverses any other: ``a``'s step is taken as if it came at the end of this run, ``v`` = the events
        after ``k`` that do not happen after it, then that step; one of ``v``'s initials joins node ``k``'s
        backtrack set unless one is there already."""
        vmask = 0
        initials: list[str] = []
        for m in range(k + 1, len(actors)):
            if preds[m] >> k & 1:
                continue
            if not (preds[m] & vmask) and actors[m] not in initials:
                initials.append(actors[m])
            vmask |= 1 << m
        if not any(fps[m].conflicts(fa) for m in range(k + 1, len(actors)) if vmask >> m & 1):
            initials.append(a)
        if not any(q in node.backtrack for q in initials):
            node.backtrack.append(a if a in initials else min(initials, key=self.order.index))

    def _record_trace(self, actors: list[str], preds: list[int], bound: int | None) -> None:
        t = self.tally
        trace = Trace(actors, preds, self.order, kills=self.runner.kills)
        least, schedule = trace.best()
        if bound is not None and least > bound:
            t.outside_bound += 1
            return
        _total, within = trace.counts(bound)
        h = self.runner.history()
        t.raw += within
        self._record(h, least, schedule, weight=within)


__all__ = ["Branch", "Exhaustive", "footprint", "independent"]
