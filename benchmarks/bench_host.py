"""µs per call of a 10-command script: EVALSHA vs the client-side Lua host, on fakeredis and live Redis.

    python benchmarks/bench_host.py [--calls N] [--redis URL] [--write docs/benchmarks.md]

The host sends each of the script's 10 ``redis.call``s as its own command (10 round trips), so on a live
server it pays 10 RTTs where EVALSHA pays one; on fakeredis there is no network and the comparison shows
the host's own overhead. Target (issue 2): host on fakeredis within 1.5x of fakeredis's own EVALSHA.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from emqlab.backend.connect import BackendError, Namespace, command_executor, connect, unique_queue
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting.host import LuaHost
from emqlab.scripting.registry import Script, ScriptSet

TEN_COMMANDS = b"""
redis.call('SET', KEYS[1], ARGV[1])
local v = redis.call('GET', KEYS[1])
redis.call('HSET', KEYS[2], 'a', v, 'b', '2')
local h = redis.call('HGET', KEYS[2], 'a')
redis.call('RPUSH', KEYS[3], h)
local n = redis.call('LLEN', KEYS[3])
redis.call('LREM', KEYS[3], 1, h)
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
return redis.call('INCR', KEYS[5]) + n
"""


def measure(fn, calls: int, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    """Median over ``repeats`` batches of ``calls`` calls, in µs per call."""
    fn()  # warm up (loads the script, compiles the bytecode)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def bench(conn, calls: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    keys = QueueKeys(unique_queue("bench"))
    ns = Namespace(conn, keys).claim()
    script = Script("tenCommands", 5, TEN_COMMANDS)
    scripts = ScriptSet({"tenCommands": script}, "bench")
    k = [keys.key(s) for s in ("s", "h", "l", "set", "n")]
    host = LuaHost()
    raw = command_executor(conn)
    try:
        evalsha = measure(lambda: scripts.execute(conn, "tenCommands", k, ["x"]), calls)
        hosted = measure(lambda: host.run(raw, script, k, ["x"]), calls)
    finally:
        ns.release()
    return evalsha, hosted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--redis", default="live", help="live server URL ('live' = $EMQLAB_REDIS_URL or 127.0.0.1)")
    ap.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    a = ap.parse_args()
    rows = []
    fe, fh = bench(connect(), a.calls)
    rows.append(("fakeredis (in process)", fe, fh))
    try:
        le, lh = bench(connect(a.redis), a.calls)
        rows.append((f"live Redis ({a.redis})", le, lh))
    except BackendError as e:
        print(f"live Redis skipped: {e}")
    lines = [
        "| backend | EVALSHA µs/call | host µs/call (10 round trips) | host / EVALSHA |",
        "|---|---:|---:|---:|",
    ]
    for name, e, h in rows:
        lines.append(f"| {name} | {e:.1f} | {h:.1f} | {h / e:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if a.write:
        stamp = time.strftime("%Y-%m-%d")
        text = (
            f"\n### Lua host vs EVALSHA, 10-command script ({stamp}, {platform.machine()}, "
            f"Python {platform.python_version()})\n\n`python benchmarks/bench_host.py --calls {a.calls}`\n\n"
            f"{table}\n"
        )
        with a.write.open("a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
