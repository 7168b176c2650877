"""Round trips per job, counted by the live Redis server itself, match the timing model: 1 for an atomic
finish with fetch_next = 1, 2 for finish-then-fetch, and the split script's command count for a split finish.

How the server counts only this test's commands on a shared server: the run's client names its connections
(``CLIENT SETNAME emqlab-rtt-<hex>``, sent by redis-py on every new connection of the pool); ``CLIENT LIST``
gives their addresses; a ``MONITOR`` connection logs every command with its client's address, and the test
keeps only the lines from those addresses, between two ``ECHO`` sentinels sent on the run's own connection
(other clients' traffic and the commands a script runs inside the server — logged as ``[lua]`` — are left
out). Redis 7.0 has no per-client command counter (``tot-cmds`` in ``CLIENT INFO`` came later); where the
server has one, it is checked too.
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from typing import Any

import pytest
import redis

from emqlab.backend.connect import SAFETY_TTL_MS, live_url
from emqlab.scripting.registry import default_scripts
from emqlab.timing import TimedRun, TimingConfig

from .conftest import live_conn, live_dialect

pytestmark = [pytest.mark.live, pytest.mark.admin]  # (MONITOR)

CONFIG = TimingConfig(jobs=12, workers=2, rtt_ms=1.0, seed=3)


class ServerCount:
    """Commands the server received from the connections named ``name``, between two sentinels."""

    def __init__(self, client: redis.Redis, name: str) -> None:
        self.client = client
        self.name = name
        self.tag = secrets.token_hex(4)
        self.lines: list[dict[str, Any]] = []
        self._ready = threading.Event()
        self._done = threading.Event()
        self._monitor = redis.Redis.from_url(live_url(), protocol=2, socket_timeout=20)
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._error: BaseException | None = None

    def _listen(self) -> None:
        try:
            with self._monitor.monitor() as m:
                self._ready.set()
                for entry in m.listen():
                    self.lines.append(entry)
                    if entry["command"] == f"ECHO emqlab-end-{self.tag}":
                        break
        except BaseException as e:  # pragma: no cover - reported by the test
            self._error = e
            self._ready.set()
        finally:
            self._done.set()

    def __enter__(self) -> ServerCount:
        self._thread.start()
        assert self._ready.wait(10), "MONITOR did not start"
        self.client.echo(f"emqlab-start-{self.tag}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.echo(f"emqlab-end-{self.tag}")
        assert self._done.wait(20), "MONITOR did not see the end sentinel"
        self._monitor.close()
        if self._error is not None:
            raise self._error

    def ours(self) -> list[str]:
        """The commands (text) from our connections, strictly between the sentinels."""
        addrs = {c["addr"] for c in self.client.client_list() if c.get("name") == self.name}
        out: list[str] = []
        inside = False
        for e in self.lines:
            if e.get("client_type") == "lua":
                continue
            if f"{e['client_address']}:{e['client_port']}" not in addrs:
                continue
            if e["command"] == f"ECHO emqlab-start-{self.tag}":
                inside = True
                continue
            if e["command"] == f"ECHO emqlab-end-{self.tag}":
                break
            if inside:
                out.append(e["command"])
        return out


def _run_counted(mode: str) -> tuple[Any, list[str], Any]:
    live_conn()  # skip (or fail in CI) without a server
    name = f"emqlab-rtt-{secrets.token_hex(4)}"
    client = redis.Redis.from_url(live_url(), protocol=2, client_name=name, socket_timeout=20)
    scripts = default_scripts()
    for s in ("moveToFinished", "moveToActive", "moveStalledJobsToWait", "extendLock"):
        client.script_load(scripts[s].text)  # no NOSCRIPT fallback inside the counted window
    run = TimedRun(mode, CONFIG, client, observe=False)  # claims a unique queue, writes the initial state
    try:
        with ServerCount(client, name) as count:
            run.run()
        result = run.result()
        commands = count.ours()
    finally:
        run.close()
        client.close()
    return run, commands, result


def _classify(commands: list[str], run: TimedRun) -> Counter[str]:
    """EVALSHA by script name, the sweep's stalled-check deletion, a lease's EVAL, and plain commands."""
    by_sha = {default_scripts()[s].sha: s for s in ("moveToFinished", "moveToActive", "moveStalledJobsToWait",
                                                     "extendLock")}
    out: Counter[str] = Counter()
    check_key = run.runner.keys.stalled_check
    commands = list(commands)
    for i, c in enumerate(commands):  # MULTI, a command, PEXPIRE … NX …, EXEC: a key's safety TTL, sent with it
        if c.strip('"').upper() == "MULTI" and i + 3 < len(commands):
            j = next((k for k in range(i + 1, len(commands)) if commands[k].strip('"').upper() in ("EXEC", "MULTI")),
                     None)
            inner = commands[i + 2:j] if j is not None else []
            if j is not None and commands[j].strip('"').upper() == "EXEC" and inner and all(
                    x.split(" ")[0].strip('"').upper() == "PEXPIRE" and str(SAFETY_TTL_MS) in x for x in inner):
                commands[i] = commands[j] = "safety transaction"
    for c in commands:
        if c == "safety transaction":
            out["safety transaction"] += 1  # (its MULTI and its EXEC)
            continue
        parts = c.split(" ")
        if parts[0].upper() == "EVALSHA":
            out["EVALSHA " + by_sha.get(parts[1], parts[1])] += 1
        elif parts[0].upper() == "EVAL":
            out["EVAL lapse"] += 1
        elif parts[0].upper() == "DEL" and parts[1].strip('"') == check_key:
            out["sweep interval"] += 1
        elif parts[0].upper() == "PEXPIRE" and parts[2].strip('"') == str(SAFETY_TTL_MS):
            # emqlab's own safety TTL on a key the step wrote (never a protocol command): counted apart
            assert parts[1].strip('"').startswith(run.runner.keys.base) and parts[3].strip('"').upper() == "NX", c
            out["safety ttl"] += 1
        else:
            out["command"] += 1
    return out


def _model(run: TimedRun) -> Counter[str]:
    out: Counter[str] = Counter()
    for s in run.runner.steps:
        if s.kind == "script":
            out["EVALSHA " + s.op] += 1
            if s.op == "moveStalledJobsToWait":
                out["sweep interval"] += 1
        elif s.kind == "clock":
            out["EVAL lapse"] += 1
        else:
            out["command"] += 1
    return out


def _worker_round_trips_per_job(counted: Counter[str], result: Any) -> float:
    worker = (counted["EVALSHA moveToFinished"] + counted["EVALSHA moveToActive"] + counted["EVALSHA extendLock"]
              + counted["command"])
    return (worker - result.workers) / result.finishes


@pytest.mark.parametrize("mode,expected", [("atomic", 1.0), ("finish-then-fetch", 2.0), ("split", None)])
def test_round_trips_counted_by_the_server_match_the_model(mode: str, expected: float | None) -> None:
    run, commands, result = _run_counted(mode)
    counted = _classify(commands, run)
    assert sum(counted.values()) == len(commands)
    counted.pop("safety ttl", None)  # emqlab's key hygiene on a live server, not a round trip of the queue's
    counted.pop("safety transaction", None)
    # every command the model sent, and nothing else, reached the server from the run's connection
    assert counted == _model(run), (counted, _model(run))
    per_job = _worker_round_trips_per_job(counted, result)
    assert per_job == pytest.approx(result.round_trips_per_job)
    if expected is not None:
        assert per_job == expected
        assert counted["command"] == 0
    else:
        # split: one round trip per redis.call of moveToFinished (fetch-next included), no EVALSHA of it
        assert counted["EVALSHA moveToFinished"] == 0
        split_commands = sum(k * n for k, n in result.finish_round_trips.items()) / result.finishes
        assert per_job == pytest.approx(split_commands)
        assert per_job > 15
    print(f"{mode}: server saw {dict(counted)}; worker round trips per job {per_job:.2f}")


def test_transaction_round_trips_counted_by_the_server_match_the_model() -> None:
    """A transaction finish: the server sees, per attempt, WATCH, the four pipelined reads, and MULTI, the
    queued writes, EXEC — each command the model sent and nothing else — and the model's round trips per
    job (3 per attempt + the fetch) follow from the attempts it made. MONITOR logs a queued command when
    EXEC runs it: an aborted EXEC shows as MULTI and EXEC alone. Each worker's own connection (opened at
    its first transaction) names itself with one CLIENT SETNAME (and, on Valkey, two CLIENT SETINFO)."""
    run, commands, result = _run_counted("transaction")
    # redis-py's handshake on each new connection: CLIENT SETNAME, then CLIENT SETINFO LIB-NAME and LIB-VER,
    # which Valkey runs (and MONITOR logs) and Redis 7.0 refuses as an unknown subcommand (unlogged)
    handshake = [c for c in commands if c.split(" ")[0].strip('"').upper() == "CLIENT"]
    setname = [c for c in handshake if "SETNAME" in c.upper()]
    setinfo = [c for c in handshake if "SETINFO" in c.upper()]
    assert 1 <= len(setname) <= result.workers and len(handshake) == len(setname) + len(setinfo)
    assert len(setinfo) == (2 * len(setname) if live_dialect().valkey else 0)
    counted = _classify([c for c in commands if c not in handshake], run)
    sent = 0
    for s in run.runner.steps:
        if s.op == "WATCH":
            sent += 1
        elif s.op == "PIPELINE":
            sent += len(s.args[0].split())
        elif s.op == "EXEC":
            sent += len(s.args[0].split()) if s.reply is not None else 2
    model = _model(run)
    model["command"] = sent
    counted.pop("safety ttl", None)  # emqlab's key hygiene on a live server, not a round trip of the queue's
    hygiene = counted.pop("safety transaction", 0) // 2  # (MULTI … EXEC that sent a key's safety TTL with it)
    assert counted == model, (counted, model)
    verbs = Counter(c.split(" ")[0].strip('"').upper() for c in commands)
    assert verbs["WATCH"] == result.attempts and verbs["EXEC"] - hygiene == verbs["MULTI"] - hygiene == result.attempts
    assert verbs["ZADD"] == result.attempts - result.aborts == result.finishes
    assert counted["EVALSHA moveToFinished"] == 0
    assert result.round_trips_per_job == pytest.approx(3 * result.attempts / result.finishes + 1)
    print(f"transaction: server saw {dict(verbs)}; {result.aborts} aborts in {result.attempts} attempts")
