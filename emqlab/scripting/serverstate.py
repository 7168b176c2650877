"""The one home of what the client-side host asks a server about its state, where Redis's ``EVAL`` decides from
that state itself (Redis 7.0's ``src/server.c`` ``processCommand``, ``src/script.c`` ``scriptPrepareForRun``,
``scriptVerifyAllowStale``, ``src/script_lua.c`` ``luaRedisAclCheckCmdPermissionsCommand``):

* **up front**: Redis refuses a script with a ``#!lua`` line before it runs, from its flags and the server's
  state — over ``maxmemory`` without ``allow-oom`` (``OOM``), too few good replicas without ``no-writes``
  (``NOREPLICAS``), a stale replica without ``allow-stale`` (``MASTERDOWN``), a read-only replica or a failed
  save without ``no-writes`` (``READONLY``, ``MISCONF``). The host asks the server the same question with the
  same flags: ``EVAL`` of an empty script with the script's ``#!lua`` line (:func:`probe`), which the server
  answers with one of those refusals or runs (its reply ``1``). Only for a script with a ``#!lua`` line
  (without one, Redis checks these per command, as the host's commands meet them);
* **a stale replica**: a command's ``MASTERDOWN`` reply means the server is a replica whose link is down with
  ``replica-serve-stale-data no``, in which state Redis refuses every ``EVAL`` whose script lacks
  ``allow-stale`` before it runs (with or without a ``#!lua`` line), and refuses, inside an ``allow-stale``
  script, each command without the ``stale`` flag (:func:`stale`);
* **ACL**: ``redis.acl_check_cmd`` checks the calling user's ACL for a command and its arguments; the host asks
  ``ACL DRYRUN <user> <command> <args…>`` (Redis 7.0 and later), the user from ``ACL WHOAMI``
  (:func:`acl_verdict`). A server that refuses either (a user without the right to them, a server without
  ``ACL DRYRUN`` such as fakeredis) leaves the host's old answer, true.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emqlab.protocol import messages
from emqlab.scripting.replies import Command, Status, as_bytes

#: the codes of the refusals :func:`probe` may meet that Redis gives a script with a ``#!lua`` line before it
#: runs (any other error — no right to ``EVAL``, a busy server — says nothing of the script: it runs)
UP_FRONT_CODES = frozenset({b"OOM", b"NOREPLICAS", b"MASTERDOWN", b"READONLY", b"MISCONF"})


def probe(flags: frozenset[str], keys: Sequence[bytes] = ()) -> Command:
    """The ``EVAL`` that asks the server whether it would run a script with ``flags`` and ``keys`` now: an
    empty script with the same ``#!lua`` line and the same keys (``EVAL "#!lua flags=no-writes\\nreturn 1" 1
    k``; a cluster client sends it to the keys' node)."""
    return (b"EVAL", b"#!lua flags=" + ",".join(sorted(flags)).encode() + b"\nreturn 1", str(len(keys)).encode(),
            *keys)


def up_front(error: bytes) -> bytes | None:
    """The refusal the script itself gets (the error reply as the server wrote it), when ``error`` (the
    error reply to :func:`probe`, its code kept) is one Redis gives before a script runs; else ``None``."""
    return error if error.split(b" ", 1)[0] in UP_FRONT_CODES else None


def stale(error: bytes, flags: frozenset[str]) -> tuple[bool, bytes]:
    """What a script's command meets when the server replied ``error`` (its code kept): ``(whole, text)``.
    ``whole``: the whole run is refused with ``text`` as Redis refuses the ``EVAL`` of a script without
    ``allow-stale`` on a stale replica (no suffix, no ``pcall``); else the command's error is ``text`` —
    inside an ``allow-stale`` script a ``MASTERDOWN`` becomes Redis's own refusal of the command."""
    if not error.startswith(b"MASTERDOWN "):
        return False, error
    if "allow-stale" in flags:
        return False, messages.STALE_REPLICA_COMMAND.encode()
    return True, error


def acl_query(user: bytes | None, words: Command) -> Command:
    """The command that asks about ``redis.acl_check_cmd(*words)``: ``ACL WHOAMI`` while the user is not known,
    then ``ACL DRYRUN <user> <words…>``."""
    return (b"ACL", b"WHOAMI") if user is None else (b"ACL", b"DRYRUN", user, *words)


def acl_verdict(reply: Any) -> bool | None:
    """``ACL DRYRUN``'s reply as ``redis.acl_check_cmd``'s answer: ``+OK`` true, a text (why the user may not)
    false, an error (the server cannot tell: no right to ``ACL DRYRUN``, no such command) ``None``."""
    if reply is True or isinstance(reply, Status):
        return True
    if isinstance(reply, (bytes, str)):
        return as_bytes(reply) == b"OK"
    return None


def user_of(reply: Any) -> bytes | None:
    """``ACL WHOAMI``'s reply as the user's name (``None`` for an error)."""
    return as_bytes(reply) if isinstance(reply, (bytes, str)) else None
