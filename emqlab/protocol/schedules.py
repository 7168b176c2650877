"""Schedule strings, version 1: the sequence of actors chosen at each scheduling point, written short and
legible: ``v1:W1*9.S1.W1*8`` (actor ids joined by dots, ``*n`` repeats), case- and whitespace-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SCHEDULE_VERSION = "v1"


class ScheduleError(ValueError):
    """A schedule string is malformed or does not fit the scenario; the message is one line."""


def _quoted(text: str, limit: int = 32) -> str:
    """``text`` quoted for an error line, its middle left out past ``limit`` characters, so the line stays
    near 100 columns however long the input (the part number in the message says where the fault is)."""
    r = repr(text)
    if len(r) <= limit:
        return r
    return f"{r[:limit - 12]}…{r[-11:]}"


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


def parse_schedule(text: str, actor_ids: Sequence[str] | None = None, *, empty: bool = True) -> list[str]:
    """Parse a schedule string (see :func:`format_schedule`). Whitespace and case are ignored; ``actor_ids``
    (when given) maps ids case-insensitively and rejects unknown ones; ``empty=False`` refuses a schedule of
    no steps (``v1:``: a replay of it would run the actors one after another, not a schedule anyone found).
    Raises :class:`ScheduleError`."""
    compact = "".join(text.split())
    if ":" not in compact:
        raise ScheduleError(f"bad schedule {_quoted(text)}: expected '{SCHEDULE_VERSION}:' then actor ids, "
                            "e.g. v1:W1*3.S1.W1")
    version, _, body = compact.partition(":")
    if version.lower() != SCHEDULE_VERSION:
        raise ScheduleError(
            f"bad schedule {_quoted(text)}: unknown version {version!r} (this emqlab reads {SCHEDULE_VERSION})")
    if not body:
        if not empty:
            raise ScheduleError(f"bad schedule {_quoted(text)}: no steps (give the actor ids after"
                                f" '{SCHEDULE_VERSION}:', e.g. v1:W1*3.S1.W1)")
        return []
    by_upper = {a.upper(): a for a in actor_ids} if actor_ids is not None else None
    out: list[str] = []
    for n, part in enumerate(body.split("."), start=1):
        m = _PART.match(part)
        if not m:
            raise ScheduleError(f"bad schedule {_quoted(text)}: part {n} {_quoted(part, 24)} is not ACTOR or "
                                "ACTOR*COUNT")
        actor, digits = m.group(1), m.group(2) or "1"
        count = int(digits) if len(digits) <= 7 else MAX_SCHEDULE_STEPS + 1
        if count < 1:
            raise ScheduleError(f"bad schedule {_quoted(text)}: part {n} {_quoted(part, 24)} repeats {count} times")
        if len(out) + count > MAX_SCHEDULE_STEPS:
            raise ScheduleError(f"bad schedule {_quoted(text)}: more than {MAX_SCHEDULE_STEPS} steps")
        if by_upper is not None:
            if actor.upper() not in by_upper:
                raise ScheduleError(
                    f"bad schedule {_quoted(text)}: part {n}: unknown actor {_quoted(actor, 24)} "
                    f"(actors: {', '.join(actor_ids or [])})")
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
