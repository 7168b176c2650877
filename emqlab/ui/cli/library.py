"""The home of the library commands: ``emqlab scenarios`` (the scenario library, and --check of every case),
``emqlab scripts`` (the Lua scripts), ``emqlab check`` (your own Lua against emqlab's) and ``emqlab clean``
(the keys of abandoned live runs)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from emqlab.protocol.verdict import ExitCode
from emqlab.scripting.registry import ScriptSet
from emqlab.text import DEFAULT_WIDTH, elide_middle
from emqlab.ui.cli.common import (
    _columns,
    _command_lines,
    _errors,
    _fail,
    _mask,
    _remember_url,
    _say,
    _wide_option,
    console,
    err_console,
)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the library as JSON.")
@click.option("--check", is_flag=True,
              help="Explore every scenario in every mode and compare with its expected outcome.")
@click.option("--jobs", "-j", "--processes", "-p", "jobs", type=click.IntRange(1, 4096), default=None,
              help="--check: processes that explore, one case each at a time (default: the number of cores).")
@click.option("--long", "long_", is_flag=True, help="Each scenario's title, lesson, modes and sources too.")
@click.option("--project", "projects", multiple=True, metavar="NAME",
              help="Only the scenarios of this queue project (repeatable), e.g. bullmq, rq.")
@_wide_option
def scenarios(as_json: bool, check: bool, jobs: int | None, long_: bool = False, wide: bool = False,
              projects: tuple[str, ...] = ()) -> None:
    """List the scenario library: one line per scenario (its name, the anomaly it shows, its title); with
    --long, its queue project, lesson, modes and sources too.

    Run one with `emqlab simulate --scenario NAME`. With --check, every scenario is explored exhaustively in
    each of its modes and the anomalies found are compared with the file's `expect:` section.

    \b
    Examples:
      emqlab scenarios
      emqlab scenarios --long
      emqlab scenarios --json
      emqlab scenarios --project rq
      emqlab scenarios --check     # every scenario, every mode, on every core
    """
    from emqlab.engine.scenario import shipped

    with _errors():
        lib = shipped()
    if projects:
        known = sorted({s.project for s in lib})
        unknown = [p for p in projects if p not in known]
        if unknown:
            raise click.BadParameter(f"no scenario of {', '.join(map(repr, unknown))}; the projects: "
                                     + ", ".join(known), param_hint="--project")
        lib = [s for s in lib if s.project in projects]
    if check:
        _check_scenarios(lib, jobs)
        return
    if as_json:
        click.echo(json.dumps([{"name": s.name, "title": s.title, "anomaly": s.anomaly, "lesson": s.lesson,
                                "source": s.source, "project": s.project, "modes": s.modes,
                                "expect": {m: e.anomalies for m, e in s.expect.items()}} for s in lib], indent=2))
        return
    width = _columns(wide)
    name_w = max(len(s.name) for s in lib)
    kind_w = max(len(s.anomaly) for s in lib)
    for s in lib:
        if not long_:  # (the atlas's names start with their project's: --long and --json show it)
            line = f"{s.name:<{name_w}}  {s.anomaly:<{kind_w}}  {s.title}"
            if width is not None and len(line) > width:
                line = line[: width - 1] + "…"
            console.print(Text(line), soft_wrap=True)
            continue
        console.print(Text.assemble((s.name, "bold cyan"), "  ", (s.project, "magenta"), "  ", (s.anomaly, "red"), "  ",
                                    (f"({', '.join(s.modes)})", "dim")), soft_wrap=True)
        _say(f"  {s.title}", width, 2)
        if s.lesson:
            _say(Text(f"  {s.lesson}", style="dim"), width, 2)
        for src in s.source:
            _say(Text(f"  source: {src}", style="dim"), width, 4)
        console.print()
    # (not every scenario has split mode, simulate's default: the hint names the mode as the scenario's to give)
    _say(f"{len(lib)} scenarios · run one: emqlab simulate -s NAME --MODE"
         + (", a mode in its brackets" if long_ else " (its modes, lessons and sources: --long)"), width, 4)


def _check_scenarios(lib: Any, jobs: int | None) -> None:
    from emqlab.explore.pool import default_jobs, run_in_order
    from emqlab.explore.run import check_case

    cases = [(s, mode) for s in lib for mode in s.modes]
    width = max((len(s.name) for s, _mode in cases), default=0)
    bad = 0

    def show(i: int, result: tuple[list[str], dict[str, set[Any]]]) -> None:
        nonlocal bad
        (s, mode), (got, seen_codes) = cases[i], result
        exp = s.expect.get(mode)
        ok = exp is None or sorted(exp.anomalies) == got
        missing_codes = []
        if exp is not None:
            for actor, codes in exp.codes.items():
                seen = seen_codes.get(actor, set())
                missing_codes += [f"{actor} {c}" for c in codes if c not in seen]
        ok = ok and not missing_codes
        bad += not ok
        mark = "[green]ok      [/]" if ok else "[red]MISMATCH[/]"  # (one width: the names line up)
        detail = ""
        if not ok and exp is not None:
            detail = f"; expected {', '.join(sorted(exp.anomalies)) or '-'}"
            if missing_codes:
                detail += f"; return codes never seen: {', '.join(missing_codes)}"
        console.print(f"{mark} {s.name:<{width}} {mode:<17} found {', '.join(got) or '-'}{detail}",
                      markup=True, highlight=False)

    # each case explored whole in one worker (a stop signal to this process alone stops them too); printed in
    # library order as they come
    n = jobs if jobs is not None else default_jobs()
    if n > 1:
        run_in_order(check_case, cases, n, live=False, each=show)
    else:
        for i, (s, mode) in enumerate(cases):
            show(i, check_case(s, mode))
    console.print(f"{len(cases) - bad} of {len(cases)} scenario × mode cases as expected"
                  + (f", {bad} MISMATCH" if bad else ""), markup=False, highlight=False)
    sys.exit(ExitCode.FAILS if bad else ExitCode.HOLDS)


@click.command()
@click.option("--bullmq", is_flag=True, help="List BullMQ's shipped scripts (from the installed bullmq package).")
def scripts(bullmq: bool) -> None:
    """List the Lua scripts: command name, number of KEYS, SHA1, size in bytes (after includes).

    \b
    Examples:
      emqlab scripts
      emqlab scripts --bullmq      # BullMQ's shipped set (pip install bullmq, or the test extra)
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


def _differs(rows: list[Any]) -> bool:
    """Whether a scenario's rows differ from emqlab's finish at all (a kind either side has, the other not)."""
    return any(r.differs or r.missing for r in rows)


def _scenario_line(rows: list[Any], width: int | None, name_width: int = 24) -> str:
    """One scenario's verdict line: fails (its atomic finish shows what emqlab's never does), review (final
    states emqlab's finish never leaves), differs (split only, or kinds emqlab's shows and yours does not),
    same, or unused (no run called your scripts); then each mode's differences (``+kind`` yours only,
    ``-kind`` emqlab's only)."""
    atomic = next((r for r in rows if r.mode == "atomic"), None)
    if not any(r.ran or r.error for r in rows):
        line = f"{'unused':<7} {rows[0].scenario:<{name_width}} no run calls your scripts"
        return line[: width - 1] + "…" if width is not None and len(line) > width else line
    status = ("fails" if atomic is not None and atomic.broken else
              "review" if atomic is not None and atomic.unmatched else
              "differs" if _differs(rows) else "same")

    def short(r: Any) -> str:
        bits = [f"+{k}" for k in r.extra] + [f"-{k}" for k in r.missing] + (["error"] if r.errors or r.error else [])
        if r.unmatched:
            bits.append(f"{r.unmatched} final state{'' if r.unmatched == 1 else 's'}")
        return ", ".join(bits) or "same"

    line = f"{status:<7} {rows[0].scenario:<{name_width}} " + " · ".join(f"{r.mode}: {short(r)}" for r in rows)
    if width is not None and len(line) > width:
        line = line[: width - 1] + "…"
    return line


def _print_check(result: Any, lua_path: str, width: int | None) -> None:
    """The check's text report: what was checked, the verdict first, one line per scenario, then the details
    of each failing scenario (what differs, with emqlab's kinds beside yours, and a replay command per kind
    the atomic finish adds); a check of one scenario (``-s``) shows its details whatever its status."""
    by_scenario: dict[str, list[Any]] = {}
    for r in result.rows:
        by_scenario.setdefault(r.scenario, []).append(r)
    failing = {r.scenario for r in result.failing}
    detailed = failing if len(by_scenario) > 1 else set(by_scenario)
    review = {r.scenario for r in result.to_review}
    unused = set(result.unused)
    n = len(by_scenario)
    _say(f"emqlab check · {result.origin} · {n} scenario{'' if n == 1 else 's'}, {len(result.rows)} explorations",
         width, 4)
    _say(f"replaced: {', '.join(result.replaced)}" + (f" · skipped (emqlab never calls them):"
                                                        f" {', '.join(result.skipped)}" if result.skipped else ""),
         width, 4)
    counts = (f"{len(failing)} fail, {len(review)} to review,"
              f" {sum(1 for name, rows in by_scenario.items() if name not in failing | review and _differs(rows))}"
              " differ in split only" + (f", {len(unused)} unused (no run calls your scripts)" if unused else ""))
    _say(f"verdict: {result.verdict} — {result.reason}", width, 4)
    _say(f"scenarios: {counts}, of {len(by_scenario)}", width, 4)
    console.print()
    name_width = max(len(name) for name in by_scenario) if by_scenario else 0
    for rows in by_scenario.values():
        console.print(_scenario_line(rows, width, name_width), markup=False, highlight=False, soft_wrap=True)
    shown = [rows for name, rows in by_scenario.items()
             if name in detailed and any(r.differs or r.missing for r in rows)]
    if shown:
        console.print()
    for rows in shown:
        for r in rows:
            if not (r.differs or r.missing):
                continue
            problems = r.problems() + [f"-{k} (emqlab's finish shows it, yours does not)" for k in r.missing]
            _say(f"{r.scenario} ({r.mode}): {'; '.join(problems)}", width, 4)
            _say(f"    yours: {', '.join(r.yours) or '-'} · emqlab's: {', '.join(r.reference) or '-'}", width, 4)
            if r.mode == "atomic":
                for k in r.extra:
                    words = ["emqlab replay", f"'{r.witnesses[k]}'", "--atomic", f"--scenario {r.scenario}",
                             f"--lua {shlex.quote(lua_path)}"]
                    for line in _command_lines(f"    witness of {k}: ", words, width):
                        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if review:
        console.print()
        _say("warning: the atomic finish leaves final states emqlab's never does in"
             f" {', '.join(sorted(review))}: review them (a protocol variant may mean them; a finish that files"
             " nothing shows up here too)", width, 4)
    if len(shown) < sum(1 for rows in by_scenario.values() if any(r.differs for r in rows)):
        _say(f"the details of a scenario that does not fail: emqlab check --lua {shlex.quote(lua_path)} -s NAME"
             " (or --json for every row)", width, 4)


@click.command()
@click.option("--lua", "lua_path", required=True, type=click.Path(), metavar="PATH",
              help="Your script (a <name>-<numkeys>.lua file) or a folder of them — e.g. a BullMQ release's"
                   " commands/ folder — run in place of emqlab's same-named scripts.")
@click.option("-s", "--scenario", "names", multiple=True, metavar="NAME|FILE",
              help="Check only these scenarios (repeatable; default: every shipped one).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and the verdict as JSON.")
@_wide_option
def check(lua_path: str, names: tuple[str, ...], as_json: bool, wide: bool = False) -> None:
    """Check your own Lua: run it through the scenarios, split and atomic, against the recovery sweep,
    and compare with what emqlab's own scripts show.

    Each scenario runs with your scripts and with emqlab's. The verdict is *fails* when your atomic finish
    shows an anomaly or raises an error emqlab's does not — a finish that replies success and moves nothing
    breaks invariant:finish-files-its-job — *holds* otherwise; final states (placements, locks) emqlab's
    finish never leaves are listed with a warning, for review; split-mode differences are listed, not
    judged; a scenario whose runs never call your scripts is unused. check always exits with its verdict:
    0 holds, 1 fails, 2 a bad path or a script that does not compile, 3 inconclusive (an exploration
    stopped, or no scenario runs your scripts).

    \b
    Examples:
      emqlab check --lua my/moveToFinished-14.lua
      emqlab check --lua lua/variants/no-active-check -s cancel-active
      emqlab check --lua node_modules/bullmq/dist/cjs/commands --json
    """

    from emqlab.check.lua import check_scripts
    from emqlab.engine.scenario import load as load_scenario
    from emqlab.engine.scenario import shipped as shipped_scenarios

    with _errors():
        scripts_ = ScriptSet.emqlab().overlay(lua_path)
        chosen = [load_scenario(n) for n in names] if names else shipped_scenarios()

    def each(name: str, mode: str) -> None:
        if not as_json and err_console.is_terminal:
            err_console.print(f"[dim]checking {name} ({mode}) …[/]", end="\r")

    with _errors():
        result = check_scripts(scripts_, chosen, progress=each)
    if as_json:
        click.echo(_mask(json.dumps(result.to_dict(), indent=1)))
    else:
        _print_check(result, lua_path, _columns(wide))
    sys.exit({"holds": ExitCode.HOLDS, "fails": ExitCode.FAILS}.get(result.verdict, ExitCode.INCONCLUSIVE))


@click.command()
@click.option("--redis", "redis_url", metavar="URL", required=True, callback=_remember_url,
              help="The live server to clean (redis://host:port/db, or 'live').")
@click.option("--dry-run", is_flag=True, help="List what would be deleted, delete nothing.")
def clean(redis_url: str, dry_run: bool) -> None:
    """Delete the keys that runs of emqlab left behind on a live server (a kill -9, a lost machine).

    Every live run registers its queue in one index key (emq:{q-runs}:index) with a lease it renews while it
    runs; clean deletes the emq:{<queue>}:* keys of each indexed run whose lease ran out, and its index entry.
    Runs still alive, and every key that is not a listed run's, are left alone. Anyone who may write the
    index may add a name to it: clean deletes only the runs this machine's emqlab registered (each carries
    a mark made with a secret kept in ~/.local/state/emqlab/run-secret, or $EMQLAB_RUN_SECRET, shared by
    the machines that should clean each other's runs) and reports the other names.

    \b
    Examples:
      emqlab clean --redis redis://127.0.0.1:6379/0 --dry-run
      emqlab clean --redis live
    """
    from rich.markup import escape

    from emqlab.backend.connect import abandoned_runs, connect
    from emqlab.backend.connect import clean as clean_runs

    with _errors():
        conn = connect(redis_url)
        runs = abandoned_runs(conn)
        gone = clean_runs(conn, dry_run=dry_run)
    alive = [r for r in runs if r.alive and r.refused is None]
    verb = "would delete" if dry_run else "deleted"
    for r in gone:
        if r.refused is None:
            console.print(f"{verb} {r.keys} key(s) of run emq:{{{r.queue}}} (its owner is gone)", highlight=False)
    for r in [*(r for r in runs if r.refused is not None), *(r for r in gone if r.refused is not None)]:
        shown = elide_middle(repr(r.queue), 60)  # (a planted name may be a megabyte long)
        console.print(f"left {escape(shown)} in the run index alone: {r.refused}", highlight=False)
    for r in alive:
        until = time.strftime("%H:%M:%S", time.localtime(r.expires_ms / 1000))
        console.print(f"left run emq:{{{r.queue}}} alone ({r.keys} key(s)): its lease holds until {until}",
                      highlight=False)
    if alive:
        _say(Text("a run renews its lease while it runs; one killed or interrupted lets it lapse: run clean again"
                  " after that", style="dim"), DEFAULT_WIDTH)
    if not runs:
        console.print("no runs of emqlab are registered on this server")


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=6390, show_default=True,
              help="The TCP port (0: a free one, printed).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--unix", "unix", type=click.Path(dir_okay=False), default=None, metavar="PATH",
              help="Listen on a Unix socket at PATH (where nothing is yet) instead of TCP.")
def server(port: int, host: str, unix: str | None) -> None:
    """Run the embedded server on a TCP port, for any Redis client in any language: Redis 7's Lua sandbox
    with cjson, cmsgpack and bit, as emqlab's runs use it. It keeps everything in memory, and stops (and
    forgets it) on Ctrl-C or SIGTERM: a server's normal stop, exit status 0.

    \b
    Examples:
      emqlab server                       # redis://127.0.0.1:6390/0
      emqlab server --port 0              # a free port, printed
      emqlab server --unix /tmp/emq.sock  # unix:///tmp/emq.sock?db=0
      redis-cli -p 6390 MONITOR           # watch what a client sends
    """
    import time

    from emqlab.backend.tcp import serve

    with _errors():
        try:
            with serve(host, port, unix=unix) as tcp:
                click.echo(tcp.url, nl=True)
                err_console.print(f"emqlab server on {tcp.url} · Ctrl-C stops it", markup=False, highlight=False)
                while True:  # (short sleeps: a Ctrl-C the kernel hands to a serving thread is taken here
                    time.sleep(0.25)  # within a quarter second, not when a long sleep ends)
        except OSError as e:
            _fail(f"cannot listen on {unix or f'{host}:{port}'}: {e.strerror or e}")
        except KeyboardInterrupt:
            err_console.print("stopped", markup=False, highlight=False)
