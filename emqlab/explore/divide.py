"""The home of a divided exploration's coordinator: explorations past one core and one machine, the search
divided into parts while it runs, on a process pool (the default) or a Dask cluster, merged into the report
a single process would give. The parts are :mod:`emqlab.explore.parts`'s; the pool, :mod:`emqlab.explore.pool`.

**Handing on** (:class:`Donor`). The exhaustive search starts whole, in this process. After
:data:`PROBE_RUNS` runs, and then after gaps of ``donate_every`` runs
(:class:`~emqlab.explore.config.ExploreConfig`) that double each time, it hands on the shallowest node of
its search path that still has enabled, awake, unexplored children: the node's state (sleep set, children
explored here with their footprints, children left) goes out as a :class:`emqlab.explore.tree.Branch`, and
the node counts as explored here. Each part handed on is searched the same way (Source-DPOR below its prefix,
:meth:`emqlab.explore.dpor.Exhaustive.search` with ``root`` and ``branch``) and hands on in turn. An exploration
that ends within :data:`PROBE_RUNS` runs is exactly the undivided one and starts no pool.

**Requests, and why it is sound.** A part explores, of the children handed on to it, those a race had asked
for by then (a node's other children are what the undivided search would never run, unless a race asks
later). A race that asks for a child at a node a search does not own — a node of its root prefix, or a
child it handed on unplanned — is a :class:`~emqlab.explore.tree.Request`; each child asked for that the
part it went to left unexplored is handed on as a new part (:class:`_Asked`): every backtrack point the
undivided search would add is explored. Sleep sets
carry across the hand-on (the branch explores its children in the order the search here would have, each
asleep for the ones before it); a trace two parts both ran is counted once (:meth:`Report.merge`).

**Counting.** Each trace is counted in the part that ran it (once, where two did), all its interleavings
(the linear extensions of its happens-before order): the sum over the parts is the exact total, for each
anomaly and within the preemption bound too. The witness is the minimum of (preemptions, steps, schedule in
scenario order) over the parts, which is the global minimum; the coordinator replays it. Distinct final
states are the union of the parts' sets.

**Independent of the worker count.** When and what a part hands on depends on its run count alone, never on
timing, and so do its requests and what it leaves (:class:`_Asked`), so the parts are the same for
``--jobs 1`` and ``--jobs 8``; they are merged in prefix order, and
the report — runs executed included — is the same.

**Where the parts run** (:class:`emqlab.explore.pool.Dispatch`). ``--jobs N`` is this process and a pool of
N − 1 workers, started once the search has used :data:`~emqlab.explore.pool.WARM_AFTER_S` of CPU (a shorter search
runs every part here). Parts go to free workers oldest first (the shallowest, likely the largest); this
process searches the root part, then runs queued parts too, newest first, feeding the workers between its
runs. A pool worker's own hand-ons come back as it hands them on (a Dask worker's, when its part ends).

**Sampled strategies** (random, PCT) are split by seed, a *swarm*: chunk ``i`` runs :data:`SWARM_CHUNK` runs
with seed ``seed + i·SWARM_STRIDE`` (:func:`chunk_seeds`), exactly as ``explore(..., runs=SWARM_CHUNK,
seed=seed + i·SWARM_STRIDE)`` in one process would.

**Executors** are :class:`concurrent.futures.Executor`: in this process for one job, a process pool
(``forkserver``, emqlab and fakeredis imported once in the fork server) for more, or Dask's
``distributed.Client(...).get_executor()`` for ``dask://host:port``. Each worker process keeps one fakeredis
server; on a live server each worker process runs under its own queue (``emq:{q-<random>}:``), deleted when
the worker ends or is interrupted.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from emqlab.analysis.anomalies import checker
from emqlab.engine.history import History
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import Scenario
from emqlab.explore.config import ExploreConfig
from emqlab.explore.dpor import Exhaustive
from emqlab.explore.parts import (
    MAX_GAP_FACTOR,
    Donor,
    Job,
    Task,
    _drop_runner,
    _lending,
    _peak_rss_kb,
    run_part,
)
from emqlab.explore.pct import depth_check
from emqlab.explore.pool import (
    Dispatch,
    InlineExecutor,
    Progress,
    _executor,
    _interrupt_pool,
    _quiet,
    _wait,
    check_executor,
    url_of,
)
from emqlab.explore.report import Part, Report, multinomial
from emqlab.explore.tree import Branch, Request
from emqlab.protocol.schedules import parse_schedule
from emqlab.scripting.registry import ScriptSet

#: an exploration that finishes within this many runs is not divided
PROBE_RUNS = 8


#: runs per seed in a swarm (random, PCT)
SWARM_CHUNK = 25
#: the distance between a swarm's consecutive chunk seeds: the swarms of two seeds less than 2^32 apart share
#: no chunk (with a distance of 1, ``--seed 0`` and ``--seed 1`` shared all chunks but one)
SWARM_STRIDE = 2**32


def chunk_seeds(seed: int, runs: int) -> range:
    """The seeds of a swarm's chunks for ``runs`` runs from ``seed``: one per :data:`SWARM_CHUNK` runs (at least
    one), ``seed``, ``seed + SWARM_STRIDE``, …; chunk ``i`` is reproduced alone with that seed and
    ``runs=SWARM_CHUNK`` (the last chunk: the runs left)."""
    return range(seed, seed + max(1, math.ceil(runs / SWARM_CHUNK)) * SWARM_STRIDE, SWARM_STRIDE)


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


def explore_divided(scenario: Scenario, mode: str, config: ExploreConfig, *, conn: Any = None,
                    url: str | None = None, scripts: ScriptSet | None = None,
                    executor: str | cf.Executor | None = None, progress: Progress | None = None,
                    stats: Stats | None = None) -> Report:
    """An exhaustive, random or PCT exploration (``config``) divided over ``config.jobs`` local processes
    (None: the cores) or an ``executor`` (an :class:`concurrent.futures.Executor`, or ``dask://host:port``).

    The exhaustive search starts whole, here; once it has run :data:`PROBE_RUNS` runs (at once with
    ``divide=True``; never with ``divide=False``) it hands subtrees on after gaps of ``donate_every`` runs,
    doubling (:class:`Donor`), and so does every subtree handed on, so an exploration within :data:`PROBE_RUNS` runs
    is exactly the undivided one and starts no pool. ``max_seconds`` stops it: the report is then incomplete
    and says what was covered. ``progress(done, total)`` counts parts: those finished, of those known so
    far (the total grows as parts are handed on; done equals it only once every part has ended); ``stats``
    (a :class:`Stats`) is filled in. ``conn`` is the coordinator's backend; workers connect to ``url``
    (default: ``conn``'s; fakeredis: one server per worker). Raises
    :class:`~emqlab.explore.pool.ParallelError` for a bad executor."""
    from emqlab.backend.connect import connect

    strategy, jobs, max_seconds = config.strategy, config.jobs, config.max_seconds
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
    bound = config.bound(scenario.preemptions)
    # a runner kept across parts needs a clean-up hook where it lives: this process, or our pool's workers
    local = executor in (None, "local", "process") or isinstance(executor, (InlineExecutor, cf.ProcessPoolExecutor))
    job = Job(scenario, mode, url, scripts, strategy, bound, config.depth, deadline, cache_live=local,
              donate_every=config.donate_every)
    try:
        with Runner(scenario, mode, conn, scripts=scripts, check=checker) as runner:
            if strategy == "exhaustive":
                return _donating(runner, job, config, executor, progress=progress, stats=st, started=started)
            pool, close_pool = _executor(executor, jobs)
            try:
                runs, seed = config.runs, config.seed
                tasks = [Task(i, seed=s, runs=min(SWARM_CHUNK, runs - i * SWARM_CHUNK))
                         for i, s in enumerate(chunk_seeds(seed, runs))]
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
            rep = _swarm(runner, _merge(runner, job, parts), job, runs, seed, parts)
            rep = _stopped_note(rep, max_seconds, (sum(p.complete for p in parts), len(tasks)))
            return replace(rep, elapsed_s=time.perf_counter() - started)
    finally:
        st.wall_s = time.perf_counter() - started
        if own_conn:
            conn.close()


def _donating(runner: Runner, job: Job, config: ExploreConfig, executor: str | cf.Executor | None, *,
              progress: Progress | None, stats: Stats, started: float) -> Report:
    """The exhaustive search run here, handing subtrees on (:class:`Donor`) to the executor as it goes, each
    of which may hand on more; one report from all of them, in prefix order."""
    st = stats
    reduce, divide, max_seconds = config.reduce, config.divide, config.max_seconds
    first = 0 if not reduce or divide is False else (job.donate_every if divide else PROBE_RUNS)
    dispatch = Dispatch(job, executor, config.jobs, progress, root=runner)
    asked = _Asked(dispatch)
    root = Exhaustive(runner)
    root.deadline = job.deadline
    donor = None
    if first:
        def tick() -> None:  # (the search here asks as it goes: a late part can start before it ends)
            asked.ask_more(root.requests)
            dispatch.pump()

        donor = root.donate = Donor(job.donate_every, first=first, sink=dispatch.submit, tick=tick)
    try:
        t0, cpu0 = time.perf_counter(), time.process_time()
        try:
            rep = root.exhaustive(preemption_bound=job.bound, reduce=reduce, max_runs=None)
        finally:
            root.donate = None
        if donor is None or not donor.donated:
            dispatch.root_done()
            undivided = ("no" if divide is False else
                         "no: --no-reduce runs every schedule here" if not reduce else
                         f"no: finished within {first} runs" if rep.complete else
                         f"no: stopped after {donor.runs if donor else 0} run(s), before the "
                         f"first hand-on (after {first})")
            rep = replace(rep, params={**rep.params, "max_runs": None, "bound_from": config.bound_from,
                                       "divided": undivided})
            rep = _stopped_note(rep, max_seconds, None)
            return replace(rep, elapsed_s=time.perf_counter() - started)
        here = root.part(0)
        here.requests = list(root.requests)
        asked.ask_more(root.requests)
        dispatch.root_done()  # (after what it asked for is handed on: the total has grown by then)
        here.worker, here.queue = f"coordinator:{os.getpid()}", runner.keys.base
        here.seconds, here.cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        here.peak_rss_kb = _peak_rss_kb()
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
    params = {"preemption_bound": job.bound, "reduce": True, "max_runs": None, "bound_from": config.bound_from,
              "divided": {"subtrees": len(parts), "deepest_prefix": st.cut_depth,
                          "handed_on": f"after {first} runs, then after gaps of {job.donate_every} runs,"
                                       f" doubling up to {MAX_GAP_FACTOR * job.donate_every}",
                          "sleep_sets": "carried into every subtree handed on",
                          "rule": "forced" if divide else f"did not finish within {PROBE_RUNS} runs"}}
    merged = _stopped_note(_merge(runner, job, parts, params), max_seconds,
                           (sum(p.complete for p in parts), len(parts)))
    return replace(merged, elapsed_s=time.perf_counter() - started)






class _Asked:
    """The requests of a divided search (:class:`~emqlab.explore.tree.Request`), met as the parts come in.

    A part explores, of the children handed on to it, those a race had asked for by then
    (:class:`~emqlab.explore.parts.Donor`) and those its own races ask for; the others it *skips*. A race
    that asks for a child at a node a search does not own — a node of its root prefix, or one it handed on
    before a race asked for that child — is a request. Each child that some part skipped and some race asked
    for is handed on, once, as a new part that explores it there: with the node's sleep set, the siblings the
    skipping part explored sleeping as they would have, and every other child the node had (explored,
    handed on or skipped) left to its owner — asked for by a request again, never explored twice here.

    Why it loses nothing: in the undivided search a race adds its reversal's initial (under a bound, each
    initial that fits) to the node's backtrack set, and the node explores it. Divided, each such child is
    explored by the search that owns the node, by the part it was handed to, or — skipped there and asked
    for — by a part of its own. Why the report does not depend on timing: what a part explores, skips and
    asks for depends on its prefix and branch alone, each child has one part that skips it, and what a late
    part is given depends on that part alone; so the parts are the same whatever finishes first."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch
        self.asked: set[tuple[tuple[str, ...], str]] = set()
        #: (path, child) -> the branch of the part that explores it there
        self.skipped: dict[tuple[tuple[str, ...], str], Branch] = {}
        self.handed: set[tuple[tuple[str, ...], str]] = set()
        #: how many of the search here's requests have been read
        self._read = 0
        dispatch.on_part = self.took

    def took(self, i: int, part: Part) -> None:
        """What part ``i`` (its index in the dispatch) left and asked for; hand on what is now met."""
        state = part.root_state
        if state is not None:
            given = self.dispatch.prefixes[i][1]
            assert given is not None
            others = set(given.children) - set(state.explored)  # (skipped here, or handed on again)
            for q in state.skipped:
                self.skipped[(state.path, q)] = Branch(
                    dict(state.sleep), frozenset(given.done | set(given.children)) - {q},
                    {**given.fps, **state.explored}, (q,), {**given.goes_on, **state.goes_on}, None,
                    frozenset((given.unplanned | others) - {q}))
        self.ask(part.requests)

    def ask_more(self, requests: list[Request]) -> None:
        """Take in what is new in the search here's growing list of ``requests``."""
        if len(requests) > self._read:
            new, self._read = requests[self._read:], len(requests)
            self.ask(new)

    def ask(self, requests: list[Request]) -> None:
        self.asked.update((r.path, r.child) for r in requests)
        met = sorted((self.asked & self.skipped.keys()) - self.handed)
        self.handed.update(met)  # (before submitting: a submit takes in finished parts, which may ask again)
        for path, child in met:
            self.dispatch.submit(list(path), self.skipped[(path, child)])


def _stopped_note(rep: Report, max_seconds: float | None, covered: tuple[int, int] | None) -> Report:
    """``rep``, when it is incomplete, with the counts not exact and a note on why in its params."""
    if rep.complete:
        return rep
    what = f"{covered[0]} of {covered[1]} parts finished" if covered else "the undivided search stopped"
    note = (f"stopped after --max-seconds {max_seconds:g}: {what}; the counts are lower bounds and a missing"
            f" anomaly proves nothing" if max_seconds is not None else f"stopped early: {what}")
    return replace(rep, raw_exact=False, params={**rep.params, "inconclusive": note})


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


def _run_refused(runner: Runner, job: Job, tasks: list[Task], parts: list[Part], st: Stats) -> list[Part]:
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


def _merge(runner: Runner, job: Job, parts: list[Part], params: dict[str, Any] | None = None) -> Report:
    """One report from the parts, in part order (so the same whatever ran them, wherever): each witness
    replayed on ``runner``."""
    from emqlab.backend.connect import describe

    order = [a.id for a in runner.scenario.actors]

    def replay(kind: str, schedule: str, ran: str) -> History:
        runner.reset()
        h = runner.run(parse_schedule(schedule, order))
        if kind not in h.kinds:  # as the undivided search does: keep the run that showed it
            runner.reset()
            h = runner.run(parse_schedule(ran, order))
        return h  # (a sampled part's witness is shrunk already: Strategy._shrink_witnesses)

    off = runner.same_server.off  # (said once, in the report: restart detection is off on this server)
    return Report.merge(parts, scenario=runner.scenario.name, mode=runner.mode, strategy=job.strategy,
                        backend=describe(runner.conn), order=order, replay=replay, params=params,
                        warnings=[off] if off else [])


def _swarm(runner: Runner, rep: Report, job: Job, runs: int, seed: int, parts: list[Part]) -> Report:
    """The merged report of a swarm of sampled parts with its params, its interleavings estimate and, for
    PCT, the depth check (:func:`emqlab.explore.pct.depth_check`, once for the swarm)."""
    # the chunks' seeds are a range, not a list (a long run has thousands)
    seeds = chunk_seeds(seed, runs)
    params: dict[str, Any] = {"runs": runs, "seed": seed,
                              "swarm": {"seeds": {"from": seeds[0], "to": seeds[-1], "step": seeds.step},
                                        "runs_per_seed": SWARM_CHUNK, "chunks_run": sum(p.started for p in parts)}}
    runner.reset()
    counts = Counter(s.actor for s in runner.run().steps)
    # the estimate from the longest each actor ran in any sample (as the label of the count says)
    raw = multinomial([max(counts.get(a, 0), rep.steps_per_actor.get(a, 0)) for a in rep.steps_per_actor])
    if job.strategy == "random":
        return replace(rep, params=params, raw_interleavings=raw)
    n = len(runner.scenario.actors)
    longest = max([sum(counts.values()), *(p.longest for p in parts)])
    steps = max([longest, *(p.k for p in parts)])  # (the change points' range, where longer: as PCT.pct says)
    per_run = 1 / (n * steps ** (job.depth - 1))
    params.update({"depth": job.depth, "longest_run": longest,
                   "bound_per_run": f"1/({n}*{steps}^{job.depth - 1})", "p_per_run_at_least": per_run,
                   "p_all_runs_at_least": 1 - (1 - per_run) ** rep.explored,
                   "assumes": f"a bug of depth <= {job.depth}"})
    more, warnings = depth_check(runner, rep.anomaly_kinds, job.depth)
    return replace(rep, params={**params, **more}, raw_interleavings=raw, warnings=[*rep.warnings, *warnings])


__all__ = ["PROBE_RUNS", "SWARM_CHUNK", "Stats", "explore_divided"]
