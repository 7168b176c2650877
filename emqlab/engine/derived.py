"""The queue's view after a step derived from the commands the step sent and their replies, instead of read
back from the server.

A step that writes the queue changes a few of the view's components (:mod:`emqlab.engine.effects`: the
placement structures, ``stalled``, each job's lock and hash). For the commands a queue's scripts and
workers send, the new value of a component follows from its old value, the command and the command's
reply: ``LREM <active> 1 7`` answered ``1`` removed the first ``7`` from the head of ``active``;
``SET <7:lock> W1:1 NX PX 30000`` answered ``OK`` made the lock ``W1:1``. :class:`Derivation` applies such
commands to a copy of the view; wherever it cannot say — a command it does not model, an error reply, a
reply that does not agree with what it expected (``LREM`` answered ``0`` where the view holds the id), a
scenario place with an index or JSON members, one hash for every job — the component is read from the
server as before. Sorted sets keep their members in score order (ties by member bytes, as Redis orders
them), so the derivation follows each member's score.

What it models, per component type (Redis command reference for each command's reply):

* lists: ``LPUSH``, ``RPUSH``, ``LPUSHX``, ``RPUSHX`` (reply: the new length), ``LREM`` (the number
  removed), ``LPOP``, ``RPOP`` (the elements popped), ``RPOPLPUSH``, ``LMOVE`` (the element moved);
* sorted sets: ``ZADD`` with ``NX``/``XX``/``CH`` (the number added, or changed with ``CH``), ``ZREM`` (the
  number removed), ``ZPOPMIN``, ``ZPOPMAX`` (members and scores popped), ``ZINCRBY`` (the new score);
* sets: ``SADD``, ``SREM`` (the number added / removed);
* a lock (a string): ``SET`` without ``GET`` (``OK`` or nil), ``SETEX``, ``PSETEX``, ``SETNX`` (1 or 0),
  ``PEXPIRE``/``EXPIRE`` with a positive time (no change of value), ``GETDEL``;
* a job hash (whether it exists): ``HSET``, ``HMSET``, ``HSETNX``, ``HINCRBY``, ``HINCRBYFLOAT`` (it exists
  after any of them);
* every type: ``DEL``, ``UNLINK`` (empty / no lock / no hash).

That the derived view equals the one read is not assumed: with :data:`VERIFY` set (``EMQLAB_VERIFY_EFFECTS=1``
in the environment) the recorder also reads the whole view after every step and raises ``AssertionError``
where they differ; ``tests/test_effects_derived.py`` runs every shipped scenario so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from emqlab.engine.effects import Component, ExtraPlace, QueueView, read_component
from emqlab.protocol.commands import key_access
from emqlab.protocol.keys import LISTS, ZSETS, QueueKeys
from emqlab.scripting.replies import Status

#: the recorder also reads the whole view after each step and checks the derived one against it (a debug
#: switch for tests and for a suspicion: every step then costs the full read)
VERIFY = os.environ.get("EMQLAB_VERIFY_EFFECTS") == "1"

#: a model's answer when it cannot say: the component is read from the server
UNKNOWN: Any = object()

Call = tuple[Sequence[Any], Any]  # (command, its raw reply or the exception it raised)
Scores = dict[str, float]


class Derivation:
    """The view components of one run's queue (``keys``, ``job_ids``, the scenario's own places
    ``extra``) and how each one's new value follows from a command: :meth:`after` applies a step's calls.
    ``scores`` holds each sorted set's members' scores (the order of its members), kept current by
    :meth:`after`; :meth:`initial_scores` reads them."""

    def __init__(self, keys: QueueKeys, job_ids: Sequence[str], extra: Sequence[ExtraPlace] = ()) -> None:
        self.keys = keys
        self.extra = tuple(extra)
        #: component -> (its key, its type: list, zset, set, lock, hash), for the components derived
        self.kinds: dict[Component, tuple[bytes, str]] = {}
        for name in LISTS:
            self.kinds[name] = (keys.key(name).encode(), "list")
        for name in ZSETS:
            self.kinds[name] = (keys.key(name).encode(), "zset")
        self.kinds["stalled"] = (keys.stalled.encode(), "set")
        for p in extra:  # (a place with an index or JSON members is read: which job a member is, is the server's)
            if p.index is None and p.json_id is None:
                self.kinds[p.key] = (keys.key(p.key).encode(), {"list": "list", "zset": "zset", "set": "xset"}[p.type])
            else:
                self.kinds.pop(p.key, None)
        for j in job_ids:
            self.kinds[f"lock:{j}"] = (keys.lock(j).encode(), "lock")
            if keys.job_field_of(j) is None:  # (one hash for all jobs: whether a field exists is read)
                self.kinds[f"hash:{j}"] = (keys.job(j).encode(), "hash")
        self._touched: dict[tuple[bytes, ...], list[Component] | None] = {}
        self._job_ids = tuple(job_ids)

    def zsets(self) -> list[Component]:
        """The sorted-set components (their members' scores are followed)."""
        return [c for c, (_, t) in self.kinds.items() if t == "zset"]

    def read_scores(self, execute: Callable[..., Any], name: Component) -> tuple[tuple[str, ...], Scores]:
        """A sorted-set component's members in order and their scores, read (``ZRANGE … WITHSCORES``)."""
        raw = execute(b"ZRANGE", self.kinds[name][0], b"0", b"-1", b"WITHSCORES") or []
        errors = "strict" if name in ZSETS else "replace"  # (as read_component decodes them)
        members = tuple(raw[i].decode("utf-8", errors) for i in range(0, len(raw), 2))
        return members, {m: float(raw[i + 1]) for m, i in zip(members, range(0, len(raw), 2), strict=True)}

    def touched(self, written: tuple[bytes, ...]) -> list[Component] | None:
        """The view components a command that wrote ``written`` may have changed (as
        :func:`emqlab.engine.effects.touched_components`, remembered per key tuple)."""
        try:
            return self._touched[written]
        except KeyError:
            pass
        from emqlab.engine.effects import touched_components

        found = touched_components(self.keys, self._job_ids, written, self.extra)
        self._touched[written] = found
        return found

    def after(self, execute: Callable[..., Any], prev: QueueView, scores: dict[Component, Scores],
              calls: Sequence[Call]) -> QueueView | None:
        """The view after a step that sent ``calls`` (in order) from ``prev`` (``scores``: the sorted sets'
        scores, updated in place): derived where the model can say, each other component the calls touched
        read through ``execute``. ``None`` when a call's keys are unknown (the caller reads everything)."""
        values: dict[Component, Any] = {}
        unknown: set[Component] = set()
        for command, reply in calls:
            access = key_access(command)
            if access is None or access.writes_any:
                return None
            if not access.writes:
                continue
            touched = self.touched(access.writes)
            if touched is None:
                return None
            for name in touched:
                if name in unknown:
                    continue
                kind = self.kinds.get(name)
                if kind is None or isinstance(reply, BaseException):
                    unknown.add(name)
                    continue
                old = values[name] if name in values else _value(prev, name)
                new = _derive(kind[1], kind[0], old, scores.get(name), command, reply)
                if new is UNKNOWN:
                    unknown.add(name)
                else:
                    values[name] = new
                    if kind[1] == "zset" and not new:  # (an empty sorted set has no scores: known again)
                        scores[name] = {}
        for name in unknown:
            values.pop(name, None)
            if self.kinds.get(name, (b"", ""))[1] == "zset":
                values[name], scores[name] = self.read_scores(execute, name)
            else:
                values[name] = read_component(execute, self.keys, name, self.extra)
        return with_values(prev, values)


def _value(view: QueueView, name: Component) -> Any:
    if name == "stalled":
        return view.stalled
    kind, _, job = name.partition(":")
    if kind == "lock" and job in view.locks:
        return view.locks[job]
    if kind == "hash" and job in view.hashes:
        return view.hashes[job]
    return view.places.get(name, ())


def with_values(view: QueueView, values: Mapping[Component, Any]) -> QueueView:
    """``view`` with some components replaced (``values``: component -> its new value)."""
    if not values:
        return view
    places = dict(view.places)
    locks, hashes = view.locks, view.hashes
    stalled = view.stalled
    for name, v in values.items():
        if name == "stalled":
            stalled = v
        elif name.startswith("lock:") and name[5:] in locks:
            locks = dict(locks) if locks is view.locks else locks
            locks[name[5:]] = v  # type: ignore[index]
        elif name.startswith("hash:") and name[5:] in hashes:
            hashes = dict(hashes) if hashes is view.hashes else hashes
            hashes[name[5:]] = v  # type: ignore[index]
        elif name in places:
            places[name] = v
    return QueueView(places=places, stalled=stalled, locks=locks, hashes=hashes)


def _text(b: Any) -> str | None:
    if type(b) is not bytes:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        return None


def _ok(reply: Any) -> bool:
    return isinstance(reply, (bytes, Status)) and bytes(reply) == b"OK"


def _int(b: Any) -> int | None:
    try:
        return int(b)
    except (TypeError, ValueError):
        return None


def _derive(kind: str, key: bytes, old: Any, scores: Scores | None, command: Sequence[Any], reply: Any) -> Any:
    """The component's value after ``command`` answered ``reply``, or :data:`UNKNOWN`."""
    if any(type(a) is not bytes for a in command):
        return UNKNOWN
    name = command[0].upper()
    if name in (b"DEL", b"UNLINK"):
        if kind == "zset" and scores is not None:
            scores.clear()
        return {"lock": None, "hash": False, "set": frozenset()}.get(kind, ())
    if kind == "list":
        return _list(key, old, name, command, reply)
    if kind == "zset":
        return UNKNOWN if scores is None else _zset(key, old, scores, name, command, reply)
    if kind in ("set", "xset"):
        return _set(kind, key, old, name, command, reply)
    if kind == "lock":
        return _lock(key, old, name, command, reply)
    if kind == "hash" and name in (b"HSET", b"HMSET", b"HSETNX", b"HINCRBY", b"HINCRBYFLOAT") and command[1] == key:
        return True
    return UNKNOWN


def _texts(args: Sequence[bytes]) -> list[str] | None:
    out = []
    for a in args:
        t = _text(a)
        if t is None:
            return None
        out.append(t)
    return out


def _list(key: bytes, old: tuple[str, ...], name: bytes, c: Sequence[bytes], reply: Any) -> Any:
    if name in (b"LPUSH", b"RPUSH", b"LPUSHX", b"RPUSHX") and len(c) >= 3 and c[1] == key:
        ms = _texts(c[2:])
        if ms is None:
            return UNKNOWN
        if name.endswith(b"X") and not old:
            new = old
        else:
            new = (*reversed(ms), *old) if name.startswith(b"L") else (*old, *ms)
        return new if reply == len(new) else UNKNOWN
    if name == b"LREM" and len(c) == 4 and c[1] == key:
        count, m = _int(c[2]), _text(c[3])
        if count is None or m is None:
            return UNKNOWN
        items = list(old) if count >= 0 else list(reversed(old))
        limit = abs(count) or len(items)
        kept, gone = [], 0
        for x in items:
            if x == m and gone < limit:
                gone += 1
            else:
                kept.append(x)
        if reply != gone:
            return UNKNOWN
        return tuple(kept) if count >= 0 else tuple(reversed(kept))
    if name in (b"LPOP", b"RPOP") and len(c) in (2, 3) and c[1] == key:
        if reply is None:
            return old if not old else UNKNOWN
        popped = [reply] if len(c) == 2 else reply
        if not isinstance(popped, list) or not popped:
            return UNKNOWN
        ms = _texts(popped)
        if ms is None:
            return UNKNOWN
        n = len(ms)
        if name == b"LPOP":
            return old[n:] if list(old[:n]) == ms else UNKNOWN
        return old[:-n] if list(reversed(old[-n:])) == ms and len(old) >= n else UNKNOWN
    if name in (b"RPOPLPUSH", b"LMOVE") and len(c) == (3 if name == b"RPOPLPUSH" else 5):
        src, dst = c[1], c[2]
        frm, to = (b"RIGHT", b"LEFT") if name == b"RPOPLPUSH" else (c[3].upper(), c[4].upper())
        if frm not in (b"LEFT", b"RIGHT") or to not in (b"LEFT", b"RIGHT"):
            return UNKNOWN
        if reply is None:  # (the source was empty: nothing moved)
            return old if src != key or not old else UNKNOWN
        m = _text(reply)
        if m is None:
            return UNKNOWN
        new = old
        if src == key:
            if not new or new[-1 if frm == b"RIGHT" else 0] != m:
                return UNKNOWN
            new = new[:-1] if frm == b"RIGHT" else new[1:]
        if dst == key:
            new = (m, *new) if to == b"LEFT" else (*new, m)
        return new
    return UNKNOWN


def _zset(key: bytes, old: tuple[str, ...], scores: Scores, name: bytes, c: Sequence[bytes], reply: Any) -> Any:
    if len(c) < 2 or c[1] != key:
        return UNKNOWN
    if name == b"ZADD":
        i, nx, xx, ch = 2, False, False, False
        while i < len(c) and c[i].upper() in (b"NX", b"XX", b"CH"):
            flag = c[i].upper()
            nx, xx, ch = nx or flag == b"NX", xx or flag == b"XX", ch or flag == b"CH"
            i += 1
        pairs = c[i:]
        if not pairs or len(pairs) % 2:
            return UNKNOWN
        new = dict(scores)
        added = changed = 0
        for s, mb in zip(pairs[::2], pairs[1::2], strict=True):
            m = _text(mb)
            try:
                score = float(s)
            except ValueError:
                return UNKNOWN
            if m is None or score != score:
                return UNKNOWN
            exists = m in new
            if (nx and exists) or (xx and not exists):
                continue
            if not exists:
                added += 1
            elif new[m] != score:
                changed += 1
            new[m] = score
        if reply != (added + changed if ch else added):
            return UNKNOWN
        scores.clear()
        scores.update(new)
        return _ordered(scores)
    if name == b"ZINCRBY" and len(c) == 4:
        m = _text(c[3])
        try:
            score = float(reply)
        except (TypeError, ValueError):
            return UNKNOWN
        if m is None:
            return UNKNOWN
        scores[m] = score
        return _ordered(scores)
    if name == b"ZREM" and len(c) >= 3:
        ms = _texts(c[2:])
        if ms is None:
            return UNKNOWN
        gone = [m for m in dict.fromkeys(ms) if m in scores]
        if reply != len(gone):
            return UNKNOWN
        for m in gone:
            del scores[m]
        return tuple(m for m in old if m in scores)
    if name in (b"ZPOPMIN", b"ZPOPMAX") and len(c) in (2, 3) and isinstance(reply, list) and not len(reply) % 2:
        ms = _texts(reply[::2])
        if ms is None or any(m not in scores for m in ms):
            return UNKNOWN
        for m in ms:
            del scores[m]
        return tuple(m for m in old if m in scores)
    return UNKNOWN


def _ordered(scores: Scores) -> tuple[str, ...]:
    # Redis orders a sorted set by score, equal scores by their members' bytes
    return tuple(sorted(scores, key=lambda m: (scores[m], m.encode())))


def _set(kind: str, key: bytes, old: Any, name: bytes, c: Sequence[bytes], reply: Any) -> Any:
    if name not in (b"SADD", b"SREM") or len(c) < 3 or c[1] != key:
        return UNKNOWN
    ms = _texts(c[2:])
    if ms is None:
        return UNKNOWN
    members = set(old)
    before = len(members)
    if name == b"SADD":
        members.update(ms)
        done = len(members) - before
    else:
        members.difference_update(ms)
        done = before - len(members)
    if reply != done:
        return UNKNOWN
    if kind == "set":
        return frozenset(members)
    return tuple(sorted(members, key=lambda m: m.encode()))  # (a scenario's set place: its members sorted)


def _lock(key: bytes, old: str | None, name: bytes, c: Sequence[bytes], reply: Any) -> Any:
    if len(c) < 2 or c[1] != key:
        return UNKNOWN
    if name == b"SET" and len(c) >= 3:
        if any(a.upper() == b"GET" for a in c[3:]):
            return UNKNOWN
        if reply is None:  # (NX or XX refused it)
            return old
        return _text(c[2]) if _ok(reply) else UNKNOWN
    if name in (b"SETEX", b"PSETEX") and len(c) == 4:
        return _text(c[3]) if _ok(reply) else UNKNOWN
    if name == b"SETNX" and len(c) == 3:
        return old if reply == 0 else _text(c[2]) if reply == 1 else UNKNOWN
    if name in (b"PEXPIRE", b"EXPIRE") and len(c) >= 3:
        t = _int(c[2])
        return old if reply == 0 or (reply == 1 and t is not None and t > 0) else UNKNOWN
    if name == b"GETDEL" and len(c) == 2:
        return None
    return UNKNOWN


__all__ = ["Derivation", "UNKNOWN", "VERIFY", "with_values"]
