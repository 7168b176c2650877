"""The recorded history of one run: every step (actor, command or script, keys, reply, virtual time, effect
on the queue), printable as an annotated linear script — one line per round trip, tagged with its actor and
its reply, in the style of Hermitage's isolation write-ups — and exportable to / importable from JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

HISTORY_VERSION = 1


@dataclass
class Step:
    """One scheduling step = one round trip (or one clock event).

    ``index`` counts steps of the run from 1; ``actor_step`` counts the actor's own steps. ``kind`` is
    ``command`` (one command of a split script), ``script`` (one EVALSHA) or ``clock`` (a lease lapsing).
    ``op`` is the command or script name, ``args`` its arguments with queue keys shown relative to the
    queue's base (``1:lock``), ``keys`` the keys it names, ``reply`` a JSON-able rendering of the reply,
    ``time`` the virtual time in ms, ``effects`` what changed (``"1 +completed"``, ``"1:lock W1:1 -> -"``),
    and ``note`` a remark (e.g. which section of the script the command belongs to).
    """

    index: int
    actor: str
    actor_step: int
    kind: str
    op: str
    args: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    reply: Any = None
    time: int = 0
    effects: list[str] = field(default_factory=list)
    note: str = ""

    def command_text(self, width: int = 60) -> str:
        if self.kind == "script":
            text = f"EVALSHA {self.op}"
            shown = [a for a in self.args if len(a) <= 24][:3]
            if shown:
                text += " " + " ".join(shown)
        elif self.kind == "clock":
            text = f"(clock) {self.op} " + " ".join(self.args)
        else:
            text = " ".join([self.op, *self.args])
        if len(text) > width:
            text = text[: width - 1] + "…"
        return text


@dataclass
class Execution:
    """What one worker execution of a job did: started at ``start`` (a step index, 0 = before the run),
    ended at ``end`` with ``result`` (a return code or ``ok``)."""

    actor: str
    job: str
    token: str
    start: int
    end: int | None = None
    result: str | None = None
    released: bool = False


@dataclass
class History:
    """A run: the scenario, the finish mode, the schedule string, the steps, the executions, the final
    placement of every job, and the anomalies found."""

    scenario: str
    mode: str
    schedule: str
    steps: list[Step] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, list[str]] = field(default_factory=dict)

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
            tail = "  ".join(s.effects)
            mark = f"   <== {marks[s.index]}" if s.index in marks else ""
            lines.append(
                f"{s.index:>3}  {s.command_text(width):<{width}} -- {s.actor:<3} -> {reply:<12} {tail}{mark}".rstrip()
            )
        return "\n".join(lines)

    # -- JSON --------------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"version": HISTORY_VERSION, **asdict(self)}, indent=1, default=str)

    @classmethod
    def from_json(cls, text: str) -> History:
        """Parse :meth:`to_json` output. Raises ``ValueError`` for another version or a malformed file."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"history JSON: {e}") from None
        if not isinstance(data, dict) or data.get("version") != HISTORY_VERSION:
            raise ValueError(f"history JSON: expected version {HISTORY_VERSION}")
        data.pop("version")
        data["steps"] = [Step(**s) for s in data.get("steps", [])]
        data["executions"] = [Execution(**e) for e in data.get("executions", [])]
        return cls(**data)

    def comparable(self) -> list[tuple[Any, ...]]:
        """The history without virtual-time-free noise, for comparing two backends' runs."""
        return [(s.actor, s.kind, s.op, tuple(s.args), json.dumps(s.reply, default=str), tuple(s.effects))
                for s in self.steps]


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
