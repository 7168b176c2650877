"""The home of what the commands of ``emqlab`` share: the consoles they print on, passwords masked in every
output, errors turned into one line and an exit code, the width text is fitted to, and the options several
commands take (the finish mode, the scenario and scripts, --expect, --wide)."""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.text import Text

from emqlab.backend.connect import BackendError, BadURL, KeysExist, _redact, url_secrets
from emqlab.backend.faults import FaultRefused
from emqlab.engine.scenario import ANOMALY_KINDS, ScenarioError
from emqlab.explore.checked import ScheduleError
from emqlab.protocol.verdict import ExitCode, Verdict
from emqlab.scripting.registry import ScriptError, ScriptSet
from emqlab.text import DEFAULT_WIDTH, command_lines, line_breaks


class _Console(Console):
    """rich's console, except that a reader who closes the pipe (``emqlab scenarios | head``) ends the
    command with status 0, as :func:`emqlab.ui.entry._run` does for a closed pipe: nothing failed. (rich's
    own answer is status 1, which the exit-code table calls *fails*.) The run's clean-up still runs: the
    exit unwinds like any other."""

    def on_broken_pipe(self) -> None:
        if not self.quiet:
            reader_left()


def reader_left() -> NoReturn:
    """End the command because the reader of its output closed the pipe: status 0 (nothing failed), stdout
    pointed at /dev/null so that the interpreter's last flush has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(0)


console = _Console(highlight=False, soft_wrap=True)
err_console = _Console(stderr=True, highlight=False, soft_wrap=True)

# Exit codes: one home, emqlab.protocol.verdict.ExitCode (docs/cli.md's table is generated from it).
EXIT_ANOMALY = ExitCode.FAILS
EXIT_ERROR = ExitCode.USAGE

#: errors in what the user gave (a scenario, a schedule, a URL, a notebook): exit 2
#: (a fault emqlab refuses on a server it did not start is the scenario's subject, not the server's failure)
USAGE_ERRORS = (ScenarioError, ScheduleError, BadURL, ScriptError, ValueError, FaultRefused)
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
    """--redis's and --executor's callback: note the URL's passwords on the root context, for :func:`_mask`."""
    ctx.find_root().meta.setdefault(_SECRETS_KEY, []).extend(url_secrets(value))
    return value


def _mask(text: str, ctx: click.Context | None = None) -> str:
    """``text`` with every password masked: URLs' (emqlab.backend.connect._redact) and those of the URLs this
    command was given (--redis, $EMQLAB_REDIS_URL), wherever they appear. Every output of the CLI goes through it."""
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
    when stdout is a terminal narrower than :data:`~emqlab.text.DEFAULT_WIDTH`; else that (100)."""
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
    """:func:`emqlab.text.command_lines`: a shell command broken with `` \\`` between its pieces."""
    return command_lines(label, words, width)


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


def _require_kinds(sc: Any, expect: list[str] | None) -> None:
    """A usage error for an ``--expect invariant:NAME`` that scenario ``sc`` does not declare (a typo would
    otherwise read as an expectation not met)."""
    declared = {i.kind for i in getattr(sc, "invariants", ())}
    unknown = [k for k in expect or () if k.startswith("invariant:") and k not in declared]
    if unknown:
        _fail(f"--expect {unknown[0]}: scenario {sc.name} declares "
              + (f"the invariants {', '.join(sorted(declared))}" if declared else "no invariants"))


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
                     type=_KindChoice(["none", *ANOMALY_KINDS]),
                     help="The anomaly kinds the run must find (repeatable), or none; a scenario's own rule"
                          " is invariant:NAME. The exit code says whether that is so: 0 met, 1 not met, 3 not"
                          " settled (sampled).")(g)
    return g


class _KindChoice(click.Choice):
    """An anomaly kind, ``none``, or ``invariant:<name>`` (a scenario's own rule: the scenario says whether
    it declares it)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith("invariant:") and len(value) > len("invariant:"):
            return value
        return super().convert(value, param, ctx)


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
