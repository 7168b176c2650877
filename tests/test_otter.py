"""The otter-grader export (issue 13 item 8): each assignment becomes a student notebook with otter's check
cells and one OK-format test file per graded cell, whose doctest runs emqlab's own grader: it passes on the
solution's answers and fails, with the feedback, on a wrong one."""

from __future__ import annotations

import doctest
from pathlib import Path

import nbformat
import pytest

from emqlab.teaching import grading
from emqlab.teaching.otter import check, export


def _run_case(code: str, globs: dict[str, object]) -> tuple[int, str]:
    import io

    test = doctest.DocTestParser().get_doctest(code, dict(globs), "otter", "otter", 0)
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=out.write)
    return runner.failures, out.getvalue()


@pytest.mark.parametrize("aid", sorted(grading.ASSIGNMENTS))
def test_export_layout(aid: str, tmp_path: Path) -> None:
    a = grading.ASSIGNMENTS[aid]
    files = export(aid, tmp_path)
    nb = nbformat.read(str(tmp_path / a.notebook), as_version=4)
    nbformat.validate(nb)
    sources = [c.source for c in nb.cells]
    assert 'grader = otter.Notebook("tests")' in sources[0]
    for c in a.cells:
        assert f'grader.check("{c.grade_id}")' in sources
        ns: dict[str, object] = {}
        exec((tmp_path / "tests" / f"{c.grade_id}.py").read_text(), ns)
        test = ns["test"]
        assert ns["OK_FORMAT"] is True and test["name"] == c.grade_id and test["points"] == c.points  # type: ignore[index]
        assert test["suites"][0]["type"] == "doctest"  # type: ignore[index]
    assert len(files) == 1 + len(a.cells)
    # the student version hands out no solution
    assert not any("BEGIN SOLUTION" in s for s in sources)


def _count(scenario: object, mode: str) -> int:
    from emqlab.backend.connect import connect
    from emqlab.explore import explore

    return sum(explore(scenario, mode, conn=connect()).runs_with.values())  # type: ignore[arg-type]


def _schedule_for(alone: object) -> str:
    step = next(s for s in alone.steps if s.actor == "W1" and s.op == "DEL")  # type: ignore[attr-defined]
    return f"v1:W1*{step.actor_step}.S1"


def _case(tmp_path: Path, gid: str) -> str:
    ns: dict[str, object] = {}
    exec((tmp_path / "tests" / f"{gid}.py").read_text(), ns)
    return str(ns["test"]["suites"][0]["cases"][0]["code"])  # type: ignore[index]


def test_a1_checks_pass_on_a_right_answer_and_fail_on_a_wrong_one(tmp_path: Path) -> None:
    export("a1-double-placement", tmp_path)
    code = _case(tmp_path, "a1_atomic")
    assert "runs_with_anomaly" in code  # the function is checked too, not only the number
    failures, _ = _run_case(code, {"ATOMIC_RUNS_WITH_ANOMALY": 0, "runs_with_anomaly": _count})
    assert failures == 0
    failures, out = _run_case(code, {"ATOMIC_RUNS_WITH_ANOMALY": 3, "runs_with_anomaly": _count})
    assert failures == 1 and "False" in out
    # a copied number: right for the assignment's atomic finish, wrong on a hidden variant
    copied = {"ATOMIC_RUNS_WITH_ANOMALY": 0, "runs_with_anomaly": lambda sc, mode: 0 if mode == "atomic" else 1}
    failures, out = _run_case(code, copied)
    assert failures == 1 and "hidden variant" in out
    assert check("a1-double-placement", "a1_atomic", 0, _count) is True
    code = _case(tmp_path, "a1_schedule")
    assert _run_case(code, {"schedule_for": _schedule_for})[0] == 0
    failures, out = _run_case(code, {"schedule_for": lambda alone: "v1:W1*9.S1"})
    assert failures == 1 and "hidden variant" in out
