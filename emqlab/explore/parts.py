"""The home of a divided exploration's parts: what every part shares (:class:`Job`), one part to run
(:class:`Task`) and what it sends back (:class:`Part`), the function every executor runs (:func:`run_part`)
with the runner each worker keeps across parts, and the hand-on of subtrees while a search runs
(:class:`Donor`). The coordinator is :mod:`emqlab.explore.divide`; the pool, :mod:`emqlab.explore.pool`.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from emqlab.analysis.anomalies import checker
from emqlab.backend.connect import ServerFault
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import Scenario
from emqlab.explore.dpor import Exhaustive
from emqlab.explore.pct import PCT
from emqlab.explore.randomwalk import RandomWalk
from emqlab.explore.report import Part
from emqlab.explore.tree import Branch
from emqlab.protocol.schedules import format_schedule, parse_schedule
from emqlab.scripting.registry import ScriptSet

#: the gap between two hand-ons grows to at most this many times ``every`` (:class:`Donor`)
MAX_GAP_FACTOR = 64


@dataclass(frozen=True)
class Job:
    """What every part of one exploration shares: the scenario (the object, so a file need not exist on a
    cluster's workers), the mode, the backend (``None`` = a fakeredis per worker, else a live server's
    URL), the script set, the strategy and its parameters, and the wall-clock deadline."""

    scenario: Scenario
    mode: str
    url: str | None = None
    scripts: ScriptSet | None = None
    strategy: str = "exhaustive"
    bound: int | None = None
    depth: int = 2
    deadline: float | None = None
    #: keep one runner per worker process across parts (False on Dask with a live server: no clean-up hook)
    cache_live: bool = True
    #: stop each subtree after this many complete runs (a fixed amount of work, for benchmarks)
    max_runs: int | None = None
    #: a subtree hands on part of its search first after this many runs (:class:`Donor`; 0: never)
    donate_every: int = 0

    #: which runner serves it: a worker keeps its runner for the parts of the job with this key. Computed
    #: once, where the job is made, and shipped with it: a pickle's bytes depend on which of its objects
    #: are one object (a string shared by two fields, say), and an unpickled copy shares differently, so the
    #: hash of a worker's copy need not be the coordinator's (the forked worker's runner was then built
    #: again instead of kept). A job with other fields is a new Job, not a dataclasses.replace of this one
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            blob = pickle.dumps((self.scenario, self.mode, self.url,
                                 self.scripts.origin if self.scripts else None))
            object.__setattr__(self, "key", hashlib.sha1(blob).hexdigest())


@dataclass(frozen=True)
class Task:
    """One part: a subtree (its prefix as a schedule string) or a swarm chunk (its seed and run count)."""

    index: int
    prefix: str = ""
    #: a node handed on (:class:`Donor`): the prefix leads to it, the branch says what to explore there
    branch: Branch | None = None
    seed: int = 0
    runs: int = 0




_local = threading.local()


#: a pool worker runs a task a stop signal interrupts (a part, or any call :func:`emqlab.explore.pool.stoppable`
#: runs); between tasks the signal is only noted (:data:`_stopping`)
_running = threading.Event()
#: a pool worker was sent a stop signal: the command is ending, and the parts still queued for it are
#: not started (one run to its end after the stop streamed its hand-ons into a channel no one read any
#: more, and the pool's shutdown waited for it for ever)
_stopping = threading.Event()


def _peak_rss_kb() -> int:
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _drop_runner() -> None:
    cached = getattr(_local, "runner", None)
    _local.runner = None
    _local.key = None
    if cached is not None:
        conn = cached.conn
        cached.close()
        try:
            conn.close()
        except Exception:  # pragma: no cover - best effort
            pass


@contextmanager
def _runner_for(job: Job) -> Iterator[Runner | str]:
    """The worker's runner for ``job``: kept across parts of the same job (one fakeredis, or one live queue,
    per worker), except on a live server without a clean-up hook, where each part has its own queue. Where
    the server refuses the worker a queue (:class:`~emqlab.backend.faults.ServerFault` while registering it), the
    refusal's one-line message instead."""
    from emqlab.backend.connect import connect

    lent = getattr(_local, "lent", None)
    if lent is not None:  # the coordinator's own parts: on the root search's runner, whose owner closes it
        yield lent
        return

    def build() -> Runner | str:
        try:  # (a server busy with another client's script refuses PING and the run's registration alike)
            conn = connect(job.url)
        except ServerFault as e:
            return str(e)
        try:
            return Runner(job.scenario, job.mode, conn, scripts=job.scripts, check=checker)
        except ServerFault as e:  # no queue here: the part goes back to the coordinator, whose queue stands
            conn.close()
            return str(e)

    if job.url is not None and not job.cache_live:
        r = build()
        if isinstance(r, str):
            yield r
            return
        try:
            yield r
        finally:
            conn = r.conn
            r.close()
            conn.close()
        return
    if getattr(_local, "key", None) != job.key:
        _drop_runner()
        r = build()
        if isinstance(r, str):
            yield r
            return
        _local.runner, _local.key = r, job.key
    try:
        yield _local.runner
    except BaseException:
        _drop_runner()  # interrupted mid-run: delete the live keys now
        raise


@contextmanager
def _lending(runner: Runner) -> Iterator[None]:
    """The parts run in this process meanwhile run on ``runner`` (the root search's, closed by its owner):
    one queue, one set of live keys, per process (:func:`_runner_for`)."""
    _local.lent = runner
    try:
        yield
    finally:
        _local.lent = None


#: a local pool worker's channel back to the coordinator (a ``multiprocessing.SimpleQueue``): the nodes its
#: parts hand on go there as they are handed on, not when the part ends (None: with the part, e.g. on Dask)
_back: Any = None


def worker_init(back: Any = None) -> None:
    """A pool worker's parts state, set as it starts: ``back`` is the channel its parts' hand-ons stream
    through (:data:`_back`). A forked worker is a copy of the coordinator: it forgets its runner (never
    closing it: that would delete the coordinator's keys) and its dispatch, and keeps the copy of a fakeredis
    runner it was handed (the copy is this process's own: closing it touches nothing of the coordinator's)."""
    global _back
    _back = back
    heir = getattr(_local, "heir", None)
    _local.runner = _local.key = _local.dispatch = _local.lent = _local.heir = None
    if heir is not None:
        _local.key, _local.runner = heir


def run_part(job: Job, task: Task) -> Part:
    """Run one part in this worker and return what it found (the function every executor runs)."""
    import socket

    started = time.perf_counter()
    cpu = time.process_time()
    worker = f"{socket.gethostname()}:{os.getpid()}" + (
        f":{threading.get_ident()}" if threading.current_thread() is not threading.main_thread() else "")
    if _stopping.is_set() or (job.deadline is not None and time.time() > job.deadline):
        return Part(task.index, complete=False, started=False, worker=worker)
    _running.set()
    try:
        with _runner_for(job) as runner:
            if isinstance(runner, str):
                return Part(task.index, complete=False, started=False, worker=worker, refused=runner)
            if job.strategy == "exhaustive":
                ex = Exhaustive(runner)
                ex.deadline = job.deadline
                donor = _donor(job, task)
                part = ex.search(parse_schedule(task.prefix, ex.order), task.branch, bound=job.bound,
                                 max_runs=job.max_runs, donate=donor)
                if donor is not None and donor.sink is None:
                    part.donated = [(format_schedule(p), b) for p, b in donor.donated]
                elif donor is not None and getattr(_local, "dispatch", None) is None:
                    part.streamed = len(donor.donated)
            elif job.strategy == "random":
                walk = RandomWalk(runner)
                walk.random(task.runs, task.seed)
                part = walk.part()
            else:
                pct = PCT(runner)
                pct.pct(task.runs, task.seed, job.depth, check_depth=False)
                part = pct.part()
                part.longest, part.k = pct.longest, pct.k
            part.index, part.worker, part.queue = task.index, worker, runner.keys.base
    finally:
        _running.clear()
    part.seconds = time.perf_counter() - started
    part.cpu_s = time.process_time() - cpu
    part.peak_rss_kb = _peak_rss_kb()
    return part


def _donor(job: Job, task: Task) -> Donor | None:
    """What hands on part of the subtree of ``task`` (a node handed on) while it is searched, if anything."""
    if task.branch is None or not job.donate_every:
        return None
    # run by the coordinator itself: it hands on at once and keeps its workers fed between runs
    here = getattr(_local, "dispatch", None)
    sink: Callable[[list[str], Branch], None] | None = here.submit if here else None
    if here is None and _back is not None:  # a pool worker: each hand-on goes back at once
        def sink(path: list[str], branch: Branch) -> None:
            if _stopping.is_set():  # (the stop's KeyboardInterrupt was dropped — raised in a __del__ — and the
                raise KeyboardInterrupt  # part ran on: no one reads the channel any more, a put could block)
            _back.put((task.index, format_schedule(path), branch))
    return Donor(job.donate_every, sink=sink, tick=here.pump if here else None)


class Donor:
    """Hands on part of a subtree while it is searched, so that a subtree far larger than another does not
    leave the other workers idle: after ``first`` runs, then after ``every`` more, then after gaps that
    double each time (``2 * every``, ``4 * every`` … up to :data:`MAX_GAP_FACTOR` ``* every``), the shallowest
    node on the search path (below the part's own prefix) that still has enabled, awake, unexplored children
    gives them *all* away as one :class:`Branch` (its sleep set, the children explored here and their
    footprints, the children to take over, and which of them a race had asked for: the ``planned`` ones, the
    only ones the part explores unless a race asks for another), and they count as explored here. Nothing is
    replayed: the node's state is shipped as it is. (Giving away more nodes at a time measured worse: more
    runs, no faster.) A race that later asks, here, for a child given away unplanned is a
    :class:`~emqlab.explore.tree.Request` (:meth:`~emqlab.explore.dpor.Exhaustive._ask`).

    Why the gaps grow: each hand-on costs a little (the part replays its prefix, a race's request may need
    a round of its own), a subtree handed on early is large (the shallowest node goes), and later ones need
    to come only as often as the search has grown.

    Why it is sound: :class:`emqlab.explore.divide._Asked` (a child asked for that the part left unexplored
    is explored by a part of its own). Sleep sets keep each trace to one part as far as they can: the branch
    explores its children in the order this search would have, each asleep for the ones before it and for
    those explored here; the merge counts a trace two parts both ran once.

    Deterministic: when and what it hands on depends on the run count alone, never on timing or on how many
    workers there are, so ``--jobs 1`` and ``--jobs N`` divide the tree the same way."""

    def __init__(self, every: int, *, first: int | None = None,
                 sink: Callable[[list[str], Branch], None] | None = None,
                 tick: Callable[[], None] | None = None) -> None:
        self.every = every
        #: the first hand-on comes after this many runs (default ``every``)
        self.first = every if first is None else first
        #: the run count of the next hand-on, and the gap after it
        self._next = self.first
        self._gap = every
        #: where each branch goes at once (else it is only kept in ``donated``)
        self.sink = sink
        #: called after every run (to take in finished parts and send queued ones to free workers)
        self.tick = tick
        self.runs = 0
        self.donated: list[tuple[list[str], Branch]] = []
        #: when it first handed on (``time.perf_counter()``)
        self.first_at = 0.0

    def __call__(self, nodes: list[Any], cut: int) -> None:
        self.runs += 1
        if self.tick is not None:
            self.tick()
        if self.runs < self._next:
            return
        self._next = self.runs + self._gap
        self._gap = min(2 * self._gap, MAX_GAP_FACTOR * self.every)
        for d in range(cut, len(nodes)):
            node = nodes[d]
            give = tuple(a for a in node.enabled if a not in node.done and a not in node.sleep)
            if give:
                break
        else:
            return
        # the children a race has asked for are explored there; the others only if one asks later (anywhere:
        # a Request), so the part does not spend runs on children the search here would never have run
        planned = frozenset(a for a in give if a in node.backtrack or a in node.conservative)
        branch = Branch(dict(node.sleep), frozenset(node.done), {q: f for q, f in node.fps.items() if q in node.done},
                        give, dict(node.goes_on), planned, frozenset(node.unplanned))
        node.unplanned.update(a for a in give if a not in planned)
        path = [nodes[i].current for i in range(d)]
        if not self.donated:
            self.first_at = time.perf_counter()
        node.done.update(give)
        self.donated.append((path, branch))
        if self.sink is not None:
            self.sink(path, branch)




def warm_part(job: Job) -> str:
    """Build this worker's runner for ``job`` (kept for its parts) and say which worker it is."""
    with _runner_for(job):
        pass
    return str(os.getpid())


__all__ = ["MAX_GAP_FACTOR", "Donor", "Job", "Task", "run_part", "warm_part", "worker_init"]
