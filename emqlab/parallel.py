"""Explorations past one core and one machine: the search divided into subtrees, run on a process pool (the
default) or a Dask cluster, merged into the report a single process would give.

**The cut.** The coordinator expands the top of the search tree with sleep sets (Godefroid): at each node
every enabled actor not asleep is tried, and an actor tried sleeps in its later siblings' subtrees until a
step that conflicts with it — breadth-first at first, then at the heaviest prefixes (:func:`prefixes`).
Each prefix on the frontier is shipped as a *subtree*: its schedule string and the sleep set where it ends.
A worker runs Source-DPOR below it with the prefix's steps fixed and that sleep set
(:meth:`emqlab.explore.Explorer._dpor` with ``root``, ``Explorer.root_sleep``).

**Why it is sound.** Above the cut every enabled actor is explored, so when a subtree finds a race that
would reverse one of the prefix's steps, the backtrack point it asks for is already there (explored, or
asleep and covered by an earlier sibling): the reversal is another subtree. Dropping such races loses
nothing. Above and below the cut it is one search with sleep sets (Source-DPOR with larger backtrack sets
above the cut), so every trace is run, and run to completion in exactly one subtree (sleep sets never
complete two runs of one trace).

**Counting.** Each trace is counted in the subtree that ran it, all its interleavings (the linear
extensions of its happens-before order): the sum over the subtrees is the exact total, for each anomaly
and within the preemption bound too. The witness is the minimum of (preemptions, steps, schedule in
scenario order) over the subtrees, which is the global minimum; the coordinator replays it. Distinct final
states are the union of the subtrees' sets. (The simpler division, ``carry_sleep=False``, starts every
subtree awake at one depth ``d`` and counts only the interleavings whose first ``d`` steps are the
prefix's: :class:`emqlab.explore.Trace` with ``through``. A trace may then run in several subtrees, but
every interleaving has one first-``d`` down-set, so the counts still partition.)

**Independent of the worker count.** The decomposition depends only on the scenario, the mode and the
bound: an exploration that finishes within :data:`PROBE_RUNS` runs is run whole in the coordinator (dividing
it would cost more than it saves), else the frontier has about :data:`TARGET_SUBTREES` prefixes (none
longer than :data:`MAX_CUT`). Parts are merged in prefix order, so ``--jobs 1``
and ``--jobs 8`` print the same report, runs executed included.

**Sampled strategies** (random, PCT) are split by seed, a *swarm*: chunk ``i`` runs :data:`SWARM_CHUNK` runs
with seed ``seed + i``, exactly as ``explore(..., runs=SWARM_CHUNK, seed=seed + i)`` in one process would.

**Executors** are :class:`concurrent.futures.Executor`: in this process for one job, a process pool
(``forkserver``) for more, or Dask's ``distributed.Client(...).get_executor()`` for ``dask://host:port``.
Each worker process keeps one fakeredis server; on a live server each worker process runs under its own
queue (``emq:{q-<random>}:``), deleted when the worker ends or is interrupted.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .explore import Explorer, Report, multinomial, shrink
from .footprints import Footprint
from .outcome import Outcome
from .registry import ScriptSet
from .runner import Runner as EngineRunner
from .scenario import Scenario
from .schedule import Runner
from .schedules import format_schedule, parse_schedule

#: an exploration that finishes within this many runs is not divided
PROBE_RUNS = 32
#: the cut is the shallowest depth with at least this many distinct prefixes
TARGET_SUBTREES = 48
#: … but never deeper than this
MAX_CUT = 12
#: runs per seed in a swarm (random, PCT)
SWARM_CHUNK = 25

Progress = Callable[[int, int | None], None]


class ParallelError(ValueError):
    """An executor could not be set up (Dask missing, a bad ``--executor``); the message is one line."""


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

    @property
    def key(self) -> str:
        blob = pickle.dumps((self.scenario, self.mode, self.url, self.scripts.origin if self.scripts else None))
        return hashlib.sha1(blob).hexdigest()


@dataclass(frozen=True)
class Task:
    """One part: a subtree (its prefix as a schedule string) or a swarm chunk (its seed and run count)."""

    index: int
    prefix: str = ""
    #: the sleep set where the prefix ends (None: start the subtree awake and count by prefix instead)
    sleep: dict[str, Footprint] | None = None
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
def _runner_for(job: Job) -> Iterator[Runner]:
    """The worker's runner for ``job``: kept across parts of the same job (one fakeredis, or one live queue,
    per worker), except on a live server without a clean-up hook, where each part has its own queue."""
    from .backends import connect

    if job.url is not None and not job.cache_live:
        r = Runner(job.scenario, job.mode, connect(job.url), scripts=job.scripts)
        try:
            yield r
        finally:
            conn = r.conn
            r.close()
            conn.close()
        return
    if getattr(_local, "key", None) != job.key:
        _drop_runner()
        _local.runner = Runner(job.scenario, job.mode, connect(job.url), scripts=job.scripts)
        _local.key = job.key
    try:
        yield _local.runner
    except BaseException:
        _drop_runner()  # interrupted mid-run: delete the live keys now
        raise


def _on_sigint(signum: int, frame: Any) -> None:
    if _running.is_set():
        raise KeyboardInterrupt


def _pool_init() -> None:
    """A pool worker: Ctrl-C interrupts the part it is running (its live keys are deleted), and is ignored
    between parts; the cached runner is closed when the worker exits."""
    import multiprocessing.util

    signal.signal(signal.SIGINT, _on_sigint)
    multiprocessing.util.Finalize(None, _drop_runner, exitpriority=10)


def run_part(job: Job, task: Task) -> Part:
    """Run one part in this worker and return what it found (the function every executor runs)."""
    import socket

    started = time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}" + (
        f":{threading.get_ident()}" if threading.current_thread() is not threading.main_thread() else "")
    if job.deadline is not None and time.time() > job.deadline:
        return Part(task.index, complete=False, started=False, worker=worker)
    _running.set()
    try:
        with _runner_for(job) as runner:
            ex = Explorer(runner)
            ex.deadline = job.deadline
            part = Part(task.index, worker=worker, queue=runner.keys.base)
            if job.strategy == "exhaustive":
                _subtree(ex, job, task)
            elif job.strategy == "random":
                ex.random(task.runs, task.seed)
            else:
                ex.pct(task.runs, task.seed, job.depth, check_depth=False)
                part.longest = int(ex.report.params.get("longest_run", 0))
            _collect(ex, part)
    finally:
        _running.clear()
    part.seconds = time.perf_counter() - started
    part.peak_rss_kb = _peak_rss_kb()
    return part


def _subtree(ex: Explorer, job: Job, task: Task) -> None:
    rep = ex.report
    rep.strategy = "exhaustive"
    rep.reduction = "source-dpor"
    rep.steps_per_actor = {a: 0 for a in ex.order}
    prefix = parse_schedule(task.prefix, ex.order)
    if task.sleep is not None:
        ex.root_sleep = task.sleep
    else:
        ex.through = dict(Counter(prefix))
    ex._dpor(job.bound, job.max_runs, root=prefix)


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


# -- the coordinator side -----------------------------------------------------------------------------------


Node = tuple[list[str], dict[str, Footprint]]  # a prefix and its sleep set
Child = tuple[list[str], dict[str, Footprint], str]  # a prefix, its sleep set and its status
#: the status of a child prefix: it continues, its run has ended, or every enabled actor sleeps
GOES_ON, ENDED, ASLEEP = "on", "ended", "asleep"
#: prefixes expanded per task while finding the cut
EXPAND_CHUNK = 4


def expand(runner: EngineRunner, nodes: Sequence[Node]) -> tuple[list[list[Child]], int]:
    """The children of each node one step deeper, with sleep sets (an actor tried at a node sleeps in its
    later siblings' subtrees until a step that conflicts with it), and the steps executed."""
    out = []
    executed = 0
    for prefix, sleep in nodes:
        kids: list[Child] = []
        tried: dict[str, Footprint] = {}
        runner.reset()
        for c in prefix:
            runner.step(c)
        executed += len(prefix)
        for a in list(runner.enabled):
            if a in sleep:
                continue
            if tried:
                runner.reset()
                for c in prefix:
                    runner.step(c)
                executed += len(prefix)
            runner.step(a)
            executed += 1
            fp = runner.footprints[-1]
            child_sleep = {q: f for q, f in {**sleep, **tried}.items() if not f.conflicts(fp)}
            tried[a] = fp
            status = ENDED if runner.done else (
                GOES_ON if any(e not in child_sleep for e in runner.enabled) else ASLEEP)
            kids.append(([*prefix, a], child_sleep, status))
        out.append(kids)
    return out, executed


def prefixes(expand_level: Callable[[list[Node]], tuple[list[list[Child]], int]],
             order: Sequence[str], *, target: int = TARGET_SUBTREES, max_cut: int = MAX_CUT,
             carry_sleep: bool = True, deadline: float | None = None,
             steps: dict[str, int] | None = None) -> tuple[int, list[Node], int]:
    """The cut depth, the subtrees (prefix and sleep set, in scenario order) and the steps executed to find
    them: the distinct prefixes of the shallowest depth with at least ``target`` of them, breadth-first with
    sleep sets (``expand_level`` runs :func:`expand` over one level's nodes, here or on workers). Runs that
    end above the cut are subtrees of their own.

    With ``carry_sleep`` (the default) the subtrees start with their sleep sets: the tree above the cut is
    explored in full with sleep sets and below it by Source-DPOR, one search, so each trace is run in
    exactly one subtree; a prefix where every enabled actor sleeps is dropped (its runs would all be cut
    short). Without, the subtrees start awake and count only the interleavings through their own prefix
    (:class:`emqlab.explore.Trace` ``through``); a prefix where every enabled actor sleeps is then kept if it
    reaches the cut (no other prefix has its steps) and dropped above it.

    With ``carry_sleep`` and ``steps`` (each actor's steps in the default run), the breadth-first search
    stops at a third of ``target`` and the heaviest prefixes are expanded further, a round of them at a time,
    until there are ``target``: the weight of a prefix is the number of interleavings of the steps its actors
    have left. Any frontier of the tree will do here (every run passes through exactly one of its nodes), so
    the cut follows the work instead of one depth for all."""
    idx = {a: i for i, a in enumerate(order)}
    level: list[Node] = [([], {})]
    leaves: list[Node] = []
    asleep: list[Node] = []  # prefixes of the current depth where every enabled actor sleeps
    depth = 0
    executed = 0
    refine = carry_sleep and steps is not None
    uniform = max(2, target // 3) if refine else target
    while level and len(level) + len(asleep) + len(leaves) < uniform and depth < max_cut:
        if deadline is not None and time.time() > deadline:
            break  # any depth is a cut: the parts will not start
        kids, n = expand_level(level)
        executed += n
        level, asleep = [], []
        for group in kids:
            for child, child_sleep, status in group:
                if status == ENDED:
                    leaves.append((child, child_sleep))
                elif status == ASLEEP:
                    if not carry_sleep:
                        asleep.append((child, child_sleep))
                else:
                    level.append((child, child_sleep))
        depth += 1
    if refine and steps is not None:
        def weight(node: Node) -> tuple[int, list[int]]:
            used = Counter(node[0])
            return -multinomial([max(0, steps.get(a, 0) - used[a]) for a in order]), [idx[c] for c in node[0]]

        while len(level) + len(leaves) < target and (deadline is None or time.time() <= deadline):
            open_ = sorted((n for n in level if len(n[0]) < max_cut), key=weight)
            if not open_:
                break
            chosen = open_[:max(1, min(EXPAND_CHUNK * 2, target - len(level) - len(leaves)))]
            kids, n = expand_level(chosen)
            executed += n
            picked = {format_schedule(p) for p, _s in chosen}
            level = [node for node in level if format_schedule(node[0]) not in picked]
            for group in kids:
                for child, child_sleep, status in group:
                    if status == ENDED:
                        leaves.append((child, child_sleep))
                    elif status == GOES_ON:
                        level.append((child, child_sleep))
        depth = max((len(p) for p, _s in level + leaves), default=depth)
    every = leaves + asleep + level
    every.sort(key=lambda node: [idx[c] for c in node[0]])
    return depth, every, executed


def expand_part(job: Job, nodes: list[Node]) -> tuple[list[list[Child]], int]:
    """:func:`expand` in a worker (the function an executor runs while the cut is found)."""
    _running.set()
    try:
        with _runner_for(job) as runner:
            return expand(runner, nodes)
    finally:
        _running.clear()


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


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


def make_executor(jobs: int | None = None, executor: str | None = None) -> tuple[cf.Executor, Callable[[], None]]:
    """An executor and its clean-up: ``executor`` ``dask://host:port`` (or ``tcp://…``) connects a Dask
    client, ``None``/``local`` is a process pool of ``jobs`` workers (this process for one)."""
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
            raise ParallelError(f"cannot reach the Dask scheduler at {address}: {e}") from None
        return client.get_executor(), client.close
    n = jobs if jobs is not None else default_jobs()
    if n <= 1:
        return InlineExecutor(), lambda: None
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(["emqlab.parallel"])
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_pool_init)
    return pool, lambda: pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Stats:
    """How a divided exploration ran (not part of the report: it differs between runs and worker counts)."""

    parts: int = 0
    cut_depth: int | None = None
    prefix_steps: int = 0
    divided: bool = False
    workers: dict[str, dict[str, float]] = field(default_factory=dict)
    part_seconds: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    coordinator_s: float = 0.0
    interrupted: bool = False
    #: the queues the parts ran under (one per worker process on a live server; all deleted afterwards)
    queues: set[str] = field(default_factory=set)


def _url_of(conn: Any) -> str | None:
    from .backends import is_fake

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
            max_seconds: float | None = None, divide: bool | None = None,
            target: int = TARGET_SUBTREES, carry_sleep: bool = True, stats: Stats | None = None) -> Report:
    """:func:`emqlab.explore.explore`, divided over ``jobs`` local processes (default: the cores) or an
    ``executor`` (an :class:`concurrent.futures.Executor`, or ``dask://host:port``). ``divide`` forces the
    exhaustive search to be divided (``True``) or not (``False``); by default it is divided when it does not
    finish within :data:`PROBE_RUNS` runs. ``max_seconds`` stops it: the report is then incomplete and says
    what was covered. ``progress(done, total)`` counts parts; ``stats`` (a :class:`Stats`) is filled in.
    ``carry_sleep=False`` divides the simpler way (subtrees start awake, counts restricted by prefix).
    ``conn`` is the coordinator's backend; workers connect to ``url`` (default: ``conn``'s; fakeredis: one
    server per worker)."""
    from . import explore as _explore
    from .backends import connect

    if strategy not in ("exhaustive", "random", "pct"):
        return _explore.explore(scenario, mode, strategy=strategy, conn=conn, scripts=scripts, progress=progress)
    if not isinstance(executor, cf.Executor):
        check_executor(executor)
    st = stats if stats is not None else Stats()
    started = time.perf_counter()
    deadline = time.time() + max_seconds if max_seconds is not None else None
    own_conn = conn is None
    if conn is None:
        conn = connect(url)
    if url is None:
        url = _url_of(conn)
    bound = None if unbounded else (preemptions if preemptions is not None else scenario.preemptions)
    # a runner kept across parts needs a clean-up hook where it lives: this process, or our pool's workers
    local = executor in (None, "local", "process") or isinstance(executor, (InlineExecutor, cf.ProcessPoolExecutor))
    job = Job(scenario, mode, url, scripts, strategy, bound, depth, deadline, cache_live=local)
    try:
        with Runner(scenario, mode, conn, scripts=scripts) as runner:
            order = [a.id for a in scenario.actors]
            if strategy == "exhaustive":
                probe_steps = 0
                if not reduce or divide is not True:
                    probe = Explorer(runner)
                    probe.deadline = deadline
                    limit = PROBE_RUNS if divide is None and reduce else None
                    rep = probe.exhaustive(preemption_bound=bound, reduce=reduce, max_runs=limit)
                    out_of_time = deadline is not None and time.time() > deadline
                    if rep.complete or limit is None or out_of_time:
                        rep.params["max_runs"] = None
                        rep.params["bound_from"] = _bound_from(preemptions, unbounded)
                        rep.params["divided"] = (f"no: finished within {PROBE_RUNS} runs" if limit else
                                                 "no" if reduce else "no: --no-reduce runs every schedule here")
                        _stopped_note(rep, max_seconds, None)
                        rep.elapsed_s = time.perf_counter() - started
                        return rep
                    probe_steps = rep.steps_executed
            pool, close_pool = _executor(executor, jobs)
            try:
                if strategy == "exhaustive":
                    def level(nodes: list[Node]) -> tuple[list[list[Any]], int]:
                        chunks = [nodes[i:i + EXPAND_CHUNK] for i in range(0, len(nodes), EXPAND_CHUNK)]
                        done = [f.result() for f in [pool.submit(expand_part, job, c) for c in chunks]]
                        return [g for kids, _n in done for g in kids], sum(n for _k, n in done)

                    runner.reset()
                    default = dict(Counter(s.actor for s in runner.run().steps))
                    st.cut_depth, subtrees, st.prefix_steps = prefixes(level, order, target=target,
                                                                       carry_sleep=carry_sleep, deadline=deadline,
                                                                       steps=default)
                    st.divided = True
                    tasks = [Task(i, prefix=format_schedule(p), sleep=sl if carry_sleep else None)
                             for i, (p, sl) in enumerate(subtrees)]
                else:
                    chunks = max(1, math.ceil(runs / SWARM_CHUNK))
                    tasks = [Task(i, seed=seed + i, runs=min(SWARM_CHUNK, runs - i * SWARM_CHUNK))
                             for i in range(chunks)]
                st.parts = len(tasks)
                st.coordinator_s = time.perf_counter() - started
                parts = _run(job, tasks, pool if len(tasks) > 1 else InlineExecutor(), progress, deadline, st)
            except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM turned into SystemExit by the CLI
                st.interrupted = True
                _interrupt_pool(pool)
                raise
            finally:
                close_pool()
                _drop_runner()  # the one parts run here (--jobs 1) kept: its live keys go now
            rep = _merge(runner, job, parts)
            if strategy == "exhaustive":
                rep.params = {"preemption_bound": bound, "reduce": True, "max_runs": None,
                              "bound_from": _bound_from(preemptions, unbounded),
                              "divided": {"cut_depth": st.cut_depth, "subtrees": len(tasks),
                                          "prefix_steps": st.prefix_steps, "probe_steps": probe_steps,
                                          "sleep_sets": "carried across the cut" if carry_sleep else
                                          "restarted below the cut; counts restricted by prefix",
                                          "rule": f"did not finish within {PROBE_RUNS} runs"
                                          if divide is None else "forced"}}
                rep.steps_executed += st.prefix_steps + probe_steps
            else:
                _swarm_params(runner, rep, job, runs, seed, parts)
            _stopped_note(rep, max_seconds, (sum(p.complete for p in parts), len(tasks)))
            rep.elapsed_s = time.perf_counter() - started
            return rep
    finally:
        st.wall_s = time.perf_counter() - started
        if own_conn:
            conn.close()


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
    try:
        from .verdict import INCONCLUSIVE
    except ImportError:  # pragma: no cover - before verdicts existed
        return
    rep.params["verdict"] = INCONCLUSIVE  # emqlab.verdict.judge says why: the exploration stopped early


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
            finished, pending = cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)
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
        for f in futures:
            f.cancel()
        raise
    for part in done.values():
        st.queues.add(part.queue)
        st.part_seconds.append(part.seconds)
        w = st.workers.setdefault(part.worker, {"parts": 0, "seconds": 0.0, "peak_rss_mb": 0.0})
        w["parts"] += 1
        w["seconds"] += part.seconds
        w["peak_rss_mb"] = max(w["peak_rss_mb"], part.peak_rss_kb / 1024)
    return [done.get(t.index) or Part(t.index, complete=False, started=False) for t in tasks]


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
    from .backends import describe

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
    rep.raw_exact = job.strategy == "exhaustive" and rep.complete
    rep.distinct_outcomes = len(rep.outcomes)
    rep.results = {a: dict(sorted(c.items())) for a, c in results.items() if c}
    rep.codes = {a: dict(sorted(c.items(), key=lambda kv: str(kv[0]))) for a, c in codes.items() if c}
    for k, (pre, _n, _rank, schedule, ran) in sorted(best.items()):
        runner.reset()
        h = runner.run(parse_schedule(schedule, order))
        if k not in h.kinds:  # as the undivided search does: keep the run that showed it
            runner.reset()
            h = runner.run(parse_schedule(ran, order))
        if job.strategy != "exhaustive":
            h = shrink(runner, h, k)
        rep.witnesses[k] = h
        rep.min_preemptions[k] = pre
    return rep


def _swarm_params(runner: EngineRunner, rep: Report, job: Job, runs: int, seed: int, parts: list[Part]) -> None:
    seeds = [seed + p.index for p in parts]
    rep.params = {"runs": runs, "seed": seed, "swarm": {"seeds": seeds, "runs_per_seed": SWARM_CHUNK}}
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
        with Progress(*columns, console=console, transient=True) as p:
            task = p.add_task("parts", total=None)

            def update(done: int, total: int | None) -> None:
                p.update(task, completed=done, total=total)

            yield update  # type: ignore[misc]

    return bar()


__all__ = ["InlineExecutor", "Job", "PROBE_RUNS", "ParallelError", "Part", "SWARM_CHUNK", "Stats",
           "TARGET_SUBTREES", "Task", "default_jobs", "explore", "make_executor", "prefixes", "progress_bar",
           "run_part"]
