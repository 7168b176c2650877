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

import inspect
import os
import sys
from typing import Any

import click

from emqlab import __version__
from emqlab.backend.connect import BackendError
from emqlab.protocol.verdict import REPORT_TO, ExitCode
from emqlab.ui.cli.common import (
    EXIT_ANOMALY,
    EXIT_ERROR,
    EXPECTED_ERRORS,
    INFRASTRUCTURE_ERRORS,
    MAX_DEPTH,
    MAX_PREEMPTIONS,
    MAX_RUNS,
    MIN_COLUMNS,
    SEED,
    SEED_RANGE,
    USAGE_ERRORS,
    _fail,
    _mask,
    _one_line,
    console,
    err_console,
    reader_left,
)
from emqlab.ui.cli.explore import replay, simulate
from emqlab.ui.cli.library import check, clean, scenarios, scripts
from emqlab.ui.cli.teaching import grade, play, student
from emqlab.ui.cli.timing import sweep_rtt_command


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

for _command in (simulate, replay, check, scenarios, scripts, sweep_rtt_command, clean, grade, student, play):
    main.add_command(_command)


# the module's public names as they were when the CLI was one module (emqlab.cli)
__all__ = ["EXIT_ANOMALY", "EXIT_ERROR", "EXPECTED_ERRORS", "INFRASTRUCTURE_ERRORS", "MAX_DEPTH", "MAX_PREEMPTIONS",
           "MAX_RUNS", "MIN_COLUMNS", "SEED", "SEED_RANGE", "USAGE_ERRORS", "check", "clean", "console", "err_console",
           "grade", "main", "play", "replay", "scenarios", "scripts", "simulate", "student", "sweep_rtt_command"]
