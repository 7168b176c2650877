"""What one scheduler step costs against the same commands sent straight to fakeredis, in one process.

    python benchmarks/bench_step.py [--repeat N] [--scenario NAME[:BOUND]]... [--write docs/benchmarks.md]

For each case, an exhaustive split search runs once while every command it sends to the embedded server
is recorded, labelled by who sent it: a step of an actor (a split command, or a ``redis.call`` of a script
run atomically through the Lua host), the effect recorder reading the queue after a step, the final state
read at a run's end, or a run's reset (deleting the keys, writing the initial state). Then, side by side,
each timed ``--repeat`` times (the median kept):

- **engine**: the whole search again (CPU seconds, nothing recorded);
- **fakeredis, command layer**: the actors' commands replayed run by run through fakeredis's own command
  dispatch (the path emqlab's executor takes, without emqlab), each run's reset replayed untimed before it;
- **fakeredis, client**: the same through a ``fakeredis.FakeRedis`` client's ``execute_command`` (what a
  program using fakeredis pays).

The ratio engine / command layer is the cost of a step against its floor: everything emqlab does besides
the command itself (the scheduler, footprints, the Lua host, effects, traces, the final states, resets).
Only the actors' commands are replayed: the effect and final-state reads are the engine's own cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _tables import write_table

CASES = ["two-workers:2", "two-workers:none", "lease-lapse", "stalled-finish", "late-finish-deleted"]


def _load(case: str) -> tuple[Any, int | None, str]:
    from emqlab.engine import scenario

    name, _, bound = case.partition(":")
    path = scenario.shipped_path(name)
    if path is None:
        raise SystemExit(f"no shipped scenario {name!r}")
    sc = scenario.load(path)
    b = None if bound == "none" else int(bound) if bound else sc.preemptions
    return sc, b, f"{name} (≤{b})" if b is not None else f"{name} (no bound)"


def record(sc: Any, bound: int | None) -> tuple[list[tuple[list[tuple[bytes, ...]], list[tuple[bytes, ...]]]],
                                              dict[str, int], Any]:
    """One search with every command recorded: ``([(reset commands, step commands) per run], counts by
    sender, the report)``."""
    from emqlab.backend import executor as ex
    from emqlab.engine import recorder, runner
    from emqlab.explore import explore

    phase = ["step"]
    runs: list[tuple[list[tuple[bytes, ...]], list[tuple[bytes, ...]]]] = []
    counts = {"step": 0, "effects": 0, "reset": 0, "final": 0}
    call = ex._FakeDirect.__call__
    after = recorder.EffectRecorder.after_step
    reset = runner.Runner.reset
    final = runner.Runner.final_state

    def rec_call(self: Any, *fields: Any) -> object:
        counts[phase[0]] += 1
        if phase[0] == "reset":
            runs[-1][0].append(tuple(fields))
        elif phase[0] == "step" and runs:
            runs[-1][1].append(tuple(fields))
        return call(self, *fields)

    def rec_after(self: Any, *a: Any) -> None:
        phase[0] = "effects"
        try:
            after(self, *a)
        finally:
            phase[0] = "step"

    def rec_final(self: Any) -> Any:
        phase[0] = "final"
        try:
            return final(self)
        finally:
            phase[0] = "step"

    def rec_reset(self: Any) -> None:
        runs.append(([], []))
        phase[0] = "reset"
        try:
            reset(self)
        finally:
            phase[0] = "step"

    ex._FakeDirect.__call__ = rec_call  # type: ignore[method-assign]
    recorder.EffectRecorder.after_step = rec_after  # type: ignore[method-assign]
    runner.Runner.reset = rec_reset  # type: ignore[method-assign]
    runner.Runner.final_state = rec_final  # type: ignore[method-assign]
    try:
        rep = explore(sc, "split", preemptions=bound, unbounded=bound is None)
    finally:
        ex._FakeDirect.__call__ = call  # type: ignore[method-assign]
        recorder.EffectRecorder.after_step = after  # type: ignore[method-assign]
        runner.Runner.reset = reset  # type: ignore[method-assign]
        runner.Runner.final_state = final  # type: ignore[method-assign]
    return [r for r in runs if r[1]], counts, rep


def replay_layer(runs: list[tuple[list[tuple[bytes, ...]], list[tuple[bytes, ...]]]]) -> float:
    """CPU seconds of the step commands through fakeredis's command dispatch (resets untimed)."""
    import fakeredis
    from fakeredis._socket._resp import extract_command

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    conn = client.connection_pool.get_connection()
    conn.connect()
    sock = conn._sock
    lookup, run = sock._name_to_func, sock._run_command

    def send(command: tuple[bytes, ...]) -> None:
        cmd, args = extract_command([a if type(a) is bytes else str(a).encode() for a in command])
        func, sig = lookup(cmd)
        sig.check_arity(args, sock.version)
        run(func, sig, args, False)

    return _timed(runs, send)


def replay_client(runs: list[tuple[list[tuple[bytes, ...]], list[tuple[bytes, ...]]]]) -> float:
    """CPU seconds of the step commands through a FakeRedis client (resets untimed)."""
    import fakeredis
    import redis

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())

    def send(command: tuple[bytes, ...]) -> None:
        try:
            client.execute_command(*command)
        except redis.exceptions.ResponseError:
            pass

    return _timed(runs, send)


def _timed(runs: list[tuple[list[tuple[bytes, ...]], list[tuple[bytes, ...]]]],
           send: Callable[[tuple[bytes, ...]], None]) -> float:
    total = 0.0
    for resets, steps in runs:
        for c in resets:
            try:
                send(c)
            except Exception:  # noqa: BLE001 - a reply error is a reply; only the time counts
                pass
        t = time.process_time()
        for c in steps:
            try:
                send(c)
            except Exception:  # noqa: BLE001
                pass
        total += time.process_time() - t
    return total


def engine_cpu(sc: Any, bound: int | None) -> tuple[float, Any]:
    from emqlab.explore import explore

    t = time.process_time()
    rep = explore(sc, "split", preemptions=bound, unbounded=bound is None)
    return time.process_time() - t, rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="timings of each side (the median is kept)")
    ap.add_argument("--scenario", action="append", metavar="NAME[:BOUND]",
                    help="a shipped scenario, at its own bound or at BOUND (a number or none; default:"
                         f" {', '.join(CASES)})")
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    args = ap.parse_args()
    rows = ["| scenario (split) | steps | actor commands | effect reads | final-state reads | reset commands |"
            " engine CPU s | µs/step | fakeredis layer s | client s | engine / layer | engine / client |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in args.scenario or CASES:
        sc, bound, label = _load(case)
        engine_cpu(sc, bound)  # (warm: the scripts' first compile, the command table)
        runs, counts, rep = record(sc, bound)
        engine = statistics.median(engine_cpu(sc, bound)[0] for _ in range(args.repeat))
        layer = statistics.median(replay_layer(runs) for _ in range(args.repeat))
        client = statistics.median(replay_client(runs) for _ in range(args.repeat))
        steps = rep.steps_executed
        rows.append(f"| {label} | {steps:,} | {counts['step']:,} | {counts['effects']:,} | {counts['final']:,} |"
                    f" {counts['reset']:,} |"
                    f" {engine:.2f} | {engine / steps * 1e6:.0f} | {layer:.2f} | {client:.2f} |"
                    f" {engine / layer:.1f}x | {engine / client:.1f}x |")
        print(rows[-1], flush=True)
    table = "\n".join(rows)
    if args.write:
        write_table(args.write, "A step against the same commands through fakeredis",
                     "python benchmarks/bench_step.py" + (f" --repeat {args.repeat}" if args.repeat != 3 else "")
                     + "".join(f" --scenario {c}" for c in args.scenario or ()),
                     table)


if __name__ == "__main__":
    main()
