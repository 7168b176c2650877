"""Divided explorations (emqlab.explore.divide): wall time with one job against two, side by side in one run, next
to the undivided search; peak memory per process; and a projection to 8, 32 and 128 workers.

    python benchmarks/bench_parallel.py [--repeat N] [--write docs/benchmarks.md]

Two cases, and a control:

* the largest shipped exploration, ``two-workers`` split at its bound: the whole exploration as ``emqlab
  simulate`` runs it (``--jobs 1`` and ``--jobs 2`` alternately, ``--repeat`` times each, each in a fresh
  process, medians), and the undivided search (``emqlab.explore.explore``) alternately with them;
* ``benchmarks/scenarios/three-split-workers.yaml`` (three split finishes and a sweep, not shipped) at
  preemption bound 2, a search of tens of seconds: the whole exploration undivided, with ``--jobs 1`` and with
  ``--jobs 2`` (``--repeat`` // 2 times each, at least once), the same reports asserted (run counts included);
* the control, the machine's own ceiling: two undivided two-workers searches, one after the other in one
  process and at once in two (a fork), alternately with the rest. Work that needs nothing from the other
  process gets this ratio from two cores here; the exploration's speed-up is given as a share of it too.

Every side's clock starts after fakeredis is imported (once per process, most of it numpy's import; the
notes give its time), as in a notebook's or a test session's second exploration; the CLI pays it once on every side.

``--jobs 2`` is this process and one pool worker (:class:`emqlab.explore.pool.Dispatch`), forked from it, which
keeps its copy of this process's runner and streams the nodes its parts hand on back as it goes. Peak RSS
(``ru_maxrss``, MB) is given for each process: the single-process runs (undivided, ``--jobs 1``) against
``--jobs 2``'s coordinator (this process: it searches the root and runs parts too) and its pool worker (whose
figure counts the pages it shares with the coordinator since the fork). The projection takes
the measured CPU seconds of every part of the two-workers exploration and schedules them greedily, largest
first, onto w workers; the part the coordinator searched itself (the root, which hands the others on) runs
first and alone until its first hand-on. It ignores the network and a cluster's scheduler, and that a part
handed on by a worker's part becomes available only when that part ends: a lower bound. The load average
is given with each measurement: other jobs share the cores, and a speed-up is only as good as the idle
core it gets.
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

from _tables import write_table

HERE = Path(__file__).resolve().parent
THREE = HERE / "scenarios" / "three-split-workers.yaml"


def _one(kind: str, jobs: int) -> dict[str, Any]:
    from emqlab.backend.connect import connect
    from emqlab.engine import scenario
    from emqlab.explore import explore
    from emqlab.explore.divide import Stats

    t0 = time.perf_counter()
    connect(None).close()  # fakeredis's import (numpy's among it): once per process, before any side's clock
    imported = time.perf_counter() - t0
    load = os.getloadavg()[0]
    st = Stats()
    t0 = time.perf_counter()
    if kind == "pair":  # the control: two undivided searches, one after the other or at once in two processes
        if jobs == 1:
            explore(scenario.load("two-workers"), "split")
            rep = explore(scenario.load("two-workers"), "split")
        else:
            pid = os.fork()
            if pid == 0:
                explore(scenario.load("two-workers"), "split")
                os._exit(0)
            rep = explore(scenario.load("two-workers"), "split")
            os.waitpid(pid, 0)
    elif kind == "whole":
        rep = explore(scenario.load("two-workers"), "split")
    elif kind == "divided":
        rep = explore(scenario.load("two-workers"), "split", jobs=jobs, stats=st)
    elif kind == "three-whole":
        rep = explore(scenario.load(str(THREE)), "split", preemptions=2)
    else:
        rep = explore(scenario.load(str(THREE)), "split", preemptions=2, jobs=jobs, stats=st)
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"seconds": seconds, "imported_s": imported,
                           "runs": rep.executed,
                           "traces": rep.explored,
                           "claims": rep.claims() if kind != "pair" else None,
                           "report": {k: v for k, v in rep.to_dict().items()
                                      if k not in ("elapsed_s", "runs_per_second")},
                           "load": (load + os.getloadavg()[0]) / 2,
                           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                           "parts": st.parts, "part_cpu_s": st.part_cpu_s, "root_cpu_s": st.root_cpu_s,
                           "root_first": st.root_first_s,
                           "workers": {w: v["peak_rss_mb"] for w, v in st.workers.items()},
                           # the pool's workers (other processes than this one, the coordinator)
                           "pool_rss_mb": max((v["peak_rss_mb"] for w, v in st.workers.items()
                                               if w.split(":")[1] != str(os.getpid())), default=0.0)}
    return out


def _measure(kind: str, jobs: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", kind, str(jobs)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=HERE.parent)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _project(costs: list[float], root: float, root_first: float, workers: int) -> float:
    """The root alone until its first hand-on, then greedy list scheduling (largest first) of the rest."""
    free = [root_first] * workers
    free[0] = root
    heapq.heapify(free)
    for c in sorted(costs, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs per side (medians)")
    ap.add_argument("--write", type=Path, help="write the tables to this markdown page (replacing older ones)")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(_one(a.one[0], int(a.one[1])), default=str))
        return
    got: dict[str, list[dict[str, Any]]] = {"whole": [], "1": [], "2": [], "pair1": [], "pair2": []}
    for _ in range(a.repeat):  # side by side: undivided, 1, 2, the control's two sides, undivided, 1, 2, …
        got["whole"].append(_measure("whole", 1))
        for jobs in (1, 2):
            got[str(jobs)].append(_measure("divided", jobs))
        for jobs in (1, 2):
            got[f"pair{jobs}"].append(_measure("pair", jobs))
    claims = {json.dumps(m["claims"], sort_keys=True) for m in got["whole"] + got["1"] + got["2"]}
    assert len(claims) == 1, "the divided explorations must claim what the undivided one does"
    med = {k: statistics.median(m["seconds"] for m in v) for k, v in got.items()}
    ceiling = med["pair1"] / med["pair2"]
    load = statistics.mean(m["load"] for v in got.values() for m in v)
    one, two = got["1"][0], got["2"]

    def peaks(whole: list[dict[str, Any]] | None, ones: list[dict[str, Any]],
              twos: list[dict[str, Any]]) -> str:
        """Peak RSS (MB): the single-process runs (undivided, --jobs 1), then --jobs 2's coordinator and
        its pool worker (the largest of each side's runs)."""
        def top(ms: list[dict[str, Any]], key: str) -> str:
            return f"{max(m[key] for m in ms):.0f}"
        return (f"{top(whole, 'peak_rss_mb') if whole else '–'} / {top(ones, 'peak_rss_mb')} | "
                f"{top(twos, 'peak_rss_mb')} / {top(twos, 'pool_rss_mb')}")

    proj = {w: _project(one["part_cpu_s"], one["root_cpu_s"], one["root_first"], w) for w in (8, 32, 128)}
    speedup = med["1"] / med["2"]
    rows = [f"| two-workers split (≤2), whole exploration | {one['runs']:,} ({got['whole'][0]['runs']:,} undivided) "
            f"| {one['parts']} | {med['whole']:.2f} | {med['1']:.2f} | {med['2']:.2f} | "
            f"{speedup:.2f}x | {med['whole'] / med['2']:.2f}x | {ceiling:.2f}x | {speedup / ceiling:.0%} | "
            f"{load:.1f} | {peaks(got['whole'], got['1'], two)} | "
            f"{proj[8]:.1f} / {proj[32]:.1f} / {proj[128]:.1f} |"]
    three: dict[str, list[dict[str, Any]]] = {"whole": [], "1": [], "2": []}
    for _ in range(max(1, a.repeat // 2)):
        three["whole"].append(_measure("three-whole", 1))
        for jobs in (1, 2):
            three[str(jobs)].append(_measure("three", jobs))
    assert len({json.dumps(m["claims"], sort_keys=True) for v in three.values() for m in v}) == 1
    divided = {json.dumps({k: v for k, v in m["report"].items() if k != "params"}, sort_keys=True)
               for m in three["1"] + three["2"]}
    assert len(divided) == 1, "--jobs 1 and --jobs 2 must give the same report, runs executed included"
    tmed = {k: statistics.median(m["seconds"] for m in v) for k, v in three.items()}
    tload = statistics.mean(m["load"] for v in three.values() for m in v)
    tone = three["1"][0]
    rows.append(f"| three-split-workers split (≤2), whole exploration | {tone['runs']:,} "
                f"({three['whole'][0]['runs']:,} undivided) | {tone['parts']} | {tmed['whole']:.2f} | "
                f"{tmed['1']:.2f} | {tmed['2']:.2f} | {tmed['1'] / tmed['2']:.2f}x | "
                f"{tmed['whole'] / tmed['2']:.2f}x | {ceiling:.2f}x | {tmed['1'] / tmed['2'] / ceiling:.0%} | "
                f"{tload:.1f} | {peaks(three['whole'], three['1'], three['2'])} | – |")
    pc = one["part_cpu_s"]
    pair = ", ".join(f"{m['seconds']:.2f}" for m in got["pair1"]) + " s one after the other; " + \
        ", ".join(f"{m['seconds']:.2f}" for m in got["pair2"]) + " s at once"
    notes = [f"two-workers: {one['parts']} parts; the root part (searched by the coordinator) "
             f"{one['root_cpu_s']:.2f} s CPU, its first hand-on after {one['root_first']:.2f} s; the others "
             f"{statistics.mean(pc):.3f} s CPU on average, at most {max(pc):.3f} s, {sum(pc):.2f} s in all",
             f"the machine's ceiling, two undivided two-workers searches in two processes: {pair}",
             f"every side's clock starts after fakeredis is imported (numpy's import among it), which took "
             f"{statistics.median(m['imported_s'] for v in got.values() for m in v):.2f} s per process"]
    table = "\n".join(
        ["| case | runs | parts | s, undivided | s, --jobs 1 | s, --jobs 2 | speed-up over --jobs 1 | "
         "over undivided | the machine's ceiling | share of it | load avg | "
         "peak RSS MB, undivided / --jobs 1 | --jobs 2: coordinator / pool worker | "
         "projected s, 8 / 32 / 128 workers |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|", *rows]) + "\n\n" + \
        "\n".join(f"- {n}" for n in notes)
    print(table)
    if a.write:
        write_table(a.write, f"Divided explorations, --jobs 1 vs --jobs 2 ({os.cpu_count()} cores)",
                     f"python benchmarks/bench_parallel.py --repeat {a.repeat}", table)


if __name__ == "__main__":
    main()
