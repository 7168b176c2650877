"""What emqlab needs of a live server, as Redis ACL rules: the key patterns its runs write under and the
commands it sends — one table, used by the docs (``docs/cli.md``, generated) and by the test that runs the
live suite's core under an ACL user limited to exactly these (``tests/test_acl.py``).

Key patterns: every run's queue is ``q-<8 hex>`` (:func:`emqlab.backend.namespace.unique_queue`), so its keys are
``emq:{q-…}:…``; the run index (:data:`emqlab.backend.namespace.RUN_INDEX`) sits under the same pattern. Commands:
those the Lua scripts call (a split run sends them one by one; an atomic run needs EVALSHA and SCRIPT
LOAD), and those emqlab sends itself (seeding the initial state, reading the final one, the run index, a
transaction finish, cleaning up). Redis 7 checks a script's commands against the user too.
"""

from __future__ import annotations

import re

from emqlab.scripting.registry import lua_dir

#: key patterns (ACL ``~pattern``)
KEY_PATTERNS = ("emq:{q-*",)

#: commands emqlab's Python code sends (ACL ``+command``); the scripts' own come from the Lua files
PYTHON_COMMANDS = frozenset(
    "EVALSHA EVAL SCRIPT|LOAD SCAN EXISTS TYPE GET SET DEL HGET HGETALL HMGET HSET LRANGE LLEN RPUSH LPUSH LPOS"
    " ZRANGE ZADD ZREM ZSCORE ZCARD SMEMBERS SADD SISMEMBER SCARD XRANGE XLEN MULTI EXEC WATCH UNWATCH PING"
    " CLIENT|SETNAME SCRIPT|EXISTS".split())

_CALL = re.compile(r"""\bcall\(\s*["']([A-Za-z]+)["']""")


def script_commands() -> frozenset[str]:
    """Every command the shipped Lua scripts (and their includes) call."""
    found: set[str] = set()
    for path in lua_dir().rglob("*.lua"):
        if "variants" in path.parts or "lib" in path.parts:
            continue
        found |= {m.upper() for m in _CALL.findall(path.read_text("utf-8"))}
    return frozenset(found)


def commands() -> list[str]:
    """The commands (``NAME`` or ``NAME|SUBCOMMAND``) emqlab needs, sorted."""
    return sorted(PYTHON_COMMANDS | script_commands())


def setuser_rules(password: str) -> list[str]:
    """``ACL SETUSER <name>`` arguments for a user limited to emqlab's keys and commands."""
    return ["reset", "on", f">{password}", *(f"~{p}" for p in KEY_PATTERNS), "-@all",
            *(f"+{c.lower()}" for c in commands())]


def markdown() -> str:
    """The docs' table of what a restricted user needs."""
    return (f"Key pattern: `{'`, `'.join(KEY_PATTERNS)}` · commands ({len(commands())}): "
            + " ".join(f"`{c}`" for c in commands()))


__all__ = ["KEY_PATTERNS", "PYTHON_COMMANDS", "commands", "markdown", "script_commands", "setuser_rules"]
