"""emqlab against frontrun (PyPI) on the same toy race, side by side in one run (issue #11).

    .venv/bin/python benchmarks/bench_frontrun.py [--repeat 10] [--redis URL] [--full] [--raw FILE] [--write-docs]

The toy is the race of the ``stalled-finish`` scenario, written as plain redis-py calls that both tools run
unchanged. Job ``1`` is in ``active`` and in ``stalled``, locked by W1 (``W1:1``).

* W1, *split*: ``GET lock`` (is it ``W1:1``?), ``DEL lock``, ``SREM stalled 1``, ``LREM active 0 1``,
  ``ZADD completed`` — five round trips.
* W1, *atomic*: the same as one Lua script called through ``register_script`` (``EVALSHA``).
* S1, the sweep: ``SMEMBERS stalled``; per id: if not ``EXISTS lock``: ``LREM active 1 id`` and, if it
  removed one, ``RPUSH wait id``; then ``SREM stalled id``.

The anomaly is *double placement*: the job ends in ``wait`` and in ``completed``.

What runs, ``--repeat`` times each (default 10):

1. frontrun: ``frontrun.explore(setup=…, workers=[finish, sweep], invariant=…)`` (its DPOR strategy, which
   turns every redis-py ``execute_command`` into a scheduling point over the keys it touches), with its
   defaults (``preemption_bound=2``, ``stop_on_first=True``), on the live server and on fakeredis, split and
   atomic. frontrun refuses to explore outside its CLI environment (``LD_PRELOAD`` of its I/O library and
   ``FRONTRUN_ACTIVE=1``), so each case runs in a child process started as ``frontrun python
   bench_frontrun.py --frontrun-child …``; this also keeps its monkey-patching of redis-py and threading
   out of the emqlab runs. On fakeredis its executions time out (the cause is recorded with the figures),
   so the fakeredis repetitions use ``deadlock_timeout=timeout_per_run=0.5`` s after one run at the default
   5 s (which ends the same way, only later). With ``--full``, one more frontrun run of the split toy on the
   live server with ``stop_on_first=False`` (its search to the end of its default bound; one to two minutes).
2. emqlab: ``emqlab.api.explore_actors`` on fakeredis and on the live server, exhaustive and unbounded:
   the split toy, the atomic toy with the script as one step (``mode="atomic"``), and the atomic toy with
   the script split into its ``redis.call``\\ s (``mode="split"``).

The number of interleavings of the Redis commands is counted a third way, independently of both tools, by
enumerating every schedule of a small in-memory model of the toy (:func:`model_count`).

``--write-docs`` replaces the section between ``<!-- frontrun:start -->`` and ``<!-- frontrun:end -->`` of
``docs/benchmarks.md`` (appended at the end when the markers are missing). The live server is ``--redis``
(default ``redis://127.0.0.1:6379/0``); its keys are under a fresh prefix per exploration and deleted
afterwards, and nothing else on the server is touched (no FLUSHDB).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- frontrun:start -->", "<!-- frontrun:end -->"
LIVE_URL = "redis://127.0.0.1:6379/0"
JOB = "1"
TOKEN = "W1:1"

# -- the toy: plain redis-py code, the same for both tools -------------------------------------------------

FINISH_LUA = """\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
redis.call('LREM', KEYS[3], 0, ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
return 1
"""


def finish_split(r: Any, k: Any, now: int) -> None:
    """W1's finish as five separate commands (``k``: the queue's key names, ``emqlab.protocol.keys.QueueKeys``)."""
    if r.get(k.lock(JOB)) != TOKEN.encode():
        return
    r.delete(k.lock(JOB))
    r.srem(k.stalled, JOB)
    r.lrem(k.active, 0, JOB)
    r.zadd(k.completed, {JOB: now})


def finish_atomic(r: Any, k: Any, now: int) -> None:
    """W1's finish as one script, called as redis-py users do (``register_script``: ``EVALSHA``, and on
    ``NOSCRIPT`` a ``SCRIPT LOAD`` and the ``EVALSHA`` again)."""
    script = r.register_script(FINISH_LUA)
    script(keys=[k.lock(JOB), k.stalled, k.active, k.completed], args=[TOKEN, JOB, now])


def sweep(r: Any, k: Any) -> None:
    """S1: requeue every stalled job whose lock is gone."""
    for raw in r.smembers(k.stalled):
        jid = raw.decode()
        if not r.exists(k.lock(jid)):
            if r.lrem(k.active, 1, jid):
                r.rpush(k.wait, jid)
        r.srem(k.stalled, jid)


def seed_state(r: Any, k: Any) -> None:
    r.delete(k.lock(JOB), k.active, k.stalled, k.wait, k.completed)
    r.rpush(k.active, JOB)
    r.sadd(k.stalled, JOB)
    r.set(k.lock(JOB), TOKEN)


def double_placed(r: Any, k: Any) -> bool:
    return r.lpos(k.wait, JOB) is not None and r.zscore(k.completed, JOB) is not None


# -- an independent count of the interleavings: a model of the toy's commands ------------------------------

Step = Callable[[dict[str, Any]], Any]


def _m_finish_split(st: dict[str, Any]) -> Generator[Step, Any, None]:
    if (yield lambda s: s["lock"]) != TOKEN:
        return
    yield lambda s: s.update(lock=None)
    yield lambda s: s["stalled"].discard(JOB)
    yield lambda s: s["active"].remove(JOB) if JOB in s["active"] else None
    yield lambda s: s["completed"].add(JOB)


def _m_script(s: dict[str, Any]) -> None:
    if s["lock"] == TOKEN:
        s["lock"] = None
        s["stalled"].discard(JOB)
        if JOB in s["active"]:
            s["active"].remove(JOB)
        s["completed"].add(JOB)


def _m_finish_atomic(loaded: bool) -> Callable[[dict[str, Any]], Generator[Step, Any, None]]:
    def gen(st: dict[str, Any]) -> Generator[Step, Any, None]:
        if not loaded:  # EVALSHA answered NOSCRIPT, then SCRIPT LOAD: neither touches the queue
            yield lambda s: None
            yield lambda s: None
        yield _m_script
    return gen


def _m_finish_script_split(st: dict[str, Any]) -> Generator[Step, Any, None]:
    yield lambda s: None  # EVALSHA → NOSCRIPT
    yield lambda s: None  # SCRIPT LOAD
    yield from _m_finish_split(st)  # then the script one redis.call per step


def _m_sweep(st: dict[str, Any]) -> Generator[Step, Any, None]:
    ids = yield lambda s: sorted(s["stalled"])
    for jid in ids:
        if not (yield lambda s: s["lock"] is not None):
            removed = yield lambda s, j=jid: (s["active"].remove(j), 1)[1] if j in s["active"] else 0
            if removed:
                yield lambda s, j=jid: s["wait"].append(j)
        yield lambda s, j=jid: s["stalled"].discard(j)


def model_count(finish: Callable[[dict[str, Any]], Generator[Step, Any, None]]) -> tuple[int, int]:
    """Every schedule of W1 (``finish``) and S1 (the sweep) on the toy's state, each command one step:
    (complete interleavings, those ending in double placement)."""

    def start(gen: Generator[Step, Any, None]) -> Step | None:
        return next(gen, None)

    def fresh() -> dict[str, Any]:
        return {"lock": TOKEN, "active": [JOB], "stalled": {JOB}, "wait": [], "completed": set()}

    # A schedule is a string of actor ids; replaying a prefix from scratch keeps the model trivially right.
    def replay(prefix: str) -> tuple[dict[str, Any], dict[str, Step | None]]:
        st = fresh()
        gens = {"W": finish(st), "S": _m_sweep(st)}
        pending = {a: start(g) for a, g in gens.items()}
        for a in prefix:
            step = pending[a]
            assert step is not None
            reply = step(st)
            try:
                pending[a] = gens[a].send(reply)
            except StopIteration:
                pending[a] = None
        return st, pending

    total = bad = 0
    stack = [""]
    while stack:
        prefix = stack.pop()
        st, pending = replay(prefix)
        ready = [a for a, s in pending.items() if s is not None]
        if not ready:
            total += 1
            bad += JOB in st["wait"] and JOB in st["completed"]
        stack.extend(prefix + a for a in ready)
    return total, bad


MODELS = {
    "split": _m_finish_split,
    "atomic-loaded": _m_finish_atomic(True),       # frontrun's setup loads the script: one EVALSHA
    "atomic": _m_finish_atomic(False),             # emqlab's run cache starts without it: 3 round trips
    "atomic-split": _m_finish_script_split,        # emqlab split mode: the script's redis.calls as steps
}

# -- frontrun, in a child process under its CLI ------------------------------------------------------------


@dataclass
class Case:
    tool: str
    toy: str           # "split" or "atomic"
    backend: str       # "fakeredis" or "live"
    how: str           # how the tool was asked
    repeat: int = 10
    options: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    interleavings: int | None = None   # of the commands this tool's W1 sends (model count)
    w1_round_trips: str = ""


def _frontrun_child(specs: list[dict[str, Any]]) -> None:
    """Run frontrun on each case of ``specs`` (``backend``, ``variant``, ``repeat``, ``options``): one JSON
    line per run on stdout. Runs under ``frontrun python …`` (see the module docstring)."""
    import fakeredis
    import frontrun
    import redis

    from emqlab.protocol.keys import QueueKeys

    def run_once(backend: str, variant: str, options: dict[str, Any], url: str) -> dict[str, Any]:
        k = QueueKeys(f"frbench-{uuid.uuid4().hex[:10]}")
        server: list[Any] = []

        def client() -> Any:
            if backend == "fakeredis":
                return fakeredis.FakeRedis(server=server[-1])
            return redis.Redis.from_url(url)

        class State:
            def __init__(self) -> None:
                if backend == "fakeredis":  # a fresh server per execution
                    server.append(fakeredis.FakeServer())
                self.w, self.s = client(), client()
                seed_state(self.w, k)
                if variant == "atomic":  # the script is in the server's cache before the workers start
                    self.w.script_load(FINISH_LUA)

        def w1(st: State) -> None:
            (finish_split if variant == "split" else finish_atomic)(st.w, k, 1)

        def s1(st: State) -> None:
            sweep(st.s, k)

        def invariant(st: State) -> bool:
            return not double_placed(st.w, k)

        row: dict[str, Any] = {}
        t0 = time.perf_counter()
        try:
            res = frontrun.explore(setup=State, workers=[w1, s1], invariant=invariant, **options)
        except Exception as e:  # noqa: BLE001 - recorded as the result of the run
            row.update(error=f"{type(e).__name__}: {e}")
        else:
            row.update(holds=res.property_holds, explored=res.num_explored, explanation=res.explanation,
                       inconclusive=res.inconclusive_reason, reproduced=[res.reproduction_successes,
                                                                         res.reproduction_attempts])
        row["wall_s"] = time.perf_counter() - t0
        if backend == "live":
            with contextlib.suppress(Exception):
                redis.Redis.from_url(url).delete(k.lock(JOB), k.active, k.stalled, k.wait, k.completed)
        return row

    for n, spec in enumerate(specs):
        for i in range(spec["repeat"]):
            row = run_once(spec["backend"], spec["variant"], spec["options"], spec["url"])
            print(json.dumps({"case": n, "rep": i, **row}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # a timed-out execution leaves its threads blocked; do not wait for them


def run_frontrun(cases: list[Case], url: str) -> None:
    """Run ``cases`` (all frontrun) in one child process under frontrun's CLI; fills their ``runs``."""
    exe = Path(sys.executable).parent / "frontrun"
    specs = [{"backend": c.backend, "variant": c.toy, "repeat": c.repeat, "options": c.options, "url": url}
             for c in cases]
    cmd = [str(exe), sys.executable, str(Path(__file__).resolve()), "--frontrun-child", json.dumps(specs)]
    budget = 60 + sum(c.repeat * (5 + 2 * float(c.options.get("deadlock_timeout", 5))) for c in cases)
    out, err, why = "", "", None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, cwd=ROOT)
        out, err = proc.stdout, proc.stderr
        if proc.returncode:
            why = f"the frontrun child exited {proc.returncode}"
    except FileNotFoundError as e:
        why = f"cannot start the frontrun CLI: {e}"
    except subprocess.TimeoutExpired as e:
        why = f"the frontrun child did not finish within {budget:.0f} s"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            cases[row.pop("case")].runs.append(row)
    tail = " / ".join([x for x in err.strip().splitlines() if x.strip() and not x.startswith("frontrun: using")][-3:])
    for c in cases:
        if len(c.runs) < c.repeat:
            c.error = f"{why or 'the frontrun child stopped'} after {len(c.runs)} of {c.repeat} runs" + \
                (f": {tail}" if tail else "")


_HEADLINE = re.compile(r"^\s*(?P<kind>[A-Z][\w -]*?): threads? [\d, and]+ (?P<rest>.*)$")
_PREFIX = re.compile(r"emq:\{frbench-[0-9a-f]+\}:")
#: the toy's source lines as the Redis commands they send (to read frontrun's source-line trace)
_SOURCE_COMMANDS = [("r.get(", "GET lock"), ("r.delete(", "DEL lock"), ("r.srem(k.stalled, JOB)", "SREM stalled"),
                    ("r.lrem(k.active, 0", "LREM active"), ("r.zadd(", "ZADD completed"),
                    ("script(keys=", "EVALSHA"), ("r.smembers(", "SMEMBERS stalled"), ("r.exists(", "EXISTS lock"),
                    ("r.lrem(k.active, 1", "LREM active"), ("r.rpush(", "RPUSH wait"),
                    ("r.srem(k.stalled, jid)", "SREM stalled")]
_ACTORS = {"0": "W1", "1": "S1"}


def frontrun_named(run: dict[str, Any]) -> str:
    """What a frontrun run names: its explanation's headline (``Write-write conflict: threads 0 and 1 both
    wrote to redis:<key>…``, ``Lost update: …``) as ``kind on `key```, the key without the run's prefix."""
    text = run.get("explanation") or ""
    for line in text.splitlines():
        m = _HEADLINE.match(line)
        if m:
            key = re.search(r"redis:(\S+?)(?::db=\S*)?(?:\.?\s|\.?$)", m.group("rest"))
            where = f" on `{_PREFIX.sub('', key.group(1))}`" if key else ""
            return f"{m.group('kind').lower()}{where}"
    return next((x.strip() for x in text.splitlines() if x.strip()), "")[:80]


def frontrun_trace(run: dict[str, Any]) -> tuple[list[str], int]:
    """The commands of a frontrun explanation's trace, in its order (``W1 DEL lock``), and how many of its
    entries are socket events."""
    steps: list[str] = []
    sockets = 0
    for line in (run.get("explanation") or "").splitlines():
        m = re.match(r"\s*Thread (\d+) \| (.*)$", line)
        if not m:
            continue
        who, rest = _ACTORS.get(m.group(1), f"thread {m.group(1)}"), m.group(2)
        if "socket:" in rest and not re.match(r"\S+\.py:\d+", rest):
            sockets += 1
            continue
        name = next((c for src, c in _SOURCE_COMMANDS if src in rest), rest.strip()[:40])
        steps.append(f"{who} {name}")
    return steps, sockets


# -- emqlab ------------------------------------------------------------------------------------------------

_WINDOW = re.compile(r"after (?P<actor>\S+) cleared the lock \(step (?P<k>\d+), (?P<kc>\w+)\) and before "
                     r"(?P=actor)'s next command \(step (?P<m>\d+), (?P<mc>\w+)\)")


def run_emqlab(backend: str, variant: str, mode: str, repeat: int, url: str) -> Case:
    from emqlab.backend.connect import connect
    from emqlab.check.api import explore_actors

    fn = finish_split if variant == "split" else finish_atomic

    def w1(r: Any, q: Any) -> None:
        fn(r, q.keys, q.now())

    def s1(r: Any, q: Any) -> None:
        sweep(r, q.keys)

    how = f'explore_actors(mode="{mode}")' + (" (script split per redis.call)" if variant == "atomic" and
                                               mode == "split" else "")
    case = Case("emqlab", variant, backend, how)
    for i in range(repeat):
        t0 = time.perf_counter()
        try:
            conn = connect(url) if backend == "live" else None
            res = explore_actors({"W1": w1, "S1": s1}, state={"active": [JOB], "stalled": [JOB]},
                                 locks={JOB: "W1"}, mode=mode, conn=conn)
        except Exception as e:  # noqa: BLE001 - recorded
            case.runs.append({"rep": i, "error": f"{type(e).__name__}: {e}", "wall_s": time.perf_counter() - t0})
            continue
        wall = time.perf_counter() - t0
        w = res.witness("double-placement")
        because = next((a["because"] for a in w.anomalies if a["kind"] == "double-placement"), "") if w else ""
        m = _WINDOW.search(because)
        case.runs.append({
            "rep": i, "wall_s": wall, "explored": res.report.explored, "raw": res.report.raw_interleavings,
            "kinds": list(res.kinds), "verdict": res.verdict.kind, "because": because,
            "window": f"{m['kc']} (step {m['k']}) … {m['mc']} (step {m['m']})" if m else None,
            "with": res.report.interleavings_with.get("double-placement", 0),
            "schedule": w.schedule if w else None})
    return case


# -- the table ----------------------------------------------------------------------------------------------


def _counts(values: list[Any]) -> str:
    if not values:
        return "–"
    distinct = sorted(set(values), key=values.index)
    if len(distinct) == 1:
        return f"{distinct[0]} (all {len(values)})"
    return ", ".join(str(v) for v in values)


def _tally(values: list[str]) -> str:
    """``a`` when every value is ``a``, else ``a (7), b (3)``."""
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    if len(counts) <= 1:
        return next(iter(counts), "")
    return ", ".join(f"{v} ({n})" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _wall(runs: list[dict[str, Any]]) -> str:
    t = [r["wall_s"] for r in runs if "wall_s" in r]
    return f"{statistics.median(t):.2f} ({min(t):.2f}–{max(t):.2f})" if t else "–"


def summarise(case: Case) -> dict[str, str]:
    runs = case.runs
    errors = [r["error"] for r in runs if "error" in r]
    ok = [r for r in runs if "error" not in r]
    if case.tool == "frontrun":
        holds = [r.get("holds") for r in ok]
        verdicts = {True: "holds", False: "fails", None: "inconclusive"}
        found = sum(h is False for h in holds)
        named = _tally([frontrun_named(r) for r in ok if r.get("holds") is False])
        inconcl = sorted({r["inconclusive"] for r in ok if r.get("inconclusive")})
        verdict = _counts([verdicts[h] for h in holds])
        note = named if named else ("–" if not inconcl else "inconclusive: an execution timed out")
    else:
        found = sum("double-placement" in r["kinds"] for r in ok)
        verdict = _counts([r["verdict"] for r in ok])
        windows = sorted({r["window"] for r in ok if r.get("window")})
        note = ("window " + "; ".join(windows)) if windows else "–"
    if errors or case.error:
        note = f"error: {case.error or errors[0]}"
    exact = _counts([r["raw"] for r in ok]) if case.tool == "emqlab" else "–"
    return {
        "tool": case.tool, "toy": case.toy, "backend": case.backend, "how": case.how,
        "w1": case.w1_round_trips, "interleavings": str(case.interleavings) if case.interleavings else "–",
        "exact": exact, "explored": _counts([r.get("explored") for r in ok]),
        "found": f"{found} of {len(runs)}", "verdict": verdict, "named": note, "wall": _wall(runs)}


COLUMNS = [("tool", "tool"), ("toy", "toy"), ("backend", "backend"), ("how", "how it was run"),
           ("w1", "W1 round trips"), ("interleavings", "interleavings (model)"),
           ("exact", "interleavings (reported)"), ("explored", "explored per run"),
           ("found", "double placement found"), ("verdict", "verdict"), ("named", "what it names"),
           ("wall", "s per run, median (min–max)")]


def markdown(rows: list[dict[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    align = "|" + "|".join("---:" if key in ("interleavings", "exact", "wall") else "---" for key, _ in COLUMNS) + "|"
    body = ["| " + " | ".join(r[key].replace("|", "\\|") for key, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([head, align, *body])


def plain(rows: list[dict[str, str]]) -> str:
    widths = {key: max(len(title), *(len(r[key]) for r in rows)) for key, title in COLUMNS}
    keys = [key for key, _ in COLUMNS]
    out = ["  ".join(title.ljust(widths[key]) for key, title in COLUMNS)]
    out += ["  ".join(r[k].ljust(widths[k]) for k in keys) for r in rows]
    return "\n".join(out)


# -- main ---------------------------------------------------------------------------------------------------

FAST = {"deadlock_timeout": 0.5, "timeout_per_run": 0.5}


def plan(n: int, full: bool) -> tuple[list[Case], list[Case], list[tuple[str, str, str]]]:
    """The frontrun cases on the live server, on fakeredis, and the emqlab cases (toy, mode, backend)."""
    live = [Case("frontrun", "split", "live", "explore() defaults", n),
            Case("frontrun", "atomic", "live", "explore() defaults", n)]
    if full:
        live.append(Case("frontrun", "split", "live", "explore(stop_on_first=False)", 1, {"stop_on_first": False}))
    fake = [Case("frontrun", "split", "fakeredis", "explore() defaults", 1),
            Case("frontrun", "split", "fakeredis", "explore(deadlock_timeout=0.5, timeout_per_run=0.5)", n, FAST),
            Case("frontrun", "atomic", "fakeredis", "explore(deadlock_timeout=0.5, timeout_per_run=0.5)", n, FAST)]
    emq = [(toy, mode, backend) for toy, mode in (("split", "split"), ("atomic", "atomic"), ("atomic", "split"))
           for backend in ("fakeredis", "live")]
    return live, fake, emq


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--frontrun-child":
        _frontrun_child(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--redis", default=LIVE_URL, help=f"the live server (default {LIVE_URL})")
    ap.add_argument("--full", action="store_true",
                    help="also run frontrun's whole search once (stop_on_first=False; one to two minutes on 2 cores)")
    ap.add_argument("--raw", type=Path, help="write every exploration's record (JSON) to this file")
    ap.add_argument("--write-docs", action="store_true", help="replace the frontrun section of docs/benchmarks.md")
    a = ap.parse_args()
    n = a.repeat
    t_all = time.perf_counter()
    load0 = os.getloadavg()[0]

    counts = {name: model_count(gen) for name, gen in MODELS.items()}
    for name, (total, bad) in counts.items():
        print(f"model: {name}: {total} interleavings, {bad} with double placement")

    live, fake, emq = plan(n, a.full)
    for group in (live, fake):
        t0 = time.perf_counter()
        run_frontrun(group, a.redis)
        print(f"frontrun on {group[0].backend}: {sum(len(c.runs) for c in group)} explorations,"
              f" {time.perf_counter() - t0:.1f} s" + "".join(f" — {c.error}" for c in group if c.error), flush=True)
    cases = live + fake
    for toy, mode, backend in emq:
        t0 = time.perf_counter()
        cases.append(run_emqlab(backend, toy, mode, n, a.redis))
        print(f"emqlab {toy} toy, mode {mode}, {backend}: {n} explorations, {time.perf_counter() - t0:.1f} s",
              flush=True)
    for c in cases:
        if c.toy == "split":
            c.interleavings, c.w1_round_trips = counts["split"][0], "5"
        elif c.tool == "frontrun":
            c.interleavings, c.w1_round_trips = counts["atomic-loaded"][0], "1 (EVALSHA; script loaded in setup)"
        elif "split per" in c.how:
            c.interleavings, c.w1_round_trips = counts["atomic-split"][0], "2 + 5 (NOSCRIPT, LOAD, 5 redis.calls)"
        else:
            c.interleavings, c.w1_round_trips = counts["atomic"][0], "3 (EVALSHA → NOSCRIPT, LOAD, EVALSHA)"
    total_s = time.perf_counter() - t_all
    load = max(load0, os.getloadavg()[0])
    rows = [summarise(c) for c in cases]
    print()
    print(plain(rows))
    print()
    notes = facts(cases, rows, counts)
    for line in notes:
        print(f"- {line}")
    print(f"\nfrontrun {importlib.metadata.version('frontrun')}; total {total_s:.0f} s; load average up to {load:.1f}")
    if a.raw:
        a.raw.write_text(json.dumps([{"tool": c.tool, "toy": c.toy, "backend": c.backend, "how": c.how,
                                      "error": c.error, "runs": c.runs} for c in cases], indent=1))
    if a.write_docs:
        write_docs(section(rows, notes, total_s, load, n, a.full, a.redis))
        print(f"wrote {DOCS}")


def _ok(c: Case) -> list[dict[str, Any]]:
    return [r for r in c.runs if "error" not in r]


def _only_before(steps: list[str], a: str = "W1 SREM stalled", b: str = "S1 SMEMBERS stalled") -> bool:
    """``a`` is listed, and only before ``b``."""
    return a in steps and b in steps and a not in steps[steps.index(b) + 1:]


def facts(cases: list[Case], rows: list[dict[str, str]], counts: dict[str, tuple[int, int]]) -> list[str]:
    """What the runs show, one statement each, every one computed from the runs."""
    out: list[str] = []
    fr = [c for c in cases if c.tool == "frontrun"]
    em = [c for c in cases if c.tool == "emqlab"]

    for c in fr:
        ok = _ok(c)
        if c.error:
            out.append(f"frontrun, {c.toy} toy, {c.backend}, {c.how}: {c.error}.")
        failing = [r for r in ok if r.get("holds") is False]
        if failing:
            rep = [r.get("reproduced") or [0, 0] for r in failing]
            named = _tally([f'"{frontrun_named(r)}"' for r in failing])
            out.append(
                f"frontrun, {c.toy} toy, {c.backend}, {c.how}: property_holds=False in {len(failing)} of "
                f"{len(c.runs)} explorations, each after {_counts([r.get('explored') for r in ok])} executions "
                f"(with `stop_on_first=True` it stops at the first failing execution); its explanation's "
                f"headline{'s' if ', ' in named else ''}: {named}; counterexample reproduced "
                f"{_counts([f'{a}/{b}' for a, b in rep])}.")
            orders: dict[tuple[str, ...], int] = {}
            for r in failing:
                order = tuple(frontrun_trace(r)[0])
                orders[order] = orders.get(order, 0) + 1
            listed = {x for order in orders for x in order}
            missing = [x for x in ("S1 RPUSH wait", "W1 ZADD completed") if x not in listed]
            backwards = sum(n for order, n in orders.items() if _only_before(list(order)))
            shown = "; ".join(f"{', '.join(order)} ({n} of {len(failing)})" for order, n in orders.items())
            out.append(
                f"frontrun's trace of that counterexample ({c.toy} toy, {c.backend}), as the commands of its source "
                f"lines, in its order: {shown}"
                + (f". It does not list {' or '.join(missing)}, two of the ten commands every double placement "
                   "runs" if missing else "")
                + (f". In {backwards} of {len(failing)} it lists W1's SREM stalled only before S1's SMEMBERS "
                   "stalled, though a double placement needs the server to run them the other way round"
                   if backwards else "")
                + ". Socket events between its entries, per exploration: "
                + _counts([frontrun_trace(r)[1] for r in failing]) + ".")
        inc = next((r for r in ok if r.get("inconclusive")), None)
        if inc is not None:
            out.append(f"frontrun, {c.toy} toy, {c.backend}, {c.how}: property_holds=None (inconclusive) in "
                       f"{sum(r.get('holds') is None for r in ok)} of {len(c.runs)} explorations, after "
                       f"{_counts([r.get('explored') for r in ok])} executions: \"{inc['inconclusive']}\"")
        held = [r for r in ok if r.get("holds") is True]
        if held:
            out.append(f"frontrun, {c.toy} toy, {c.backend}, {c.how}: property_holds=True in {len(held)} of "
                       f"{len(c.runs)} explorations, {_counts([r['explored'] for r in ok])} executions each; W1 "
                       f"sends {c.w1_round_trips}, and the commands have {c.interleavings} interleavings.")
    fr_atomic = [c for c in fr if c.toy == "atomic" and c.backend == "live" and _ok(c)]
    em_inside = [c for c in em if c.toy == "atomic" and "split per" in c.how and
                 any("double-placement" in r["kinds"] for r in _ok(c))]
    if fr_atomic and em_inside:
        c, e = fr_atomic[0], em_inside[0]
        out.append(f"On the atomic toy frontrun explored {_counts([r.get('explored') for r in _ok(c)])} executions, "
                   f"as many as there are interleavings of W1's one EVALSHA against the sweep ({c.interleavings}); "
                   f"emqlab, told to split the same script into its redis.calls, finds the double placement "
                   f"inside it ({e.backend}: {sum('double-placement' in r['kinds'] for r in _ok(e))} of "
                   f"{len(e.runs)} explorations).")
    if any(c.backend == "fakeredis" and any(r.get("holds") is None for r in _ok(c)) for c in fr):
        out.append(FAKEREDIS_CAUSE)

    for c in em:
        ok = _ok(c)
        errs = [r["error"] for r in c.runs if "error" in r]
        if errs:
            out.append(f"emqlab, {c.toy} toy, {c.backend}, {c.how}: {len(errs)} of {len(c.runs)} explorations "
                       f"raised: {errs[0]}")
        r = next((r for r in ok if r.get("because")), None)
        if r is not None:
            out.append(f"emqlab, {c.toy} toy, {c.backend}, {c.how}: double placement in {r['with']} of {r['raw']} "
                       f"interleavings; witness `{r['schedule']}`: \"{r['because']}\"")
        elif ok:
            out.append(f"emqlab, {c.toy} toy, {c.backend}, {c.how}: verdict {_counts([x['verdict'] for x in ok])}, "
                       f"{_counts([x['explored'] for x in ok])} runs of {_counts([x['raw'] for x in ok])} "
                       "interleavings.")
    ex: dict[tuple[str, str], set[Any]] = {}
    for c in em:
        ex.setdefault((c.toy, c.how), set()).update(x.get("explored") for x in _ok(c))
    if ex and all(len(v) == 1 for v in ex.values()):
        out.append("emqlab's explored count was the same in every exploration of a case, on fakeredis and on "
                   "the live server: " + "; ".join(f"{toy} toy, {how}: {next(iter(v))}" for (toy, how), v in
                                                    ex.items()) + ".")
    over = [c for c in cases if c.interleavings and any((r.get("explored") or 0) > c.interleavings for r in _ok(c))]
    listed = [f"{c.tool}, {c.toy} toy, {c.backend}, {c.how} ({_counts([r.get('explored') for r in _ok(c)])} > "
              f"{c.interleavings})" for c in over]
    out.append("explored more executions than the commands have interleavings: " + ("; ".join(listed) or "none")
               + ".")
    walls = {(c.tool, c.toy, c.backend, c.how): statistics.median([r["wall_s"] for r in c.runs])
             for c in cases if c.runs}
    pairs = []
    for (tool, toy, backend, how), w in walls.items():
        if tool != "frontrun" or how != "explore() defaults" or backend != "live":
            continue
        mode = "split" if toy == "split" else "atomic"
        e = walls.get(("emqlab", toy, backend, f'explore_actors(mode="{mode}")'))
        if e is None:
            continue
        emq_how = f'explore_actors(mode="{mode}")'
        rt = {c.tool: c.w1_round_trips.split(" ")[0] for c in cases if c.toy == toy and c.backend == backend
              and c.how in ("explore() defaults", emq_how)}
        pairs.append(f"{toy} toy on the live server: frontrun {w:.2f} s, emqlab {e:.2f} s (W1 round trips: "
                     f"{rt.get('frontrun')} under frontrun, {rt.get('emqlab')} under emqlab)")
    if pairs:
        out.append("median wall time per exploration: " + "; ".join(pairs) + ".")
    out.append("interleavings by enumeration of the model: " + "; ".join(
        f"{k}: {t} ({b} with double placement)" for k, (t, b) in counts.items()) + ".")
    return out


FAKEREDIS_CAUSE = (
    "Why frontrun is inconclusive on fakeredis: fakeredis's in-process socket hands each reply over with a "
    "`threading.Event`, which frontrun replaces with its cooperative Event; `Event.set()` inside a command's "
    "reply yields to frontrun's scheduler while that command's Redis scheduling point is still open, and the "
    "other thread waits for its turn in `before_io`, so neither runs until the execution times out (a thread "
    "dump of a hung execution, taken while writing this benchmark: W1 in `zadd` → `fakeredis/_socket/_base.py` "
    "`put_response` → `frontrun/_cooperative.py` `Event.set` → `wait_for_turn`; S1 in `smembers` → "
    "`scheduler.before_io`). With frontrun's default 5 s timeouts the verdict is the same (the row "
    "\"explore() defaults\" on fakeredis); the short timeouts of the other rows only shorten the wait.")


def section(rows: list[dict[str, str]], notes: list[str], total_s: float, load: float, n: int, full: bool,
            url: str) -> str:
    stamp = time.strftime("%Y-%m-%d")
    command = ".venv/bin/python benchmarks/bench_frontrun.py" + (f" --repeat {n}" if n != 10 else "") + \
        (f" --redis {url}" if url != LIVE_URL else "") + (" --full" if full else "") + " --write-docs"
    fr_version = importlib.metadata.version("frontrun")
    parts = [
        "## emqlab vs frontrun",
        "",
        f"### emqlab vs frontrun {fr_version} on the toy split finish against a sweep ({stamp}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()})",
        "",
        f"`{command}` (the whole benchmark: {total_s:.0f} s; load average up to {load:.1f} on the 2 cores, "
        "shared with other test suites, so wall times are noisy)",
        "",
        "The toy is `stalled-finish` written as redis-py calls (the docstring of `benchmarks/bench_frontrun.py`): "
        "W1 finishes job 1 as `GET lock`, `DEL lock`, `SREM stalled`, `LREM active`, `ZADD completed` (split) "
        "or as one Lua script through `register_script` (atomic); S1 sweeps `stalled`. Both tools run the same "
        "functions, and the anomaly is double placement (job 1 in `wait` and in `completed`). frontrun runs "
        "`frontrun.explore(setup, workers=[finish, sweep], invariant)` under its CLI (`frontrun python …`), "
        "with its defaults (`preemption_bound=2`, `stop_on_first=True`) unless the row says otherwise; emqlab "
        "runs `emqlab.api.explore_actors` exhaustively and unbounded. *Interleavings (model)*: every schedule "
        "of the Redis commands that tool's W1 sends against the sweep, enumerated on an in-memory model of the "
        "toy (the atomic toy's W1 sends 3 round trips under emqlab, whose runs start with a script cache "
        "without the script, so `register_script` gets NOSCRIPT and loads it, and 1 under frontrun, whose "
        "setup loads the script); *interleavings (reported)*: emqlab's own count. *Explored per run*: "
        "frontrun's `num_explored`, "
        f"emqlab's runs executed. Live server: Redis {server_version(url)} at `{url}` (shared), keys under a "
        "fresh prefix, deleted afterwards.",
        "",
        markdown(rows),
        "",
        "What the runs show (generated from the same runs):",
        "",
        *[f"- {x}" for x in notes],
    ]
    if not full:
        parts += ["", "Not in this run: frontrun's search to the end of its bound (`stop_on_first=False`, one "
                  "exploration of the split toy on the live server), which `--full` adds (one to two minutes here)."]
    return "\n".join(parts)


def server_version(url: str) -> str:
    import redis

    try:
        return str(redis.Redis.from_url(url).info("server").get("redis_version", "?"))
    except redis.RedisError as e:
        return f"(unreachable: {e})"


def write_docs(body: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{body}\n{END}"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOCS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
