"""Explorations past one core and one machine: the search divided into parts while it runs, on a process
pool (the default) or a Dask cluster, merged into the report a single process would give.

**Handing on** (:class:`Donor`). The exhaustive search starts whole, in this process. After
:data:`PROBE_RUNS` runs, and then every :data:`DONATE_EVERY` runs, it hands on the shallowest node of its
search path that still has enabled, awake, unexplored children: the node's state (sleep set, children
explored here with their footprints, children left) goes out as a :class:`emqlab.explore.Branch`, and the
node counts as explored here. Each part handed on is searched the same way (Source-DPOR below its prefix,
:meth:`emqlab.explore.Explorer._dpor` with ``root`` and ``branch``) and hands on in turn. An exploration
that ends within :data:`PROBE_RUNS` runs is exactly the undivided one and starts no pool.

**Why it is sound.** A node handed on is fully expanded (every enabled awake child is explored, here or in
the branch), and so is every node above it on the path (the shallowest goes first), so when a part finds a
race that would reverse a step at or above it, the backtrack point it asks for is already covered: dropping
such races loses nothing. Sleep sets carry across the hand-on (the branch explores its children in the
order the search here would have, each asleep for the ones before it), so each trace runs to completion in
exactly one part.

**Counting.** Each trace is counted in the part that ran it, all its interleavings (the linear extensions of
its happens-before order): the sum over the parts is the exact total, for each anomaly and within the
preemption bound too. The witness is the minimum of (preemptions, steps, schedule in scenario order) over
the parts, which is the global minimum; the coordinator replays it. Distinct final states are the union of
the parts' sets.

**Independent of the worker count.** When and what a part hands on depends on its run count alone, never on
timing, so the parts are the same for ``--jobs 1`` and ``--jobs 8``; they are merged in prefix order, and the
report — runs executed included — is the same.

**Where the parts run** (:class:`_Dispatch`). ``--jobs N`` is this process and a pool of N − 1 workers,
started once the search has run :data:`WARM_AFTER_S` (a shorter search runs every part here). Parts go to
free workers oldest first (the shallowest, likely the largest); this process searches the root part, then
runs queued parts too, newest first, feeding the workers between its runs. A pool worker's own hand-ons
come back as it hands them on (a Dask worker's, when its part ends).

**Sampled strategies** (random, PCT) are split by seed, a *swarm*: chunk ``i`` runs :data:`SWARM_CHUNK` runs
with seed ``seed + i``, exactly as ``explore(..., runs=SWARM_CHUNK, seed=seed + i)`` in one process would.

**Executors** are :class:`concurrent.futures.Executor`: in this process for one job, a process pool
(``forkserver``, emqlab and fakeredis imported once in the fork server) for more, or Dask's
``distributed.Client(...).get_executor()`` for ``dask://host:port``. Each worker process keeps one fakeredis
server; on a live server each worker process runs under its own queue (``emq:{q-<random>}:``), deleted when
the worker ends or is interrupted.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import math
import os
import pickle
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from emqlab.backend.connect import BackendError, ServerFault, is_fake
from emqlab.engine.runner import Runner as EngineRunner
from emqlab.engine.scenario import Scenario
from emqlab.explore.checked import Runner
from emqlab.explore.search import INFRASTRUCTURE, Abort, Branch, Explorer, Report, multinomial, shrink
from emqlab.protocol.outcome import Outcome
from emqlab.protocol.schedules import format_schedule, parse_schedule
from emqlab.scripting.registry import ScriptSet
from emqlab.ui.entry import STOP_SIGNALS, stops_held

#: an exploration that finishes within this many runs is not divided
PROBE_RUNS = 8
#: a subtree hands on part of its search after every this many runs (:class:`Donor`)
DONATE_EVERY = 6
#: a local pool starts once the search has run this long (s): a shorter one runs every part here, where a
#: pool would cost it more than it saves (the fork's copy-on-write faults, the pool's thread, its shutdown)
WARM_AFTER_S = 0.1
#: runs per seed in a swarm (random, PCT)
SWARM_CHUNK = 25

Progress = Callable[[int, int | None], None]


class ParallelError(ValueError):
    """An executor could not be set up (Dask missing, a bad ``--executor``); the message is one line."""


class ExecutorUnreachable(BackendError):
    """The Dask scheduler named by ``--executor`` does not answer (an infrastructure error: exit 4)."""


# -- what is shipped ----------------------------------------------------------------------------------------


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
    #: a subtree hands on part of its search after every this many runs (:class:`Donor`; 0: never)
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


@dataclass
class Part:
    """What a worker sends back for one task: the counters of its :class:`Report`, the best witness key
    per anomaly (the coordinator replays the winner), and where and how it ran."""

    index: int
    complete: bool = True
    started: bool = True
    explored: int = 0
    pruned: int = 0
    outside_bound: int = 0
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
    longest: int = 0
    seconds: float = 0.0
    worker: str = ""
    peak_rss_kb: int = 0
    #: the base of the queue it ran under (``emq:{q-1a2b3c4d}:`` on a live server)
    queue: str = ""
    #: CPU seconds the part took in its worker (wall ``seconds`` also counts waiting for a shared core)
    cpu_s: float = 0.0
    #: the nodes it handed on (:class:`Donor`): each a prefix (schedule string) and the node's branch
    donated: list[tuple[str, Branch]] = field(default_factory=list)
    #: runs infrastructure errors aborted, by cause, and the one that stopped it (Report.aborted, .stopped)
    aborted: dict[Abort, int] = field(default_factory=dict)
    stopped: Abort | None = None
    #: runs run again after a run-scoped server error, by cause (Report.retried)
    retried: dict[Abort, int] = field(default_factory=dict)
    #: how many nodes it handed on through the worker's channel (:data:`_back`) instead of in ``donated``
    streamed: int = 0
    #: the server refused this worker a queue of its own (registering it got a server error, e.g. OOM while
    #: the other queues hold their keys): the part did not start, and the coordinator runs it itself
    refused: str | None = None


# -- the worker side ----------------------------------------------------------------------------------------

_local = threading.local()
_running = threading.Event()


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
    the server refuses the worker a queue (:class:`~emqlab.backends.ServerFault` while registering it), the
    refusal's one-line message instead."""
    from emqlab.backend.connect import connect

    lent = getattr(_local, "lent", None)
    if lent is not None:  # the coordinator's own parts: on the root search's runner, whose owner closes it
        yield lent
        return

    def build() -> Runner | str:
        conn = connect(job.url)
        try:
            return Runner(job.scenario, job.mode, conn, scripts=job.scripts)
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
def _lending(runner: EngineRunner) -> Iterator[None]:
    """The parts run in this process meanwhile run on ``runner`` (the root search's, closed by its owner):
    one queue, one set of live keys, per process (:func:`_runner_for`)."""
    _local.lent = runner
    try:
        yield
    finally:
        _local.lent = None


def _on_sigint(signum: int, frame: Any) -> None:
    """A stop signal in a worker (Ctrl-C, or SIGTERM / SIGHUP to the process group: a CI timeout, a closed
    terminal): interrupt the part it is running, once; between parts it is ignored (the coordinator shuts
    the pool down, and the worker's exit deletes its live keys). Every later one is ignored, so it cannot
    cut short the clean-up the first one started (the terminal's process group and the coordinator both
    send one)."""
    if _running.is_set():
        for s in STOP_SIGNALS:
            signal.signal(s, _ignore)
        raise KeyboardInterrupt


def _ignore(signum: int, frame: Any) -> None:
    """A stop signal that comes while the clean-up of an earlier one runs: nothing. (A Python handler, not
    SIG_IGN: a signal already caught but not yet handled when the handler becomes SIG_IGN raises OSError,
    "Signal 15 ignored due to race condition", inside that clean-up.)"""


#: a local pool worker's channel back to the coordinator (a ``multiprocessing.SimpleQueue``): the nodes its
#: parts hand on go there as they are handed on, not when the part ends (None: with the part, e.g. on Dask)
_back: Any = None


def _pool_init(back: Any = None) -> None:
    """A pool worker: Ctrl-C interrupts the part it is running (its live keys are deleted), and is ignored
    between parts; the cached runner is closed when the worker exits. ``back``: the channel its parts' hand-
    ons stream through (:data:`_back`)."""
    import multiprocessing.util

    global _back
    _back = back
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is not None:  # (a fork server's worker inherits them blocked: _start_forkserver)
        mask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    # a forked worker is a copy of the coordinator: forget its runner (never close it: that would delete
    # the coordinator's keys) and its dispatch; keep the copy of a fakeredis runner it was handed (the copy
    # is this process's own: closing it touches nothing of the coordinator's)
    heir = getattr(_local, "heir", None)
    _local.runner = _local.key = _local.dispatch = _local.lent = _local.heir = None
    if heir is not None:
        _local.key, _local.runner = heir
    for s in STOP_SIGNALS:
        signal.signal(s, _on_sigint)
    multiprocessing.util.Finalize(None, _drop_runner, exitpriority=10)


def run_part(job: Job, task: Task) -> Part:
    """Run one part in this worker and return what it found (the function every executor runs)."""
    import socket

    started = time.perf_counter()
    cpu = time.process_time()
    worker = f"{socket.gethostname()}:{os.getpid()}" + (
        f":{threading.get_ident()}" if threading.current_thread() is not threading.main_thread() else "")
    if job.deadline is not None and time.time() > job.deadline:
        return Part(task.index, complete=False, started=False, worker=worker)
    _running.set()
    try:
        with _runner_for(job) as runner:
            if isinstance(runner, str):
                return Part(task.index, complete=False, started=False, worker=worker, refused=runner)
            ex = Explorer(runner)
            ex.deadline = job.deadline
            part = Part(task.index, worker=worker, queue=runner.keys.base)
            if job.strategy == "exhaustive":
                donor = _subtree(ex, job, task)
                if donor is not None and donor.sink is None:
                    part.donated = [(format_schedule(p), b) for p, b in donor.donated]
                elif donor is not None and getattr(_local, "dispatch", None) is None:
                    part.streamed = len(donor.donated)
            elif job.strategy == "random":
                ex.random(task.runs, task.seed)
            else:
                ex.pct(task.runs, task.seed, job.depth, check_depth=False)
                part.longest = int(ex.report.params.get("longest_run", 0))
            _collect(ex, part)
    finally:
        _running.clear()
    part.seconds = time.perf_counter() - started
    part.cpu_s = time.process_time() - cpu
    part.peak_rss_kb = _peak_rss_kb()
    return part


def _subtree(ex: Explorer, job: Job, task: Task) -> Donor | None:
    rep = ex.report
    rep.strategy = "exhaustive"
    rep.reduction = "source-dpor"
    rep.steps_per_actor = {a: 0 for a in ex.order}
    prefix = parse_schedule(task.prefix, ex.order)
    donor = None
    if task.branch is not None:
        if job.donate_every:
            # run by the coordinator itself: it hands on at once and keeps its workers fed between runs
            here = getattr(_local, "dispatch", None)
            sink: Callable[[list[str], Branch], None] | None = here.submit if here else None
            if here is None and _back is not None:  # a pool worker: each hand-on goes back at once
                def sink(path: list[str], branch: Branch) -> None:
                    _back.put((task.index, format_schedule(path), branch))
            donor = ex.donate = Donor(job.donate_every, sink=sink, tick=here.pump if here else None)
    ex._dpor(job.bound, job.max_runs, root=prefix, branch=task.branch)
    return donor


class Donor:
    """Hands on part of a subtree while it is searched, so that a subtree far larger than another does not
    leave the other workers idle: after ``first`` runs and then every ``every`` runs, the shallowest node on
    the search path (below the part's own prefix) that still has enabled, awake, unexplored children gives
    them *all* away as one :class:`Branch` (its sleep set, the children explored here and their footprints,
    the children to explore), and they count as explored here. Nothing is replayed: the node's state is
    shipped as it is. (Giving away more nodes at a time measured worse: more runs, no faster.)

    Why it is sound: it is the cut's argument again. A node handed on is fully expanded (every enabled awake
    child is explored, here or in the branch), and so is every node above it on the path (the shallowest
    ones go first), so a race found anywhere below that would reverse a step at or above it asks for a
    child that is already covered. Sleep sets keep each trace to one part: the branch explores its children
    in the order this search would have, each asleep for the ones before it and for those explored here.

    Deterministic: when and what it hands on depends on the run count alone, never on timing or on how many
    workers there are, so ``--jobs 1`` and ``--jobs N`` divide the tree the same way."""

    def __init__(self, every: int, *, first: int | None = None,
                 sink: Callable[[list[str], Branch], None] | None = None,
                 tick: Callable[[], None] | None = None) -> None:
        self.every = every
        #: the first hand-on comes after this many runs (default ``every``)
        self.first = every if first is None else first
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
        if self.runs < self.first or (self.runs - self.first) % self.every:
            return
        for d in range(cut, len(nodes)):
            node = nodes[d]
            give = tuple(a for a in node.enabled if a not in node.done and a not in node.sleep)
            if not give:
                continue
            branch = Branch(dict(node.sleep), frozenset(node.done),
                            {q: f for q, f in node.fps.items() if q in node.done}, give)
            path = [nodes[i].current for i in range(d)]
            if not self.donated:
                self.first_at = time.perf_counter()
            node.done.update(give)
            self.donated.append((path, branch))
            if self.sink is not None:
                self.sink(path, branch)
            return


def _collect(ex: Explorer, part: Part) -> None:
    rep = ex.report
    part.complete = rep.complete
    part.explored, part.pruned, part.outside_bound = rep.explored, rep.pruned, rep.outside_bound
    part.raw = rep.raw_interleavings if rep.strategy == "exhaustive" else 0
    part.steps_executed = rep.steps_executed
    part.steps_per_actor = dict(rep.steps_per_actor)
    part.runs_with = dict(rep.runs_with)
    part.interleavings_with = dict(rep.interleavings_with)
    part.best = {k: (pre, n, rank, format_schedule(choices), h.schedule)
                 for k, (pre, n, rank, choices, h) in ex._best.items()}
    part.outcomes = set(rep.outcomes)
    part.results = {a: dict(c) for a, c in ex._results.items() if c}
    part.codes = {a: dict(c) for a, c in ex._codes.items() if c}
    part.aborted, part.stopped, part.retried = dict(rep.aborted), rep.stopped, dict(rep.retried)


# -- the coordinator side -----------------------------------------------------------------------------------


def start_method(live: bool = False) -> str:
    """How a local pool starts its workers: ``fork`` on fakeredis when this process has no other thread (a
    worker is then a copy of it, emqlab already imported, ready in milliseconds; forking a process with
    threads can copy a lock another thread holds, and a live server's connections are better not copied),
    else ``forkserver`` (a clean server process that imports emqlab once and forks the workers from itself;
    about a second to start), else ``spawn``."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and not live and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: the modules every pool worker needs, imported once in the fork server before it forks them
FORKSERVER_PRELOAD = ["emqlab.explore._forkserver", "emqlab.explore.parallel", "emqlab.backend.fakeserver",
                      "emqlab.engine.runner",
                      "emqlab.explore.search"]


def _start_forkserver() -> None:
    """Start the fork server now, with the stop signals held back, so that it inherits them blocked: a
    Ctrl-C while it is still importing (before its preload ignores them) printed its traceback. Its workers
    inherit the mask and unblock the signals first thing (:func:`_pool_init`)."""
    from multiprocessing import forkserver

    with stops_held():
        forkserver.ensure_running()


def _resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with SIGHUP held back, so that it inherits it blocked:
    it ignores SIGINT and SIGTERM itself but not SIGHUP, and a closed terminal signals the whole group
    (the tracker gone, the pool's clean-up prints tracebacks about leaked semaphores)."""
    hup = getattr(signal, "SIGHUP", None)
    if hup is None or threading.current_thread() is not threading.main_thread():
        return
    from multiprocessing import resource_tracker

    with stops_held({hup}):
        resource_tracker.ensure_running()


class InlineExecutor(cf.Executor):
    """Runs each call in this process when it is submitted (``--jobs 1``): the same parts, no pool."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        fut: cf.Future[Any] = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: B036 - handed to the caller through the future
            if isinstance(e, KeyboardInterrupt):
                raise
            fut.set_exception(e)
        return fut


def check_executor(executor: str | None) -> None:
    """Raise :class:`ParallelError` for an ``--executor`` that is neither ``local`` nor a Dask address."""
    if executor and executor not in ("local", "process") and not executor.startswith(("dask://", "tcp://",
                                                                                      "tls://")):
        raise ParallelError(f"unknown executor {executor!r}: use 'local' or dask://host:port")


def make_executor(jobs: int | None = None, executor: str | None = None, *, pool: bool = False,
                  live: bool = True, back: Any = None) -> tuple[cf.Executor, Callable[[], None]]:
    """An executor and its clean-up: ``executor`` ``dask://host:port`` (or ``tcp://…``) connects a Dask
    client, ``None``/``local`` is a process pool of ``jobs`` workers (this process for one, unless
    ``pool``), started by :func:`start_method` (``live=False``: its workers use fakeredis only)."""
    check_executor(executor)
    if executor and executor not in ("local", "process"):
        try:
            from distributed import Client
        except ImportError:
            raise ParallelError("--executor dask://… needs Dask: pip install 'emqlab[dask]'"
                                " (or pip install 'dask[distributed]')") from None
        address = "tcp://" + executor.split("://", 1)[1] if executor.startswith("dask://") else executor
        try:
            client = Client(address, timeout=10)
        except OSError as e:
            raise ExecutorUnreachable(f"cannot reach the Dask scheduler at {address}: {e}") from None
        return client.get_executor(), client.close
    n = jobs if jobs is not None else default_jobs()
    if n <= 1 and not pool:
        return InlineExecutor(), lambda: None
    import multiprocessing

    method = start_method(live)
    ctx = multiprocessing.get_context(method)
    _resource_tracker()
    if method == "forkserver":
        # imported once in the fork server, not in every worker: fakeredis (and numpy under it) alone takes
        # about 0.5 s to import
        ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
        _start_forkserver()
    ppe = cf.ProcessPoolExecutor(max_workers=max(1, n), mp_context=ctx, initializer=_pool_init,
                                 initargs=(back,))
    return ppe, lambda: ppe.shutdown(wait=True, cancel_futures=True)


@dataclass
class Stats:
    """How a divided exploration ran (not part of the report: it differs between runs and worker counts)."""

    parts: int = 0
    cut_depth: int | None = None
    divided: bool = False
    workers: dict[str, dict[str, float]] = field(default_factory=dict)
    part_seconds: list[float] = field(default_factory=list)
    #: CPU seconds of each part, in the order they finished (wall seconds count waiting for a shared core)
    part_cpu_s: list[float] = field(default_factory=list)
    #: the part the coordinator searched itself (the root, which hands on the others): its CPU seconds,
    #: and the seconds from its start to its first hand-on
    root_cpu_s: float = 0.0
    root_first_s: float = 0.0
    wall_s: float = 0.0
    coordinator_s: float = 0.0
    interrupted: bool = False
    #: the queues the parts ran under (one per worker process on a live server; all deleted afterwards)
    queues: set[str] = field(default_factory=set)
    #: why the server refused a worker a queue of its own, if it did (the parts then ran in the coordinator)
    refused: str | None = None
    #: nodes the pool workers' parts handed on through their channel back, while they ran
    streamed: int = 0


def url_of(conn: Any) -> str | None:
    """The URL a worker process connects to for ``conn``'s server (password included: never print it), or
    None for fakeredis (each worker then has its own)."""
    from emqlab.backend.connect import is_fake

    if is_fake(conn):
        return None
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    auth = ""
    if kw.get("password"):
        user = kw.get("username") or ""
        auth = f"{user}:{kw['password']}@"
    scheme = "rediss" if conn.connection_pool.connection_class.__name__ == "SSLConnection" else "redis"
    return f"{scheme}://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def explore(scenario: Scenario, mode: str, *, strategy: str = "exhaustive", conn: Any = None,
            url: str | None = None, runs: int = 100, seed: int = 0, depth: int = 2,
            preemptions: int | None = None, unbounded: bool = False, reduce: bool = True,
            scripts: ScriptSet | None = None, jobs: int | None = None,
            executor: str | cf.Executor | None = None, progress: Progress | None = None,
            max_seconds: float | None = None, divide: bool | None = None, donate: int | None = None,
            stats: Stats | None = None) -> Report:
    """:func:`emqlab.explore.explore`, divided over ``jobs`` local processes (default: the cores) or an
    ``executor`` (an :class:`concurrent.futures.Executor`, or ``dask://host:port``).

    The exhaustive search starts whole, here; once it has run :data:`PROBE_RUNS` runs (at once with
    ``divide=True``; never with ``divide=False``) it hands subtrees on every ``donate`` runs (default
    :data:`DONATE_EVERY`; :class:`Donor`), and so does every subtree handed on, so an exploration within
    :data:`PROBE_RUNS` runs is exactly the undivided one and starts no pool. ``max_seconds`` stops it: the
    report is then incomplete and says what was covered. ``progress(done, total)`` counts parts (``total``
    None while parts may still be handed on); ``stats`` (a :class:`Stats`) is filled in. ``conn`` is the
    coordinator's backend; workers connect to ``url`` (default: ``conn``'s; fakeredis: one server per
    worker). Raises ValueError for a ``donate`` below 1."""
    from emqlab.backend.connect import connect
    from emqlab.explore import search as _explore

    if strategy not in ("exhaustive", "random", "pct"):
        return _explore.explore(scenario, mode, strategy=strategy, conn=conn, scripts=scripts, progress=progress)
    if donate is not None and donate < 1:
        raise ValueError(f"donate must be at least 1 (runs between two hand-ons), not {donate}")
    if not isinstance(executor, cf.Executor):
        check_executor(executor)
    st = stats if stats is not None else Stats()
    started = time.perf_counter()
    deadline = time.time() + max_seconds if max_seconds is not None else None
    own_conn = conn is None
    if conn is None:
        conn = connect(url)
    if url is None:
        url = url_of(conn)
    bound = None if unbounded else (preemptions if preemptions is not None else scenario.preemptions)
    every = DONATE_EVERY if donate is None else donate
    # a runner kept across parts needs a clean-up hook where it lives: this process, or our pool's workers
    local = executor in (None, "local", "process") or isinstance(executor, (InlineExecutor, cf.ProcessPoolExecutor))
    job = Job(scenario, mode, url, scripts, strategy, bound, depth, deadline, cache_live=local,
              donate_every=every)
    try:
        with Runner(scenario, mode, conn, scripts=scripts) as runner:
            if strategy == "exhaustive":
                return _donating(runner, job, executor, jobs, reduce=reduce, divide=divide, progress=progress,
                                 max_seconds=max_seconds, preemptions=preemptions, unbounded=unbounded,
                                 stats=st, started=started)
            pool, close_pool = _executor(executor, jobs)
            try:
                chunks = max(1, math.ceil(runs / SWARM_CHUNK))
                tasks = [Task(i, seed=seed + i, runs=min(SWARM_CHUNK, runs - i * SWARM_CHUNK))
                         for i in range(chunks)]
                st.parts = len(tasks)
                st.coordinator_s = time.perf_counter() - started
                parts = _run(job, tasks, pool if len(tasks) > 1 else InlineExecutor(), progress, deadline, st)
                parts = _run_refused(runner, job, tasks, parts, st)
            except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM turned into SystemExit by the CLI
                st.interrupted = True
                with _quiet():
                    _interrupt_pool(pool)
                    close_pool()
                    _drop_runner()
                raise
            finally:
                close_pool()
                _drop_runner()  # the one parts run here (--jobs 1) kept: its live keys go now
            rep = _merge(runner, job, parts)
            _swarm_params(runner, rep, job, runs, seed, parts)
            _stopped_note(rep, max_seconds, (sum(p.complete for p in parts), len(tasks)))
            rep.elapsed_s = time.perf_counter() - started
            return rep
    finally:
        st.wall_s = time.perf_counter() - started
        if own_conn:
            conn.close()


def _donating(runner: EngineRunner, job: Job, executor: str | cf.Executor | None, jobs: int | None, *,
              reduce: bool, divide: bool | None, progress: Progress | None, max_seconds: float | None,
              preemptions: int | None, unbounded: bool, stats: Stats, started: float) -> Report:
    """The exhaustive search run here, handing subtrees on (:class:`Donor`) to the executor as it goes, each
    of which may hand on more; one report from all of them, in prefix order."""
    st = stats
    first = 0 if not reduce or divide is False else (job.donate_every if divide else PROBE_RUNS)
    dispatch = _Dispatch(job, executor, jobs, progress, root=runner)
    root = Explorer(runner)
    root.deadline = job.deadline
    donor = None
    if first:
        donor = root.donate = Donor(job.donate_every, first=first, sink=dispatch.submit, tick=dispatch.pump)
    try:
        t0, cpu0 = time.perf_counter(), time.process_time()
        try:
            rep = root.exhaustive(preemption_bound=job.bound, reduce=reduce, max_runs=None)
        finally:
            root.donate = None
        if donor is None or not donor.donated:
            rep.params["max_runs"] = None
            rep.params["bound_from"] = _bound_from(preemptions, unbounded)
            rep.params["divided"] = ("no" if divide is False else
                                     "no: --no-reduce runs every schedule here" if not reduce else
                                     f"no: finished within {first} runs" if rep.complete else
                                     f"no: stopped after {donor.runs if donor else 0} run(s), before the "
                                     f"first hand-on (after {first})")
            _stopped_note(rep, max_seconds, None)
            rep.elapsed_s = time.perf_counter() - started
            return rep
        here = Part(0, worker=f"coordinator:{os.getpid()}", queue=runner.keys.base,
                    seconds=time.perf_counter() - t0, cpu_s=time.process_time() - cpu0, peak_rss_kb=_peak_rss_kb())
        _collect(root, here)
        st.coordinator_s = time.perf_counter() - started
        # the parts run here reuse the root's runner: one queue (one set of live keys) per process, and the
        # root's last run is not left standing beside a second queue (a server near maxmemory refuses that)
        with _lending(runner):
            parts = [here, *dispatch.finish()]
        dispatch.started()  # (an executor that could not start is an error, even if this process did it all)
        st.refused = dispatch.refused
    except (KeyboardInterrupt, SystemExit):
        st.interrupted = True
        with _quiet():  # the next Ctrl-C must not cut the pool's shutdown short (it hung, keys left)
            dispatch.interrupt()
            dispatch.close()
            _drop_runner()
        raise
    finally:
        dispatch.close()
        _drop_runner()
    ranked = sorted(range(len(parts)), key=lambda i: dispatch.rank(i))
    parts = [parts[i] for i in ranked]
    for i, part in enumerate(parts):
        part.index = i
        if part is here:
            st.root_cpu_s = here.cpu_s
            st.root_first_s = donor.first_at - t0
            w = st.workers.setdefault(here.worker, {"parts": 0, "seconds": 0.0, "peak_rss_mb": 0.0})
            w["parts"], w["seconds"], w["peak_rss_mb"] = 1, here.seconds, here.peak_rss_kb / 1024
        elif part.started:
            _tally(st, part)
    st.divided = True
    st.parts = len(parts)
    st.cut_depth = max((len(pre) for pre, _s in dispatch.prefixes), default=0)
    merged = _merge(runner, job, parts)
    merged.params = {"preemption_bound": job.bound, "reduce": True, "max_runs": None,
                     "bound_from": _bound_from(preemptions, unbounded),
                     "divided": {"subtrees": len(parts), "deepest_prefix": st.cut_depth,
                                 "handed_on": f"after {first} runs, then every {job.donate_every}",
                                 "sleep_sets": "carried into every subtree handed on",
                                 "rule": "forced" if divide else f"did not finish within {PROBE_RUNS} runs"}}
    _stopped_note(merged, max_seconds, (sum(p.complete for p in parts), len(parts)))
    merged.elapsed_s = time.perf_counter() - started
    return merged


#: how often (s) the coordinator, waiting for its workers, looks for the nodes their parts hand on
HEAR_EVERY = 0.005


class _Dispatch:
    """The subtrees handed on: queued as they come, sent to the executor's workers as they have room (a
    local pool of ``jobs - 1`` workers, started once the search here has run :data:`WARM_AFTER_S`; any
    other executor at the first hand-on), their own hand-ons queued when they come back, and the parts collected.
    This process is a worker too: once its own search is done it runs queued parts while the others run
    theirs, the newest first (the deepest, so it is soon free to send work on). With one job every part
    runs here. Which parts there are depends on the run counts alone, so the report is the same either way."""

    def __init__(self, job: Job, executor: str | cf.Executor | None, jobs: int | None,
                 progress: Progress | None, root: EngineRunner | None = None) -> None:
        self.job, self.executor, self.progress = job, executor, progress
        #: the root search's runner: a forked worker keeps its copy as its own (fakeredis only)
        self.root = root
        self.prefixes: list[tuple[list[str], Branch | None]] = [([], None)]  # index 0: the search here
        self.order = [a.id for a in job.scenario.actors]
        self._idx = {a: i for i, a in enumerate(self.order)}
        self._queued: list[int] = []
        self._running: dict[cf.Future[Part], int] = {}
        self._done: dict[int, Part] = {}
        self._pool: tuple[cf.Executor, Callable[[], None]] | None = None
        self._starting: threading.Thread | None = None
        self._error: BaseException | None = None
        #: the server refused a worker a queue (:attr:`Part.refused`): nothing more is sent, parts run here
        self.refused: str | None = None
        #: a local pool's channel back (:data:`_back`), and per part the hand-ons taken from it so far
        self._back: Any = None
        self._heard: Counter[int] = Counter()
        n = jobs if jobs is not None else default_jobs()
        local = not isinstance(executor, cf.Executor) and executor in (None, "local", "process")
        #: a local pool, started only once the search has run :data:`WARM_AFTER_S` (until then, and if the
        #: search ends sooner, every part handed on runs here); any other executor at the first hand-on
        self._own_pool = local
        self._warm_at = time.perf_counter() + WARM_AFTER_S
        #: every part runs here (one job)
        self.inline = local and n <= 1
        if isinstance(executor, cf.Executor):
            self.workers = max(1, getattr(executor, "_max_workers", 1) or 1)
        else:  # a local pool's (this process is the n-th), or a Dask cluster's, learnt when it is reached
            self.workers = n - 1 if local else 0

    def rank(self, i: int) -> list[int]:
        pre, branch = self.prefixes[i]
        return [self._idx[c] for c in pre] + ([self._idx[branch.children[0]]] if branch else [])

    def _task(self, i: int) -> Task:
        pre, branch = self.prefixes[i]
        return Task(i, prefix=format_schedule(pre), branch=branch)

    def submit(self, prefix: list[str], branch: Branch) -> None:
        """A node handed on (called by the :class:`Donor` between two runs of the search here)."""
        self.prefixes.append((prefix, branch))
        self._queued.append(len(self.prefixes) - 1)
        self.pump()

    def _start(self) -> None:
        if self._pool is not None or self._starting is not None:
            return
        if isinstance(self.executor, cf.Executor):
            self._pool = (self.executor, lambda: None)
            return

        def start() -> None:
            try:
                assert not isinstance(self.executor, cf.Executor)
                live = self.job.url is not None
                if self.executor in (None, "local", "process"):
                    import multiprocessing

                    self._back = multiprocessing.get_context(start_method(live)).SimpleQueue()
                pool = make_executor(self.workers if self.workers else None, self.executor, pool=True,
                                     live=live, back=self._back)
                if not self.workers:  # Dask: the cluster's workers
                    client = getattr(pool[0], "_client", None)
                    info = client.scheduler_info() if client is not None else {}
                    self.workers = max(1, len(info.get("workers", {})))
                for _ in range(self.workers):  # start every worker now and build its runner
                    pool[0].submit(warm_part, self.job)
                self._pool = pool
            except BaseException as e:  # noqa: B036 - raised again in pump()
                self._error = e

        if self.executor in (None, "local", "process") and start_method(self.job.url is not None) == "fork":
            # a fork takes milliseconds, and from this thread it copies a process with no other thread; each
            # worker keeps its copy of the root's runner (its own fakeredis, its own Lua state) instead of
            # building one: no second runner in its memory, none to build
            _local.heir = (self.job.key, self.root) if self.root is not None and is_fake(self.root.conn) else None
            try:
                start()
            finally:
                _local.heir = None
            if self._error is not None:
                raise self._error
            return
        if self.executor in (None, "local", "process"):
            _resource_tracker()  # from this thread, which can hold SIGHUP back (the starter cannot)
        self._starting = threading.Thread(target=start, name="emqlab-pool-start", daemon=True)
        self._starting.start()

    def pump(self, block: bool = False) -> None:
        """Take in what finished (queueing what it handed on) and send what waits to free workers (two in
        flight per worker, so none waits for this process)."""
        if self.inline:
            return
        if self._starting is not None and (block or not self._starting.is_alive()):
            self._starting.join()
            self._starting = None
            if self._error is not None:
                raise self._error
        if self._pool is None:
            if not self._own_pool or time.perf_counter() >= self._warm_at:
                self._start()
            return
        self._hear()
        for f in [f for f in self._running if f.done()]:
            self._take(f)
        ex = self._pool[0]
        while self._queued and self.refused is None and len(self._running) < 2 * self.workers:
            i = self._queued.pop(0)  # the oldest: the shallowest, likely the largest
            self._running[ex.submit(run_part, self.job, self._task(i))] = i

    def _take(self, f: cf.Future[Part]) -> None:
        i = self._running.pop(f)
        if not f.cancelled():
            self._got(i, f.result())

    def _hear(self, part: int | None = None, count: int = 0) -> None:
        """Queue the nodes the workers' parts have handed on so far (through the channel back); with ``part``,
        wait until that part's ``count`` have come."""
        q = self._back
        while q is not None and (not q.empty() or (part is not None and self._heard[part] < count)):
            i, prefix, branch = q.get()
            self._heard[i] += 1
            self.prefixes.append((parse_schedule(prefix, self.order), branch))
            self._queued.append(len(self.prefixes) - 1)

    def _got(self, i: int, part: Part) -> None:
        if part.refused is not None:  # back to the queue, to run here
            self.refused = part.refused
            self._queued.append(i)
            return
        if part.streamed:  # every node it handed on is queued before it counts as done
            self._hear(i, part.streamed)
        self._done[i] = part
        for prefix, branch in part.donated:
            self.prefixes.append((parse_schedule(prefix, self.order), branch))
            self._queued.append(len(self.prefixes) - 1)
        if self.progress:
            self.progress(len(self._done), None if self._running or self._queued else len(self._done))

    def finish(self) -> list[Part]:
        """Every part handed on, run to the end (or to the job's deadline), in the order they were handed on."""
        deadline = self.job.deadline
        while self._queued or self._running:
            self.pump()
            if self._queued:  # work here too: the newest part (soon done, then back to sending)
                i = self._queued.pop()
                _local.dispatch = self  # its hand-ons come here at once, and it sends work on between runs
                try:
                    part = run_part(self.job, self._task(i))
                finally:
                    _local.dispatch = None
                part.donated = []  # already queued, as they came
                self._got(i, part)
                continue
            if not self._running:
                continue
            timeout = None if deadline is None else max(0.0, deadline - time.time()) + 5.0
            if self._back is not None:  # wake for hand-ons too: take them over while the workers go on
                timeout = HEAR_EVERY if timeout is None else min(timeout, HEAR_EVERY)
            finished, _ = _wait(set(self._running), timeout)
            for f in finished:
                self._take(f)
            if deadline is not None and time.time() > deadline + 5.0 and self._running:
                for f in self._running:
                    f.cancel()
                break
        return [self._done.get(i) or Part(i, complete=False, started=False) for i in range(1, len(self.prefixes))]

    def started(self) -> None:
        """Wait for the pool to have started, if it is starting, and raise what kept it from starting (an
        unreachable Dask scheduler), even when this process ran every part meanwhile."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._error is not None:
            raise self._error

    def interrupt(self) -> None:
        for f in self._running:
            f.cancel()
        if self._pool is not None:
            _interrupt_pool(self._pool[0])

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._pool is not None:
            self._pool[1]()
            self._pool = None
        if self._back is not None:
            self._back.close()
            self._back = None


def check_case(scenario: Scenario, mode: str) -> tuple[list[str], dict[str, set[Any]]]:
    """One case of ``emqlab scenarios --check``, in a worker: the anomaly kinds an exhaustive exploration of
    ``scenario`` in ``mode`` finds (fakeredis), and the return codes each actor's finish saw."""
    from emqlab.explore import search as _explore

    rep = _explore.explore(scenario, mode)
    return rep.anomaly_kinds, {a: {o.code for o in c} for a, c in rep.codes.items()}


def warm_part(job: Job) -> str:
    """Build this worker's runner for ``job`` (kept for its parts) and say which worker it is."""
    with _runner_for(job):
        pass
    return str(os.getpid())


def _executor(executor: str | cf.Executor | None, jobs: int | None) -> tuple[cf.Executor, Callable[[], None]]:
    if isinstance(executor, cf.Executor):
        return executor, lambda: None
    return make_executor(jobs, executor)


def _bound_from(preemptions: int | None, unbounded: bool) -> str:
    return "none" if unbounded else ("option" if preemptions is not None else "scenario")


def _stopped_note(rep: Report, max_seconds: float | None, covered: tuple[int, int] | None) -> None:
    if rep.complete:
        return
    rep.raw_exact = False
    what = f"{covered[0]} of {covered[1]} parts finished" if covered else "the undivided search stopped"
    rep.params["inconclusive"] = (f"stopped after --max-seconds {max_seconds:g}: {what}; the counts are lower"
                                  f" bounds and a missing anomaly proves nothing"
                                  if max_seconds is not None else f"stopped early: {what}")
    # (the verdict is emqlab.verdict.judge's: an anomaly found before the stop still fails, none is inconclusive)


def _run(job: Job, tasks: list[Task], ex: cf.Executor, progress: Progress | None, deadline: float | None,
         st: Stats) -> list[Part]:
    """Submit every part, collect them (until ``deadline``: parts not started by then are cancelled, parts
    running stop at their next run), and return them in part order."""
    done: dict[int, Part] = {}
    futures: dict[cf.Future[Part], Task] = {}
    inline = isinstance(ex, InlineExecutor)
    try:
        if progress:
            progress(0, len(tasks))
        for t in tasks:
            futures[ex.submit(run_part, job, t)] = t
            if inline and progress:
                progress(len(futures), len(tasks))
        pending = set(futures)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.time()) + 5.0
            finished, pending = _wait(pending, timeout)
            for f in finished:
                if not f.cancelled():
                    part = f.result()
                    done[part.index] = part
            if progress and not inline:
                progress(len(done), len(tasks))
            if deadline is not None and time.time() > deadline + 5.0 and pending:
                for f in pending:
                    f.cancel()
                break
    except (KeyboardInterrupt, SystemExit):
        with _quiet():
            for f in futures:
                f.cancel()
        raise
    for part in done.values():
        if part.refused is None:
            _tally(st, part)
    return [done.get(t.index) or Part(t.index, complete=False, started=False) for t in tasks]


def _run_refused(runner: EngineRunner, job: Job, tasks: list[Task], parts: list[Part], st: Stats) -> list[Part]:
    """The parts a worker could not start because the server refused it a queue, run here on the
    coordinator's own (registered) queue, in part order."""
    out = []
    for task, part in zip(tasks, parts, strict=True):
        if part.refused is not None:
            st.refused = part.refused
            with _lending(runner):
                part = run_part(job, task)
            _tally(st, part)
        out.append(part)
    return out


def _tally(st: Stats, part: Part) -> None:
    st.queues.add(part.queue)
    st.streamed += part.streamed
    st.part_seconds.append(part.seconds)
    st.part_cpu_s.append(part.cpu_s)
    w = st.workers.setdefault(part.worker, {"parts": 0, "seconds": 0.0, "peak_rss_mb": 0.0})
    w["parts"] += 1
    w["seconds"] += part.seconds
    w["peak_rss_mb"] = max(w["peak_rss_mb"], part.peak_rss_kb / 1024)


#: the longest a wait for the workers holds the stop signals back (s)
WAIT_SLICE = 0.1


def _wait(fs: set[cf.Future[Any]], timeout: float | None) -> tuple[set[cf.Future[Any]], set[cf.Future[Any]]]:
    """``cf.wait(fs, timeout, FIRST_COMPLETED)`` with the stop signals held back (POSIX, main thread): a
    KeyboardInterrupt raised inside it, while it holds some futures' locks, would leave them held, and the
    pool's own thread, cancelling, would then wait for them for ever. Waits at most :data:`WAIT_SLICE` at a
    time, so a signal is taken within that."""
    slice_ = WAIT_SLICE if timeout is None else min(timeout, WAIT_SLICE)
    if threading.current_thread() is not threading.main_thread():
        done, pending = cf.wait(fs, timeout=slice_, return_when=cf.FIRST_COMPLETED)
        return set(done), set(pending)
    with stops_held():  # (a signal that came meanwhile is taken as it ends, outside the locks)
        done, pending = cf.wait(fs, timeout=slice_, return_when=cf.FIRST_COMPLETED)
    return set(done), set(pending)


@contextmanager
def _quiet() -> Iterator[None]:
    """The clean-up after a stop signal, safe from the next one (the terminal sends Ctrl-C to the whole
    process group, and impatient users press it twice): the stop signals are ignored meanwhile
    (:func:`_ignore`; main thread only), so the pool shuts down and every live key is deleted instead of
    hanging half-way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _ignore)
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _interrupt_pool(ex: cf.Executor) -> None:
    """Ctrl-C reaches a terminal's whole process group; a signal to the coordinator alone is passed on, so
    every running part stops and deletes its live keys before the pool shuts down."""
    procs = getattr(ex, "_processes", None) or {}
    for pid in list(procs):
        try:
            os.kill(pid, signal.SIGINT)
        except OSError:
            pass


def _merge(runner: EngineRunner, job: Job, parts: list[Part]) -> Report:
    """One report from the parts, in part order (so the same whatever ran them, wherever)."""
    from emqlab.backend.connect import describe

    order = [a.id for a in runner.scenario.actors]
    rep = Report(runner.scenario.name, runner.mode, job.strategy, describe(runner.conn))
    rep.reduction = "source-dpor" if job.strategy == "exhaustive" else "off"
    rep.steps_per_actor = {a: 0 for a in order}
    results: dict[str, Counter[str]] = {a: Counter() for a in order}
    codes: dict[str, Counter[Outcome]] = {a: Counter() for a in order}
    best: dict[str, tuple[int, int, tuple[int, ...], str, str]] = {}
    for p in parts:
        rep.complete = rep.complete and p.complete
        rep.explored += p.explored
        rep.pruned += p.pruned
        rep.outside_bound += p.outside_bound
        rep.raw_interleavings += p.raw
        rep.steps_executed += p.steps_executed
        for a, n in p.steps_per_actor.items():
            rep.steps_per_actor[a] = max(rep.steps_per_actor.get(a, 0), n)
        for k, n in p.runs_with.items():
            rep.runs_with[k] = rep.runs_with.get(k, 0) + n
        for k, n in p.interleavings_with.items():
            rep.interleavings_with[k] = rep.interleavings_with.get(k, 0) + n
        for k, b in p.best.items():
            if k not in best or b[:3] < best[k][:3]:
                best[k] = b
        rep.outcomes |= p.outcomes
        for a, c in p.results.items():
            results[a].update(c)
        for a, oc in p.codes.items():
            codes[a].update(oc)
        for cause, n in p.aborted.items():
            rep.aborted[cause] = rep.aborted.get(cause, 0) + n
        for cause, n in p.retried.items():
            rep.retried[cause] = rep.retried.get(cause, 0) + n
        rep.stopped = rep.stopped or p.stopped
    rep.raw_exact = job.strategy == "exhaustive" and rep.complete and not rep.aborted
    rep.distinct_outcomes = len(rep.outcomes)
    rep.results = {a: dict(sorted(c.items())) for a, c in results.items() if c}
    rep.codes = {a: dict(sorted(c.items(), key=lambda kv: str(kv[0]))) for a, c in codes.items() if c}
    for k, (pre, _n, _rank, schedule, ran) in sorted(best.items()):
        try:
            runner.reset()
            h = runner.run(parse_schedule(schedule, order))
            if k not in h.kinds:  # as the undivided search does: keep the run that showed it
                runner.reset()
                h = runner.run(parse_schedule(ran, order))
        except INFRASTRUCTURE as e:  # the server failed the replay: the report says so, without this witness
            rep.stopped = rep.stopped or Abort.of(e)[0]
            rep.complete = False
            rep.min_preemptions[k] = pre
            rep.unreplayed[k] = schedule
            continue
        if job.strategy != "exhaustive":
            h = shrink(runner, h, k)
        rep.witnesses[k] = h
        rep.min_preemptions[k] = pre
    return rep


def _swarm_params(runner: EngineRunner, rep: Report, job: Job, runs: int, seed: int, parts: list[Part]) -> None:
    # the chunks' seeds are seed, seed + 1, …: a range, not a list (a long run has thousands)
    rep.params = {"runs": runs, "seed": seed,
                  "swarm": {"seeds": {"from": seed, "to": seed + len(parts) - 1}, "runs_per_seed": SWARM_CHUNK,
                            "chunks_run": sum(p.started for p in parts)}}
    runner.reset()
    counts = Counter(s.actor for s in runner.run().steps)
    # the estimate from the longest each actor ran in any sample (as the label of the count says)
    rep.raw_interleavings = multinomial([max(counts.get(a, 0), rep.steps_per_actor.get(a, 0))
                                         for a in rep.steps_per_actor])
    if job.strategy == "random":
        return
    n = len(runner.scenario.actors)
    longest = max([sum(counts.values()), *(p.longest for p in parts)])
    per_run = 1 / (n * longest ** (job.depth - 1))
    done_runs = rep.explored
    rep.params.update({"depth": job.depth, "longest_run": longest,
                       "bound_per_run": f"1/({n}*{longest}^{job.depth - 1})", "p_per_run_at_least": per_run,
                       "p_all_runs_at_least": 1 - (1 - per_run) ** done_runs,
                       "assumes": f"a bug of depth <= {job.depth}"})
    ex = Explorer(runner)
    ex.report = rep
    ex._check_depth(job.depth)


def progress_bar(console: Any) -> Any:
    """A rich progress bar over the parts with an ETA: ``with progress_bar(c) as progress: explore(...,
    progress=progress)``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    @contextmanager
    def bar() -> Iterator[Progress | None]:
        columns = [SpinnerColumn(), TextColumn("exploring {task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
        # refreshed on each update, not by a thread of its own: a process with no other thread can fork its
        # pool's workers (start_method)
        with Progress(*columns, console=console, transient=True, auto_refresh=False) as p:
            task = p.add_task("parts", total=None)

            def update(done: int, total: int | None) -> None:
                p.update(task, completed=done, total=total, refresh=True)

            yield update  # type: ignore[misc]

    return bar()


__all__ = ["DONATE_EVERY", "Donor", "ExecutorUnreachable", "InlineExecutor", "Job", "PROBE_RUNS",
           "ParallelError", "Part", "SWARM_CHUNK", "Stats", "Task", "default_jobs",
           "explore", "make_executor", "progress_bar", "run_part", "start_method", "url_of"]
