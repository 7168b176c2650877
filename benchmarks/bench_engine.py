"""Engine v2: the reduced search (Source-DPOR over observed footprints) against every schedule, side by
side in one process on fakeredis, with exact interleaving counts and the steps each search executed.

    python benchmarks/bench_engine.py [--repeat N] [--write docs/benchmarks.md]

Per case: the exact interleavings covered, runs kept and blocked by the reduced search, its wall
time (median of --repeat), and the same for the unreduced search (one run: it is the slow side).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _tables import write_table

from emqlab.engine import scenario
from emqlab.explore import explore

CASES = [
    ("stalled-finish", "split", None),
    ("lease-lapse", "split", None),
    ("two-workers", "split", 2),        # the scenario's bound
    ("two-workers", "split", "none"),   # unbounded
    ("late-finish-deleted", "split", "none"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-unreduced", action="store_true", help="skip the unreduced side")
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    a = ap.parse_args()
    lines = ["| scenario | bound | interleavings (exact) | DPOR runs | blocked | steps | seconds | "
             "every-schedule runs | steps | seconds | speed-up |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, mode, bound in CASES:
        sc = scenario.load(name)
        kw = {"unbounded": True} if bound == "none" else {"preemptions": bound}
        times = []
        rep = None
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            rep = explore(sc, mode, **kw)  # type: ignore[arg-type]
            times.append(time.perf_counter() - t0)
        assert rep is not None
        sec = statistics.median(times)
        if a.no_unreduced:
            every, esec = None, 0.0
        else:
            t0 = time.perf_counter()
            every = explore(sc, mode, reduce=False, **kw)  # type: ignore[arg-type]
            esec = time.perf_counter() - t0
            assert every.explored == rep.raw_interleavings and every.outcomes == rep.outcomes
        shown = "none" if bound in (None, "none") else f"≤{bound}"
        tail = (f"{every.explored:,} | {every.steps_executed:,} | {esec:.2f} | {esec / sec:.1f}x"
                if every else "– | – | – | –")
        row = (f"| {name} ({mode}) | {shown} | {rep.raw_interleavings:,} | {rep.explored:,} | {rep.blocked:,} | "
               f"{rep.steps_executed:,} | {sec:.2f} | {tail} |")
        print(row, flush=True)
        lines.append(row)
    table = "\n".join(lines)
    if a.write:
        write_table(a.write, "Reduced vs every schedule (fakeredis)",
                     f"python benchmarks/bench_engine.py --repeat {a.repeat}", table)

if __name__ == "__main__":
    main()
