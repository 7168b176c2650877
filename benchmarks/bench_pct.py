"""How often PCT finds each expected anomaly against random sampling, on every shipped scenario (fakeredis),
and what a PCT call costs in CPU: its runs against its depth check.

    python benchmarks/bench_pct.py [--seeds N] [--runs N] [--depth3 MODE] [--jobs N] [--write docs/benchmarks.md]

For every shipped scenario and every mode where it expects an anomaly, seeds ``0 .. --seeds - 1``, each with
``--runs`` runs of the random walk (:class:`~emqlab.explore.randomwalk.RandomWalk`) and of PCT
(:class:`~emqlab.explore.pct.PCT`) at depth 2, and at depth 3 too with ``--depth3 all``, or with ``auto``
(the default) only where depth 2 loses clearly to random on some expected kind (below :data:`LOSES` of its hit
rate) or its depth check says depth 2 cannot reach one.
Per expected kind: the hit rate (runs showing it per 100 runs, over all seeds), the share of seeds where
at least one run showed it, and the runs to the first hit (the median over the seeds of the number of the
run that first showed it). The CPU columns (``time.process_time``, in the process that ran the case) are per
PCT call: its runs (``check_depth=False``, the serial runs it measures ``k`` from included, the mean over the
seeds) and its :func:`~emqlab.explore.pct.depth_check` (an exhaustive search at ``depth - 1`` preemptions that
``explore`` adds to every PCT call; it does not depend on the seed, so it is timed once per case). ``k`` is
the steps PCT places its change points over (:attr:`~emqlab.explore.pct.PCT.k`), ``n`` the actors. The cases in
:data:`HEAVY` and those of :data:`HEAVY_ACTORS` actors or more run half the seeds (the table says how many),
which keeps the default run near 6 CPU minutes. ``--jobs`` spreads the cases over processes (CPU
figures are per process, so they do not change; the wall time does).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _tables import write_table

from emqlab.backend.connect import connect
from emqlab.engine import scenario
from emqlab.engine.history import History
from emqlab.explore.checked import Runner
from emqlab.explore.pct import PCT, depth_check
from emqlab.explore.randomwalk import RandomWalk
from emqlab.explore.strategy import Strategy

#: (scenario, mode) -> the share of ``--seeds`` it runs: the cases whose runs cost the most CPU (the longest
#: runs); so do all cases of :data:`HEAVY_ACTORS` actors or more (PCT and random find about as much there)
HEAVY = {("fetch-loop", "split"): 0.5}
HEAVY_ACTORS, HEAVY_SHARE = 4, 0.5
#: ``--depth3 auto`` runs depth 3 where depth 2's hit rate of an expected kind is below this share of random's
LOSES = 0.8


@dataclass
class Case:
    """What one scenario × mode measured."""

    name: str
    mode: str
    kinds: list[str]
    seeds: int = 0
    #: the seeds asked for (``seeds`` is fewer for a HEAVY case)
    asked: int = 0
    runs: int = 0
    n: int = 0
    k: int = 0
    #: strategy label -> kind -> [runs showing it, seeds with a run showing it]
    hits: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    #: strategy label -> kind -> per seed, the number of the run that first showed it (``runs + 1``: none did)
    first: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    #: strategy label -> CPU seconds of each call (one per seed)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    #: depth -> CPU seconds of one depth check, and what it found beyond that depth
    check_s: dict[int, float] = field(default_factory=dict)
    beyond: dict[int, list[str]] = field(default_factory=dict)


def cases(every_mode: bool = False) -> list[tuple[str, str, list[str]]]:
    """Every shipped scenario × the modes where it expects an anomaly, with the expected kinds; without
    ``every_mode``, one mode per scenario: split where it expects an anomaly there (the race a split
    finish opens, where the schedule matters most), else the first mode that does."""
    out = []
    for sc in scenario.shipped():
        modes = [m for m in sc.modes if m in sc.expect and sc.expect[m].anomalies]
        if not every_mode and modes:
            modes = ["split"] if "split" in modes else modes[:1]
        out += [(sc.name, mode, sorted(sc.expect[mode].anomalies)) for mode in modes]
    return out


def _tally(case: Case, label: str, runs_with: dict[str, int], first: dict[str, int], cpu: float) -> None:
    hits = case.hits.setdefault(label, {kind: [0, 0] for kind in case.kinds})
    firsts = case.first.setdefault(label, {kind: [] for kind in case.kinds})
    for kind in case.kinds:
        got = runs_with.get(kind, 0)
        hits[kind][0] += got
        hits[kind][1] += got > 0
        firsts[kind].append(first.get(kind, case.runs + 1))
    case.cpu.setdefault(label, []).append(cpu)


def _spied(strategy: Strategy) -> dict[str, int]:
    """Per kind, the number (from 1) of the sampled run of ``strategy`` that first shows it, filled as the
    runs are recorded (the runs a strategy makes before its samples are not)."""
    first: dict[str, int] = {}
    record = strategy._record
    count = [0]

    def spy(h: History, preempt: int, choices: Sequence[str], weight: int = 1) -> None:
        count[0] += 1
        for kind in h.kinds:
            first.setdefault(kind, count[0])
        record(h, preempt, choices, weight)

    strategy._record = spy  # type: ignore[method-assign]
    return first


def _loses(case: Case, label: str) -> bool:
    """PCT at depth 2 (``label``) hits some expected kind clearly less often than random does (below
    :data:`LOSES` of its rate), or cannot reach it at all (its depth check says so)."""
    return any(h[0] < LOSES * r[0] or kind in case.beyond[2]
               for (kind, h), r in zip(case.hits[label].items(), case.hits["random"].values(), strict=True))


def measure(name: str, mode: str, kinds: list[str], seeds: int, runs: int, depth3: str, halve: bool = True) -> Case:
    """One case: random, PCT at depth 2 (and 3) over ``seeds`` seeds of ``runs`` runs, and the depth checks."""
    sc = scenario.load(name)
    share = HEAVY.get((name, mode), HEAVY_SHARE if len(sc.actors) >= HEAVY_ACTORS else 1) if halve else 1
    case = Case(name, mode, kinds, seeds=max(1, round(seeds * share)), asked=seeds, runs=runs, n=len(sc.actors))
    with Runner(sc, mode, connect()) as r:
        for seed in range(case.seeds):
            t0 = time.process_time()
            walk = RandomWalk(r)
            first = _spied(walk)
            rep = walk.random(runs, seed)
            _tally(case, "random", rep.runs_with, first, time.process_time() - t0)
            t0 = time.process_time()
            pct = PCT(r)
            first = _spied(pct)
            rep = pct.pct(runs, seed, 2, check_depth=False)
            case.k = max(case.k, pct.k)
            _tally(case, "pct2", rep.runs_with, first, time.process_time() - t0)
        t0 = time.process_time()
        params, _ = depth_check(r, (), 2)
        case.check_s[2], case.beyond[2] = time.process_time() - t0, params.get("beyond_depth", ["?"])
        if depth3 == "all" or (depth3 == "auto" and _loses(case, "pct2")):
            for seed in range(case.seeds):
                t0 = time.process_time()
                pct = PCT(r)
                first = _spied(pct)
                rep = pct.pct(runs, seed, 3, check_depth=False)
                _tally(case, "pct3", rep.runs_with, first, time.process_time() - t0)
            t0 = time.process_time()
            params, _ = depth_check(r, (), 3)
            case.check_s[3], case.beyond[3] = time.process_time() - t0, params.get("beyond_depth", ["?"])
    return case


def _cell(case: Case, label: str, kind: str) -> str:
    if label not in case.hits:
        return "–"
    runs_with, seeds_with = case.hits[label][kind]
    first = statistics.median_low(case.first[label][kind])
    to_first = f"{first}" if first <= case.runs else f">{case.runs}"
    return f"{100 * runs_with / (case.seeds * case.runs):.1f} / {100 * seeds_with / case.seeds:.0f}% / {to_first}"


def rows(case: Case) -> list[str]:
    """The table rows of one case: one per expected kind, the CPU figures on the first."""
    out = []
    pct_ms = 1000 * statistics.mean(case.cpu["pct2"])
    check = " / ".join(f"{1000 * case.check_s[d]:.0f}" if d in case.check_s else "–" for d in (2, 3))
    note = "" if case.seeds == case.asked else f" ({case.seeds} seeds)"
    for i, kind in enumerate(case.kinds):
        beyond = "".join(f" ✗d{d}" for d in sorted(case.beyond) if kind in case.beyond[d])
        lead = (f"| {case.name}{note} | {case.mode} | {case.n} | {case.k} | " if i == 0 else "| | | | | ")
        cpu = f"{pct_ms:.0f} | {check} |" if i == 0 else " | |"
        out.append(f"{lead}{kind}{beyond} | {_cell(case, 'random', kind)} | {_cell(case, 'pct2', kind)} | "
                   f"{_cell(case, 'pct3', kind)} | {cpu}")
    return out


HEADER = ["| scenario | mode | n | k | expected kind | random | PCT d2 | PCT d3 | PCT runs CPU ms/call "
          "| depth_check CPU ms (d2 / d3) |",
          "|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=50, help="seeds 0 .. N-1 per case (fewer for HEAVY cases)")
    ap.add_argument("--runs", type=int, default=15, help="runs per seed, the same for every strategy")
    ap.add_argument("--depth3", choices=["auto", "all", "none"], default="auto",
                    help="PCT at depth 3 too: where depth 2 loses clearly to random or cannot reach an expected "
                         "kind (auto), everywhere, or nowhere")
    ap.add_argument("--only", action="append", default=[], help="only this scenario (repeatable)")
    ap.add_argument("--every-mode", action="store_true",
                    help="every mode where a scenario expects an anomaly (default: split where it does, else the "
                         "first mode that does)")
    ap.add_argument("--all-seeds", action="store_true", help="every case runs --seeds seeds (no HEAVY halving)")
    ap.add_argument("--jobs", type=int, default=1, help="cases run in this many processes at once")
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    args = ap.parse_args()
    todo = [c for c in cases(args.every_mode) if not args.only or c[0] in args.only]
    started, cpu0 = time.perf_counter(), time.process_time()
    with cf.ProcessPoolExecutor(args.jobs) if args.jobs > 1 else cf.ThreadPoolExecutor(1) as pool:
        done = []
        for case in pool.map(measure, *zip(*todo, strict=True), [args.seeds] * len(todo), [args.runs] * len(todo),
                             [args.depth3] * len(todo), [not args.all_seeds] * len(todo)):
            done.append(case)
            print(f"{len(done)}/{len(todo)} {case.name} {case.mode}", flush=True)
    table = list(HEADER)
    for case in done:
        table += rows(case)
    print("\n".join(table))
    spent = sum(sum(sum(v) for v in c.cpu.values()) + sum(c.check_s.values()) for c in done)
    print(f"\n{len(done)} cases, CPU {spent:.0f} s in the measured calls "
          f"(this process {time.process_time() - cpu0:.0f} s), wall {time.perf_counter() - started:.0f} s")
    where = {"auto": f"where d2 loses clearly to random (below {LOSES:.0%} of its hit rate) or cannot reach a kind",
             "all": "everywhere", "none": "nowhere"}[args.depth3]
    legend = (f"Each strategy cell: runs showing the kind per 100 runs / seeds (of {args.seeds}, {args.runs} runs "
              f"each) with at least one / the median over the seeds of the run that first showed it (>{args.runs}: "
              f"half the seeds or more showed it in none); ✗d2, ✗d3: no schedule within 1, 2 preemptions shows it "
              f"(depth_check), so PCT at that depth cannot find it. PCT d3 ran {where}.")
    if args.write:
        command = (f"python benchmarks/bench_pct.py --seeds {args.seeds} --runs {args.runs} --depth3 {args.depth3}"
                   + (f" --jobs {args.jobs}" if args.jobs > 1 else "")
                   + (" --every-mode" if args.every_mode else "") + (" --all-seeds" if args.all_seeds else "")
                   + "".join(f" --only {o}" for o in args.only))
        write_table(args.write, "PCT against random sampling", command, "\n".join(table) + "\n\n" + legend)


if __name__ == "__main__":
    main()
