"""Divided explorations (emqlab.parallel): wall time with one worker against two, side by side in one run,
peak memory per worker, and a projection to 8, 32 and 128 workers from the measured cost of each subtree.

    python benchmarks/bench_parallel.py [--repeat N] [--slice K] [--write docs/benchmarks.md]

Two cases:

* the largest shipped exploration, ``two-workers`` split at its bound (the most runs of the library): the
  whole divided exploration, ``--jobs 1`` and ``--jobs 2`` alternately (``--repeat`` times each, medians),
  each in a fresh process, next to the undivided search;
* ``benchmarks/scenarios/three-split-workers.yaml`` (three split finishes and a sweep, not shipped): its
  tree is far too large for this machine (one subtree of 56 runs for minutes), so the same ``--slice``
  subtrees (every n-th of the cut, in order) run their first 10 runs each (unbounded, so every run
  counts), with one worker and with two: the same work on both sides; the projection is for that budgeted
  exploration of all 56 subtrees, not for the whole tree.

The projection: the subtrees' measured costs (the slice's mean for the ones not run) scheduled greedily in
cut order onto w workers (what a pool does), plus the coordinator's time to find the cut; it ignores the
network and the scheduler of a cluster. The load average of the machine is given with each measurement:
other jobs share the cores, and a speed-up is only as good as the idle core it gets.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _tables import append_table

HERE = Path(__file__).resolve().parent
THREE = HERE / "scenarios" / "three-split-workers.yaml"
#: three-split-workers: each subtree's first runs only (its whole tree is beyond this machine)
RUNS_PER_SUBTREE = 10


# -- one measurement, in a fresh process -----------------------------------------------------------------------


def _one(kind: str, jobs: int, slice_n: int) -> dict[str, Any]:
    from emqlab import parallel, scenario
    from emqlab.explore import explore

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    if kind == "whole":
        sc = scenario.load("two-workers")
        rep = explore(sc, "split")
        out: dict[str, Any] = {"runs": rep.explored + rep.pruned + rep.outside_bound, "claims": rep.claims()}
        st = None
    elif kind == "divided":
        sc = scenario.load("two-workers")
        st = parallel.Stats()
        rep = parallel.explore(sc, "split", jobs=jobs, divide=True, stats=st)
        out = {"runs": rep.explored + rep.pruned + rep.outside_bound, "claims": rep.claims()}
    else:
        sc = scenario.load(str(THREE))
        st = parallel.Stats()
        out = _slice(sc, jobs, slice_n, st)
    out["seconds"] = time.perf_counter() - t0
    out["load"] = (load + os.getloadavg()[0]) / 2
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if st is not None:
        out["stats"] = {"parts": st.parts, "cut_depth": st.cut_depth, "coordinator_s": st.coordinator_s,
                        "part_seconds": st.part_seconds, "workers": st.workers, "prefix_steps": st.prefix_steps}
    return out


def _slice(sc: Any, jobs: int, n: int, st: Any) -> dict[str, Any]:
    """The cut of the three-split-worker tree and every k-th of its subtrees run (the same ones for any
    number of workers), through the same parts and executors as a whole exploration."""
    from emqlab import parallel
    from emqlab.schedules import format_schedule

    t0 = time.perf_counter()
    job = parallel.Job(sc, "split", None, None, "exhaustive", None, max_runs=RUNS_PER_SUBTREE)
    ex, close = parallel.make_executor(jobs)
    try:
        def level(nodes: list[Any]) -> tuple[list[list[Any]], int]:
            chunks = [nodes[i:i + parallel.EXPAND_CHUNK] for i in range(0, len(nodes), parallel.EXPAND_CHUNK)]
            done = [f.result() for f in [ex.submit(parallel.expand_part, job, c) for c in chunks]]
            return [g for kids, _n in done for g in kids], sum(k for _g, k in done)

        cut, subtrees, steps = parallel.prefixes(level, [a.id for a in sc.actors])
        st.coordinator_s = time.perf_counter() - t0
        st.cut_depth, st.prefix_steps = cut, steps
        every = max(1, len(subtrees) // n)
        chosen = subtrees[::every][:n]
        tasks = [parallel.Task(i, prefix=format_schedule(p), sleep=s) for i, (p, s) in enumerate(chosen)]
        st.parts = len(tasks)
        parts = parallel._run(job, tasks, ex, None, None, st)
    finally:
        close()
    return {"subtrees_total": len(subtrees), "runs": sum(p.explored + p.pruned + p.outside_bound for p in parts),
            "complete": all(p.complete for p in parts)}


def _measure(kind: str, jobs: int, slice_n: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", kind, str(jobs), str(slice_n)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=HERE.parent)
    return json.loads(res.stdout.strip().splitlines()[-1])


# -- projection -------------------------------------------------------------------------------------------------


def _project(costs: list[float], workers: int, coordinator: float) -> float:
    """Greedy list scheduling in cut order (each subtree to the first free worker) plus the coordinator."""
    free = [0.0] * min(workers, max(1, len(costs)))
    heapq.heapify(free)
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return coordinator + max(free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2, help="alternating runs per worker count (medians)")
    ap.add_argument("--slice", type=int, default=8, help="three-split-workers: subtrees run")
    ap.add_argument("--write", type=Path, help="append the tables to this markdown file")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(_one(a.one[0], int(a.one[1]), int(a.one[2]))))
        return
    rows = []
    notes = []
    for kind, label in (("divided", "two-workers split (≤2), whole"),
                        ("slice", f"three-split-workers split, {a.slice} subtrees × first {RUNS_PER_SUBTREE} runs")):
        got: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for _ in range(a.repeat):
            for jobs in (1, 2):  # side by side: 1, 2, 1, 2, …
                got[jobs].append(_measure(kind, jobs, a.slice))
        one, two = got[1], got[2]
        t1 = statistics.median(m["seconds"] for m in one)
        t2 = statistics.median(m["seconds"] for m in two)
        if kind == "divided":
            assert all(m["claims"] == one[0]["claims"] for m in one + two)
        load = statistics.mean(m["load"] for m in one + two)
        w1 = max(w["peak_rss_mb"] for w in one[0]["stats"]["workers"].values())
        w2 = max(w["peak_rss_mb"] for m in two for w in m["stats"]["workers"].values())
        s = one[0]["stats"]
        costs = s["part_seconds"]
        total = one[0].get("subtrees_total", s["parts"])
        if total > len(costs):  # a slice: the rest at the slice's mean
            costs = costs + [statistics.mean(costs)] * (total - len(costs))
        proj = {w: _project(costs, w, s["coordinator_s"]) for w in (8, 32, 128)}
        rows.append(f"| {label} | {s['parts']} of {total} (depth {s['cut_depth']}) | {one[0]['runs']:,} | "
                    f"{t1:.2f} | {t2:.2f} | {t1 / t2:.2f}x | {load:.1f} | {w1:.0f} | {w2:.0f} | "
                    f"{proj[8]:.1f} / {proj[32]:.1f} / {proj[128]:.1f} |")
        pc = s["part_seconds"]
        notes.append(f"{label}: coordinator {s['coordinator_s']:.2f} s ({s['prefix_steps']:,} steps to find the"
                     f" cut), subtree cost mean {statistics.mean(pc):.3f} s, max {max(pc):.3f} s,"
                     f" sum {sum(costs):.1f} s over {total} subtrees")
    whole = _measure("whole", 1, 0)
    notes.append(f"two-workers split undivided (emqlab.explore.explore, one process): {whole['seconds']:.2f} s,"
                 f" {whole['runs']:,} runs, peak RSS {whole['peak_rss_mb']:.0f} MB, load {whole['load']:.1f}")
    table = "\n".join(
        ["| case | subtrees run | runs (jobs 1) | s, --jobs 1 | s, --jobs 2 | speed-up | load avg | "
         "peak RSS MB/worker, 1 | 2 | projected s, 8 / 32 / 128 workers |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---|", *rows]) + "\n\n" + "\n".join(f"- {n}" for n in notes)
    print(table)
    if a.write:
        append_table(a.write, f"Divided explorations, --jobs 1 vs --jobs 2 ({os.cpu_count()} cores)",
                     f"python benchmarks/bench_parallel.py --repeat {a.repeat} --slice {a.slice}", table)


if __name__ == "__main__":
    main()
