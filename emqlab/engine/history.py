"""The recorded history of one run: every step (actor, command or script, keys, reply, virtual time, effect
on the queue), printable as an annotated linear script — one line per round trip, tagged with its actor and
its reply, in the style of Hermitage's isolation write-ups — and exportable to / importable from JSON.

A :class:`History` is frozen once the run has produced it: steps, executions, the final state and the
anomalies found in it are immutable values. History JSON v1 is unchanged on disk: effects are written as
their text (``"1 +completed"``) and actor results as ``"finish:1:-2"``; reading parses them back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from emqlab.engine import effects as fx
from emqlab.engine.effects import Effect
from emqlab.protocol.errors import error_text
from emqlab.protocol.keys import QueueKeys
from emqlab.protocol.outcome import Outcome, Result
from emqlab.scripting.host import Status
from emqlab.text import DEFAULT_WIDTH, elide_end, elide_middle, elide_words, line_breaks, wrap

HISTORY_VERSION = 1

StepKind = Literal["command", "script", "clock", "fault"]
#: Jepsen's outcome of a step for the actor that sent it: it took effect (ok), it did not (fail), or the
#: actor cannot know (info: the reply was lost)
StepOutcome = Literal["ok", "fail", "info"]
STEP_KINDS: tuple[str, ...] = ("command", "script", "clock")

#: the command column of an annotated history (the width it has unwrapped)
COMMAND_WIDTH = 44
#: the narrowest command column a wrapped history shrinks to (to keep a step's mark on its line)
MIN_COMMAND_WIDTH = 16
#: a command text limit no command reaches: ``--wide`` shows every command whole
_UNLIMITED = 1 << 20
#: the reply column (a longer reply pushes the effects right)
REPLY_WIDTH = 12
#: a step line without its command and reply: ``" 10  "`` + ``" -- "`` + actor + ``" -> "``
_FIXED = 5 + 4 + 3 + 4
#: where a step's effects go on when they do not fit on its line
_CONTINUATION = "     ↳ "
#: where a step's mark goes when even the step's line without effects is too wide for it (a narrow terminal)
_MARK_CONTINUATION = "     "


@dataclass(frozen=True)
class Step:
    """One scheduling step = one round trip (or one clock event).

    ``index`` counts steps of the run from 1; ``actor_step`` counts the actor's own steps. ``kind`` is
    ``command`` (one command of a split script), ``script`` (one EVALSHA) or ``clock`` (a lease lapsing).
    ``op`` is the command or script name, ``args`` its arguments with queue keys shown relative to the
    queue's base (``1:lock``), ``keys`` the keys it names, ``reply`` a JSON-able rendering of the reply,
    ``time`` the virtual time in ms, ``effects`` what changed (typed; ``str()`` gives ``"1 +completed"``,
    ``"1:lock W1:1 -> -"``), ``note`` the script a command belongs to, and ``run`` the number of the
    actor's script run the step belongs to (two commands with the same ``run`` are one split script).
    """

    index: int
    actor: str
    actor_step: int
    kind: StepKind
    op: str
    args: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    reply: Any = None
    time: int = 0
    effects: tuple[Effect, ...] = ()
    note: str = ""
    run: int | None = None
    #: the command wrote nothing (a read-only command): the checks call such a step a read
    read_only: bool = False
    #: ``info`` when the reply was lost (a disconnect fault; ``applied`` says whether it ran), ``fail``
    #: when it certainly did not take effect (NOSCRIPT without a fallback)
    outcome: StepOutcome = "ok"
    applied: bool = True
    #: the script of the run's script set this step ran, or whose command it is: a script step's own (its
    #: ``op``), a split script's (every command of it), a Python actor's EVALSHA or EVAL (resolved by the
    #: script's SHA1 against the actor's script set when it sent the call); ``None`` for a plain command or a
    #: script outside the set (a block's own Lua). The checks read it, never ``op`` or ``note``: a re-add
    #: by a Python actor is an ``EVALSHA`` step whose script is ``addStandardJob``.
    script: str | None = None
    #: every script of the set the step ran, in order: ``(script,)`` for one, all of a Python actor's
    #: pipeline or MULTI … EXEC that runs several (``script`` is then the first), ``()`` for none
    scripts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.script is None and self.kind == "script":  # a script step's op is its script's name
            object.__setattr__(self, "script", self.op)
        if not self.scripts and self.script is not None:
            object.__setattr__(self, "scripts", (self.script,))
        elif self.scripts and self.script is None:
            object.__setattr__(self, "script", self.scripts[0])

    def command_text(self, width: int = COMMAND_WIDTH) -> str:
        """The command as one short line of at most ``width`` columns: ``DEL 1:lock``, ``EVALSHA
        moveToFinished 1 … returnvalue`` (a script shows its first three short, non-empty arguments; an
        empty argument of a command shows as ``""``). A long argument list is elided in the middle
        (``HSET 1 returnvalue … 1767225600000``): the command and its last argument stay."""
        if self.kind == "script":
            head = ["EVALSHA", self.op]
            args = [a for a in self.args if a and len(a) <= 24][:3]  # the short, non-empty ones
        elif self.script is not None and self.op in ("EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO"):
            # a Python actor's call of a script of the set: named by the script, not by its SHA1 or source
            head = [self.op, self.script]
            args = [a for a in self.args[1:] if a and len(a) <= 24][:3]
        elif self.kind in ("clock", "fault"):
            head, args = [f"({self.kind})", self.op], list(self.args)
        else:
            head, args = [self.op], list(self.args)
        return elide_words(head, [a if a else '""' for a in args], width)

    def effects_on(self, job: str) -> list[Effect]:
        """This step's effects on ``job``."""
        return [e for e in self.effects if fx.job_of(e) == job]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["args"], d["keys"] = list(self.args), list(self.keys)
        d["effects"] = [str(e) for e in self.effects]
        if self.outcome == "ok":  # JSON v1 as before for the steps of a run without faults
            del d["outcome"], d["applied"]
        if self.script is None or (self.kind == "script" and self.script == self.op):
            del d["script"]  # (JSON v1 as before: a script step's script is its op when read back)
        if self.scripts == ((self.script,) if self.script is not None else ()):
            del d["scripts"]  # (one script or none: ``script`` says it, as in JSON v1)
        else:
            d["scripts"] = list(self.scripts)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in d.items() if k in known}
        data["args"] = tuple(data.get("args", ()))
        data["keys"] = tuple(data.get("keys", ()))
        data["effects"] = tuple(fx.parse(e) for e in data.get("effects", ()))
        data["scripts"] = tuple(data.get("scripts", ()))
        return cls(**data)


@dataclass(frozen=True)
class Execution:
    """What one worker execution of a job did: started at ``start`` (a step index, 0 = before the run),
    ended at ``end`` with ``outcome`` (``result`` is its text: a return code, ``0`` or ``next``);
    ``released`` = the finish succeeded (the worker let go of the job by finishing it)."""

    actor: str
    job: str
    token: str
    start: int
    end: int | None = None
    result: str | None = None
    released: bool = False
    outcome: Outcome | None = field(default=None, compare=False)
    #: the step at which the worker crashed with this execution open (it never ended)
    crashed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"actor": self.actor, "job": self.job, "token": self.token, "start": self.start, "end": self.end,
             "result": self.result, "released": self.released}
        if self.crashed is not None:
            d["crashed"] = self.crashed
        return d

    @property
    def open(self) -> bool:
        """The execution neither ended nor crashed: a live worker still holds the job."""
        return self.end is None and self.crashed is None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Execution:
        known = {"actor", "job", "token", "start", "end", "result", "released", "crashed"}
        data = {k: v for k, v in d.items() if k in known}
        res = data.get("result")
        outcome = Outcome.parse(res) if isinstance(res, str) else None
        return cls(**data, outcome=outcome)


@dataclass(frozen=True)
class FinalState:
    """The queue at the end of a run: ``placements`` (job → the structures holding it, a name repeated
    per copy), ``locks`` (job → token, only jobs that have one), ``jobs`` (job → selected hash fields and
    ``exists``), ``metrics`` (``completed``/``failed`` → the counter, ``None`` when absent) and
    ``metrics_on`` (the scenario keeps metrics). Reads like the dict it used to be: ``final["placements"]``."""

    placements: Mapping[str, list[str]] = field(default_factory=dict)
    locks: Mapping[str, str] = field(default_factory=dict)
    jobs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    metrics: Mapping[str, int | None] = field(default_factory=dict)
    metrics_on: bool = False
    #: ids placed somewhere that are not scenario jobs (their placements only)
    others: Mapping[str, list[str]] = field(default_factory=dict)
    #: the keys the scenario's invariants read (relative to the queue's base) → their values: a string, a
    #: hash as a dict, a list, a set or sorted set as a sorted list of members; ``None`` when absent
    values: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        if name not in _FINAL_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name) if name in _FINAL_FIELDS else default

    def __iter__(self) -> Iterator[str]:
        return iter(_FINAL_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        return {"placements": {k: list(v) for k, v in self.placements.items()}, "locks": dict(self.locks),
                "jobs": {k: dict(v) for k, v in self.jobs.items()}, "metrics": dict(self.metrics),
                "metrics_on": self.metrics_on, **({"others": dict(self.others)} if self.others else {}),
                **({"values": dict(self.values)} if self.values else {})}

    def logical(self) -> tuple[Any, ...]:
        """The state without anything time-valued (timestamps depend on the step a write happened at,
        which reordering independent steps changes): placements, locks, the jobs' attempt/stall counters,
        deferred failures and results, and the metrics. Exploration counts distinct final states by this."""
        jobs = tuple(sorted((j, tuple(sorted((k, v) for k, v in f.items() if k not in _TIME_FIELDS)))
                            for j, f in self.jobs.items()))
        return (tuple(sorted((j, tuple(sorted(p))) for j, p in self.placements.items())),
                tuple(sorted(self.locks.items())), jobs, tuple(sorted(self.metrics.items())),
                tuple(sorted((j, tuple(sorted(p))) for j, p in self.others.items())),
                tuple(sorted((k, repr(v)) for k, v in self.values.items())))


    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FinalState:
        return cls(placements=dict(d.get("placements", {})), locks=dict(d.get("locks", {})),
                   jobs=dict(d.get("jobs", {})), metrics=dict(d.get("metrics", {})),
                   metrics_on=bool(d.get("metrics_on", False)), others=dict(d.get("others", {})),
                   values=dict(d.get("values", {})))


_FINAL_FIELDS = ("placements", "locks", "jobs", "metrics", "metrics_on")


#: the job hash fields a final state keeps (the attempt and stall counters, deferred failures, results, times)
_READ_FIELDS = ("atm", "ats", "stc", "defa", "returnvalue", "failedReason", "finishedOn", "processedOn")


def read_final_state(execute: Callable[..., Any], keys: QueueKeys, job_ids: Sequence[str],
                     places: Sequence[fx.ExtraPlace] = (), metrics_on: bool = False,
                     reads: tuple[Sequence[str], Sequence[str]] = ((), ()),
                     view: fx.QueueView | None = None) -> FinalState:
    """The queue's :class:`FinalState`, read through ``execute(*command)`` (the jobs ``job_ids`` under
    ``keys``, the scenario's own ``places`` among the placements); ``reads``: the job hash fields and the
    keys (relative to the base) the scenario's invariants read besides
    (:meth:`emqlab.engine.specs.Scenario.final_reads`). ``view``: the queue's view now, when the caller
    holds it (the placements and locks are then taken from it, not read)."""
    more_fields, more_keys = reads
    if view is None:
        view = fx.read_view(execute, keys, job_ids, extra=places)
    jobs: dict[str, dict[str, Any]] = {}
    for jid in job_ids:
        field = keys.job_field_of(jid)
        if field is not None:  # (the job is a field of one hash: its value is the job's data)
            jobs[jid] = {"exists": execute(b"HEXISTS", keys.job(jid).encode(), field.encode()) == 1, "payload": True}
            continue
        raw = execute(b"HGETALL", keys.job(jid).encode()) or []
        fields = {raw[i].decode(): raw[i + 1].decode("utf-8", "replace") for i in range(0, len(raw) - 1, 2)}
        wanted = fields if "*" in more_fields else (*_READ_FIELDS, *more_fields)
        jobs[jid] = {k: fields[k] for k in wanted if k in fields}
        jobs[jid]["exists"] = bool(raw)
        if raw:  # (another queue's own data key: no BullMQ payload field to look for, the key is the data)
            jobs[jid]["payload"] = "data" in fields if keys.job_key == "{job}" else True
    metrics: dict[str, int | None] = {}
    for target in ("completed", "failed"):
        c = execute(b"HGET", keys.metrics(target).encode(), b"count")
        metrics[target] = int(c) if c is not None else None
    placed = view.placements()
    ids = set(job_ids)
    return FinalState(placements={j: placed.get(j, []) for j in job_ids},
                      locks={j: t for j, t in view.locks.items() if t},
                      jobs=jobs, metrics=metrics, metrics_on=metrics_on,
                      others={j: p for j, p in sorted(placed.items()) if j not in ids},
                      values={k: _read_value(execute, keys.key(k).encode()) for k in more_keys})


def _read_value(execute: Callable[..., Any], key: bytes) -> Any:
    """A key's value for an invariant: a string, a hash as a dict (its fields sorted: a hash has no order,
    and the order HGETALL answers in differs between servers), a list, the members of a set or sorted set
    (sorted); ``None`` when the key does not exist."""
    kind = execute(b"TYPE", key)
    kind = kind.value if isinstance(kind, Status) else kind
    text = kind.decode() if isinstance(kind, bytes) else str(kind)

    def dec(v: Any) -> str:
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

    if text == "string":
        return dec(execute(b"GET", key))
    if text == "hash":
        raw = execute(b"HGETALL", key) or []
        return dict(sorted((dec(raw[i]), dec(raw[i + 1])) for i in range(0, len(raw) - 1, 2)))
    if text == "list":
        return [dec(v) for v in execute(b"LRANGE", key, b"0", b"-1") or []]
    if text == "set":
        return sorted(dec(v) for v in execute(b"SMEMBERS", key) or [])
    if text == "zset":
        return [dec(v) for v in execute(b"ZRANGE", key, b"0", b"-1") or []]
    return None if text == "none" else f"<{text}>"


def step_reply(reply: Any) -> Any:
    """A raw reply as a :class:`Step` keeps it: text decoded (bytes that are not UTF-8 as their repr), an
    error as its message (with the code Redis would have sent), a list item by item, a crash's executions
    as ``crashed holding 1, 2``."""
    if isinstance(reply, bytes):
        try:
            return reply.decode()
        except UnicodeDecodeError:
            return repr(reply)
    if isinstance(reply, Status):
        return reply.value.decode()
    if isinstance(reply, BaseException):
        msg = error_text(reply)
        return msg if msg.split(" ", 1)[0].isupper() else f"ERR {msg}"
    if isinstance(reply, list):
        return [step_reply(x) for x in reply]
    if isinstance(reply, tuple):  # a crash: the executions it cut short
        return "crashed holding " + ", ".join(j for j, _ in reply) if reply else "crashed holding nothing"
    return reply

_TIME_FIELDS = frozenset({"finishedOn", "processedOn", "timestamp"})


@dataclass(frozen=True)
class Anomaly:
    """One finding: its ``kind``, the ``job`` it concerns, a ``because`` sentence naming the steps that
    cause it, and those step indices."""

    kind: str
    job: str
    because: str
    steps: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "job": self.job, "because": self.because, "steps": list(self.steps)}


@dataclass(frozen=True)
class History:
    """A run: the scenario, the finish mode, the schedule string, the steps, the executions, the final
    state, every actor's results, and the anomalies found. ``recorded`` names the optional inputs the
    run recorded (``effects``); ``unchecked`` the anomaly kinds that could not be checked without them."""

    scenario: str
    mode: str
    schedule: str
    steps: tuple[Step, ...] = ()
    executions: tuple[Execution, ...] = ()
    final: FinalState = field(default_factory=FinalState)
    findings: tuple[Anomaly, ...] = ()
    results: Mapping[str, tuple[Result, ...]] = field(default_factory=dict)
    recorded: frozenset[str] = frozenset({"effects"})
    unchecked: tuple[str, ...] = ()

    @property
    def anomalies(self) -> list[dict[str, Any]]:
        """The findings as plain dicts (``h.anomalies[0]["because"]``)."""
        return [a.to_dict() for a in self.findings]

    @property
    def kinds(self) -> list[str]:
        """The anomaly kinds found, sorted, each once."""
        return sorted({a.kind for a in self.findings})

    def result_texts(self, actor: str) -> list[str]:
        return [str(r) for r in self.results.get(actor, ())]

    def with_findings(self, findings: Sequence[Anomaly], unchecked: Sequence[str] = ()) -> History:
        return replace(self, findings=tuple(findings), unchecked=tuple(unchecked))

    # -- rendering ---------------------------------------------------------------------------------
    def annotated(self, *, marks: Mapping[int, str] | None = None, width: int | None = DEFAULT_WIDTH) -> str:
        """The history as an annotated linear script, one line per step::

             9  DEL 1:lock                                   -- W1  -> 1            1:lock W1:1 -> -
            10  EVALSHA moveStalledJobsToWait 1 "" 1767225…  -- S1  -> ["1"]        1 -active  1 +wait

        ``marks`` adds a remark to chosen step indices (``<== double-placement``: the witness's "because").
        ``width`` is the line width: a step whose effects do not fit goes on with them on its own
        continuation line(s) (``↳ 1:lock W1:1 -> -``) while its mark stays on the step's line (below it
        only in a terminal too narrow for both), and a long reply is shortened (``[[…], "1", 0, …]``).
        ``width=None`` prints every step on one line, unwrapped, its command whole."""
        marks = marks or {}
        tags = {i: f"   <== {m}" for i, m in marks.items()}
        lines = _header_lines(self.scenario, self.mode, self.schedule, width)
        if width is None:  # every command whole: a longer one pushes the rest of its line right
            cw = COMMAND_WIDTH
        else:
            widest = max((len(tags[s.index]) for s in self.steps if s.index in tags), default=0)
            cw = max(MIN_COMMAND_WIDTH, min(COMMAND_WIDTH, width - _FIXED - REPLY_WIDTH - 1 - widest))
        for s in self.steps:
            lines += _step_lines(s, tags.get(s.index, ""), width, cw)
        return "\n".join(lines)

    # -- JSON --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"version": HISTORY_VERSION, "scenario": self.scenario, "mode": self.mode,
                "schedule": self.schedule, "steps": [s.to_dict() for s in self.steps],
                "executions": [e.to_dict() for e in self.executions], "final": self.final.to_dict(),
                "anomalies": self.anomalies,
                "results": {a: [str(r) for r in rs] for a, rs in self.results.items()},
                **({"unchecked": list(self.unchecked)} if self.unchecked else {})}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=str)

    @classmethod
    def from_json(cls, text: str) -> History:
        """Parse :meth:`to_json` output. Raises ``ValueError`` for another version or a malformed file."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"history JSON: {e}") from None
        if not isinstance(data, dict) or data.get("version") != HISTORY_VERSION:
            raise ValueError(f"history JSON: expected version {HISTORY_VERSION}")
        try:
            return cls(
                scenario=data["scenario"], mode=data["mode"], schedule=data["schedule"],
                steps=tuple(Step.from_dict(s) for s in data.get("steps", [])),
                executions=tuple(Execution.from_dict(e) for e in data.get("executions", [])),
                final=FinalState.from_dict(data.get("final", {})),
                findings=tuple(Anomaly(a["kind"], a["job"], a["because"], tuple(a.get("steps", ())))
                               for a in data.get("anomalies", [])),
                results={a: tuple(Result.parse(r) for r in rs) for a, rs in data.get("results", {}).items()},
                unchecked=tuple(data.get("unchecked", ())))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"history JSON: malformed ({e})") from None

    def comparable(self) -> list[tuple[Any, ...]]:
        """The history without virtual-time-free noise, for comparing two backends' runs."""
        return [(s.actor, s.kind, s.op, tuple(s.args), json.dumps(s.reply, default=str),
                 tuple(str(e) for e in s.effects)) for s in self.steps]


def render_reply(reply: Any, width: int | None = None) -> str:
    """A short rendering of a reply: ``1``, ``"W1:1"``, ``nil``, ``["1"]``, ``ERR …`` (a list shows its first
    three items). With ``width``, a longer rendering is shortened to fit: nested lists first become
    ``[…]``, then fewer items are shown, and a long string is cut with ``…``."""
    text = _reply(reply)
    if width is None or len(text) <= width:
        return text
    if isinstance(reply, list):
        for n in range(min(3, len(reply)), -1, -1):
            items = [_reply(x, nested=False) for x in reply[:n]]
            text = "[" + ", ".join(items + (["…"] if n < len(reply) else [])) + "]"
            if len(text) <= width:
                return text
    return elide_end(text, width)


def _reply(reply: Any, nested: bool = True) -> str:
    if reply is None:
        return "nil"
    if isinstance(reply, str):
        return reply if reply.startswith(("ERR", "-", "{")) or reply == "OK" else json.dumps(reply)
    if isinstance(reply, list):
        if not nested:
            return "[…]" if reply else "[]"
        if len(reply) > 3:
            return "[" + ", ".join(_reply(x) for x in reply[:3]) + ", …]"
        return "[" + ", ".join(_reply(x) for x in reply) + "]"
    return str(reply)


def _header_lines(scenario: str, mode: str, schedule: str, width: int | None) -> list[str]:
    line = f"-- {scenario} · {mode} · {schedule}"
    if width is None or len(line) <= width:
        return [line]
    # the schedule on lines of its own, broken after a dot (it reads as one string again)
    out, cur = [f"-- {scenario} · {mode}"], "-- "
    for part in re.split(r"(?<=\.)", schedule):
        if len(cur) + len(part) > width and cur != "-- ":
            out.append(cur)
            cur = "-- "
        cur += part
    return [*out, cur]


def _step_lines(s: Step, tag: str, width: int | None, cw: int) -> list[str]:
    """One step as its line(s): the command, actor, reply, effects and mark (``tag``) on one line when they
    fit in ``width``; else the effects on continuation lines under the step, the mark kept on its line."""
    tail = "  ".join(str(e) for e in s.effects)
    command = s.command_text(cw if width is not None else _UNLIMITED)  # (unwrapped: whole, past the column)
    head = f"{s.index:>3}  {command:<{cw}} -- {s.actor:<3} -> "
    room = None if width is None else max(8, width - len(head) - 1 - len(tag))
    if s.outcome == "info":  # the actor never saw this reply
        inner = None if room is None else max(1, room - len("lost ()"))
        reply = f"lost ({render_reply(s.reply, inner)})" if s.applied else "lost (never arrived)"
    else:
        reply = render_reply(s.reply, room)
    one = f"{head}{reply:<{REPLY_WIDTH}} {tail}{tag}".rstrip()
    if width is None or len(one) <= width:
        return [one]
    lines = [f"{head}{reply:<{REPLY_WIDTH}} {tag}".rstrip()]
    if tag and len(lines[0]) > width:  # not even the mark fits beside the step: it goes under it
        lines = [f"{head}{reply}", _MARK_CONTINUATION + tag.strip()]
    if not tail:
        return lines
    room = max(8, width - len(_CONTINUATION))
    cur = ""
    for text in (elide_middle(str(e), room) for e in s.effects):
        if cur and len(cur) + 2 + len(text) > room:
            lines.append(_CONTINUATION + cur)
            cur = ""
        cur = f"{cur}  {text}" if cur else text
    lines.append(_CONTINUATION + cur)
    return lines


# DEFAULT_WIDTH and the text helpers live in emqlab.text; the old path emqlab.history still names them
__all__ = ["DEFAULT_WIDTH", "Anomaly", "Execution", "FinalState", "History", "Step", "StepKind", "StepOutcome",
           "elide_end", "elide_middle", "elide_words", "line_breaks", "read_final_state", "render_reply", "step_reply",
           "wrap"]
