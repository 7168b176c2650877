"""What emqlab needs of a live server, as Redis ACL rules: the key patterns its runs write under and the
commands it sends — one table, used by the docs (``docs/cli.md``, generated) and by the tests that run
emqlab under an ACL user limited to exactly these (``tests/test_acl.py``).

Key patterns: every run's queue is ``q-<8 hex>`` (:func:`emqlab.backend.namespace.unique_queue`), so its keys are
``emq:{q-…}:…``; the run index (:data:`emqlab.backend.namespace.RUN_INDEX`) sits under the same pattern.

Commands: ``acl.json`` beside this module, which ``python scripts/gen_acl.py`` writes from what a Redis server
it starts *ran* while emqlab ran its workload on it — every shipped scenario in every mode it lists (the
scripts' own commands as the server counts them, a split run's one by one, an atomic run's inside EVALSHA:
Redis 7 checks a script's commands against the user too), a timed run in every mode, ``simulate``,
``replay`` and ``clean`` — with, for each command, the first item of that workload that sent it. Not a list
read off the source: a command a Python actor's inline script sends counts as much as one of ``lua/``.

A script of your own (``--lua``, ``--scripts bullmq``) or a Python actor of your own may send commands that
emqlab's do not; the user then needs them too (Redis answers ``NOPERM`` naming the command).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

#: key patterns (ACL ``~pattern``)
KEY_PATTERNS = ("emq:{q-*",)

#: the generated table (package data beside this module)
DATA_FILE = "acl.json"


@cache
def table() -> dict[str, Any]:
    """The generated table: ``{"header": {…, "redis_version": …}, "commands": {NAME: first sent by}}``."""
    return dict(json.loads(files("emqlab.scripting").joinpath(DATA_FILE).read_text("utf-8")))


def commands() -> list[str]:
    """The commands (``NAME`` or ``NAME|SUBCOMMAND``) emqlab needs, sorted."""
    return sorted(table()["commands"])


def first_sent_by(command: str) -> str:
    """Which item of the generator's workload first sent ``command`` (``"two-workers split"``, ``"timed run
    atomic"``, ``"emqlab clean"``). Raises KeyError for a command emqlab does not send."""
    return str(table()["commands"][command.upper()])


def setuser_rules(password: str) -> list[str]:
    """``ACL SETUSER <name>`` arguments for a user limited to emqlab's keys and commands."""
    return ["reset", "on", f">{password}", *(f"~{p}" for p in KEY_PATTERNS), "-@all",
            *(f"+{c.lower()}" for c in commands())]


def markdown() -> str:
    """The docs' table of what a restricted user needs."""
    return (f"Key pattern: `{'`, `'.join(KEY_PATTERNS)}` · commands ({len(commands())}, recorded on Redis"
            f" {table()['header']['redis_version']}): " + " ".join(f"`{c}`" for c in commands()))


__all__ = ["DATA_FILE", "KEY_PATTERNS", "commands", "first_sent_by", "markdown", "setuser_rules", "table"]
