"""The one home of assignment 3, "Predict the anomaly rate at a given RTT, then measure it": the pinned
timed run (:data:`A3_RUN`), the points and the hidden variants the answers are checked at, and the four
graders. The expected numbers are the grader's own seeded timed runs; the model the student writes is
compared with the instructor's answer key (:mod:`emqlab.teaching.key`), not with one held here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from emqlab.teaching.assignments.base import Assignment, GradedCell, Verdict, direction, shared

A3_RTT_MS = 5.0
A3_INTERVAL_MS = 30.0
A3_JOBS = 200
A3_SEED = 0
#: the timed run of assignment 3, every parameter pinned (so a change of emqlab.timing's defaults does not
#: change the assignment): simulate(mode, **A3_RUN)
A3_RUN: dict[str, Any] = {"rtt_ms": A3_RTT_MS, "jobs": A3_JOBS, "seed": A3_SEED, "workers": 4,
                          "processing_ms": 5.0, "stalled_interval_ms": A3_INTERVAL_MS}
_A3_CALL = "simulate('{mode}', rtt_ms=5, seed=0, **RUN)"


@shared(maxsize=8)
def _run(mode: str, rtt_ms: float = A3_RTT_MS, seed: int = A3_SEED) -> tuple[float, int, int, int]:
    """The grader's own timed run: (anomalies_per_1000, marked_finishes, finishes, sweep_runs)."""
    from emqlab.timing.run import simulate

    r = simulate(mode, keep_history=False, **{**A3_RUN, "rtt_ms": rtt_ms, "seed": seed})
    return float(r.anomalies_per_1000), int(r.marked_finishes), int(r.finishes), int(r.sweep_runs)


def _timed(mode: str, rtt_ms: float = A3_RTT_MS, seed: int = A3_SEED) -> tuple[float, int, int]:
    """(anomalies_per_1000, marked_finishes, finishes) of :func:`_run`."""
    measured, marked, finishes, _ = _run(mode, rtt_ms, seed)
    return measured, marked, finishes


#: measure(rtt_ms, seed) is also checked here, where no number from the notebook's own run can help (at
#: 1 ms about 70 % of the finishes are marked, against 99 % at 5 ms: a typed-in P_MARKED shows)
A3_VARIANTS: tuple[tuple[float, int], ...] = ((3.0, 1), (1.0, 2))


def warm() -> None:
    """Compute (and cache) the grader's reference runs, which do not depend on the answers."""
    _timed("split")
    _timed("atomic")
    for rtt, seed in A3_VARIANTS:
        _run("split", rtt, seed)
        _run("atomic", rtt, seed)


def _a3_measure_variants(measure: Any, model: Any) -> str | None:
    """Feedback when ``measure(rtt_ms, seed)`` is wrong at a hidden variant, else None."""
    if not callable(measure):
        return "measure must be a function of (rtt_ms, seed) returning (p_marked, predicted, measured)."
    for rtt, seed in A3_VARIANTS:
        try:
            got = measure(rtt, seed)
        except NotImplementedError:
            return "measure still has the stub: write its body in the answer cell 'a3_measure_answer'."
        except Exception as e:  # noqa: BLE001
            return f"measure at another RTT and seed raised {type(e).__name__}: {str(e)[:200]}."
        if (not isinstance(got, (tuple, list)) or len(got) != 3
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in got)):
            return "measure must return three numbers: (p_marked, predicted, measured)."
        measured, marked, finishes = _timed("split", rtt, seed)
        p = marked / finishes if finishes else 0.0
        for what, x, want in (("p_marked", got[0], p), ("predicted", got[1], _key_model(model, rtt, p)),
                              ("measured", got[2], measured)):
            if not math.isclose(float(x), want, rel_tol=1e-6, abs_tol=0.02 if what == "p_marked" else 1e-6):
                return (f"Your numbers at RTT 5 ms and seed 0 are right, but at another RTT and seed (a hidden "
                        f"check) measure's {what} is {direction(float(x), want)} what that run gives: measure must "
                        "run its own simulation with the rtt_ms and seed it is given (a hard-coded or copied number "
                        "only fits one run).")
    return None


def _a3_p_marked_variants(measure: Any) -> str | None:
    """Feedback when ``measure``'s p_marked is wrong at a hidden variant (a hard-coded P_MARKED only fits the
    notebook's own run), else None; what else measure returns is a3_measured's to grade."""
    if not callable(measure):
        return None
    for rtt, seed in A3_VARIANTS:
        try:
            got = measure(rtt, seed)
        except Exception:  # noqa: BLE001 - a3_measured says what is wrong with measure itself
            return None
        if not isinstance(got, (tuple, list)) or not got or isinstance(got[0], bool) \
                or not isinstance(got[0], (int, float)):
            return None
        _, marked, finishes = _timed("split", rtt, seed)
        want = marked / finishes if finishes else 0.0
        if abs(float(got[0]) - want) > 0.02:
            return (f"P_MARKED is right at RTT 5 ms and seed 0, but at another RTT and seed (a hidden check) "
                    f"measure's p_marked is {direction(float(got[0]), want)} that run's share of marked finishes: "
                    "compute it from the run measure makes (a number typed in only fits one run).")
    return None


def _key_model(model: Any, rtt_ms: float, p_marked: float, interval_ms: float = A3_INTERVAL_MS) -> float:
    """The answer key's model (the instructor's ``predicted_per_1000``, :mod:`emqlab.teaching.key`) at a
    point: the package holds no model of its own."""
    return float(model(rtt_ms, interval_ms, p_marked))


_A3_POINTS = [(1.0, 30.0, 1.0), (75.0, 30.0, 1.0), (5.0, 30.0, 0.5), (0.0, 30.0, 1.0), (20.0, 10.0, 0.25),
              (0.2, 30000.0, 0.2), (7.5, 45.0, 0.8)]

#: the answer functions of assignment 3 and the points an isolated run evaluates them at
PROBES: dict[str, list[tuple[Any, ...]]] = {"predicted_per_1000": list(_A3_POINTS), "measure": list(A3_VARIANTS),
                                            "measure_atomic": list(A3_VARIANTS)}


def grade_a3_model(predicted_per_1000: Any, key: Mapping[str, Any]) -> Verdict:
    """``predicted_per_1000`` against the answer key's at every point of :data:`PROBES`."""
    if not callable(predicted_per_1000):
        return Verdict(False, "predicted_per_1000 must be a function of (rtt_ms, interval_ms, p_marked).")
    for rtt, interval, p in _A3_POINTS:
        want = _key_model(key["predicted_per_1000"], rtt, p, interval)
        try:
            got = float(predicted_per_1000(rtt, interval, p))
        except NotImplementedError:
            return Verdict(False, "predicted_per_1000 still has the stub ('# YOUR CODE HERE' / raise "
                                  "NotImplementedError()): write its body in the answer cell 'a3_model_answer'.")
        except Exception as e:  # noqa: BLE001
            return Verdict(False, f"predicted_per_1000({rtt:g}, {interval:g}, {p:g}) raised {type(e).__name__}: {e}.")
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            return Verdict(False, f"predicted_per_1000({rtt:g}, {interval:g}, {p:g}) is {got:.4g}, which is "
                                  f"{direction(got, want)} the window model. Re-read Question 1: the chance that "
                                  "a marked finish is hit, the share p_marked of finishes that are marked, and "
                                  "the unit (per 1,000 jobs). Check each factor, and the edge cases (RTT 0, a very "
                                  "long interval).")
    return Verdict(True, "Your model matches the window model at every point checked.")


def grade_a3_p_marked(P_MARKED: Any, measure: Any = None) -> Verdict:  # noqa: N803
    _, marked, finishes = _timed("split")
    want = marked / finishes if finishes else 0.0
    if not isinstance(P_MARKED, (int, float)) or isinstance(P_MARKED, bool):
        return Verdict(False, "P_MARKED must be a number between 0 and 1.")
    if abs(float(P_MARKED) - want) <= 0.02:
        bad = _a3_p_marked_variants(measure) if measure is not None else None
        if bad:
            return Verdict(False, bad)
        return Verdict(True, "Right: that is the share of the split finishes that found their job marked.")
    return Verdict(False, f"P_MARKED is {float(P_MARKED):.3f}, {direction(float(P_MARKED), want)} the share of "
                          f"marked finishes in {_A3_CALL.format(mode='split')}. It is that run's "
                          "result.marked_finishes divided by its result.finishes: did you run it with every "
                          "parameter of RUN, RTT 5 ms and seed 0?")


def grade_a3_measured(MEASURED: Any, PREDICTED: Any, P_MARKED: Any,  # noqa: N803
                      measure: Any = None, *, key: Mapping[str, Any]) -> Verdict:
    measured, _, _ = _timed("split")
    for name, v in (("MEASURED", MEASURED), ("PREDICTED", PREDICTED), ("P_MARKED", P_MARKED)):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return Verdict(False, f"{name} must be a number.")
    model = key["predicted_per_1000"]
    want_pred = _key_model(model, A3_RTT_MS, float(P_MARKED))
    if not math.isclose(float(PREDICTED), want_pred, rel_tol=1e-6, abs_tol=1e-6):
        return Verdict(False, f"PREDICTED is {float(PREDICTED):.2f}, {direction(float(PREDICTED), want_pred)} the "
                              f"window model at RTT {A3_RTT_MS:g} ms and a {A3_INTERVAL_MS:g} ms stalled interval with "
                              "your own P_MARKED: compute it with your predicted_per_1000.")
    if not math.isclose(float(MEASURED), measured, rel_tol=1e-9, abs_tol=1e-9):
        return Verdict(False, f"MEASURED is {float(MEASURED):.2f}, {direction(float(MEASURED), measured)} the "
                              f"anomalies_per_1000 of {_A3_CALL.format(mode='split')}. A timed run is deterministic "
                              "for its seed and parameters: did you change one of them, or copy a number?")
    if measure is not None:
        bad = _a3_measure_variants(measure, model)
        if bad:
            return Verdict(False, bad)
    return Verdict(True, "Both numbers are right, and measure() gives the right numbers at another RTT and seed "
                         "too. The grade is for computing each correctly; where prediction and measurement "
                         "differ, the written answer should say which effect the model leaves out.")


def _numbers(got: Any, n: int) -> bool:
    return (isinstance(got, (tuple, list)) and len(got) == n
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in got))


def _a3_atomic_variants(measure_atomic: Any) -> str | None:
    """Feedback when ``measure_atomic(rtt_ms, seed)`` is not (sweep_runs, anomalies_per_1000) of the atomic
    run at a hidden variant, else None."""
    if not callable(measure_atomic):
        return "measure_atomic must be a function of (rtt_ms, seed) returning (sweep_runs, measured)."
    for rtt, seed in A3_VARIANTS:
        try:
            got = measure_atomic(rtt, seed)
        except NotImplementedError:
            return "measure_atomic still has the stub: write its body in the answer cell 'a3_atomic_answer'."
        except Exception as e:  # noqa: BLE001
            return f"measure_atomic at another RTT and seed raised {type(e).__name__}: {str(e)[:200]}."
        if not _numbers(got, 2):
            return "measure_atomic must return two numbers: (sweep_runs, measured)."
        measured, _, _, sweeps = _run("atomic", rtt, seed)
        for what, x, want in (("sweep_runs", got[0], float(sweeps)), ("measured", got[1], measured)):
            if not math.isclose(float(x), want, rel_tol=1e-9, abs_tol=1e-9):
                return (f"At another RTT and seed (a hidden check) measure_atomic's {what} is "
                        f"{direction(float(x), want)} what that atomic run gives: measure_atomic must run its own "
                        "simulation with the rtt_ms and seed it is given (a typed-in number only fits one run).")
    return None


def grade_a3_atomic(ATOMIC_MEASURED: Any, measure_atomic: Any) -> Verdict:  # noqa: N803
    """ATOMIC_MEASURED is the atomic run's anomalies_per_1000 at 5 ms and seed 0; ``measure_atomic`` must give
    the atomic run's (sweep_runs, anomalies_per_1000) at every hidden variant of :data:`A3_VARIANTS`: the
    rate is the same at every variant, the number of sweeps is not, so a typed-in answer fails."""
    measured, _, _, _ = _run("atomic")
    if not isinstance(ATOMIC_MEASURED, (int, float)) or isinstance(ATOMIC_MEASURED, bool):
        return Verdict(False, "ATOMIC_MEASURED must be a number.")
    if not math.isclose(float(ATOMIC_MEASURED), measured, abs_tol=1e-9):
        return Verdict(False, f"ATOMIC_MEASURED is {float(ATOMIC_MEASURED):g}, which is not the anomalies_per_1000 "
                              f"of {_A3_CALL.format(mode='atomic')}: run that call as written (mode 'atomic', every "
                              "parameter of RUN, seed 0) and take its result.anomalies_per_1000.")
    bad = _a3_atomic_variants(measure_atomic)
    if bad:
        return Verdict(False, bad)
    return Verdict(True, "Right, here and at another RTT and seed: the sweep runs all through the atomic run, "
                         "and no finish has a window for it to run in.")


ASSIGNMENT = Assignment("a3-rate-vs-rtt", "Predict the anomaly rate at a given RTT, then measure it",
                        "a3-rate-vs-rtt.ipynb", [
    GradedCell("a3_model", 2, "a3_model_answer", ("predicted_per_1000",), grade_a3_model,
               "the model: anomalies per 1,000 jobs", key=("predicted_per_1000",)),
    GradedCell("a3_p_marked", 1, "a3_measure_answer", ("P_MARKED", "measure"), grade_a3_p_marked,
               "the share of finishes whose job is marked"),
    GradedCell("a3_measured", 2, "a3_measure_answer", ("MEASURED", "PREDICTED", "P_MARKED", "measure"),
               grade_a3_measured, "prediction and measurement at 5 ms", depends=("a3_model", "a3_p_marked"),
               key=("predicted_per_1000",)),
    GradedCell("a3_atomic", 1, "a3_atomic_answer", ("ATOMIC_MEASURED", "measure_atomic"), grade_a3_atomic,
               "the atomic finish at the same RTT"),
], key_cells=("a3_model_answer",))
