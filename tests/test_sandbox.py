"""Grading that cannot be forged: the student's notebook runs in a separate, limited process, only answer
values come back, and every score is computed by the grader. Each attack ends in a correct, low grade with a
clear message, never a crash of the grader.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from emqlab.teaching import grading as G
from emqlab.teaching import sandbox as S
from emqlab.teaching.classroom import exit_code, grade_folder, write_csv
from emqlab.ui.cli import main

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "assignments"
A1 = SOURCES / "a1-double-placement.ipynb"
#: wrong answers for a1's last two questions: a notebook with them scores 0 unless a forgery works
WRONG_GAP = 'def gap_of(alone):\n    return ("GET 1:lock", "LPOS active 1")\n'
#: a right gap_of (a1's second answer), in the words of a student
RIGHT_GAP = ('def gap_of(alone):\n    w1 = [s for s in alone.steps if s.actor == "W1"]\n'
             '    i = [s.op for s in w1].index("DEL")\n'
             '    return tuple(" ".join((s.op, *s.args)) for s in (w1[i], w1[i + 1]))\n')
WRONG_COUNT = "ATOMIC_RUNS_WITH_ANOMALY = 7\n"


def cell(nb: dict[str, Any], gid: str) -> dict[str, Any]:
    return next(c for c in nb["cells"] if G.grade_id(c) == gid)


def a1(schedule_cell: str, *, gap: str = WRONG_GAP, count: str = WRONG_COUNT) -> dict[str, Any]:
    nb = copy.deepcopy(G.read_notebook(A1))
    cell(nb, "a1_schedule_answer")["source"] = schedule_cell
    cell(nb, "a1_gap_answer")["source"] = gap
    cell(nb, "a1_atomic_answer")["source"] = count
    return nb


def grade(nb: dict[str, Any], **limits: Any) -> G.GradeReport:
    return G.grade_notebook(nb, name="submission.ipynb", limits=S.Limits(**limits) if limits else None)


def feedback(report: G.GradeReport) -> str:
    return "\n".join(c.feedback for c in report.cells) + "\n" + "\n".join(report.notes)


def isolated(code: str, names: list[str], **limits: Any) -> S.IsolatedRun:
    return S.run_isolated([S.CellToRun(1, "probe", code)], names, {}, S.Limits(**limits))


# -- the two forgeries of the issue ----------------------------------------------------------------------------

PATCH_GRADERS = '''
import emqlab.grading as G
always = lambda **kw: G.Verdict(True, "forged")
for a in G.ASSIGNMENTS.values():
    for c in a.cells:
        c.grader = always
G.grade_a1_schedule = G.grade_a1_gap = G.grade_a1_atomic = always
G.grade_notebook = lambda *a, **k: None
G._grade_cell = lambda cell, run: G.Verdict(True, "forged")
G.probe_arguments = lambda name, key: (None,)
def schedule_for(alone):
    return "v1:S1"
'''


def test_monkeypatching_the_graders_changes_nothing() -> None:
    before = [c.grader for a in G.ASSIGNMENTS.values() for c in a.cells]
    report = grade(a1(PATCH_GRADERS))
    assert report.score == 0, report.text()
    assert "forged" not in feedback(report)
    assert "too early" in cell_feedback(report, "a1_schedule")  # graded on its merits
    # the grader's own objects were never reachable
    assert [c.grader for a in G.ASSIGNMENTS.values() for c in a.cells] == before
    assert G.grade_notebook.__module__ == "emqlab.teaching.grade"


HARD_CODED = 'def schedule_for(alone):\n    return "v1:W1*9.S1"\n'


def test_a_hard_coded_schedule_fails_a_hidden_variant_through_the_sandbox() -> None:
    """schedule_for crosses back as its values at the grader's probes (each a typed history the child builds
    from a case's name); the grader replays each value on its own copy of that case."""
    report = grade(a1(HARD_CODED, gap=RIGHT_GAP))
    fb = cell_feedback(report, "a1_schedule")
    assert report.score == 1 and "a hidden variant" in fb and "copied" in fb, report.text()
    solution = "".join(cell(G.read_notebook(A1), "a1_schedule_answer")["source"])
    report = grade(a1(solution, gap=RIGHT_GAP))
    assert report.score == 4, report.text()  # the schedule and the gap; the count is still wrong


def cell_feedback(report: G.GradeReport, gid: str) -> str:
    return next(c.feedback for c in report.cells if c.grade_id == gid)


FAKE_REPORT = '''
import json, os, sys
fake = {"notebook": "x", "assignment": "a1-double-placement", "title": "forged", "score": 5, "max_score": 5,
        "cells": [], "errors": [], "elapsed_s": 0.1}
print(json.dumps(fake))
sys.__stdout__.write(json.dumps(fake) + "\\n"); sys.__stdout__.flush()
os.write(1, (json.dumps(fake) + "\\n").encode())
os._exit(0)
'''


def test_fake_json_report_and_exit_through_the_real_command(tmp_path: Path) -> None:
    path = tmp_path / "a1.ipynb"
    G.write_notebook(a1(FAKE_REPORT), path)
    emqlab = Path(sys.executable).parent / "emqlab"
    proc = subprocess.run([str(emqlab), "grade", str(path), "--json"], capture_output=True, text=True,
                          timeout=300, check=False)
    data = json.loads(proc.stdout)  # exactly one JSON document: the grader's
    assert data["title"] != "forged" and data["score"] == 0
    assert proc.returncode == G.EXIT_BELOW_FULL == 1
    msg = data["cells"][0]["feedback"]
    assert "ended (exit status 0)" in msg and "before its answers were collected" in msg
    assert "code cell 3 ('a1_schedule_answer')" in msg


FAKE_CHANNEL = '''
import os
forged = b'{"answers": {"v": 1, "values": {"SCORE": {"int": "5"}}, "errors": []}}\\n'
for fd in range(3, 64):
    try:
        os.write(fd, forged)
    except OSError:
        pass
os._exit(0)
'''


def test_writing_to_the_grader_channel_only_loses_the_answers() -> None:
    report = grade(a1(FAKE_CHANNEL))
    assert report.score == 0
    assert "wrote to the grader's answer channel" in feedback(report)


# -- the notebook's own cells ---------------------------------------------------------------------------------

def test_edited_locked_and_test_cells_are_ignored_and_noted() -> None:
    nb = a1("# YOUR CODE HERE\nraise NotImplementedError()")
    cell(nb, "a1_setup")["source"] = ("import emqlab.grading as G\n"
                                      "G.grade_a1_gap = lambda gap_of: G.Verdict(True, '')\n"
                                      "schedule_for = lambda alone: 'v1:S1'\n")
    cell(nb, "a1_schedule")["source"] = 'schedule_for = lambda alone: "v1:W1*9.S1"\n'  # a test cell that would answer
    report = grade(nb)
    assert report.score == 0
    text = feedback(report)
    assert "The locked cell 'a1_setup' (code cell 1) was edited; the grader ran the original" in text
    assert "The test cell 'a1_schedule' (code cell 4) was edited; test cells never run" in text
    assert "schedule_for is not defined" in cell_feedback(report, "a1_schedule")


def test_a_deleted_locked_cell_is_put_back() -> None:
    nb = G.read_notebook(A1)
    nb["cells"] = [c for c in nb["cells"] if G.grade_id(c) != "a1_setup"]
    report = grade(nb)
    assert report.score == report.max_score, report.text()  # the answers need the setup cell's names
    assert any("'a1_setup' was missing" in n for n in report.notes)


def test_reading_the_hidden_tests_is_refused() -> None:
    steal = (f"import json\nnb = json.load(open({str(A1)!r}))\n"
             "src = [''.join(c['source']) for c in nb['cells'] if c['metadata']['nbgrader']['grade_id'] == "
             "'a1_schedule_answer'][0]\nexec(src)\n")
    report = grade(a1(steal))
    assert report.score == 0
    err = next(e for e in report.errors if e.grade_id == "a1_schedule_answer")
    assert err.error.startswith("PermissionError") and "reading" in err.error
    assert "raised PermissionError" in cell_feedback(report, "a1_schedule")
    run = S.run_isolated([S.CellToRun(1, "probe", f"import os\nL = sorted(os.listdir({str(SOURCES)!r}))")], ["L"],
                         {}, deny_dirs=[str(SOURCES)])
    assert "L" not in run.answers and "PermissionError" in run.errors[0].error


@pytest.mark.parametrize("how", ["dir_fd", "listdir_fd", "home_fd"])
def test_the_hidden_tests_cannot_be_reached_through_a_directory_descriptor(how: str) -> None:
    """The open event names the path, not the directory a relative path is opened from (``dir_fd``): a
    descriptor of the key's parent (or of the notebook's own folder) would let a relative name reach the
    hidden tests unchecked, so no directory is opened at all, and none is listed by descriptor."""
    name = A1.name
    parent, folder = str(SOURCES.parent), SOURCES.name
    steal = {
        "dir_fd": f"import os\np = os.open({parent!r}, os.O_RDONLY)\nk = os.open({folder!r}, os.O_RDONLY, dir_fd=p)\n"
                  f"L = os.read(os.open({name!r}, os.O_RDONLY, dir_fd=k), 100).decode()\n",
        "listdir_fd": f"import os\nfd = os.open({parent!r}, os.O_RDONLY | os.O_DIRECTORY)\n"
                      f"L = os.listdir(os.open({folder!r}, os.O_RDONLY, dir_fd=fd))\n",
        "home_fd": f"import os\nh = os.open('.', os.O_RDONLY)\nos.chdir('/')\n"
                   f"L = os.read(os.open({os.path.relpath(A1, '/')!r}, os.O_RDONLY, dir_fd=h), 100).decode()\n",
    }[how]
    run = S.run_isolated([S.CellToRun(1, "probe", steal)], ["L"], {}, deny_dirs=[str(SOURCES)])
    assert "L" not in run.answers, run.answers
    assert "PermissionError" in run.errors[0].error and "directory" in run.errors[0].error, run.errors


# -- resources ---------------------------------------------------------------------------------------------------

def test_an_infinite_loop_is_stopped_per_cell() -> None:
    report = grade(a1("while True:\n    pass\n", gap=RIGHT_GAP), cell_timeout_s=2)
    assert report.score == 1  # the other answers still count
    assert "used more than 2 s of CPU time and was stopped" in cell_feedback(report, "a1_schedule")


def test_a_loop_that_ignores_the_alarm_is_stopped_by_the_grader() -> None:
    loop = ("import signal\nfor s in (signal.SIGALRM, signal.SIGPROF):\n    signal.signal(s, signal.SIG_IGN)\n"
            "while True:\n    pass\n")
    report = grade(a1(loop, gap=RIGHT_GAP), timeout_s=6, cell_timeout_s=1)
    assert report.score == 0
    msg = cell_feedback(report, "a1_gap")
    assert "stopped after 6 s while running code cell 3 ('a1_schedule_answer')" in msg
    assert "Look for a loop that never ends" in msg


FORK_ROUTES = '''
import os
R = []
def attempt(f):
    try:
        f()
        R.append("ran")
    except BaseException as e:
        R.append(type(e).__name__)
attempt(lambda: os.fork())
attempt(lambda: __import__("subprocess").run(["true"]))
attempt(lambda: os.system("true"))
attempt(lambda: __import__("multiprocessing").Process(target=print).start())
attempt(lambda: __import__("_posixsubprocess"))
attempt(lambda: __import__("pty").fork())
attempt(lambda: __import__("ctypes"))
attempt(lambda: os.posix_spawn("/bin/true", ["true"], {}))
attempt(lambda: os.kill(os.getppid(), 9))
'''


def test_every_way_to_start_a_process_is_refused() -> None:
    run = isolated(FORK_ROUTES, ["R"])
    assert run.failure is None, run.failure
    assert run.answers["R"] == ["PermissionError"] * 9


def test_a_fork_bomb_gets_a_low_grade() -> None:
    bomb = "import os\nwhile True:\n    os.fork()\n"
    report = grade(a1(bomb))
    assert report.score == 0
    assert "PermissionError: starting or signalling processes (os.fork)" in cell_feedback(report, "a1_schedule")


def test_the_process_count_is_limited() -> None:
    """The backstop under the audit hook: the child's user may start only a few more processes."""
    run = isolated("import resource\nN = list(resource.getrlimit(resource.RLIMIT_NPROC))", ["N"])
    soft, hard = run.answers["N"]
    import resource

    assert soft == hard != resource.RLIM_INFINITY


def test_a_2gb_allocation_fails_inside_the_notebook() -> None:
    report = grade(a1("x = bytearray(2 * 1024 ** 3)\nschedule_for = lambda alone: 'v1:W1*9.S1'\n"), memory_mb=1024)
    assert report.score == 0
    assert "raised MemoryError" in cell_feedback(report, "a1_schedule")


def test_no_network_and_no_writes_outside_the_folder(tmp_path: Path) -> None:
    code = (f"import socket\nR = []\n"
            f"try:\n    socket.create_connection(('127.0.0.1', 6379), timeout=1)\n    R.append('ran')\n"
            f"except Exception as e:\n    R.append(type(e).__name__)\n"
            f"try:\n    open({str(tmp_path / 'x.txt')!r}, 'w').write('x')\n    R.append('ran')\n"
            f"except Exception as e:\n    R.append(type(e).__name__)\n"
            f"open('mine.txt', 'w').write('ok')\nR.append(open('mine.txt').read())\n")
    run = isolated(code, ["R"])
    assert run.answers["R"] == ["PermissionError", "PermissionError", "ok"]
    assert not (tmp_path / "x.txt").exists()


def test_only_plain_data_crosses_back() -> None:
    code = ("class Sneaky(str):\n    pass\n"
            "A = Sneaky('v1:S1')\nB = (1, 2.5, 'x', None, True, [1])\nC = object()\nD = lambda: 1\n")
    run = isolated(code, ["A", "B", "C", "D"])
    assert type(run.answers["A"]) is str and run.answers["A"] == "v1:S1"
    assert run.answers["B"] == (1, 2.5, "x", None, True, [1])
    assert isinstance(run.answers["C"], S.Opaque) and type(run.answers["C"]).__name__ == "object"
    assert isinstance(run.answers["D"], S.Opaque)
    with pytest.raises(S.TamperedError):
        S.decode({"eval": "__import__('os')"})


# -- exit codes and the class CSV ---------------------------------------------------------------------------------

def test_grade_exit_codes(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["grade", str(A1)])
    assert res.exit_code == G.EXIT_FULL_MARKS == 0, res.output
    student = tmp_path / "a1.ipynb"
    G.write_notebook(G.student_version(G.read_notebook(A1)), student)
    res = CliRunner().invoke(main, ["grade", str(student)])
    assert res.exit_code == G.EXIT_BELOW_FULL == 1 and "score 0/5" in res.output
    assert "Did you save the notebook?" in res.output
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    res = CliRunner().invoke(main, ["grade", str(bad)])
    assert res.exit_code == G.EXIT_CANNOT_GRADE == 2


def test_class_csv(tmp_path: Path) -> None:
    for who, nb in (("ada", G.read_notebook(A1)), ("bob", G.student_version(G.read_notebook(A1)))):
        (tmp_path / who).mkdir()
        G.write_notebook(nb, tmp_path / who / "a1-double-placement.ipynb")
    (tmp_path / "ada" / ".ipynb_checkpoints").mkdir()
    G.write_notebook(G.read_notebook(A1), tmp_path / "ada" / ".ipynb_checkpoints" / "a1-checkpoint.ipynb")
    rows = grade_folder(tmp_path)
    assert [(r.student, r.score, r.max_score) for r in rows] == [("ada", 5, 5), ("bob", 0, 5)]
    assert exit_code(rows) == G.EXIT_BELOW_FULL
    out = io.StringIO()
    write_csv(rows, out)
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert table[0]["student"] == "ada" and table[0]["a1_schedule"] == "3" and table[1]["score"] == "0"
    (tmp_path / "carl").mkdir()
    (tmp_path / "carl" / "a1.ipynb").write_text("{")
    csv_path = tmp_path / "grades.csv"
    res = CliRunner().invoke(main, ["grade", str(tmp_path), "--csv", str(csv_path)])
    assert res.exit_code == G.EXIT_CANNOT_GRADE, res.output
    table = list(csv.DictReader(csv_path.open()))
    assert [r["student"] for r in table] == ["ada", "bob", "carl"]
    assert table[2]["status"] == "error" and "not a notebook" in table[2]["message"]
    # two at a time, the same rows in the same order, and one file per student to hand back, beside the CSV
    # (grades.csv → grades-feedback/), each of the student's notebooks in it in submission order
    (tmp_path / "ada" / "b-notes.ipynb").write_text("{")
    res = CliRunner().invoke(main, ["grade", str(tmp_path), "--csv", str(csv_path), "--jobs", "2"])
    assert [r["student"] for r in csv.DictReader(csv_path.open())] == ["ada", "ada", "bob", "carl"]
    feedback = tmp_path / "grades-feedback"
    assert sorted(p.name for p in feedback.iterdir()) == ["ada.txt", "bob.txt", "carl.txt"]
    ada = (feedback / "ada.txt").read_text()
    assert "score 5/5" in ada and "b-notes.ipynb: could not be graded" in ada
    assert ada.index("score 5/5") < ada.index("b-notes.ipynb")
    assert "checkpoint" not in ada
    assert "score 0/5" in (feedback / "bob.txt").read_text()
    assert "could not be graded" in (feedback / "carl.txt").read_text()
    assert "feedback: 3 files in" in res.output
    # --feedback DIR puts them elsewhere; CSV on stdout and no --feedback writes none
    res = CliRunner().invoke(main, ["grade", str(tmp_path / "carl"), "--feedback", str(tmp_path / "back")])
    assert (tmp_path / "back" / "a1.txt").read_text().startswith("a1.ipynb: could not be graded")


def test_the_grader_never_runs_as_the_notebook() -> None:
    """The child is a different process: its pid is not the grader's."""
    run = isolated("import os\nP = os.getpid()", ["P"])
    assert run.answers["P"] != os.getpid()


def test_the_graders_process_cannot_be_read() -> None:
    code = (f"R = []\nfor path in ['/proc/{os.getpid()}/environ', '/proc/{os.getpid()}/mem', '/proc/self/status']:\n"
            "    try:\n        open(path, 'rb').read(10)\n        R.append('ok')\n"
            "    except Exception as e:\n        R.append(type(e).__name__)\n")
    run = isolated(code, ["R"])
    assert run.answers["R"] == ["PermissionError", "PermissionError", "ok"]


def test_a_linked_submission_and_a_formula_name_in_the_class_csv(tmp_path: Path) -> None:
    """A symbolic link in the class folder (to the solution, say) is not graded as the student's work, and a
    student's folder name reaches the CSV as text on one line, never a spreadsheet formula."""
    (tmp_path / "mallory").mkdir()
    (tmp_path / "mallory" / "a1-double-placement.ipynb").symlink_to(A1)
    (tmp_path / "eve").symlink_to(SOURCES, target_is_directory=True)
    formula = '=HYPERLINK("x","grades")'
    (tmp_path / formula).mkdir()
    G.write_notebook(G.student_version(G.read_notebook(A1)), tmp_path / formula / "a1.ipynb")
    rows = grade_folder(tmp_path)
    linked = [r for r in rows if r.student in ("mallory", "eve")]
    assert linked and all(r.status == "error" and "symbolic link" in r.message and r.score == 0 for r in linked)
    out = io.StringIO()
    write_csv(rows, out)
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert "'" + formula in [r["student"] for r in table]
    assert not any(r["student"].startswith("=") for r in table)
