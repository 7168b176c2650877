"""Live-server safety: a run's :class:`Namespace` (its own queue's keys only, refused where they exist,
each key with a safety TTL, registered in the run index so that ``emqlab clean`` finds what a killed run
left), and :func:`clean`."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from emqlab.backend.clients import describe, is_fake, pipeline, scan_keys
from emqlab.backend.faults import KeysExist, ServerFault, server_fault
from emqlab.protocol.keys import QueueKeys

#: the run index on a live server: a sorted set of the queues runs have claimed, scored by the time (ms)
#: until which their owner is known to be alive (refreshed while it runs). Its key sits under emqlab's own
#: prefix pattern (``emq:{q-*``): "runs" is no name ``unique_queue`` makes (its suffix is hexadecimal).
RUN_INDEX = "emq:{q-runs}:index"
#: how long a run's claim lives without a heartbeat (ms); a run refreshes it at least every HEARTBEAT_MS
RUN_LEASE_MS = 15 * 60 * 1000
HEARTBEAT_MS = 60 * 1000


#: the safety TTL of a live run's keys (ms): far above any TTL of the protocol (a lock's 30 s, a seeded lock's
#: 50 min, the stalled-check throttle, a rate-limit window) and above any one run (each run deletes and
#: rewrites its keys, so a key never outlives the run that wrote it but by this), so a run killed with
#: SIGKILL leaves nothing behind for longer than a day
SAFETY_TTL_MS = 24 * 60 * 60 * 1000
#: a PTTL above this (ms) is emqlab's safety TTL, read as "no expiry" by every state reader (no protocol TTL
#: comes near it)
SAFETY_TTL_FLOOR_MS = SAFETY_TTL_MS // 2
#: keys (relative to the queue's base) that never get a safety TTL because a script reads their TTL: the
#: rate limiter's counter (``PTTL`` in fetchNextJob: no TTL there means "no window", a TTL a delay)
TTL_OBSERVED = frozenset({"limiter"})


def has_expiry(pttl: int) -> bool:
    """Whether a key with this ``PTTL`` (ms; -1 none, -2 missing) expires as far as the protocol goes: a
    safety TTL (above :data:`SAFETY_TTL_FLOOR_MS`) is no expiry."""
    return 0 < pttl <= SAFETY_TTL_FLOOR_MS


@dataclass
class Namespace:
    """The keys one run owns: every key of queue ``keys`` (``emq:{<queue>}:*``).

    ``claim()`` refuses (:class:`KeysExist`) when any such key exists already; ``reset()`` and ``release()``
    delete only such keys. On a fakeredis server that this process created, ``reset()`` may flush it. On a
    live server the claim is registered in :data:`RUN_INDEX` with a lease that :meth:`heartbeat` renews, so
    that ``emqlab clean`` can find the keys of a run that died (kill -9, a lost machine) and delete them.

    On a Redis Cluster the same rules hold: a tagged queue's keys all live in the slot of its name, so the
    SCANs go to the one node owning it (an untagged queue's, :func:`emqlab.protocol.keys.without_hash_tag`, to every
    primary), and the deletes go to each key's node.
    """

    conn: redis.Redis
    keys: QueueKeys

    def existing(self, limit: int = 5) -> list[bytes]:
        found: list[bytes] = []
        for k in scan_keys(self.conn, self.keys.pattern):
            found.append(k)
            if len(found) >= limit:
                break
        return found

    def claim(self) -> Namespace:
        found = self.existing()
        if found:
            shown = ", ".join(k.decode("utf-8", "replace") for k in found[:3])
            raise KeysExist(
                f"refusing to run on {describe(self.conn)}: keys under {self.keys.base} already exist "
                f"({shown}{', …' if len(found) > 3 else ''}); if a run of emqlab left them behind, "
                f"`emqlab clean --redis URL` deletes the keys of runs whose owner is gone"
            )
        claimed = getattr(self.conn, "_emqlab_claimed", None)
        if claimed is not None:
            claimed.add(self.keys.base)
        self._beat = 0.0
        self.heartbeat(force=True)
        return self

    def heartbeat(self, *, force: bool = False) -> None:
        """Renew the run's lease in :data:`RUN_INDEX` (live servers; at most once per HEARTBEAT_MS)."""
        if is_fake(self.conn):
            return
        import time

        now = time.time() * 1000
        if not force and now - getattr(self, "_beat", 0.0) < HEARTBEAT_MS:
            return
        self._beat = now
        try:
            self.conn.zadd(RUN_INDEX, {self.keys.index_name: now + RUN_LEASE_MS})
        except redis.exceptions.ResponseError as e:
            fault = server_fault(e)
            if fault is None:
                raise
            then = "no run can start" if force else "a run cannot go on truthfully past it; the run is aborted"
            raise ServerFault(f"registering the run in {RUN_INDEX} got a server error ({fault}): {then}",
                              detail=fault) from None

    def protect(self, keys: Iterable[bytes]) -> int:
        """Give each of ``keys`` that has no TTL the safety TTL (:data:`SAFETY_TTL_MS`; ``PEXPIRE … NX``, one
        round trip), except keys outside the namespace and :data:`TTL_OBSERVED`; returns how many were sent.
        Nothing on fakeredis (a process's own server dies with it).

        Why it changes no reply and no compared state: ``NX`` never touches a TTL the protocol set; no shipped
        script reads the TTL of a key it applies to (only the limiter's, which is left out) or sets an expiry
        conditionally; it is far longer than any run, so no key expires because of it; and the state readers
        read a TTL above :data:`SAFETY_TTL_FLOOR_MS` as none (:func:`has_expiry`)."""
        if is_fake(self.conn):
            return 0
        base = self.keys.base.encode()
        exempt = {base + k.encode() for k in TTL_OBSERVED}
        chosen = [k for k in dict.fromkeys(keys) if k.startswith(base) and k not in exempt]
        if not chosen:
            return 0
        pipe = pipeline(self.conn, transaction=False)
        for k in chosen:
            pipe.execute_command("PEXPIRE", k, SAFETY_TTL_MS, "NX")
        try:
            pipe.execute(raise_on_error=False)
        except redis.exceptions.ResponseError:  # pragma: no cover - a server before 7.0 (no NX): leave it
            pass
        return len(chosen)

    @property
    def sole_owner(self) -> bool:
        """True on a fakeredis server this process created where no other namespace is claimed: the whole
        server may then be flushed instead of deleting the namespace key by key."""
        return getattr(self.conn, "_emqlab_owned", False) and getattr(self.conn, "_emqlab_claimed", set()) <= {
            self.keys.base}

    def reset(self) -> int:
        """Delete every key of the namespace; returns how many were deleted."""
        if self.sole_owner:
            n = int(self.conn.dbsize())
            self.conn.flushdb()
            return n
        if is_fake(self.conn):
            n = int(self.conn.dbsize())
            if n:
                # A fakeredis server belongs to this process; still, only flush when every key is ours.
                ours = sum(1 for _ in scan_keys(self.conn, self.keys.pattern))
                if ours == n:
                    self.conn.flushdb()
                    return n
        deleted = 0
        batch: list[bytes] = []
        for k in scan_keys(self.conn, self.keys.pattern):
            if not k.startswith(self.keys.base.encode()):  # belt and braces: SCAN glob vs our base
                continue
            batch.append(k)
            if len(batch) >= 500:
                deleted += int(self.conn.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(self.conn.delete(*batch))
        return deleted

    def release(self) -> int:
        """Delete the namespace's keys and give up the claim."""
        n = self.reset()
        claimed = getattr(self.conn, "_emqlab_claimed", None)
        if claimed is not None:
            claimed.discard(self.keys.base)
        if not is_fake(self.conn):
            self.conn.zrem(RUN_INDEX, self.keys.index_name)
        return n


@dataclass(frozen=True)
class AbandonedRun:
    """A run in :data:`RUN_INDEX`: its queue, when its lease ran (or runs) out, and its keys' count."""

    queue: str
    expires_ms: float
    keys: int
    alive: bool


def abandoned_runs(conn: redis.Redis) -> list[AbandonedRun]:
    """Every run the index lists, with whether its owner's lease still holds (:data:`RUN_LEASE_MS`)."""
    import time

    now = time.time() * 1000
    out = []
    entries: list[tuple[Any, float]] = conn.zrange(RUN_INDEX, 0, -1, withscores=True)  # type: ignore[assignment]
    for member, score in entries:
        queue = member.decode() if isinstance(member, bytes) else str(member)
        n = sum(1 for _ in scan_keys(conn, QueueKeys.from_index_name(queue).pattern))
        out.append(AbandonedRun(queue, float(score), n, float(score) > now))
    return out


def clean(conn: redis.Redis, *, dry_run: bool = False) -> list[AbandonedRun]:
    """Delete the keys of every run in the index whose lease has run out (its owner is gone), and its
    index entry; runs still alive are left alone. Only ``emq:{<queue>}:*`` keys of indexed queues are
    touched. Returns the runs cleaned (or that would be, with ``dry_run``)."""
    gone = [r for r in abandoned_runs(conn) if not r.alive]
    if not dry_run:
        for r in gone:
            Namespace(conn, QueueKeys.from_index_name(r.queue)).reset()
            conn.zrem(RUN_INDEX, r.queue)
    return gone


def unique_queue(base: str = "q") -> str:
    """A queue name for one run on a live server: ``<base>-<8 hex>``."""
    return f"{base}-{secrets.token_hex(4)}"
