"""Footprints: the keys a step read and wrote, observed as it ran, and when two steps conflict.

Keys are classified relative to the queue's base (:func:`classify`): queue keys (``("q", "wait")``), job
hashes (``("job", "1")``), locks (``("lock", "1")``) and a job's other keys (``("jobsub", "1:logs")``).
A footprint holds three sets:

* ``reads``: keys whose value the step may have looked at;
* ``writes``: keys it may have changed;
* ``appends``: keys it only appended to as a log that no script reads back — the ``events`` stream. Two
  appends commute (the stream's entry order is not part of the compared state); an append conflicts
  with a read or a write of the same key.

Two steps *conflict* (are dependent) when one writes a key the other reads, writes or appends to, or one
appends to a key the other reads. Steps of one actor are always dependent (program order).

**Members.** A command that touches only named members of its one key — a set's members (``SADD``,
``SREM``, ``SISMEMBER``, ``SMISMEMBER``), a sorted set's (``ZADD``, ``ZREM``, ``ZINCRBY``, ``ZSCORE``,
``ZMSCORE``), a hash's fields (``HSET``, ``HGET``, ``HINCRBY``, ``HDEL`` …) or, for ``LREM``, one element of
a list — reads and writes those members, not the key (:data:`MEMBER_COMMANDS`): ``SREM stalled 1`` and
``SREM stalled 2`` commute. Why that is exact: each such command's reply depends only on its own members
(a count of its members added or removed, their values or scores), and what it does to the key is the
same whatever happened to the other members (``LREM`` of one element leaves the others in their order,
whoever removed another first; a key emptied by one and filled by the other ends the same either way).
A member access still meets every access to the whole key (``SCARD``, ``LPOS``, ``DEL``, ``EXISTS`` …)
and, when one of them writes, every member access of another kind of value (``SADD k x`` against
``HSET k f v``: which one comes first decides the key's type). One assumption: no collection key the
scripts empty and refill carries a TTL of the protocol (an emptied key loses its TTL); emqlab's own
safety TTL reads as none (:mod:`emqlab.backend.namespace`).

Where the footprint comes from:

* a command of a split script, a clock event, a ``pre`` clock effect: the Redis command table
  (:mod:`emqlab.protocol.commands`, generated from the server's key specifications) applied to the concrete
  arguments;
* an atomic step run through the Lua host (fakeredis, the default): every ``redis.call`` the script made,
  each through the command table — observed, exact for this run;
* an ``EVALSHA`` sent to a server (a live Redis, or fakeredis's own EVALSHA): the server does not tell, so
  the script's declared prior (:data:`SCRIPT_PRIORS`) plus its KEYS is used; a test runs every script over
  the shipped scenarios' states and asserts that what it observes is inside the prior. A script with no
  prior (another script set) touches everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from emqlab.protocol.commands import KeyAccess, LineCache, key_access
from emqlab.protocol.keys import QUEUE_KEY_NAMES

#: (kind, name): ("q", "wait"), ("job", "1"), ("lock", "1"), ("jobsub", "1:logs"); or a member of such a key,
#: (kind, name, family, member): ("q", "stalled", "set", "1"), ("job", "1", "hash", "atm")
Key = tuple[str, ...]
ANY: Key = ("*", "*")

_QUEUE_HEADS = frozenset(n.split(":", 1)[0] for n in QUEUE_KEY_NAMES)
#: keys only ever appended to by the scripts and never read by them
LOG_KEYS = frozenset({("q", "events")})


def classify(rel: str) -> Key:
    """``wait`` and ``metrics:completed`` → queue keys; ``1`` → a job hash; ``1:lock`` → a lock; ``1:logs``
    → a job's other keys. ``rel`` is relative to the queue's base; a key outside it is ``("other", key)``."""
    head, sep, tail = rel.partition(":")
    if head in _QUEUE_HEADS:
        return ("q", rel)
    if not sep:
        return ("job", rel)
    return ("lock", head) if tail == "lock" else ("jobsub", rel)


@dataclass(frozen=True, slots=True)
class Footprint:
    """The keys a step read, wrote and appended to (see the module docstring)."""

    reads: frozenset[Key] = frozenset()
    writes: frozenset[Key] = frozenset()
    appends: frozenset[Key] = frozenset()
    #: the footprint's keys as bit masks (:func:`_signature`), made at its first :meth:`conflicts`; ``()``
    #: where only the exact comparison answers (a wildcard key). Not part of its value, and never pickled:
    #: the bits are this process's
    _sig: Any = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __reduce__(self) -> tuple[type[Footprint], tuple[frozenset[Key], frozenset[Key], frozenset[Key]]]:
        return Footprint, (self.reads, self.writes, self.appends)

    @classmethod
    def everything(cls) -> Footprint:
        return cls(frozenset([ANY]), frozenset([ANY]))

    def __or__(self, other: Footprint) -> Footprint:
        # (an empty side gives the other back as it is: its signature, once made, is kept)
        if not (other.reads or other.writes or other.appends):
            return self
        if not (self.reads or self.writes or self.appends):
            return other
        return Footprint(self.reads | other.reads, self.writes | other.writes, self.appends | other.appends)

    def conflicts(self, other: Footprint) -> bool:
        """True when the two steps do not commute (see the module docstring)."""
        s = self._sig
        if s is None:
            s = _signed(self)
        o = other._sig
        if o is None:
            o = _signed(other)
        if s and o:  # the same answer as below, in integer operations (_signature's layout)
            if (s[1] & o[4] or o[5] & s[0] or s[2] & o[6]  # my writes against all theirs
                    or o[1] & s[8] or s[9] & o[0] or o[2] & s[10]  # their writes against my reads, appends
                    or s[17] & o[12] or o[13] & s[16] or s[18] & o[14]  # my appends against their reads
                    or o[17] & s[12] or s[13] & o[16] or o[18] & s[14]):  # their appends against my reads
                return True
            if s[3] & o[7] or o[3] & s[11] or s[19] & o[15] or o[19] & s[15]:  # members of one key on both
                return _families_meet(s, o)
            return False
        return self._conflicts_by_key(other)

    def _conflicts_by_key(self, other: Footprint) -> bool:
        # (each pair of sets on its own: meeting a union is meeting one of its sets, and no union is built)
        mine, theirs = self.writes, other.writes
        if mine and (_meets(mine, other.reads) or _meets(mine, theirs) or _meets(mine, other.appends)):
            return True
        if theirs and (_meets(theirs, self.reads) or _meets(theirs, self.appends)):
            return True
        return _meets(self.appends, other.reads) or _meets(other.appends, self.reads)

    def within(self, prior: Footprint) -> list[str]:
        """What this (observed) footprint does outside ``prior``: ``["reads ('q', 'active')", …]``."""
        out = []
        for name, mine, theirs in (("reads", self.reads, prior.reads | prior.writes),
                                   ("writes", self.writes, prior.writes),
                                   ("appends", self.appends, prior.writes | prior.appends)):
            for k in sorted(mine):
                if not any(_match(k, p) for p in theirs):
                    out.append(f"{name} {k}")
        return out

    def __str__(self) -> str:
        def one(k: Key) -> str:
            name = k[1] if k[0] != "lock" else f"{k[1]}:lock"
            return name if len(k) == 2 else f"{name}[{k[3]}]"

        def show(ks: frozenset[Key]) -> str:
            return ",".join(one(k) for k in sorted(ks)) or "-"
        return f"r[{show(self.reads)}] w[{show(self.writes)}]" + (f" a[{show(self.appends)}]" if self.appends else "")


def _match(a: Key, b: Key) -> bool:
    if a == ANY or b == ANY:
        return True
    if a[0] != b[0] or not (a[1] == b[1] or a[1] == "*" or b[1] == "*"):
        return False
    # the whole key meets each of its members; members of one family meet only themselves
    return len(a) == 2 or len(b) == 2 or a[2] != b[2] or a[3] == b[3]


def _meets(xs: Iterable[Key], ys: frozenset[Key]) -> bool:
    for x in xs:
        if x in ys:
            return True
        for y in ys:
            if _match(x, y):
                return True
    return False


# -- the same relation as bit masks -------------------------------------------------------------------------
# Every whole key (kind, name) and every member (kind, name, family, member) this process meets gets a bit of
# its own, once. A set of keys is then (keys, whole, members, member_keys, families): the bits of every key it
# touches (whole or through a member), of the keys it touches whole, of its members, of the keys it touches
# through members, and for each of those the bits of the families it touches them as. Two sets meet
# (:func:`_match` on some pair) exactly when one touches whole a key the other touches at all, they share a
# member, or on a key both touch through members one's family differs from the other's (both touching it as
# one and the same family, and only so, is no meeting). A wildcard key (ANY, a ``"*"`` name) has no bit: a
# footprint holding one is compared key by key.

_BITS: dict[Key, tuple[int, int, int]] = {}  # key -> (its whole key's bit, its member bit or 0, its family's bit)
_KEY_BITS: dict[tuple[str, str], int] = {}
_FAMILY_BITS: dict[str, int] = {}
#: past this many keys and members a new one is not given a bit (the footprint goes the exact way): a long-lived
#: process meeting ever new members keeps its masks small
_MAX_BITS = 1 << 16
#: a footprint's signature: for each of its five sets (writes, reads ∪ writes ∪ appends, reads ∪ appends,
#: reads, appends), four masks (keys, whole, members, member_keys) one after another, then the five sets'
#: families (key bit -> family bits)
_Signature = tuple[Any, ...]


def _bits_of(k: Key) -> tuple[int, int, int] | None:
    got = _BITS.get(k)
    if got is not None:
        return got
    if len(k) not in (2, 4) or k[0] == "*" or k[1] == "*" or len(_BITS) >= _MAX_BITS:
        return None
    whole = _KEY_BITS.setdefault((k[0], k[1]), 1 << len(_KEY_BITS))
    if len(k) == 2:
        got = (whole, 0, 0)
    else:
        family = _FAMILY_BITS.setdefault(k[2], 1 << len(_FAMILY_BITS))
        got = (whole, 1 << len(_BITS), family)
    _BITS[k] = got
    return got


def conflicting(fps: Sequence[Footprint], fp: Footprint) -> int:
    """The indices ``i`` where ``fps[i].conflicts(fp)``, as a bit set (one pass, for a search that compares
    each new step with every earlier one)."""
    o = fp._sig
    if o is None:
        o = _signed(fp)
    if not o:
        return sum(1 << i for i, f in enumerate(fps) if f.conflicts(fp))
    o0, o1, o2, o4, o5, o6, o12, o13, o14, o16, o17, o18 = (
        o[0], o[1], o[2], o[4], o[5], o[6], o[12], o[13], o[14], o[16], o[17], o[18])
    fams = o[3] or o[7] or o[15] or o[19]  # (o touches members at all)
    out = 0
    for i, f in enumerate(fps):
        s = f._sig
        if s is None:
            s = _signed(f)
        if not s:
            if f.conflicts(fp):
                out |= 1 << i
        elif (s[1] & o4 or o5 & s[0] or s[2] & o6 or o1 & s[8] or s[9] & o0 or o2 & s[10]
              or s[17] & o12 or o13 & s[16] or s[18] & o14 or o17 & s[12] or s[13] & o16 or o18 & s[14]):
            out |= 1 << i
        elif fams and (s[3] & o[7] or o[3] & s[11] or s[19] & o[15] or o[19] & s[15]) and _families_meet(s, o):
            out |= 1 << i
    return out


def _signed(fp: Footprint) -> _Signature:
    sig = _signature(fp)
    object.__setattr__(fp, "_sig", sig)
    return sig


def _signature(fp: Footprint) -> _Signature:
    """``fp``'s sets as bit masks (the layout of :data:`_Signature`); ``()`` when a key has no bit (a
    wildcard)."""
    masks = [0] * 20
    fams: tuple[dict[int, int], ...] = ({}, {}, {}, {}, {})
    for ks, into in ((fp.writes, (0, 1)), (fp.reads, (1, 2, 3)), (fp.appends, (1, 2, 4))):
        for k in ks:
            b = _bits_of(k)
            if b is None:
                return ()
            whole, member, family = b
            for n in into:
                at = 4 * n
                masks[at] |= whole
                if member:
                    masks[at + 2] |= member
                    masks[at + 3] |= whole
                    fams[n][whole] = fams[n].get(whole, 0) | family
                else:
                    masks[at + 1] |= whole
    return (*masks, fams)


def _families_meet(s: _Signature, o: _Signature) -> bool:
    """Whether, in a pair of sets :meth:`Footprint.conflicts` compares (my writes against all of theirs,
    their writes against my reads and appends, each one's appends against the other's reads), a key both
    touch through members is touched as two families (:func:`_match`: members of two families meet)."""
    for mine, x, theirs, y in ((s, 0, o, 1), (o, 0, s, 2), (s, 4, o, 3), (o, 4, s, 3)):
        both = mine[4 * x + 3] & theirs[4 * y + 3]
        while both:
            low = both & -both
            fa, fb = mine[20][x][low], theirs[20][y][low]
            if fa != fb or fa & (fa - 1):
                return True
            both ^= low
    return False


def of_command(command: Sequence[bytes], base: str, access: KeyAccess | None | bool = False) -> Footprint:
    """The footprint of one concrete command, from the command table (everything for an unknown one), with
    the members of :data:`MEMBER_COMMANDS` in place of their key; ``access``: the command's
    :func:`~emqlab.protocol.commands.key_access`, where the caller has it already."""
    if access is False:
        access = key_access(command)
    fp = of_access(access, base)
    if access is None or not command:
        return fp
    name = command[0]
    how = MEMBER_COMMANDS.get(name.upper() if isinstance(name, bytes) else str(name).upper().encode())
    if how is None:
        return fp
    return _MEMBERS.answer((base, *command), sum(map(len, command)), lambda: _members(fp, how, command))


#: the commands that touch only named members of their one key (the module docstring): name -> (family,
#: whether it writes them, where the members are: ``"rest"`` every argument after the key, ``"pairs"`` every
#: other argument after the key from the first, ``"zadd"`` ZADD's, ``"last"`` the last argument, ``"at2"``
#: the one after the key)
MEMBER_COMMANDS: dict[bytes, tuple[str, bool, str]] = {
    b"SADD": ("set", True, "rest"), b"SREM": ("set", True, "rest"),
    b"SISMEMBER": ("set", False, "rest"), b"SMISMEMBER": ("set", False, "rest"),
    b"ZADD": ("zset", True, "zadd"), b"ZREM": ("zset", True, "rest"), b"ZINCRBY": ("zset", True, "last"),
    b"ZSCORE": ("zset", False, "rest"), b"ZMSCORE": ("zset", False, "rest"),
    b"HSET": ("hash", True, "pairs"), b"HMSET": ("hash", True, "pairs"), b"HSETNX": ("hash", True, "at2"),
    b"HINCRBY": ("hash", True, "at2"), b"HINCRBYFLOAT": ("hash", True, "at2"), b"HDEL": ("hash", True, "rest"),
    b"HGET": ("hash", False, "rest"), b"HMGET": ("hash", False, "rest"), b"HEXISTS": ("hash", False, "rest"),
    b"HSTRLEN": ("hash", False, "rest"),
    b"LREM": ("list", True, "last"),
}
_ZADD_FLAGS = frozenset({b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"})
_MEMBERS: LineCache[Footprint] = LineCache()


def _members(whole: Footprint, how: tuple[str, bool, str], command: Sequence[bytes]) -> Footprint:
    family, writes, where = how
    args = [a if isinstance(a, bytes) else str(a).encode() for a in command[2:]]
    if where == "rest":
        names = args
    elif where == "pairs":
        names = args[0::2]
    elif where == "at2":
        names = args[:1]
    elif where == "last":
        names = args[-1:]
    else:  # ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]
        i = 0
        while i < len(args) and args[i].upper() in _ZADD_FLAGS:
            i += 1
        names = args[i + 1::2]
    keys = whole.reads | whole.writes
    if len(keys) != 1 or not names:  # (a line without members: the server refuses it; the whole key)
        return whole
    (key,) = keys
    if len(key) != 2 or key == ANY:
        return whole
    ms = frozenset((key[0], key[1], family, m.decode("utf-8", "replace")) for m in names)
    return Footprint(reads=frozenset() if writes else ms, writes=ms if writes else frozenset())


@lru_cache(maxsize=4096)  # (a search meets the same few hundred accesses in every run)
def of_access(access: KeyAccess | None, base: str) -> Footprint:
    """The footprint of a command whose :class:`emqlab.protocol.commands.KeyAccess` is ``access`` (``None``: an
    unknown command, which touches everything)."""
    if access is None:
        return Footprint.everything()
    b = base.encode()

    def rel(k: bytes) -> Key:
        if not k.startswith(b):
            return ("other", k.decode("utf-8", "replace"))
        return classify(k[len(b):].decode("utf-8", "replace"))

    writes = {rel(k) for k in access.writes}
    reads = {rel(k) for k in access.reads}
    if access.writes_any:
        writes.add(ANY)
    if access.reads_any:
        reads.add(ANY)
    appends = {k for k in writes if k in LOG_KEYS}
    return Footprint(frozenset(reads - appends), frozenset(writes - appends), frozenset(appends))


def of_commands(commands: Iterable[Sequence[bytes]], base: str) -> Footprint:
    """The union of the commands' footprints (an atomic script's, from every ``redis.call`` it made)."""
    out = Footprint()
    for c in commands:
        out = out | of_command(c, base)
    return out


# -- declared priors --------------------------------------------------------------------------------------

_LOG: list[Key] = [("q", "events")]
_R = list[Key]

#: What each of emqlab's scripts may read and write beyond its KEYS, as keys relative to the queue's base;
#: ``"*"`` as a name matches any job id. Used only where an atomic step cannot be observed (EVALSHA on a
#: server); ``tests/test_reduction.py`` keeps it a superset of what the scripts do.
SCRIPT_PRIORS: dict[str, tuple[_R, _R]] = {
    "moveToFinished": (
        [("q", "meta"), ("q", "paused"), ("job", "*"), ("lock", "*")],
        [("q", "wait"), ("q", "active"), ("q", "prioritized"), ("q", "stalled"), ("q", "limiter"),
         ("q", "delayed"), ("q", "paused"), ("q", "pc"), ("q", "completed"), ("q", "failed"), ("q", "marker"),
         ("q", "metrics:completed"), ("q", "metrics:failed"), ("job", "*"), ("lock", "*"), ("jobsub", "*"),
         ("q", "meta")],
    ),
    "moveStalledJobsToWait": (
        [("lock", "*"), ("q", "meta"), ("q", "paused"), ("job", "*")],
        [("q", "stalled"), ("q", "stalled-check"), ("q", "wait"), ("q", "paused"), ("q", "active"),
         ("q", "marker"), ("job", "*"), ("q", "meta")],
    ),
    "moveToActive": (
        [("q", "paused"), ("q", "meta")],
        [("q", "wait"), ("q", "active"), ("q", "prioritized"), ("q", "pc"), ("q", "delayed"), ("q", "marker"),
         ("q", "limiter"), ("q", "paused"), ("job", "*"), ("lock", "*"), ("q", "meta")],
    ),
    "addStandardJob": ([("q", "paused"), ("q", "active"), ("q", "meta")],
                       [("q", "id"), ("q", "wait"), ("q", "paused"), ("q", "marker"), ("job", "*"),
                        ("q", "completed"), ("q", "meta")]),
    "addDelayedJob": ([("q", "meta")], [("q", "id"), ("q", "delayed"), ("q", "marker"), ("job", "*"),
                                        ("q", "completed"), ("q", "meta")]),
    "addPrioritizedJob": ([("q", "paused"), ("q", "active"), ("q", "meta")],
                          [("q", "id"), ("q", "prioritized"), ("q", "pc"), ("q", "marker"), ("job", "*"),
                           ("q", "completed"), ("q", "meta")]),
    "extendLock": ([], []),
    "releaseLock": ([], []),
}


def prior(name: str, keys: Sequence[str | bytes], base: str) -> Footprint:
    """The declared footprint of script ``name`` called with ``keys``: its prior plus every KEY read and
    written (the event stream appended); everything for a script with no prior."""
    fp = SCRIPT_PRIORS.get(name)
    if fp is None:
        return Footprint.everything()
    ks = set()
    for k in keys:
        t = k.decode("utf-8", "replace") if isinstance(k, bytes) else k
        ks.add(classify(t[len(base):]) if t.startswith(base) else ("other", t))
    reads = set(fp[0]) | ks
    writes = (set(fp[1]) | ks) - LOG_KEYS
    appends = (set(fp[1]) | ks) & LOG_KEYS
    return Footprint(frozenset(reads - appends), frozenset(writes), frozenset(appends | set(_LOG)))


__all__ = ["ANY", "Footprint", "Key", "SCRIPT_PRIORS", "classify", "of_command", "of_commands", "prior"]
