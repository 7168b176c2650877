"""How long the timed runs take: the sweep-rtt grid (every preset RTT x the three finish modes, 200 jobs) on
fakeredis, and optionally on a live server.

    python benchmarks/bench_timing.py [--jobs 200] [--rtts 0.03,0.05,0.2,1,75,250] [--redis URL]

Prints, per run: steps simulated, sweeps, wall seconds; then the grid's total wall and CPU time. The target
(issue #5): the whole grid in well under 60 s on fakeredis.
"""

from __future__ import annotations

import argparse
import platform
import time

from emqlab.backends import connect, describe
from emqlab.timing import DEFAULT_RTTS, MODES, TimingConfig, sweep_rtt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rtts", default=",".join(f"{x:g}" for x in DEFAULT_RTTS))
    ap.add_argument("--redis", default=None, help="live server URL (default: fakeredis)")
    a = ap.parse_args()
    rtts = [float(x) for x in a.rtts.split(",")]
    conn = connect(a.redis)
    wall, cpu = time.perf_counter(), time.process_time()
    sweep = sweep_rtt(rtts, MODES, TimingConfig(jobs=a.jobs), conn)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"emqlab timed runs · {describe(conn)} · Python {platform.python_version()} · {platform.machine()}")
    print(f"{'mode':<18} {'RTT ms':>7} {'steps':>7} {'sweeps':>7} {'runs':>5} {'wall s':>7}")
    for r in sweep.results:
        print(f"{r.mode:<18} {r.rtt_ms:>7g} {r.steps:>7} {r.sweep_runs:>7} {r.finishes:>5} {r.wall_s:>7.2f}")
    steps = sum(r.steps for r in sweep.results)
    print(f"grid: {len(sweep.results)} runs x {a.jobs} jobs, {steps} steps: {wall:.1f} s wall, {cpu:.1f} s CPU "
          f"({steps / wall:,.0f} steps/s)")


if __name__ == "__main__":
    main()
