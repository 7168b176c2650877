"""Queue state as plain data: read every key of a queue into a comparable snapshot, and write one back.

A snapshot maps each key, relative to the queue's base (``wait``, ``1``, ``1:lock``, ``events``), to a
``(type, value)`` pair: ``string`` → bytes, ``list`` → list, ``set`` → sorted list, ``zset`` → list of
``(member, score)``, ``hash`` → dict, ``stream`` → list of field dicts (entry ids are server time and are
left out, so snapshots of two runs compare equal). Keys with a TTL also carry ``ttl=True`` — the TTL's
value is time-dependent and not compared; a live run's safety TTL (:data:`emqlab.backend.namespace.SAFETY_TTL_MS`)
counts as no TTL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import redis

from emqlab.backend.connect import has_expiry, scan_keys
from emqlab.protocol.keys import PLACEMENTS, QueueKeys

Snapshot = dict[str, tuple[str, Any]]


def _s(b: bytes | str) -> str:
    return b.decode("utf-8", "surrogateescape") if isinstance(b, bytes) else b


def read_key(conn: redis.Redis, key: str | bytes) -> tuple[str, Any] | None:
    """The ``(type, value)`` of one key, or ``None`` when it does not exist."""
    kind = _s(conn.type(key))
    if kind == "none":
        return None
    value: Any
    if kind == "string":
        value = conn.get(key)
    elif kind == "list":
        value = conn.lrange(key, 0, -1)
    elif kind == "set":
        value = sorted(conn.smembers(key))
    elif kind == "zset":
        # withscores=True: (member, score) pairs; redis-py types the reply as any of zrange's shapes
        pairs = cast("list[tuple[bytes, Any]]", conn.zrange(key, 0, -1, withscores=True))
        value = [(m, float(s)) for m, s in pairs]
    elif kind == "hash":
        value = dict(sorted(conn.hgetall(key).items()))
    elif kind == "stream":
        value = [dict(fields or {}) for _id, fields in conn.xrange(key) or []]
    else:  # pragma: no cover
        value = repr(conn.dump(key))
    return kind, value


def snapshot(conn: redis.Redis, keys: QueueKeys, *, ttl: bool = True) -> Snapshot:
    """Every key of queue ``keys``, relative names → ``(type, value)``; with ``ttl``, keys that have a TTL
    get the type suffixed ``+ttl`` (e.g. ``string+ttl`` for a lock)."""
    out: Snapshot = {}
    for k in sorted(scan_keys(conn, keys.pattern)):
        got = read_key(conn, k)
        if got is None:
            continue
        kind, value = got
        if ttl and has_expiry(int(conn.pttl(k))):  # (a safety TTL of a live run is no expiry)
            kind += "+ttl"
        out[keys.relative(k)] = (kind, value)
    return out


def placements(conn: redis.Redis, keys: QueueKeys) -> dict[str, list[str]]:
    """Where each job id is placed: ``{"1": ["completed", "wait"], …}`` over wait, active, prioritized,
    delayed, paused, completed, failed (``keys.PLACEMENTS``)."""
    where: dict[str, list[str]] = {}
    pipe = conn.pipeline(transaction=False)
    for name in PLACEMENTS:
        key = keys.key(name)
        if name in ("wait", "active", "paused"):
            pipe.lrange(key, 0, -1)
        else:
            pipe.zrange(key, 0, -1)
    for name, members in zip(PLACEMENTS, pipe.execute(), strict=True):
        for m in members:
            where.setdefault(_s(m), []).append(name)
    return where


def write_state(conn: redis.Redis, keys: QueueKeys, state: Mapping[str, Any]) -> None:
    """Write ``state`` (relative key → value) under ``keys``' base, in one pipeline.

    Values: ``list`` → a Redis list (in order, head first), ``set``-typed via ``{"set": [...]}``, ``dict`` →
    hash, ``{"zset": {member: score}}`` → sorted set, bytes/str/int → string; ``{"value": v, "px": ms}`` →
    a string with a TTL (a lock). Raises ``TypeError`` for anything else.
    """
    pipe = conn.pipeline(transaction=True)
    for rel, value in state.items():
        key = keys.key(rel)
        pipe.delete(key)
        if isinstance(value, Mapping) and set(value) == {"set"}:
            if value["set"]:
                pipe.sadd(key, *value["set"])
        elif isinstance(value, Mapping) and set(value) == {"zset"}:
            if value["zset"]:
                pipe.zadd(key, {str(m): float(s) for m, s in value["zset"].items()})
        elif isinstance(value, Mapping) and "value" in value:
            px = value.get("px")
            pipe.set(key, value["value"], px=int(px) if px else None)
        elif isinstance(value, Mapping):
            if value:
                pipe.hset(key, mapping={str(f): v for f, v in value.items()})
        elif isinstance(value, list | tuple):
            if value:
                pipe.rpush(key, *value)
        elif isinstance(value, bytes | str | int | float):
            pipe.set(key, value)
        else:
            raise TypeError(f"cannot write {rel!r}: unsupported value {value!r}")
    pipe.execute()


def diff(a: Snapshot, b: Snapshot) -> list[str]:
    """Human-readable differences between two snapshots (empty when equal): ``key: <in a> != <in b>``, text
    shown as text (bytes that are not UTF-8, such as msgpack, as their repr)."""
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}: {_readable(a.get(k))!r} != {_readable(b.get(k))!r}")
    return out


def _readable(value: Any) -> Any:
    """``value`` with its UTF-8 bytes decoded, in lists, tuples and dicts too."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value
    if isinstance(value, dict):
        return {_readable(k): _readable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_readable(v) for v in value)
    return value
