"""The ``emqlab`` command line: the click group :func:`main` and its commands.

    emqlab simulate --split              explore a split finish racing the recovery sweep
    emqlab simulate --atomic             the same with one EVALSHA per finish: no anomaly
    emqlab replay 'v1:W1*9.S1.W1*8' --split
    emqlab scenarios                     the scenario library
    emqlab scripts                       the Lua scripts, their KEYS count and SHA1

The commands live by group — :mod:`~emqlab.ui.cli.explore` (simulate, replay), :mod:`~emqlab.ui.cli.library`
(scenarios, scripts, check, clean), :mod:`~emqlab.ui.cli.timing` (sweep-rtt), :mod:`~emqlab.ui.cli.teaching`
(grade, student, play) — over what they share (:mod:`~emqlab.ui.cli.common`); this module puts them in one
group. The console script that runs it, its stop signals handled, is :func:`emqlab.ui.entry.entry`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

import click

from emqlab import __version__
from emqlab.protocol.verdict import REPORT_TO, ExitCode

#: Every command: its name, the module of this package that holds it and the function's name there, and the
#: line ``emqlab --help`` shows for it. A command's module is imported only when the command runs or its own
#: help is asked for: ``emqlab --version`` and ``emqlab --help`` load none of them (nor redis-py, fakeredis,
#: lupa or rich).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "simulate": ("explore", "simulate", "Explore a scenario's interleavings and name the anomalies."),
    "replay": ("explore", "replay", "Replay one schedule and print its annotated history."),
    "check": ("library", "check", "Check your own Lua: run it through the scenarios, split and atomic."),
    "scenarios": ("library", "scenarios", "List the scenario library: each race, its anomaly and its source."),
    "scripts": ("library", "scripts", "List the Lua scripts: name, KEYS count and SHA1."),
    "sweep-rtt": ("timing", "sweep_rtt_command", "Timed runs: anomaly rate, round trips and jobs/s by round trip."),
    "clean": ("library", "clean", "Delete the keys that emqlab's runs left behind on a live Redis."),
    "server": ("library", "server", "Run the embedded server on a TCP port, for any Redis client."),
    "grade": ("teaching", "grade", "Grade a classroom assignment notebook (or a folder of them)."),
    "student": ("teaching", "student", "Make the student version of an assignment notebook."),
    "play": ("teaching", "play", "Play a level: you are the scheduler, the goal is a race."),
    "workshop": ("teaching", "workshop", "Write a workshop folder: students' copies, answer key, agenda, handout."),
}


def _debug(ctx: click.Context | None) -> bool:
    while ctx is not None:
        if ctx.params.get("debug"):
            return True
        ctx = ctx.parent
    return os.environ.get("EMQLAB_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS) + sorted(set(self.commands) - set(COMMANDS))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            module, attr, short = COMMANDS[cmd_name]
            command: click.Command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
            command.short_help = short
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # the lines from COMMANDS: listing the commands imports none of them
        rows = [(name, COMMANDS[name][2]) for name in COMMANDS]
        rows += [(name, self.commands[name].get_short_help_str(formatter.width)) for name in self.list_commands(ctx)
                 if name not in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Every command's last line of defence: a known error is one line with its exit code (2 usage,
        4 infrastructure), Ctrl-C exits 130, and anything else is an internal error (exit 5): one line that
        says where to report it — the traceback only with --debug or EMQLAB_DEBUG=1."""
        try:  # (the command's own imports load in super().invoke, inside the handlers below; these first)
            import redis

            from emqlab.backend.connect import BackendError
            from emqlab.ui.cli.common import INFRASTRUCTURE_ERRORS, USAGE_ERRORS, _fail, err_console, reader_left
        except KeyboardInterrupt:  # (a Ctrl-C while they load: nothing has run)
            sys.stderr.write("interrupted\n")
            sys.exit(ExitCode.INTERRUPTED)
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort, SystemExit):
            raise
        except BrokenPipeError:  # (a write outside rich's console: click.echo of --json)
            reader_left()
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

    from emqlab.ui.cli.common import _mask, _one_line, err_console

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


#: the names the module exported when the CLI was one module (emqlab.cli), now loaded on first use
_MOVED = {"EXIT_ANOMALY": "common", "EXIT_ERROR": "common", "EXPECTED_ERRORS": "common",
          "INFRASTRUCTURE_ERRORS": "common", "MAX_DEPTH": "common", "MAX_PREEMPTIONS": "common",
          "MAX_RUNS": "common", "MIN_COLUMNS": "common", "SEED": "common", "SEED_RANGE": "common",
          "USAGE_ERRORS": "common", "console": "common", "err_console": "common",
          **{attr: module for module, attr, _short in COMMANDS.values()}}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = ["COMMANDS", "main", *_MOVED]
