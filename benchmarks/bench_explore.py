"""Interleavings explored per second: exhaustive exploration of shipped scenarios on fakeredis (and the live
server with --redis).

    python benchmarks/bench_explore.py [--redis URL] [--repeat N] [--write docs/benchmarks.md]

Reports, per scenario and mode: the raw interleaving count, the runs kept (and blocked by sleep sets),
the wall time and runs per second (median of --repeat explorations).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _tables import write_table

from emqlab.backend.connect import BackendError, connect
from emqlab.engine import scenario
from emqlab.explore import explore

CASES = [
    ("stalled-finish", "split", None),   # 2 actors: W1 split finish + S1 sweep
    ("stalled-finish", "atomic", None),
    ("lease-lapse", "split", None),      # 3 actors: W1 split finish, L1 lease lapse, S1 sweep
    ("lease-lapse", "atomic", None),
    ("two-workers", "split", 2),         # 4 actors, at most 2 preemptions
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--redis", default=None, help="live server URL (default: fakeredis only)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    a = ap.parse_args()
    backends = [("fakeredis", None)]
    if a.redis:
        try:
            connect(a.redis)
            backends.append(("live", a.redis))
        except BackendError as e:
            print(f"live Redis skipped: {e}")
    lines = ["| scenario | mode | backend | raw | explored | blocked | seconds | runs/s |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for name, mode, bound in CASES:
        sc = scenario.load(name)
        for label, url in backends:
            times = []
            rep = None
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                rep = explore(sc, mode, conn=connect(url), preemptions=bound)
                times.append(time.perf_counter() - t0)
            assert rep is not None
            sec = statistics.median(times)
            row = (f"| {name}{f' (≤{bound} preemptions)' if bound is not None else ''} | {mode} | {label} | "
                   f"{rep.raw_interleavings} | {rep.explored} | {rep.blocked} | {sec:.2f} | {rep.explored / sec:.0f} |")
            print(row, flush=True)
            lines.append(row)
    table = "\n".join(lines)
    if a.write:
        command = f"python benchmarks/bench_explore.py{' --redis ' + a.redis if a.redis else ''} --repeat {a.repeat}"
        write_table(a.write, "Exhaustive exploration speed", command, table)


if __name__ == "__main__":
    main()
