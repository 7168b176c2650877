"""The home of the exploring commands, ``emqlab simulate`` and ``emqlab replay``, and of how they print a
report: the counts, the anomalies, each witness's annotated history and the `emqlab replay` line that
reproduces it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from emqlab.explore.checked import ScheduleError
from emqlab.protocol.verdict import judge
from emqlab.text import DEFAULT_WIDTH, progress_bar, share_text
from emqlab.ui.cli.common import (
    MAX_DEPTH,
    MAX_PREEMPTIONS,
    MAX_RUNS,
    SEED,
    SEED_RANGE,
    _check_options,
    _columns,
    _command_lines,
    _common_options,
    _errors,
    _fail,
    _finish_check,
    _finite,
    _mask,
    _mode_options,
    _remember_url,
    _require_kinds,
    _require_mode,
    _say,
    _Scripts,
    _wide_option,
    console,
    err_console,
)


def _load(scenario_name: str, redis_url: str | None, script_set: _Scripts) -> tuple[Any, Any, Any]:
    """The scenario, the connection and the script set; with ``--lua`` the scenario checks
    ``invariant:finish-files-its-job`` too, as ``emqlab check`` does (so a check's witness replays to the
    same verdict)."""
    import dataclasses

    from emqlab.backend.connect import connect
    from emqlab.check.lua import FINISH_RULE
    from emqlab.engine.scenario import load

    sc = load(scenario_name)
    if script_set.lua is not None:
        sc = dataclasses.replace(sc, invariants=(*sc.invariants, FINISH_RULE))
    conn = connect(redis_url)
    scripts = script_set.load()
    return sc, conn, scripts


@click.command()
@_mode_options
@_common_options
@click.option("--strategy", type=click.Choice(["exhaustive", "random", "pct"]), default="exhaustive",
              show_default=True, help="How to choose interleavings.")
@click.option("--runs", type=click.IntRange(1, MAX_RUNS), default=200, show_default=True,
              help="Runs for the random and pct strategies.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed for random and pct: a 64-bit signed integer (each 25 runs use one seed: it, then"
                   " it + 2^32, it + 2·2^32, …).")
@click.option("--depth", type=click.IntRange(1, MAX_DEPTH), default=2, show_default=True,
              help="PCT bug depth (number of priority-change points + 1).")
@click.option("--preemptions", type=click.IntRange(0, MAX_PREEMPTIONS), default=None,
              help="Exhaustive: explore only schedules with at most K preemptions.")
@click.option("--no-reduce", is_flag=True, help="Exhaustive: run every interleaving (no partial-order reduction).")
@click.option("--jobs", "-j", "--processes", "-p", "jobs", type=click.IntRange(1, 4096), default=None,
              help="Processes that explore: this one and N-1 workers (default: the number of cores). "
                   "The report is the same for any number. --processes is the same option, as in "
                   "sweep-rtt, whose --jobs counts the queue's jobs.")
@click.option("--executor", metavar="URL", default=None, callback=_remember_url,
              help="Where the parts (the subtrees of the search, or the chunks of sampled runs) run: local"
                   " (a process pool of --jobs, the default) or a Dask cluster, dask://host:8786 (pip install"
                   " 'emqlab[dask]').")
@click.option("--max-seconds", type=click.FloatRange(0, min_open=True), default=None,
              callback=lambda _c, _p, v: _finite(v, "--max-seconds"),
              help="Stop after this long: an inconclusive result that says what was covered.")
@_check_options
@_wide_option
def simulate(mode: str, scenario_name: str, redis_url: str | None, script_set: _Scripts, as_json: bool,
             strategy: str, runs: int, seed: int, depth: int, preemptions: int | None, no_reduce: bool,
             jobs: int | None, executor: str | None, max_seconds: float | None,
             fail_on_anomaly: bool, expect: list[str] | None, wide: bool = False) -> None:
    """Explore the interleavings of a scenario's actors and name the anomalies.

    Each actor step is one round trip to Redis. A split finish gives the recovery sweep a gap between
    every two commands; an atomic finish gives it none. The summary shows how many interleavings there
    are, how many ran, which anomalies appeared in how many runs, and for each anomaly a minimal witness
    as an annotated history with the one-line `emqlab replay` command that reproduces it.

    The last line is the verdict: holds (a complete exploration at the stated bound found no anomaly),
    fails (an anomaly, with its witness) or inconclusive (a sampled strategy or a budget; PCT's line gives
    its probability bound and the bug depth it assumes). The exit status carries it with --fail-on-anomaly
    or --expect (see `emqlab --help`); otherwise a completed run exits 0.

    \b
    Examples:
      emqlab simulate --split
      emqlab simulate --atomic --scenario two-workers
      emqlab simulate --split --strategy pct --runs 50 --seed 7
      emqlab simulate --split --redis redis://127.0.0.1:6379/0 --json
      emqlab simulate --atomic --expect none             # CI: exit 0 only if it holds
      emqlab simulate --split --expect double-placement  # an assignment: the race must show
      emqlab simulate --split --wide                     # witness lines unwrapped
    """
    ctx = click.get_current_context()
    from click.core import ParameterSource

    explicit = {p for p in ("runs", "seed", "depth") if ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE}
    if strategy == "exhaustive" and explicit:
        _fail(f"--{', --'.join(sorted(explicit))} only appl{'y' if len(explicit) > 1 else 'ies'} to --strategy"
              " random or pct (exhaustive runs every interleaving)")
    if strategy != "exhaustive" and (preemptions is not None or no_reduce):
        _fail("--preemptions and --no-reduce only apply to --strategy exhaustive")
    if strategy != "exhaustive":
        from emqlab.explore.divide import SWARM_CHUNK, SWARM_STRIDE, chunk_seeds

        seeds = chunk_seeds(seed, runs)  # chunk i is replayed alone with --seed seeds[i]: one
        if seeds[-1] > SEED_RANGE[1]:
            _fail(f"--runs {runs} takes {len(seeds)} seeds from --seed on (one per {SWARM_CHUNK} runs, {SWARM_STRIDE}"
                  f" apart): the largest --seed for it is {SEED_RANGE[1] - (len(seeds) - 1) * SWARM_STRIDE}")
    with _errors():
        sc, conn, scripts = _load(scenario_name, redis_url, script_set)
        _require_mode(sc, mode)
        _require_kinds(sc, expect)
        from emqlab.explore import run as explore_run
        from emqlab.explore.pool import default_jobs

        def run(progress: Callable[[int, int | None], None] | None) -> Any:
            return explore_run.explore(sc, mode, strategy=strategy, conn=conn, url=redis_url, runs=runs, seed=seed,
                                       depth=depth, preemptions=preemptions, reduce=not no_reduce, scripts=scripts,
                                       jobs=jobs if jobs is not None else default_jobs(), executor=executor,
                                       max_seconds=max_seconds, progress=progress)

        if as_json or not err_console.is_terminal:
            rep = run(None)
        else:
            # (no time remaining for an exhaustive search: its parts' total grows as they are handed on)
            eta = strategy != "exhaustive"
            with progress_bar(err_console, "exploring parts", eta=eta, threadless=True) as progress:
                rep = run(progress)
    v = judge(rep, expect, witnesses='in "witnesses"' if as_json else "above")
    width = _columns(wide)
    if as_json:
        d = rep.to_dict()
        d["verdict"] = v.kind
        d["verdict_detail"] = v.to_dict(check=fail_on_anomaly)
        click.echo(_mask(json.dumps(d, indent=2)))
    else:
        _print_report(rep, sc, mode, scenario_name, redis_url, script_set, width)
        for w in rep.warnings:
            _say(Text.assemble(("warning:", "bold yellow"), f" {w}"), width, 4)
    _finish_check(v, expect, fail_on_anomaly, as_json, width)


def _replay_cmd(schedule: str, scenario_name: str, mode: str, redis_url: str | None,
                script_set: _Scripts) -> list[str]:
    """The `emqlab replay` command that reproduces ``schedule``, passwords masked, in the pieces a long
    command may be broken between (an option stays with its value)."""
    parts = ["emqlab replay", f"'{schedule}'", f"--{mode}"]
    if scenario_name != "stalled-finish":
        parts.append(f"--scenario {shlex.quote(scenario_name)}")
    if redis_url:
        parts.append(f"--redis {shlex.quote(redis_url)}")
    opts = script_set.options()
    parts += [f"{o} {v}" for o, v in zip(opts[::2], opts[1::2], strict=True)]
    return [_mask(p) for p in parts]


def _print_report(rep: Any, sc: Any, mode: str, scenario_name: str, redis_url: str | None,
                  script_set: _Scripts, width: int | None = DEFAULT_WIDTH) -> None:
    from emqlab.explore.report import RUN_RETRIES

    # the scenario's own text (name, title, lesson) is printed as text, never read as console markup
    _say(Text.assemble(("emqlab simulate", "bold"), " · scenario ", (sc.name, "cyan"), " · mode ",
                       (mode, "cyan"), f" · {rep.backend} · {rep.strategy}"), width, 4)
    _say(Text(sc.title, style="dim"), width, 2)
    steps = ", ".join(f"{a} {n} step{'s' if n != 1 else ''}" for a, n in rep.steps_per_actor.items())
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("interleavings")
    t.add_column("count", justify="right")
    bound = rep.params.get("preemption_bound")
    within = f" with ≤{bound} preemption(s)" if bound is not None else ""
    infra = rep.aborted or rep.stopped is not None
    if rep.raw_exact:
        t.add_row(f"interleavings{within} (exact)", f"{rep.raw_interleavings:,}")
    elif (infra or not rep.complete) and rep.strategy == "exhaustive":
        t.add_row(f"interleavings{within} covered (a lower bound)", f"{rep.raw_interleavings:,}")
    else:
        t.add_row(f"interleavings (estimate: multinomial of {steps})", f"{rep.raw_interleavings:,}")
    stopped = "" if rep.complete else " (stopped early)"
    if rep.strategy in ("exhaustive", "replay"):
        t.add_row("runs executed" + stopped, f"{rep.executed:,}")
        if rep.reduction != "off":
            t.add_row("  kept: one per trace", f"{rep.explored:,}")
    else:
        t.add_row(f"runs ({rep.strategy} samples, may repeat){stopped}", f"{rep.explored:,}")
    if rep.blocked:
        t.add_row("  blocked by a sleep set", f"{rep.blocked:,}")
    if rep.outside_bound:
        t.add_row("  beyond the bound", f"{rep.outside_bound:,}")
    if rep.repeated:
        t.add_row("  repeating a kept trace", f"{rep.repeated:,}")
    if rep.aborted:
        t.add_row("  aborted (server errors)", f"{rep.aborted_runs:,}")
    t.add_row("distinct final states", str(rep.distinct_outcomes))
    t.add_row("runs per second", f"{rep.runs_per_second:.0f}")
    console.print(t, width=width)
    notes = []
    if rep.strategy == "exhaustive" and rep.reduction != "off":
        notes.append("a trace = the interleavings that differ only in the order of steps on different keys (or\n"
                     "on different members of one key); they end in the same state, and one run stands for all\n"
                     "of them (partial-order reduction)")
        if rep.backend != "fakeredis":
            notes.append("on a live server a shipped script's step is one EVALSHA, so it counts as touching every\n"
                         "key it declares (on fakeredis the Lua host sees each command): fewer steps commute, and\n"
                         "more runs are kept than on fakeredis for the same interleavings and anomalies")
    if rep.blocked:
        notes.append("blocked = runs the reduction stopped before their end: they would repeat a trace")
    if rep.outside_bound:
        notes.append("beyond the bound = runs whose trace needs more preemptions than the bound, set aside")
    if rep.repeated:
        notes.append("repeating a kept trace = runs the bounded search could not rule out in advance: under a\n"
                     "preemption bound a step may only be put to sleep when moving it up costs no preemption")
    if bound is not None:
        origin = "--preemptions" if rep.params.get("bound_from") == "option" else \
            f"preemptions: {bound} in the scenario file; --preemptions K overrides it"
        notes.append(f"counted: interleavings with at most {bound} preemption(s)\n({origin})")
    for n in notes:
        _say(Text(n, style="dim"), width, 2)
    for cause, n in sorted(rep.aborted.items(), key=lambda kv: -kv[1]):
        _say(Text.assemble(("aborted:", "bold yellow"), f" {n:,} run(s): {cause.reason}"), width, 4)
    if rep.aborted:
        _say(Text("an aborted run counts nowhere else, and the reduction may have missed interleavings below it",
                  style="dim"), width, 2)
    for cause, n in sorted(rep.retried.items(), key=lambda kv: -kv[1]):
        _say(Text.assemble(("retried:", "bold"), f" {n:,} time(s) after: {cause.reason}"), width, 4)
    if rep.retried:
        _say(Text(f"a run that such an error cut short is run again from its start, up to {RUN_RETRIES} times;"
                  " one that then completes counts like any other", style="dim"), width, 2)
    if rep.stopped is not None:
        _say(Text.assemble(("stopped:", "bold yellow"), f" {rep.stopped.reason} (later runs could not be"
                                                         " trusted)"), width, 4)
    elif isinstance(rep.params, dict) and rep.params.get("inconclusive"):  # (a time budget: --max-seconds)
        note = str(rep.params["inconclusive"])
        _say(Text.assemble(("stopped", "bold yellow"), note.removeprefix("stopped")) if note.startswith("stopped")
             else Text.assemble(("stopped:", "bold yellow"), f" {note}"), width, 4)
    console.print()
    if not rep.anomaly_kinds and infra:
        _say(Text.assemble(("no anomaly", "bold yellow"), f" in the {rep.explored:,} run(s) that completed."),
             width, 2)
    elif not rep.anomaly_kinds:
        if rep.strategy in ("random", "pct"):
            _say(Text.assemble(("no anomaly", "bold green"), f" in {rep.explored:,} sampled run(s) (of about"
                                                            f" {rep.raw_interleavings:,} interleavings)."), width, 2)
        else:
            what = "" if rep.raw_exact else " (covered so far: a lower bound)" if not rep.complete else " (estimate)"
            _say(Text.assemble(("no anomaly", "bold green"), f" in {rep.raw_interleavings:,} interleaving(s)"
                                                            f"{what}."), width, 2)
    else:
        a = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        a.add_column("anomaly")
        a.add_column("interleavings" if rep.raw_exact else "runs", justify="right")
        a.add_column("share", justify="right")
        a.add_column("min preemptions", justify="right")
        for kind in rep.anomaly_kinds:
            n = rep.interleavings_with[kind] if rep.raw_exact else rep.runs_with[kind]
            a.add_row(f"[red]{kind}[/]", f"{n:,}", share_text(rep.share(kind)), str(rep.min_preemptions[kind]))
        console.print(a, width=width)
    if rep.codes:
        console.print()
        _say(Text.assemble(("finish results", "bold"), " (return code → runs): " + "; ".join(
            f"{actor}: " + ", ".join(f"{outcome}×{n}" for outcome, n in codes.items())
            for actor, codes in rep.codes.items())), width, 2)
    for kind in rep.anomaly_kinds:
        h = rep.witnesses.get(kind)
        if h is None:  # (the server failed its replay: the exploration stopped)
            console.print()
            again = "; replay it once the server answers again:" if kind in rep.unreplayed else ""
            _say(Text.assemble(("witness", "bold"), " for ", (kind, "red"), ": not replayed (the exploration"
                               f" stopped on a server error){again}"), width, 2)
            if kind in rep.unreplayed:
                cmd = _command_lines("replay: ", _replay_cmd(rep.unreplayed[kind], scenario_name, mode, redis_url,
                                                             script_set), width)
                console.print(Text.assemble(("replay:", "bold"), "\n".join(cmd)[len("replay:"):]), soft_wrap=True)
            continue
        found = [x for x in h.findings if x.kind == kind]
        marks: dict[int, str] = {}
        for x in found:
            for s in x.steps:
                marks.setdefault(s, kind)
        console.print()
        _say(Text.assemble(("witness", "bold"), " for ", (kind, "red"), f" ({len(h.steps)} steps, "
                           f"{rep.min_preemptions[kind]} preemption(s)):"), width, 2)
        console.print(Text(h.annotated(marks=marks, width=width)), soft_wrap=True)
        for x in found:
            _say(Text.assemble(("why:", "bold"), f" {x.because}"), width, 5)
        cmd = _command_lines("replay: ", _replay_cmd(h.schedule, scenario_name, mode, redis_url, script_set),
                             width)
        console.print(Text.assemble(("replay:", "bold"), "\n".join(cmd)[len("replay:"):]), soft_wrap=True)
    if sc.lesson:
        console.print()
        _say(Text(f"lesson: {sc.lesson}", style="dim"), width, 8)


@click.command()
@click.argument("schedule")
@_mode_options
@_common_options
@_check_options
@_wide_option
def replay(schedule: str, mode: str, scenario_name: str, redis_url: str | None, script_set: _Scripts,
           as_json: bool, fail_on_anomaly: bool, expect: list[str] | None, wide: bool = False) -> None:
    """Replay one schedule and print its annotated history.

    SCHEDULE is a schedule string as `emqlab simulate` prints it: v1: then actor ids joined by dots, with
    *N for repeats (v1:W1*9.S1.W1*8). Whitespace and case do not matter. If it ends before every actor
    is done, the run continues without further preemption; one of no steps (v1:) is a usage error.

    \b
    Examples:
      emqlab replay 'v1:W1*9.S1.W1*8' --split
      emqlab replay 'v1:W1*9.S1' --split --redis live
      emqlab replay 'v1:W1*9.S1' --split --expect double-placement   # exit 0: the witness reproduces
      emqlab replay 'v1:W1*9.S1' --split --wide                      # one line per step, unwrapped
    """
    from emqlab.explore import run as explore_run

    with _errors():
        sc, conn, scripts = _load(scenario_name, redis_url, script_set)
        _require_mode(sc, mode)
        _require_kinds(sc, expect)
        try:
            rep = explore_run.explore(sc, mode, strategy="replay", conn=conn, schedule=schedule, scripts=scripts)
        except ScheduleError as e:
            if "has no step left" in str(e):
                raise ScheduleError(f"{e}; a schedule only fits the scenario and mode it was found in"
                                    f" (this is {sc.name} in --{mode})") from None
            raise
    if rep.aborted or rep.stopped is not None:  # the one run could not complete truthfully
        v = judge(rep, expect)
        if as_json:
            click.echo(_mask(json.dumps({"schedule": schedule, "verdict": v.kind,
                                         "verdict_detail": v.to_dict(check=fail_on_anomaly),
                                         "infrastructure": rep.to_dict()["infrastructure"]}, indent=1)))
        _finish_check(v, expect, fail_on_anomaly, as_json)
        return
    h = next(iter(rep.witnesses.values()), None)
    if h is None:  # no anomaly: rerun to show the history
        from emqlab.explore.checked import Runner, parse_schedule

        with _errors(), Runner(sc, mode, conn, scripts=scripts) as r:
            h = r.run(parse_schedule(schedule, [a.id for a in sc.actors], empty=False))
    v = judge(rep, expect, witnesses="is this history" if as_json else "above")
    if as_json:
        d = json.loads(h.to_json())
        d["verdict"] = v.kind
        d["verdict_detail"] = v.to_dict(check=fail_on_anomaly)
        click.echo(_mask(json.dumps(d, indent=1, default=str)))
        _finish_check(v, expect, fail_on_anomaly, as_json)
        return
    width = _columns(wide)
    kinds_at: dict[int, list[str]] = {}  # a step two anomalies name is marked with both
    for a in h.findings:
        for s in a.steps:
            if a.kind not in kinds_at.setdefault(s, []):
                kinds_at[s].append(a.kind)
    marks = {s: ", ".join(kinds) for s, kinds in kinds_at.items()}
    console.print(Text(h.annotated(marks=marks, width=width)), soft_wrap=True)
    if not h.findings:
        console.print("[bold green]no anomaly[/]")
    for a in h.findings:
        _say(Text.assemble((a.kind, "red"), f": {a.because}"), width, 4)
    _finish_check(v, expect, fail_on_anomaly, as_json, width)
