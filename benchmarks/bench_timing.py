"""How long the timed runs take: the sweep-rtt grid (every preset RTT x the three finish modes, 200 jobs) on
fakeredis, and optionally on a live server.

    python benchmarks/bench_timing.py [--jobs 200] [--rtts 0.03,0.05,0.2,1,75,250] [--redis URL] [--write-docs]

``--write-docs`` rewrites the measured table of ``docs/round-trips.md`` (between its ``emqlab:measured``
markers) from this run, with the command and the date.

Prints, per run: steps simulated, sweeps, wall seconds; then the grid's total wall and CPU time. The target
(issue #5): the whole grid in well under 60 s on fakeredis.
"""

from __future__ import annotations

import argparse
import platform
import re
import time
from pathlib import Path

from emqlab.backend.connect import connect, describe
from emqlab.timing import DEFAULT_RTTS, MODES, Sweep, TimingConfig, sweep_rtt

DOCS = Path(__file__).resolve().parent.parent / "docs" / "round-trips.md"
BEGIN, END = "<!-- emqlab:measured:begin -->", "<!-- emqlab:measured:end -->"


def _num(x: float) -> str:
    if x == 0:
        return "0"
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def measured_table(sweep: Sweep, command: str, wall_s: float, backend: str) -> str:
    """The markdown table of a sweep-rtt grid: round trips, throughput, anomalies and the window model."""
    r0 = sweep.results[0]
    lines = [f"`{command}` ({backend}, {r0.jobs} jobs, {r0.workers} workers, seed {r0.seed}; "
             f"measured {time.strftime('%Y-%m-%d')}, the grid took {wall_s:.0f} s on {platform.machine()}):", "",
             "| mode | RTT (ms) | round trips / job | aborted EXECs / job | jobs / s | anomalies / 1,000 jobs "
             "| window model / 1,000 | job executions | jobs left |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sweep.results:
        window = "–" if r.mode != "split" else _num(r.expected_per_1000)
        aborts = f"{r.aborts_per_job:.2f}" if r.mode == "transaction" else "–"
        lines.append(f"| {r.mode} | {r.rtt_ms:g} | {r.round_trips_per_job:.2f} | {aborts} | {_num(r.jobs_per_s)} | "
                     f"{_num(r.anomalies_per_1000)} | {window} | {r.executions}{' *' if r.truncated else ''} | "
                     f"{r.unfinished_total} |")
    return "\n".join(lines)


def write_docs(table: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOCS}: the markers {BEGIN} … {END} are missing")
    body = f"{BEGIN}\n{table}\n{END}"
    DOCS.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: body, text, flags=re.S),
                    encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rtts", default=",".join(f"{x:g}" for x in DEFAULT_RTTS))
    ap.add_argument("--redis", default=None, help="live server URL (default: fakeredis)")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the measured table of docs/round-trips.md")
    a = ap.parse_args()
    rtts = [float(x) for x in a.rtts.split(",")]
    conn = connect(a.redis)
    wall, cpu = time.perf_counter(), time.process_time()
    sweep = sweep_rtt(rtts, MODES, TimingConfig(jobs=a.jobs), conn)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"emqlab timed runs · {describe(conn)} · Python {platform.python_version()} · {platform.machine()}")
    print(f"{'mode':<18} {'RTT ms':>7} {'steps':>7} {'sweeps':>7} {'runs':>5} {'wall s':>7}")
    for r in sweep.results:
        print(f"{r.mode:<18} {r.rtt_ms:>7g} {r.steps:>7} {r.sweep_runs:>7} {r.executions:>5} {r.wall_s:>7.2f}")
    steps = sum(r.steps for r in sweep.results)
    print(f"grid: {len(sweep.results)} runs x {a.jobs} jobs, {steps} steps: {wall:.1f} s wall, {cpu:.1f} s CPU "
          f"({steps / wall:,.0f} steps/s)")
    if a.write_docs:
        command = "emqlab sweep-rtt --rtt " + ",".join(f"{x:g}" for x in rtts)
        if a.jobs != 200:
            command += f" --jobs {a.jobs}"
        write_docs(measured_table(sweep, command, wall, describe(conn)))
        print(f"wrote {DOCS}")


if __name__ == "__main__":
    main()
