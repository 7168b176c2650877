"""The ``emqlab`` command line.

    emqlab simulate --split              explore a split finish racing the recovery sweep
    emqlab simulate --atomic             the same with one EVALSHA per finish: no anomaly
    emqlab replay 'v1:W1*9.S1.W1*8' --split
    emqlab scenarios                     the scenario library
    emqlab scripts                       the Lua scripts, their KEYS count and SHA1
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from emqlab import __version__
from emqlab.backend.connect import BackendError, BadURL, KeysExist, _redact, url_secrets
from emqlab.engine.history import DEFAULT_WIDTH, line_breaks
from emqlab.engine.scenario import ANOMALY_KINDS, ScenarioError
from emqlab.explore.checked import ScheduleError
from emqlab.protocol.verdict import REPORT_TO, ExitCode, Verdict, judge
from emqlab.scripting.registry import ScriptError, ScriptSet

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

# Exit codes: one home, emqlab.verdict.ExitCode (docs/cli.md's table is generated from it).
EXIT_ANOMALY = ExitCode.FAILS
EXIT_ERROR = ExitCode.USAGE

#: errors in what the user gave (a scenario, a schedule, a URL, a notebook): exit 2
USAGE_ERRORS = (ScenarioError, ScheduleError, BadURL, ScriptError, ValueError)
#: errors of the server or its state: exit 4
INFRASTRUCTURE_ERRORS = (KeysExist, BackendError)
EXPECTED_ERRORS = (*USAGE_ERRORS, *INFRASTRUCTURE_ERRORS)

#: upper bounds of the exploration options (documented in --help and docs/cli.md)
MAX_RUNS = 100_000
MAX_DEPTH = 10
MAX_PREEMPTIONS = 1_000
SEED_RANGE = (-(2**63), 2**63 - 1)


class _Seed(click.ParamType):
    """A seed: any 64-bit signed integer. (Not an IntRange: its range, printed in --help, is two 19-digit
    numbers, which the help's wrapping split in the middle of one.)"""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            try:
                n = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{value!r} is not an integer.", param, ctx)
        if not SEED_RANGE[0] <= n <= SEED_RANGE[1]:
            self.fail(f"{value} is not a 64-bit signed integer (-2**63 to 2**63-1).", param, ctx)
        return n


SEED = _Seed()


_SECRETS_KEY = "emqlab.secrets"


def _remember_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--redis's callback: note the URL's passwords on the root context, for :func:`_mask`."""
    ctx.find_root().meta.setdefault(_SECRETS_KEY, []).extend(url_secrets(value))
    return value


def _mask(text: str, ctx: click.Context | None = None) -> str:
    """``text`` with every password masked: URLs' (backends._redact) and those of the URLs this command was
    given (--redis, $EMQLAB_REDIS_URL), wherever they appear. Every output of the CLI goes through it."""
    known = url_secrets(os.environ.get("EMQLAB_REDIS_URL"))
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is not None:
        known += ctx.find_root().meta.get(_SECRETS_KEY, [])
    return _redact(text, known)


def _fail(msg: str, code: ExitCode = ExitCode.USAGE) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(_one_line(_mask(msg)))}")
    sys.exit(code)


def _finite(value: float | None, option: str) -> float | None:
    """A float option's value, refused when it is NaN (which every range check lets through)."""
    if value is not None and value != value:
        raise click.BadParameter("nan is not a number of seconds", param_hint=option)
    return value


def _one_line(text: str, limit: int = 2000) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


#: the narrowest width output is fitted to (a narrower terminal wraps the lines itself)
MIN_COLUMNS = 40


def _wide_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--wide", is_flag=True,
                        help=f"Print every line whole: witness lines, sentences and notes unwrapped (by default"
                             f" they are fitted to {DEFAULT_WIDTH} columns, or to a narrower terminal).")(f)


def _columns(wide: bool) -> int | None:
    """The width the output is fitted to: ``None`` with --wide (nothing is wrapped); the terminal's width
    when stdout is a terminal narrower than :data:`~emqlab.history.DEFAULT_WIDTH`; else that (100)."""
    if wide:
        return None
    if console.is_terminal:
        return max(MIN_COLUMNS, min(DEFAULT_WIDTH, console.width))
    return DEFAULT_WIDTH


def _fit(text: str | Text, width: int | None, indent: int = 0) -> Text:
    """``text`` wrapped at word boundaries to ``width`` columns (``None``: as it is), its styles kept. Each
    line of it is a paragraph: one that fits stays as it is; a longer one goes on in lines indented
    ``indent`` columns more than its own leading spaces."""
    t = text if isinstance(text, Text) else Text(text)
    if width is None:
        return t
    out = Text()
    for i, para in enumerate(t.split("\n", allow_blank=True)):
        if i:
            out.append("\n")
        plain = para.plain
        if len(plain) <= width:
            out.append_text(para)
            continue
        pad = len(plain) - len(plain.lstrip(" ")) + indent
        for j, (a, b) in enumerate(line_breaks(plain, width, pad)):
            if j:
                out.append("\n" + " " * pad)
            out.append_text(para[a:b])
    return out


def _say(text: str | Text, width: int | None, indent: int = 0) -> None:
    """Print ``text`` fitted to ``width`` (:func:`_fit`); never wrapped again by the console."""
    console.print(_fit(text, width, indent), soft_wrap=True)


def _command_lines(label: str, words: list[str], width: int | None) -> list[str]:
    """``label`` and a shell command (its ``words``: pieces it may be broken between) on one line, or, too
    long for ``width``, broken between them with `` \\`` so that it still pastes into a shell as it is."""
    line = label + " ".join(words)
    if width is None or len(line) <= width or not words:
        return [line]
    lines, cur = [], label + words[0]
    for w in words[1:]:
        if len(cur) + 1 + len(w) + 2 > width:
            lines.append(cur + " \\")
            cur = "    " + w
        else:
            cur += " " + w
    return [*lines, cur]


@contextmanager
def _errors() -> Iterator[None]:
    import redis

    try:
        yield
    except USAGE_ERRORS as e:
        _fail(str(e))
    except INFRASTRUCTURE_ERRORS as e:
        _fail(str(e), ExitCode.INFRASTRUCTURE)
    except redis.exceptions.RedisError as e:
        _fail(f"Redis: {e}", ExitCode.INFRASTRUCTURE)


def _debug(ctx: click.Context | None) -> bool:
    while ctx is not None:
        if ctx.params.get("debug"):
            return True
        ctx = ctx.parent
    return os.environ.get("EMQLAB_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        order = ["simulate", "replay", "check", "scenarios", "scripts", "sweep-rtt", "clean", "grade", "student",
                 "play"]
        return [c for c in order if c in self.commands] + sorted(set(self.commands) - set(order))

    def invoke(self, ctx: click.Context) -> Any:
        """Every command's last line of defence: a known error is one line with its exit code (2 usage,
        4 infrastructure), Ctrl-C exits 130, and anything else is an internal error (exit 5): one line that
        says where to report it — the traceback only with --debug or EMQLAB_DEBUG=1."""
        import redis

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            sys.exit(ExitCode.INTERRUPTED)
        except USAGE_ERRORS as e:
            _fail(str(e))
        except (*INFRASTRUCTURE_ERRORS, redis.exceptions.RedisError) as e:
            _fail(str(e) if isinstance(e, BackendError) else f"Redis: {e}", ExitCode.INFRASTRUCTURE)
        except RecursionError:
            _internal(ctx, "RecursionError: input nested too deeply")
        except Exception as e:  # noqa: BLE001 - the point: no bare traceback
            _internal(ctx, f"{type(e).__name__}: {e}")


def _internal(ctx: click.Context, what: str) -> None:
    from rich.markup import escape

    if _debug(ctx):
        import traceback

        err_console.print(escape(_mask(traceback.format_exc(), ctx)), end="", markup=True, highlight=False)
    err_console.print(f"[bold red]internal error:[/] {escape(_one_line(_mask(what, ctx), 300))} — a bug in emqlab "
                      f"{__version__}; please report it to {escape(REPORT_TO)}"
                      + ("" if _debug(ctx) else "; rerun with --debug (or EMQLAB_DEBUG=1) for the traceback"))
    sys.exit(ExitCode.INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="emqlab")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error (or set EMQLAB_DEBUG=1).")
def main(debug: bool) -> None:
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


main.help = inspect.cleandoc(main.help or "") + "\n\n\b\nExit codes (emqlab.verdict.ExitCode):\n" + "\n".join(
    f"  {c.value:>3}  {c.name.lower()}" for c in ExitCode)


_MODE_GIVEN = "emqlab.mode_given"


def _require_mode(sc: Any, mode: str) -> None:
    """A usage error unless scenario ``sc`` defines ``mode`` (simulate and replay alike: a scenario's modes
    are the ones its expectations are written for)."""
    if mode in sc.modes:
        return
    ctx = click.get_current_context(silent=True)
    if ctx is not None and not ctx.meta.get(_MODE_GIVEN, True):
        _fail(f"scenario {sc.name} has no mode {mode} (the default); give one of its modes: "
              f"{', '.join('--' + m for m in sc.modes)}")
    _fail(f"scenario {sc.name} has no mode {mode}; its modes: {', '.join(sc.modes)}")


def _mode_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The four finish-mode flags; the command receives ``mode``. Two of them at once is a usage error
    (checked on the parsed options, so it holds in-process too: click's CliRunner, a notebook)."""

    @functools.wraps(f)
    def wrapper(*args: Any, split_flag: bool = False, atomic_flag: bool = False, ftf_flag: bool = False,
                tx_flag: bool = False, **kwargs: Any) -> Any:
        given = [name for name, on in (("--split", split_flag), ("--atomic", atomic_flag),
                                       ("--finish-then-fetch", ftf_flag), ("--transaction", tx_flag)) if on]
        if len(given) > 1:
            _fail(f"choose one finish mode, not {' and '.join(given)}")
        kwargs["mode"] = given[0][2:] if given else "split"
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            ctx.meta[_MODE_GIVEN] = bool(given)
        return f(*args, **kwargs)

    g: Callable[..., Any] = wrapper
    g = click.option("--transaction", "tx_flag", is_flag=True,
                     help="Each finish is WATCH, one pipelined read, then MULTI … EXEC, run again when EXEC is"
                          " aborted; then a separate moveToActive.")(g)
    g = click.option("--finish-then-fetch", "ftf_flag", is_flag=True,
                     help="Atomic finish with fetch_next=0, then a separate moveToActive (two round trips).")(g)
    g = click.option("--atomic", "atomic_flag", is_flag=True,
                     help="Each finish is one EVALSHA of moveToFinished-14 (fetch_next=1).")(g)
    g = click.option("--split", "split_flag", is_flag=True,
                     help="Each finish is the same script run client-side, one round trip per redis.call"
                          " (default).")(g)
    return g


@dataclasses.dataclass(frozen=True)
class _Scripts:
    """--scripts and --lua together: the base set and the file or folder of scripts put in its place."""

    base: str = "emqlab"
    lua: str | None = None

    def load(self) -> ScriptSet | None:
        """The script set (``None``: emqlab's default). Raises ScriptError."""
        if self.base == "emqlab" and self.lua is None:
            return None
        s = ScriptSet.bullmq() if self.base == "bullmq" else ScriptSet.emqlab()
        return s.overlay(self.lua) if self.lua is not None else s

    def options(self) -> list[str]:
        """The command-line options that select this set again (for the replay line)."""
        out = ["--scripts", self.base] if self.base != "emqlab" else []
        return out + (["--lua", shlex.quote(self.lua)] if self.lua is not None else [])

    def __str__(self) -> str:
        return self.base if self.lua is None else f"{self.base} + {self.lua}"


def _common_options(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, script_base: str = "emqlab", lua_path: str | None = None, **kwargs: Any) -> Any:
        kwargs["script_set"] = _Scripts(script_base, lua_path)
        return command(*args, **kwargs)

    f: Callable[..., Any] = wrapper
    f = click.option("--lua", "lua_path", type=click.Path(), default=None, metavar="PATH",
                     help="Run this script (a <name>-<numkeys>.lua file) or folder of scripts in place of the"
                          " same-named ones: your own, a lesson's variant (lua/variants/), a BullMQ release's.")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (every count).")(f)
    f = click.option("--scripts", "script_base", type=click.Choice(["emqlab", "bullmq"]), default="emqlab",
                     show_default=True,
                     help="Which script set runs: emqlab's lua/ or BullMQ's shipped scripts (bullmq package).")(f)
    f = click.option("--redis", "redis_url", metavar="URL", default=None, callback=_remember_url,
                     help="Run on a live Redis (redis://host:port/db, or 'live' for $EMQLAB_REDIS_URL /"
                          " 127.0.0.1:6379) instead of fakeredis. Only keys under the run's own queue are"
                          " written, and removed afterwards.")(f)
    f = click.option("--scenario", "-s", "scenario_name", default="stalled-finish", show_default=True,
                     metavar="NAME|FILE", help="A shipped scenario name (see `emqlab scenarios`) or a YAML file.")(f)
    return f


def _check_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--expect KIND (repeatable) / --expect none and --fail-on-anomaly; the command receives ``expect``
    (None, or the expected kinds: [] for none) and ``fail_on_anomaly``."""

    @functools.wraps(f)
    def wrapper(*args: Any, expect_kinds: tuple[str, ...] = (), **kwargs: Any) -> Any:
        if "none" in expect_kinds and len(set(expect_kinds)) > 1:
            _fail("--expect none cannot be combined with --expect KIND")
        kwargs["expect"] = None if not expect_kinds else [k for k in sorted(set(expect_kinds)) if k != "none"]
        return f(*args, **kwargs)

    g: Callable[..., Any] = wrapper
    g = click.option("--fail-on-anomaly", is_flag=True,
                     help="Exit with the verdict's code: 0 holds, 1 fails (an anomaly), 3 inconclusive.")(g)
    g = click.option("--expect", "expect_kinds", multiple=True, metavar="KIND|none",
                     type=click.Choice(["none", *ANOMALY_KINDS]),
                     help="The anomaly kinds the run must find (repeatable), or none; the exit code says "
                          "whether that is so: 0 met, 1 not met, 3 not settled (sampled).")(g)
    return g


def _finish_check(v: Verdict, expect: list[str] | None, fail_on_anomaly: bool, as_json: bool,
                  width: int | None = DEFAULT_WIDTH) -> None:
    """Print the verdict (text mode, fitted to ``width``) and exit with its code."""
    if not as_json:
        style = {"holds": "bold green", "fails": "bold red", "inconclusive": "bold yellow"}[v.kind]
        console.print()
        _say(Text.assemble((f"verdict: {v.kind}", style), f" — {v.reason}"), width, 4)
        if expect is not None:
            met = v.expectation_met
            style = "bold green" if met else ("bold red" if met is False else "bold yellow")
            head, _, rest = v.expectation_line().partition(": ")
            _say(Text.assemble((head, style), f": {rest}"), width, 4)
    code = v.exit_code(check=fail_on_anomaly)
    if code != ExitCode.HOLDS:
        sys.exit(code)


def _load(scenario_name: str, redis_url: str | None, script_set: _Scripts) -> tuple[Any, Any, Any]:
    from emqlab.backend.connect import connect
    from emqlab.engine.scenario import load

    sc = load(scenario_name)
    conn = connect(redis_url)
    scripts = script_set.load()
    return sc, conn, scripts


@main.command()
@_mode_options
@_common_options
@click.option("--strategy", type=click.Choice(["exhaustive", "random", "pct"]), default="exhaustive",
              show_default=True, help="How to choose interleavings.")
@click.option("--runs", type=click.IntRange(1, MAX_RUNS), default=200, show_default=True,
              help="Runs for the random and pct strategies.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed for random and pct: a 64-bit signed integer (the runs use it and the seeds after it).")
@click.option("--depth", type=click.IntRange(1, MAX_DEPTH), default=2, show_default=True,
              help="PCT bug depth (number of priority-change points + 1).")
@click.option("--preemptions", type=click.IntRange(0, MAX_PREEMPTIONS), default=None,
              help="Exhaustive: explore only schedules with at most K preemptions.")
@click.option("--no-reduce", is_flag=True, help="Exhaustive: run every interleaving (no partial-order reduction).")
@click.option("--jobs", "-j", "--processes", "-p", "jobs", type=click.IntRange(1, 4096), default=None,
              help="Processes that explore: this one and N-1 workers (default: the number of cores). "
                   "The report is the same for any number. --processes is the same option, as in "
                   "sweep-rtt, whose --jobs counts the queue's jobs.")
@click.option("--executor", metavar="URL", default=None,
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
        from emqlab.explore.divide import SWARM_CHUNK

        last = seed + math.ceil(runs / SWARM_CHUNK) - 1  # chunk i is replayed with --seed seed+i: one
        if last > SEED_RANGE[1]:
            chunks = last - seed + 1
            _fail(f"--runs {runs} takes {chunks} seeds from --seed on (one per {SWARM_CHUNK} runs): the largest"
                  f" --seed for it is {SEED_RANGE[1] - chunks + 1}")
    with _errors():
        sc, conn, scripts = _load(scenario_name, redis_url, script_set)
        _require_mode(sc, mode)
        from emqlab.explore import run as explore_run
        from emqlab.explore.divide import progress_bar
        from emqlab.explore.pool import default_jobs

        def run(progress: Callable[[int, int | None], None] | None) -> Any:
            return explore_run.explore(sc, mode, strategy=strategy, conn=conn, url=redis_url, runs=runs, seed=seed,
                                       depth=depth, preemptions=preemptions, reduce=not no_reduce, scripts=scripts,
                                       jobs=jobs if jobs is not None else default_jobs(), executor=executor,
                                       max_seconds=max_seconds, progress=progress)

        if as_json or not err_console.is_terminal:
            rep = run(None)
        else:
            with progress_bar(err_console) as progress:
                rep = run(progress)
    v = judge(rep, expect)
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
    if rep.strategy == "exhaustive" and rep.reduction != "off":
        ran = "runs executed (one per trace)"
    elif rep.strategy in ("exhaustive", "replay"):
        ran = "runs executed"
    else:
        ran = f"runs ({rep.strategy} samples, may repeat)"
    t.add_row(ran + ("" if rep.complete else " (stopped early)"), f"{rep.explored:,}")
    if rep.pruned:
        t.add_row("runs cut short (sleep sets)", f"{rep.pruned:,}")
    if rep.aborted:
        t.add_row("runs aborted (server errors)", f"{rep.aborted_runs:,}")
    if rep.outside_bound:
        t.add_row("traces beyond the bound", f"{rep.outside_bound:,}")
    t.add_row("distinct final states", str(rep.distinct_outcomes))
    t.add_row("runs per second", f"{rep.runs_per_second:.0f}")
    console.print(t, width=width)
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
            a.add_row(f"[red]{kind}[/]", f"{n:,}", f"{rep.share(kind):.1%}", str(rep.min_preemptions[kind]))
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
        found = [x for x in h.anomalies if x["kind"] == kind]
        marks: dict[int, str] = {}
        for x in found:
            for s in x["steps"]:
                marks.setdefault(s, kind)
        console.print()
        _say(Text.assemble(("witness", "bold"), " for ", (kind, "red"), f" ({len(h.steps)} steps, "
                           f"{rep.min_preemptions[kind]} preemption(s)):"), width, 2)
        console.print(Text(h.annotated(marks=marks, width=width)), soft_wrap=True)
        for x in found:
            _say(Text.assemble(("why:", "bold"), f" {x['because']}"), width, 5)
        cmd = _command_lines("replay: ", _replay_cmd(h.schedule, scenario_name, mode, redis_url, script_set),
                             width)
        console.print(Text.assemble(("replay:", "bold"), "\n".join(cmd)[len("replay:"):]), soft_wrap=True)
    if sc.lesson:
        console.print()
        _say(Text(f"lesson: {sc.lesson}", style="dim"), width, 8)


@main.command()
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
    is done, the run continues without further preemption.

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
            h = r.run(parse_schedule(schedule, [a.id for a in sc.actors]))
    v = judge(rep, expect)
    if as_json:
        d = json.loads(h.to_json())
        d["verdict"] = v.kind
        d["verdict_detail"] = v.to_dict(check=fail_on_anomaly)
        click.echo(_mask(json.dumps(d, indent=1, default=str)))
        _finish_check(v, expect, fail_on_anomaly, as_json)
        return
    width = _columns(wide)
    kinds_at: dict[int, list[str]] = {}  # a step two anomalies name is marked with both
    for a in h.anomalies:
        for s in a["steps"]:
            if a["kind"] not in kinds_at.setdefault(s, []):
                kinds_at[s].append(a["kind"])
    marks = {s: ", ".join(kinds) for s, kinds in kinds_at.items()}
    console.print(Text(h.annotated(marks=marks, width=width)), soft_wrap=True)
    if not h.anomalies:
        console.print("[bold green]no anomaly[/]")
    for a in h.anomalies:
        _say(Text.assemble((a["kind"], "red"), f": {a['because']}"), width, 4)
    _finish_check(v, expect, fail_on_anomaly, as_json, width)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the library as JSON.")
@click.option("--check", is_flag=True,
              help="Explore every scenario in every mode and compare with its expected outcome.")
@click.option("--jobs", "-j", "--processes", "-p", "jobs", type=click.IntRange(1, 4096), default=None,
              help="--check: processes that explore, one case each at a time (default: the number of cores).")
def scenarios(as_json: bool, check: bool, jobs: int | None) -> None:
    """List the scenario library: name, the anomaly it shows, its lesson and source.

    Run one with `emqlab simulate --scenario NAME`. With --check, every scenario is explored exhaustively in
    each of its modes and the anomalies found are compared with the file's `expect:` section.

    \b
    Examples:
      emqlab scenarios
      emqlab scenarios --json
      emqlab scenarios --check     # every scenario, every mode, on every core
    """
    from emqlab.engine.scenario import shipped

    with _errors():
        lib = shipped()
    if check:
        _check_scenarios(lib, jobs)
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


def _check_scenarios(lib: Any, jobs: int | None) -> None:
    from emqlab.explore.pool import make_executor
    from emqlab.explore.run import check_case

    cases = [(s, mode) for s in lib for mode in s.modes]
    pool, close = make_executor(jobs, live=False)
    try:  # each case explored whole in one worker; printed in library order as they come
        futures = [pool.submit(check_case, s, mode) for s, mode in cases]
        bad = 0
        for (s, mode), fut in zip(cases, futures, strict=True):
            got, seen_codes = fut.result()
            exp = s.expect.get(mode)
            ok = exp is None or sorted(exp.anomalies) == got
            missing_codes = []
            if exp is not None:
                for actor, codes in exp.codes.items():
                    seen = seen_codes.get(actor, set())
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
    finally:
        close()
    sys.exit(ExitCode.FAILS if bad else ExitCode.HOLDS)


@main.command()
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



@main.command()
@click.option("--lua", "lua_path", required=True, type=click.Path(), metavar="PATH",
              help="Your script (a <name>-<numkeys>.lua file) or a folder of them — e.g. a BullMQ release's"
                   " commands/ folder — run in place of emqlab's same-named scripts.")
@click.option("-s", "--scenario", "names", multiple=True, metavar="NAME|FILE",
              help="Check only these scenarios (repeatable; default: every shipped one).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and the verdict as JSON.")
def check(lua_path: str, names: tuple[str, ...], as_json: bool) -> None:
    """Check your own Lua: run it through the scenarios, split and atomic, against the recovery sweep,
    and compare with what emqlab's own scripts show.

    Each scenario runs with your scripts and with emqlab's. The verdict is *fails* when your atomic finish
    shows an anomaly or raises an error emqlab's does not, *holds* otherwise; final states (placements,
    locks) emqlab's finish never leaves are listed with a warning, for review; split-mode differences are
    listed, not judged. check always exits with its verdict: 0 holds, 1 fails, 2 a bad path or a script
    that does not compile.

    \b
    Examples:
      emqlab check --lua my/moveToFinished-14.lua
      emqlab check --lua lua/variants/no-active-check -s cancel-active
      emqlab check --lua node_modules/bullmq/dist/cjs/commands --json
    """
    from rich.markup import escape

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
        console.print(f"[bold]emqlab check[/] · {escape(result.origin)} · {len(result.rows)} explorations")
        console.print(f"replaced: {', '.join(result.replaced)}"
                      + (f" · skipped (emqlab never calls them): {', '.join(result.skipped)}" if result.skipped
                         else ""), highlight=False)
        for r in result.rows:
            mark = "[red]differs[/]" if r.differs else "same   "
            console.print(f"{mark} {r.scenario:<22} {r.mode:<7} yours: {', '.join(r.yours) or '-'} · emqlab's: "
                          f"{', '.join(r.reference) or '-'}", highlight=False)
            for problem in r.problems():
                console.print(f"          {escape(problem)}", highlight=False)
        for r in result.failing:
            for k in r.extra:
                console.print(f"witness: {r.scenario} atomic {k}: emqlab replay '{r.witnesses[k]}' --atomic "
                              f"--scenario {r.scenario} --lua {lua_path}", highlight=False, soft_wrap=True)
        if result.to_review:
            review = ", ".join(r.scenario for r in result.to_review)
            console.print(f"[yellow]warning:[/] the atomic finish leaves final states emqlab's never does in {review}:"
                          " review them above (a protocol variant may mean them; a finish that files nothing"
                          " shows up here too)", highlight=False)
        console.print(f"verdict: {result.verdict} — {escape(result.reason)}")
    sys.exit({"holds": ExitCode.HOLDS, "fails": ExitCode.FAILS}.get(result.verdict, ExitCode.INCONCLUSIVE))


@main.command()
@click.option("--redis", "redis_url", metavar="URL", required=True, callback=_remember_url,
              help="The live server to clean (redis://host:port/db, or 'live').")
@click.option("--dry-run", is_flag=True, help="List what would be deleted, delete nothing.")
def clean(redis_url: str, dry_run: bool) -> None:
    """Delete the keys that runs of emqlab left behind on a live server (a kill -9, a lost machine).

    Every live run registers its queue in one index key (emq:{q-runs}:index) with a lease it renews while it
    runs; clean deletes the emq:{<queue>}:* keys of each indexed run whose lease ran out, and its index entry.
    Runs still alive, and every key that is not a listed run's, are left alone.

    \b
    Examples:
      emqlab clean --redis redis://127.0.0.1:6379/0 --dry-run
      emqlab clean --redis live
    """
    from emqlab.backend.connect import abandoned_runs, connect
    from emqlab.backend.connect import clean as clean_runs

    with _errors():
        conn = connect(redis_url)
        runs = abandoned_runs(conn)
        gone = clean_runs(conn, dry_run=dry_run)
    alive = [r for r in runs if r.alive]
    verb = "would delete" if dry_run else "deleted"
    for r in gone:
        console.print(f"{verb} {r.keys} key(s) of run emq:{{{r.queue}}} (its owner is gone)", highlight=False)
    for r in alive:
        until = time.strftime("%H:%M:%S", time.localtime(r.expires_ms / 1000))
        console.print(f"left run emq:{{{r.queue}}} alone ({r.keys} key(s)): its lease holds until {until}",
                      highlight=False)
    if alive:
        _say(Text("a run renews its lease while it runs; one killed or interrupted lets it lapse: run clean again"
                  " after that", style="dim"), DEFAULT_WIDTH)
    if not runs:
        console.print("no runs of emqlab are registered on this server")


# -- sweep-rtt (timed runs: emqlab.timing) ----------------------------------------------------------------------

from emqlab.timing.model import TimingConfig as _TimingConfig  # noqa: E402  (the command's defaults are the model's)

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
@click.option("--modes", default="atomic,finish-then-fetch,transaction,split", show_default=True, metavar="M1,M2",
              help="Finish modes: atomic, finish-then-fetch, transaction, split, split-then-fetch.")
@click.option("--rtt", "rtt_text", default="0.05,1,75", show_default=True, metavar="MS,MS",
              help="Round-trip times in ms (presets: 0.03 Unix socket, 0.05 loopback, 0.2 LAN, 1 cross-AZ,"
                   " 75 cross-region, 250 slow link).")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=_TIMING_DEFAULTS.jobs, show_default=True,
              help="Jobs per run: the queue's jobs (the processes are --processes).")
@click.option("--workers", type=click.IntRange(1, 10_000), default=_TIMING_DEFAULTS.workers, show_default=True,
              help="Workers per run.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed for the RTT and processing-time draws: any 64-bit signed integer.")
@click.option("--processing", "processing_ms", type=click.FloatRange(0, 3_600_000),
              default=_TIMING_DEFAULTS.processing_ms, show_default=True,
              help="Mean processing time per job (virtual ms).")
@click.option("--interval", "interval_ms", type=click.FloatRange(0, 3_600_000, min_open=True),
              default=_TIMING_DEFAULTS.stalled_interval_ms, show_default=True,
              help="The sweep's stalled interval (virtual ms; BullMQ's 30 s compressed 1000x).")
@click.option("--jitter", type=click.FloatRange(0, 5), default=_TIMING_DEFAULTS.jitter, show_default=True,
              help="Lognormal sigma of each round trip (0 = every RTT exactly --rtt).")
@click.option("--lock", "lock_ms", type=click.FloatRange(0, 3_600_000, min_open=True),
              default=_TIMING_DEFAULTS.lock_ms,
              show_default=True, help="Lock duration (virtual ms); renewed every half of it while a job is processed.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write the plots (anomaly rate, round trips per job, jobs/s vs RTT) to a .png or .svg.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None, help="Write the rows as CSV.")
@click.option("--redis", "redis_url", metavar="URL", default=None, callback=_remember_url,
              help="Run on a live Redis instead of fakeredis (only the runs' own queues are written).")
@click.option("--json", "as_json", is_flag=True, help="Print every result as JSON.")
@click.option("--processes", "-p", type=click.IntRange(1, 4096), default=None,
              help="Runs of the grid at once, one per process (default: the number of cores). The results "
                   "are the same for any number.")
def sweep_rtt_command(modes: str, rtt_text: str, jobs: int, workers: int, seed: int, processing_ms: float,
                      interval_ms: float, jitter: float, lock_ms: float, out_path: str | None,
                      csv_path: str | None, redis_url: str | None, as_json: bool, processes: int | None) -> None:
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
    from emqlab.timing.model import ALL_MODES, sweep_rtt

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
        from emqlab.backend.connect import connect

        conn = connect(redis_url)
        config = _TimingConfig(jobs=jobs, workers=workers, seed=seed, processing_ms=processing_ms,
                              stalled_interval_ms=interval_ms, jitter=jitter, lock_ms=lock_ms)
        from emqlab.explore.pool import default_jobs

        n = processes if processes is not None else min(default_jobs(), len(rtts) * len(mode_list))
        sweep = _with_timed_progress(lambda progress: sweep_rtt(rtts, mode_list, config, conn, progress=progress,
                                                                processes=n),
                                     quiet=as_json)
    if csv_path:
        import csv

        rows = sweep.rows()
        with open(csv_path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if out_path:
        from emqlab.ui.plots import plot_sweep, save

        save(plot_sweep(sweep), out_path)
    if as_json:
        click.echo(_mask(json.dumps(sweep.to_dict(), indent=2)))
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
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1, 0, 0))
    for name in ("mode", "RTT ms", "trips/job", "aborts", "jobs/s", "anom/1k", "model/1k", "hits", "runs"):
        t.add_column(name, justify="left" if name == "mode" else "right", no_wrap=True)
    for r in sweep.results:
        style = "red" if r.anomaly_total else "green"
        t.add_row(r.mode, f"{r.rtt_ms:g}", f"{r.round_trips_per_job:.2f}",
                  f"{r.aborts_per_job:.2f}" if r.mode == "transaction" else "-", _sig3(r.jobs_per_s),
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
                  "hits = sweeps that requeued a job while its split finish ran · aborts = EXECs per job"
                  " that a watched key's change aborted, each one a new attempt · runs = job executions[/]",
                  soft_wrap=False)


def _sig3(x: float) -> str:
    if x == 0:
        return "0"
    import math

    return f"{x:,.{max(0, 2 - int(math.floor(math.log10(abs(x)))))}f}"


@main.command()
@click.argument("notebook", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True,
              help="Print the grade as JSON: every graded cell, its points and feedback.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write one CSV row per notebook to this file ('-' for stdout; the default for a folder).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=120, show_default=True,
              help="Seconds a notebook may run before it is stopped.")
@click.option("--memory-mb", type=click.IntRange(min=256), default=1536, show_default=True,
              help="Address space a notebook may use.")
@_wide_option
def grade(notebook: str, as_json: bool, csv_path: str | None, timeout_s: float, memory_mb: int,
          wide: bool = False) -> None:
    """Grade a classroom assignment notebook, or every notebook in a folder, without nbgrader.

    The notebook's code runs in a separate, limited process (time, memory, no network, no processes, its own
    temporary folder); only its answers come back, as plain data, and every score is computed here:
    replays, exhaustive explorations and seeded timed runs, so the same notebook always gets the same
    grade. Test cells never run, and locked cells run as released. A cell scores all its points or none,
    with feedback that says what is wrong and where to look.

    NOTEBOOK may be a folder: every *.ipynb below it is graded and written as CSV, one row per notebook
    (student = the first folder below NOTEBOOK).

    \b
    Exit status: 0 full marks (every notebook), 1 below full marks (a grade was given), 2 cannot grade
    (not a notebook, not an assignment).

    \b
    Examples:
      emqlab grade notebooks/assignments/a1-double-placement.ipynb
      emqlab grade submitted/ada/a2-repair-finish.ipynb --json
      emqlab grade submitted/ --csv grades.csv
    """
    from emqlab.teaching.grading import EXIT_CANNOT_GRADE, GradingError, feedback_width, grade_notebook
    from emqlab.teaching.sandbox import Limits

    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    if os.path.isdir(notebook):
        _grade_folder(notebook, csv_path or "-", limits)
        return
    width = _columns(wide)
    try:
        with feedback_width(width):
            report = grade_notebook(notebook, limits=limits)
    except GradingError as e:
        _fail(str(e), ExitCode(EXIT_CANNOT_GRADE))
    if csv_path is not None:
        from emqlab.teaching.classroom import Row, write_csv

        row = Row(os.path.splitext(os.path.basename(notebook))[0], notebook, report.assignment, report.score,
                  report.max_score, cells={c.grade_id: c.points for c in report.cells})
        with click.open_file(csv_path, "w") as f:
            write_csv([row], f)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        sys.exit(report.exit_code)
    _print_grade(report, notebook, width)
    sys.exit(report.exit_code)


def _print_grade(report: Any, notebook: str, width: int | None) -> None:
    """A grade report as `emqlab grade` prints it, fitted to ``width``: each cell's line, then its feedback
    indented under it (its sentences wrapped there, a witness in it as the grader rendered it)."""
    from emqlab.teaching.grading import FEEDBACK_INDENT, feedback_block

    _say(Text.assemble(("emqlab grade", "bold"), f" · {report.title} (", (report.assignment, "cyan"),
                       f") · {notebook}"), width, 4)
    for c in report.cells:
        mark = Text("ok", style="green") if c.passed else Text("--", style="red")
        _say(Text.assemble("  ", mark, " ", (c.grade_id, "bold"), f" {c.points:g}/{c.max_points:g}  ",
                           (c.what, "dim")), width, 4)
        _say(feedback_block(c.feedback, FEEDBACK_INDENT), width)
    for err in report.errors:
        if not err.stubbed:
            _say(f"  code cell {err.cell} ({err.grade_id or 'no grade_id'}) raised {err.error}", width, 4)
    for note in report.notes:
        _say(f"  note: {note}", width, 6)
    style = "green" if report.score == report.max_score else ("red" if report.score == 0 else "yellow")
    console.print(f"[bold {style}]score {report.score:g}/{report.max_score:g}[/]  "
                  f"[dim]({report.elapsed_s:.1f} s)[/]")


def _grade_folder(folder: str, csv_path: str, limits: Any) -> None:
    from emqlab.teaching.classroom import exit_code, grade_folder, write_csv

    def progress(row: Any) -> None:
        score = f"{row.score:g}/{row.max_score:g}" if row.status == "graded" else row.status
        err_console.print(f"  {row.student:<16} {row.notebook:<44} {score}", markup=False, highlight=False)

    rows = grade_folder(folder, limits=limits, progress=progress)
    if not rows:
        err_console.print(f"[bold red]error:[/] no notebooks (*.ipynb) under {folder}")
    with click.open_file(csv_path, "w") as f:
        write_csv(rows, f)
    sys.exit(exit_code(rows))


@main.command()
@click.argument("level", required=False)
@click.option("--list", "list_levels", is_flag=True, help="List the levels and exit.")
def play(level: str | None, list_levels: bool) -> None:
    """Play a level: you are the scheduler, the goal is a race.

    Each level is a scenario, a mode and a goal ("make job 1 land in two places"). Type the number (or id) of
    an actor to let it take one step; f finishes the run in order, u undoes your last step, r restarts,
    s lets the explorer try every interleaving, h gives a hint, q quits. A win prints the schedule string
    to replay it. Level 9 cannot be won by stepping: the finish is atomic.

    \b
    Exit status: 0 the level was won, 1 it was not (quit), 2 no such level.

    \b
    Examples:
      emqlab play --list
      emqlab play two-places
      emqlab play 9
    """
    from emqlab.teaching.levels import LevelError, load_level, shipped_levels
    from emqlab.teaching.levels import play as play_level

    if list_levels or level is None:
        for lv in shipped_levels():
            console.print(f"  {lv.number:>2}  {lv.name:<20} {lv.tagline}", markup=False, highlight=False)
        if level is None and not list_levels:
            console.print("play one: emqlab play NAME (or its number)", markup=False, highlight=False)
        return
    try:
        chosen = load_level(level)
    except LevelError as e:
        _fail(str(e))
        return

    def read(prompt: str) -> str:
        return input(prompt)

    def write(text: str) -> None:
        click.echo(text)

    sys.exit(ExitCode.HOLDS if play_level(chosen, read, write) else ExitCode.FAILS)


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("out", type=click.Path())
@click.option("--otter", is_flag=True,
              help="write otter-grader's layout instead: OUT/<notebook>.ipynb with grader.check cells and "
                   "OUT/tests/<grade_id>.py (SOURCE: an assignment notebook)")
def student(source: str, out: str, otter: bool) -> None:
    """Make the student version of an assignment notebook (or of every notebook in a directory).

    Does what `nbgrader generate_assignment` does to a source notebook: each `### BEGIN SOLUTION` …
    `### END SOLUTION` region becomes `# YOUR CODE HERE` + `raise NotImplementedError()`, hidden tests
    (`### BEGIN HIDDEN TESTS` … `### END HIDDEN TESTS`) are removed, outputs are cleared, and graded and
    read-only cells are made undeletable. OUT is a notebook path, or a directory when SOURCE is one.

    With --otter, the assignment is exported for otter-grader: each nbgrader test cell becomes a
    `grader.check("<grade_id>")` cell and each graded cell an OK-format test in OUT/tests/ whose doctest
    runs emqlab's own grader (docs/instructors.md).

    \b
    Examples:
      emqlab student notebooks/assignments/a1-double-placement.ipynb release/
      emqlab student notebooks/assignments release/
      emqlab student --otter notebooks/assignments/a1-double-placement.ipynb otter/a1/
    """
    from emqlab.teaching.grading import make_student_versions

    with _errors():
        if otter:
            from pathlib import Path

            from emqlab.teaching.grading import assignment_of, read_notebook
            from emqlab.teaching.otter import export

            aid = assignment_of(read_notebook(source))
            if aid is None:
                raise click.UsageError(f"{source}: not an emqlab assignment notebook (no metadata.emqlab.assignment)")
            written = export(aid, out, Path(source).parent)
        else:
            written = make_student_versions(source, out)
    for p in written:
        console.print(f"wrote {p}", highlight=False)


#: stop signals received so far (Ctrl-C, SIGTERM, SIGHUP)
_stops = 0
#: the first stop signal (it decides the exit status and what is said)
_stop_signal: int | None = None


def _terminate(signum: int, _frame: object) -> None:
    """The first stop signal stops the command: Ctrl-C as KeyboardInterrupt, SIGTERM (a CI timeout, `kill`)
    and SIGHUP (a closed terminal) as SystemExit(128 + signal), which unwind through the runners' context
    managers, so a live run deletes its keys on each. The second is ignored: the terminal signals the whole
    process group, users press Ctrl-C twice, and the clean-up the first started must finish. The third
    exits at once, cleaning nothing (what a live run left, `emqlab clean` deletes once its lease ends)."""
    global _stops, _stop_signal
    _stops += 1
    if _stops == 1:
        _stop_signal = signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)
    if _stops >= 3:
        os.write(2, b"stopped at once, without cleaning up (on a live server, `emqlab clean --redis URL` deletes"
                    b" what the run left)\n")
        os._exit(128 + signum)


def entry() -> None:
    """The console script: :func:`main` with Ctrl-C, SIGTERM and SIGHUP each stopping it cleanly once
    (:func:`_terminate`) and a closed pipe (``emqlab scenarios | head``) ending quietly."""
    from emqlab.ui.entry import handle_stops, ignore_stops

    handle_stops(_terminate)
    try:
        main()
    except SystemExit:
        if _stops:  # a stop signal ends it, the clean-up done: a later one must not kill it on the way out
            ignore_stops()
            if _stop_signal is not None and _stop_signal != signal.SIGINT:  # SIGTERM, SIGHUP
                try:  # (Ctrl-C's "interrupted" is said where the KeyboardInterrupt is caught)
                    err_console.print(f"[bold red]stopped by {signal.Signals(_stop_signal).name}[/]")
                except OSError:  # (SIGHUP: the terminal may be gone)
                    pass
        raise
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    entry()
