"""The round-trip slider's words, without a widget: the preset an RTT is and the one-line summary of a timed
run (:func:`summary`) — what the notebook slider (:mod:`emqlab.ui.slider`) and the browser site's slider
(``scripts/site/``) both show."""

from __future__ import annotations

import math

from emqlab.text import sig3
from emqlab.timing import PRESETS, TimedResult, parts_of


def preset_of(rtt: float) -> str | None:
    """The name of the preset (:data:`emqlab.timing.PRESETS`) whose RTT is ``rtt`` ms (to 0.1 %), else None."""
    for name, ms in PRESETS.items():
        if math.isclose(ms, rtt, rel_tol=1e-3):
            return name
    return None


def summary(r: TimedResult, rtt: float) -> str:
    """One line for a timed run ``r`` at ``rtt`` ms: ``RTT 1 ms (cross-AZ) · atomic finish, fetch_next = 1
    [atomic]: 1.00 round trips/job · 149 jobs/s · 0.0 anomalies per 1,000 jobs``; a split run adds each
    anomaly kind's count and the window model's expectation, a transaction its aborted EXECs per job, and a
    run that left jobs in neither completed nor failed says how many (`` · 29 of 30 jobs left unfinished``)."""
    finish, fetch_next = parts_of(r.mode)
    preset = preset_of(rtt)
    where = f" ({preset})" if preset else ""
    kinds = "".join(f"{k} {n}; " for k, n in r.anomalies.items())
    extra = f" ({kinds}the window model expects {r.expected_per_1000:.1f})" if r.mode.startswith("split") else ""
    if r.mode == "transaction":
        extra = f" ({r.aborts_per_job:.2f} aborted EXECs per job, each a retry of the whole transaction)"
    return (f"RTT {rtt:.3g} ms{where} · {finish} finish, fetch_next = {int(fetch_next)}"
            f" [{r.mode}]: {r.round_trips_per_job:.2f} round trips/job · {sig3(r.jobs_per_s)} jobs/s · "
            f"{r.anomalies_per_1000:.1f} anomalies per 1,000 jobs{extra}"
            + (f" · {r.unfinished_total} of {r.jobs} jobs left unfinished" if r.unfinished else ""))
