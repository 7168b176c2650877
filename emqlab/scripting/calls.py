"""The Python API to emqlab's queue scripts (``lua/*.lua``): build a call, run it, decode the reply.

Every operation comes in two parts:

* a **builder** (``*_call``) that returns a :class:`ScriptCall` — the script's name, its KEYS and its ARGV,
  exactly as they go to the server. The simulator uses it to run the *same* call either atomically (one
  ``EVALSHA``, :func:`run_call`) or split, one ``redis.call`` at a time, through :mod:`emqlab.scripting.host`;
* a **function** that runs the call with :func:`emqlab.scripting.registry.execute` (or, given ``scripts=``, with
  another :class:`ScriptSet`, e.g. BullMQ's shipped scripts, :meth:`ScriptSet.bullmq`) and decodes the
  reply into Python values, raising :class:`FinishError` for the protocol's negative return codes.

Units: every timestamp and duration is in **milliseconds**; ``timestamp=None`` means "now" (the client's
clock, as BullMQ's clients send it). Protocol sections cited as ``PROTOCOL.md §n`` refer to
``shared/design/PROTOCOL.md``; emqlab's own reading of it is ``docs/protocol.md``.

The shapes follow EchoMQ's Elixir API (``move_to_finished/7``, ``move_to_active/4``,
``move_stalled_jobs_to_wait/4``, ``release_lock/4``), which matches BullMQ's official Elixir port.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack
import redis

from emqlab.protocol.keys import QueueKeys, Target
from emqlab.protocol.outcome import RETURN_CODE_MEANINGS, RETURN_CODES
from emqlab.scripting.registry import (
    KeyCountMismatch,
    Script,
    ScriptError,
    ScriptSet,
    UnknownScript,
    default_scripts,
    execute,
)

__all__ = [
    # registry re-exports
    "Script", "ScriptSet", "ScriptError", "KeyCountMismatch", "UnknownScript", "execute", "default_scripts",
    # calls
    "ScriptCall", "run_call", "now_ms",
    # results and errors
    "NextJob", "decode_next", "FinishError", "RETURN_CODES", "RETURN_CODE_MEANINGS",
    # moveToFinished
    "FinishOpts", "move_to_finished_call", "move_to_finished", "move_to_completed", "move_to_failed",
    # moveToActive
    "move_to_active_call", "move_to_active",
    # the sweep
    "move_stalled_jobs_to_wait_call", "move_stalled_jobs_to_wait", "STALLED_LIMIT_REASON",
    # add
    "add_job_call", "add_job",
    # locks
    "extend_lock_call", "extend_lock", "release_lock_call", "release_lock",
    # reading
    "job_fields",
]

# -- return codes (their tables: emqlab.protocol.outcome) ------------------------------------------------

#: The deferred-failure reason the sweep stores in ``defa`` past ``maxStalledCount`` (``PROTOCOL.md`` §3.1).
STALLED_LIMIT_REASON = "job stalled more than allowable limit"


class FinishError(Exception):
    """A script answered with a negative return code.

    ``code`` is the integer (e.g. ``-2``), ``code_name`` its protocol name (``JobLockNotExist``),
    ``meaning`` a few words (``missing lock``), ``job_id`` and ``command`` what was attempted. The message
    follows BullMQ's (``Missing lock for job 1. moveToFinished``).
    """

    def __init__(self, code: int, job_id: str | None = None, command: str = "moveToFinished",
                 state: str = "active") -> None:
        self.code = int(code)
        self.code_name = RETURN_CODES.get(self.code, "Unknown")
        self.meaning = RETURN_CODE_MEANINGS.get(self.code, "unknown code")
        self.job_id = job_id
        self.command = command
        super().__init__(_finish_message(self.code, job_id, command, state))


#: The message of each return code, in the words BullMQ's clients use (``{job}``, ``{command}``, ``{state}``).
_FINISH_MESSAGES: dict[int, str] = {
    -1: "Missing key for job {job}. {command}",
    -2: "Missing lock for job {job}. {command}",
    -3: "Job {job} is not in the {state} state. {command}",
    -4: "Job {job} has pending dependencies. {command}",
    -5: "Missing key for parent job of {job}. {command}",
    -6: "Lock mismatch for job {job}. Cmd {command} from {state}",
    -7: "The parent job {job} cannot be replaced. {command}",
    -9: "Cannot complete job {job} because it has at least one failed child. {command}",
}


def _finish_message(code: int, job_id: str | None, command: str, state: str) -> str:
    template = _FINISH_MESSAGES.get(code, "Unknown code " + str(code) + " error for {job}. {command}")
    return template.format(job=job_id, command=command, state=state)


# -- calls ----------------------------------------------------------------------------------------------


@dataclass
class ScriptCall:
    """One script invocation: the script's command name (``moveToFinished``), its KEYS and its ARGV, exactly
    as sent. Run it atomically with :func:`run_call`, or split with :class:`emqlab.scripting.host.LuaHost`
    (``host.start(call.script().text, call.keys, call.args)``)."""

    name: str
    keys: list[str]
    args: list[bytes | str]

    def script(self, scripts: ScriptSet | None = None) -> Script:
        """The :class:`Script` (flattened text, SHA1) this call runs, from ``scripts`` or emqlab's set."""
        return (scripts or default_scripts())[self.name]


def run_call(conn: redis.Redis, call: ScriptCall, scripts: ScriptSet | None = None) -> Any:
    """Run ``call`` atomically (``EVALSHA``, loading the script on ``NOSCRIPT``) and return the raw reply.

    Raises :class:`KeyCountMismatch` before sending anything when the KEYS count does not match the script,
    and ``redis.ResponseError`` for an error reply (a Lua error included)."""
    if scripts is None:
        return execute(conn, call.name, call.keys, call.args)
    return scripts.execute(conn, call.name, call.keys, call.args)


def now_ms() -> int:
    """The client's clock in milliseconds since the epoch."""
    return int(time.time() * 1000)


def _pack(value: Any) -> bytes:
    # Strings are written with msgpack's str family, never bin: Redis's cmsgpack rejects bin
    # ("Bad data format in input."). use_bin_type=False also writes bytes values as str.
    return msgpack.packb(value, use_bin_type=False)


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _flat_fields(fields: Mapping[str, Any]) -> list[str | bytes]:
    """A mapping as ``[field, value, …]``; values that are not text are JSON-encoded."""
    flat: list[str | bytes] = []
    for k, v in fields.items():
        flat.append(str(k))
        flat.append(v if isinstance(v, (str, bytes)) else json.dumps(v, separators=(",", ":")))
    return flat


# -- next-job replies -----------------------------------------------------------------------------------


@dataclass
class NextJob:
    """What a fetch returned (``PROTOCOL.md`` §1.7: the 4-element reply ``[fields, id, rateLimitDelay,
    delayUntil]``).

    * A job: ``job_id`` is set, ``data`` holds the job hash (str → str, from the flat ``HGETALL``, after
      ``processedOn``/``ats``/``pb`` were written), both delays are 0.
    * No job, but something to wait for: ``job_id`` is ``None`` and ``rate_limit_delay`` (ms left in the
      rate-limit window) or ``delay_until`` (epoch ms at which the next delayed job is due) is positive.
      :attr:`is_wait` tells this case apart.

    "Nothing at all" (reply ``0`` or ``{0,0,0,0}``) decodes to ``None``, not to a ``NextJob``.
    """

    job_id: str | None
    data: dict[str, str] = field(default_factory=dict)
    rate_limit_delay: int = 0
    delay_until: int = 0

    @property
    def is_job(self) -> bool:
        """True when a job was fetched (moved to active and, unless the token was ``"0"``, locked)."""
        return self.job_id is not None

    @property
    def is_wait(self) -> bool:
        """True for "no job now": rate limited or only delayed jobs left."""
        return self.job_id is None

    def get(self, name: str, default: str | None = None) -> str | None:
        """One field of the job hash."""
        return self.data.get(name, default)

    @property
    def name(self) -> str | None:
        return self.data.get("name")

    @property
    def payload(self) -> Any:
        """The job's ``data`` field, JSON-decoded (``None`` when absent)."""
        raw = self.data.get("data")
        return None if raw is None else json.loads(raw)

    @property
    def attempts_made(self) -> int:
        """``atm``: finished attempts (moveToFinished increments it)."""
        return int(self.data.get("atm", 0))

    @property
    def attempts_started(self) -> int:
        """``ats``: activations (each fetch increments it)."""
        return int(self.data.get("ats", 0))

    @property
    def stalled_counter(self) -> int:
        """``stc``: times the sweep recovered this job."""
        return int(self.data.get("stc", 0))

    @property
    def deferred_failure(self) -> str | None:
        """``defa``: a failure to apply at once (the sweep's stall limit); the worker should fail the job."""
        return self.data.get("defa")


def decode_next(reply: Any) -> NextJob | None:
    """Decode a fetch reply (from moveToActive-11 or moveToFinished-14's fetch-next).

    ``0``/``None``/``[0, 0, 0, 0]`` → ``None``; ``[fields, id, 0, 0]`` → a job; ``[0, 0, ttl, 0]`` or
    ``[0, 0, 0, due]`` → a :class:`NextJob` with ``job_id=None`` (see :attr:`NextJob.is_wait`). Raises
    :class:`FinishError` for a negative integer and ``ValueError`` for any other shape."""
    if reply is None or reply == 0:
        return None
    if isinstance(reply, int):
        if reply < 0:
            raise FinishError(reply)
        raise ValueError(f"unexpected script reply {reply!r}")
    if not isinstance(reply, (list, tuple)) or len(reply) < 2:
        raise ValueError(f"unexpected script reply {reply!r}")
    fields_raw = reply[0]
    job_id = reply[1]
    rate = int(reply[2]) if len(reply) > 2 and reply[2] else 0
    due = int(reply[3]) if len(reply) > 3 and reply[3] else 0
    if isinstance(fields_raw, (list, tuple)):
        flat = [_text(x) for x in fields_raw]
        data = dict(zip(flat[0::2], flat[1::2], strict=False))
        return NextJob(_text(job_id), data, rate, due)
    if rate or due:
        return NextJob(None, {}, rate, due)
    return None


# -- moveToFinished-14 ----------------------------------------------------------------------------------


@dataclass
class FinishOpts:
    """The options map of moveToFinished-14 (ARGV[8], ``PROTOCOL.md`` §1.2).

    * ``token`` — the worker's lock token; ``"0"`` = the caller holds no lock (skip lock checks).
    * ``keep_jobs`` — ``{"count": n, "age": seconds, "limit": n}``; ``None`` keeps every job (packed as
      ``{"count": -1}``, BullMQ's "keep all"); an ``int`` is a count; ``True`` = ``{"count": 0}`` (remove
      on finish), ``False`` = keep all — as BullMQ's Python client maps removeOnComplete/removeOnFail.
    * ``lock_duration`` — ms, lock TTL of a job fetched by fetch-next.
    * ``attempts`` — max attempts; 0 = never retry. emqlab's script retries a failure itself while
      ``atm + 1 < attempts`` (an intended difference: BullMQ's client calls retryJob instead).
    * ``max_metrics_size`` — ``""`` = metrics off, else the number of one-minute data points kept.
    * ``limiter`` — ``{"max": n, "duration": ms}`` for fetch-next.
    * ``name`` — worker name, stored as ``pb`` on a fetched job.
    * ``backoff`` — ms before a retry (emqlab only; 0 = back to ``wait`` at once, > 0 = to ``delayed``).
    """

    token: str
    keep_jobs: Mapping[str, Any] | int | bool | None = None
    lock_duration: int = 30000
    attempts: int = 0
    max_metrics_size: int | str = ""
    limiter: Mapping[str, int] | None = None
    name: str | None = None
    backoff: int = 0

    def keep_jobs_map(self) -> dict[str, Any]:
        """``keep_jobs`` as the map the script reads."""
        kj = self.keep_jobs
        if kj is None or kj is False:
            return {"count": -1}
        if kj is True:
            return {"count": 0}
        if isinstance(kj, int):
            return {"count": kj}
        return dict(kj)

    def to_map(self) -> dict[str, Any]:
        """The options as a plain dict (what :meth:`pack` encodes)."""
        m: dict[str, Any] = {
            "token": str(self.token),
            "keepJobs": self.keep_jobs_map(),
            "lockDuration": int(self.lock_duration),
            "attempts": int(self.attempts),
            "maxMetricsSize": "" if self.max_metrics_size == "" else int(self.max_metrics_size),
            "backoff": int(self.backoff),
        }
        if self.limiter is not None:
            m["limiter"] = {k: int(v) for k, v in self.limiter.items()}
        if self.name is not None:
            m["name"] = str(self.name)
        return m

    def pack(self) -> bytes:
        """msgpack bytes for ARGV[8]."""
        return _pack(self.to_map())


def _encode_value(target: Target, value: Any) -> str:
    if target == "completed":
        return json.dumps(value, separators=(",", ":"))
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def move_to_finished_call(
    keys: QueueKeys,
    job_id: str | int,
    token: str,
    target: Target,
    value: Any,
    opts: FinishOpts,
    fetch_next: bool = True,
    *,
    timestamp: int,
    fields: Mapping[str, Any] | None = None,
) -> ScriptCall:
    """Build moveToFinished-14 (``PROTOCOL.md`` §1.1/§1.2): 14 KEYS, ARGV ``[id, timestamp ms, property,
    value, target, "1"|"", prefix, opts, fields]``.

    ``token`` overrides ``opts.token``. ``value`` is the return value (JSON-encoded) for ``completed``,
    the failure reason (sent as text) for ``failed``. ``fields`` are written into the job hash after the
    lock check (ARGV[9], e.g. ``{"stacktrace": [...]}``; non-text values JSON-encoded).
    Raises ``ValueError`` for a target other than ``completed``/``failed``."""
    keys_list = keys.move_to_finished_keys(job_id, target)
    prop = "returnvalue" if target == "completed" else "failedReason"
    packed_opts = replace(opts, token=str(token)).pack()
    packed_fields: bytes | str = _pack(_flat_fields(fields)) if fields else ""
    args: list[bytes | str] = [
        str(job_id), str(int(timestamp)), prop, _encode_value(target, value), target,
        "1" if fetch_next else "", keys.base, packed_opts, packed_fields,
    ]
    return ScriptCall("moveToFinished", keys_list, args)


def _finish_reply(reply: Any, job_id: str | int, command: str) -> NextJob | None:
    if isinstance(reply, int) and reply < 0:
        raise FinishError(reply, str(job_id), command)
    return decode_next(reply)


def move_to_finished(
    conn: redis.Redis,
    keys: QueueKeys,
    job_id: str | int,
    token: str,
    target: Target,
    value: Any,
    opts: FinishOpts,
    fetch_next: bool = True,
    *,
    timestamp: int | None = None,
    fields: Mapping[str, Any] | None = None,
    scripts: ScriptSet | None = None,
) -> NextJob | None:
    """Finish active job ``job_id`` as ``target`` in one atomic script (``PROTOCOL.md`` §1): check the job,
    its children (completed only), the lock and ``active``; then release the lock, leave ``active``, and
    file the job (or, in emqlab, retry it — see :class:`FinishOpts`); emit events; update metrics;
    optionally fetch the next job.

    Returns the fetched :class:`NextJob` (or a "wait" ``NextJob`` when fetch-next was refused by the rate
    limit / found only delayed jobs), or ``None``. Raises :class:`FinishError` for -1 (no job hash),
    -2 (no lock), -3 (not in active), -4 (pending children), -6 (someone else's lock), -9 (failed
    children); emqlab's script writes nothing in those cases."""
    call = move_to_finished_call(keys, job_id, token, target, value, opts, fetch_next,
                                 timestamp=now_ms() if timestamp is None else timestamp, fields=fields)
    return _finish_reply(run_call(conn, call, scripts), job_id, "moveToFinished")


def move_to_completed(
    conn: redis.Redis,
    keys: QueueKeys,
    job_id: str | int,
    token: str,
    returnvalue: Any,
    opts: FinishOpts,
    fetch_next: bool = True,
    *,
    timestamp: int | None = None,
    fields: Mapping[str, Any] | None = None,
    scripts: ScriptSet | None = None,
) -> NextJob | None:
    """:func:`move_to_finished` with target ``completed``; ``returnvalue`` is stored JSON-encoded."""
    return move_to_finished(conn, keys, job_id, token, "completed", returnvalue, opts, fetch_next,
                            timestamp=timestamp, fields=fields, scripts=scripts)


def move_to_failed(
    conn: redis.Redis,
    keys: QueueKeys,
    job_id: str | int,
    token: str,
    failed_reason: str,
    opts: FinishOpts,
    fetch_next: bool = True,
    *,
    timestamp: int | None = None,
    fields: Mapping[str, Any] | None = None,
    scripts: ScriptSet | None = None,
) -> NextJob | None:
    """:func:`move_to_finished` with target ``failed``; ``failed_reason`` is stored as text. With
    ``opts.attempts`` > attempts made so far + 1, emqlab's script retries the job instead (to ``wait``, or
    to ``delayed`` when ``opts.backoff`` > 0)."""
    return move_to_finished(conn, keys, job_id, token, "failed", failed_reason, opts, fetch_next,
                            timestamp=timestamp, fields=fields, scripts=scripts)


# -- moveToActive-11 ------------------------------------------------------------------------------------


def _fetch_opts(token: str, lock_duration: int, limiter: Mapping[str, int] | None, name: str | None) -> bytes:
    m: dict[str, Any] = {"token": str(token), "lockDuration": int(lock_duration)}
    if limiter is not None:
        m["limiter"] = {k: int(v) for k, v in limiter.items()}
    if name is not None:
        m["name"] = str(name)
    return _pack(m)


def move_to_active_call(
    keys: QueueKeys,
    token: str,
    *,
    timestamp: int,
    lock_duration: int = 30000,
    limiter: Mapping[str, int] | None = None,
    name: str | None = None,
) -> ScriptCall:
    """Build moveToActive-11 (``PROTOCOL.md`` §2): 11 KEYS, ARGV ``[prefix, timestamp ms, opts]`` with
    opts ``{token, lockDuration (ms), limiter {max, duration ms}, name}``."""
    packed = _fetch_opts(token, lock_duration, limiter, name)
    args: list[bytes | str] = [keys.base, str(int(timestamp)), packed]
    return ScriptCall("moveToActive", keys.move_to_active_keys(), args)


def move_to_active(
    conn: redis.Redis,
    keys: QueueKeys,
    token: str,
    *,
    lock_duration: int = 30000,
    limiter: Mapping[str, int] | None = None,
    name: str | None = None,
    timestamp: int | None = None,
    scripts: ScriptSet | None = None,
) -> NextJob | None:
    """Take the next job for a worker (``PROTOCOL.md`` §1.7): promote due delayed jobs, respect the rate
    limit, pause and global concurrency, move one job to ``active`` and lock it with ``token`` for
    ``lock_duration`` ms. Returns the job, a "wait" :class:`NextJob` (rate limited / only delayed jobs), or
    ``None`` (nothing, or paused / at global concurrency)."""
    call = move_to_active_call(keys, token, timestamp=now_ms() if timestamp is None else timestamp,
                               lock_duration=lock_duration, limiter=limiter, name=name)
    return decode_next(run_call(conn, call, scripts))


# -- moveStalledJobsToWait-8 ----------------------------------------------------------------------------


def move_stalled_jobs_to_wait_call(
    keys: QueueKeys, max_stalled_count: int, stalled_interval_ms: int, *, timestamp: int
) -> ScriptCall:
    """Build moveStalledJobsToWait-8 (``PROTOCOL.md`` §3): 8 KEYS, ARGV ``[maxStalledCount, prefix,
    timestamp ms, max check time ms]`` (the check time is the stalled interval)."""
    args: list[bytes | str] = [str(int(max_stalled_count)), keys.base, str(int(timestamp)),
                               str(int(stalled_interval_ms))]
    return ScriptCall("moveStalledJobsToWait", keys.move_stalled_jobs_to_wait_keys(), args)


def move_stalled_jobs_to_wait(
    conn: redis.Redis,
    keys: QueueKeys,
    max_stalled_count: int,
    stalled_interval_ms: int,
    *,
    timestamp: int | None = None,
    scripts: ScriptSet | None = None,
) -> list[str]:
    """Run one recovery sweep: jobs marked by the previous sweep whose lock is gone go back to ``wait``
    (``stc`` + 1; past ``max_stalled_count`` also ``defa`` = :data:`STALLED_LIMIT_REASON`); then every
    active job is marked for the next sweep. At most one sweep per ``stalled_interval_ms`` runs per queue
    (the ``stalled-check`` key); a throttled call returns ``[]``.

    Returns the recovered job ids. With BullMQ's set (whose current sweep takes a 9th key, ``repeat``),
    that key is appended."""
    call = move_stalled_jobs_to_wait_call(keys, max_stalled_count, stalled_interval_ms,
                                          timestamp=now_ms() if timestamp is None else timestamp)
    if scripts is not None and scripts[call.name].numkeys == len(call.keys) + 1:
        call.keys.append(keys.repeat)
    reply = run_call(conn, call, scripts)
    return [_text(x) for x in reply or []]


# -- add scripts ----------------------------------------------------------------------------------------


def add_job_call(
    keys: QueueKeys,
    name: str,
    data: Any,
    *,
    job_id: str | int | None = None,
    delay: int = 0,
    priority: int = 0,
    lifo: bool = False,
    attempts: int | None = None,
    timestamp: int,
) -> ScriptCall:
    """Build the add script for a job (``PROTOCOL.md`` §4.2): addDelayedJob-6 when ``delay`` > 0 (ms),
    else addPrioritizedJob-9 when ``priority`` > 0, else addStandardJob-9 — as BullMQ's Python client
    dispatches. ARGV ``[msgpack [prefix, custom id or "", name, timestamp], data JSON, msgpack opts]``;
    ``data`` is JSON-encoded."""
    job_args = [keys.base, "" if job_id is None else str(job_id), str(name), int(timestamp)]
    opts: dict[str, Any] = {"delay": int(delay), "priority": int(priority)}
    if lifo:
        opts["lifo"] = True
    if attempts is not None:
        opts["attempts"] = int(attempts)
    args: list[bytes | str] = [_pack(job_args), json.dumps(data, separators=(",", ":")), _pack(opts)]
    if delay > 0:
        script_keys = [keys.marker, keys.meta, keys.id, keys.delayed, keys.completed, keys.events]
        return ScriptCall("addDelayedJob", script_keys, args)
    if priority > 0:
        script_keys = [keys.marker, keys.meta, keys.id, keys.prioritized, keys.delayed, keys.completed,
                       keys.active, keys.events, keys.pc]
        return ScriptCall("addPrioritizedJob", script_keys, args)
    return ScriptCall("addStandardJob", keys.add_standard_job_keys(), args)


def add_job(
    conn: redis.Redis,
    keys: QueueKeys,
    name: str,
    data: Any,
    *,
    job_id: str | int | None = None,
    delay: int = 0,
    priority: int = 0,
    lifo: bool = False,
    attempts: int | None = None,
    timestamp: int | None = None,
    scripts: ScriptSet | None = None,
) -> str:
    """Add a job and return its id (the custom ``job_id``, or the queue's next counter value).

    A custom id that already exists leaves that job untouched, emits ``duplicated`` and returns the id.
    ``delay`` (ms) → ``delayed``; ``priority`` > 0 (1 = highest) → ``prioritized``; else ``wait`` (``lifo``
    = taken next). Raises ``redis.ResponseError`` for what emqlab does not support (parents, deduplication)
    and :class:`FinishError` for a negative code (BullMQ's -5 / -7)."""
    call = add_job_call(keys, name, data, job_id=job_id, delay=delay, priority=priority, lifo=lifo,
                        attempts=attempts, timestamp=now_ms() if timestamp is None else timestamp)
    reply = run_call(conn, call, scripts)
    if isinstance(reply, int) and reply < 0:
        raise FinishError(reply, None if job_id is None else str(job_id), "addJob")
    return _text(reply)


# -- locks ----------------------------------------------------------------------------------------------


def extend_lock_call(keys: QueueKeys, job_id: str | int, token: str, duration_ms: int) -> ScriptCall:
    """Build extendLock-2 (``PROTOCOL.md`` §4.1): KEYS ``[lock, stalled]``, ARGV ``[token, duration ms,
    id]``."""
    args: list[bytes | str] = [str(token), str(int(duration_ms)), str(job_id)]
    return ScriptCall("extendLock", keys.extend_lock_keys(job_id), args)


def extend_lock(conn: redis.Redis, keys: QueueKeys, job_id: str | int, token: str, duration_ms: int, *,
                scripts: ScriptSet | None = None) -> bool:
    """Renew the job's lock for ``duration_ms`` and clear its stall mark. ``False`` when the lock is gone
    or holds another token (a lapsed lock is never revived)."""
    return run_call(conn, extend_lock_call(keys, job_id, token, duration_ms), scripts) == 1


def release_lock_call(keys: QueueKeys, job_id: str | int, token: str) -> ScriptCall:
    """Build releaseLock-1 (``PROTOCOL.md`` §4.1): KEYS ``[lock]``, ARGV ``[token]``."""
    return ScriptCall("releaseLock", keys.release_lock_keys(job_id), [str(token)])


def release_lock(conn: redis.Redis, keys: QueueKeys, job_id: str | int, token: str, *,
                 scripts: ScriptSet | None = None) -> bool:
    """Delete the job's lock if it holds ``token``; ``False`` otherwise."""
    return run_call(conn, release_lock_call(keys, job_id, token), scripts) == 1


def job_fields(conn: redis.Redis, keys: QueueKeys, job_id: str | int) -> dict[str, str]:
    """The job hash as str → str (empty when the job does not exist)."""
    raw = conn.hgetall(keys.job(job_id))
    return {_text(k): _text(v) for k, v in raw.items()}
