"""The home of ``emqlab sweep-rtt``: timed runs of the finish modes over round-trip times (:mod:`emqlab.timing`),
printed as one table, written as CSV and plotted."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from emqlab.text import progress_bar, sig3
from emqlab.timing.model import TimingConfig as _TimingConfig  # (the command's defaults are the model's)
from emqlab.ui.cli.common import SEED, _columns, _errors, _fail, _mask, _remember_url, _say, console, err_console

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


@click.command("sweep-rtt")
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
    from emqlab.timing import ALL_MODES, sweep_rtt

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

        def run(progress: Callable[[int, int], None] | None) -> Any:
            return sweep_rtt(rtts, mode_list, config, conn, progress=progress, processes=n)

        if as_json or not err_console.is_terminal:
            sweep = run(None)
        else:
            with progress_bar(err_console, "timed runs (finishes)") as progress:
                sweep = run(progress)
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


def _print_sweep(sweep: Any) -> None:
    cfg = sweep.config
    # (two lines: one came to 127 columns)
    console.print(f"[bold]emqlab sweep-rtt[/] · {cfg['jobs']} jobs · {cfg['workers']} workers · processing "
                  f"{cfg['processing_ms']:g} ms · {sweep.wall_s:.1f} s")
    console.print(f"stalled interval {cfg['stalled_interval_ms']:g} ms · lock {cfg['lock_ms']:g} ms · jitter "
                  f"{cfg['jitter']:g} · seed {cfg['seed']}")
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1, 0, 0))
    for name in ("mode", "RTT ms", "trips/job", "aborts", "jobs/s", "anom/1k", "model/1k", "hits", "runs", "left"):
        t.add_column(name, justify="left" if name == "mode" else "right", no_wrap=True)
    for r in sweep.results:
        style = "red" if r.anomaly_total else "green"
        t.add_row(r.mode, f"{r.rtt_ms:g}", f"{r.round_trips_per_job:.2f}",
                  f"{r.aborts_per_job:.2f}" if r.mode == "transaction" else "-", sig3(r.jobs_per_s),
                  f"[{style}]{r.anomalies_per_1000:.1f}[/]",
                  f"{r.expected_per_1000:.1f}" if r.mode.startswith("split") else "-", str(r.gap_hits),
                  str(r.executions) + ("*" if r.truncated else ""),
                  f"[red]{r.unfinished_total}[/]" if r.unfinished else "0")
    console.print(t)
    for r in sweep.results:
        if r.anomalies:
            kinds = ", ".join(f"{k} {n}" for k, n in r.anomalies.items())
            console.print(f"  [red]{r.mode} @ {r.rtt_ms:g} ms[/]: {kinds}")
        if r.unfinished:  # (not an anomaly kind: a gave-up finish's job waits in active for its lock to lapse)
            where = ", ".join(f"{k} {n}" for k, n in r.unfinished.items())
            console.print(f"  [red]{r.mode} @ {r.rtt_ms:g} ms[/]: {r.unfinished_total} of {r.jobs} jobs left"
                          f" unfinished ({where})")
    if any(r.truncated for r in sweep.results):
        console.print("  * stopped at the execution cap (5 x jobs): requeued jobs kept coming back")
    _say(Text("trips/job leaves out each worker's first fetch · anom/1k = anomalies per 1,000 jobs (one"
              " job can show several, so it can pass 1,000) · "
              "model/1k = expected from the finish's DEL→SREM window, RTT/(interval + RTT) per marked job · "
              "hits = sweeps that requeued a job while its split finish ran · aborts = EXECs per job"
              " that a watched key's change aborted, each one a new attempt · runs = job executions begun · left ="
              " jobs in neither completed nor failed when the run ended (a finish that gave up leaves its job in"
              " active until its lock lapses)", style="dim"), _columns(False))
