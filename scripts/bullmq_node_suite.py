#!/usr/bin/env python3
"""BullMQ's own Node test suite against ``emqlab server`` and a real redis-server, side by side (issue 28).

BullMQ's mocha suite (``tests/test_*.ts``) is not in its npm package, so it runs from a checkout of the
BullMQ repository at a release tag, prepared as BullMQ's CI prepares it::

    git clone --branch v5.34.0 https://github.com/taskforcesh/bullmq /tmp/bullmq-src
    cd /tmp/bullmq-src && yarn install --frozen-lockfile --ignore-scripts && yarn build

This script then, for each server in turn (a redis-server it starts, an ``emqlab server`` it starts), runs the
suite one test file at a time — a fresh server for every file — with a mocha reporter of its own that writes
each test's outcome as a JSON line (a file killed at its time limit keeps the outcomes it had), and writes a
Markdown report: the tag, the date, per-file pass / fail / pending on both servers, the pass rate, the wall
time of each side and their ratio, and the tests that fail on emqlab but pass on Redis, each with its reason
from :data:`KNOWN` ("known: …") or marked as a new failure.

BullMQ's tests connect to ``localhost:6379`` (some with ``new IORedis()``, some call FLUSHALL), so they must
never reach a Redis server that holds anything. Two fences keep them on the servers started here:

* each side runs in a network namespace of its own (``unshare -rn``, when the kernel allows it), whose
  loopback has nothing but the server started in it;
* a ``--require``d hook in every Node process (sandboxed job processors too, through ``NODE_OPTIONS``)
  turns each connection to port 6379 to the port of the server under test.

Example::

    .venv/bin/python scripts/bullmq_node_suite.py --checkout /tmp/bullmq-src \\
        --files 'tests/test_{queue,getters}.ts' --out /tmp/report.md
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import fnmatch
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SIDES = ("redis", "emqlab")

#: Tests that fail on emqlab server and pass on redis-server, with the reason found by investigation
#: (keyed by mocha's full title; a ``*`` is a wildcard). A run shows these as "known: reason"; any other
#: emqlab-only failure is a "new failure".
KNOWN: dict[str, str] = {
    "workers Manually process jobs should get paginated unprocessed dependencies keys":
        "SSCAN paging, passes since emqlab's INFO says Redis 7.0.15: the test reads redis_version and from 7.2 on "
        "expects Redis's listpack behaviour (SSCAN with COUNT 50 on a set of 65 short members returns all 65 "
        "and cursor 0); fakeredis pages by COUNT and returns 50. While INFO said 8.0.0 the test took that branch "
        "and failed; now it takes its < 7.2 branch, as on the redis-server 7.0 here.",
    "workers keeps locks for all the jobs that are processed concurrently":
        "timing: 57 jobs at once with 250 ms locks, renewed about every 125 ms by one extendLocks script "
        "(171 redis.calls). Since scripts moved to emqlab's Lua host a lock lapsed before its renewal in all 3 "
        "runs of the whole file (alone: 3 of 3 passed; the code before: 2 of 2), a redis.call costing about "
        "1.6x what it did (that script 4.3 ms, was 2.7 ms). After the server's host stopped walking the Lua "
        "stack for every call (3.3 ms), the whole of test_worker.ts passed 108 of 108 in 2 of 2 runs on emqlab "
        "server, on a less loaded machine.",
    "Rate Limiter when there are more added jobs than max limiter processes jobs as max limiter from the beginning":
        "speed: 400 jobs through a 100-a-second limiter (at least 3 s of its 5 s) with a 700 ms job; about "
        "1200 scripts (add, move to active, move to finished) at about 1 ms each on emqlab server put it over "
        "5 s (3.8-3.9 s on redis-server); it passed in the run after scripts moved to emqlab's Lua host",
    "Obliterate should obliterate a queue with high number of jobs in different statuses":
        "speed: 2223 jobs added (1623 of them delayed) and 600 processed (300 completed, 300 failed) before "
        "obliterate(): some 3500 scripts at about 1 ms each on emqlab server against the 6 s limit (1.0-1.1 s "
        "on redis-server); near the limit, it passes in some runs",
    "Jobs getters .getWorkers *":
        "race: ioredis sends a worker's CLIENT SETNAME from its own 'ready' handler, so BullMQ's Worker is "
        "'ready' before the name is set, and the test asks CLIENT LIST (Queue.getWorkers) on another "
        "connection at once. Redis runs both in the order they arrive (the SETNAME was written first); emqlab "
        "server serves each connection on a thread of its own and can answer the CLIENT LIST first. Seen on "
        "one to three of the getWorkers tests in some runs, and on redis-server too (once before, and once in "
        "the run after scripts moved to emqlab's Lua host, where emqlab server passed them all).",
    "Pause should pause and resume worker without error":
        "hang-up reply: Worker.pause() disconnects the worker's blocking connection in the middle of its "
        "BZPOPMIN; emqlab server sees the hang-up at once and ends the command, but still writes its empty "
        "reply to ioredis's half-closed socket, and BullMQ then stalls until the test's 8 s (it passes alone, "
        "and passed in the full run after scripts moved to emqlab's Lua host). Sending no reply, as Redis "
        "does, fixes it but makes 2-3 force-closed-worker tests of test_stalled_jobs.ts time out, so that "
        "change is not in (see the commit history).",
    "stalled jobs *":
        "intermittent: the tests that force-close a worker (close(true)) with 4 active jobs and wait for a "
        "second worker to find them stalled timed out in some runs on emqlab server (0 to 2 of them), passed "
        "in others; not pinned down",
    "events when one job is a parent emits waiting-children and waiting event":
        "intermittent, on both servers: timed out (8 s) once in three full runs on emqlab server, and on "
        "redis-server in the run after scripts moved to emqlab's Lua host; not investigated further",
    "events when job is * when added again with same debounce id when ttl is not provided when removing * "
    "job removes * key":
        "likely a race (not confirmed): the test counts the 'deduplicated' events its QueueEvents reads with a "
        "blocking XREAD on a connection of its own, and checks the count (expected 2, got 1) right after its "
        "last add and remove, without waiting. Redis serves a client blocked on a stream as soon as the "
        "command that added to it ends, before it runs another; emqlab server wakes the blocked connection's "
        "thread, which can reply after the next command has. Failed in both full-file runs after scripts "
        "moved to emqlab's Lua host (the deduplication variant once, the debounce variant once), passed before.",
    "flows when parent has delay moves process to delayed after children are processed":
        "timing: a 500 ms child job, then the parent's 3000 ms delay, inside the 4 s limit; timed out once "
        "in the (loaded) run after scripts moved to emqlab's Lua host, passed when test_flow.ts ran again",
    "bulk jobs should keep workers busy":
        "timing: 2.7 s of job sleeps (6 jobs of 900 ms on 2 workers) inside the 4 s limit (2.75 s on "
        "redis-server); before TCP_NODELAY and the hang-up fix it ran 4 s on emqlab server, since then it passes",
    "Delayed jobs should process delayed jobs with several workers respecting delay":
        "timing margin: checks processedOn against the delay with a 0.4 ms margin ('expected 692 to be below "
        "691.6' once, 'expected 673 to be below 670.8' in the run after scripts moved to emqlab's Lua host); "
        "passes in most runs",
    "Concurrency when global dynamic limit is used when max limiter is greater than 1 should run max "
    "concurrency for jobs added first processed":
        "timing: 2.6 s of the 4 s limit on redis-server; timed out once on emqlab server before TCP_NODELAY",
}

#: Tests not run at all (on either server, so that the times compare the same work), with the reason: one
#: whose failure on emqlab server takes more of its file down with it (a hook that times out after it skips
#: the rest of its ``describe``). ``--no-skip`` runs them too.
SKIP: dict[str, str] = {
    "Job .remove removes 4000 jobs in time rage of 4000ms":
        "speed: 4000 waiting and 4000 delayed jobs added, then all 8000 removed one removeJob script each, "
        "the removals within 4 s. emqlab server runs such a script in about 1 ms (each redis.call crosses from "
        "Lua into fakeredis's Python; 4000 removals took 3.8 s alone, against 0.3-0.5 s on redis-server), so "
        "the test times out, the removals still queued make the afterEach hook time out too, and mocha skips "
        "the rest of test_job.ts (51 of its 73 tests, in our run without this skip).",
}

# A mocha reporter: every test's outcome (and every failed hook) as one JSON line, appended as it happens.
_REPORTER_JS = r"""
const fs = require('fs');
const out = process.env.BQ_SUITE_EVENTS;
function line(kind, t, err) {
  const rec = {kind, title: t.fullTitle(), file: t.file || null, duration: t.duration || 0,
               type: t.type || 'test'};
  if (err) rec.error = String((err && (err.message || err)) || '').slice(0, 600);
  fs.appendFileSync(out, JSON.stringify(rec) + '\n');
}
module.exports = function (runner) {
  runner.on('pass', t => line('pass', t));
  runner.on('fail', (t, err) => line('fail', t, err));
  runner.on('pending', t => line('pending', t));
  runner.on('end', () => fs.appendFileSync(out, JSON.stringify({kind: 'end'}) + '\n'));
};
"""

# Loaded into every Node process: a connection to port 6379 goes to the server under test instead.
_GUARD_JS = r"""
const net = require('net');
const target = Number(process.env.BQ_SUITE_PORT);
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  let a = args[0];
  if (Array.isArray(a)) a = a[0];
  if (a && typeof a === 'object' && !a.path && Number(a.port || 6379) === 6379) {
    args[0] = Object.assign({}, a, {port: target,
                                    host: (!a.host || a.host === 'localhost') ? '127.0.0.1' : a.host});
  } else if ((typeof a === 'number' || typeof a === 'string') && Number(a) === 6379) {
    args[0] = target;
    if (args[1] === 'localhost') args[1] = '127.0.0.1';
  }
  return connect.apply(this, args);
};
"""


@dataclass
class Outcome:
    title: str
    error: str = ""


@dataclass
class FileRun:
    file: str
    seconds: float = 0.0
    finished: bool = False  # mocha reached its end (not killed at the time limit, not crashed)
    exit_code: int | None = None
    passed: list[str] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)  # tests and hooks
    pending: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------------
# servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ping(port: int, deadline: float) -> bool:
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _start_server(side: str, args: argparse.Namespace, port: int, log: Path) -> subprocess.Popen[bytes]:
    if side == "redis":
        cmd = [args.redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    else:
        cmd = [*args.emqlab_cmd.split(), "server", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    if not _wait_ping(port, time.time() + 30):
        _stop(proc)
        raise RuntimeError(f"{side} server did not answer PING on port {port}: see {log}")
    return proc


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down): SIOCGIFFLAGS / SIOCSIFFLAGS."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s.fileno(), 0x8913, req))[1]
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sh", b"lo", flags | 0x1))


def _netns_works() -> bool:
    unshare = shutil.which("unshare")
    if not unshare or platform.system() != "Linux":
        return False
    return subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0


# ----------------------------------------------------------------------------------------------------------
# one side


def _mocha_config(checkout: Path) -> dict[str, Any]:
    out = subprocess.run(["node", "-e", "console.log(JSON.stringify(require('./.mocharc.js')))"], cwd=checkout,
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def _run_file(side: str, rel: str, args: argparse.Namespace, work: Path, base_cfg: dict[str, Any]) -> FileRun:
    stem = Path(rel).stem
    events = work / f"{side}-{stem}.jsonl"
    events.unlink(missing_ok=True)
    cfg = dict(base_cfg, spec=[rel])
    cfg.pop("reporter", None)
    if args.mocha_timeout:
        cfg["timeout"] = args.mocha_timeout
    if SKIP and not args.no_skip:  # (mocha matches --grep against each test's full title)
        cfg.update(grep="^(?:" + "|".join(re.escape(t) for t in SKIP) + ")$", invert=True)
    cfg_path = work / f"{side}-{stem}.mocharc.json"
    cfg_path.write_text(json.dumps(cfg))
    port = _free_port()
    server = _start_server(side, args, port, work / f"{side}-server.log")
    try:
        return _run_mocha(side, rel, args, work, port, events, cfg_path)
    finally:
        _stop(server)


def _run_mocha(side: str, rel: str, args: argparse.Namespace, work: Path, port: int, events: Path,
               cfg_path: Path) -> FileRun:
    checkout = Path(args.checkout)
    stem = Path(rel).stem
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_HOST", "BULLMQ_TEST_PREFIX")}
    env.update(BQ_SUITE_PORT=str(port), BQ_SUITE_EVENTS=str(events), TS_NODE_TRANSPILE_ONLY="true",
               NODE_OPTIONS=f"{env.get('NODE_OPTIONS', '')} --require {work / 'guard.js'}".strip())
    cmd = [str(checkout / "node_modules/.bin/ts-mocha"), "-p", "tsconfig-cjs.json", "--config", str(cfg_path),
           "--reporter", str(work / "reporter.js")]
    run = FileRun(rel)
    start = time.monotonic()
    with (work / f"{side}-{stem}.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            run.exit_code = proc.wait(timeout=args.file_timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            _stop(proc)  # (at the time limit, or on Ctrl-C)
            try:  # (and whatever mocha started and left behind)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    run.seconds = time.monotonic() - start
    for raw in events.read_text().splitlines() if events.exists() else []:
        rec = json.loads(raw)
        if rec["kind"] == "end":
            run.finished = True
        elif rec["kind"] == "pass":
            run.passed.append(rec["title"])
        elif rec["kind"] == "pending":
            run.pending.append(rec["title"])
        else:
            run.failed.append(Outcome(rec["title"] + (" [hook]" if rec.get("type") == "hook" else ""),
                                      rec.get("error", "")))
    return run


def _inner(args: argparse.Namespace) -> int:
    """One side's run (in its network namespace, when there is one): every file in turn; JSON to stdout's
    file ``--_result``."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (so that the servers started are stopped)
    if args._netns:
        _loopback_up()
    work = Path(args._work)
    base_cfg = _mocha_config(Path(args.checkout))
    runs = []
    for rel in args._file_list:
        print(f"[{args._side}] {rel} …", end="", flush=True, file=sys.stderr)
        run = _run_file(args._side, rel, args, work, base_cfg)
        runs.append(run)
        print(f" {len(run.passed)} passing, {len(run.failed)} failing, {len(run.pending)} pending, "
              f"{run.seconds:.1f} s{'' if run.finished else ' (did not finish)'}", file=sys.stderr)
        Path(args._result).write_text(json.dumps([asdict(r) for r in runs]))
    return 0


def _run_side(side: str, files: list[str], args: argparse.Namespace, work: Path, netns: bool) -> list[FileRun]:
    result = work / f"{side}-result.json"
    cmd = [sys.executable, os.path.abspath(__file__), "--checkout", str(args.checkout), "--redis-server",
           args.redis_server, "--emqlab-cmd", args.emqlab_cmd, "--file-timeout", str(args.file_timeout),
           "--mocha-timeout", str(args.mocha_timeout or 0), *(["--no-skip"] if args.no_skip else []),
           "--_side", side, "--_work", str(work),
           "--_result", str(result), *(["--_netns"] if netns else []), "--_file-list", *files]
    if netns:
        cmd = ["unshare", "-rn", *cmd]
    subprocess.run(cmd, check=True)
    return [_file_run(d) for d in json.loads(result.read_text())]


def _file_run(d: dict[str, Any]) -> FileRun:
    return FileRun(**dict(d, failed=[Outcome(**o) for o in d["failed"]]))


# ----------------------------------------------------------------------------------------------------------
# the report


def _known(title: str) -> str | None:
    for pattern, reason in KNOWN.items():
        if title == pattern or fnmatch.fnmatchcase(title, pattern):
            return reason
    return None


def _tag(checkout: Path, given: str | None) -> str:
    if given:
        return given
    out = subprocess.run(["git", "-C", str(checkout), "describe", "--tags", "--exact-match"], capture_output=True,
                         text=True)
    if out.returncode == 0:
        return out.stdout.strip()
    version = json.loads((checkout / "package.json").read_text()).get("version", "?")
    return f"v{version} (package.json)"


def _one_line(text: str, n: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def _meta(args: argparse.Namespace, files: list[str]) -> dict[str, Any]:
    """What the report says of the run besides its outcomes (kept in --json, for --from-json)."""
    return {"tag": _tag(Path(args.checkout), args.tag), "date": datetime.date.today().isoformat(),
            "redis": _redis_version(args.redis_server), "node": _node_version(), "cores": os.cpu_count(),
            "mocha_timeout": args.mocha_timeout or _mocha_config(Path(args.checkout)).get("timeout"),
            "file_timeout": args.file_timeout, "files": files,
            "skipped": {} if args.no_skip else dict(SKIP), "note": args.note}


def _report(results: dict[str, list[FileRun]], meta: dict[str, Any]) -> str:
    tag, files, skipped = meta["tag"], meta["files"], meta["skipped"]
    sides = [s for s in SIDES if s in results]
    by_file = {s: {r.file: r for r in results[s]} for s in sides}
    lines = [
        "# BullMQ's own Node suite on emqlab server",
        "",
        "<!-- generated by scripts/bullmq_node_suite.py: edit the script (its KNOWN table), not this page -->",
        "",
        f"BullMQ's mocha suite from its repository at **{tag}**, run on {meta['date']} "
        f"by `scripts/bullmq_node_suite.py`, one test file at a time, each file against a fresh server: a "
        f"real `redis-server` ({meta['redis']}) and `emqlab server` (the embedded server "
        f"over TCP), on one machine ({meta['cores']} cores, Node {meta['node']}), with the suite's own "
        f"per-test time limit ({meta['mocha_timeout']} ms, longer where a test sets its own).",
        "",
        *([meta["note"], ""] if meta.get("note") else []),
    ]
    totals: dict[str, dict[str, float]] = {}
    for s in sides:
        runs = results[s]
        totals[s] = {
            "passed": sum(len(r.passed) for r in runs),
            "failed": sum(len([o for o in r.failed if not o.title.endswith("[hook]")]) for r in runs),
            "hooks": sum(len([o for o in r.failed if o.title.endswith("[hook]")]) for r in runs),
            "pending": sum(len(r.pending) for r in runs),
            "seconds": sum(r.seconds for r in runs),
            "unfinished": sum(not r.finished for r in runs),
        }
    if "redis" in totals and "emqlab" in totals:
        redis_pass = {(r.file, t) for r in results["redis"] for t in r.passed}
        emq_pass = {(r.file, t) for r in results["emqlab"] for t in r.passed}
        both = len(redis_pass & emq_pass)
        ratio = totals["emqlab"]["seconds"] / max(totals["redis"]["seconds"], 1e-9)
        lines += [
            "## Summary",
            "",
            "| | redis-server | emqlab server |",
            "|---|---:|---:|",
            f"| tests passing | {int(totals['redis']['passed'])} | {int(totals['emqlab']['passed'])} |",
            f"| tests failing | {int(totals['redis']['failed'])} | {int(totals['emqlab']['failed'])} |",
            f"| failed hooks (their suite's remaining tests do not run) | {int(totals['redis']['hooks'])} | "
            f"{int(totals['emqlab']['hooks'])} |",
            f"| pending (skipped by the suite itself) | {int(totals['redis']['pending'])} | "
            f"{int(totals['emqlab']['pending'])} |",
            f"| skipped by this script (below) | {len(skipped)} | {len(skipped)} |",
            f"| files that did not finish (time limit {meta['file_timeout']:.0f} s a file, or a crash) | "
            f"{int(totals['redis']['unfinished'])} | {int(totals['emqlab']['unfinished'])} |",
            f"| wall time, all files | {totals['redis']['seconds']:.0f} s | {totals['emqlab']['seconds']:.0f} s |",
            "",
            f"**{both} of the {len(redis_pass)} tests run that pass on redis-server pass on emqlab server "
            f"({100 * both / max(len(redis_pass), 1):.1f} %); counting the {len(skipped)} skipped as failures, "
            f"{both} of {len(redis_pass) + len(skipped)} "
            f"({100 * both / max(len(redis_pass) + len(skipped), 1):.1f} %).** emqlab server took "
            f"**{ratio:.2f}×** redis-server's wall time (mocha's own time, all files; server start-up left out).",
            "",
        ]
    lines += ["## Per file", "", "| file | " + " | ".join(
        f"{s}: pass / fail / pending / s" for s in sides) + (" | time ratio |" if len(sides) == 2 else "|"),
        "|---|" + "---:|" * (len(sides) + (1 if len(sides) == 2 else 0))]
    for f in files:
        cells = []
        for s in sides:
            r = by_file[s].get(f)
            if r is None:
                cells.append("—")
                continue
            n_fail = len(r.failed)
            cells.append(f"{len(r.passed)} / {n_fail} / {len(r.pending)} / {r.seconds:.1f}"
                         + ("" if r.finished else " (did not finish)"))
        if len(sides) == 2 and f in by_file["redis"] and f in by_file["emqlab"]:
            cells.append(f"{by_file['emqlab'][f].seconds / max(by_file['redis'][f].seconds, 1e-9):.2f}×")
        lines.append(f"| `{f}` | " + " | ".join(cells) + " |")
    lines += ["", "Failures count failed hooks as well as tests.", ""]
    if skipped:
        lines += ["## Skipped (not run on either server)", "", "| test | reason |", "|---|---|",
                  *[f"| {_one_line(t, 200)} | {_one_line(r, 700)} |" for t, r in skipped.items()], ""]
    if "redis" in results and "emqlab" in results:
        lines += _skip_list(results)
    lines += [
        "## How to run it",
        "",
        "```sh",
        f"git clone --branch {tag.split()[0]} https://github.com/taskforcesh/bullmq /tmp/bullmq-src",
        "(cd /tmp/bullmq-src && yarn install --frozen-lockfile --ignore-scripts && yarn build)",
        "python scripts/bullmq_node_suite.py --checkout /tmp/bullmq-src --out docs/bullmq-node-suite.md",
        "```",
        "",
        "Each side runs in a network namespace of its own where one exists (`unshare -rn`), and every Node "
        "process the suite starts has its connections to port 6379 turned to the server under test: BullMQ's "
        "tests call FLUSHALL, and never reach a Redis server of yours.",
        "",
    ]
    return "\n".join(lines)


def _skip_list(results: dict[str, list[FileRun]]) -> list[str]:
    redis_fail = {(r.file, o.title) for r in results["redis"] for o in r.failed}
    redis_pass = {(r.file, t) for r in results["redis"] for t in r.passed}
    rows_known, rows_new, rows_both = [], [], []
    for r in results["emqlab"]:
        for o in r.failed:
            key = (r.file, o.title)
            if key in redis_fail:
                rows_both.append(f"| `{Path(r.file).name}` | {_one_line(o.title, 120)} | {_one_line(o.error)} |")
                continue
            if key not in redis_pass and not o.title.endswith("[hook]"):
                note = "(did not run on redis-server)"
            else:
                note = ""
            reason = _known(o.title)
            if reason:
                rows_known.append(f"| `{Path(r.file).name}` | {_one_line(o.title, 120)} | known: "
                                  f"{_one_line(reason, 700)} |")
            else:
                rows_new.append(f"| `{Path(r.file).name}` | {_one_line(o.title, 120)} | **new failure**"
                                f"{' ' + note if note else ''}: {_one_line(o.error)} |")
    out = ["## Fails on emqlab server, passes on redis-server", ""]
    if rows_known or rows_new:
        out += ["| file | test | reason |", "|---|---|---|", *rows_known, *rows_new, ""]
    else:
        out += ["None.", ""]
    if rows_both:
        out += ["## Failing on both servers (the suite's, not emqlab's)", "", "| file | test | error on emqlab |",
                "|---|---|---|", *rows_both, ""]
    emq_fail = {(r.file, o.title) for r in results["emqlab"] for o in r.failed}
    rows_redis = [f"| `{Path(r.file).name}` | {_one_line(o.title, 120)} | {_one_line(o.error)} |"
                  for r in results["redis"] for o in r.failed if (r.file, o.title) not in emq_fail]
    if rows_redis:
        out += ["## Failing on redis-server only (in this run)", "", "| file | test | error on redis-server |",
                "|---|---|---|", *rows_redis, ""]
    return out


def _redis_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True)
    m = re.search(r"v=(\S+)", out.stdout)
    return f"Redis {m.group(1)}" if m else "Redis"


def _node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()


# ----------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkout", type=Path,
                   help="a BullMQ repository checkout at a release tag, installed and built (see above)")
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server",
                   help="the redis-server binary (default: the one on PATH)")
    p.add_argument("--emqlab-cmd", default=f"{sys.executable} -m emqlab",
                   help="how to run emqlab (default: %(default)s)")
    p.add_argument("--only", choices=("emqlab", "redis", "both"), default="both", help="which server(s)")
    p.add_argument("--files", default="tests/test_*.ts",
                   help="test files, a glob relative to the checkout ({a,b} alternatives allowed; "
                        "default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("docs/bullmq-node-suite.md"),
                   help="the Markdown report (default: %(default)s)")
    p.add_argument("--json", type=Path, help="also write every outcome here (JSON)")
    p.add_argument("--file-timeout", type=float, default=900.0,
                   help="seconds one test file may run before it is stopped (default: %(default)s)")
    p.add_argument("--mocha-timeout", type=int, default=0,
                   help="mocha's per-test time limit in ms (default: the suite's own, from .mocharc.js)")
    p.add_argument("--tag", help="the tag to print (default: git describe, or package.json's version)")
    p.add_argument("--no-skip", action="store_true", help="run the tests of the SKIP table too")
    p.add_argument("--note", help="a paragraph for the report, under its first (what else loaded the machine, "
                                  "say); with --from-json it replaces the run's own")
    p.add_argument("--from-json", type=Path,
                   help="write the report from an earlier run's --json (the KNOWN table as it is now), run nothing")
    p.add_argument("--no-netns", action="store_true",
                   help="do not run each side in a network namespace of its own (the port hook remains)")
    for hidden in ("--_side", "--_work", "--_result"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--_netns", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--_file-list", nargs="*", dest="_file_list", help=argparse.SUPPRESS)
    return p


def _expand(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [x for alt in m.group(1).split(",") for x in _expand(pattern[: m.start()] + alt + pattern[m.end():])]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        loaded = {side: [_file_run(d) for d in data[side]] for side in SIDES if side in data}
        meta = dict(data["meta"], **({"note": args.note} if args.note else {}))
        args.out.write_text(_report(loaded, meta))
        print(f"wrote {args.out}", file=sys.stderr)
        return 0
    if args.checkout is None:
        _parser().error("--checkout is required")
    args.checkout = args.checkout.resolve()
    if args._side:
        return _inner(args)
    for need, hint in ((args.checkout / "node_modules/.bin/ts-mocha", "yarn install"),
                       (args.checkout / "dist/cjs/classes/main.js", "yarn build"),
                       (args.checkout / ".mocharc.js", "a BullMQ checkout")):
        if not need.exists():
            sys.exit(f"{need} is missing: is --checkout {hint} done? (see --help)")
    files = sorted({os.path.relpath(f, args.checkout) for pat in _expand(args.files)
                    for f in glob.glob(str(args.checkout / pat))})
    if not files:
        sys.exit(f"no test files match {args.files!r} in {args.checkout}")
    netns = not args.no_netns and _netns_works()
    if not netns and not args.no_netns:
        sys.exit("no network namespace (unshare -rn) here: pass --no-netns to rely on the port hook alone")
    sides = SIDES if args.only == "both" else (args.only,)
    results: dict[str, list[FileRun]] = {}
    with tempfile.TemporaryDirectory(prefix="bullmq-suite-") as tmp:
        work = Path(tmp)
        (work / "reporter.js").write_text(_REPORTER_JS)
        (work / "guard.js").write_text(_GUARD_JS)
        for side in sides:
            results[side] = _run_side(side, files, args, work, netns)
    meta = _meta(args, files)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, **{s: [asdict(r) for r in rs] for s, rs in results.items()}},
                                        indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_report(results, meta))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
