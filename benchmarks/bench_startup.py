"""CPU seconds (user + system, of the child process) of short emqlab commands, against the interpreter alone:
what start-up costs before any work.

    python benchmarks/bench_startup.py [--repeat N] [--write docs/benchmarks.md]

The median over ``--repeat`` runs of each command, each in a fresh process (the first run of all is thrown
away: it fills the file cache), with Python's bytecode cache as after ``pip install`` (which compiles the
modules), and, in the last column, without it (``PYTHONDONTWRITEBYTECODE=1``: each run compiles emqlab's
modules from source). The load average is printed with the table: on a loaded machine every row, ``python -c
pass`` too, costs more CPU. ``emqlab --version`` and ``--help`` load no command module
(``emqlab.ui.cli.COMMANDS``); ``simulate --split`` runs the default scenario's whole exploration.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _tables import write_table

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "emqlab --version": [sys.executable, "-m", "emqlab", "--version"],
    "emqlab --help": [sys.executable, "-m", "emqlab", "--help"],
    "emqlab simulate --help": [sys.executable, "-m", "emqlab", "simulate", "--help"],
    "emqlab scenarios": [sys.executable, "-m", "emqlab", "scenarios"],
    "emqlab simulate --split": [sys.executable, "-m", "emqlab", "simulate", "--split"],
}


def child_env(bytecode: bool) -> dict[str, str]:
    """The children's environment: with ``bytecode``, compiled modules are cached (under a prefix outside the
    checkout), as they are after ``pip install``, which compiles them; without, every run compiles emqlab's
    modules from source (``PYTHONDONTWRITEBYTECODE=1``, as some machines set)."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "emqlab-bench-pycache")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def cpu_seconds(argv: list[str], env: dict[str, str] | None = None) -> float:
    """The CPU seconds (user + system) one run of ``argv`` used."""
    before = os.times()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="runs of each command (the median is kept)")
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    args = ap.parse_args()
    cached, uncached = child_env(True), child_env(False)
    load = os.getloadavg()[0]
    for argv in COMMANDS.values():  # (warm the file cache, and write the bytecode cache)
        cpu_seconds(argv, cached)
    rows = ["| command | CPU s (median) | min | max | without bytecode cache (median) |", "|---|---:|---:|---:|---:|"]
    for name, argv in COMMANDS.items():
        runs = [cpu_seconds(argv, cached) for _ in range(args.repeat)]
        cold = statistics.median(cpu_seconds(argv, uncached) for _ in range(args.repeat))
        rows.append(f"| `{name}` | {statistics.median(runs):.3f} | {min(runs):.3f} | {max(runs):.3f} | {cold:.3f} |")
        print(rows[-1], flush=True)
        load = max(load, os.getloadavg()[0])
    # (on a loaded machine every row costs more CPU: the `python -c pass` row shows how much)
    rows.append(f"\n{os.cpu_count()} cores; load average up to {load:.1f} during the runs.")
    if args.write:
        write_table(args.write, "Start-up CPU", f"python benchmarks/bench_startup.py --repeat {args.repeat}",
                     "\n".join(rows))


if __name__ == "__main__":
    main()
