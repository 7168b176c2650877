"""Feedback that teaches without telling: it names what is wrong and where to look, never the expected
value; hidden variants make a hard-coded or copied answer fail; a failure that comes from an earlier answer
says so.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from emqlab.teaching import grading as G
from emqlab.teaching.assignments import a3
from emqlab.teaching.assignments.base import conn

from .answer_key import key, model, pair

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "assignments"


def numbers(x: float) -> set[str]:
    """The ways a number is usually printed."""
    out = {f"{x:.1f}", f"{x:.2f}", f"{x:.3f}", f"{x:.4g}", f"{x:g}"}
    return {s for s in out if s not in ("0", "0.0", "1", "1.0")} | ({str(int(x))} if x == int(x) and x > 1 else set())


def leaks(text: str, values: set[str]) -> list[str]:
    return [v for v in values if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text)]


def _delete_lock(alone: Any) -> Any:
    return next(s for s in alone.steps if s.actor == "W1" and s.op == "DEL" and s.args[0].endswith(":lock"))


def _count(scenario: Any, mode: str) -> int:
    from emqlab.explore import explore

    return sum(explore(scenario, mode, conn=conn()).runs_with.values())


WRONG_GAPS = [("GET 1:lock", "SREM stalled 1"), ("DEL 1:lock", "LREM active -1 1"), ("HMGET 1 a", "ZADD completed 5 1"),
              ("", ""), ("DEL", "SREM")]


def a1_wrong() -> list[tuple[str, G.Verdict]]:
    def fixed(schedule: str) -> Any:
        return lambda alone: schedule

    schedules = [fixed(s) for s in ("v1:S1", "v1:W1*3", "v1:W1*12.S1", "v1:W1*20.S1", "v1:W1*5.S1", "v1:W1*9.S1")]
    schedules += [lambda h: f"v1:W1*{_delete_lock(h).actor_step + 1}.S1",  # one step late everywhere
                  lambda h: f"v1:W1*{_delete_lock(h).actor_step - 1}.S1"]  # one step early
    counts = [lambda sc, mode: 0, lambda sc, mode: 1 if mode == "split" else 0, lambda sc, mode: 3,
              lambda sc, mode: _count(sc, mode) + 1]
    return [("schedule", G.grade_a1_schedule(f)) for f in schedules] + \
           [("gap", G.grade_a1_gap(pair(*g))) for g in WRONG_GAPS] + \
           [("atomic", G.grade_a1_atomic(n, _count)) for n in (1, 3, 21)] + \
           [("atomic", G.grade_a1_atomic(0, f)) for f in counts]


def test_a1_feedback_never_gives_the_answer() -> None:
    # the answers: the sweep right after W1's DEL of the lock (its step) on each case the grader tries, the
    # window's two commands, and the counts of every exploration the grader compares with
    where = {}
    for name in G.A1_SCHEDULE_CASES:
        alone = G.A1_CASES[name].solo()
        dele = _delete_lock(alone)
        srem = next(s.index for s in alone.steps if s.actor == "W1" and s.op == "SREM")
        where[name] = (dele.actor_step, srem)
    for what, v in a1_wrong():
        assert not v.passed
        text = v.feedback
        assert "?." not in text and ".." not in text.replace("...", ""), text  # sentences end once
        if what == "schedule":
            rest = re.sub(r"[Rr]eplaying \S+", "", text)  # the echo of the student's own schedule
            for d, _ in where.values():
                assert f"W1*{d}" not in rest, text
            # a step number in the feedback is the student's own S1 step, never the window's
            for m in re.finditer(r"step (\d+)", text):
                assert f"S1 ran at step {m.group(1)}" in text, text
        if what == "gap":  # beyond the echo of the student's own pair
            rest = text.split("): ", 1)[1] if "): " in text else text.split("'), ", 1)[1]
            assert "DEL" not in rest and "SREM" not in rest and "1:lock" not in rest, text
        if what == "atomic":
            # no number at all, once the echo of the student's own number is taken out
            rest = re.sub(r"ATOMIC_RUNS_WITH_ANOMALY is \d+", "", text)
            assert not re.search(r"\d", rest.replace("EVALSHA", "")), text


def test_a3_feedback_never_gives_the_numbers() -> None:
    measured, marked, finishes = a3._timed("split")
    p = marked / finishes
    secret = numbers(measured) | numbers(p) | numbers(model(5, 30, p)) | {str(marked), str(finishes)}
    for rtt, interval, pm in a3._A3_POINTS:
        secret |= numbers(model(rtt, interval, pm))
    secret -= {"5", "30", "200"}  # the assignment's own parameters
    k = {"predicted_per_1000": key("a3-rate-vs-rtt")["predicted_per_1000"]}
    wrong = [
        G.grade_a3_model(lambda rtt, interval, pm: 1000 * pm * rtt / interval, key=k),
        G.grade_a3_model(lambda rtt, interval, pm: 1000 * rtt / (interval + rtt), key=k),
        G.grade_a3_p_marked(0.5), G.grade_a3_p_marked(1.5),
        G.grade_a3_measured(MEASURED=measured + 3, PREDICTED=model(5, 30, p), P_MARKED=p, key=k),
        G.grade_a3_measured(MEASURED=measured, PREDICTED=40.0, P_MARKED=p, key=k),
        G.grade_a3_atomic(3.0, lambda rtt, seed: (14, 3.0)),
        G.grade_a3_atomic(0.0, lambda rtt, seed: (14, 0.0)),
    ]
    for v in wrong:
        assert not v.passed
        assert not leaks(v.feedback, secret), (leaks(v.feedback, secret), v.feedback)
    # …but they say which way it is off
    assert "above" in G.grade_a3_p_marked(1.5).feedback and "below" in G.grade_a3_p_marked(0.5).feedback


def test_a3_hidden_variant_catches_a_hard_coded_measure() -> None:
    measured, marked, finishes = a3._timed("split")
    p = marked / finishes
    pinned = (p, model(5, 30, p), measured)
    k = {"predicted_per_1000": key("a3-rate-vs-rtt")["predicted_per_1000"]}
    right = G.grade_a3_measured(MEASURED=measured, PREDICTED=pinned[1], P_MARKED=p, measure=lambda r, s: pinned,
                                key=k)
    assert not right.passed
    assert "another RTT and seed" in right.feedback and "hard-coded or copied" in right.feedback
    assert not leaks(right.feedback, numbers(measured))


def nb_with(aid: str, gid: str, code: str) -> dict[str, Any]:
    nb = copy.deepcopy(G.read_notebook(SOURCES / G.ASSIGNMENTS[aid].notebook))
    next(c for c in nb["cells"] if G.grade_id(c) == gid)["source"] = code
    return nb


def test_a_wrong_model_is_named_as_the_cause_downstream() -> None:
    wrong = ("def predicted_per_1000(rtt_ms, interval_ms, p_marked):\n"
             "    return 1000 * p_marked * rtt_ms / interval_ms\n")
    nb = nb_with("a3-rate-vs-rtt", "a3_model_answer", wrong)
    report = G.grade_notebook(nb, name="a3.ipynb", isolated=False)
    cells = {c.grade_id: c for c in report.cells}
    assert not cells["a3_model"].passed and cells["a3_p_marked"].passed
    fb = cells["a3_measured"].feedback
    assert not cells["a3_measured"].passed
    assert fb.startswith("This answer builds on 'a3_model'") and "fix that first" in fb


def test_errors_name_the_answer_cell_and_count_code_cells() -> None:
    nb = nb_with("a1-double-placement", "a1_gap_answer", "GAP = (DEL, SREM)\n")
    report = G.grade_notebook(nb, name="a1.ipynb")
    fb = next(c.feedback for c in report.cells if c.grade_id == "a1_gap")
    # a1's code cells: setup, demo, the schedule answer, its test, then the gap answer (the 5th code cell;
    # the 9th cell when Markdown cells are counted)
    assert "the answer cell 'a1_gap_answer' (code cell 5) raised NameError" in fb


def test_a3_discussion_does_not_presuppose_a_direction() -> None:
    text = "".join(c for cell in G.read_notebook(SOURCES / "a3-rate-vs-rtt.ipynb")["cells"]
                   for c in cell["source"])
    assert "above the prediction" not in text and "below the prediction" not in text
    assert "which is larger at these settings" in text


@pytest.mark.parametrize("aid", list(G.ASSIGNMENTS))
def test_student_version_feedback_is_about_the_stub(aid: str) -> None:
    report = G.grade_notebook(G.student_version(G.read_notebook(SOURCES / G.ASSIGNMENTS[aid].notebook)),
                              name="x.ipynb", isolated=False)
    assert all("stub" in c.feedback for c in report.cells)
