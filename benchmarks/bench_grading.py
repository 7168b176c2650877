"""Wall and CPU seconds of ``emqlab grade``: each assignment's solution notebook on its own, and a class (a
folder of submissions) at ``--jobs 1`` and ``--jobs 2``.

    python benchmarks/bench_grading.py [--repeat N] [--students N] [--write docs/benchmarks.md]

Each run is a fresh ``emqlab grade`` process against the checkout's answer key; CPU is user + system of
that process and every process it waited for (the sandboxed notebook included). The median over
``--repeat`` runs is kept. The load average is printed with the table: on a shared machine the wall time
grows with it, the CPU time much less.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _tables import write_table

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "assignments"
ASSIGNMENTS = ("a1-double-placement", "a2-repair-finish", "a3-rate-vs-rtt")


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the process and its waited-for children, exit status) of one run."""
    before, started = os.times(), time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall, after = time.perf_counter() - started, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, proc.returncode


def grade(*args: str) -> list[str]:
    return [sys.executable, "-m", "emqlab", "grade", *args, "--key", str(SOURCES)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case (the median is kept)")
    ap.add_argument("--students", type=int, default=2, help="students in the class (each hands in all three)")
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    rows = ["| what | wall s (median) | min | max | CPU s (median) |", "|---|---:|---:|---:|---:|"]

    def row(name: str, argv: list[str], full_marks: bool = True) -> None:
        runs = [timed(argv) for _ in range(args.repeat)]
        assert all(rc == 0 for _, _, rc in runs) or not full_marks, f"{name}: not full marks"
        walls = [w for w, _, _ in runs]
        rows.append(f"| {name} | {statistics.median(walls):.1f} | {min(walls):.1f} | {max(walls):.1f} | "
                    f"{statistics.median(c for _, c, _ in runs):.1f} |")
        print(rows[-1], flush=True)

    for aid in ASSIGNMENTS:
        row(f"`emqlab grade {aid}.ipynb`", grade(str(SOURCES / f"{aid}.ipynb")))
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.students):
            for aid in ASSIGNMENTS:
                (Path(tmp) / f"student{i + 1}").mkdir(exist_ok=True)
                shutil.copyfile(SOURCES / f"{aid}.ipynb", Path(tmp) / f"student{i + 1}" / f"{aid}.ipynb")
        n = 3 * args.students
        for jobs in (1, 2):
            row(f"a folder of {n} notebooks, `--jobs {jobs}`", grade(tmp, "--jobs", str(jobs), "--csv", os.devnull))
    load = max(load, os.getloadavg()[0])
    note = f"{os.cpu_count()} cores; load average up to {load:.1f} during the runs"
    print(note)
    if args.write:
        write_table(args.write, "Grading times",
                     f"python benchmarks/bench_grading.py --repeat {args.repeat} --students {args.students}",
                     "\n".join(rows) + f"\n\n{note}.")


if __name__ == "__main__":
    main()
