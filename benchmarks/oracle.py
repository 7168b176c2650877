"""The reduction oracle on as many random scenarios as asked for: each is explored with and without
partial-order reduction, at preemption bounds 0, 1 and 2 and without a bound, and the reduced search must
claim exactly what the unreduced one enumerates (tests/test_reduction_random.py runs a few in the suite).

    python benchmarks/oracle.py [--seeds 0-200] [--limit 1500] [--divide]
    python benchmarks/oracle.py --scenario benchmarks/scenarios/three-split-workers.yaml --bounds 0,1

With ``--scenario`` (repeatable; a file, or a shipped scenario's name, with ``:MODE`` for one mode) the cases
are those scenarios in each of their modes at ``--bounds`` instead of random ones, with no size limit: the
random scenarios have at most three small actors, and a search that loses a trace only where several actors
race for one job (a reduction that prunes the runs a bound makes wasteful, say) passes every one of them.

With ``--divide`` the reduced side is the finest division of the search (a hand-on after its first run, then
after gaps of 1, 2, 4 … runs: ``divide=True, donate_every=1``), and it is also compared with the undivided
reduced search (``tests/test_division_oracle.py`` runs a few in the suite).

A case's unreduced side is skipped above ``--limit`` interleavings (about 15 ms each on fakeredis), and a
scenario whose reduced search outlasts ``--budget`` seconds (it explores every trace at any bound: the bound
filters traces) is skipped whole.
Prints each mismatch as it is found (what differs) and a summary; exits 1 when there was any, 2 when nothing
could be compared.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emqlab.explore import explore  # noqa: E402
from tests.random_scenarios import mode_of, random_scenario  # noqa: E402
from tests.test_reduction import differences  # noqa: E402


def seeds(text: str) -> range:
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=seeds, default=seeds("0-99"), help="a range of seeds, e.g. 0-199 (default 0-99)")
    p.add_argument("--limit", type=int, default=1500,
                   help="skip the unreduced side above this many interleavings (default 1500)")
    p.add_argument("--budget", type=float, default=30.0,
                   help="skip a scenario whose reduced search outlasts this many seconds (default 30)")
    p.add_argument("--divide", action="store_true",
                   help="the reduced side divided as finely as it can be, and compared with the undivided one too")
    p.add_argument("--scenario", action="append", default=[], metavar="FILE[:MODE]",
                   help="compare this scenario (a file or a shipped name; all its modes unless :MODE) instead of "
                        "random ones; repeatable")
    p.add_argument("--bounds", type=bounds, default=None,
                   help="with --scenario: the preemption bounds, e.g. 0,1 or 0,1,none (default 0,1)")
    args = p.parse_args()
    if args.scenario:
        return given(args.scenario, args.bounds if args.bounds is not None else [0, 1])
    compared = skipped = bad = 0
    started = time.time()
    for seed in args.seeds:
        sc, mode = random_scenario(seed), mode_of(seed)
        for bound in (0, 1, 2, None):
            how = {"unbounded": True} if bound is None else {"preemptions": bound}
            finest = {"divide": True, "donate_every": 1} if args.divide else {}
            reduced = explore(sc, mode, max_seconds=args.budget, **finest, **how)
            if not reduced.complete:
                skipped += 4 - [0, 1, 2, None].index(bound)
                break
            if args.divide:
                whole = explore(sc, mode, **how)
                if whole.claims() != reduced.claims() or whole.outcomes != reduced.outcomes:
                    bad += 1
                    print(f"MISMATCH seed {seed} {mode} bound {bound}: divided and undivided differ", flush=True)
            if reduced.raw_interleavings > args.limit:
                skipped += 1
                continue
            every = explore(sc, mode, reduce=False, **how)
            compared += 1
            differ = differences(reduced, every)
            if differ:
                bad += 1
                print(f"MISMATCH seed {seed} {mode} bound {bound}: {', '.join(differ)} differ "
                      f"({reduced.raw_interleavings:,} interleavings reduced, {every.explored:,} unreduced)",
                      flush=True)
        print(f"seed {seed} done; so far {compared} compared, {skipped} skipped, {bad} mismatches", file=sys.stderr,
              flush=True)
    print(f"seeds {args.seeds.start}-{args.seeds.stop - 1}: {compared} cases compared, {skipped} skipped (over "
          f"{args.limit:,} interleavings, or a reduced search over {args.budget:g} s), {bad} mismatches, "
          f"{time.time() - started:.0f} s")
    if not compared:
        print("nothing was compared: raise --limit or --budget, or give other seeds", file=sys.stderr)
        return 2
    return 1 if bad else 0


def bounds(text: str) -> list[int | None]:
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip().lower()
        if part in ("none", "unbounded"):
            out.append(None)
        elif part.isdigit():
            out.append(int(part))
        else:
            raise argparse.ArgumentTypeError(f"a bound is a whole number or 'none', not {part!r}")
    return out


def given(names: list[str], which: list[int | None]) -> int:
    """The oracle on the named scenarios (``--scenario``) at bounds ``which``: each mode's reduced search
    against its unreduced one, whatever their size. Returns the exit status."""
    from emqlab.engine import scenario

    bad = compared = 0
    started = time.time()
    for name in names:
        path, _, only = name.partition(":")
        sc = scenario.load(path)
        for mode in [only] if only else sc.modes:
            for bound in which:
                how = {"unbounded": True} if bound is None else {"preemptions": bound}
                t = time.process_time()
                reduced = explore(sc, mode, **how)
                t_reduced = time.process_time() - t
                every = explore(sc, mode, reduce=False, **how)
                compared += 1
                differ = differences(reduced, every)
                bad += bool(differ)
                verdict = f"MISMATCH: {', '.join(differ)} differ" if differ else "same"
                print(f"{sc.name} {mode} bound {bound}: {verdict} ({reduced.explored:,} traces in "
                      f"{reduced.executed:,} runs, {t_reduced:.1f} s; "
                      f"{every.explored:,} interleavings unreduced, {time.process_time() - t - t_reduced:.1f} s)",
                      flush=True)
    print(f"{compared} cases compared, {bad} mismatches, {time.time() - started:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
