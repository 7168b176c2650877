"""The ``emqlab`` command line.

    emqlab simulate --split              explore a split finish racing the recovery sweep
    emqlab simulate --atomic             the same with one EVALSHA per finish: no anomaly
    emqlab replay 'v1:W1*9.S1.W1*8' --split
    emqlab scenarios                     the scenario library
    emqlab scripts                       the Lua scripts, their KEYS count and SHA1
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from . import __version__
from .backends import BackendError
from .registry import ScriptError, ScriptSet
from .scenario import ScenarioError
from .schedule import ScheduleError

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_ANOMALY = 1
EXIT_ERROR = 2

EXPECTED_ERRORS = (ScenarioError, ScheduleError, BackendError, ScriptError, ValueError)


def _fail(msg: str) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(msg)}")
    sys.exit(EXIT_ERROR)


@contextmanager
def _errors() -> Iterator[None]:
    import redis

    try:
        yield
    except EXPECTED_ERRORS as e:
        _fail(str(e))
    except redis.exceptions.RedisError as e:
        _fail(f"Redis: {e}")


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        order = ["simulate", "replay", "scenarios", "scripts", "sweep-rtt", "grade", "student"]
        return [c for c in order if c in self.commands] + sorted(set(self.commands) - set(order))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="emqlab")
def main() -> None:
    """emqlab — why a job queue must finish a job in one atomic Redis script.

    Runs the real queue scripts (lua/, BullMQ's protocol with emq:{queue}: keys) on fakeredis (default) or
    a live Redis, explores the interleavings of a worker's finish with a recovery sweep, and names the
    anomalies: a job in two lists, a stolen lock, a job run twice.

    \b
    Start here:
      emqlab simulate --split      # finds the double placement, prints the witness and its replay
      emqlab simulate --atomic     # one EVALSHA per finish: no anomaly in any interleaving
      emqlab scenarios             # the scenario library (races from public bug reports)
    """


def _mode_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The three finish-mode flags; the command receives ``mode``. Two of them at once is a usage error
    (checked on the parsed options, so it holds in-process too: click's CliRunner, a notebook)."""

    @functools.wraps(f)
    def wrapper(*args: Any, split_flag: bool = False, atomic_flag: bool = False, ftf_flag: bool = False,
                **kwargs: Any) -> Any:
        given = [name for name, on in (("--split", split_flag), ("--atomic", atomic_flag),
                                       ("--finish-then-fetch", ftf_flag)) if on]
        if len(given) > 1:
            _fail(f"choose one finish mode, not {' and '.join(given)}")
        kwargs["mode"] = {"--atomic": "atomic", "--finish-then-fetch": "finish-then-fetch"}.get(
            given[0] if given else "--split", "split")
        return f(*args, **kwargs)

    g: Callable[..., Any] = wrapper
    g = click.option("--finish-then-fetch", "ftf_flag", is_flag=True,
                     help="Atomic finish with fetch_next=0, then a separate moveToActive (two round trips).")(g)
    g = click.option("--atomic", "atomic_flag", is_flag=True,
                     help="Each finish is one EVALSHA of moveToFinished-14 (fetch_next=1).")(g)
    g = click.option("--split", "split_flag", is_flag=True,
                     help="Each finish is the same script run client-side, one round trip per redis.call"
                          " (default).")(g)
    return g


def _common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (every count).")(f)
    f = click.option("--scripts", "script_set", type=click.Choice(["emqlab", "bullmq"]), default="emqlab",
                     show_default=True,
                     help="Which script set runs: emqlab's lua/ or BullMQ's shipped scripts (bullmq package).")(f)
    f = click.option("--redis", "redis_url", metavar="URL", default=None,
                     help="Run on a live Redis (redis://host:port/db, or 'live' for $EMQLAB_REDIS_URL /"
                          " 127.0.0.1:6379) instead of fakeredis. Only keys under the run's own queue are"
                          " written, and removed afterwards.")(f)
    f = click.option("--scenario", "-s", "scenario_name", default="stalled-finish", show_default=True,
                     metavar="NAME|FILE", help="A shipped scenario name (see `emqlab scenarios`) or a YAML file.")(f)
    return f


def _load(scenario_name: str, redis_url: str | None, script_set: str) -> tuple[Any, Any, Any]:
    from .backends import connect
    from .scenario import load

    sc = load(scenario_name)
    conn = connect(redis_url)
    scripts = ScriptSet.bullmq() if script_set == "bullmq" else None
    return sc, conn, scripts


@main.command()
@_mode_options
@_common_options
@click.option("--strategy", type=click.Choice(["exhaustive", "random", "pct"]), default="exhaustive",
              show_default=True, help="How to choose interleavings.")
@click.option("--runs", type=click.IntRange(1), default=200, show_default=True,
              help="Runs for the random and pct strategies.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for random and pct.")
@click.option("--depth", type=click.IntRange(1), default=2, show_default=True,
              help="PCT bug depth (number of priority-change points + 1).")
@click.option("--preemptions", type=click.IntRange(0), default=None,
              help="Exhaustive: explore only schedules with at most K preemptions.")
@click.option("--no-reduce", is_flag=True, help="Exhaustive: run every interleaving (no partial-order reduction).")
@click.option("--fail-on-anomaly", is_flag=True, help="Exit with status 1 when an anomaly is found.")
def simulate(mode: str, scenario_name: str, redis_url: str | None, script_set: str, as_json: bool,
             strategy: str, runs: int, seed: int, depth: int, preemptions: int | None, no_reduce: bool,
             fail_on_anomaly: bool) -> None:
    """Explore the interleavings of a scenario's actors and name the anomalies.

    Each actor step is one round trip to Redis. A split finish gives the recovery sweep a gap between
    every two commands; an atomic finish gives it none. The summary shows how many interleavings there
    are, how many ran, which anomalies appeared in how many runs, and for each anomaly a minimal witness
    as an annotated history with the one-line `emqlab replay` command that reproduces it.

    \b
    Examples:
      emqlab simulate --split
      emqlab simulate --atomic --scenario two-workers
      emqlab simulate --split --strategy pct --runs 50 --seed 7
      emqlab simulate --split --redis redis://127.0.0.1:6379/0 --json
    """
    from .explore import explore

    ctx = click.get_current_context()
    from click.core import ParameterSource

    explicit = {p for p in ("runs", "seed", "depth") if ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE}
    if strategy == "exhaustive" and explicit:
        _fail(f"--{', --'.join(sorted(explicit))} only apply to --strategy random or pct (exhaustive runs every"
              " interleaving)")
    if strategy != "exhaustive" and (preemptions is not None or no_reduce):
        _fail("--preemptions and --no-reduce only apply to --strategy exhaustive")
    with _errors():
        sc, conn, scripts = _load(scenario_name, redis_url, script_set)
        if mode not in sc.modes:
            _fail(f"scenario {sc.name} does not define mode {mode} (modes: {', '.join(sc.modes)})")
        rep = _with_progress(
            lambda progress: explore(sc, mode, strategy=strategy, conn=conn, runs=runs, seed=seed, depth=depth,
                                     preemptions=preemptions, reduce=not no_reduce, scripts=scripts,
                                     progress=progress),
            total=runs if strategy in ("random", "pct") else None, quiet=as_json)
    if as_json:
        click.echo(json.dumps(rep.to_dict(), indent=2))
    else:
        _print_report(rep, sc, mode, scenario_name, redis_url, script_set)
    if fail_on_anomaly and rep.anomaly_kinds:
        sys.exit(EXIT_ANOMALY)


def _with_progress(fn: Callable[[Callable[[int, int | None], None] | None], Any], total: int | None,
                   quiet: bool) -> Any:
    if quiet or not err_console.is_terminal:
        return fn(None)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [SpinnerColumn(), TextColumn("exploring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("runs", total=total)

        def progress(done: int, _total: int | None) -> None:
            bar.update(task, completed=done)

        return fn(progress)


def _replay_cmd(schedule: str, scenario_name: str, mode: str, redis_url: str | None, script_set: str) -> str:
    parts = ["emqlab replay", f"'{schedule}'", f"--{mode}"]
    if scenario_name != "stalled-finish":
        parts += ["--scenario", scenario_name]
    if redis_url:
        parts += ["--redis", redis_url]
    if script_set != "emqlab":
        parts += ["--scripts", script_set]
    return " ".join(parts)


def _print_report(rep: Any, sc: Any, mode: str, scenario_name: str, redis_url: str | None,
                  script_set: str) -> None:
    console.print(f"[bold]emqlab simulate[/] · scenario [cyan]{sc.name}[/] · mode [cyan]{mode}[/] · "
                  f"{rep.backend} · {rep.strategy}")
    console.print(f"[dim]{sc.title}[/]")
    steps = ", ".join(f"{a} {n} step{'s' if n != 1 else ''}" for a, n in rep.steps_per_actor.items())
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("interleavings")
    t.add_column("count", justify="right")
    bound = rep.params.get("preemption_bound")
    within = f" with ≤{bound} preemption(s)" if bound is not None else ""
    if rep.raw_exact:
        t.add_row(f"interleavings{within} (exact)", f"{rep.raw_interleavings:,}")
    else:
        t.add_row(f"interleavings (estimate: multinomial of {steps})", f"{rep.raw_interleavings:,}")
    if rep.strategy == "exhaustive" and rep.reduction != "off":
        ran = "runs executed (one per trace)"
    elif rep.strategy in ("exhaustive", "replay"):
        ran = "runs executed"
    else:
        ran = f"runs ({rep.strategy} samples, may repeat)"
    t.add_row(ran + ("" if rep.complete else " (stopped early)"), f"{rep.explored:,}")
    if rep.pruned:
        t.add_row("runs cut short (sleep sets)", f"{rep.pruned:,}")
    if rep.outside_bound:
        t.add_row("traces beyond the bound", f"{rep.outside_bound:,}")
    t.add_row("distinct final states", str(rep.distinct_outcomes))
    t.add_row("runs per second", f"{rep.runs_per_second:.0f}")
    console.print(t)
    notes = []
    if rep.strategy == "exhaustive" and rep.reduction != "off":
        notes.append("a trace = the interleavings that differ only in the order of steps on different keys;\n"
                     "they end in the same state, and one run stands for all of them (partial-order reduction)")
    if rep.pruned:
        notes.append("cut short = runs the reduction stopped because they would repeat a trace")
    if bound is not None:
        origin = "--preemptions" if rep.params.get("bound_from") == "option" else \
            f"preemptions: {bound} in the scenario file; --preemptions K overrides it"
        notes.append(f"counted: interleavings with at most {bound} preemption(s)\n({origin})")
    for n in notes:
        console.print(f"[dim]{n}[/]")
    console.print()
    if not rep.anomaly_kinds:
        console.print(f"[bold green]no anomaly[/] in {rep.raw_interleavings:,} interleaving(s)"
                      f"{'' if rep.raw_exact else ' (estimate)'}.")
    else:
        a = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        a.add_column("anomaly")
        a.add_column("interleavings" if rep.raw_exact else "runs", justify="right")
        a.add_column("share", justify="right")
        a.add_column("min preemptions", justify="right")
        for kind in rep.anomaly_kinds:
            n = rep.interleavings_with[kind] if rep.raw_exact else rep.runs_with[kind]
            a.add_row(f"[red]{kind}[/]", f"{n:,}", f"{rep.share(kind):.1%}", str(rep.min_preemptions[kind]))
        console.print(a)
    if rep.codes:
        console.print()
        console.print("[bold]finish results[/] (return code → runs): " + "; ".join(
            f"{actor}: " + ", ".join(f"{outcome}×{n}" for outcome, n in codes.items())
            for actor, codes in rep.codes.items()))
    for kind in rep.anomaly_kinds:
        h = rep.witnesses[kind]
        found = [x for x in h.anomalies if x["kind"] == kind]
        marks: dict[int, str] = {}
        for x in found:
            for s in x["steps"]:
                marks.setdefault(s, kind)
        console.print()
        console.print(f"[bold]witness[/] for [red]{kind}[/] ({len(h.steps)} steps, "
                      f"{rep.min_preemptions[kind]} preemption(s)):")
        console.print(h.annotated(marks=marks), markup=False)
        for x in found:
            console.print(f"[bold]why:[/] {x['because']}", markup=True, soft_wrap=False)
        console.print(f"[bold]replay:[/] {_replay_cmd(h.schedule, scenario_name, mode, redis_url, script_set)}",
                      markup=True)
    if sc.lesson:
        console.print()
        console.print(f"[dim]lesson: {sc.lesson}[/]", soft_wrap=False)


@main.command()
@click.argument("schedule")
@_mode_options
@_common_options
def replay(schedule: str, mode: str, scenario_name: str, redis_url: str | None, script_set: str,
           as_json: bool) -> None:
    """Replay one schedule and print its annotated history.

    SCHEDULE is a schedule string as `emqlab simulate` prints it: v1: then actor ids joined by dots, with
    *N for repeats (v1:W1*9.S1.W1*8). Whitespace and case do not matter. If it ends before every actor
    is done, the run continues without further preemption.

    \b
    Examples:
      emqlab replay 'v1:W1*9.S1.W1*8' --split
      emqlab replay 'v1:W1*9.S1' --split --redis live
    """
    from .explore import explore

    with _errors():
        sc, conn, scripts = _load(scenario_name, redis_url, script_set)
        try:
            rep = explore(sc, mode, strategy="replay", conn=conn, schedule=schedule, scripts=scripts)
        except ScheduleError as e:
            if "has no step left" in str(e):
                raise ScheduleError(f"{e}; a schedule only fits the scenario and mode it was found in"
                                    f" (this is {sc.name} in --{mode})") from None
            raise
    h = next(iter(rep.witnesses.values()), None)
    if h is None:  # no anomaly: rerun to show the history
        from .schedule import Runner, parse_schedule

        with _errors(), Runner(sc, mode, conn, scripts=scripts) as r:
            h = r.run(parse_schedule(schedule, [a.id for a in sc.actors]))
    if as_json:
        click.echo(h.to_json())
        return
    marks = {s: a["kind"] for a in h.anomalies for s in a["steps"]}
    console.print(h.annotated(marks=marks), markup=False)
    if not h.anomalies:
        console.print("[bold green]no anomaly[/]")
    for a in h.anomalies:
        console.print(f"[red]{a['kind']}[/]: {a['because']}", soft_wrap=False)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the library as JSON.")
@click.option("--check", is_flag=True,
              help="Explore every scenario in every mode and compare with its expected outcome.")
def scenarios(as_json: bool, check: bool) -> None:
    """List the scenario library: name, the anomaly it shows, its lesson and source.

    Run one with `emqlab simulate --scenario NAME`. With --check, every scenario is explored exhaustively in
    each of its modes and the anomalies found are compared with the file's `expect:` section.

    \b
    Examples:
      emqlab scenarios
      emqlab scenarios --json
      emqlab scenarios --check     # about half a minute: every scenario, every mode
    """
    from .scenario import shipped

    with _errors():
        lib = shipped()
    if check:
        _check_scenarios(lib)
        return
    if as_json:
        click.echo(json.dumps([{"name": s.name, "title": s.title, "anomaly": s.anomaly, "lesson": s.lesson,
                                "source": s.source, "modes": s.modes,
                                "expect": {m: e.anomalies for m, e in s.expect.items()}} for s in lib], indent=2))
        return
    from rich.markup import escape

    for s in lib:
        console.print(f"[bold cyan]{s.name}[/]  [red]{s.anomaly}[/]  [dim]({', '.join(s.modes)})[/]")
        console.print(f"  {escape(s.title)}", soft_wrap=False)
        if s.lesson:
            console.print(f"  [dim]{escape(s.lesson)}[/]", soft_wrap=False)
        for src in s.source:
            console.print(f"  [dim]source: {escape(src)}[/]", soft_wrap=False)
        console.print()
    console.print(f"{len(lib)} scenarios · run one: emqlab simulate --split --scenario NAME", soft_wrap=False)


def _check_scenarios(lib: Any) -> None:
    from .backends import connect
    from .explore import explore

    bad = 0
    for s in lib:
        for mode in s.modes:
            exp = s.expect.get(mode)
            rep = explore(s, mode, conn=connect())
            got = rep.anomaly_kinds
            ok = exp is None or sorted(exp.anomalies) == got
            missing_codes = []
            if exp is not None:
                for actor, codes in exp.codes.items():
                    seen = {o.code for o in rep.codes.get(actor, {})}
                    missing_codes += [f"{actor} {c}" for c in codes if c not in seen]
            ok = ok and not missing_codes
            bad += not ok
            mark = "[green]ok[/]" if ok else "[red]MISMATCH[/]"
            detail = ""
            if not ok and exp is not None:
                detail = f" expected {sorted(exp.anomalies)}"
                if missing_codes:
                    detail += f"; return codes never seen: {', '.join(missing_codes)}"
            console.print(f"{mark} {s.name:<28} {mode:<18} found {got or '-'}{detail}")
    sys.exit(EXIT_ANOMALY if bad else 0)


@main.command()
@click.option("--bullmq", is_flag=True, help="List BullMQ's shipped scripts (from the installed bullmq package).")
def scripts(bullmq: bool) -> None:
    """List the Lua scripts: command name, number of KEYS, SHA1, size in bytes (after includes).

    \b
    Examples:
      emqlab scripts
      emqlab scripts --bullmq      # BullMQ's shipped set (needs the test extra: pip install -e '.[test]')
    """
    with _errors():
        s = ScriptSet.bullmq() if bullmq else ScriptSet.emqlab()
    t = Table(title=f"{s.origin} scripts", show_header=True, header_style="bold", box=None)
    t.add_column("script", style="cyan")
    t.add_column("KEYS", justify="right")
    t.add_column("SHA1")
    t.add_column("bytes", justify="right")
    for sc in s:
        t.add_row(sc.name, str(sc.numkeys), sc.sha, str(len(sc.text)))
    console.print(t)



# -- sweep-rtt (timed runs: emqlab.timing) ----------------------------------------------------------------------

from .timing import TimingConfig as _TimingConfig  # noqa: E402  (the command's defaults are the model's)

_TIMING_DEFAULTS = _TimingConfig()


def _float_list(text: str, what: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{what}: expected numbers separated by commas, got {text!r}") from None
    if not values or any(not math.isfinite(v) or v < 0 or v > 3_600_000 for v in values):
        raise click.BadParameter(f"{what}: expected one or more finite numbers from 0 to 3600000 ms, got {text!r}")
    return values


def _check_finite(**values: float) -> None:
    for name, v in values.items():
        if not math.isfinite(v) or v > 3_600_000:
            _fail(f"--{name} {v}: expected a finite number of ms up to 3600000")


def _check_out_dir(path: str | None, option: str) -> None:
    if path:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            _fail(f"{option} {path}: the folder {parent} does not exist")


@main.command("sweep-rtt")
@click.option("--modes", default="atomic,finish-then-fetch,split", show_default=True, metavar="M1,M2",
              help="Finish modes: atomic, finish-then-fetch, split, split-then-fetch.")
@click.option("--rtt", "rtt_text", default="0.05,1,75", show_default=True, metavar="MS,MS",
              help="Round-trip times in ms (presets: 0.03 Unix socket, 0.05 loopback, 0.2 LAN, 1 cross-AZ,"
                   " 75 cross-region, 250 slow link).")
@click.option("--jobs", type=click.IntRange(1), default=_TIMING_DEFAULTS.jobs, show_default=True,
              help="Jobs per run.")
@click.option("--workers", type=click.IntRange(1), default=_TIMING_DEFAULTS.workers, show_default=True,
              help="Workers per run.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the RTT and processing-time draws.")
@click.option("--processing", "processing_ms", type=click.FloatRange(0), default=_TIMING_DEFAULTS.processing_ms,
              show_default=True, help="Mean processing time per job (virtual ms).")
@click.option("--interval", "interval_ms", type=click.FloatRange(0, min_open=True),
              default=_TIMING_DEFAULTS.stalled_interval_ms, show_default=True,
              help="The sweep's stalled interval (virtual ms; BullMQ's 30 s compressed 1000x).")
@click.option("--jitter", type=click.FloatRange(0), default=_TIMING_DEFAULTS.jitter, show_default=True,
              help="Lognormal sigma of each round trip (0 = every RTT exactly --rtt).")
@click.option("--lock", "lock_ms", type=click.FloatRange(0, min_open=True), default=_TIMING_DEFAULTS.lock_ms,
              show_default=True, help="Lock duration (virtual ms); renewed every half of it while a job is processed.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write the plots (anomaly rate, round trips per job, jobs/s vs RTT) to a .png or .svg.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None, help="Write the rows as CSV.")
@click.option("--redis", "redis_url", metavar="URL", default=None,
              help="Run on a live Redis instead of fakeredis (only the runs' own queues are written).")
@click.option("--json", "as_json", is_flag=True, help="Print every result as JSON.")
def sweep_rtt_command(modes: str, rtt_text: str, jobs: int, workers: int, seed: int, processing_ms: float,
                      interval_ms: float, jitter: float, lock_ms: float, out_path: str | None,
                      csv_path: str | None, redis_url: str | None, as_json: bool) -> None:
    """Timed runs: anomaly rate, round trips per job and jobs/s against the round-trip time.

    N jobs go through W workers while the recovery sweep runs every --interval ms of virtual time; every
    command costs one RTT. An atomic finish with fetch_next = 1 costs one round trip per job,
    finish-then-fetch two, a split finish one per command — and the split finish's window between DEL of
    the lock and SREM of the stall mark lasts one RTT, so its anomaly rate grows with the RTT.
    Deterministic for a seed.

    \b
    Examples:
      emqlab sweep-rtt
      emqlab sweep-rtt --rtt 0.03,0.05,0.2,1,75,250 --out rtt.png --csv rtt.csv
      emqlab sweep-rtt --modes split --rtt 1 --jobs 1000 --json
    """
    from .timing import ALL_MODES, sweep_rtt

    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in mode_list if m not in ALL_MODES]
    if bad or not mode_list:
        _fail(f"unknown mode {', '.join(bad) or modes!r} (one of: {', '.join(ALL_MODES)})")
    if out_path and not out_path.lower().endswith((".png", ".svg", ".pdf")):
        _fail(f"--out {out_path}: use a .png, .svg or .pdf file name")
    rtts = _float_list(rtt_text, "--rtt")
    _check_finite(processing=processing_ms, interval=interval_ms, lock=lock_ms, jitter=jitter)
    if jitter > 5:
        _fail(f"--jitter {jitter}: a lognormal sigma above 5 makes round trips meaningless")
    if workers > 10_000 or jobs > 1_000_000:
        _fail("--workers is limited to 10000 and --jobs to 1000000")
    if processing_ms > 1000 * interval_ms:
        _fail(f"--processing {processing_ms} is over 1000 stalled intervals (--interval {interval_ms}): "
              "the run would take forever in steps")
    _check_out_dir(out_path, "--out")
    _check_out_dir(csv_path, "--csv")
    with _errors():
        from .backends import connect

        conn = connect(redis_url)
        config = _TimingConfig(jobs=jobs, workers=workers, seed=seed, processing_ms=processing_ms,
                              stalled_interval_ms=interval_ms, jitter=jitter, lock_ms=lock_ms)
        sweep = _with_timed_progress(lambda progress: sweep_rtt(rtts, mode_list, config, conn, progress=progress),
                                     quiet=as_json)
    if csv_path:
        import csv

        rows = sweep.rows()
        with open(csv_path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if out_path:
        from .plots import plot_sweep, save

        save(plot_sweep(sweep), out_path)
    if as_json:
        click.echo(json.dumps(sweep.to_dict(), indent=2))
        return
    _print_sweep(sweep)
    for path, what in ((csv_path, "rows"), (out_path, "plots")):
        if path:
            console.print(f"[dim]{what} written to {path}[/]")


def _with_timed_progress(fn: Callable[[Callable[[int, int], None] | None], Any], quiet: bool) -> Any:
    if quiet or not err_console.is_terminal:
        return fn(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("timed runs (finishes)"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("finishes", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return fn(progress)


def _print_sweep(sweep: Any) -> None:
    cfg = sweep.config
    console.print(f"[bold]emqlab sweep-rtt[/] · {cfg['jobs']} jobs · {cfg['workers']} workers · processing "
                  f"{cfg['processing_ms']:g} ms · stalled interval {cfg['stalled_interval_ms']:g} ms · lock "
                  f"{cfg['lock_ms']:g} ms · jitter {cfg['jitter']:g} · seed {cfg['seed']} · "
                  f"{sweep.wall_s:.1f} s")
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for name in ("mode", "RTT ms", "trips/job", "jobs/s", "anom/1k", "model/1k", "hits", "runs"):
        t.add_column(name, justify="left" if name == "mode" else "right", no_wrap=True)
    for r in sweep.results:
        style = "red" if r.anomaly_total else "green"
        t.add_row(r.mode, f"{r.rtt_ms:g}", f"{r.round_trips_per_job:.2f}", _sig3(r.jobs_per_s),
                  f"[{style}]{r.anomalies_per_1000:.1f}[/]",
                  f"{r.expected_per_1000:.1f}" if r.mode.startswith("split") else "-", str(r.gap_hits),
                  str(r.finishes) + ("*" if r.truncated else ""))
    console.print(t)
    for r in sweep.results:
        if r.anomalies:
            kinds = ", ".join(f"{k} {n}" for k, n in r.anomalies.items())
            console.print(f"  [red]{r.mode} @ {r.rtt_ms:g} ms[/]: {kinds}")
    if any(r.truncated for r in sweep.results):
        console.print("  * stopped at the execution cap (5 x jobs): requeued jobs kept coming back")
    console.print("[dim]trips/job leaves out each worker's first fetch · anom/1k = anomalies per 1,000 jobs (one"
                  " job can show several, so it can pass 1,000) · "
                  "model/1k = expected from the finish's DEL→SREM window, RTT/(interval + RTT) per marked job · "
                  "hits = sweeps that requeued a job while its split finish ran · runs = job executions[/]",
                  soft_wrap=False)


def _sig3(x: float) -> str:
    if x == 0:
        return "0"
    import math

    return f"{x:,.{max(0, 2 - int(math.floor(math.log10(abs(x)))))}f}"


@main.command()
@click.argument("notebook", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True,
              help="Print the grade as JSON: every graded cell, its points and feedback.")
def grade(notebook: str, as_json: bool) -> None:
    """Grade a classroom assignment notebook, without nbgrader.

    Runs the notebook's code cells (not its test cells) on fakeredis with the virtual clock, then gives each
    graded cell to its grader in emqlab.grading: replays, exhaustive explorations and seeded timed runs, so
    the same notebook always gets the same grade. A cell scores all its points or none, with feedback that
    says what was wrong. The student's code runs in this process, unsandboxed, as with nbgrader.

    \b
    Examples:
      emqlab grade notebooks/assignments/a1-double-placement.ipynb
      emqlab grade submitted/ada/a2-repair-finish.ipynb --json
    """
    from .grading import grade_notebook

    with _errors():
        report = grade_notebook(notebook)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    console.print(f"[bold]emqlab grade[/] · {report.title} ([cyan]{report.assignment}[/]) · {notebook}")
    for c in report.cells:
        mark = "[green]ok[/]" if c.passed else "[red]--[/]"
        console.print(f"  {mark} [bold]{c.grade_id}[/] {c.points:g}/{c.max_points:g}  [dim]{c.what}[/]")
        for line in c.feedback.split("\n"):
            console.print(f"       {line}", markup=False, highlight=False)
    for e in report.errors:
        if not e.stubbed:
            console.print(f"  [yellow]cell {e.cell}[/] ({e.grade_id or 'no grade_id'}) raised {e.error}",
                          highlight=False)
    style = "green" if report.score == report.max_score else ("red" if report.score == 0 else "yellow")
    console.print(f"[bold {style}]score {report.score:g}/{report.max_score:g}[/]  "
                  f"[dim]({report.elapsed_s:.1f} s)[/]")


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("out", type=click.Path())
def student(source: str, out: str) -> None:
    """Make the student version of an assignment notebook (or of every notebook in a directory).

    Does what `nbgrader generate_assignment` does to a source notebook: each `### BEGIN SOLUTION` …
    `### END SOLUTION` region becomes `# YOUR CODE HERE` + `raise NotImplementedError()`, hidden tests
    (`### BEGIN HIDDEN TESTS` … `### END HIDDEN TESTS`) are removed, outputs are cleared, and graded and
    read-only cells are made undeletable. OUT is a notebook path, or a directory when SOURCE is one.

    \b
    Examples:
      emqlab student notebooks/assignments/a1-double-placement.ipynb release/a1-double-placement.ipynb
      emqlab student notebooks/assignments release/
    """
    from .grading import make_student_versions

    with _errors():
        written = make_student_versions(source, out)
    for p in written:
        console.print(f"wrote {p}", highlight=False)


def _terminate(signum: int, _frame: object) -> None:
    # SystemExit unwinds through the runners' context managers: a live run deletes its keys on SIGTERM
    # (a CI timeout, `kill`) as it does on Ctrl-C.
    raise SystemExit(128 + signum)


def entry() -> None:
    """The console script: :func:`main` with SIGTERM/SIGHUP turned into a clean exit and a closed pipe
    (``emqlab scenarios | head``) ending quietly."""
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _terminate)
    try:
        main()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    entry()
