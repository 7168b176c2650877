"""What a step did to the queue, as typed values.

The effect recorder reads a small *view* of the queue before and after each step (which structures hold
each job id, the stalled marks, every job's lock token and whether its hash exists) and describes the
difference as effects:

============================ ===================================== ==========================================
effect                       text (History JSON v1, annotations)   meaning
============================ ===================================== ==========================================
:class:`Placed`              ``1 +wait`` (``1 +wait×2``)            copies of the id were added to a structure
:class:`Removed`             ``1 -active``                         copies of the id were removed from it
:class:`Marked`              ``1 +stalled``                        the id was added to ``stalled``
:class:`Unmarked`            ``1 -stalled``                        the id was removed from ``stalled``
:class:`LockChanged`         ``1:lock W1:1 -> -``                  the lock's token changed (``-`` = no lock)
:class:`HashCreated`         ``1 hash +``                          the job hash appeared
:class:`HashDeleted`         ``1 hash -``                          the job hash disappeared
:class:`IntervalElapsed`     ``(stalled interval elapsed)``        a clock effect applied before the step
============================ ===================================== ==========================================

Effects are frozen dataclasses; ``str(effect)`` is the text form, :func:`parse` reads it back (for History
JSON v1 files). The anomaly checks work on the typed values, never on the text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from emqlab.protocol.keys import LISTS, PLACEMENTS, ZSETS, QueueKeys


@dataclass(frozen=True, slots=True)
class Placed:
    """``count`` copies of ``job`` were added to structure ``place`` (one of
    :data:`~emqlab.protocol.keys.PLACEMENTS`)."""

    job: str
    place: str
    count: int = 1

    def __str__(self) -> str:
        return f"{self.job} +{self.place}" + (f"×{self.count}" if self.count != 1 else "")


@dataclass(frozen=True, slots=True)
class Removed:
    """``count`` copies of ``job`` were removed from structure ``place``."""

    job: str
    place: str
    count: int = 1

    def __str__(self) -> str:
        return f"{self.job} -{self.place}" + (f"×{self.count}" if self.count != 1 else "")


@dataclass(frozen=True, slots=True)
class Marked:
    """``job`` was added to the ``stalled`` set (a stall candidate for the next sweep)."""

    job: str

    def __str__(self) -> str:
        return f"{self.job} +stalled"


@dataclass(frozen=True, slots=True)
class Unmarked:
    """``job`` was removed from the ``stalled`` set."""

    job: str

    def __str__(self) -> str:
        return f"{self.job} -stalled"


@dataclass(frozen=True, slots=True)
class LockChanged:
    """``job``'s lock went from token ``before`` to ``after`` (``None`` = no lock key)."""

    job: str
    before: str | None
    after: str | None

    def __str__(self) -> str:
        return f"{self.job}:lock {self.before or '-'} -> {self.after or '-'}"


@dataclass(frozen=True, slots=True)
class HashCreated:
    """``job``'s hash came into existence (an add, or a write into a deleted job: a fragment)."""

    job: str

    def __str__(self) -> str:
        return f"{self.job} hash +"


@dataclass(frozen=True, slots=True)
class HashDeleted:
    """``job``'s hash was deleted (removeOnComplete / removeOnFail, or a clean-up)."""

    job: str

    def __str__(self) -> str:
        return f"{self.job} hash -"


@dataclass(frozen=True, slots=True)
class IntervalElapsed:
    """A clock effect applied just before the step, with no round trip (``what`` = ``stalled``: the
    sweep's throttle key lapsed, a new stalled interval began)."""

    what: str = "stalled"

    def __str__(self) -> str:
        return f"({self.what} interval elapsed)"


Effect = Placed | Removed | Marked | Unmarked | LockChanged | HashCreated | HashDeleted | IntervalElapsed

#: Effects that concern one job (every kind but :class:`IntervalElapsed`).
JOB_EFFECTS = (Placed, Removed, Marked, Unmarked, LockChanged, HashCreated, HashDeleted)


def job_of(effect: Effect) -> str | None:
    """The job an effect concerns (``None`` for an interval)."""
    return None if isinstance(effect, IntervalElapsed) else effect.job


_PLACE = re.compile(r"^(?P<job>\S+) (?P<sign>[+-])(?P<place>[A-Za-z0-9_.:-]+?)(?:×(?P<n>\d+))?$")
_LOCK = re.compile(r"^(?P<job>\S+):lock (?P<before>\S+) -> (?P<after>\S+)$")
_HASH = re.compile(r"^(?P<job>\S+) hash (?P<sign>[+-])$")
_INTERVAL = re.compile(r"^\((?P<what>[a-z-]+) interval elapsed\)$")


def parse(text: str) -> Effect:
    """The effect whose text is ``text`` (the inverse of ``str``). Raises ``ValueError`` for other text."""
    if m := _LOCK.match(text):
        b, a = m["before"], m["after"]
        return LockChanged(m["job"], None if b == "-" else b, None if a == "-" else a)
    if m := _HASH.match(text):
        return HashCreated(m["job"]) if m["sign"] == "+" else HashDeleted(m["job"])
    if m := _INTERVAL.match(text):
        return IntervalElapsed(m["what"])
    if m := _PLACE.match(text):
        job, sign, place, n = m["job"], m["sign"], m["place"], int(m["n"] or 1)
        if place == "stalled":
            return Marked(job) if sign == "+" else Unmarked(job)
        if place not in _NOT_PLACES:  # the queue's places, and a scenario's own (``places:``)
            return Placed(job, place, n) if sign == "+" else Removed(job, place, n)
    raise ValueError(f"not an effect: {text!r}")


#: queue keys that are never a place (a ``+name`` effect on them is not an effect emqlab writes)
_NOT_PLACES = frozenset({"lock", "hash", "meta", "events", "id", "marker", "limiter", "stalled-check", "pc", "repeat"})


# -- a scenario's own places ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtraPlace:
    """A key a scenario names as a place a job can be in (``places:``): a list (members head first), a
    sorted set (members by score) or a set (members sorted) of job ids, named by its key relative to the
    queue's base (``delayed:1000``). With ``json_id``, each member is a JSON object (a queue that keeps the
    job's whole payload in the place, as Laravel's does) and the job is its ``json_id`` field (a member that
    is no such object stands for itself). With an ``index`` (a sorted set's key) and ``member``, the place
    is one only while the index holds ``member``: a poller finds the list through its index
    (resque-scheduler's per-timestamp lists and their ``delayed_queue_schedule``), so a job in a list its
    index no longer names is in no place. ``jobs`` is the initial content (the index then holds
    ``member``, scored by it when it is a number)."""

    key: str
    type: Literal["list", "zset", "set"] = "list"
    index: str | None = None
    member: str | None = None
    jobs: tuple[str, ...] = ()
    json_id: str | None = None

    def encode(self, job: str) -> str:
        """The member that stands for ``job`` in the initial content: the id, or with ``json_id`` the
        smallest payload naming it (``{"id": "1"}``)."""
        return job if self.json_id is None else json.dumps({self.json_id: job}, separators=(",", ":"))

    def job_of(self, member: str) -> str:
        """The job a member stands for (its ``json_id`` field when it is a JSON object holding one)."""
        if self.json_id is None or not member.startswith("{"):
            return member
        try:
            v = json.loads(member)
        except ValueError:
            return member
        got = v.get(self.json_id) if isinstance(v, dict) else None
        return str(got) if isinstance(got, (str, int)) and not isinstance(got, bool) else member

    def seed(self, keys: QueueKeys) -> list[tuple[str, ...]]:
        """The commands that write the place's initial content (and its index entry)."""
        if not self.jobs:
            return []
        members = [self.encode(j) for j in self.jobs]
        if self.type == "list":
            cmds: list[tuple[str, ...]] = [("RPUSH", keys.key(self.key), *members)]
        elif self.type == "set":
            cmds = [("SADD", keys.key(self.key), *members)]
        else:
            cmds = [("ZADD", keys.key(self.key), *[x for i, j in enumerate(members) for x in (str(i), j)])]
        if self.index is not None and self.member is not None:
            cmds.append(("ZADD", keys.key(self.index), _score(self.member), self.member))
        return cmds


def _score(member: str) -> str:
    try:
        return member if math.isfinite(float(member)) else "0"
    except ValueError:
        return "0"


# -- the view the recorder reads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueView:
    """The part of a queue's state that effects describe.

    ``places`` maps each placement structure to its members (lists head first, sorted sets by score),
    ``stalled`` is the stalled set, ``locks`` maps each watched job to its lock token (``None`` = no lock),
    ``hashes`` maps each watched job to whether its hash exists. Watched jobs are the scenario's."""

    places: Mapping[str, tuple[str, ...]]
    stalled: frozenset[str]
    locks: Mapping[str, str | None]
    hashes: Mapping[str, bool]
    _where: dict[str, list[str]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        where: dict[str, list[str]] = {}
        for name in (*PLACEMENTS, *(p for p in self.places if p not in PLACEMENTS)):  # then a scenario's own
            for m in self.places.get(name, ()):
                where.setdefault(m, []).append(name)
        object.__setattr__(self, "_where", where)

    def where(self, job: str) -> list[str]:
        """The structures holding ``job``, with a name repeated for each copy, in :data:`PLACEMENTS` order."""
        return list(self._where.get(job, []))

    def placements(self) -> dict[str, list[str]]:
        """``{job: [structure, …]}`` for every id placed anywhere (copies repeated)."""
        return {j: list(p) for j, p in self._where.items()}


#: Names of the view's components: every placement structure, ``stalled``, and per job ``lock:<id>`` and
#: ``hash:<id>``.
Component = str


def components(job_ids: Iterable[str], extra: Sequence[ExtraPlace] = ()) -> list[Component]:
    out = [*PLACEMENTS, *(p.key for p in extra), "stalled"]
    for j in job_ids:
        out += [f"lock:{j}", f"hash:{j}"]
    return out


def read_component(execute: Callable[..., Any], keys: QueueKeys, name: Component,
                   extra: Sequence[ExtraPlace] = ()) -> Any:
    """One component's current value through ``execute`` (a raw command executor). A scenario's place
    with an index is empty while the index does not hold its member."""
    own = next((p for p in extra if p.key == name), None)
    if own is not None:
        if own.index is not None and execute(b"ZSCORE", keys.key(own.index).encode(),
                                             (own.member or "").encode()) is None:
            return ()
        if own.type == "set":  # (no order: sorted, so that the view is the same on every backend)
            got = sorted(execute(b"SMEMBERS", keys.key(name).encode()) or [])
        else:
            got = execute(b"LRANGE" if own.type == "list" else b"ZRANGE", keys.key(name).encode(), b"0", b"-1") or []
        return tuple(own.job_of(m.decode("utf-8", "replace")) for m in got)
    if name in LISTS:
        return tuple(m.decode() for m in execute(b"LRANGE", keys.key(name).encode(), b"0", b"-1") or [])
    if name in ZSETS:
        return tuple(m.decode() for m in execute(b"ZRANGE", keys.key(name).encode(), b"0", b"-1") or [])
    if name == "stalled":
        return frozenset(m.decode() for m in execute(b"SMEMBERS", keys.stalled.encode()) or [])
    kind, _, job = name.partition(":")
    if kind == "lock":
        v = execute(b"GET", keys.lock(job).encode())
        return v.decode() if isinstance(v, bytes) else None
    f = keys.job_field_of(job)
    if f is not None:
        return bool(execute(b"HEXISTS", keys.job(job).encode(), f.encode()))
    return bool(execute(b"EXISTS", keys.job(job).encode()))


def read_view(execute: Callable[..., Any], keys: QueueKeys, job_ids: Sequence[str],
              prev: QueueView | None = None, only: Iterable[Component] | None = None,
              extra: Sequence[ExtraPlace] = ()) -> QueueView:
    """The view now. With ``prev`` and ``only``, only those components are read again (the rest are
    taken from ``prev``): the recorder passes the components a single command can have changed.
    ``extra`` are the scenario's own places (``places:``), read besides the queue's."""
    if prev is not None and only is not None:
        raw: dict[str, Any] = {**prev.places, "stalled": prev.stalled}
        raw.update({f"lock:{j}": t for j, t in prev.locks.items()})
        raw.update({f"hash:{j}": h for j, h in prev.hashes.items()})
        for name in only:
            raw[name] = read_component(execute, keys, name, extra)
    else:
        raw = {name: read_component(execute, keys, name, extra) for name in components(job_ids, extra)}
    names = (*PLACEMENTS, *(p.key for p in extra))
    return QueueView(places={p: raw.get(p, ()) for p in names}, stalled=raw["stalled"],
                     locks={j: raw[f"lock:{j}"] for j in job_ids},
                     hashes={j: raw[f"hash:{j}"] for j in job_ids})


def touched_components(keys: QueueKeys, job_ids: Iterable[str], written: Sequence[bytes] | None,
                       extra: Sequence[ExtraPlace] = ()) -> list[Component] | None:
    """The view components a step can have changed, from the keys it wrote (``written``; ``None`` when
    unknown, which means every component). A write to a scenario place's index touches the place."""
    if written is None:
        return None
    jobs = set(job_ids)
    data: dict[str, list[str]] = {}  # (a job's data key, relative: the id for BullMQ; one hash for all)
    for j in sorted(jobs):
        data.setdefault(keys.relative(keys.job(j)), []).append(j)
    base = keys.base.encode()
    out: list[Component] = []
    for key in written:
        if not key.startswith(base):
            continue
        rel = key[len(base):].decode("utf-8", "replace")
        own = [p.key for p in extra if rel in (p.key, p.index)]
        if own:
            out += own
        elif rel in PLACEMENTS or rel == "stalled":
            out.append(rel)
        elif rel.endswith(":lock") and rel[:-5] in jobs:
            out.append(f"lock:{rel[:-5]}")
        elif rel in data:
            out += [f"hash:{j}" for j in data[rel]]
    return out


def _job_order(j: str) -> tuple[int, str]:
    return (len(j), j)


def diff(before: QueueView, after: QueueView) -> tuple[Effect, ...]:
    """The effects that turn ``before`` into ``after``, per job (ids in numeric-then-text order): removals,
    placements (one effect per structure with the number of copies), the stalled mark, the lock, the hash."""
    out: list[Effect] = []
    bw, aw = before._where, after._where
    jobs = {*bw, *aw, *before.locks, *after.locks, *before.stalled, *after.stalled}
    none: list[str] = []
    for j in sorted(jobs, key=_job_order):
        b, a = bw.get(j, none), aw.get(j, none)
        if b != a:  # (the same structures, copies and order: nothing placed or removed)
            for name in dict.fromkeys(b):
                if b.count(name) > a.count(name):
                    out.append(Removed(j, name, b.count(name) - a.count(name)))
            for name in dict.fromkeys(a):
                if a.count(name) > b.count(name):
                    out.append(Placed(j, name, a.count(name) - b.count(name)))
        if j in before.stalled and j not in after.stalled:
            out.append(Unmarked(j))
        if j not in before.stalled and j in after.stalled:
            out.append(Marked(j))
        lb, la = before.locks.get(j), after.locks.get(j)
        if lb != la:
            out.append(LockChanged(j, lb, la))
        hb, ha = before.hashes.get(j), after.hashes.get(j)
        if hb and not ha:
            out.append(HashDeleted(j))
        elif ha and not hb:
            out.append(HashCreated(j))
    return tuple(out)


__all__ = [
    "Effect", "ExtraPlace", "HashCreated", "HashDeleted", "IntervalElapsed", "LockChanged", "Marked", "Placed",
    "QueueView", "Removed", "Unmarked", "components", "diff", "job_of", "parse", "read_view", "touched_components",
]
