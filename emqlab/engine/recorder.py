"""The home of the instrument that records effects: what each step did to the queue, as typed effects
(:mod:`emqlab.engine.effects`), from the queue's view before and after the step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emqlab.engine import derived
from emqlab.engine.effects import IntervalElapsed, QueueView, diff, read_view, touched_components

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.engine.actors import Op
    from emqlab.engine.context import RunView, StepRecord


class EffectRecorder:
    """The instrument that records effects: keeps the queue's view current after each step that can have
    changed it and appends the difference to the step. Where the Runner hands it the commands the step
    sent with their replies (``rec.calls``), the new view is derived from them
    (:mod:`emqlab.engine.derived`), reading only what the model cannot say; otherwise it reads the parts of
    the view the step wrote (when the command table can name the keys it wrote), or the whole view.

    ``at`` is the step (the Runner's ``index``) the view is current after: the Runner takes its final
    placements and locks from it then, instead of reading them again."""

    #: every effect, lock acquisitions included (the view is read or derived, not guessed)
    records = ("effects", "lock-changes")

    def __init__(self) -> None:
        self.view: QueueView | None = None
        self.at: int | None = None
        self._for: Any = None
        self._derivation: derived.Derivation | None = None
        self._initial_scores: dict[str, derived.Scores] = {}
        self._scores: dict[str, derived.Scores] = {}

    def start(self, runner: RunView) -> None:
        self.view = runner.initial_view()
        if self._for is not runner:  # (the initial state is the same at every reset of one runner)
            self._for = runner
            d = self._derivation = derived.Derivation(runner.keys, runner.job_ids, runner.scenario.places)
            self._initial_scores = {name: d.read_scores(runner.exec, name)[1] for name in d.zsets()}
        self._scores = {name: dict(s) for name, s in self._initial_scores.items()}
        self.at = 0

    def after_step(self, runner: RunView, actor: str, op: Op, rec: StepRecord) -> None:
        self.at = None
        if self.view is None:
            return
        if not rec.read_only:
            after = None
            calls = rec.calls
            if calls is not None and self._derivation is not None:
                after = self._derivation.after(runner.exec, self.view, self._scores, calls)
            if after is None:
                touched = touched_components(runner.keys, runner.job_ids, rec.written, runner.scenario.places)
                after = read_view(runner.exec, runner.keys, runner.job_ids, self.view, touched,
                                  runner.scenario.places)
                zsets = self._derivation.zsets() if self._derivation is not None else []
                for name in zsets if touched is None else set(touched) & set(zsets):
                    self._scores.pop(name, None)  # (read without their scores: read with them when next derived)
            effects = list(diff(self.view, after))
            if op.pre:
                effects.insert(0, IntervalElapsed("stalled"))
            rec.effects.extend(effects)
            self.view = after
        if derived.VERIFY:
            read = read_view(runner.exec, runner.keys, runner.job_ids, extra=runner.scenario.places)
            if read != self.view:
                raise AssertionError(f"{actor}'s step {runner.index} ({rec.op}): the view kept is {self.view},"
                                     f" the view read is {read}")
        self.at = runner.index


__all__ = ["EffectRecorder"]
