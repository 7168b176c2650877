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

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .keys import LISTS, PLACEMENTS, ZSETS, QueueKeys


@dataclass(frozen=True, slots=True)
class Placed:
    """``count`` copies of ``job`` were added to structure ``place`` (one of :data:`keys.PLACEMENTS`)."""

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


_PLACE = re.compile(r"^(?P<job>\S+) (?P<sign>[+-])(?P<place>[a-z-]+)(?:×(?P<n>\d+))?$")
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
        if place in PLACEMENTS:
            return Placed(job, place, n) if sign == "+" else Removed(job, place, n)
    raise ValueError(f"not an effect: {text!r}")


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
        for name in PLACEMENTS:
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


def components(job_ids: Iterable[str]) -> list[Component]:
    out = [*PLACEMENTS, "stalled"]
    for j in job_ids:
        out += [f"lock:{j}", f"hash:{j}"]
    return out


def read_component(execute: Callable[..., Any], keys: QueueKeys, name: Component) -> Any:
    """One component's current value through ``execute`` (a raw command executor)."""
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
    return bool(execute(b"EXISTS", keys.job(job).encode()))


def read_view(execute: Callable[..., Any], keys: QueueKeys, job_ids: Sequence[str],
              prev: QueueView | None = None, only: Iterable[Component] | None = None) -> QueueView:
    """The view now. With ``prev`` and ``only``, only those components are read again (the rest are
    taken from ``prev``): the recorder passes the components a single command can have changed."""
    if prev is not None and only is not None:
        raw: dict[str, Any] = {**prev.places, "stalled": prev.stalled}
        raw.update({f"lock:{j}": t for j, t in prev.locks.items()})
        raw.update({f"hash:{j}": h for j, h in prev.hashes.items()})
        for name in only:
            raw[name] = read_component(execute, keys, name)
    else:
        raw = {name: read_component(execute, keys, name) for name in components(job_ids)}
    return QueueView(places={p: raw[p] for p in PLACEMENTS}, stalled=raw["stalled"],
                     locks={j: raw[f"lock:{j}"] for j in job_ids},
                     hashes={j: raw[f"hash:{j}"] for j in job_ids})


def touched_components(command: Sequence[bytes], keys: QueueKeys, job_ids: Iterable[str],
                       written: Sequence[bytes] | None) -> list[Component] | None:
    """The view components one command can have changed, from the keys it writes (``written``; ``None``
    when unknown, which means every component)."""
    if written is None:
        return None
    jobs = set(job_ids)
    base = keys.base.encode()
    out: list[Component] = []
    for key in written:
        if not key.startswith(base):
            continue
        rel = key[len(base):].decode("utf-8", "replace")
        if rel in PLACEMENTS or rel == "stalled":
            out.append(rel)
        elif rel.endswith(":lock") and rel[:-5] in jobs:
            out.append(f"lock:{rel[:-5]}")
        elif rel in jobs:
            out.append(f"hash:{rel}")
    return out


def _job_order(j: str) -> tuple[int, str]:
    return (len(j), j)


def diff(before: QueueView, after: QueueView) -> tuple[Effect, ...]:
    """The effects that turn ``before`` into ``after``, per job (ids in numeric-then-text order): removals,
    placements (one effect per structure with the number of copies), the stalled mark, the lock, the hash."""
    out: list[Effect] = []
    jobs = set(before.placements()) | set(after.placements()) | set(before.locks) | set(after.locks) \
        | set(before.stalled) | set(after.stalled)
    for j in sorted(jobs, key=_job_order):
        b, a = before.where(j), after.where(j)
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
    "Effect", "HashCreated", "HashDeleted", "IntervalElapsed", "LockChanged", "Marked", "Placed", "QueueView",
    "Removed", "Unmarked", "components", "diff", "job_of", "parse", "read_view", "touched_components",
]
