"""The home of the instrument that records effects: what each step did to the queue, as typed effects
(:mod:`emqlab.engine.effects`), read from the server after the step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from emqlab.engine.effects import IntervalElapsed, QueueView, diff, read_view, touched_components

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.engine.actors import Op
    from emqlab.engine.context import RunView, StepRecord


class EffectRecorder:
    """The instrument that records effects: reads the queue's view after each step that can have changed
    it (only the components the step wrote, when the command table can name the keys it wrote: a command's,
    or every ``redis.call`` of a script run through the Lua host; everything otherwise) and appends the
    difference to the step. Costs one to a few reads per step."""

    #: every effect, lock acquisitions included (the view is read, not inferred from the commands)
    records = ("effects", "lock-changes")

    def __init__(self) -> None:
        self.view: QueueView | None = None

    def start(self, runner: RunView) -> None:
        self.view = runner.initial_view()

    def after_step(self, runner: RunView, actor: str, op: Op, rec: StepRecord) -> None:
        if rec.read_only or self.view is None:
            return
        touched = touched_components(runner.keys, runner.job_ids, rec.written, runner.scenario.places)
        after = read_view(runner.exec, runner.keys, runner.job_ids, self.view, touched, runner.scenario.places)
        effects = list(diff(self.view, after))
        if op.pre:
            effects.insert(0, IntervalElapsed("stalled"))
        rec.effects.extend(effects)
        self.view = after


__all__ = ["EffectRecorder"]
