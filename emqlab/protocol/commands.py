"""The one Redis command table: which arguments of a concrete command are keys, and whether each key is read,
written, or both.

The data is ``emqlab/protocol/commands.json``, generated from a live server's ``COMMAND INFO`` by
``python scripts/gen_commands.py [REDIS_URL]`` (the file's header records the Redis version). The rules are
those of the Redis docs page "Command key specifications" (https://redis.io/docs/reference/key-specs/):
each command has a list of key specs; a spec's *begin search* step finds where its keys start (``index``: a
fixed argument; ``keyword``: the argument after a token such as ``STREAMS``), its *find keys* step finds the
keys from there (``range``: ``lastkey``/``keystep``/``limit``; ``keynum``: an argument that counts the keys),
and its flags say what the command does with them (``RO``, ``RW``, ``OW``, ``RM``; ``ACCESS``, ``UPDATE``,
``INSERT``, ``DELETE``).

Meant for a partial-order reduction: two commands conflict when they share a key and one of them writes it
(:meth:`KeyAccess.conflicts`). The answers are exact or conservative, never optimistic:

* a key is a *write* when its flags include ``RW``, ``OW``, ``RM``, ``INSERT``, ``UPDATE`` or ``DELETE``, a
  *read* when they include ``RO``, ``RW`` or ``ACCESS``; a spec whose flags name no known access kind is both;
* ``EVAL``/``EVALSHA``/``FCALL``: the declared keys are read *and* written (a script may do anything to them);
  pass ``trust_script_keys=False`` for scripts that also reach keys they do not declare (legal outside cluster
  mode; emqlab's own queue scripts build job keys from the ``ARGV[1]`` prefix);
* a ``keyword`` search is resolved at every occurrence of the keyword, not only the first (a key may be
  spelled like the keyword); a spec flagged ``INCOMPLETE`` takes every argument from its first start on;
* ``VARIABLE_FLAGS`` specs (``SET``, ``BITFIELD``) get the flags of the given arguments, as the server's
  ``COMMAND GETKEYSANDFLAGS`` reports them (``SET k v`` overwrites, ``SET k v GET`` also reads);
* ``SORT``/``SORT_RO`` (the only ``unknown`` specs of Redis 7.0) are parsed as the server parses them:
  ``STORE dst`` is a write, and ``BY``/``GET`` patterns read keys that are not arguments at all
  (``reads_any``);
* a spec that cannot be resolved for the given arguments (a bad ``numkeys``, a range past the end, an
  ``unknown`` spec of another command, a module command without specs) makes every argument from its start
  a possible key, read and written;
* commands that act on the whole keyspace have no key arguments but are flagged: ``KEYS``, ``SCAN``,
  ``RANDOMKEY``, ``DBSIZE`` read it (``reads_any``); ``FLUSHDB``, ``FLUSHALL``, ``SWAPDB``, ``REPLICAOF``,
  ``SLAVEOF`` write it; ``EXEC`` and ``DEBUG`` do both.

Out of scope: keys of other databases (``SELECT``, ``MOVE``, ``COPY ... DB``), commands queued inside
``MULTI`` (they run at ``EXEC``), expiry and eviction, and server state that is not keys (scripts, functions,
configuration, pub/sub channels: ``NOT_KEY`` arguments are not keys).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.resources import files
from typing import Any, Generic, TypeAlias, TypeVar

__all__ = ["DROPS_TTL", "KeyAccess", "LineCache", "command_flags", "command_keys", "is_container", "is_read_only",
           "key_access", "line_flags", "table_version"]

Arg: TypeAlias = "bytes | bytearray | memoryview | str | int | float"

DATA_FILE = "commands.json"

_WRITE_FLAGS = frozenset({"RW", "OW", "RM", "INSERT", "UPDATE", "DELETE"})
_READ_FLAGS = frozenset({"RO", "RW", "ACCESS"})
_ACCESS_KINDS = frozenset({"RO", "RW", "OW", "RM"})
_KNOWN_FLAGS = _WRITE_FLAGS | _READ_FLAGS | {"NOT_KEY", "INCOMPLETE", "VARIABLE_FLAGS"}
_CONSERVATIVE = frozenset({"RW"})

_SCRIPTS = frozenset({"eval", "evalsha", "fcall"})
_READ_ONLY_SCRIPTS = frozenset({"eval_ro", "evalsha_ro", "fcall_ro"})
#: Commands without key arguments that read or write the whole keyspace (there is no key spec to say so).
KEYSPACE_READERS = frozenset({"keys", "scan", "randomkey", "dbsize", "exec", "debug"})
KEYSPACE_WRITERS = frozenset({"flushdb", "flushall", "swapdb", "replicaof", "slaveof", "exec", "debug"})

_INTEGER = re.compile(rb"-?[1-9][0-9]*|0")


@dataclass(frozen=True, slots=True)
class KeyAccess:
    """What one concrete command may do to the data set.

    ``reads``/``writes``: the key arguments it may read / may write (insert, update, overwrite or delete), in
    argument order without repeats; a key that is read and written is in both. ``reads_any``/``writes_any``:
    it may also read / write keys that are not among its arguments (``KEYS``, ``FLUSHDB``, ``SORT ... BY``).
    """

    reads: tuple[bytes, ...]
    writes: tuple[bytes, ...]
    reads_any: bool = False
    writes_any: bool = False

    @property
    def keys(self) -> tuple[bytes, ...]:
        """Every key argument it touches, in argument order without repeats."""
        return tuple(dict.fromkeys(self.reads + self.writes))

    def touches_data(self) -> bool:
        """True when it reads or writes any key at all."""
        return bool(self.reads or self.writes or self.reads_any or self.writes_any)

    def conflicts(self, other: KeyAccess) -> bool:
        """True when the two commands may not commute: one writes a key the other reads or writes (a
        ``*_any`` side counts as touching every key)."""
        if (self.writes_any and other.touches_data()) or (other.writes_any and self.touches_data()):
            return True
        if (self.reads_any and other.writes) or (other.reads_any and self.writes):
            return True
        mine, theirs = set(self.writes), set(other.writes)
        return bool(mine & (theirs | set(other.reads)) or theirs & set(self.reads))


@cache
def _table() -> dict[str, Any]:
    """The parsed ``commands.json`` (``{"header": {...}, "commands": {name: entry}}``), loaded once from the
    package (works from a source tree, an installed wheel or a zip)."""
    data: dict[str, Any] = json.loads(files(__package__ or "emqlab").joinpath(DATA_FILE).read_text("utf-8"))
    return data


@cache
def _containers() -> frozenset[str]:
    return frozenset(name.split("|", 1)[0] for name in _table()["commands"] if "|" in name)


def command_flags(name: str) -> frozenset[str]:
    """The flags of command ``name`` in the table (``"SET"`` -> ``{"write", "denyoom"}``, ``"function|stats"``
    for a container's subcommand); empty for a command the table does not know."""
    return _flags(name.lower())


def line_flags(argv: Sequence[Arg]) -> frozenset[str]:
    """The flags of the command line ``argv``: its command's, or for a container its subcommand's
    (``FUNCTION STATS`` -> ``{"allow_busy", …}``); empty for a command the table does not know."""
    name = _name(argv[0])
    if name in _containers():
        return _flags(f"{name}|{_name(argv[1])}") if len(argv) > 1 else frozenset()
    return _flags(name)


def is_container(name: Arg) -> bool:
    """True for a command whose subcommand names the table's entry (``FUNCTION``, ``XGROUP``, ``CLIENT`` …)."""
    return _name(name) in _containers()


@lru_cache(maxsize=4096)  # (bounded: a script may call any name)
def _flags(name: str) -> frozenset[str]:
    entry = _table()["commands"].get(name)
    return frozenset(entry["flags"]) if entry else frozenset()


def table_version() -> str:
    """The Redis version the table was generated from (``"7.0.15"``)."""
    return str(_table()["header"]["redis_version"])


def _arg(a: Arg) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, (bytearray, memoryview)):
        return bytes(a)
    if isinstance(a, str):
        return a.encode("utf-8")
    if isinstance(a, bool):
        raise TypeError(f"not a Redis argument: {a!r}")
    if isinstance(a, int):
        return str(a).encode()
    if isinstance(a, float):
        return repr(a).encode()
    raise TypeError(f"not a Redis argument: {a!r}")


def _name(name: Arg) -> str:
    return _arg(name).decode("utf-8", "replace").lower()


def _entry(argv: Sequence[bytes]) -> tuple[str, dict[str, Any]] | None:
    """The table entry for a command line: the subcommand's for a container (``XINFO STREAM``), else the
    command's; ``None`` for an unknown command, or a container without a known subcommand."""
    name = _name(argv[0])
    commands = _table()["commands"]
    if "|" in name:
        return None
    if name in _containers():
        if len(argv) < 2:
            return None
        full = f"{name}|{_name(argv[1])}"
        return (full, commands[full]) if full in commands else None
    return (name, commands[name]) if name in commands else None


class _Invalid(Exception):
    """The spec does not fit the arguments (the server would reject the command or cannot tell)."""


def _keyword_starts(bs: list[Any], argv: Sequence[bytes]) -> list[int]:
    """Every position right after an occurrence of the begin-search keyword, nearest the search start first."""
    keyword = str(bs[1]).upper().encode()
    startfrom = int(bs[2])
    argc = len(argv)
    # As Redis searches: forward from startfrom up to the second-to-last argument, or, for a negative
    # startfrom, backward from argc+startfrom down to argument 1.
    search = range(startfrom, argc - 1) if startfrom > 0 else range(argc + startfrom, 0, -1)
    return [i + 1 for i in search if 0 < i < argc and argv[i].upper() == keyword]


def _find(fk: list[Any], first: int, argv: Sequence[bytes]) -> list[int]:
    """Key positions from a begin-search position ``first`` (``range`` or ``keynum``); raises :class:`_Invalid`."""
    argc = len(argv)
    if fk[0] == "range":
        lastkey, step, limit = int(fk[1]), int(fk[2]), int(fk[3])
        if lastkey >= 0:
            last = first + lastkey
        elif limit <= 1:  # 0 and 1 mean no limit
            last = argc + lastkey
        else:  # lastkey -1 with limit n: the first 1/n of the remaining arguments
            last = first + (argc - first) // limit + lastkey
    elif fk[0] == "keynum":
        numidx, firstkey, step = int(fk[1]), int(fk[2]), int(fk[3])
        if first + numidx >= argc or not _INTEGER.fullmatch(argv[first + numidx]):
            raise _Invalid
        n = int(argv[first + numidx])
        if n < 0:
            raise _Invalid
        if n == 0:
            return []
        first += firstkey
        last = first + (n - 1) * step
    else:
        raise _Invalid
    if step < 1 or first >= argc or last >= argc or last < first:
        raise _Invalid
    return list(range(first, last + 1, step))


def _sort_parse(argv: Sequence[bytes], read_only: bool) -> tuple[int | None, bool] | None:
    """``SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA] [STORE dst]`` parsed as
    the server does: ``(position of the STORE key or None, whether BY/GET patterns look up other keys)``, or
    ``None`` for a syntax error. A ``BY`` pattern without ``*`` skips sorting; a ``GET`` pattern other than
    ``#`` is taken to look keys up."""
    store: int | None = None
    lookups = False
    j, argc = 2, len(argv)
    while j < argc:
        token, left = argv[j].upper(), argc - j - 1
        if token in (b"ASC", b"DESC", b"ALPHA"):
            pass
        elif token == b"LIMIT" and left >= 2:
            if not (_INTEGER.fullmatch(argv[j + 1]) and _INTEGER.fullmatch(argv[j + 2])):
                return None
            j += 2
        elif token == b"STORE" and left >= 1 and not read_only:
            store = j + 1
            j += 1
        elif token == b"BY" and left >= 1:
            lookups = lookups or b"*" in argv[j + 1]
            j += 1
        elif token == b"GET" and left >= 1:
            lookups = lookups or argv[j + 1] != b"#"
            j += 1
        else:
            return None
        j += 1
    return store, lookups


def _sort_unknown(flags: frozenset[str], argv: Sequence[bytes], read_only: bool) -> tuple[list[int], bool]:
    """The ``unknown`` specs of SORT/SORT_RO: the STORE spec (write flags) gives the store key's position;
    the BY/GET spec (read flags) gives ``reads_any``. On a syntax error, every argument after any ``STORE``
    and any ``BY``/``GET`` pattern count."""
    is_store_spec = bool(flags & _WRITE_FLAGS)
    parsed = _sort_parse(argv, read_only)
    if parsed is not None:
        store, lookups = parsed
        if is_store_spec:
            return ([store] if store is not None else []), False
        return [], lookups
    tokens = range(2, len(argv) - 1)
    if is_store_spec:
        return [i + 1 for i in tokens if argv[i].upper() == b"STORE"], False
    return [], any(argv[i].upper() in (b"BY", b"GET") for i in tokens)


def _set_flags(argv: Sequence[bytes]) -> frozenset[str]:
    """SET's key is read only with the ``GET`` option (``RW ACCESS UPDATE``), else overwritten (``OW UPDATE``)."""
    if any(a.upper() == b"GET" for a in argv[3:]):
        return frozenset({"RW", "ACCESS", "UPDATE"})
    return frozenset({"OW", "UPDATE"})


def _bitfield_flags(argv: Sequence[bytes]) -> frozenset[str] | None:
    """BITFIELD made only of ``GET type offset`` / ``OVERFLOW mode`` reads (``RO ACCESS``); anything else
    (``SET``, ``INCRBY``, a syntax error) keeps the spec's flags (``None``)."""
    i, argc = 2, len(argv)
    while i < argc:
        token, left = argv[i].upper(), argc - i - 1
        if token == b"GET" and left >= 2:
            i += 3
        elif token == b"OVERFLOW" and left >= 1:
            i += 2
        else:
            return None
    return frozenset({"RO", "ACCESS"})


#: Specs flagged VARIABLE_FLAGS: the flags for the given arguments (the spec's flags are the widest case).
_VARIABLE_FLAGS: dict[str, Callable[[Sequence[bytes]], frozenset[str] | None]] = {
    "set": _set_flags,
    "bitfield": _bitfield_flags,
}


def _resolve(argv: Sequence[bytes], trust_script_keys: bool) -> tuple[dict[int, frozenset[str]], bool, bool] | None:
    """``({position: flags}, reads_any, writes_any)`` for a command line, or ``None`` when unknown."""
    found = _entry(argv)
    if found is None:
        return None
    name, entry = found
    argc = len(argv)
    base = 2 if "|" in name else 1  # the first argument that can be a key
    positions: dict[int, set[str]] = {}
    reads_any = name in KEYSPACE_READERS
    writes_any = name in KEYSPACE_WRITERS

    def add(where: Sequence[int], flags: frozenset[str]) -> None:
        for i in where:
            if base <= i < argc:
                positions.setdefault(i, set()).update(flags)

    def everything_from(start: int, flags: frozenset[str]) -> None:
        add(range(max(start, base), argc), flags | _CONSERVATIVE)

    legacy = entry.get("legacy_keys")
    if legacy is not None:  # module command without key specs
        everything_from(base, frozenset())
    for spec_flags, bs, fk in entry["key_specs"]:
        flags = frozenset(spec_flags)
        if bs[0] == "unknown" or fk[0] == "unknown":
            if name in ("sort", "sort_ro"):
                where, lookups = _sort_unknown(flags, argv, read_only=name == "sort_ro")
                add(where, flags)
                reads_any = reads_any or lookups
            else:
                everything_from(base, flags)
                reads_any = True
                writes_any = writes_any or _is_write(flags)
            continue
        if bs[0] == "index":
            starts = [int(bs[1])]
        elif bs[0] == "keyword":
            starts = _keyword_starts(bs, argv)
        else:
            everything_from(base, flags)
            continue
        if starts and "INCOMPLETE" in flags:
            everything_from(min(starts), flags)
            continue
        for first in starts:
            try:
                add(_find(fk, first, argv), flags)
            except _Invalid:
                everything_from(first, flags)
    narrower = _VARIABLE_FLAGS.get(name)
    if narrower is not None:
        flags_now = narrower(argv)
        if flags_now is not None:
            for i, f in positions.items():
                if "VARIABLE_FLAGS" in f:
                    positions[i] = set(flags_now)
    if name in _SCRIPTS or name in _READ_ONLY_SCRIPTS:
        script_flags = frozenset({"RO"}) if name in _READ_ONLY_SCRIPTS else _CONSERVATIVE
        for flags_here in positions.values():
            flags_here.update(script_flags)
        if not trust_script_keys:
            reads_any = True
            writes_any = writes_any or name in _SCRIPTS
    # An argument only a NOT_KEY spec points at (a shard channel) is not a key.
    out = {i: frozenset(f) for i, f in sorted(positions.items()) if f != {"NOT_KEY"}}
    return out, reads_any, writes_any


def _kinds(flags: frozenset[str]) -> tuple[bool, bool]:
    """(read, write) for a key's flags; flags naming no access kind, or unknown flags, are both."""
    if not flags & _ACCESS_KINDS or flags - _KNOWN_FLAGS:
        return True, True
    return bool(flags & _READ_FLAGS), bool(flags & _WRITE_FLAGS)


def _is_write(flags: frozenset[str]) -> bool:
    return _kinds(flags)[1]


def _argv(command: Sequence[Arg]) -> list[bytes]:
    if isinstance(command, (bytes, str)) or not len(command):
        raise ValueError(f"a command is a non-empty sequence of arguments, not {command!r}")
    return [_arg(a) for a in command]


def key_access(command: Sequence[Arg], *, trust_script_keys: bool = True) -> KeyAccess | None:
    """The keys one concrete command may read and write, e.g. ``(b"LMOVE", b"a", b"b", b"LEFT", b"RIGHT")`` ->
    ``KeyAccess(reads=(b"a", b"b"), writes=(b"a", b"b"))``; ``None`` for a command (or container subcommand)
    the table does not know. Names are case-insensitive; arguments may be bytes or str (keys come back as
    bytes). ``trust_script_keys=False``: EVAL/EVALSHA/FCALL may also read and write any key (their ``_RO`` forms
    read any key).

    Rules: module docstring; the Redis docs page "Command key specifications".
    """
    argv = command if type(command) is tuple and command and set(map(type, command)) == _BYTES_ONLY \
        else _argv(command)
    return _ACCESS.answer((trust_script_keys, *argv), sum(map(len, argv)),
                          lambda: _key_access(argv, trust_script_keys))


T = TypeVar("T")
#: the argument types of a command line given as it is sent (every argument bytes)
_BYTES_ONLY = {bytes}


class LineCache(Generic[T]):
    """Answers remembered per command line: an exploration sends the same few hundred lines in every run,
    and what the command table says of one (its keys, whether a script may send it) never changes. Holds
    up to ``size`` lines of at most ``max_bytes`` bytes each (a longer line is answered afresh each time);
    when full, it starts again empty."""

    def __init__(self, size: int = 4096, max_bytes: int = 1024) -> None:
        self.size, self.max_bytes = size, max_bytes
        self._answers: dict[tuple[object, ...], T] = {}

    def answer(self, line: tuple[object, ...], nbytes: int, compute: Callable[[], T]) -> T:
        """The answer for ``line`` (``nbytes`` long): remembered, or ``compute()`` and remembered."""
        if nbytes > self.max_bytes:
            return compute()
        try:
            return self._answers[line]
        except KeyError:
            pass
        found = compute()
        if len(self._answers) >= self.size:
            self._answers.clear()
        self._answers[line] = found
        return found


_ACCESS: LineCache[KeyAccess | None] = LineCache()
_KEYS: LineCache[tuple[bytes, ...] | None] = LineCache()


def _key_access(argv: Sequence[bytes], trust_script_keys: bool) -> KeyAccess | None:
    resolved = _resolve(argv, trust_script_keys)
    if resolved is None:
        return None
    positions, reads_any, writes_any = resolved
    reads: dict[bytes, None] = {}
    writes: dict[bytes, None] = {}
    for i, flags in positions.items():
        r, w = _kinds(flags)
        if r:
            reads[argv[i]] = None
        if w:
            writes[argv[i]] = None
    return KeyAccess(tuple(reads), tuple(writes), reads_any, writes_any)


def command_keys(command: Sequence[Arg]) -> tuple[bytes, ...] | None:
    """Every key argument of one concrete command, in argument order, one per key position (a key given twice
    appears twice, as in ``COMMAND GETKEYS``): ``(b"MSET", b"a", b"1", b"b", b"2")`` -> ``(b"a", b"b")``;
    ``None`` for an unknown command. Conservative where a spec cannot be resolved (module docstring)."""
    argv = command if type(command) is tuple and command and set(map(type, command)) == _BYTES_ONLY \
        else _argv(command)

    def compute() -> tuple[bytes, ...] | None:
        resolved = _resolve(argv, True)
        return None if resolved is None else tuple(argv[i] for i in resolved[0])

    return _KEYS.answer(tuple(argv), sum(map(len, argv)), compute)


def is_read_only(name: bytes | str | Sequence[Arg]) -> bool:
    """True when the command has the server's ``readonly`` flag (it never changes the data set). ``name`` is a
    command name (``"GET"``, ``b"xinfo|stream"``) or a command line (``(b"XINFO", b"STREAM", b"s")``, the
    subcommand decides); unknown commands are not read-only. Note that the flag is about the data set as the
    client sees it: ``PFCOUNT`` is ``readonly`` yet its key spec is ``RW`` (it may rewrite the HyperLogLog's
    cached cardinality), so :func:`key_access` reports a write."""
    if isinstance(name, (bytes, str)):
        text = _name(name).strip()
        entry = _table()["commands"].get(text)
        if entry is None and " " in text:
            found = _entry([_arg(p) for p in text.split()])
            entry = found[1] if found else None
    else:
        found = _entry(_argv(name))
        entry = found[1] if found else None
    return entry is not None and "readonly" in entry["flags"]


#: commands that may leave a key they write without the TTL it had (a new value, a delete, a move)
DROPS_TTL = frozenset({"SET", "GETSET", "SETEX", "PSETEX", "SETNX", "DEL", "UNLINK", "GETDEL", "GETEX", "PERSIST",
                       "RENAME", "RENAMENX", "RESTORE", "COPY", "MOVE", "LMOVE", "RPOPLPUSH", "BLMOVE", "BRPOPLPUSH",
                       "SMOVE", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZRANGESTORE", "SUNIONSTORE",
                       "SINTERSTORE", "SDIFFSTORE", "SORT", "EXEC", "EVAL", "EVALSHA",
                       # a removal that empties a collection deletes it; a later write makes it anew
                       "LPOP", "RPOP", "LREM", "LTRIM", "ZREM", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZPOPMIN",
                       "ZPOPMAX", "SREM", "SPOP", "HDEL", "XDEL", "XTRIM"})
