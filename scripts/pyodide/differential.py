"""The answers ``tests/test_pyodide_runtime.py`` asks of both runtimes — CPython with lupa, Pyodide with
the WebAssembly Lua (``emqlab.scripting.wasmlua``) — to compare them: run as a file (under Pyodide, by
``run.mjs``) it prints them as one JSON line, ``{"explore": {case: claims}, "host": {case: outcome},
"seconds": {case: s}}``; with ``--every``, the explorations are every shipped scenario in every mode (an
exploration that raises gives ``{"error": text}``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

#: (scenario, mode, explore options): the explorations whose claims must be the same
EXPLORATIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("stalled-finish", "split", {}),
    ("stalled-finish", "atomic", {}),
    ("two-workers", "split", {"preemptions": 1}),
    ("rq-two-schedulers", "split", {}),  # Python actors (RQ's released code): replayed under Pyodide
)
#: scripts run to their end on the host (replies given by the case): what each returns or its error's texts
SCRIPTS: dict[str, tuple[bytes, tuple[Any, ...]]] = {
    "syntax-error": (b"return (", ()),
    "runtime-error-line": (b"local x = nil\nlocal y = 1\nreturn x.y", ()),
    "instruction-budget": (b"local n = 0\nwhile true do n = n + 1 end", ()),
    "unknown-command": (b"return redis.call('NOPE', KEYS[1])", ()),
    "error-table": (b"return redis.error_reply('MY failure')", ()),
    "binary-round-trip": (b"local v = redis.call('GET', KEYS[1])\n"
                          b"return {v, #v, cmsgpack.pack(v), cjson.encode({v:byte(1, -1)}), redis.sha1hex(v)}",
                          (b"\x00\xa1\xff\x80 z",)),
    "status-and-pcall": (b"local ok = redis.call('SET', KEYS[1], 'v')\n"
                         b"local e = redis.pcall('INCR', KEYS[1])\nreturn {ok.ok, e.err, 2^53, 0.5, -7.9}",
                         (b"OK", RuntimeError("ERR value is not an integer or out of range"))),
}


def explore_case(name: str, mode: str, options: dict[str, Any]) -> str:
    return f"{name} {mode} {json.dumps(options, sort_keys=True)}"


def host_outcome(text: bytes, replies: tuple[Any, ...]) -> dict[str, Any]:
    """What the host makes of ``text`` (KEYS ``k``), its commands answered with ``replies`` in turn: the
    commands (each after the script's line that sent it), the result, or the error's text and its wire
    form."""
    import redis

    from emqlab.scripting.host import LuaHost, LuaScriptError

    host = LuaHost(max_instructions=1_000_000)
    try:
        run = host.start(text, [b"k"], [])
    except LuaScriptError as e:
        return {"compile_error": str(e)}
    sent = []
    answers = list(replies)
    while run.pending is not None:
        sent.append([run.line, *(c.decode("latin-1") for c in run.pending)])
        reply = answers.pop(0)
        run.resume(redis.ResponseError(str(reply)) if isinstance(reply, RuntimeError) else reply)
    out: dict[str, Any] = {"sent": sent}
    if run.error is not None:
        out["error"] = str(run.error)
        out["wire"] = repr(run.error.reply)
    else:
        out["result"] = repr(run.result)
    return out


def every() -> list[tuple[str, str, dict[str, Any]]]:
    """Every shipped scenario in every mode, default options."""
    from emqlab.engine.context import MODES
    from emqlab.engine.scenario import shipped_names

    return [(name, mode, {}) for name in shipped_names() for mode in MODES]


def answers(explorations: Sequence[tuple[str, str, dict[str, Any]]] = EXPLORATIONS) -> dict[str, Any]:
    from emqlab.engine.scenario import load
    from emqlab.explore import explore

    out: dict[str, Any] = {"explore": {}, "host": {}, "seconds": {}}
    for name, mode, options in explorations:
        case = explore_case(name, mode, options)
        t0 = time.perf_counter()
        try:
            out["explore"][case] = explore(load(name), mode, **options).claims()
        except Exception as e:  # noqa: BLE001 - reported as the case's answer, compared like any other
            out["explore"][case] = {"error": f"{type(e).__name__}: {e}"}
        out["seconds"][case] = round(time.perf_counter() - t0, 3)
    for case, (text, replies) in SCRIPTS.items():
        out["host"][case] = host_outcome(text, replies)
    return json.loads(json.dumps(out))


if __name__ == "__main__":
    print(json.dumps(answers(every() if "--every" in sys.argv[1:] else EXPLORATIONS)))
