"""The home of a scenario's initial state as Redis commands, and of the virtual clock's origin.

Every run starts by writing these commands (:func:`seed_commands`); timestamps in them are on the virtual
clock, which starts at :data:`T0` (step *k* of a run happens at ``T0 + k`` ms).
"""

from __future__ import annotations

import json
from typing import Any

from emqlab.engine.specs import Scenario
from emqlab.protocol.keys import QueueKeys

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the virtual clock's origin (ms)
#: a worker's lock time (ms; BullMQ's default); a lock the initial state holds is given 100 times it
LOCK_MS = 30000


def seed_commands(sc: Scenario, k: QueueKeys) -> list[tuple[bytes, ...]]:
    """The commands that write ``sc``'s initial state under ``k`` (the jobs a producer adds are left
    out: they are written by their add during the run)."""
    cmds: list[tuple[Any, ...]] = []
    active = set(sc.state.get("active", []))
    produced = {j for a in sc.actors for j in a.added}
    for jid, j in sc.jobs.items():
        if jid in produced or k.job_field is not None:  # (a field of another queue's hash: seed: writes it)
            continue
        opts = {"attempts": j.attempts} if j.attempts else {}
        fields = {"name": j.name, "data": json.dumps(j.data, separators=(",", ":")),
                  "opts": json.dumps(opts, separators=(",", ":")), "timestamp": str(T0 - 1000),
                  "delay": str(j.delay), "priority": str(j.priority), **j.fields}
        if jid in active:
            fields.setdefault("processedOn", str(T0 - 500))
            fields.setdefault("ats", "1")
        cmds.append(("HSET", k.job(jid), *[x for kv in fields.items() for x in kv]))
    wait = sc.state.get("wait", [])
    if wait:  # the first listed is the next to be taken: it sits at the right end
        cmds.append(("RPUSH", k.wait, *reversed(wait)))
    for name in ("active", "paused"):
        if sc.state.get(name):
            cmds.append(("RPUSH", k.key(name), *sc.state[name]))
    if sc.state.get("stalled"):
        cmds.append(("SADD", k.stalled, *sc.state["stalled"]))
    for name in ("completed", "failed", "delayed", "prioritized"):
        v = sc.state.get(name)
        if not v:
            continue
        scores = v if isinstance(v, dict) else {jid: i for i, jid in enumerate(v)}
        args: list[Any] = []
        for jid, sc_ in scores.items():
            if name == "delayed":
                score = (T0 + int(sc_)) * 0x1000
            elif name == "prioritized":
                score = int(sc_) * 2**32 + list(scores).index(jid)
            else:
                score = T0 - 100 + int(sc_)
            args += [str(score), jid]
        cmds.append(("ZADD", k.key(name), *args))
    for jid, owner in sc.locks.items():
        cmds.append(("SET", k.lock(jid), f"{owner}:1", "PX", str(LOCK_MS * 100)))
    # as a queue's first add does (PROTOCOL.md §4.2), so no run starts by writing it
    meta = {"opts.maxLenEvents": "10000", **sc.meta}
    cmds.append(("HSET", k.meta, *[x for kv in meta.items() for x in kv]))
    for place in sc.places:  # the scenario's own places (places:)
        cmds += place.seed(k)
    for cmd, key, *args in sc.seed:  # writes in another queue's own layout (seed:)
        cmds.append((cmd, k.key(key), *args))
    numeric = [int(j) for j in sc.jobs if j.isdigit()]
    if numeric:
        cmds.append(("SET", k.id, str(max(numeric))))
    return [tuple(a.encode() if isinstance(a, str) else a for a in c) for c in cmds]


__all__ = ["LOCK_MS", "T0", "seed_commands"]
