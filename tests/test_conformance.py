"""Conformance with BullMQ (issue 3): emqlab's queue scripts against BullMQ 3.4.4's shipped scripts.

For each script pair, hypothesis generates cases — a starting queue state and one call — and each case runs
twice from the IDENTICAL state (:func:`emqlab.backend.state.write_state`), once with BullMQ's script
(:meth:`ScriptSet.bullmq`, loaded at run time from the installed ``bullmq`` package) and once with ours,
with IDENTICAL KEYS and ARGV, each through ``EVALSHA``. The two replies and the two resulting states
(:func:`emqlab.backend.state.snapshot`: every key of the queue, job hashes included; event streams as ordered field
lists per entry, since entry ids are server time) must be equal. Keys with a TTL must both have one, and
the two TTLs must agree to within :data:`TTL_TOLERANCE_MS` (they are read a few ms apart); likewise the
``rateLimitDelay`` of a ``{0, 0, ttl, 0}`` reply, which is a PTTL.

The only exception is BullMQ's moveStalledJobsToWait-9, which takes a 9th key (``repeat``, for job
schedulers): it is passed to theirs only.

Every intended difference listed in ``docs/protocol.md`` ("Intended differences from BullMQ") has a
predicate here named after it (``finish-decides-retries`` → :func:`finish_decides_retries`). A case for which
any predicate is true is filtered out (``hypothesis.assume``) — the comparison itself is never loosened.
Run with ``--hypothesis-show-statistics`` to see how many cases each predicate filtered.

Runs on fakeredis and on the live server (the ``conn`` fixture).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from emqlab.backend.connect import Namespace
from emqlab.backend.state import diff, snapshot, write_state
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting.calls import STALLED_LIMIT_REASON
from emqlab.scripting.registry import ScriptSet, default_scripts

T0 = 1_700_000_000_000  # the calls' "now" (ms); a multiple of 4096 is not needed, scores are computed
MINUTE = 60_000
DELAY_SHIFT = 0x1000
TTL_TOLERANCE_MS = 1000
MIN_COMPARED = 30  # cases actually compared per script and backend (after the exclusions)

#: ``<base>`` in a state value or an argument stands for the queue's keys prefix (``emq:{q}:``), ``<queue>``
#: for it without the trailing colon (BullMQ's ``queueKey``).
BASE = "<base>"
QUEUE = "<queue>"

DOCS = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def conformance(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much,
                               HealthCheck.too_slow],
    )


# -- cases ----------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One generated case: the script (command name), the starting state (relative key → value, as
    :func:`write_state` takes it) and the call's parameters (script specific, see :func:`build`)."""

    script: str
    state: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)


def fill(value: Any, k: QueueKeys) -> Any:
    """``value`` with the ``<base>`` / ``<queue>`` placeholders replaced for queue ``k``."""
    if isinstance(value, str):
        return value.replace(BASE, k.base).replace(QUEUE, k.base[:-1])
    if isinstance(value, dict):
        return {fill(a, k): fill(b, k) for a, b in value.items()}
    if isinstance(value, list):
        return [fill(x, k) for x in value]
    return value


def pack(value: Any) -> bytes:
    # msgpack str types only (Redis's cmsgpack rejects bin), as emqlab.scripting.calls packs.
    return msgpack.packb(value, use_bin_type=False)


def build(case: Case, k: QueueKeys) -> tuple[list[str], list[Any]]:
    """The KEYS and ARGV of ``case`` for queue ``k`` (the same for both script sets)."""
    p = fill(case.params, k)
    if case.script == "moveToFinished":
        keys = k.move_to_finished_keys("1", p["target"])
        prop = "returnvalue" if p["target"] == "completed" else "failedReason"
        packed_fields = pack(p["fields"]) if p["fields"] else ""
        args = ["1", str(T0), prop, p["value"], p["target"], "1" if p["fetch"] else "", k.base,
                pack(p["opts"]), packed_fields]
        return keys, args
    if case.script == "moveToActive":
        return k.move_to_active_keys(), [k.base, str(T0), pack(p["opts"])]
    if case.script == "moveStalledJobsToWait":
        return k.move_stalled_jobs_to_wait_keys(), [str(p["max_stalled"]), k.base, str(T0), str(p["interval"])]
    if case.script in ("addStandardJob", "addDelayedJob", "addPrioritizedJob"):
        keys = {
            "addStandardJob": k.add_standard_job_keys(),
            "addDelayedJob": [k.marker, k.meta, k.id, k.delayed, k.completed, k.events],
            "addPrioritizedJob": [k.marker, k.meta, k.id, k.prioritized, k.delayed, k.completed, k.active,
                                  k.events, k.pc],
        }[case.script]
        return keys, [pack(p["args"]), p["data"], pack(p["opts"])]
    if case.script == "extendLock":
        return k.extend_lock_keys(p["job_id"]), [p["token"], str(p["duration"]), p["job_id"]]
    if case.script == "releaseLock":
        return k.release_lock_keys(p["job_id"]), [p["token"]]
    raise AssertionError(f"no builder for {case.script}")


# -- generators -------------------------------------------------------------------------------------------------


def chance(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws; shrinks towards False. (The middle value, not a bound: hypothesis
    draws the bounds of a range more often than the rest.)"""
    return draw(st.integers(0, one_in - 1)) == one_in // 2


def job(name: str = "job", **extra: Any) -> dict[str, str]:
    """A job hash as the add scripts store it, plus ``extra`` fields."""
    h = {"name": name, "data": '{"n":1}', "opts": '{"attempts":1}', "timestamp": str(T0 - MINUTE),
         "delay": "0", "priority": "0"}
    h.update({f: str(v) for f, v in extra.items()})
    return h


def delayed_score(draw: st.DrawFn) -> int:
    """A delayed score: due time (past, now, soon, later) × 4096 + a sequence (mostly 0)."""
    due = T0 + draw(st.sampled_from([-5000, -1, 0, 1, 5000, 3_600_000]))
    seq = draw(st.sampled_from([0, 0, 0, 1, 4095]))
    return due * DELAY_SHIFT + seq


@st.composite
def surroundings(draw: st.DrawFn, state: dict[str, Any]) -> None:
    """The rest of a queue around the job under test: waiting, prioritized, delayed and other active jobs,
    the meta flags (paused, global concurrency, global rate limit, event cap), the rate limiter, the priority
    counter and the marker. Writes into ``state``."""
    wait = [str(i) for i in range(2, 2 + draw(st.integers(0, 2)))]
    for i in wait:
        state[i] = job(f"w{i}", **({"defa": STALLED_LIMIT_REASON} if chance(draw, 6) else {}))
    if chance(draw, 15):
        wait.append(draw(st.sampled_from(["0:0", "0:5000"])))  # a legacy (BullMQ < v5) marker, taken next
    if wait:
        state["wait"] = wait
    prioritized = {}
    for i in ("4", "5")[: draw(st.integers(0, 2))]:
        priority = draw(st.integers(1, 3))
        prioritized[i] = priority * 2**32 + int(i)
        state[i] = job(f"p{i}", priority=priority)
    if prioritized:
        state["prioritized"] = {"zset": prioritized}
    delayed = {}
    for i in ("6", "8")[: draw(st.integers(0, 2))]:
        score = delayed_score(draw)
        delayed[i] = score
        state[i] = job(f"d{i}", delay=1000, priority=draw(st.sampled_from([0, 0, 2])))
    if delayed:
        state["delayed"] = {"zset": delayed}
    if chance(draw, 3):  # another worker's active job
        state["active"] = ["7"]
        state["7"] = job("a7", processedOn=T0 - 1000, ats=1)
        state["7:lock"] = {"value": "tok-7", "px": 30000}
    meta: dict[str, Any] = {}
    if not chance(draw, 4):
        meta["opts.maxLenEvents"] = draw(st.sampled_from(["10000", "5"]))
    if chance(draw, 6):
        meta["paused"] = "1"
    if chance(draw, 6):
        meta["concurrency"] = draw(st.integers(1, 3))
    if chance(draw, 6):
        meta["max"] = draw(st.integers(1, 3))
        meta["duration"] = draw(st.sampled_from([1000, 60_000]))
    if meta:
        state["meta"] = meta
    limiter = draw(st.sampled_from(["none", "none", "counting", "counting", "no-ttl"]))
    if limiter == "counting":
        state["limiter"] = {"value": draw(st.integers(0, 3)), "px": 60_000}
    elif limiter == "no-ttl":
        state["limiter"] = draw(st.integers(0, 3))
    if chance(draw, 3):
        state["pc"] = draw(st.integers(1, 9))
    if chance(draw, 2):
        state["marker"] = {"zset": draw(st.sampled_from([{"0": 0}, {"1": T0 + 5000}]))}


def limiter_opts(draw: st.DrawFn) -> dict[str, int] | None:
    if chance(draw, 10):
        return {"max": 2}  # no duration: lenient-finish-options when no global duration either
    return draw(st.sampled_from([None, None, {"max": 1, "duration": 1000}, {"max": 3, "duration": 60_000}]))


@st.composite
def finish_cases(draw: st.DrawFn) -> Case:
    """moveToFinished-14: the job ``1`` in some state, with a lock, a stall mark, children, attempts made,
    a deferred failure; finished sets to trim; metrics; and one call (target, token, keepJobs, attempts,
    metrics, limiter, worker name, fetch next, fields to update)."""
    state: dict[str, Any] = {}
    draw(surroundings(state))
    target = draw(st.sampled_from(["completed", "failed"]))
    place = "active"
    if chance(draw, 4):
        place = draw(st.sampled_from(["wait", "delayed", "prioritized", "completed", "absent", "active-no-hash"]))
    token = "tok-1"
    if chance(draw, 4):
        token = draw(st.sampled_from(["0", 11]))
    if place == "active-no-hash":
        state["active"] = [*state.get("active", []), "1"]
    elif place != "absent":
        extra: dict[str, Any] = {"processedOn": T0 - 5000, "ats": draw(st.integers(1, 3))}
        atm = draw(st.sampled_from([None, 0, 1, 2, 4]))
        if atm is not None:
            extra["atm"] = atm
        if chance(draw, 6):
            extra["defa"] = STALLED_LIMIT_REASON
        if chance(draw, 6):
            extra["priority"] = 2
        extra["opts"] = draw(st.sampled_from(['{"attempts":3}', '{"lifo":true}', "{}"]))
        if chance(draw, 20):  # a child of parent "p" (flows)
            extra["parentKey"] = f"{BASE}p"
            extra["parent"] = json.dumps({"id": "p", "queueKey": QUEUE}, separators=(",", ":"))
            state["p"] = job("parent")
            state["p:dependencies"] = {"set": [f"{BASE}1"]}
            state["waiting-children"] = {"zset": {"p": T0 - MINUTE}}
        state["1"] = job("target", **extra)
        if chance(draw, 4):
            state["1:logs"] = ["started"]
        if place == "active":
            state["active"] = [*state.get("active", []), "1"]
        elif place == "wait":
            state["wait"] = ["1", *state.get("wait", [])]
        elif place == "delayed":
            state.setdefault("delayed", {"zset": {}})["zset"]["1"] = (T0 + 5000) * DELAY_SHIFT
        elif place == "prioritized":
            state.setdefault("prioritized", {"zset": {}})["zset"]["1"] = 2**33 + 1
        elif place == "completed":
            state["completed"] = {"zset": {"1": T0 - 1000}}
            state["1"]["finishedOn"] = str(T0 - 1000)
    lock = "own"
    if chance(draw, 6):
        lock = draw(st.sampled_from(["foreign", "absent"]))
    if lock == "own":
        state["1:lock"] = {"value": "tok-1" if token == "0" else str(token), "px": 30000}
    elif lock == "foreign":
        state["1:lock"] = {"value": "tok-other", "px": 30000}
    if chance(draw, 2):
        state["stalled"] = {"set": ["1", "7"] if "7" in state else ["1"]}
    if chance(draw, 15):
        state["1:dependencies"] = {"set": [f"{BASE}c1"]}
    if chance(draw, 15):
        state["1:unsuccessful"] = {"zset": {f"{BASE}c2": T0 - 10}}
    if place != "completed" or target != "completed":  # finished jobs to trim, in the target set
        finished = {}
        for i, age_ms in zip(("20", "21", "22"), draw(st.lists(
                st.sampled_from([500, 90_000, 7_200_000]), max_size=3)), strict=False):
            finished[i] = T0 - age_ms
            state[i] = job(f"f{i}", finishedOn=T0 - age_ms, atm=1)
            state[f"{i}:logs"] = ["a log line"]
        if finished:
            state[target] = {"zset": finished}
    with_metrics = chance(draw, 2)
    if with_metrics:
        minutes_ago = draw(st.sampled_from([-2, 0, 1, 3, 200]))
        state[f"metrics:{target}"] = {"count": 5, "prevTS": T0 - minutes_ago * MINUTE - 1, "prevCount": 3}
        state[f"metrics:{target}:data"] = ["2", "0", "0", "1"][: draw(st.integers(0, 4))]

    opts: dict[str, Any] = {"token": token}
    if not chance(draw, 12):
        opts["keepJobs"] = draw(st.sampled_from([{"count": -1}, {"count": 0}, {"count": 1}, {"count": 2},
                                                 {"age": 60}, {"age": 3600, "limit": 1}, {"age": 0},
                                                 {"count": 2, "age": 120}]))
    if not chance(draw, 12):
        opts["lockDuration"] = draw(st.sampled_from([30000, 5000]))
    if not chance(draw, 12):
        opts["attempts"] = draw(st.sampled_from([0, 1, 1, 3]))
        opts["attemptsMade"] = 0  # BullMQ's Python client sends it; the scripts ignore it
    if not chance(draw, 12):
        opts["maxMetricsSize"] = draw(st.sampled_from([5, 5, 100, ""] if with_metrics else ["", "", 5, 100]))
    limiter = limiter_opts(draw)
    if limiter is not None:
        opts["limiter"] = limiter
    if chance(draw, 2):
        opts["name"] = "worker-1"
    if chance(draw, 4):
        opts["backoff"] = 1000  # emqlab's own option: BullMQ ignores it
    fields: list[str] = []
    if chance(draw, 3):
        fields = draw(st.sampled_from([
            ["stacktrace", '["at f (x.py:1)"]'], ["stacktrace", "[]", "failedReason", "early"],
            ["atm", "7"], ["defa", "set by the worker"], ["priority", "3", "atm", "0"],
        ]))
    value = draw(st.sampled_from(['42', '{"ok":true}', '"done"'] if target == "completed"
                                 else ["boom", "Error: x"]))
    fetch = draw(st.integers(0, 2)) != 1  # about two in three
    params = {"target": target, "value": value, "fetch": fetch, "opts": opts, "fields": fields}
    return Case("moveToFinished", state, params)


@st.composite
def active_cases(draw: st.DrawFn) -> Case:
    """moveToActive-11: wait / prioritized / delayed jobs (some due), paused, global concurrency, global
    and local rate limits, deferred failures; token text / "0" / a msgpack integer; worker name."""
    state: dict[str, Any] = {}
    draw(surroundings(state))
    opts: dict[str, Any] = {"token": "tok-A"}
    if chance(draw, 3):
        opts["token"] = draw(st.sampled_from(["0", 11]))
    if not chance(draw, 12):
        opts["lockDuration"] = draw(st.sampled_from([30000, 1000]))
    limiter = limiter_opts(draw)
    if limiter is not None:
        opts["limiter"] = limiter
    if chance(draw, 2):
        opts["name"] = "worker-1"
    return Case("moveToActive", state, {"opts": opts})


@st.composite
def sweep_cases(draw: st.DrawFn) -> Case:
    """The sweep: active jobs, stall marks, locks, stall counters against maxStalledCount, the throttle key,
    paused / concurrency, repeatable jobs, legacy markers."""
    state: dict[str, Any] = {}
    ids = ["1", "2", "3", "4"]
    active = draw(st.lists(st.sampled_from(ids), unique=True, max_size=4))
    marked = draw(st.lists(st.sampled_from([*ids, "9"]), unique=True, max_size=5))
    if chance(draw, 12):
        marked.append("0:0")
        active.append("0:0")
    for i in ids:
        extra: dict[str, Any] = {"processedOn": T0 - 5000, "ats": 1}
        stc = draw(st.sampled_from([None, 0, 1, 2]))
        if stc is not None:
            extra["stc"] = stc
        if chance(draw, 8):
            extra["rjk"] = "sched-1"
        state[i] = job(f"j{i}", **extra)
        if draw(st.booleans()):
            state[f"{i}:lock"] = {"value": f"tok-{i}", "px": 30000}
    if chance(draw, 3):
        state["repeat:sched-1"] = {"every": "1000"}
    if active:
        state["active"] = active
    if marked:
        state["stalled"] = {"set": marked}
    if chance(draw, 2):
        state["wait"] = ["5"]
        state["5"] = job("w5")
    meta: dict[str, Any] = {}
    if not chance(draw, 4):
        meta["opts.maxLenEvents"] = "10000"
    if chance(draw, 5):
        meta["paused"] = "1"
    if chance(draw, 5):
        meta["concurrency"] = draw(st.integers(1, 3))
    if meta:
        state["meta"] = meta
    if chance(draw, 8):
        state["stalled-check"] = {"value": str(T0 - 1000), "px": 30000}
    if chance(draw, 3):
        state["marker"] = {"zset": {"0": 0}}
    params = {"max_stalled": draw(st.integers(0, 2)), "interval": draw(st.sampled_from([5000, 30000]))}
    return Case("moveStalledJobsToWait", state, params)


@st.composite
def add_cases(draw: st.DrawFn, script: str) -> Case:
    """An add script: id counter, custom ids (new or taken), lifo, paused / concurrency, delayed jobs in the
    same millisecond (sequence numbers), priorities and the priority counter; rarely a parent, a
    deduplication id or a repeat job key."""
    state: dict[str, Any] = {}
    if chance(draw, 2):
        state["id"] = draw(st.integers(1, 99))
    if chance(draw, 3):
        state["dup"] = job("existing")
        state["wait"] = ["dup"]
    meta: dict[str, Any] = {}
    if not chance(draw, 4):
        meta["opts.maxLenEvents"] = "10000"
    if chance(draw, 5):
        meta["paused"] = "1"
    if chance(draw, 5):
        meta["concurrency"] = 1
    if meta:
        state["meta"] = meta
    if chance(draw, 3):
        state["active"] = ["7"]
        state["7"] = job("a7")
    if chance(draw, 2):
        delayed = {}
        for i in ("6", "8")[: draw(st.integers(1, 2))]:
            delayed[i] = delayed_score(draw)
            state[i] = job(f"d{i}", delay=1000)
        state["delayed"] = {"zset": delayed}
    if chance(draw, 3):
        state["prioritized"] = {"zset": {"4": 2**32 + 1}}
        state["4"] = job("p4", priority=1)
    if chance(draw, 3):
        state["pc"] = draw(st.integers(1, 9))
    if chance(draw, 3):
        state["marker"] = {"zset": {"1": T0 + 5000}}

    custom_id = draw(st.sampled_from(["", "", "", "c1", "dup"]))
    ts = T0 + draw(st.sampled_from([0, 0, 1]))
    args: list[Any] = [BASE, custom_id, draw(st.sampled_from(["email", "resize"])), ts]
    opts: dict[str, Any] = {"attempts": draw(st.sampled_from([1, 3]))}
    if script == "addDelayedJob":
        opts["delay"] = draw(st.sampled_from([1, 1, 5000, 3_600_000]))
        opts["priority"] = draw(st.sampled_from([0, 0, 2]))
    elif script == "addPrioritizedJob":
        opts["priority"] = draw(st.integers(1, 5))
    else:
        if chance(draw, 3):
            opts["lifo"] = True
    extra = "none"
    if chance(draw, 6):
        extra = draw(st.sampled_from(["parent", "missing-parent", "dedup", "repeat"]))
    if extra in ("parent", "missing-parent"):
        if extra == "parent":
            state["p"] = job("parent")
        args += [f"{BASE}p", f"{BASE}p:dependencies", {"id": "p", "queueKey": QUEUE}]
    elif extra == "dedup":
        args += [None, None, None, None, f"{BASE}de:d1"]
        opts["de"] = {"id": "d1"}
    elif extra == "repeat":
        args += [None, None, None, "rpt:1"]
    data = draw(st.sampled_from(['{"to":"a@b.c"}', "{}", "[1,2]"]))
    return Case(script, state, {"args": args, "data": data, "opts": opts})


@st.composite
def lock_cases(draw: st.DrawFn, script: str) -> Case:
    """extendLock-2 / releaseLock-1: the job's lock (own / foreign / absent, with or without a TTL), its
    stall mark, the token, the duration."""
    state: dict[str, Any] = {}
    job_id = draw(st.sampled_from(["1", "1", "42", "job-x"]))
    holder = draw(st.sampled_from(["tok-1", "tok-1", "tok-other", None]))
    if holder is not None:
        state[f"{job_id}:lock"] = ({"value": holder, "px": draw(st.sampled_from([1500, 30000]))}
                                   if draw(st.booleans()) else holder)
    marks = draw(st.lists(st.sampled_from([job_id, "2", "3"]), unique=True, max_size=3))
    if marks:
        state["stalled"] = {"set": marks}
    state[job_id] = job("locked")
    params = {"job_id": job_id, "token": draw(st.sampled_from(["tok-1", "tok-1", "tok-other", "0", ""])),
              "duration": draw(st.integers(2000, 120_000))}
    return Case(script, state, params)


# -- what BullMQ's script does first (used by the predicates) ------------------------------------------------


def finish_path(case: Case) -> str:
    """Where BullMQ's moveToFinished-14 goes for ``case``: ``"-1"``, ``"-4"``, ``"-9"``, ``"-2"``, ``"-6"``
    (before any write), ``"-3"`` (after removing the lock and writing ARGV[9]) or ``"write"``."""
    s, p = case.state, case.params
    if "1" not in s:
        return "-1"
    if p["target"] == "completed":
        if "1:dependencies" in s:
            return "-4"
        if "1:unsuccessful" in s:
            return "-9"
    token = p["opts"]["token"]
    if token != "0":
        lock = s.get("1:lock")
        if lock is None:
            return "-2"
        if lock["value"] != token:  # BullMQ compares the unpacked value: an integer never equals text
            return "-6"
    if "1" not in s.get("active", []):
        return "-3"
    return "write"


def _finish_fields(case: Case) -> dict[str, str]:
    flat = case.params["fields"]
    return dict(zip(flat[0::2], flat[1::2], strict=True))


def _job_after_fields(case: Case, name: str) -> str | None:
    """A field of job 1 as moveToFinished sees it after ARGV[9] was applied."""
    return _finish_fields(case).get(name, case.state.get("1", {}).get(name))


def _retried(case: Case) -> bool:
    """emqlab's moveToFinished retries this failure (``finish-decides-retries``)."""
    if case.script != "moveToFinished" or finish_path(case) != "write" or case.params["target"] != "failed":
        return False
    attempts = case.params["opts"].get("attempts")
    if attempts is None:
        return False
    attempts_made = int(_job_after_fields(case, "atm") or 0)
    return attempts_made + 1 < attempts and _job_after_fields(case, "defa") is None


def _fetches(case: Case) -> bool:
    """The call runs the fetch (moveToActive, or moveToFinished with fetch next on a finish that writes)."""
    if case.script == "moveToActive":
        return True
    return case.script == "moveToFinished" and case.params["fetch"] and finish_path(case) == "write"


# -- the intended differences, one predicate each, named as in docs/protocol.md --------------------------------


def finish_decides_retries(case: Case) -> bool:
    """emqlab retries a failure itself while ``atm + 1 < attempts`` and the job has no ``defa``; BullMQ's
    moveToFinished always files it as failed (its client calls retryJob / moveToDelayed instead)."""
    return _retried(case)


def checks_before_writes(case: Case) -> bool:
    """BullMQ answers -3 only after it deleted the lock, removed the stall mark and wrote ARGV[9]; emqlab
    writes nothing. Without a lock to release (token "0") and no fields, both write nothing: compared."""
    if case.script != "moveToFinished" or finish_path(case) != "-3":
        return False
    return case.params["opts"]["token"] != "0" or bool(case.params["fields"])


def lenient_finish_options(case: Case) -> bool:
    """Options BullMQ requires and emqlab defaults: ``keepJobs`` (BullMQ: Lua error once past the lock
    check), ``maxMetricsSize`` (BullMQ: metrics run with a nil size), ``attempts`` on a failure (Lua error),
    ``lockDuration`` when a job is fetched (``SET … PX nil``), a ``limiter`` with a max but no duration
    anywhere (``math.abs(nil)`` when the first job of a window is fetched)."""
    if case.script == "moveToFinished":
        path = finish_path(case)
        opts = case.params["opts"]
        if path in ("-3", "write") and "keepJobs" not in opts:
            return True
        if path != "write":
            return False
        if "maxMetricsSize" not in opts or (case.params["target"] == "failed" and "attempts" not in opts):
            return True
    elif case.script != "moveToActive":
        return False
    if not _fetches(case):
        return False
    opts = case.params["opts"]
    if "lockDuration" not in opts and opts["token"] != "0":
        return True
    limiter = opts.get("limiter") or {}
    meta = case.state.get("meta", {})
    return "max" in limiter and "duration" not in limiter and "duration" not in meta


def no_flows(case: Case) -> bool:
    """emqlab's add scripts refuse a parent (BullMQ: -5 when missing, else a child); its moveToFinished does
    no parent bookkeeping."""
    if case.script.startswith("add"):
        args = case.params["args"]
        return any(a not in (None, "") for a in args[4:7]) or "parent" in case.params["opts"]
    if case.script == "moveToFinished":
        return finish_path(case) == "write" and "parentKey" in case.state.get("1", {})
    return False


def no_deduplication(case: Case) -> bool:
    """emqlab refuses a deduplication id (BullMQ deduplicates)."""
    if not case.script.startswith("add"):
        return False
    args = case.params["args"]
    return (len(args) > 8 and args[8] not in (None, "")) or "de" in case.params["opts"]


def no_job_schedulers(case: Case) -> bool:
    """emqlab refuses a repeat job key in an add; its sweep exempts no job from the stall limit (BullMQ's
    exempts a job whose ``rjk`` names an existing scheduler)."""
    if case.script.startswith("add"):
        args = case.params["args"]
        return len(args) > 7 and args[7] not in (None, "")
    if case.script != "moveStalledJobsToWait" or "stalled-check" in case.state:
        return False
    if "repeat:sched-1" not in case.state:
        return False
    marked = case.state.get("stalled", {"set": []})["set"]
    for i in marked:
        job_hash = case.state.get(i, {})
        if (i in case.state.get("active", []) and f"{i}:lock" not in case.state
                and job_hash.get("rjk") == "sched-1"
                and int(job_hash.get("stc", 0)) + 1 > case.params["max_stalled"]):
            return True
    return False


def lazy_stall_failure(case: Case) -> bool:
    """Nothing to exclude: BullMQ 3.4.4's sweep is the lazy one too (``defa``, job back to ``wait``)."""
    return False


def drained_after_any_finish(case: Case) -> bool:
    """emqlab's ``drained`` check also runs after a retry; BullMQ's retry scripts emit none. Only reachable
    through a retry, so a subset of ``finish-decides-retries``."""
    return _retried(case) and case.params["opts"].get("backoff", 0) > 0


def retry_always_lpush(case: Case) -> bool:
    """emqlab LPUSHes every retry; BullMQ's clients RPUSH a lifo job's retry (subset of
    ``finish-decides-retries``)."""
    return _retried(case) and '"lifo":true' in case.state["1"]["opts"]


def integral_due_times(case: Case) -> bool:
    """emqlab scores the marker's ``"1"`` member with ``floor(score / 4096)``; BullMQ with the fraction.
    Visible only when a script writes that member (addDelayedJob here) while the earliest delayed score is
    not a multiple of 4096. (Replies are integers on both: Redis truncates a Lua number.)"""
    if case.script != "addDelayedJob":
        return False
    args, opts = case.params["args"], case.params["opts"]
    if args[1] and args[1] in case.state:  # a duplicate: nothing is scheduled
        return False
    zset = dict(case.state.get("delayed", {"zset": {}})["zset"])
    if not args[1]:  # the new job takes the next id: an entry of that id in delayed is given the new score
        zset.pop(str(int(case.state.get("id", 0)) + 1), None)
    scores = zset.values()
    if not scores:
        return False
    earliest = min(scores)
    due = args[3] + max(opts["delay"], 0)
    if earliest // DELAY_SHIFT > due:  # the new job becomes the earliest, at a whole ms
        return False
    return earliest % DELAY_SHIFT != 0


def token_as_text(case: Case) -> bool:
    """A token packed as a msgpack integer: emqlab compares it as text with the lock, BullMQ never matches
    (-6). (Taking a lock with an integer token gives the same lock on both: compared.)"""
    if case.script != "moveToFinished" or not isinstance(case.params["opts"]["token"], int):
        return False
    lock = case.state.get("1:lock")
    return finish_path(case) == "-6" and lock is not None and lock["value"] == str(case.params["opts"]["token"])


def no_legacy_markers(case: Case) -> bool:
    """A ``0:``-prefixed id (BullMQ < v5 marker) where a script would meet it: taken from ``wait`` by a
    fetch, or marked in ``stalled`` and present in ``active`` for the sweep."""
    if _fetches(case):
        wait = case.state.get("wait", [])
        return any(str(i).startswith("0:") for i in wait)
    if case.script == "moveStalledJobsToWait" and "stalled-check" not in case.state:
        marked = case.state.get("stalled", {"set": []})["set"]
        return any(i.startswith("0:") and i in case.state.get("active", []) for i in marked)
    return False


#: Every intended difference of docs/protocol.md, by its name there, with its predicate.
INTENDED_DIFFERENCES: dict[str, Callable[[Case], bool]] = {
    "finish-decides-retries": finish_decides_retries,
    "checks-before-writes": checks_before_writes,
    "lenient-finish-options": lenient_finish_options,
    "no-flows": no_flows,
    "no-deduplication": no_deduplication,
    "no-job-schedulers": no_job_schedulers,
    "lazy-stall-failure": lazy_stall_failure,
    "drained-after-any-finish": drained_after_any_finish,
    "retry-always-lpush": retry_always_lpush,
    "integral-due-times": integral_due_times,
    "token-as-text": token_as_text,
    "no-legacy-markers": no_legacy_markers,
}


def intended_differences(case: Case) -> list[str]:
    """The names of the intended differences ``case`` falls under."""
    return [name for name, applies in INTENDED_DIFFERENCES.items() if applies(case)]


def test_every_documented_difference_has_its_predicate() -> None:
    text = DOCS.read_text()
    section = text.split("## Intended differences from BullMQ", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M)
    assert documented, "no intended differences found in docs/protocol.md"
    assert sorted(documented) == sorted(INTENDED_DIFFERENCES)
    for name, predicate in INTENDED_DIFFERENCES.items():
        assert predicate.__name__ == name.replace("-", "_")


# -- running and comparing -------------------------------------------------------------------------------------

OURS = default_scripts()


@pytest.fixture(scope="module")
def bullmq() -> ScriptSet:
    return ScriptSet.bullmq()


def observe(conn: redis.Redis, k: QueueKeys) -> tuple[dict[str, Any], dict[str, int]]:
    """The queue's keys (streams as ordered ``[(field, value), …]`` per entry) and the PTTL of each key that
    has one."""
    snap = snapshot(conn, k)
    state: dict[str, Any] = {}
    ttls: dict[str, int] = {}
    for rel, (kind, value) in snap.items():
        if kind.startswith("stream"):
            value = [list(entry.items()) for entry in value]
        if kind.endswith("+ttl"):
            ttls[rel] = int(conn.pttl(k.key(rel)))
        state[rel] = (kind, value)
    return state, ttls


def run_side(conn: redis.Redis, k: QueueKeys, case: Case, scripts: ScriptSet) -> tuple[Any, dict, dict]:
    Namespace(conn, k).reset()
    write_state(conn, k, fill(case.state, k))
    keys, args = build(case, k)
    if scripts[case.script].numkeys == len(keys) + 1:  # BullMQ's sweep: its 9th key, repeat
        keys = [*keys, k.repeat]
    try:
        reply: Any = scripts.execute(conn, case.script, keys, args)
    except redis.ResponseError as e:
        reply = ("error", str(e))
    return (reply, *observe(conn, k))


def same_reply(a: Any, b: Any) -> bool:
    """Equal replies; the rate-limit delay of ``{0, 0, ttl, 0}`` (a PTTL read at run time) within the TTL
    tolerance."""
    if (isinstance(a, list) and isinstance(b, list) and len(a) == len(b) == 4 and a[:2] == b[:2] == [0, 0]
            and a[3] == b[3] and isinstance(a[2], int) and isinstance(b[2], int)):
        return abs(a[2] - b[2]) <= TTL_TOLERANCE_MS
    return a == b


def check_case(conn: redis.Redis, k: QueueKeys, case: Case, bullmq: ScriptSet,
               excluded: Counter[str] | None = None) -> None:
    names = intended_differences(case)
    for name in names:
        event(f"excluded by {name}")
        if excluded is not None:
            excluded[name] += 1
    assume(not names)
    reply_b, state_b, ttl_b = run_side(conn, k, case, bullmq)
    reply_o, state_o, ttl_o = run_side(conn, k, case, OURS)
    Namespace(conn, k).reset()
    assert same_reply(reply_b, reply_o), f"replies differ: bullmq {reply_b!r} != emqlab {reply_o!r}"
    differences = diff(state_b, state_o)
    assert not differences, "states differ (bullmq != emqlab):\n" + "\n".join(differences)
    assert sorted(ttl_b) == sorted(ttl_o)
    for rel in ttl_b:
        assert abs(ttl_b[rel] - ttl_o[rel]) <= TTL_TOLERANCE_MS, f"{rel}: PTTL {ttl_b[rel]} vs {ttl_o[rel]}"
    if isinstance(reply_b, list):
        event(f"reply: list of {len(reply_b)}")
    else:
        event(f"reply: {reply_b!r}"[:40])


def _regression(fields: list[str], attempts: int) -> Case:
    """A failing finish of active, locked job 1 whose ARGV[9] fields set ``atm`` / ``defa``: BullMQ writes
    them before it counts the attempt. (The one unintended difference found: emqlab decided from the
    stored values.)"""
    state = {"1": job("target", processedOn=T0 - 5000, ats=1), "active": ["1"],
             "1:lock": {"value": "tok-1", "px": 30000}, "meta": {"opts.maxLenEvents": "10000"}}
    opts = {"token": "tok-1", "keepJobs": {"count": -1}, "lockDuration": 30000, "attempts": attempts,
            "maxMetricsSize": ""}
    return Case("moveToFinished", state,
                {"target": "failed", "value": "boom", "fetch": False, "opts": opts, "fields": fields})


#: Cases always run (hypothesis ``@example``s) before the generated ones, by command name.
REGRESSIONS: dict[str, list[Case]] = {
    "moveToFinished": [_regression(["atm", "7"], 0), _regression(["atm", "7"], 3),
                       _regression(["defa", "set by the worker"], 3)],
}


def conform(conn: redis.Redis, k: QueueKeys, bullmq: ScriptSet, cases: st.SearchStrategy[Case],
            max_examples: int, examples: Sequence[Case] = ()) -> tuple[int, Counter[str]]:
    """Run ``examples`` and then ``max_examples`` generated cases; return how many distinct cases were
    compared, and how many cases each intended difference excluded."""
    compared: set[str] = set()
    excluded: Counter[str] = Counter()

    def run(case: Case) -> None:
        check_case(conn, k, case, bullmq, excluded)
        compared.add(repr(case))

    for case in examples:
        run = example(case=case)(run)
    conformance(max_examples)(given(case=cases)(run))()
    return len(compared), excluded


SCRIPT_PAIRS = [
    # (our file, BullMQ's file, cases, max_examples)
    ("moveToFinished-14", "moveToFinished-14", finish_cases(), 120),
    ("moveToActive-11", "moveToActive-11", active_cases(), 70),
    ("moveStalledJobsToWait-8", "moveStalledJobsToWait-9", sweep_cases(), 60),
    ("addStandardJob-9", "addStandardJob-9", add_cases("addStandardJob"), 60),
    ("addDelayedJob-6", "addDelayedJob-6", add_cases("addDelayedJob"), 70),
    ("addPrioritizedJob-9", "addPrioritizedJob-9", add_cases("addPrioritizedJob"), 60),
    ("extendLock-2", "extendLock-2", lock_cases("extendLock"), 50),
    ("releaseLock-1", "releaseLock-1", lock_cases("releaseLock"), 50),
]


@pytest.mark.parametrize(("ours", "theirs", "cases", "max_examples"),
                         [pytest.param(*pair, id=pair[0]) for pair in SCRIPT_PAIRS])
def test_conforms_to_bullmq(conn: redis.Redis, qkeys: QueueKeys, bullmq: ScriptSet, ours: str, theirs: str,
                            cases: st.SearchStrategy[Case], max_examples: int) -> None:
    name = ours.split("-")[0]
    assert OURS[name].file_name == f"{ours}.lua"
    assert bullmq[name].file_name == f"{theirs}.lua", f"BullMQ {bullmq.origin} ships no {theirs}.lua"
    compared, excluded = conform(conn, qkeys, bullmq, cases, max_examples, REGRESSIONS.get(name, []))
    print(f"{ours}: {compared} distinct cases compared; excluded: {dict(excluded) or 'none'}")
    assert compared >= MIN_COMPARED, f"only {compared} distinct {ours} cases compared ({dict(excluded)})"
