"""CPU seconds (user + system, of the child process) of short emqlab commands, against the interpreter alone:
what start-up costs before any work.

    python benchmarks/bench_startup.py [--repeat N] [--write docs/benchmarks.md]

The median over ``--repeat`` runs of each command, each in a fresh process (the first run of all is thrown
away: it fills the file cache). ``emqlab --version`` and ``--help`` load no command module
(``emqlab.ui.cli.COMMANDS``); ``simulate --split`` runs the default scenario's whole exploration.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _tables import append_table

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "emqlab --version": [sys.executable, "-m", "emqlab", "--version"],
    "emqlab --help": [sys.executable, "-m", "emqlab", "--help"],
    "emqlab simulate --help": [sys.executable, "-m", "emqlab", "simulate", "--help"],
    "emqlab scenarios": [sys.executable, "-m", "emqlab", "scenarios"],
    "emqlab simulate --split": [sys.executable, "-m", "emqlab", "simulate", "--split"],
}


def cpu_seconds(argv: list[str]) -> float:
    """The CPU seconds (user + system) one run of ``argv`` used."""
    before = os.times()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs of each command (the median is kept)")
    ap.add_argument("--write", type=Path, help="append the table to this markdown page")
    args = ap.parse_args()
    cpu_seconds(COMMANDS["emqlab simulate --split"])  # (warm the file cache)
    rows = ["| command | CPU s (median) | min | max |", "|---|---:|---:|---:|"]
    for name, argv in COMMANDS.items():
        runs = [cpu_seconds(argv) for _ in range(args.repeat)]
        rows.append(f"| `{name}` | {statistics.median(runs):.3f} | {min(runs):.3f} | {max(runs):.3f} |")
        print(rows[-1], flush=True)
    if args.write:
        append_table(args.write, "Start-up CPU", f"python benchmarks/bench_startup.py --repeat {args.repeat}",
                     "\n".join(rows))


if __name__ == "__main__":
    main()
