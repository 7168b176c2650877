"""The deterministic scheduler: a :class:`Runner` executes a scenario's actors one step at a time, in the
order a schedule says, against fakeredis or a live Redis, and records the history.

A **schedule** is the sequence of actors chosen at each scheduling point. Its string form is versioned,
short and legible: ``v1:W1*9.S1.W1*8`` (actor ids joined by dots, ``*n`` repeats), case- and
whitespace-insensitive. Replaying a schedule string gives the same history on fakeredis and on a live
server: every timestamp comes from a virtual clock (step *k* runs at ``T0 + k`` ms), every lock token is
deterministic (``W1:1`` = W1's first acquisition), and time-driven events (a lock lapsing, the stalled
interval passing) are explicit steps or clock effects, never wall-clock TTLs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import redis

from . import actors as actor_mod
from .backends import Namespace, command_executor, is_fake, unique_queue
from .history import Execution, History, Step
from .keys import QueueKeys
from .luahost import LuaHost, Status
from .registry import ScriptSet, default_scripts
from .scenario import Scenario

SCHEDULE_VERSION = "v1"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the virtual clock's origin (ms)
LOCK_MS = 30000


#: Commands that never change the data set (so a step made of one needs no state read afterwards).
READ_ONLY = frozenset(
    b"GET EXISTS LPOS LRANGE LLEN LINDEX HGET HMGET HGETALL HEXISTS HLEN SMEMBERS SCARD SISMEMBER ZCARD "
    b"ZSCORE ZRANGE ZRANGEBYSCORE ZREVRANGE ZREVRANGEBYSCORE ZRANK PTTL TTL TYPE XRANGE XLEN STRLEN".split()
)


class ScheduleError(ValueError):
    """A schedule string is malformed or does not fit the scenario; the message is one line."""


# -- schedule strings ----------------------------------------------------------------------------------------


def format_schedule(choices: Sequence[str]) -> str:
    """``["W1", "W1", "S1"]`` → ``"v1:W1*2.S1"``."""
    parts: list[str] = []
    i = 0
    while i < len(choices):
        j = i
        while j < len(choices) and choices[j] == choices[i]:
            j += 1
        n = j - i
        parts.append(choices[i] if n == 1 else f"{choices[i]}*{n}")
        i = j
    return f"{SCHEDULE_VERSION}:" + ".".join(parts)


_PART = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:\*([0-9]+))?$", re.ASCII)
#: The longest schedule a string may spell out (a run longer than this is surely a typo).
MAX_SCHEDULE_STEPS = 100_000


def parse_schedule(text: str, actor_ids: Sequence[str] | None = None) -> list[str]:
    """Parse a schedule string (see :func:`format_schedule`). Whitespace and case are ignored; ``actor_ids``
    (when given) maps ids case-insensitively and rejects unknown ones. Raises :class:`ScheduleError`."""
    compact = "".join(text.split())
    if ":" not in compact:
        raise ScheduleError(f"bad schedule {text!r}: expected '{SCHEDULE_VERSION}:' then actor ids, e.g. v1:W1*3.S1.W1")
    version, _, body = compact.partition(":")
    if version.lower() != SCHEDULE_VERSION:
        raise ScheduleError(
            f"bad schedule {text!r}: unknown version {version!r} (this emqlab reads {SCHEDULE_VERSION})")
    if not body:
        return []
    by_upper = {a.upper(): a for a in actor_ids} if actor_ids is not None else None
    out: list[str] = []
    for n, part in enumerate(body.split("."), start=1):
        m = _PART.match(part)
        if not m:
            raise ScheduleError(f"bad schedule {text!r}: part {n} {part!r} is not ACTOR or ACTOR*COUNT")
        actor, digits = m.group(1), m.group(2) or "1"
        count = int(digits) if len(digits) <= 7 else MAX_SCHEDULE_STEPS + 1
        if count < 1:
            raise ScheduleError(f"bad schedule {text!r}: part {n} {part!r} repeats {count} times")
        if len(out) + count > MAX_SCHEDULE_STEPS:
            raise ScheduleError(f"bad schedule {text[:60]!r}: more than {MAX_SCHEDULE_STEPS} steps")
        if by_upper is not None:
            if actor.upper() not in by_upper:
                raise ScheduleError(
                    f"bad schedule {text!r}: part {n}: unknown actor {actor!r} (actors: {', '.join(actor_ids or [])})")
            actor = by_upper[actor.upper()]
        out.extend([actor] * count)
    return out


def preemptions(choices: Sequence[str], enabled_at: Sequence[Sequence[str]]) -> int:
    """Context switches away from an actor that could still have run (CHESS's preemption count)."""
    count = 0
    for i in range(1, len(choices)):
        if choices[i] != choices[i - 1] and choices[i - 1] in enabled_at[i]:
            count += 1
    return count


# -- the runner ------------------------------------------------------------------------------------------------


class Runner:
    """Runs one scenario in one finish mode, one step at a time.

    ``conn`` is the backend (default: a new fakeredis server). On a live server the queue gets a unique
    name (``q-1a2b3c4d``) unless ``queue`` is given; the run claims the queue's namespace (refusing if its
    keys exist) and :meth:`close` deletes them. ``scripts`` selects the script set (emqlab's by default;
    BullMQ's shipped set to replay the upstream scripts). ``effects=False`` skips the per-step state reads
    that the anomaly checks' "because" sentences use (faster, for counting only). ``clock`` replaces the
    step-counting virtual clock (timed runs); ``factories`` maps actor kinds to generator functions,
    overriding or adding to :data:`emqlab.actors.FACTORIES`.

    On fakeredis (``local_scripts=True``, the default) an atomic step runs the script through the Lua host
    with its commands executed back to back inside the one step, instead of fakeredis's own EVALSHA: nothing
    can run between them (the scheduler is single-threaded and owns the in-process server), so the step is
    exactly as atomic; fakeredis's EVALSHA recompiles the script and collects Lua garbage on every call
    (~9 ms for moveToFinished) and iterates sets in Python hash order. ``local_scripts=False`` uses
    fakeredis's EVALSHA (``tests/test_simulate.py`` checks both give the same histories). On a live server
    an atomic step is always one EVALSHA.
    """

    def __init__(self, scenario: Scenario, mode: str = "split", conn: redis.Redis | None = None, *,
                 scripts: ScriptSet | None = None, queue: str | None = None, effects: bool = True,
                 clock: Callable[[], int] | None = None,
                 factories: dict[str, Callable[..., actor_mod.ActorGen]] | None = None,
                 local_scripts: bool = True) -> None:
        from .backends import connect

        self.scenario = scenario
        self.mode = mode
        self.conn = conn if conn is not None else connect()
        if queue is None:
            queue = scenario.queue if is_fake(self.conn) else unique_queue(scenario.queue)
        self.keys = QueueKeys(queue)
        self.namespace = Namespace(self.conn, self.keys).claim()
        self.scripts = scripts or default_scripts()
        self.exec = command_executor(self.conn)
        fake = is_fake(self.conn)
        if fake:
            self.exec = _sorted_smembers(self.exec)
        self._local_scripts = local_scripts and fake
        self._names: set[str] | None = None
        self.host = LuaHost()
        self.effects = effects
        self.clock = clock
        self.factories = {**actor_mod.FACTORIES, **(factories or {})}
        self.job_ids = list(scenario.jobs)
        self._closed = False
        self.reset()

    # -- lifecycle -------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the scenario's initial state: delete the namespace, write the initial keys, restart
        every actor."""
        if self.namespace.sole_owner:
            self.exec(b"FLUSHDB")  # a fakeredis server this process created, holding only this run's keys
        else:
            self.namespace.reset()
        self._write_initial_state()
        self.index = 0
        self.choices: list[str] = []
        self.enabled_at: list[list[str]] = []
        self.steps: list[Step] = []
        self.executions: list[Execution] = []
        self.results: dict[str, list[str]] = {a.id: [] for a in self.scenario.actors}
        self._tokens: dict[str, int] = {}
        self.actor_steps: dict[str, int] = {a.id: 0 for a in self.scenario.actors}
        self.pending: dict[str, actor_mod.Op] = {}
        self._gens: dict[str, actor_mod.ActorGen] = {}
        if self.effects:
            if not hasattr(self, "_initial_watch"):
                self._initial_watch = self._watch()
            self._watch_state = self._initial_watch
        else:
            self._watch_state = None
        for spec in self.scenario.actors:
            gen = self.factories[spec.kind](self, spec)
            try:
                self.pending[spec.id] = next(gen)
                self._gens[spec.id] = gen
            except StopIteration:
                pass

    def close(self) -> None:
        """Delete the run's keys (only those under its queue's base)."""
        if not self._closed:
            self.namespace.release()
            self._closed = True

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what actors call ------------------------------------------------------------------------
    def now(self) -> int:
        """Virtual time in ms: step *k* runs at ``T0 + k``, unless a ``clock`` was given (timed runs)."""
        if self.clock is not None:
            return self.clock()
        return T0 + self.index

    def script_text(self, name: str) -> bytes:
        return self.scripts[name].text

    def new_token(self, actor: str) -> str:
        n = self._tokens.get(actor, 0) + 1
        self._tokens[actor] = n
        return f"{actor}:{n}"

    def begin(self, actor: str, job: str, token: str) -> None:
        self.executions.append(Execution(actor, job, token, self.index))

    def end(self, actor: str, job: str, result: str, released: bool) -> None:
        for e in reversed(self.executions):
            if e.actor == actor and e.job == job and e.end is None:
                e.end, e.result, e.released = self.index, result, released
                return

    def current_token(self, actor: str | None, job: str) -> str | None:
        for e in reversed(self.executions):
            if e.actor == actor and e.job == job:
                return e.token
        return None

    def result(self, actor: str, text: str) -> None:
        self.results[actor].append(text)

    # -- stepping --------------------------------------------------------------------------------
    @property
    def enabled(self) -> list[str]:
        """Actors with a step left, in scenario order."""
        return [a.id for a in self.scenario.actors if a.id in self.pending]

    @property
    def done(self) -> bool:
        return not self.pending

    def step(self, actor: str) -> Step:
        """Let ``actor`` take its next step. Raises :class:`ScheduleError` if it has none."""
        op = self.pending.get(actor)
        if op is None:
            left = ", ".join(self.enabled) or "none"
            took = self.actor_steps.get(actor)
            raise ScheduleError(f"actor {actor} has no step left at step {self.index + 1} (it took all its"
                                f" {took} steps; actors with steps left: {left})")
        self.enabled_at.append(self.enabled)
        self.choices.append(actor)
        self.index += 1
        now = self.now()
        for cmd in op.pre:
            self.exec(*cmd)
        reply: Any
        args: list[str]
        keys: list[str]
        command: tuple[bytes, ...] | None = None
        if op.kind == "script":
            assert op.build is not None
            call = op.build(now)
            try:
                reply = self._evalsha(call.name, call.keys, call.args)
            except redis.exceptions.ResponseError as e:
                reply = e
            args = [self._show(a) for a in call.args]
            keys = [self.keys.relative(k) for k in call.keys]
            name = call.name
        else:
            command = op.lazy() if op.lazy is not None else op.command
            assert command is not None
            try:
                reply = self.exec(*command)
            except redis.exceptions.ResponseError as e:
                reply = e
            if op.kind == "clock":
                name, args, keys = op.label, [op.section], [self.keys.relative(command[3])]
            else:
                name = command[0].decode().upper()
                args = [self._show(a) for a in command[1:]]
                keys = [a for a in args if a in self._key_names()]
        self.actor_steps[actor] += 1
        effects: list[str] = []
        read_only = op.kind == "command" and op.command is not None and op.command[0].upper() in READ_ONLY
        if self.effects and not read_only:
            touched = self._touched(op, command if op.kind != "script" else None)
            after = self._watch(self._watch_state, touched)
            effects = _diff(self._watch_state, after)
            self._watch_state = after
            if op.pre:
                effects.insert(0, "(stalled interval elapsed)")
        shown = _render(reply)
        if name == "XADD" and isinstance(shown, str) and not shown.startswith("ERR"):
            shown = "<entry id>"  # server time: differs between backends and runs
        step = Step(self.index, actor, self.actor_steps[actor], op.kind, name, args, keys,
                    shown, now, effects, op.section if op.kind == "command" else "")
        self.steps.append(step)
        gen = self._gens[actor]
        try:
            self.pending[actor] = gen.send(reply)
        except StopIteration:
            del self.pending[actor]
        return step

    def run(self, choices: Sequence[str] = (), *, choose: Callable[[Runner], str] | None = None,
            max_steps: int = 10_000) -> History:
        """Replay ``choices`` from the current state, then continue with ``choose`` (default: the first
        enabled actor, i.e. no further preemption) until every actor is done. Returns the history."""
        for c in choices:
            self.step(c)
        pick = choose or (lambda r: r.enabled[0])
        while not self.done:
            if self.index >= max_steps:
                raise ScheduleError(f"the run did not end within {max_steps} steps")
            self.step(pick(self))
        return self.history()

    # -- results ---------------------------------------------------------------------------------
    @property
    def schedule(self) -> str:
        return format_schedule(self.choices)

    @property
    def preemptions(self) -> int:
        return preemptions(self.choices, self.enabled_at)

    def history(self) -> History:
        """The history so far, with the final state and the anomalies found in it."""
        from .anomalies import check

        h = History(self.scenario.name, self.mode, self.schedule, list(self.steps),
                    [Execution(**vars(e)) for e in self.executions], self.final_state(),
                    results={k: list(v) for k, v in self.results.items()})
        h.anomalies = [a.to_dict() for a in check(h, self.scenario)]
        return h

    def final_state(self) -> dict[str, Any]:
        w = self._watch()
        jobs: dict[str, Any] = {}
        for jid in self.job_ids:
            raw = self.conn.hgetall(self.keys.job(jid))
            fields = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
            jobs[jid] = {k: fields[k] for k in ("atm", "ats", "stc", "defa", "returnvalue", "failedReason",
                                                 "finishedOn", "processedOn") if k in fields}
            jobs[jid]["exists"] = bool(raw)
        metrics = {}
        for target in ("completed", "failed"):
            c = self.conn.hget(self.keys.metrics(target), "count")
            metrics[target] = int(c) if c is not None else None
        return {"placements": {j: w["place"].get(j, []) for j in self.job_ids},
                "locks": {j: w["locks"].get(j) for j in self.job_ids if w["locks"].get(j)},
                "jobs": jobs, "metrics": metrics, "metrics_on": self.scenario.metrics}

    # -- internals -------------------------------------------------------------------------------
    def _evalsha(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """One atomic script step: EVALSHA (loading the script on NOSCRIPT) — or, on fakeredis with
        ``local_scripts``, the same script run to its end through the Lua host inside this one step."""
        if self._local_scripts:
            script = self.scripts[name]
            script.check_keys(keys)
            return self.host.run(self.exec, script.text, keys, args)
        return self.scripts.call(self._send, name, keys, args)

    def _send(self, *command: Any) -> Any:
        """One raw command through the executor (arguments as bytes, as the executor expects)."""
        return self.exec(*(a if isinstance(a, bytes) else str(a).encode() for a in command))

    def _key_names(self) -> set[str]:
        if self._names is not None:
            return self._names
        names = {"wait", "active", "paused", "prioritized", "delayed", "completed", "failed", "stalled",
                 "stalled-check", "meta", "events", "marker", "limiter", "pc", "id", "metrics:completed",
                 "metrics:failed"}
        for j in self.job_ids:
            names.update({j, f"{j}:lock"})
        self._names = names
        return names

    def _show(self, a: Any) -> str:
        if isinstance(a, bytes):
            try:
                text = a.decode()
            except UnicodeDecodeError:
                return "<msgpack>"
            if not text.isprintable():
                return "<msgpack>"
        else:
            text = str(a)
        return self.keys.relative(text) if text.startswith(self.keys.base) else text

    def _initial_commands(self) -> list[tuple[Any, ...]]:
        """The commands that write the scenario's initial state (computed once per runner)."""
        import json

        sc = self.scenario
        k = self.keys
        cmds: list[tuple[Any, ...]] = []
        active = set(sc.state.get("active", []))
        produced = {a.job for a in sc.actors if a.kind == "producer"}
        for jid, j in sc.jobs.items():
            if jid in produced:
                continue  # added by its producer during the run
            opts = {"attempts": j.attempts} if j.attempts else {}
            fields = {"name": j.name, "data": json.dumps(j.data, separators=(",", ":")),
                      "opts": json.dumps(opts, separators=(",", ":")), "timestamp": str(T0 - 1000),
                      "delay": str(j.delay), "priority": str(j.priority), **j.fields}
            if jid in active:
                fields.setdefault("processedOn", str(T0 - 500))
                fields.setdefault("ats", "1")
            cmds.append(("HSET", k.job(jid), *[x for kv in fields.items() for x in kv]))
        wait = sc.state.get("wait", [])
        if wait:  # the first listed is the next to be taken: it sits at the right end
            cmds.append(("RPUSH", k.wait, *reversed(wait)))
        for name in ("active", "paused"):
            if sc.state.get(name):
                cmds.append(("RPUSH", k.key(name), *sc.state[name]))
        if sc.state.get("stalled"):
            cmds.append(("SADD", k.stalled, *sc.state["stalled"]))
        for name in ("completed", "failed", "delayed", "prioritized"):
            v = sc.state.get(name)
            if not v:
                continue
            scores = v if isinstance(v, dict) else {jid: i for i, jid in enumerate(v)}
            args: list[Any] = []
            for jid, sc_ in scores.items():
                if name == "delayed":
                    score = (T0 + int(sc_)) * 0x1000
                elif name == "prioritized":
                    score = int(sc_) * 2**32 + list(scores).index(jid)
                else:
                    score = T0 - 100 + int(sc_)
                args += [str(score), jid]
            cmds.append(("ZADD", k.key(name), *args))
        for jid, owner in sc.locks.items():
            cmds.append(("SET", k.lock(jid), f"{owner}:1", "PX", str(LOCK_MS * 100)))
        # as a queue's first add does (PROTOCOL.md §4.2), so no run starts by writing it
        meta = {"opts.maxLenEvents": "10000", **sc.meta}
        cmds.append(("HSET", k.meta, *[x for kv in meta.items() for x in kv]))
        numeric = [int(j) for j in sc.jobs if j.isdigit()]
        if numeric:
            cmds.append(("SET", k.id, str(max(numeric))))
        return [tuple(a.encode() if isinstance(a, str) else a for a in c) for c in cmds]

    def _write_initial_state(self) -> None:
        if not hasattr(self, "_initial"):
            self._initial = self._initial_commands()
        if is_fake(self.conn):
            for cmd in self._initial:
                self.exec(*cmd)
            return
        pipe = self.conn.pipeline(transaction=True)
        for cmd in self._initial:
            pipe.execute_command(*cmd)
        pipe.execute()

    _LISTS = ("wait", "active", "paused")
    _ZSETS = ("prioritized", "delayed", "completed", "failed")

    def _read_component(self, name: str) -> Any:
        ex = self.exec
        k = self.keys
        if name in self._LISTS:
            return [m.decode() for m in ex(b"LRANGE", k.key(name).encode(), b"0", b"-1") or []]
        if name in self._ZSETS:
            return [m.decode() for m in ex(b"ZRANGE", k.key(name).encode(), b"0", b"-1") or []]
        if name == "stalled":
            return sorted(m.decode() for m in ex(b"SMEMBERS", k.stalled.encode()) or [])
        kind, _, job = name.partition(":")
        if kind == "lock":
            v = ex(b"GET", k.lock(job).encode())
            return v.decode() if isinstance(v, bytes) else None
        return bool(ex(b"EXISTS", k.job(job).encode()))

    def _components(self) -> list[str]:
        names = [*self._LISTS, *self._ZSETS, "stalled"]
        for j in self.job_ids:
            names += [f"lock:{j}", f"hash:{j}"]
        return names

    def _touched(self, op: actor_mod.Op, command: tuple[bytes, ...] | None) -> list[str] | None:
        """The watched components a single command can change (None = all of them)."""
        if op.kind != "command" or command is None:
            return None
        keys = command_keys(command)
        if keys is None:
            return None
        out = []
        base = self.keys.base.encode()
        for key in keys:
            if not key.startswith(base):
                continue
            rel = key[len(base):].decode("utf-8", "replace")
            if rel in self._LISTS or rel in self._ZSETS or rel == "stalled":
                out.append(rel)
            elif rel.endswith(":lock") and rel[:-5] in self.scenario.jobs:
                out.append(f"lock:{rel[:-5]}")
            elif rel in self.scenario.jobs:
                out.append(f"hash:{rel}")
        return out

    def _watch(self, prev: dict[str, Any] | None = None, only: list[str] | None = None) -> dict[str, Any]:
        """The watched state: every placement list/set, stalled, each job's lock and hash existence. With
        ``prev`` and ``only``, re-read just those components."""
        if prev is not None and only is not None:
            raw = dict(prev["raw"])
            for name in only:
                raw[name] = self._read_component(name)
        else:
            raw = {name: self._read_component(name) for name in self._components()}
        place: dict[str, list[str]] = {}
        for name in (*self._LISTS, *self._ZSETS):
            for m in raw[name]:
                place.setdefault(m, []).append(name)
        locks = {j: raw[f"lock:{j}"] for j in self.job_ids}
        hashes = {j: raw[f"hash:{j}"] for j in self.job_ids}
        return {"raw": raw, "place": place, "stalled": raw["stalled"], "locks": locks, "hashes": hashes}


def command_keys(command: Sequence[bytes]) -> Sequence[bytes] | None:
    """The key arguments of one command (from the command table's key positions), or ``None`` for a
    command whose keys cannot be told from its arguments (EVAL, EVALSHA, MSET, …)."""
    name = command[0].upper()
    if name in (b"EVAL", b"EVALSHA", b"MSET", b"RENAME", b"XREAD", b"ZUNIONSTORE", b"ZINTERSTORE", b"SUNIONSTORE"):
        return None
    if name in (b"DEL", b"UNLINK", b"EXISTS", b"MGET"):
        return command[1:]
    if name in (b"RPOPLPUSH", b"LMOVE", b"SMOVE"):
        return command[1:3]
    return command[1:2]


def _member_order(m: Any) -> tuple[int, Any]:
    return (0, int(m)) if isinstance(m, bytes) and m.isdigit() else (1, m if isinstance(m, bytes) else str(m))


def _sorted_smembers(execute: Callable[..., Any]) -> Callable[..., Any]:
    """fakeredis keeps a set's members in a Python set, whose order follows ``PYTHONHASHSEED``; Redis
    returns a small set of integer ids (an intset) sorted. Sorting ``SMEMBERS`` on fakeredis keeps runs the
    same from one Python process to the next (the sweep's candidate order decides which job is requeued
    first)."""

    def run(*command: Any) -> Any:
        reply = execute(*command)
        if isinstance(reply, list) and command and command[0].upper() == b"SMEMBERS":
            reply = sorted(reply, key=_member_order)
        return reply

    return run


def _diff(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    if before is None:
        return []
    out: list[str] = []
    jobs = sorted(set(before["place"]) | set(after["place"]) | set(before["locks"]) | set(after["locks"]),
                  key=lambda j: (len(j), j))
    for j in jobs:
        b, a = before["place"].get(j, []), after["place"].get(j, [])
        for name in b:
            if b.count(name) > a.count(name):
                out.append(f"{j} -{name}")
        for name in a:
            if a.count(name) > b.count(name):
                out.append(f"{j} +{name}")
        if j in before["stalled"] and j not in after["stalled"]:
            out.append(f"{j} -stalled")
        if j not in before["stalled"] and j in after["stalled"]:
            out.append(f"{j} +stalled")
        lb, la = before["locks"].get(j), after["locks"].get(j)
        if lb != la:
            out.append(f"{j}:lock {lb or '-'} -> {la or '-'}")
        hb, ha = before["hashes"].get(j), after["hashes"].get(j)
        if hb and not ha:
            out.append(f"{j} hash -")
        elif ha and not hb:
            out.append(f"{j} hash +")
    return out


def _render(reply: Any) -> Any:
    if isinstance(reply, bytes):
        try:
            return reply.decode()
        except UnicodeDecodeError:
            return repr(reply)
    if isinstance(reply, Status):
        return reply.value.decode()
    if isinstance(reply, BaseException):
        msg = str(reply).split(" script:")[0]
        return msg if msg.split(" ", 1)[0].isupper() else f"ERR {msg}"
    if isinstance(reply, list):
        return [_render(x) for x in reply]
    return reply
