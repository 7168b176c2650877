"""ipywidgets for the workshop: the round-trip slider and the scheduler stepper ("you are the scheduler").

Each widget is a thin view over functions that return data (:func:`emqlab.timing.run.simulate` and
:func:`~emqlab.timing.sweep.sweep_rtt`; a :class:`~emqlab.engine.runner.Runner`), and exposes what it shows as plain
data — ``widget.data`` and ``widget.summary`` — so it can be driven without a browser: set ``.value`` on its
controls, call ``.click()`` on its buttons, and assert on the data::

    s = RoundTripSlider(TimingConfig(jobs=20))
    s.rtt.value = 75
    s.data["round_trips_per_job"]      # 1.0 (atomic, fetch_next = 1)
    s.mode.value = "split"
    s.summary                          # 'RTT 75 ms (cross-region) · split finish …'

Figures are created once (:mod:`emqlab.ui.plots`), updated in place when a control changes, and shown as PNG
in an ``Image`` widget (no ipympl needed; nothing is drawn per slider tick: ``continuous_update=False``).
Display a widget by leaving it as the last expression of a cell (or ``display(w)``).
"""

from emqlab.ui.slider import RoundTripSlider, default_config, fast
from emqlab.ui.stepper import SchedulerStepper

__all__ = ["RoundTripSlider", "SchedulerStepper", "default_config", "fast"]
