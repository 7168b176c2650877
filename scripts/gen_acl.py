#!/usr/bin/env python
"""Regenerate ``emqlab/scripting/acl.json``, the commands a restricted Redis user needs for emqlab: every command
emqlab sends a live server, named as Redis's ACL names it (``NAME`` or ``CONTAINER|SUBCOMMAND``), recorded
by the server while emqlab runs, not read off emqlab's source.

Usage::

    python scripts/gen_acl.py [--output PATH | --check]

The script starts a ``redis-server`` of its own on a free local port (nothing on disk; the binary must be on
PATH) and runs the *workload* (:func:`workload`) on it as the default user, one item at a time:

* every shipped scenario in every mode it lists, explored exhaustively (:func:`emqlab.explore.explore` on a
  live connection), except a scenario whose fault actors only fakeredis can play (a server restart, SCRIPT
  FLUSH: refused on a live server before any command is sent) and one whose actors run another project's
  released code that sends a ``@dangerous`` command (:func:`dangerous_needs`: dramatiq's scenarios, whose
  dispatch.lua sends KEYS; they run as a user that may send it, not under this table);
* a timed run in every timed mode (:func:`emqlab.timing.simulate`);
* the command line: ``emqlab simulate --split --redis URL`` (its exploration divided over worker
  processes), ``emqlab replay … --redis URL``, ``emqlab clean --redis URL --dry-run`` and ``emqlab clean``;
* the script paths a scenario file of one's own may take and no shipped scenario does (:data:`EXTRA`: a
  keepJobs count above 0, whose finish drops the oldest jobs with ZREVRANGE and ZREMRANGEBYRANK).

No run of emqlab's reaches LTRIM (the metrics' data points a minute apart: no run's virtual time spans a
minute), PTTL or HEXISTS (the rate limiter, which only the Python API sets: ``move_to_active(…,
limiter=…)``, ``FinishOpts(limiter=…)``): a Python actor of one's own that does needs them added.

Before each item it resets the server's statistics (``CONFIG RESETSTAT``) and after it reads ``INFO
commandstats`` (:func:`record`): the server counts every command it ran — those a Lua script calls and those
queued in MULTI … EXEC included — and those it refused before running (``rejected_calls``). Left out: the
recorder's own ``CONFIG RESETSTAT``, and the commands Redis checks no ACL rule for (flag ``no_auth`` in
``emqlab/protocol/commands.json``: AUTH, HELLO). A command of the ACL category ``@dangerous`` (INFO, KEYS,
FLUSHDB, CONFIG, …) stops the script with an error: emqlab must never need one on a server it does not own.

File shape (plain JSON, one command per line)::

    {"header": {"format": 1, "redis_version": "7.0.15", "source": "INFO commandstats",
                "regenerate": "python scripts/gen_acl.py"},
     "commands": {
       "DEL": "abandoned-after-success atomic",     # the first item of the workload that sent it
       "SCRIPT|EXISTS": "abandoned-after-success atomic",
       ...}}

``tests/test_acl.py`` runs the workload again under a user created with exactly these commands and checks
that the server ran exactly these, refusing none.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

FORMAT = 1
REGENERATE = "python scripts/gen_acl.py"
ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "emqlab" / "scripting" / "acl.json"
#: the recorder's own commands (reset between two items), never emqlab's
RECORDER = frozenset({"config|resetstat"})
#: what the timed runs and the command line do (small: what matters is which commands they send)
TIMED = {"jobs": 6, "workers": 2, "rtt_ms": 1.0}
CLI = (("simulate", "--split"), ("replay", "v1:W1*9.S1.W1*8", "--split"), ("clean", "--dry-run"), ("clean",))
#: scenarios of the workload's own, for script paths no shipped scenario takes: (YAML, modes)
EXTRA = (("""
name: acl-keep-jobs-count
title: keepJobs with a count above 0
lesson: W1 files job 1 as completed with keepJobs count 1; job 2 is completed already, so the finish drops it.
jobs:
  "1": {name: a}
  "2": {name: b}
state:
  active: ["1"]
  completed: ["2"]
  locks: {"1": W1}
actors:
  - {id: W1, kind: worker, holds: "1", finish: completed, keep_jobs: {count: 1}}
  - {id: S1, kind: sweep, max_stalled: 1}
""", ("atomic", "split")),)


@dataclass(frozen=True)
class Item:
    """One item of the workload: an exploration of ``scenario`` in ``mode`` (``options``: those of
    :func:`emqlab.explore.explore`; none: exhaustive), a timed run in ``mode`` (``scenario`` empty), or a
    command line (``argv``, to which ``--redis URL`` is added)."""

    label: str
    scenario: str = ""
    mode: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    #: the scenario's YAML, for one of :data:`EXTRA` (else ``scenario`` is a shipped name)
    text: str = ""


def dangerous_needs(sc: Any) -> tuple[str, ...]:
    """The ``@dangerous`` commands scenario ``sc``'s Python actors declare that another project's released
    code sends (their module's ``ACL_DANGEROUS``: dramatiq's dispatch.lua sends KEYS), which a restricted
    user must not be given."""
    import importlib

    out: list[str] = []
    for a in sc.actors:
        if isinstance(a.python, str) and ":" in a.python:
            out += getattr(importlib.import_module(a.python.split(":", 1)[0]), "ACL_DANGEROUS", ())
    return tuple(dict.fromkeys(out))


def live_cases() -> list[tuple[str, str]]:
    """Every shipped scenario × mode that can run on a live server under a restricted user: not those with
    a fault actor only fakeredis can play, nor those whose released code needs a ``@dangerous`` command
    (:func:`dangerous_needs`)."""
    from emqlab.engine.scenario import load, shipped_names

    out = []
    for name in shipped_names():
        sc = load(name)
        if not any(a.kind in ("restart", "script-flush") for a in sc.actors) and not dangerous_needs(sc):
            out += [(name, mode) for mode in sc.modes]
    return out


def workload(options: Callable[[str, str], dict[str, Any]] = lambda _name, _mode: {}) -> list[Item]:
    """The items the recording runs, in order; ``options(scenario, mode)``: each exploration's options
    (default: none, an exhaustive search within the scenario's preemption bound)."""
    from emqlab.engine.scenario import loads
    from emqlab.timing.model import MODES as TIMED_MODES

    items = [Item(f"{name} {mode}", name, mode, options(name, mode)) for name, mode in live_cases()]
    for text, modes in EXTRA:
        name = loads(text).name
        items += [Item(f"{name} {mode}", name, mode, text=text) for mode in modes]
    items += [Item(f"timed run {mode}", mode=mode) for mode in TIMED_MODES]
    items += [Item(f"emqlab {' '.join(argv)}", argv=argv) for argv in CLI]
    return items


def run(item: Item, url: str) -> Any:
    """Run ``item`` on the server at ``url``; the exploration's :class:`emqlab.explore.Report` (else None).
    Raises RuntimeError when a command line does not end with status 0."""
    from click.testing import CliRunner

    from emqlab.backend.connect import connect
    from emqlab.engine.scenario import load, loads
    from emqlab.explore import explore
    from emqlab.timing import TimingConfig, simulate
    from emqlab.ui.cli import main

    if item.argv:
        res = CliRunner().invoke(main, [*item.argv, "--redis", url])
        if res.exit_code != 0:
            raise RuntimeError(f"{item.label}: exit {res.exit_code}\n{res.output}")
        return None
    conn = connect(url)
    try:
        if item.scenario:
            sc = loads(item.text) if item.text else load(item.scenario)
            return explore(sc, item.mode, conn=conn, **item.options)
        simulate(item.mode, TimingConfig(**TIMED), conn)
        return None
    finally:
        conn.close()


def no_auth() -> frozenset[str]:
    """Commands Redis checks no ACL rule for (AUTH, HELLO): ``no_auth`` in emqlab's command table."""
    table = json.loads((ROOT / "emqlab" / "protocol" / "commands.json").read_text("utf-8"))
    return frozenset(name for name, entry in table["commands"].items() if "no_auth" in entry["flags"])


def executed(admin: redis.Redis) -> set[str]:
    """The commands the server ran or refused since its statistics were reset (``INFO commandstats``),
    lower-case, subcommands as ``container|sub``; without the recorder's own and the ``no_auth`` ones."""
    stats = admin.info("commandstats")
    names = {k.removeprefix("cmdstat_") for k, v in stats.items()
             if int(v.get("calls", 0)) + int(v.get("rejected_calls", 0)) > 0}
    return names - RECORDER - no_auth()


@dataclass
class Recording:
    """What :func:`record` saw: ``seen``, each command sent (upper-case ACL name) with the label of the first
    item that sent it; ``reports``, the explorations' reports by label; ``refused``, per item, the server's
    errors that are no answer about the queue (``INFO errorstats``: ``NOPERM``, ``NOAUTH``, ``WRONGPASS``)."""

    seen: dict[str, str] = field(default_factory=dict)
    reports: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)


#: error codes a restricted user's run must never meet (``INFO errorstats``)
REFUSALS = ("NOPERM", "NOAUTH", "WRONGPASS")


def record(admin_url: str, items: Sequence[Item], url: str | None = None) -> Recording:
    """Run ``items`` on the server at ``url`` (default ``admin_url``), one by one, reading the server's
    statistics through ``admin_url`` (a user allowed CONFIG and INFO) around each (:class:`Recording`)."""
    admin = redis.Redis.from_url(admin_url)
    out = Recording()
    try:
        for item in items:
            admin.config_resetstat()
            rep = run(item, url or admin_url)
            if rep is not None:
                out.reports[item.label] = rep
            for name in sorted(executed(admin)):
                out.seen.setdefault(name.upper(), item.label)
            errors = {k.removeprefix("errorstat_"): int(v["count"]) for k, v in admin.info("errorstats").items()}
            bad = {code: n for code, n in errors.items() if code in REFUSALS}
            if bad:
                out.refused[item.label] = bad
    finally:
        admin.close()
    return out


def build_table(seen: dict[str, str], version: str) -> dict[str, Any]:
    header = {"format": FORMAT, "redis_version": version, "regenerate": REGENERATE, "source": "INFO commandstats"}
    return {"header": header, "commands": dict(sorted(seen.items()))}


def render(table: dict[str, Any]) -> str:
    """Deterministic text of the table: sorted keys, one command per line, trailing newline."""
    def dump(v: Any) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    items = sorted(table["commands"].items())
    lines = ["{", f'"header":{dump(table["header"])},', '"commands":{']
    lines += [f"{dump(k)}:{dump(v)}{',' if i < len(items) - 1 else ''}" for i, (k, v) in enumerate(items)]
    return "\n".join([*lines, "}", "}"]) + "\n"


@contextmanager
def own_server() -> Iterator[str]:
    """A throwaway ``redis-server`` on a free local port, nothing on disk; yields its URL."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not on PATH (Debian's redis-server package)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        probe = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                probe.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        probe.close()
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--output", "-o", type=Path, default=OUTPUT, help=f"where to write (default {OUTPUT})")
    g.add_argument("--check", action="store_true", help="compare with the committed file; exit 1 if it differs")
    a = p.parse_args(argv)
    with own_server() as url:
        started = time.perf_counter()
        seen = record(url, workload()).seen
        admin = redis.Redis.from_url(url)
        version = admin.info("server")["redis_version"]
        dangerous = {c.decode() if isinstance(c, bytes) else c for c in admin.acl_cat("dangerous")}
        admin.close()
    bad = sorted(c for c in seen if c.lower() in dangerous)
    if bad:
        raise SystemExit(f"emqlab sent {', '.join(bad)} (ACL category @dangerous): a restricted user must not need"
                         f" it; first sent by: {'; '.join(seen[c] for c in bad)}")
    text = render(build_table(seen, str(version)))
    took = f"{time.perf_counter() - started:.0f} s"
    if a.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT}: {'up to date' if same else 'differs from what emqlab sends now'} ({took})")
        return 0 if same else 1
    a.output.write_text(text, encoding="utf-8")
    print(f"wrote {a.output} ({len(seen)} commands, {took})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
