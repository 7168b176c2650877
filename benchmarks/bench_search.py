"""What the exhaustive search executes against what it keeps, on every shipped scenario, and how it scales
with the number of split workers.

    python benchmarks/bench_search.py [--limit S] [--write docs/benchmarks.md]

Table 1, every shipped scenario × mode at the scenario's own preemption bound (none where it has none): the
exact interleavings, the traces kept (one run each), the runs executed — kept, blocked by a sleep set, run
in full beyond the bound (0 since the bound is inside the search), and run in full repeating a kept trace (a
sibling a bound kept awake) — their ratio to the runs kept, and the CPU seconds.

Table 2, ``N`` split workers finishing their own jobs while a recovery sweep runs (job 1 marked stalled:
the scenario of ``benchmarks/scenarios/three-split-workers.yaml`` with ``N`` workers), at bounds 1 and 2:
the same figures and the peak RSS. Each case runs in a fresh process, stopped after ``--limit`` CPU seconds
(the row then says so).
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _tables import write_table


def workers_scenario(n: int) -> str:
    """The YAML of ``n`` split workers, each finishing its own job, and a sweep (job 1 marked stalled)."""
    jobs = "\n".join(f'  "{i}": {{name: j{i}, data: {{n: {i}}}}}' for i in range(1, n + 1))
    actors = "\n".join(f'  - {{id: W{i}, kind: worker, holds: "{i}", finish: completed, fetch_next: false}}'
                       for i in range(1, n + 1))
    active = ", ".join(f'"{i}"' for i in range(1, n + 1))
    locks = ", ".join(f'"{i}": W{i}' for i in range(1, n + 1))
    return f"""name: {n}-split-workers
title: {n} split finishes and a sweep
lesson: benchmark
source: [benchmark]
anomaly: double-placement
jobs:
{jobs}
state:
  active: [{active}]
  stalled: ["1"]
  locks: {{{locks}}}
actors:
{actors}
  - {{id: S1, kind: sweep, max_stalled: 1}}
expect: {{}}
"""


def figures(rep: Any, cpu: float) -> dict[str, Any]:
    return {"raw": rep.raw_interleavings, "kept": rep.explored, "blocked": rep.blocked,
            "outside": rep.outside_bound, "repeated": rep.repeated, "executed": rep.executed, "cpu": cpu}


def one_case(n: int, bound: int) -> None:
    """Run ``n`` split workers + a sweep at ``bound`` in this process; print its figures as JSON."""
    from emqlab.engine import scenario
    from emqlab.explore import explore

    sc = scenario.loads(workers_scenario(n))
    cpu = time.process_time()
    rep = explore(sc, "split", preemptions=bound)
    out = figures(rep, time.process_time() - cpu)
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def shipped_table() -> str:
    from emqlab.engine import scenario
    from emqlab.explore import explore

    lines = ["| scenario | mode | bound | interleavings | traces kept | runs executed | blocked | beyond bound |"
             " repeated | executed / kept | CPU s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total = {"kept": 0, "executed": 0, "blocked": 0, "outside": 0, "repeated": 0, "cpu": 0.0}
    for sc in scenario.shipped():
        for mode in sc.modes:
            cpu = time.process_time()
            rep = explore(sc, mode)
            f = figures(rep, time.process_time() - cpu)
            for k in total:
                total[k] += f[k]
            bound = "none" if sc.preemptions is None else f"≤{sc.preemptions}"
            lines.append(f"| {sc.name} | {mode} | {bound} | {f['raw']:,} | {f['kept']:,} | {f['executed']:,} | "
                         f"{f['blocked']:,} | {f['outside']:,} | {f['repeated']:,} | {f['executed'] / f['kept']:.2f} | "
                         f"{f['cpu']:.2f} |")
    lines.append(f"| **all** | | | | {total['kept']:,} | {total['executed']:,} | {total['blocked']:,} | "
                 f"{total['outside']:,} | {total['repeated']:,} | {total['executed'] / total['kept']:.2f} | "
                 f"{total['cpu']:.1f} |")
    return "\n".join(lines)


def scaling_table(limit: float) -> str:
    lines = ["| split workers + sweep | bound | interleavings | traces kept | runs executed | blocked | "
             "beyond bound | repeated | CPU s | peak RSS MB |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in (1, 2, 3, 4):
        for bound in (1, 2):
            cmd = [sys.executable, __file__, "--case", str(n), str(bound)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                      preexec_fn=lambda: resource.setrlimit(
                                          resource.RLIMIT_CPU, (int(limit), int(limit) + 5)))
            except subprocess.CalledProcessError as e:
                if e.returncode not in (-signal.SIGXCPU, -signal.SIGKILL):  # (the CPU limit: soft, then hard)
                    raise SystemExit(f"{n} split workers at bound {bound} failed:\n{e.stderr}") from e
                lines.append(f"| {n} | ≤{bound} | did not finish in {limit:.0f} CPU s | | | | | | | |")
                continue
            f = json.loads(done.stdout.strip().splitlines()[-1])
            lines.append(f"| {n} | ≤{bound} | {f['raw']:,} | {f['kept']:,} | {f['executed']:,} | {f['blocked']:,} | "
                         f"{f['outside']:,} | {f['repeated']:,} | {f['cpu']:.2f} | {f['rss_mb']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=float, default=60.0, help="CPU seconds per scaling case (default 60)")
    p.add_argument("--write", type=Path, help="write the tables to this markdown page (replacing older ones)")
    p.add_argument("--case", nargs=2, type=int, metavar=("N", "BOUND"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        one_case(*args.case)
        return
    shipped = shipped_table()
    print(shipped)
    scaling = scaling_table(args.limit)
    print(scaling)
    if args.write:
        command = "python benchmarks/bench_search.py" + (f" --limit {args.limit:g}" if args.limit != 60 else "")
        write_table(args.write, "Runs executed against traces kept, shipped scenarios at their own bound",
                     command, shipped)
        write_table(args.write, "N split workers and a sweep", command, scaling)


if __name__ == "__main__":
    main()
