"""Seconds until a runaway script ends, per bomb, on each target: the client-side Lua host (the way a
``--lua`` script runs in every mode on a live server), the embedded server's EVAL, and ``emqlab simulate
--atomic --lua`` on fakeredis (a whole exploration, each run ending at the bomb).

    python benchmarks/bench_script_limits.py [--redis URL] [--write docs/benchmarks.md]

The acceptance of issue 25: every bomb ends within 10 s with a clear error. The limits are
:mod:`emqlab.scripting.sandbox`'s defaults (instructions, CPU seconds, commands, Lua heap).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from _tables import write_table

from emqlab.backend.connect import connect
from emqlab.backend.fakeserver import fake_server
from emqlab.scripting.host import LuaHost

#: name -> a script that never ends by itself
BOMBS = {
    "bare loop": "while true do end",
    "growing table": "local t = {} while true do t[#t + 1] = 1 end",
    "string.rep 1 GiB": "return #string.rep('x', 2 ^ 30)",
    "doubling string": "local s = 'x' while true do s = s .. s end",
    "loop of redis.call": "while true do redis.call('PING') end",
    "coroutine loop": "while true do coroutine.wrap(function() end)() end",
    "colliding strings": "local t = {} for i = 1, 1e9 do t[i] = string.rep('y', 1000) .. i end",
}


def _timed(fn) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    try:
        fn()
        what = "returned"
    except Exception as e:  # noqa: BLE001 - the error is the figure
        what = " ".join(str(e).split())
    return time.perf_counter() - t, what


def _why(text: str) -> str:
    for key, short in (("Lua instructions", "instructions"), ("of CPU", "CPU seconds"),
                       ("commands in one run", "commands"), ("not enough memory", "heap")):
        if key in text:
            return short
    return text[:40]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", type=Path)
    args = p.parse_args()
    host, conn = LuaHost(), connect()
    rows = []
    with fake_server():
        server = redis.Redis()
        with tempfile.TemporaryDirectory() as tmp:
            for name, src in BOMBS.items():
                h_s, h_why = _timed(lambda src=src: host.run(conn, src.encode(), [], []))
                s_s, s_why = _timed(lambda src=src: server.eval(src, 0))
                (Path(tmp) / "moveToFinished-14.lua").write_text(src + "\n")
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "emqlab", "simulate", "--atomic", "-s", "two-workers",
                                "--lua", tmp], capture_output=True, timeout=600)
                c_s = time.perf_counter() - t
                rows.append(f"| {name} | {h_s:.2f} ({_why(h_why)}) | {s_s:.2f} ({_why(s_why)}) | {c_s:.1f} |")
                print(rows[-1], flush=True)
    table = ("| bomb | host s (limit hit) | embedded server EVAL s (limit hit) | `simulate --atomic --lua` s |\n"
             "|---|---:|---:|---:|\n" + "\n".join(rows))
    print(table)
    if args.write:
        write_table(args.write, "Runaway scripts: seconds until each ends", "python benchmarks/bench_script_limits.py",
                     table)


if __name__ == "__main__":
    main()
