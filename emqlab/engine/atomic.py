"""The home of the atomic script step: one script run to its end inside one step of a run, either as one
``EVALSHA`` on the server or through the Lua host, its commands back to back.

Which way, and why: on fakeredis (``Runner(local_scripts=True)``, the default) the host runs every script —
nothing can come between its commands (the scheduler is single-threaded and owns the in-process server), and
the footprint is observed. On a live server emqlab's own shipped scripts (:func:`emqlab.scripting.registry.shipped`)
are one ``EVALSHA`` (footprint: the script's declared prior); any other script — a user's ``--lua``, a
lesson's variant, BullMQ's — runs through the host there too, because only the host sees each command before
the server does and can keep the script to the run's keys (:func:`emqlab.scripting.rules.confine`). What the
host cannot reproduce there is what the server decides once per script: Redis checks ``maxmemory`` at a
script's start, the host before each of its commands. The scripts of a set marked trusted
(:meth:`emqlab.scripting.registry.ScriptSet.trusted`) are sent as ``EVALSHA``, unconfined, for scripts one
trusts when that matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from emqlab.engine import footprints
from emqlab.engine.footprints import Footprint
from emqlab.engine.pywire import NOSCRIPT
from emqlab.protocol.commands import key_access
from emqlab.scripting.registry import shipped


def atomic_step(r: Any, name: str, keys: Sequence[Any], args: Sequence[Any],
                actor: str = "") -> tuple[Any, Footprint, tuple[bytes, ...] | None]:
    """One atomic step of script ``name`` with ``keys``/``args`` for ``actor`` on runner ``r`` (an
    :class:`emqlab.engine.runner.Runner`): the reply (an error as its exception), the footprint and the keys
    the script wrote (seen through the Lua host; ``None`` when unknown: an EVALSHA on the server, a command
    the table cannot name the keys of).

    After a script-flush fault, the script's first EVALSHA gets NOSCRIPT: with the actor's ``noscript:
    fallback`` (the default) the client loads the script and runs it (one more round trip, inside this step),
    with ``noscript: fail`` the step fails with Redis's NOSCRIPT error.

    A script run through the host leaves its calls in ``r.script_calls[r.index]`` (the step's number): each
    ``redis.call`` as (command, raw reply or the error it raised), in order."""
    if r._cached is not None and name not in r._cached:
        cache = Footprint(reads=frozenset({("scripts", name)}))
        spec = r._specs.get(actor)
        if spec is not None and spec.noscript == "fail":
            return redis.exceptions.ResponseError(NOSCRIPT), cache, ()
        r._cached.add(name)
        reply, fp, written = atomic_step(r, name, keys, args, actor)
        return reply, fp | Footprint(writes=frozenset({("scripts", name)})), written
    if r._faulty:
        reply, fp, written = _run(r, name, keys, args, actor)
        return reply, fp | Footprint(reads=frozenset({("scripts", name)})), written
    return _run(r, name, keys, args, actor)


def _run(r: Any, name: str, keys: Sequence[Any], args: Sequence[Any],
         actor: str) -> tuple[Any, Footprint, tuple[bytes, ...] | None]:
    base = r.keys.base
    scripts = r._actor_scripts.get(actor, r.scripts)
    script = scripts[name]
    if r._local_scripts or not (scripts.trust or shipped(script)):
        script.check_keys(keys)
        calls: list[tuple[tuple[Any, ...], Any]] = []

        def observe(*command: Any) -> Any:
            try:
                answer = r.exec(*command)
            except redis.exceptions.ResponseError as e:  # (kept as the call's reply: the script may pcall it)
                calls.append((command, e))
                raise
            calls.append((command, answer))
            return answer

        try:
            # (no server checks: every command the host sends is in the footprint, and a step stops at a
            # server fault by itself)
            reply = r.host.run(observe, script.text, keys, args, confine=base.encode(), server_checks=False)
        except redis.exceptions.ResponseError as e:
            reply = e
        r.script_calls[r.index] = tuple(calls)
        seen = [c for c, _ in calls]
        accesses = [key_access(c) for c in seen]
        observed = footprints.of_commands(seen, base)
        r.observed.append((name, tuple(keys), observed))
        known = all(a is not None and not a.writes_any for a in accesses)
        written = tuple(dict.fromkeys(k for a in accesses if a is not None for k in a.writes)) if known else None
        return reply, observed, written
    try:
        reply = scripts.call(r._executor, name, keys, args)
    except redis.exceptions.ResponseError as e:
        reply = e
    except redis.exceptions.TimeoutError:
        raise r._kill_script(name) from None
    return reply, footprints.prior(name, keys, base), None


__all__ = ["atomic_step"]
