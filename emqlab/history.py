"""The recorded history of one run: every step (actor, command or script, keys, reply, virtual time, effect
on the queue), printable as an annotated linear script — one line per round trip, tagged with its actor and
its reply, in the style of Hermitage's isolation write-ups — and exportable to / importable from JSON.

A :class:`History` is frozen once the run has produced it: steps, executions, the final state and the
anomalies found in it are immutable values. History JSON v1 is unchanged on disk: effects are written as
their text (``"1 +completed"``) and actor results as ``"finish:1:-2"``; reading parses them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from . import effects as fx
from .effects import Effect
from .outcome import Outcome, Result

HISTORY_VERSION = 1

StepKind = Literal["command", "script", "clock", "fault"]
#: Jepsen's outcome of a step for the actor that sent it: it took effect (ok), it did not (fail), or the
#: actor cannot know (info: the reply was lost)
StepOutcome = Literal["ok", "fail", "info"]
STEP_KINDS: tuple[str, ...] = ("command", "script", "clock")


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

    def command_text(self, width: int = 60) -> str:
        if self.kind == "script":
            text = f"EVALSHA {self.op}"
            shown = [a for a in self.args if len(a) <= 24][:3]
            if shown:
                text += " " + " ".join(shown)
        elif self.kind == "clock":
            text = f"(clock) {self.op} " + " ".join(self.args)
        elif self.kind == "fault":
            text = f"(fault) {self.op} " + " ".join(self.args)
        else:
            text = " ".join([self.op, *self.args])
        if len(text) > width:
            text = text[: width - 1] + "…"
        return text

    def effects_on(self, job: str) -> list[Effect]:
        """This step's effects on ``job``."""
        return [e for e in self.effects if fx.job_of(e) == job]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["args"], d["keys"] = list(self.args), list(self.keys)
        d["effects"] = [str(e) for e in self.effects]
        if self.outcome == "ok":  # JSON v1 as before for the steps of a run without faults
            del d["outcome"], d["applied"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in d.items() if k in known}
        data["args"] = tuple(data.get("args", ()))
        data["keys"] = tuple(data.get("keys", ()))
        data["effects"] = tuple(fx.parse(e) for e in data.get("effects", ()))
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
                "metrics_on": self.metrics_on, **({"others": dict(self.others)} if self.others else {})}

    def logical(self) -> tuple[Any, ...]:
        """The state without anything time-valued (timestamps depend on the step a write happened at,
        which reordering independent steps changes): placements, locks, the jobs' attempt/stall counters,
        deferred failures and results, and the metrics. Exploration counts distinct final states by this."""
        jobs = tuple(sorted((j, tuple(sorted((k, v) for k, v in f.items() if k not in _TIME_FIELDS)))
                            for j, f in self.jobs.items()))
        return (tuple(sorted((j, tuple(sorted(p))) for j, p in self.placements.items())),
                tuple(sorted(self.locks.items())), jobs, tuple(sorted(self.metrics.items())),
                tuple(sorted((j, tuple(sorted(p))) for j, p in self.others.items())))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FinalState:
        return cls(placements=dict(d.get("placements", {})), locks=dict(d.get("locks", {})),
                   jobs=dict(d.get("jobs", {})), metrics=dict(d.get("metrics", {})),
                   metrics_on=bool(d.get("metrics_on", False)), others=dict(d.get("others", {})))


_FINAL_FIELDS = ("placements", "locks", "jobs", "metrics", "metrics_on")
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
    def annotated(self, *, marks: dict[int, str] | None = None, width: int = 44) -> str:
        """The history as an annotated linear script, one line per step::

             3  DEL 1:lock                     -- W1  -> 1        1:lock W1:1 -> -
             4  EVALSHA moveStalledJobsToWait  -- S1  -> ["1"]    1 -active +wait
        ``marks`` adds a remark to chosen step indices (the witness's "because")."""
        marks = marks or {}
        lines = [f"-- {self.scenario} · {self.mode} · {self.schedule}"]
        for s in self.steps:
            reply = render_reply(s.reply)
            if s.outcome == "info":  # the actor never saw this reply
                reply = f"lost ({reply})" if s.applied else "lost (never sent)"
            tail = "  ".join(str(e) for e in s.effects)
            mark = f"   <== {marks[s.index]}" if s.index in marks else ""
            lines.append(
                f"{s.index:>3}  {s.command_text(width):<{width}} -- {s.actor:<3} -> {reply:<12} {tail}{mark}".rstrip()
            )
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


def render_reply(reply: Any) -> str:
    """A short rendering of a reply: ``1``, ``"W1:1"``, ``nil``, ``["1"]``, ``ERR …``."""
    if reply is None:
        return "nil"
    if isinstance(reply, str):
        return reply if reply.startswith(("ERR", "-", "{")) or reply == "OK" else json.dumps(reply)
    if isinstance(reply, list):
        if len(reply) > 3:
            return "[" + ", ".join(render_reply(x) for x in reply[:3]) + ", …]"
        return "[" + ", ".join(render_reply(x) for x in reply) + "]"
    return str(reply)


__all__ = ["Anomaly", "Execution", "FinalState", "History", "Step", "StepKind", "StepOutcome", "render_reply"]
