"""Every Redis key of one queue, named as the BullMQ protocol names them.

Keys are ``<prefix>:{<queue>}:<suffix>``; the queue name carries a Redis Cluster hash tag so that every key a
script touches lives in one slot (Redis docs, "Cluster specification: hash tags"; ``PROTOCOL.md`` §5). The
key *order* each script expects is the protocol's contract; the ``*_keys`` methods below return exactly that
order (``PROTOCOL.md`` §1.1 for moveToFinished-14, §2 for moveToActive-11, §3 for the sweep, §4 for the
rest).

A lesson on Redis Cluster (``docs/cluster.md``) needs the layout a user gets wrong: ``<prefix>:<queue>:<suffix>``
without the braces, each key in a slot of its own. :func:`without_hash_tag` makes the queues named inside it
use that layout (``QueueKeys(..., hash_tag=False)`` names one directly).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

Target = Literal["completed", "failed"]

#: The queue-level key suffixes, in no particular order (``PROTOCOL.md`` §4.3).
QUEUE_KEY_NAMES: tuple[str, ...] = (
    "wait",
    "active",
    "paused",
    "prioritized",
    "delayed",
    "completed",
    "failed",
    "waiting-children",
    "stalled",
    "stalled-check",
    "limiter",
    "meta",
    "id",
    "pc",
    "events",
    "marker",
    "repeat",
    "metrics:completed",
    "metrics:failed",
)

#: The lists/sets a job id can be placed in (used by the anomaly checks).
PLACEMENTS: tuple[str, ...] = ("wait", "active", "prioritized", "delayed", "paused", "completed", "failed")
#: The placements that are lists (members head first) and those that are sorted sets (members by score).
LISTS: tuple[str, ...] = ("wait", "active", "paused")
ZSETS: tuple[str, ...] = ("prioritized", "delayed", "completed", "failed")
#: Structures a job waits in before a worker takes it.
WAITING: tuple[str, ...] = ("wait", "paused", "prioritized", "delayed")

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")

#: whether a QueueKeys made without an explicit ``hash_tag`` puts its queue name in braces (see
#: :func:`without_hash_tag`)
_HASH_TAG: ContextVar[bool] = ContextVar("emqlab_hash_tag", default=True)
#: how the run index (``emqlab.backend.namespace.RUN_INDEX``) names a queue whose keys have no hash tag
_UNTAGGED_SUFFIX = ":untagged"


@contextmanager
def without_hash_tag() -> Iterator[None]:
    """Within the block, ``QueueKeys(name)`` names keys ``<prefix>:<name>:<suffix>``, with no hash tag: the
    mis-tagged layout of the Redis Cluster lesson, where a script's keys fall in different slots. It is how
    the lesson gets a :class:`emqlab.engine.runner.Runner` (which names its queue's keys itself) to use that layout;
    a QueueKeys keeps the layout it was made with after the block. Nothing else should need it."""
    token = _HASH_TAG.set(False)
    try:
        yield
    finally:
        _HASH_TAG.reset(token)


@dataclass(frozen=True)
class QueueKeys:
    """The keys of queue ``name`` under ``prefix`` (default ``emq``, as EchoMQ names them).

    >>> k = QueueKeys("orders")
    >>> k.wait
    'emq:{orders}:wait'
    >>> k.lock("7")
    'emq:{orders}:7:lock'

    ``hash_tag=False`` leaves the braces out (``emq:orders:wait``): on Redis Cluster a script's keys then
    hash to different slots and its EVALSHA is refused with CROSSSLOT (``docs/cluster.md``). By default a
    queue has the tag, except inside :func:`without_hash_tag`.

    Raises ``ValueError`` for a queue name that is empty or holds characters other than letters, digits,
    ``_ . -`` (braces would break the hash tag, colons the key layout).
    """

    name: str = "q"
    prefix: str = "emq"
    hash_tag: bool = field(default_factory=_HASH_TAG.get)
    #: where a job's data lives, relative to the base (``{job}``: its id): BullMQ's ``<base><id>``; a scenario
    #: of another queue names its own (``job_key: "asynq:t:{job}"``)
    job_key: str = "{job}"
    #: with a field name (``{job}``: the id), a job's data is that field of the one hash :attr:`job_key`
    #: (bee-queue's ``jobs`` hash): :meth:`job` names the hash, :meth:`job_field_of` the field
    job_field: str | None = None

    def __post_init__(self) -> None:
        if not _QUEUE_NAME.match(self.name):
            raise ValueError(f"queue name {self.name!r}: use letters, digits, '_', '.', '-' only")
        if not self.prefix or any(c in self.prefix for c in "{}: "):
            raise ValueError(f"key prefix {self.prefix!r}: must be non-empty without '{{', '}}', ':' or spaces")

    # -- the base -------------------------------------------------------------------------------------
    @cached_property  # (read for nearly every command a run sends; the fields it is made of are frozen)
    def base(self) -> str:
        """``<prefix>:{<queue>}:`` — the "keys prefix" ARGV of the scripts, with its trailing colon
        (``<prefix>:<queue>:`` without the hash tag)."""
        if not self.hash_tag:
            return f"{self.prefix}:{self.name}:"
        return f"{self.prefix}:{{{self.name}}}:"

    @property
    def tag(self) -> str | None:
        """The text Redis Cluster hashes for every key of the queue (the queue name), or ``None`` without
        the hash tag (then each key's whole name is hashed)."""
        return self.name if self.hash_tag else None

    @property
    def index_name(self) -> str:
        """How the run index lists this queue: its name, with ``:untagged`` appended without the hash tag
        (no queue name holds a colon). :meth:`from_index_name` reads it back."""
        return self.name if self.hash_tag else self.name + _UNTAGGED_SUFFIX

    @classmethod
    def from_index_name(cls, entry: str, prefix: str = "emq") -> QueueKeys:
        """The queue an :attr:`index_name` names."""
        if entry.endswith(_UNTAGGED_SUFFIX):
            return cls(entry[: -len(_UNTAGGED_SUFFIX)], prefix, hash_tag=False)
        return cls(entry, prefix, hash_tag=True)

    def key(self, suffix: str) -> str:
        return self.base + suffix

    def __getattr__(self, item: str) -> str:
        # wait, active, … and metrics keys via attribute access (``k.wait``); dashes become underscores.
        suffix = item.replace("_", "-")
        if suffix in QUEUE_KEY_NAMES:
            return self.key(suffix)
        raise AttributeError(item)

    def job(self, job_id: str | int) -> str:
        """The job hash ``<base><id>`` (``<base>`` + :attr:`job_key` with the id for ``{job}``)."""
        if self.job_key == "{job}":
            return f"{self.base}{job_id}"
        return self.base + self.job_key.replace("{job}", str(job_id))

    def job_field_of(self, job_id: str | int) -> str | None:
        """The field of :meth:`job`'s hash that holds the job's data, or ``None`` (the whole key is the job)."""
        return None if self.job_field is None else self.job_field.replace("{job}", str(job_id))

    def lock(self, job_id: str | int) -> str:
        """The job's lock ``<base><id>:lock`` (STRING token with a PX TTL)."""
        return f"{self.base}{job_id}:lock"

    def metrics(self, target: Target) -> str:
        return self.key(f"metrics:{target}")

    def relative(self, key: str | bytes) -> str:
        """A key without the queue's base (``emq:{q}:wait`` → ``wait``); other keys are returned whole."""
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        return key[len(self.base):] if key.startswith(self.base) else key

    @property
    def pattern(self) -> str:
        """A SCAN MATCH pattern for every key of this queue (braces escaped for glob matching)."""
        if not self.hash_tag:
            return f"{self.prefix}:{self.name}:*"
        return f"{self.prefix}:\\{{{self.name}\\}}:*"

    # -- per-script key lists, in the protocol's order ---------------------------------------------------
    def move_to_finished_keys(self, job_id: str | int, target: Target) -> list[str]:
        """moveToFinished-14's KEYS (``PROTOCOL.md`` §1.1): wait, active, prioritized, events, stalled,
        limiter, delayed, paused, meta, pc, completed|failed, job hash, metrics:<target>, marker."""
        if target not in ("completed", "failed"):
            raise ValueError(f"target must be 'completed' or 'failed', not {target!r}")
        return [
            self.wait, self.active, self.prioritized, self.events, self.stalled, self.limiter,
            self.delayed, self.paused, self.meta, self.pc, self.key(target), self.job(job_id),
            self.metrics(target), self.marker,
        ]

    def move_to_active_keys(self) -> list[str]:
        """moveToActive-11's KEYS (``PROTOCOL.md`` §2): wait, active, prioritized, events, stalled, limiter,
        delayed, paused, meta, pc, marker."""
        return [
            self.wait, self.active, self.prioritized, self.events, self.stalled, self.limiter,
            self.delayed, self.paused, self.meta, self.pc, self.marker,
        ]

    def move_stalled_jobs_to_wait_keys(self) -> list[str]:
        """moveStalledJobsToWait-8's KEYS (``PROTOCOL.md`` §3.2, the lazy v5.53 shape EchoMQ names):
        stalled, wait, active, stalled-check, meta, paused, marker, events."""
        return [
            self.stalled, self.wait, self.active, self.stalled_check, self.meta, self.paused,
            self.marker, self.events,
        ]

    def add_standard_job_keys(self) -> list[str]:
        """addStandardJob-9's KEYS (``PROTOCOL.md`` §4.2): wait, paused, meta, id, completed, delayed,
        active, events, marker."""
        return [
            self.wait, self.paused, self.meta, self.id, self.completed, self.delayed, self.active,
            self.events, self.marker,
        ]

    def extend_lock_keys(self, job_id: str | int) -> list[str]:
        """extendLock-2's KEYS (``PROTOCOL.md`` §4.1): the job's lock, stalled."""
        return [self.lock(job_id), self.stalled]

    def release_lock_keys(self, job_id: str | int) -> list[str]:
        """releaseLock-1's KEYS: the job's lock."""
        return [self.lock(job_id)]
