#!/usr/bin/env python
"""Regenerate ``emqlab/protocol/commands.json``, the Redis command table, from a live server's ``COMMAND INFO``.

Usage::

    python scripts/gen_commands.py [REDIS_URL] [--output PATH | --check]

``REDIS_URL`` defaults to ``$EMQLAB_REDIS_URL`` or ``redis://127.0.0.1:6379/0``. The script only reads the
server (``INFO server`` and ``COMMAND INFO``); it never writes to it. ``--check`` compares instead of writing
and exits 1 when the committed file differs.

File shape (plain JSON, keys sorted, one command per line so diffs stay readable)::

    {"header": {"format": 1, "redis_version": "7.0.15", "source": "COMMAND INFO",
                "regenerate": "python scripts/gen_commands.py [REDIS_URL]"},
     "commands": {
       "lmove": {"arity": 5, "flags": ["denyoom", "write"],
                 "key_specs": [[["ACCESS", "DELETE", "RW"], ["index", 1], ["range", 0, 1, 0]], ...]},
       "xinfo|stream": {...},   # subcommands are "container|sub", as the server names them
       "mod.cmd": {..., "key_specs": [], "legacy_keys": [1, 1, 1]},   # only for a command without specs
       ...}}

A key spec is ``[flags, begin_search, find_keys]`` (Redis docs, "Command key specifications"):
``begin_search`` is ``["index", i]``, ``["keyword", KEYWORD, startfrom]`` or ``["unknown"]``; ``find_keys``
is ``["range", lastkey, keystep, limit]``, ``["keynum", keynumidx, firstkey, keystep]`` or ``["unknown"]``.
Spec flags are upper-cased and sorted; the specs keep the server's order.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import redis

DEFAULT_URL = "redis://127.0.0.1:6379/0"
FORMAT = 1
REGENERATE = "python scripts/gen_commands.py [REDIS_URL]"
OUTPUT = Path(__file__).resolve().parent.parent / "emqlab" / "protocol" / "commands.json"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _as_dict(v: Any) -> dict[str, Any]:
    """A RESP2 reply for a map arrives as a flat list (or, parsed, as a dict); both become a dict."""
    if isinstance(v, dict):
        return {_text(k): x for k, x in v.items()}
    if isinstance(v, list):
        return {_text(v[i]): v[i + 1] for i in range(0, len(v) - 1, 2)}
    return {}


def _begin_search(bs: Any) -> list[Any]:
    d = _as_dict(bs)
    kind = _text(d.get("type", "unknown"))
    spec = _as_dict(d.get("spec", {}))
    if kind == "index":
        return ["index", int(spec["index"])]
    if kind == "keyword":
        return ["keyword", _text(spec["keyword"]), int(spec["startfrom"])]
    return ["unknown"]


def _find_keys(fk: Any) -> list[Any]:
    d = _as_dict(fk)
    kind = _text(d.get("type", "unknown"))
    spec = _as_dict(d.get("spec", {}))
    if kind == "range":
        return ["range", int(spec["lastkey"]), int(spec["keystep"]), int(spec["limit"])]
    if kind == "keynum":
        return ["keynum", int(spec["keynumidx"]), int(spec["firstkey"]), int(spec["keystep"])]
    return ["unknown"]


def _key_spec(raw: Any) -> list[Any]:
    d = _as_dict(raw)
    flags = sorted({_text(f).upper() for f in d.get("flags", [])})
    return [flags, _begin_search(d.get("begin_search")), _find_keys(d.get("find_keys"))]


def _walk(row: list[Any], out: dict[str, dict[str, Any]]) -> None:
    # COMMAND INFO row (Redis 7): name, arity, flags, first, last, step, acl categories, tips, key specs,
    # subcommands (rows of the same shape, named "container|sub").
    name = _text(row[0]).lower()
    entry: dict[str, Any] = {"arity": int(row[1]), "flags": sorted({_text(f).lower() for f in row[2]})}
    specs = row[8] if len(row) > 8 else None
    if specs is None:
        raise SystemExit(f"{name}: COMMAND INFO has no key specs; Redis >= 7.0 is required")
    entry["key_specs"] = [_key_spec(s) for s in specs]
    first, last, step = int(row[3]), int(row[4]), int(row[5])
    if not specs and (first > 0 or "movablekeys" in entry["flags"]):
        # A module command without key specs: keep the legacy (first, last, step) triple; emqlab.protocol.commands
        # treats such a command conservatively (every argument may be a key, read and written).
        entry["legacy_keys"] = [first, last, step]
    out[name] = entry
    for sub in (row[9] if len(row) > 9 else None) or []:
        _walk(sub, out)


def _raw(conn: redis.Redis, *args: str) -> Any:
    """Send one command and return the reply as the parser gives it: a second client on the same pool,
    without redis-py's response callback for ``COMMAND`` (which would reshape the reply)."""
    plain = redis.Redis(connection_pool=conn.connection_pool)
    plain.set_response_callback(args[0], lambda response, **_options: response)
    return plain.execute_command(*args)


def server_version(conn: redis.Redis) -> str:
    """The server's ``redis_version`` (``INFO server``)."""
    return _text(conn.info("server")["redis_version"])


def build_table(conn: redis.Redis) -> dict[str, Any]:
    """The whole table as a JSON-ready dict, read from the server behind ``conn``."""
    commands: dict[str, dict[str, Any]] = {}
    for row in _raw(conn, "COMMAND", "INFO"):
        if row is not None:
            _walk(row, commands)
    header = {"format": FORMAT, "redis_version": server_version(conn), "regenerate": REGENERATE,
              "source": "COMMAND INFO"}
    return {"header": header, "commands": dict(sorted(commands.items()))}


def render(table: dict[str, Any]) -> str:
    """Deterministic text of the table: sorted keys, one command per line, trailing newline."""
    def dump(v: Any) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    lines = ["{", f'"header":{dump(table["header"])},', '"commands":{']
    items = sorted(table["commands"].items())
    for i, (name, entry) in enumerate(items):
        lines.append(f"{dump(name)}:{dump(entry)}{',' if i < len(items) - 1 else ''}")
    lines += ["}", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", nargs="?", default=os.environ.get("EMQLAB_REDIS_URL") or DEFAULT_URL)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--output", "-o", type=Path, default=OUTPUT, help=f"where to write (default {OUTPUT})")
    g.add_argument("--check", action="store_true", help="compare with the committed file; exit 1 if it differs")
    a = p.parse_args(argv)
    conn = redis.Redis.from_url(a.url)
    text = render(build_table(conn))
    if a.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT}: {'up to date' if same else 'differs from the server'}")
        return 0 if same else 1
    a.output.write_text(text, encoding="utf-8")
    print(f"wrote {a.output} ({len(json.loads(text)['commands'])} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
