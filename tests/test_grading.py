"""The classroom assignments: each source notebook (the solutions) gets full marks, its student version gets
zero with feedback that names what is missing, a wrong answer gets feedback that says why, and grading is
deterministic, fast, and needs no nbgrader.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from emqlab.teaching import grading as G
from emqlab.teaching.assignments import a1, a3
from emqlab.teaching.assignments.base import conn
from emqlab.ui.cli import main

from .answer_key import gap_of, key, model, pair
from .test_golden import golden

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "assignments"
NOTEBOOKS = {a.id: SOURCES / a.notebook for a in G.ASSIGNMENTS.values()}


def source(aid: str) -> dict[str, Any]:
    return G.read_notebook(NOTEBOOKS[aid])


def cell_by_id(nb: dict[str, Any], gid: str) -> dict[str, Any]:
    return next(c for c in nb["cells"] if G.grade_id(c) == gid)


def with_answer(aid: str, gid: str, code: str) -> dict[str, Any]:
    """The student version of ``aid`` with answer cell ``gid`` replaced by ``code``; other answers from the
    solution."""
    nb = copy.deepcopy(source(aid))
    cell_by_id(nb, gid)["source"] = code
    return nb


# -- the source notebooks follow nbgrader's conventions ----------------------------------------------------


@pytest.mark.parametrize("aid", list(NOTEBOOKS))
def test_source_notebook_is_nbgrader_source_layout(aid: str) -> None:
    nb = source(aid)
    assert G.assignment_of(nb) == aid
    ids = [G.grade_id(c) for c in nb["cells"]]
    assert all(ids), "every cell of an assignment has a grade_id"
    assert len(ids) == len(set(ids)), "grade_ids are unique"
    for c in nb["cells"]:
        m = c["metadata"]["nbgrader"]
        assert set(m) >= {"grade", "grade_id", "locked", "schema_version", "solution", "task"}
        assert m["schema_version"] == 3
        if c["cell_type"] == "code":
            assert c["outputs"] == [] and c["execution_count"] is None, f"{m['grade_id']}: outputs must be empty"
        text = "".join(c["source"])
        if m["solution"]:
            assert G.BEGIN_SOLUTION in text and G.END_SOLUTION in text, m["grade_id"]
            assert not m["grade"] and not m["locked"]
        if m["grade"]:
            assert m["points"] > 0 and m["locked"]
        else:
            assert "points" not in m
        if G.BEGIN_HIDDEN in text:
            assert m["grade"], f"{m['grade_id']}: hidden tests belong in a graded cell"
    # the notebook's points are the grader's points
    assignment = G.ASSIGNMENTS[aid]
    assert dict(G.graded_cells(nb)) == {c.grade_id: c.points for c in assignment.cells}
    for c in assignment.cells:
        assert G.is_solution(cell_by_id(nb, c.answer_cell))


@pytest.mark.parametrize("aid", list(NOTEBOOKS))
def test_solution_gets_full_marks(aid: str) -> None:
    report = G.grade_notebook(NOTEBOOKS[aid])  # (its time: benchmarks/bench_grading.py)
    assert report.assignment == aid
    failed = {c.grade_id: c.feedback for c in report.cells if not c.passed}
    assert not failed, failed
    assert report.score == report.max_score == G.ASSIGNMENTS[aid].max_score
    assert not report.errors, report.errors
    # the grader's whole JSON (its feedback texts included) is held fixed: tests/test_golden.py
    d = report.to_dict()
    d.pop("elapsed_s")
    d["notebook"] = Path(d["notebook"]).name
    golden(f"grades/{aid}.json", d)


@pytest.mark.parametrize("aid", list(NOTEBOOKS))
def test_source_notebook_runs_with_its_hidden_tests(aid: str) -> None:
    """What ``nbgrader validate`` does with the source: every cell, the tests included, runs cleanly."""
    run = G.run_notebook(source(aid), tests=True)
    assert not run.errors, run.errors


@pytest.mark.slow
@pytest.mark.parametrize("aid", list(NOTEBOOKS))
def test_source_notebook_runs_in_a_kernel(aid: str) -> None:
    """The source notebooks run top to bottom in a real Jupyter kernel, hidden tests included."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOKS[aid], as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(SOURCES)}})
    client.execute()
    outputs = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "Traceback" not in outputs


@pytest.mark.parametrize("aid", list(NOTEBOOKS))
def test_student_version_gets_zero_and_says_what_is_missing(aid: str) -> None:
    nb = G.student_version(source(aid))
    report = G.grade_notebook(nb, name=f"{aid}.ipynb")
    assert report.score == 0
    assignment = G.ASSIGNMENTS[aid]
    for c in report.cells:
        spec = assignment.cell(c.grade_id)
        assert not c.passed
        assert "still has the stub" in c.feedback, c.feedback
        assert spec.answer_cell in c.feedback
        assert any(name in c.feedback for name in spec.names), c.feedback


@pytest.mark.parametrize("aid", list(NOTEBOOKS))
def test_student_version_strips_solutions_and_hidden_tests(aid: str) -> None:
    src = source(aid)
    nb = G.student_version(src)
    text = json.dumps(nb)
    for marker in (G.BEGIN_SOLUTION, G.END_SOLUTION, G.BEGIN_HIDDEN, G.END_HIDDEN, "from emqlab.grading import check"):
        if marker == "from emqlab.grading import check" and aid == "a2-repair-finish":
            continue  # a2's first two test cells are visible on purpose
        assert marker not in text, marker
    assert len(nb["cells"]) == len(src["cells"])
    for before, after in zip(src["cells"], nb["cells"], strict=True):
        m = after["metadata"]["nbgrader"]
        assert m["grade_id"] == before["metadata"]["nbgrader"]["grade_id"]
        assert m["cell_type"] == after["cell_type"]
        if G.is_solution(after):
            assert "# YOUR CODE HERE" in "".join(after["source"])
            assert "raise NotImplementedError()" in "".join(after["source"])
            assert after["metadata"]["deletable"] is False
        elif G.is_grade(after) or m["locked"]:
            assert after["metadata"]["deletable"] is False and after["metadata"]["editable"] is False
        if after["cell_type"] == "code":
            assert after["outputs"] == [] and after["execution_count"] is None
    # the source is untouched
    assert G.BEGIN_SOLUTION in json.dumps(source(aid))


def test_stub_keeps_the_regions_indentation() -> None:
    nb = G.student_version(source("a3-rate-vs-rtt"))
    text = "".join(cell_by_id(nb, "a3_model_answer")["source"])
    assert text == "def predicted_per_1000(rtt_ms, interval_ms, p_marked):\n    # YOUR CODE HERE\n" \
                   "    raise NotImplementedError()"


def test_student_version_rejects_malformed_regions() -> None:
    nb = source("a1-double-placement")
    bad = copy.deepcopy(nb)
    cell_by_id(bad, "a1_gap_answer")["source"] = "### BEGIN SOLUTION\nGAP = ()\n"
    with pytest.raises(G.GradingError, match="without '### END SOLUTION'"):
        G.student_version(bad)
    bad = copy.deepcopy(nb)
    cell_by_id(bad, "a1_setup")["source"] = "### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n"
    with pytest.raises(G.GradingError, match="not marked as a solution"):
        G.student_version(bad)
    bad = copy.deepcopy(nb)
    cell_by_id(bad, "a1_setup")["source"] = "### BEGIN HIDDEN TESTS\nx = 1\n### END HIDDEN TESTS\n"
    with pytest.raises(G.GradingError, match="not marked as graded"):
        G.student_version(bad)


# -- wrong answers get feedback that says why ---------------------------------------------------------------


def delete_lock(alone: Any) -> Any:
    """W1's step that deletes its job's lock, found by what it is."""
    return next(s for s in alone.steps if s.actor == "W1" and s.op == "DEL" and s.args[0].endswith(":lock"))


def right_schedule(alone: Any) -> str:
    return f"v1:W1*{delete_lock(alone).actor_step}.S1"


def fixed(schedule: str) -> Any:
    return lambda alone: schedule


@pytest.mark.parametrize(("schedule", "words"), [
    ("v1:S1", ["step 1, too early", "the lock was still there", "deletes the lock"]),
    ("v1:W1*12.S1", ["too late", "no longer marked"]),
    ("v1:W1*3", ["too late"]),
    ("v1:W1*9.X1", ["does not fit the scenario", "unknown actor 'X1'"]),
    ("W1*9.S1", ["does not fit the scenario", "v1:"]),
])
def test_a1_wrong_schedule_says_why(schedule: str, words: list[str]) -> None:
    v = G.grade_a1_schedule(fixed(schedule))
    assert not v.passed
    for w in words:
        assert w in v.feedback, v.feedback
    assert "hidden" not in v.feedback  # wrong on the assignment's own case: that is what it says


def test_a1_right_schedule_in_any_spelling() -> None:
    assert G.grade_a1_schedule(right_schedule).passed
    assert G.grade_a1_schedule(lambda h: f" V1: w1*{delete_lock(h).actor_step} . s1 . w1*8 ").passed
    # the run's step number works as well: W1 runs first in the solo history
    assert G.grade_a1_schedule(lambda h: f"v1:W1*{delete_lock(h).index}.S1").passed


def test_a1_hidden_variants_move_the_window() -> None:
    """The variants the grader builds really differ where it matters: the job id, and where the window is."""
    solo = {n: G.A1_CASES[n].solo() for n in G.A1_SCHEDULE_CASES}
    steps = {n: delete_lock(h).actor_step for n, h in solo.items()}
    assert steps["lease-checks"] > steps["assignment"] > steps["failed"]
    assert delete_lock(solo["another-job"]).args[0] == "7:lock"
    for n in G.A1_SCHEDULE_CASES:  # each one double-places under the right schedule, and only just
        k = steps[n]
        assert a1._a1_replay_verdict(G.A1_CASES[n], f"v1:W1*{k}.S1").passed, n
        assert not a1._a1_replay_verdict(G.A1_CASES[n], f"v1:W1*{k - 1}.S1").passed, n
        assert not a1._a1_replay_verdict(G.A1_CASES[n], f"v1:W1*{k + 1}.S1").passed, n


def test_a1_copied_witness_fails_a_hidden_variant() -> None:
    """The issue's cheat: the witness of `emqlab simulate --split`, copied. It double-places on the
    assignment's case, and a function that returns it fails the grade."""
    from emqlab.engine.scenario import load
    from emqlab.explore import explore

    witness = explore(load("stalled-finish"), "split", conn=conn()).witnesses["double-placement"].schedule
    assert a1._a1_replay_verdict(G.A1_CASES["assignment"], witness).passed
    v = G.grade_a1_schedule(fixed(witness))
    assert not v.passed
    assert "fits the assignment's case" in v.feedback and "a hidden variant" in v.feedback, v.feedback
    assert "copied from one run" in v.feedback
    v = G.grade_a1_schedule(witness)  # the string itself, not a function
    assert not v.passed and "not a string" in v.feedback


def test_a1_a_function_that_assumes_job_1_fails_another_job() -> None:
    def job_1_only(h: Any) -> str:
        step = next(s for s in h.steps if s.args[:1] == ("1:lock",) and s.op == "DEL")
        return f"v1:W1*{step.actor_step}.S1"

    v = G.grade_a1_schedule(job_1_only)
    assert not v.passed and "another job id" in v.feedback and "raised StopIteration" in v.feedback


def test_a1_stubbed_function() -> None:
    def stub(alone: Any) -> str:
        raise NotImplementedError()

    v = G.grade_a1_schedule(stub)
    assert not v.passed and "still has the stub" in v.feedback and "a1_schedule_answer" in v.feedback


@pytest.mark.parametrize(("gap", "words"), [
    (("DEL 1:lock", "LREM active -1 1"), ["closes earlier than LREM"]),
    (("GET 1:lock", "SREM stalled 1"), ["does not open after GET", "no lock"]),
    (("DEL", "SREM"), ["the right commands, but not with their arguments"]),
    ("DEL", ["pair of W1's commands"]),
])
def test_a1_wrong_gap_says_why(gap: Any, words: list[str]) -> None:
    v = G.grade_a1_gap(pair(*gap) if isinstance(gap, tuple) else lambda alone: gap)
    assert not v.passed
    for w in words:
        assert w in v.feedback, v.feedback


def test_a1_gap_is_the_window_the_grader_finds_and_is_written_any_way() -> None:
    """The window is computed by replaying the sweep after each of W1's commands: it opens at the DEL of
    the job's lock and closes at the SREM of its mark, on every case; an honest gap_of written in other
    spellings passes, and a typed-in pair fails the hidden variant with another job id."""
    for name in G.A1_SCHEDULE_CASES:
        lines, opens, closes = a1._window(name)
        job = G.A1_CASES[name].job
        assert (lines[opens - 1], lines[closes - 1]) == (f"DEL {job}:lock", f"SREM stalled {job}"), name
        assert closes == opens + 1
    assert G.grade_a1_gap(gap_of).passed
    assert G.grade_a1_gap(lambda h: [x.lower().replace(" ", "   ", 1) for x in gap_of(h)]).passed
    assert G.grade_a1_gap(lambda h: tuple(" ".join((s.op, *s.args)) for s in h.steps
                                          if s.actor == "W1" and s.op in ("DEL", "SREM"))[:2]).passed
    typed = G.grade_a1_gap(pair("DEL 1:lock", "SREM stalled 1"))
    assert not typed.passed and "another job id" in typed.feedback and "hidden check" in typed.feedback
    assert not G.grade_a1_gap(("DEL 1:lock", "SREM stalled 1")).passed  # the pair itself, not a function


def runs_with_anomaly(scenario: Any, mode: str) -> int:
    from emqlab.explore import explore

    return sum(explore(scenario, mode, conn=conn()).runs_with.values())


def test_a1_wrong_count() -> None:
    v = G.grade_a1_atomic(1, runs_with_anomaly)
    assert not v.passed and "not the number of runs with an anomaly" in v.feedback
    assert G.grade_a1_atomic(runs_with_anomaly(G.A1_CASES["assignment"].scenario(), "atomic"),
                             runs_with_anomaly).passed


def test_a1_count_variants_differ_and_catch_a_copied_number() -> None:
    """The counts at the probes are the grader's own explorations, and they differ: no one number (or one
    number per mode) fits them all."""
    counts = {p: a1._explore_counts(*p)[1] for p in G.A1_COUNT_PROBES}
    assert len({counts[p] for p in counts if p[1] == "split"}) == len([p for p in counts if p[1] == "split"])
    right = counts[("assignment", "atomic")]
    split = counts[("assignment", "split")]
    copied = G.grade_a1_atomic(right, lambda sc, mode: right if mode == "atomic" else split)
    assert not copied.passed and "a hidden variant" in copied.feedback and "copied" in copied.feedback
    low = G.grade_a1_atomic(right, lambda sc, mode: 0)
    assert not low.passed and "below" in low.feedback
    high = G.grade_a1_atomic(right, lambda sc, mode: runs_with_anomaly(sc, mode) + 1)
    assert not high.passed and "above" in high.feedback
    assert not G.grade_a1_atomic(right, lambda sc, mode: "0").passed


FIXED = """
local lock, stalled, active, completed, job = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, token, now, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call("GET", lock) ~= token then return -2 end
if redis.call("LREM", active, -1, id) == 0 then return -3 end
redis.call("ZADD", completed, now, id)
redis.call("HSET", job, "returnvalue", value, "finishedOn", now)
redis.call("SREM", stalled, id)
redis.call("DEL", lock)
return 0
"""
IGNORES_COUNT = FIXED.replace('if redis.call("LREM", active, -1, id) == 0 then return -3 end',
                              'redis.call("LREM", active, -1, id)')
FORGETS_LOCK = FIXED.replace('redis.call("DEL", lock)\n', "")
ATOMIC_CHEAT = 'return redis.call("EVAL", "return 0", 0)'


def broken() -> str:
    """The notebook's BROKEN_FINISH_LUA (its setup cell defines it)."""
    run = G.run_notebook({"cells": [cell_by_id(source("a2-repair-finish"), "a2_setup")]})
    assert not run.errors
    return str(run.namespace["BROKEN_FINISH_LUA"])


def test_a2_broken_finish_feedback_shows_the_witness() -> None:
    lua = broken()
    assert G.grade_a2_sequential(lua).passed  # it does finish a job on its own
    v = G.grade_a2_sweep(lua)
    assert not v.passed
    assert "double-placement" in v.feedback and "Shortest witness" in v.feedback
    assert "DEL 1:lock" in v.feedback and "because S1 ran after W1" in v.feedback


def test_a2_ignoring_the_lrem_count_fails_only_the_hidden_test() -> None:
    assert G.grade_a2_sequential(IGNORES_COUNT).passed
    assert G.grade_a2_sweep(IGNORES_COUNT).passed
    v = G.grade_a2_lease(IGNORES_COUNT)
    assert not v.passed
    assert "lease lapses" in v.feedback and "double-placement" in v.feedback and "LREM count" in v.feedback


@pytest.mark.parametrize("lua", ["return 1", "return redis.call('PING')", "return -2"])
def test_a2_a_finish_that_finishes_nothing_fails_the_lease_test(lua: str) -> None:
    """Doing nothing is consistent with every lapse (the job stays where the sweep puts it), so the lease test
    also asks for a finish's codes (0 or a refusal) and for a completed job where the lock still holds."""
    v = G.grade_a2_lease(lua)
    assert not v.passed, v.feedback


def test_a2_a_finish_that_reads_the_clock_is_graded_as_it_runs() -> None:
    """TIME inside an exploration's step answers the step's virtual instant (the one ARGV[3] stamps), not the
    machine's clock: a finish that branches on it is graded the same way every time, and one that tells the
    grader's runs from real ones by the distance between TIME and ARGV[3] takes its real-world branch."""
    from emqlab.engine.seed import T0
    from emqlab.teaching.assignments.a2 import explore_finish

    args = "local id, token, now, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4]\n"
    head, safe_body = FIXED.split(args)
    head += args
    broken_body = broken().split(args)[1]
    parity = (head + 'local t = redis.call("TIME")\nlocal ms = t[1] * 1000 + math.floor(t[2] / 1000)\n'
              'if ms % 2 == 0 then\n' + safe_body + '\nend\n' + 'return 7')
    runs = {explore_finish.__wrapped__(parity, "stalled-finish").runs for _ in range(3)}
    assert len(runs) == 1  # the same runs, codes and places each time
    seen = (head + 'local t = redis.call("TIME")\n'
            'redis.call("HSET", job, "seen", t[1] * 1000 + math.floor(t[2] / 1000), "usec", t[2])\n' + safe_body)
    from emqlab.teaching.assignments.a1 import A1_SCENARIO
    from emqlab.teaching.assignments.a2 import _a2_runner

    with _a2_runner(A1_SCENARIO, seen, []) as r:
        h = r.run()
        time_step = next(s for s in h.steps if s.actor == "W1" and s.op == "TIME")
        stored = r.conn.hmget(r.keys.job("1"), "seen", "usec")
    assert int(stored[0]) == time_step.time == T0 + time_step.index and int(stored[1]) % 1000 == 0
    detect = (head + 'local t = redis.call("TIME")\n'
              'if math.abs(t[1] * 1000 - tonumber(now)) > 86400000 then\n' + safe_body + '\nend\n'
              + broken_body)
    assert not G.grade_a2_sweep(detect).passed


@pytest.mark.parametrize("end", ["return nil", "return false", ""])
def test_a2_a_finish_that_returns_nil_did_not_return_0(end: str) -> None:
    """A finish that does the work but forgets its ``return 0`` answers nil: reported as nil, never as 0."""
    lua = FIXED.replace('redis.call("DEL", lock)\nreturn 0\n', 'redis.call("DEL", lock)\n' + end + "\n")
    assert lua != FIXED
    v = G.grade_a2_sequential(lua)
    assert not v.passed and "it returned nil instead of 0" in v.feedback, v.feedback


@pytest.mark.parametrize(("harm", "says"), [
    ('redis.call("DEL", (active:gsub("active$", "wait")))', "job 2, waiting in the same queue, ended in no list"),
    ('redis.call("DEL", (job:gsub("1$", "2")))', "job 2, waiting in the same queue, is gone")])
def test_a2_a_finish_that_harms_another_job_fails_the_sequential_test(harm: str, says: str) -> None:
    """The sequential test's queue has a second job waiting: a finish that empties the wait list or deletes
    another job's hash did its own job right and passed while the queue held one job."""
    lua = FIXED.replace("return 0\n", harm + "\nreturn 0\n")
    v = G.grade_a2_sequential(lua)
    assert not v.passed and says in v.feedback, v.feedback
    assert G.grade_a2_sequential(FIXED).passed


def test_a2_forgetting_the_lock_is_reported() -> None:
    v = G.grade_a2_sequential(FORGETS_LOCK)
    assert not v.passed and "lock is still there" in v.feedback


def test_a2_atomic_cheat_is_refused() -> None:
    for grader in (G.grade_a2_sequential, G.grade_a2_sweep, G.grade_a2_lease):
        v = grader(ATOMIC_CHEAT)
        assert not v.passed and "EVAL" in v.feedback and "order of its commands" in v.feedback


def test_a2_syntax_error() -> None:
    v = G.grade_a2_sweep("if then")
    assert not v.passed and v.feedback.startswith("FINISH_LUA does not compile")


def test_a2_wrong_two_workers_answer() -> None:
    k = {"TWO_WORKERS_SPLIT_SAFE": key("a2-repair-finish")["TWO_WORKERS_SPLIT_SAFE"]}
    assert G.grade_a2_two_workers(k["TWO_WORKERS_SPLIT_SAFE"], key=k).passed
    v = G.grade_a2_two_workers(not k["TWO_WORKERS_SPLIT_SAFE"], key=k)
    assert not v.passed and "W2" in v.feedback and "stolen-lock" in v.feedback
    assert not G.grade_a2_two_workers("no", key=k).passed
    # without the answer key the cell cannot be graded, and says so
    v = G.run_grader(G.ASSIGNMENTS["a2-repair-finish"].cell("a2_two_workers"),
                     {"TWO_WORKERS_SPLIT_SAFE": k["TWO_WORKERS_SPLIT_SAFE"]}, None)
    assert not v.passed and "--key" in v.feedback


def test_a3_wrong_model_and_measurement() -> None:
    k = {"predicted_per_1000": key("a3-rate-vs-rtt")["predicted_per_1000"]}
    v = G.grade_a3_model(lambda rtt, interval, p: 1000 * p * rtt / interval, key=k)
    assert not v.passed and "Re-read Question 1" in v.feedback
    assert G.grade_a3_model(lambda r, i, p: p * r * 1e3 / (r + i) if r + i else 0.0, key=k).passed
    v = G.grade_a3_measured(MEASURED=1.0, PREDICTED=model(5, 30, 0.9), P_MARKED=0.9, key=k)
    assert not v.passed and "deterministic for its seed" in v.feedback
    v = G.grade_a3_measured(MEASURED=1.0, PREDICTED=50.0, P_MARKED=0.9, key=k)
    assert not v.passed and "PREDICTED is 50.00" in v.feedback
    assert not G.grade_a3_p_marked(0.5).passed
    assert not G.grade_a3_atomic(3.0, lambda rtt, seed: (0, 3.0)).passed


def test_a3_a_typed_in_atomic_rate_fails_the_hidden_variant() -> None:
    """The atomic rate is 0 at every RTT and seed, so it is checked with the sweeps that ran meanwhile, which
    differ from run to run: typed-in numbers fail, the run's own pass."""
    runs = {(rtt, seed): a3._run("atomic", rtt, seed) for rtt, seed in ((5.0, 0), *G.A3_VARIANTS)}
    assert {r[0] for r in runs.values()} == {0.0} and len({r[3] for r in runs.values()}) == len(runs)
    sweeps = runs[(5.0, 0)][3]
    typed = G.grade_a3_atomic(0.0, lambda rtt, seed: (sweeps, 0.0))
    assert not typed.passed and "hidden check" in typed.feedback and "sweep_runs" in typed.feedback
    assert not G.grade_a3_atomic(0.0, None).passed

    def computed(rtt_ms: float, seed: int) -> tuple[int, float]:
        measured, _, _, n = a3._run("atomic", rtt_ms, seed)
        return n, measured

    assert G.grade_a3_atomic(0, computed).passed


def test_a3_a_typed_in_p_marked_fails_the_hidden_variant() -> None:
    """The right P_MARKED for the notebook's own run, typed in (measure returns it whatever it is asked):
    the hidden variant catches it; computed from measure's own run, it passes."""
    _, marked, finishes = a3._timed("split")
    right = marked / finishes

    def typed_in(rtt_ms: float, seed: int) -> tuple[float, float, float]:
        return right, model(rtt_ms, 30, right), 0.0

    v = G.grade_a3_p_marked(right, measure=typed_in)
    assert not v.passed and "a hidden check" in v.feedback

    def computed(rtt_ms: float, seed: int) -> tuple[float, float, float]:
        _, m, f = a3._timed("split", rtt_ms, seed)
        return m / f, 0.0, 0.0

    assert G.grade_a3_p_marked(right, measure=computed).passed


def test_wrong_answer_in_a_notebook() -> None:
    nb = with_answer("a1-double-placement", "a1_schedule_answer", 'def schedule_for(alone):\n    return "v1:S1"\n')
    report = G.grade_notebook(nb, name="a1.ipynb")
    cells = {c.grade_id: c for c in report.cells}
    assert report.score == 2  # the other two answers are the solution's
    assert not cells["a1_schedule"].passed and "too early" in cells["a1_schedule"].feedback


def test_answer_cell_that_raises_is_reported() -> None:
    nb = with_answer("a1-double-placement", "a1_gap_answer", "GAP = (DEL, SREM)\n")
    report = G.grade_notebook(nb, name="a1.ipynb")
    gap = next(c for c in report.cells if c.grade_id == "a1_gap")
    assert not gap.passed and "NameError" in gap.feedback
    assert any(e.grade_id == "a1_gap_answer" for e in report.errors)


def test_check_raises_with_the_feedback(tmp_path: Path) -> None:
    assert "Right" in G.check("a1_gap", {"gap_of": gap_of})
    with pytest.raises(AssertionError, match="closes earlier than LREM"):
        G.check("a1_gap", {"gap_of": pair("DEL 1:lock", "LREM active -1 1")})
    with pytest.raises(AssertionError, match="not defined"):
        G.check("a1_gap", {})
    # a cell graded against the key reads it from the folder named (here one without the notebook)
    right = {"TWO_WORKERS_SPLIT_SAFE": key("a2-repair-finish")["TWO_WORKERS_SPLIT_SAFE"]}
    assert "Right" in G.check("a2_two_workers", right)
    with pytest.raises(AssertionError, match="answer key"):
        G.check("a2_two_workers", right, key=tmp_path)


def test_grading_is_deterministic() -> None:
    a = G.grade_notebook(NOTEBOOKS["a3-rate-vs-rtt"]).to_dict()
    a3._run.cache_clear()  # recompute the timed runs: same seed, same numbers
    b = G.grade_notebook(NOTEBOOKS["a3-rate-vs-rtt"]).to_dict()
    a.pop("elapsed_s"), b.pop("elapsed_s")
    assert a == b


def test_grading_needs_no_nbgrader() -> None:
    G.grade_notebook(NOTEBOOKS["a1-double-placement"])
    assert "nbgrader" not in sys.modules
    teaching = Path(G.__file__).parent
    for module in sorted(teaching.rglob("*.py")):
        assert "import nbgrader" not in module.read_text(), module
    # the grader's own checks run before nbformat's schema, and name the field
    G.validate_notebook(G.read_notebook(NOTEBOOKS["a1-double-placement"]))
    with pytest.raises(G.GradingError, match=r"cells\[0\]\.source: expected text or a list of text"):
        G.validate_notebook({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"source": 5}]})


def test_not_an_assignment(tmp_path: Path) -> None:
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with pytest.raises(G.GradingError, match="not an emqlab assignment"):
        G.grade_notebook(p)
    p.write_text("{")
    with pytest.raises(G.GradingError, match="not a notebook"):
        G.grade_notebook(p)


# -- the CLI -----------------------------------------------------------------------------------------------


def test_cli_grade_solution_and_json() -> None:
    nb = str(NOTEBOOKS["a1-double-placement"])
    res = CliRunner().invoke(main, ["grade", nb])
    assert res.exit_code == 0, res.output
    assert "score 5/5" in res.output
    res = CliRunner().invoke(main, ["grade", nb, "--json"])
    data = json.loads(res.output)
    assert data["score"] == data["max_score"] == 5
    assert {c["grade_id"] for c in data["cells"]} == {"a1_schedule", "a1_gap", "a1_atomic"}


def test_cli_student_file_and_directory(tmp_path: Path) -> None:
    out = tmp_path / "one.ipynb"
    res = CliRunner().invoke(main, ["student", str(NOTEBOOKS["a2-repair-finish"]), str(out)])
    assert res.exit_code == 0, res.output
    assert G.BEGIN_SOLUTION not in out.read_text()
    res = CliRunner().invoke(main, ["student", str(SOURCES), str(tmp_path / "release")])
    assert res.exit_code == 0, res.output
    made = sorted(p.name for p in (tmp_path / "release").glob("*.ipynb"))
    assert made == sorted(p.name for p in NOTEBOOKS.values())
    res = CliRunner().invoke(main, ["grade", str(tmp_path / "release" / "a2-repair-finish.ipynb")])
    assert res.exit_code == G.EXIT_BELOW_FULL and "score 0/7" in res.output
    assert "still has the stub" in res.output


def test_cli_refuses_to_overwrite_the_sources(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["student", str(SOURCES), str(SOURCES)])
    assert res.exit_code == 2 and "would overwrite" in res.output
