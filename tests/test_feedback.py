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

from emqlab import grading as G

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "assignments"


def numbers(x: float) -> set[str]:
    """The ways a number is usually printed."""
    out = {f"{x:.1f}", f"{x:.2f}", f"{x:.3f}", f"{x:.4g}", f"{x:g}"}
    return {s for s in out if s not in ("0", "0.0", "1", "1.0")} | ({str(int(x))} if x == int(x) and x > 1 else set())


def leaks(text: str, values: set[str]) -> list[str]:
    return [v for v in values if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text)]


def a1_wrong() -> list[tuple[str, G.Verdict]]:
    return [("schedule", G.grade_a1_schedule(s)) for s in ("v1:S1", "v1:W1*3", "v1:W1*12.S1", "v1:W1*20.S1",
                                                             "v1:W1*5.S1")] + \
           [("gap", G.grade_a1_gap(g)) for g in (("GET", "SREM"), ("DEL", "LREM"), ("HMGET", "ZADD"), ("", ""))] + \
           [("atomic", G.grade_a1_atomic(n)) for n in (1, 3, 21)]


def test_a1_feedback_never_gives_the_answer() -> None:
    # the answer: the sweep right after W1's DEL (its step), and the window's two commands
    alone = G._replay(G.A1_SCENARIO, "split", "v1:W1*20")
    dele = next(s.index for s in alone.steps if s.actor == "W1" and s.op == "DEL")
    srem = next(s.index for s in alone.steps if s.actor == "W1" and s.op == "SREM")
    explored, bad = G._explore_counts(G.A1_SCENARIO, "atomic")
    for what, v in a1_wrong():
        assert not v.passed
        text = v.feedback
        assert f"W1*{dele - 1}.S1" not in text and f"step {dele}" not in text and f"step {srem}" not in text, text
        if what == "gap":  # beyond the echo of the student's own pair
            rest = text.split("): ", 1)[1]
            assert "DEL" not in rest and "SREM" not in rest, text
        if what == "atomic":
            assert not leaks(text, {str(bad), str(explored)}), text
            assert "in 0" not in text


def test_a3_feedback_never_gives_the_numbers() -> None:
    measured, marked, finishes = G._timed("split")
    p = marked / finishes
    secret = numbers(measured) | numbers(p) | numbers(G._model(5, 30, p)) | {str(marked), str(finishes)}
    for rtt, interval, pm in G._A3_POINTS:
        secret |= numbers(G._model(rtt, interval, pm))
    secret -= {"5", "30", "200"}  # the assignment's own parameters
    wrong = [
        G.grade_a3_model(lambda rtt, interval, pm: 1000 * pm * rtt / interval),
        G.grade_a3_model(lambda rtt, interval, pm: 1000 * rtt / (interval + rtt)),
        G.grade_a3_p_marked(0.5), G.grade_a3_p_marked(1.5),
        G.grade_a3_measured(MEASURED=measured + 3, PREDICTED=G._model(5, 30, p), P_MARKED=p),
        G.grade_a3_measured(MEASURED=measured, PREDICTED=40.0, P_MARKED=p),
        G.grade_a3_atomic(3.0),
    ]
    for v in wrong:
        assert not v.passed
        assert not leaks(v.feedback, secret), (leaks(v.feedback, secret), v.feedback)
    # …but they say which way it is off
    assert "above" in G.grade_a3_p_marked(1.5).feedback and "below" in G.grade_a3_p_marked(0.5).feedback


def test_a3_hidden_variant_catches_a_hard_coded_measure() -> None:
    measured, marked, finishes = G._timed("split")
    p = marked / finishes
    pinned = (p, G._model(5, 30, p), measured)
    right = G.grade_a3_measured(MEASURED=measured, PREDICTED=pinned[1], P_MARKED=p, measure=lambda r, s: pinned)
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
