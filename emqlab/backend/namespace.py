"""Live-server safety: a run's :class:`Namespace` (its own queue's keys only, refused where they exist,
each key with a safety TTL, registered in the run index so that ``emqlab clean`` finds what a killed run
left), and :func:`clean`.

**Who may be cleaned.** The run index sits under the key pattern a restricted user may write
(``emq:{q-*``), so anyone holding that user can add a name to it. :func:`clean` therefore trusts no name
for what it is: it deletes the keys of an indexed queue only when the name has the shape
:func:`unique_queue` gives (``<name>-<8 hex>``, no glob character) *and* the run's mark in
:data:`RUN_MARKS` is the HMAC-SHA256 of the name under this machine's run secret (:func:`run_secret`), which
never leaves the machine. A planted name has no valid mark, so it is reported and left alone; a run
registered under another machine's secret is too (its keys expire with their safety TTL)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from emqlab.backend.clients import describe, is_fake, pipeline, scan_keys
from emqlab.backend.faults import KeysExist, ServerFault, server_fault
from emqlab.protocol.keys import QueueKeys

#: the run index on a live server: a sorted set of the queues runs have claimed, scored by the time (ms)
#: until which their owner is known to be alive (refreshed while it runs). Its key sits under emqlab's own
#: prefix pattern (``emq:{q-*``): "runs" is no name ``unique_queue`` makes (its suffix is hexadecimal).
RUN_INDEX = "emq:{q-runs}:index"
#: each registered run's mark (a hash: index name -> :func:`run_mark`), beside the index in its slot
RUN_MARKS = "emq:{q-runs}:marks"
#: the shape of a name :func:`unique_queue` makes, as the index lists it (``:untagged`` for a queue
#: without hash tag): no glob character, no brace, no colon before the suffix
RUN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}-[0-9a-f]{8}(?::untagged)?")
#: the environment variable that gives the run secret (shared by the machines that should clean each
#: other's runs); else it is kept in a file of the user's state folder
SECRET_ENV = "EMQLAB_RUN_SECRET"
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


def _secret_file() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "emqlab" / "run-secret"


_secret: bytes | None = None


def run_secret() -> bytes:
    """The key of this machine's run marks: ``$EMQLAB_RUN_SECRET`` if set, else 32 random bytes kept in
    ``$XDG_STATE_HOME/emqlab/run-secret`` (``~/.local/state/…``; made on first use, mode 0600). Where that
    file cannot be written, a secret for this process only: its runs are then cleaned by no one, and their
    keys go with their safety TTL."""
    global _secret
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV].encode()
    if _secret is None:
        path = _secret_file()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                _secret = path.read_bytes()
            else:
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_hex(32).encode())
                _secret = path.read_bytes()
            if len(_secret) < 32:  # (a file cut short, or another process still writing it)
                raise OSError("run secret too short")
        except OSError:
            _secret = secrets.token_hex(32).encode()
    return _secret


def run_mark(index_name: str) -> str:
    """The mark of the run registered as ``index_name``: HMAC-SHA256 of the name under :func:`run_secret`."""
    return hmac.new(run_secret(), b"emqlab-run:" + index_name.encode(), hashlib.sha256).hexdigest()


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
        name = self.keys.index_name
        try:
            if force:  # (registering: the mark first, so that no indexed run of ours is ever without one)
                self.conn.hset(RUN_MARKS, name, run_mark(name))
            self.conn.zadd(RUN_INDEX, {name: now + RUN_LEASE_MS})
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
            self.conn.hdel(RUN_MARKS, self.keys.index_name)
        return n


@dataclass(frozen=True)
class AbandonedRun:
    """A run in :data:`RUN_INDEX`: its queue (as the index names it), when its lease ran (or runs) out, its
    keys' count, and ``refused``: why :func:`clean` leaves it alone whatever its lease (``None``: it may
    be cleaned once its lease ran out)."""

    queue: str
    expires_ms: float
    keys: int
    alive: bool
    refused: str | None = None


def abandoned_runs(conn: redis.Redis) -> list[AbandonedRun]:
    """Every run the index lists, with whether its owner's lease still holds (:data:`RUN_LEASE_MS`) and
    whether it is emqlab's to clean (the module docstring): a name of another shape is not scanned at all."""
    import time

    now = time.time() * 1000
    out = []
    entries: list[tuple[Any, float]] = conn.zrange(RUN_INDEX, 0, -1, withscores=True)  # type: ignore[assignment]
    marks: dict[bytes, bytes] = conn.hgetall(RUN_MARKS) if entries else {}  # type: ignore[assignment]
    for member, score in entries:
        raw = member if isinstance(member, bytes) else str(member).encode()
        queue = raw.decode("utf-8", "replace")
        if not RUN_NAME.fullmatch(queue):
            out.append(AbandonedRun(queue, float(score), 0, float(score) > now,
                                    "not a name emqlab gives a run"))
            continue
        mark = marks.get(raw, b"").decode("ascii", "replace")
        refused = None if hmac.compare_digest(mark, run_mark(queue)) else \
            "no mark of this machine's emqlab (another machine's run, or a name someone added)"
        n = sum(1 for _ in scan_keys(conn, QueueKeys.from_index_name(queue).pattern))
        out.append(AbandonedRun(queue, float(score), n, float(score) > now, refused))
    return out


def clean(conn: redis.Redis, *, dry_run: bool = False) -> list[AbandonedRun]:
    """Delete the keys of every run in the index whose lease has run out (its owner is gone) and that is
    emqlab's (:attr:`AbandonedRun.refused` is ``None``), and its index entry; runs still alive and refused
    names are left alone. Only ``emq:{<queue>}:*`` keys of such runs are touched. Returns the runs cleaned
    (or that would be, with ``dry_run``), and those whose clean-up the server refused, with ``refused``
    saying why: one such run does not stop the others."""
    gone = [r for r in abandoned_runs(conn) if not r.alive and r.refused is None]
    done = []
    for r in gone:
        if not dry_run:
            try:
                Namespace(conn, QueueKeys.from_index_name(r.queue)).reset()
                conn.zrem(RUN_INDEX, r.queue)
                conn.hdel(RUN_MARKS, r.queue)
            except redis.exceptions.ResponseError as e:  # (e.g. NOPERM on one queue: the others go on)
                why = " ".join(str(e).split())
                r = dataclasses.replace(r, refused=f"the server refused to delete its keys ({why})")
        done.append(r)
    return done


def unique_queue(base: str = "q") -> str:
    """A queue name for one run on a live server: ``<base>-<8 hex>``."""
    return f"{base}-{secrets.token_hex(4)}"
