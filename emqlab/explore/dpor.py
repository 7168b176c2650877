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

**Reversals.** Each backtrack entry a race plans keeps that race's reversal (the steps, by actor and
footprint, that put the later step first: :meth:`Exhaustive._plan`), and the run that takes the entry
follows it as far as it can before choosing as usual. A reversal in which a sleeper at that node (its own
sleep set, or a sibling explored there that may sleep below the entry: :meth:`Node.sleepers`) takes a
step commuting with every step before it there is a sleeper's: every run that follows it is equivalent to
one that takes the sleeper's step first, which the search below the sleeper covers (the check of Abdulla et
al.'s wakeup sequences, with strict initials only: :func:`covers` says why). An entry whose every reversal
is a sleeper's is not run at all, so it is counted nowhere (not even as blocked); a conservative entry, or a
child a divided search handed on, always is.

**Counts are exact.** Each complete run stands for its trace; the number of interleavings of a trace is
the number of linear extensions of its happens-before order, counted by dynamic programming over the
actors' positions. Their sum is the exact number of interleavings (``raw``), and the interleavings showing
each anomaly are counted the same way. ``tests/test_reduction.py`` checks both against the unreduced
search.

**A preemption bound** (CHESS's: a switch away from an actor that could still run) cuts the search: no
branch that would take the path past ``K`` preemptions is started, so every run ends within the bound and
:attr:`Report.outside_bound` stays 0 (it counts runs whose trace needs more than ``K``: none can). A trace
counts when one of its interleavings has at most ``K`` preemptions, and only those interleavings are
counted (the same dynamic programming). Source sets and sleep sets do not simply combine with a bound
(Coons, Musuvathi, McKinley, "Bounded partial-order reduction", OOPSLA 2013): the interleaving a race
reversal or a sleep set points to may need more preemptions than the one the search is on. So, under a
bound (bounded partial-order reduction, BPOR):

- *Conservative points*: a race is reversed at its own node with every initial that fits the bound there
  (not one: the one planned may need preemptions further on), and also, always, at the node where the
  switch into the earlier step's actor was made (the start of its run of steps), with the later step's
  actor and every initial: switching there costs no more than the switch that was made
  (:meth:`Exhaustive._plan`). A node's regular entries are explored first. Each part of this rule is
  needed: without it the reduced search loses traces at bound 0 (two-workers, and the random scenarios
  86 and 221 that ``tests/test_reduction_random.py`` holds).
- *Sleep sets*: an explored sibling sleeps below a later one only where moving its step up costs no
  preemption (:meth:`Node.sleeps_free`: taking it and then the later one there costs no more than the
  later one alone). A run may not be stopped merely because it repeats a trace: the races it shows are
  what the conservative points are planned from (random scenario 86 loses a trace otherwise).
- *Repeats*: the runs a sibling left awake may repeat a trace already kept; each is recognised (a trace's
  name is its earliest least-preemption interleaving), counted in :attr:`Report.repeated` and nowhere
  else (a divided search's parts may repeat each other's traces, which :meth:`Report.merge` sets aside
  the same way).

How sound it is: the bound never cuts a kept trace's interleavings short (each run is within it), the
sleep-set rule is exact (moving one step up changes the preemptions by at most what the rule checks), and
setting repeats aside is exact; that the conservative points reach every trace within the bound is BPOR's
claim, which emqlab checks rather than proves for its combination with source sets:
``tests/test_reduction_bounds.py`` (every shipped scenario × mode at bounds 0, 1 and 2),
``tests/test_reduction.py`` (at each scenario's own bound), ``tests/test_reduction_random.py`` and
``python benchmarks/oracle.py`` (random scenarios at bounds 0, 1 and 2) compare it with the search that runs
every schedule within the bound: final states, anomaly kinds, counts and witnesses. ``reduce=False`` with a
bound runs every schedule with at most ``K`` preemptions.

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

from emqlab.engine import footprints as _fp
from emqlab.engine.actors import Op
from emqlab.engine.footprints import Footprint
from emqlab.engine.runner import Runner
from emqlab.explore.report import INFRASTRUCTURE, Part, Report, Trace, TraceRecord
from emqlab.explore.strategy import Progress, Strategy
from emqlab.explore.tree import Branch, Node, NodeState, Request, note_reversal, path_of
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


class Exhaustive(Strategy):
    """The exhaustive strategy over one :class:`Runner` (the module docstring): :meth:`exhaustive` for a whole
    exploration, :meth:`search` for one part of a divided one."""

    name = "exhaustive"

    def __init__(self, runner: Runner, *, progress: Progress | None = None) -> None:
        super().__init__(runner, progress=progress)
        #: a divided exploration's subtree: called with the search path and the root's length after each
        #: run; it may mark children of a path node explored because another part will explore them
        #: (:class:`emqlab.explore.parts.Donor`)
        self.donate: Callable[[list[Node], int], None] | None = None
        #: crash actor -> the actor it ends
        self._crashes = {a.id: a.of for a in runner.scenario.actors if a.kind == "crash" and a.of}
        #: the search's preemption bound and its root's length
        self._bound: int | None = None
        self._root = 0
        #: a divided search's: the races that ask for children elsewhere (:class:`Request`), what it did at
        #: the node handed on to it (:class:`NodeState`), and whether it keeps every trace's record (a
        #: divided search's parts may repeat each other's traces: :meth:`Report.merge` sets them aside)
        self.requests: list[Request] = []
        self._asked: set[Request] = set()
        self.root_state: NodeState | None = None
        self._keep = False
        #: the node handed on to this search (a divided search's part), once its prefix is run
        self._given: Node | None = None

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
               max_runs: int | None = None, donate: Callable[[list[Node], int], None] | None = None) -> Part:
        """One part of a divided exhaustive search (:mod:`emqlab.explore.parts`): Source-DPOR over the runs
        that begin with ``root`` (a schedule prefix), at ``branch`` (a node another search handed on), within
        ``bound`` preemptions and ``max_runs`` complete runs; ``donate`` is called after each run with the
        search path and the root's length (:class:`emqlab.explore.parts.Donor`). Returns what it found."""
        self.donate = donate
        try:
            self._dpor(bound, max_runs, root=root, branch=branch)
        finally:
            self.donate = None
        part = self.part()
        part.requests = list(self.requests)
        part.root_state = self.root_state
        return part

    def _dfs(self, bound: int | None, max_runs: int | None) -> None:
        """Every schedule with at most ``bound`` preemptions, depth-first, continuing the same actor first."""
        r = self.runner
        t = self.tally
        frames: list[Node] = []
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
                        frames.append(Node(list(r.enabled), {}))
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

    def _pick(self, frame: Node, head: list[str], used: int, bound: int | None, prefer_prev: bool) -> str | None:
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
        schedule prefix), only the runs that begin with it: its steps are fixed, and a race that asks for a
        child at one of its nodes is a :class:`Request` (in :attr:`requests`, for the search that owns the
        node: :mod:`emqlab.explore.divide`). With ``branch`` too, the node at the end of ``root`` starts as
        another search left it: its sleep set, the children it explored (with their footprints: they sleep in
        the later ones) and the children to take over here, in order, of which the planned ones are explored
        (and the others where a race here asks for them); what was done there is :attr:`root_state`."""
        self._bound = bound
        self._keep = bound is not None or bool(root) or branch is not None or self.donate is not None
        nodes: list[Node] = []
        cut = self._root = len(root)
        try:
            self._search(bound, max_runs, root, branch, nodes, cut)
        finally:
            if branch is not None and self._given is not None:
                self._root_state(root, branch, self._given)

    def _root_state(self, root: Sequence[str], branch: Branch, node: Node) -> None:
        self.root_state = NodeState(
            tuple(root), dict(branch.sleep),
            {q: f for q, f in node.fps.items() if q not in branch.done},
            {q: g for q, g in node.goes_on.items() if q not in branch.done},
            tuple(a for a in branch.children if a not in node.done and node.fits(a)))

    def _search(self, bound: int | None, max_runs: int | None, root: Sequence[str], branch: Branch | None,
                nodes: list[Node], cut: int) -> None:
        r = self.runner
        t = self.tally
        self._given = None
        if root or branch is not None:
            try:
                r.reset()
                used = 0
                for c in root:
                    if c not in r.enabled:
                        raise ScheduleError(f"actor {c} has no step left at step {len(r.choices) + 1} of the prefix")
                    prev = r.choices[-1] if r.choices else None
                    paid = 1 if prev is not None and c != prev and prev in r.enabled else 0
                    nodes.append(Node(list(r.enabled), {}, backtrack=[c], done={c}, current=c, prev=prev,
                                       used=used, paid=paid, bound=bound))
                    used += paid
                    r.step(c)
                if branch is not None:
                    node = Node(list(r.enabled), dict(branch.sleep), done=set(branch.done), fps=dict(branch.fps),
                                 prev=r.choices[-1] if r.choices else None, used=used, bound=bound,
                                 goes_on=dict(branch.goes_on))
                    node.unplanned = set(branch.unplanned)
                    node.backtrack = [a for a in branch.children if node.fits(a)
                                      and (branch.planned is None or a in branch.planned)]
                    self._given = node
                    if not node.backtrack:
                        return
                    node.current = node.backtrack[0]
                    node.paid = node.cost(node.current)
                    nodes.append(node)
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
        guide: list[str] = []  # the reversal the run from node ``keep`` follows (after its first step)
        tries = 0  # retries of this run (run-scoped server errors)
        while True:
            at = keep  # the node whose step the run is taking: an infrastructure error loses its subtree
            try:
                r.reset()
                for c in path_of(nodes, keep):
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
                        parent = nodes[depth - 1] if depth else None
                        sleep = dict(parent.child_sleep) if parent is not None else {}
                        node = Node(list(r.enabled), sleep, prev=r.choices[-1] if r.choices else None,
                                     used=parent.used + parent.paid if parent is not None else 0, bound=bound)
                        k = depth - keep - 1
                        want = guide[k] if 0 <= k < len(guide) else None
                        if want is not None and want in node.enabled and want not in node.sleep and node.fits(want):
                            first: str | None = want
                        else:
                            guide = []  # (off the reversal: the usual order from here)
                            first = self._first(node, node.prev)
                        if first is None:
                            blocked = True
                            break
                        node.backtrack.append(first)
                        node.current = first
                        node.paid = node.cost(first)  # (a preemption only when the previous actor sleeps)
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
                    # (under a bound only where moving its step up costs no preemption: Node.sleeps_free)
                    node.goes_on[p] = p in r.enabled
                    siblings = {q: node.fps[q] for q in node.done if q != p and q in node.fps}
                    kept = {q: f for q, f in siblings.items() if node.sleeps_free(q, p)}
                    node.child_sleep = {q: f for q, f in {**node.sleep, **kept}.items()
                                        if q != p and not f.conflicts(fp)}
                    depth += 1
                at = len(nodes)
                for k, a, fa in ended:
                    if k >= cut:
                        self._ended(nodes, actors, fps, preds, k, a, fa)
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
            # backtrack to the deepest node with an awake, unexplored backtrack entry within the bound (not
            # into the root), then its conservative ones (BPOR)
            while len(nodes) > cut:
                d = len(nodes) - 1
                node = nodes[d]
                alt = next((a for a in node.backtrack if a not in node.done and a not in node.sleep
                            and node.fits(a)), None)
                if alt is None:
                    alt = next((a for a in node.conservative if a not in node.done and a not in node.sleep
                                and node.fits(a)), None)
                if alt is not None:
                    node.paid = node.cost(alt)
                    node.current = alt
                    keep = d
                    guide = []
                    # (a node handed on in a branch explores every child it was given: the cut's argument)
                    if alt in node.wake and alt not in node.conservative and (branch is None or d > cut):
                        live = [w for w in node.wake[alt] if w]
                        if not live:
                            node.done.add(alt)  # every reversal it stands for is a sleeper's: nothing to run
                            continue
                        guide = [a for a, _f in live[0][1:]]
                    break
                nodes.pop()
            if len(nodes) <= cut:
                return

    def _first(self, node: Node, prev: str | None) -> str | None:
        order = list(node.enabled)
        if prev in order:
            order.remove(prev)
            order.insert(0, prev)
        return next((a for a in order if a not in node.sleep and node.fits(a)), None)

    def _races(self, nodes: list[Node], actors: list[str], fps: list[Footprint], preds: list[int],
               p: str, fp: Footprint) -> None:
        """Add the happens-before predecessors of the new event ``j`` (actor ``p``) and, for each race
        ``i ⋖ j``, make sure a source set at node ``i`` can reverse it (Source-DPOR, Algorithm 1)."""
        j = len(actors)
        mine = 0
        direct: list[int] = []
        own = 0  # p's program-order predecessors
        # what happens before some event j depends on: each predecessor set is closed (it holds its events'
        # predecessors), so those of j's own and direct predecessors are all of them
        covered = 0
        hits = _fp.conflicting(fps, fp)  # (bit i: fps[i].conflicts(fp))
        for i in range(j):
            if actors[i] == p:
                own |= (1 << i) | preds[i]
                covered |= preds[i]
            elif hits >> i & 1:
                direct.append(i)
                covered |= preds[i]
        mine = own
        for i in direct:
            mine |= (1 << i) | preds[i]
        preds.append(mine)
        for i in direct:
            if covered >> i & 1:
                continue  # not an immediate race: something in between orders them
            # p's event depends on these besides event i (a bit set)
            rest = own
            for k in direct:
                if k != i:
                    rest |= (1 << k) | preds[k]
            self._plan(nodes, actors, fps, preds, i, j, p, fp, rest)

    def _plan(self, nodes: list[Node], actors: list[str], fps: list[Footprint], preds: list[int], i: int, j: int,
              p: str, fp: Footprint, rest: int) -> None:
        """Make sure a race between event ``i`` and a later step of ``p`` (at ``j``; ``rest``: the events that
        step depends on besides ``i``, a bit set) can be reversed (Source-DPOR, Algorithm 1): ``v`` = the
        events after ``i`` that do not happen after it, then ``p``'s step; one of ``v``'s initials joins node
        ``i``'s backtrack set unless one is there already.

        Under a preemption bound this is BPOR (Coons, Musuvathi, McKinley, "Bounded partial-order
        reduction", OOPSLA 2013), planned more widely: *every* initial that node ``i`` can take within the
        bound joins its backtrack set, because the one already there may lead only to interleavings with
        more preemptions further on (random scenario 221 at bound 0: the initials W1, C2 and S3 of one
        reversal; W1 was planned, and only the run that starts with S3 has no preemption, since starting
        with W1 means leaving W1's finish in the middle). And ``p`` and every initial are also planned,
        *conservatively*, at the node ``b`` where the context switch into event ``i``'s actor was made (the
        start of its run of steps that ends at ``i``), each unless it is planned there already: switching
        there costs no more than the switch that was made, so the race is reversed within the bound even
        where node ``i`` is in the middle of its actor's run (a switch there is a preemption). Always,
        whatever node ``i`` holds, whether or not ``p``'s step depends on steps of that run before ``i``
        and whether or not the candidate sleeps at ``b`` (a sleeping entry is never taken: it is only not
        lost): the run from ``b`` is then not the race's reversal but the start of the chain of reversals
        that would have led there through nodes beyond the bound. A node's conservative entries are
        explored after its regular ones. A ``b`` inside a divided search's root prefix is left out: the
        search that handed the subtree on expanded every node there fully
        (:class:`emqlab.explore.parts.Donor`). Without a bound: Source-DPOR's one initial, unchanged."""
        initials: list[str] = []
        vmask = 0
        for k in range(i + 1, j):
            if preds[k] >> i & 1:
                continue
            if not (preds[k] & vmask) and actors[k] not in initials:
                initials.append(actors[k])
            vmask |= 1 << k
        if not (rest & vmask) and p not in initials:
            initials.append(p)
        node = nodes[i]
        steps = [(actors[k], fps[k]) for k in range(i + 1, j) if vmask >> k & 1] + [(p, fp)]
        if self._bound is None:
            q = next((q for q in initials if q in node.backtrack),
                     p if p in initials else min(initials, key=self.order.index))
            if i < self._root:  # (a node of the root prefix: its owner explores it, if no one has)
                self._request(nodes, i, [q])
                return
            if q not in node.backtrack:
                node.backtrack.append(q)
            self._ask(nodes, i, [q])
            note_reversal(node, steps, q)
            return
        # under a bound every initial that fits: the one already planned may need more preemptions further on
        fitting = [q for q in initials if node.fits(q)]
        if i < self._root:
            self._request(nodes, i, fitting)
        else:
            for q in fitting:
                if q not in node.backtrack:
                    node.backtrack.append(q)
                note_reversal(node, steps, q)
            self._ask(nodes, i, fitting)
        e = actors[i]
        b = i
        while b > 0 and actors[b - 1] == e:
            b -= 1
        if b == i:
            return
        start = nodes[b]
        wanted = [q for q in dict.fromkeys((p, *initials)) if q in start.enabled and start.fits(q)]
        if b < self._root:
            self._request(nodes, b, wanted)
            return
        for q in wanted:
            if q not in start.backtrack and q not in start.conservative:
                start.conservative.append(q)
        self._ask(nodes, b, wanted)

    def _ask(self, nodes: list[Node], i: int, wanted: Sequence[str]) -> None:
        """Children a race plans at node ``i`` of this search that it handed on unplanned (:class:`Branch`):
        the search they went to may not have explored them, so each is a :class:`Request`."""
        node = nodes[i]
        for q in wanted:
            if q in node.unplanned and q not in node.asked:
                node.asked.add(q)
                self._request(nodes, i, [q])

    def _request(self, nodes: list[Node], i: int, children: Sequence[str]) -> None:
        if not children:
            return
        path = tuple(path_of(nodes, i))
        for q in children:
            req = Request(path, q)
            if req not in self._asked:
                self._asked.add(req)
                self.requests.append(req)

    def _ended(self, nodes: list[Node], actors: list[str], fps: list[Footprint], preds: list[int], k: int,
               a: str, fa: Footprint) -> None:
        """Step ``k`` ended actor ``a`` (a crash) while ``a`` had a step to take (footprint ``fa``, as
        declared): a race with that step, which no run where step ``k`` comes first ever shows — the
        disabling transitions of Flanagan and Godefroid's DPOR (POPL 2005). It is reversed as Source-DPOR
        reverses any other (:meth:`_plan`): ``a``'s step is taken as if it came at the end of this run."""
        rest = 0
        for m in range(len(actors)):
            if m != k and (actors[m] == a or fps[m].conflicts(fa)):
                rest |= (1 << m) | preds[m]
        self._plan(nodes, actors, fps, preds, k, len(actors), a, fa, rest)

    def _record_trace(self, actors: list[str], preds: list[int], bound: int | None) -> None:
        t = self.tally
        trace = Trace(actors, preds, self.order, kills=self.runner.kills)
        least, schedule = trace.best()
        if bound is not None and least > bound:
            t.outside_bound += 1
            return
        key = ".".join(schedule)
        if self._keep and key in t.traces:  # a sleep set the bound kept open let a trace repeat
            t.repeated += 1
            return
        within = trace.count_within(bound)
        h = self.runner.history()
        t.raw += within
        self._record(h, least, schedule, weight=within)
        if self._keep:  # (a divided search's parts may repeat each other's traces: the merge sees it)
            t.traces[key] = TraceRecord.of(h, within)


__all__ = ["Exhaustive", "footprint", "independent"]
