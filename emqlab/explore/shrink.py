"""The home of the shrinking of a witness: a shorter schedule that still shows the anomaly."""

from __future__ import annotations

from emqlab.engine.history import History
from emqlab.engine.runner import Runner
from emqlab.explore.report import INFRASTRUCTURE
from emqlab.protocol.schedules import ScheduleError, parse_schedule


def shrink(runner: Runner, history: History, kind: str) -> tuple[History, int | None]:
    """A smaller witness for anomaly ``kind``: the shortest prefix of the schedule that, continued without
    further preemption, still shows the anomaly (fewer preemptions, same anomaly). Returns the witness and
    its preemptions; ``None`` when no shorter one was found (``history`` is returned: its count is the
    caller's)."""
    choices = parse_schedule(history.schedule)
    boundaries = [i for i in range(1, len(choices)) if choices[i] != choices[i - 1]]
    for cut in boundaries:
        try:
            runner.reset()
            h = runner.run(choices[:cut])
        except (ScheduleError, *INFRASTRUCTURE):  # (a server fault: the witness found stands)
            continue
        if kind in h.kinds:
            if (runner.preemptions, len(h.steps)) <= (len(boundaries) + 1, len(history.steps)):
                return h, runner.preemptions
    return history, None


__all__ = ["shrink"]
