"""Answers out of reach (issue 27, item 4): a graded notebook that reads every file of the installed package
and submits what it finds scores 0 on every answer.

The cheat (:data:`CHEAT`) walks the folders of ``emqlab`` and of each of its subpackages, the Lua scripts'
folder (the wheel's ``emqlab/lua/``, a checkout's ``lua/``) and the files the installed distribution lists
under ``emqlab``, reads each file as text, and pulls out anything shaped like an answer: pairs of commands (tuple
literals, and two commands on one line), schedule strings, the answer names' ``True``/``False``, Lua
finishes, functions named as an answer and arithmetic over RTT and the interval (the model). It runs as
the answer cells of a submission, in the grader's sandbox, and submits the first candidate of each kind.
Then, in this process, every candidate it found is graded on its own: none passes.

The only answers a candidate could hit by chance are numbers and yes/no; a number is graded with the
function that computes it on hidden variants (a constant function fails them), and the yes/no answer is
in the instructor's key, not in the package (its value appears nowhere in an answer-shaped line).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from emqlab.teaching import grading as G
from emqlab.teaching.assignments import a1, a3

from .answer_key import gap_of, key

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "assignments"

#: the cheat, as a notebook cell: ``loot()`` reads the package and returns the candidates of each kind
CHEAT = r'''
import importlib, importlib.metadata, os, pkgutil, re
import emqlab

ANSWER_NAMES = ("schedule_for", "gap_of", "runs_with_anomaly", "predicted_per_1000", "measure",
                "measure_atomic", "TWO_WORKERS_SPLIT_SAFE", "FINISH_LUA")
ALIASES = ("rtt_ms", "interval_ms", "p_marked", "rtt", "interval", "p", "RTT", "stalled_interval",
           "stalled_interval_ms", "window", "spacing")


def package_files():
    from emqlab.scripting.registry import lua_dir  # the wheel's emqlab/lua (a checkout's lua/)

    roots = {*emqlab.__path__, str(lua_dir())}
    for info in pkgutil.walk_packages(emqlab.__path__, "emqlab.", onerror=lambda name: None):
        if info.ispkg:
            try:
                roots.update(importlib.import_module(info.name).__path__)
            except Exception:
                pass
    files = set()
    for root in roots:
        for folder, _, names in os.walk(root):
            files.update(os.path.join(folder, n) for n in names)
    try:
        dist = importlib.metadata.distribution("emqlab")
        files.update(str(dist.locate_file(f)) for f in (dist.files or []) if str(f).startswith("emqlab"))
    except Exception:
        pass
    return sorted(f for f in files if os.path.isfile(f))


def loot():
    import warnings

    warnings.simplefilter("ignore", SyntaxWarning)  # compiling every arithmetic-looking run of text
    found = {"files": 0, "pairs": [], "schedules": [], "bools": [], "lua": [], "functions": [],
             "models": [], "numbers": []}
    seen = {k: set() for k in found if k != "files"}

    def add(kind, value):
        if value not in seen[kind]:
            seen[kind].add(value)
            found[kind].append(value)

    for path in package_files():
        try:
            with open(path, "rb") as f:
                text = f.read(4_000_000).decode("utf-8", "replace")
        except OSError:
            continue
        found["files"] += 1
        for m in re.finditer(r"\(\s*[\"']([^\"'\n]{1,40})[\"']\s*,\s*[\"']([^\"'\n]{1,40})[\"']\s*\)", text):
            add("pairs", (m.group(1), m.group(2)))
        for m in re.finditer(r"\bv1:[A-Za-z0-9*.]+", text):
            add("schedules", m.group(0).rstrip("."))
        quotes = "(?:" + '"' * 3 + "|" + "'" * 3 + ")"
        for m in re.finditer(quotes + "(.*?)" + quotes, text, re.S):
            if "redis.call" in m.group(1):
                add("lua", m.group(1))
        if path.endswith(".lua"):
            add("lua", text)
        for m in re.finditer(r"^def (\w+)\(.*?(?=^\S)", text, re.M | re.S):
            if m.group(1) in ANSWER_NAMES:
                add("functions", (m.group(1), m.group(0)))
        for line in text.splitlines():
            commands = re.findall(r"\b[A-Z]{3,}\b(?: [a-z0-9<>{}:_.\-]+){0,3}", line)[:12]
            for i, first in enumerate(commands):
                for second in commands[i + 1:]:
                    add("pairs", (first.strip(), second.strip()))
                    add("pairs", (first.split()[0], second.split()[0]))
            for name in ANSWER_NAMES:
                if name in line:
                    for b in re.findall(rf"{name}\s*(?:=|==|is)\s*(True|False)\b", line):
                        add("bools", b == "True")
            for run in re.findall(r"[-\w\s.*/+()×]{5,}", line):
                expr = run.replace("×", "*").strip().removeprefix("return ").strip()
                try:
                    code = compile(expr, "<model>", "eval")
                except SyntaxError:
                    continue
                if code.co_names and set(code.co_names) <= set(ALIASES) and any(
                        n.lower().startswith("rtt") for n in code.co_names):
                    add("models", expr)
            if any(n in line for n in ANSWER_NAMES) or "ATOMIC" in line or "MARKED" in line:
                for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", line):
                    add("numbers", float(x))
    return found


def model_of(expr):
    names = ", ".join(f"{a}={b}" for a, b in (("rtt", "rtt_ms"), ("interval", "interval_ms"), ("p", "p_marked"),
                                              ("RTT", "rtt_ms"), ("stalled_interval", "interval_ms"),
                                              ("stalled_interval_ms", "interval_ms"), ("window", "rtt_ms"),
                                              ("spacing", "interval_ms + rtt_ms")))
    return eval(f"lambda rtt_ms, interval_ms, p_marked: (lambda {names}: {expr})()")
'''

#: each assignment's answer cells in the cheat's submission: the first candidate of each kind
SUBMIT = {
    "a1-double-placement": {
        "a1_schedule_answer": CHEAT + "\nFOUND = loot()\nschedule_for = lambda alone: FOUND['schedules'][0]\n",
        "a1_gap_answer": "gap_of = lambda alone: FOUND['pairs'][0]\n",
        "a1_atomic_answer": "ATOMIC_RUNS_WITH_ANOMALY = int(FOUND['numbers'][0])\n"
                            "runs_with_anomaly = lambda scenario, mode: ATOMIC_RUNS_WITH_ANOMALY\n",
    },
    "a2-repair-finish": {
        "a2_finish_answer": CHEAT + "\nFOUND = loot()\nFINISH_LUA = FOUND['lua'][0]\n",
        "a2_two_workers_answer": "if FOUND['bools']:\n    TWO_WORKERS_SPLIT_SAFE = FOUND['bools'][0]\n",
    },
    "a3-rate-vs-rtt": {
        "a3_model_answer": CHEAT + "\nFOUND = loot()\npredicted_per_1000 = model_of(FOUND['models'][0])\n",
        "a3_measure_answer": "P_MARKED, PREDICTED, MEASURED = (FOUND['numbers'] * 3)[:3]\n"
                             "measure = lambda rtt_ms, seed: (P_MARKED, PREDICTED, MEASURED)\n",
        "a3_atomic_answer": "ATOMIC_MEASURED = FOUND['numbers'][0]\n"
                            "measure_atomic = lambda rtt_ms, seed: (FOUND['numbers'][0], ATOMIC_MEASURED)\n",
    },
}


def cheat_notebook(aid: str) -> dict[str, Any]:
    nb = copy.deepcopy(G.read_notebook(SOURCES / G.ASSIGNMENTS[aid].notebook))
    for c in nb["cells"]:
        if G.grade_id(c) in SUBMIT[aid]:
            c["source"] = SUBMIT[aid][G.grade_id(c)]
    return nb


@pytest.fixture(scope="module")
def found() -> dict[str, Any]:
    """What the cheat finds, read in this process (the same files the sandboxed notebook reads)."""
    ns: dict[str, Any] = {}
    exec(CHEAT, ns)  # noqa: S102 - the test's own cheat
    return {**ns["loot"](), "model_of": ns["model_of"]}


@pytest.mark.parametrize("aid", sorted(SUBMIT))
def test_the_cheat_notebook_scores_zero_through_the_sandbox(aid: str) -> None:
    report = G.grade_notebook(cheat_notebook(aid), name=f"cheat-{aid}.ipynb")
    assert report.score == 0, report.text()
    assert all(not c.passed for c in report.cells)
    # it did run: it read the package (no answer cell raised before submitting)
    refused = [e for e in report.errors if e.grade_id in SUBMIT[aid] and "PermissionError" in e.error]
    assert not refused, refused


def test_the_cheat_reads_the_package(found: dict[str, Any]) -> None:
    """The cheat is not empty-handed: it reads the whole package (the Lua scripts, the scenarios, the
    graders' own modules) and finds hundreds of answer-shaped strings; this is what the next test grades."""
    assert found["files"] > 150
    assert len(found["pairs"]) > 1000 and len(found["schedules"]) > 20 and len(found["lua"]) > 20
    assert ("DEL", "SREM") in found["pairs"]  # the package does document the race, by command name
    assert any("RTT" in m for m in found["models"])  # and the chance of a hit per marked finish
    # what is no longer there: the answer-shaped yes/no and a function named as an answer
    assert found["bools"] == [] and found["functions"] == []


def test_every_candidate_the_cheat_finds_scores_zero(found: dict[str, Any]) -> None:
    # a1: each schedule string and each pair, as the function the grader calls on the hidden variants
    for s in found["schedules"]:
        assert not G.grade_a1_schedule(lambda alone, s=s: s).passed, s
    for pair in found["pairs"]:
        assert not G.grade_a1_gap(lambda alone, pair=pair: pair).passed, pair
    # a1's count and a3's numbers: a constant (any number) cannot match runs that differ
    counts = {a1._explore_counts(*p)[1] for p in G.A1_COUNT_PROBES}
    assert len(counts) > 1
    for n in {int(x) for x in found["numbers"]} | counts:
        assert not G.grade_a1_atomic(n, lambda sc, mode, n=n: n).passed
    right = {v: a3._run("split", *v) for v in G.A3_VARIANTS}
    for v, (measured, marked, finishes, _) in right.items():  # the best constant: one variant's own numbers
        p = marked / finishes
        best = (p, key("a3-rate-vs-rtt")["predicted_per_1000"](v[0], 30, p), measured)
        assert not G.grade_a3_p_marked(p, measure=lambda r, s, b=best: b).passed
        assert not G.grade_a3_measured(*best[::-1], measure=lambda r, s, b=best: b,
                                       key={"predicted_per_1000": key("a3-rate-vs-rtt")["predicted_per_1000"]}).passed
        atomic = a3._run("atomic", *v)
        assert not G.grade_a3_atomic(atomic[0], lambda r, s, a=atomic: (a[3], a[0])).passed
    # a3's model: every arithmetic over the RTT and the interval in the package
    k = {"predicted_per_1000": key("a3-rate-vs-rtt")["predicted_per_1000"]}
    for expr in found["models"]:
        assert not G.grade_a3_model(found["model_of"](expr), key=k).passed, expr
    # a2: every Lua text in the package, as the repaired finish
    for lua in found["lua"]:
        assert not (G.grade_a2_sequential(lua).passed and G.grade_a2_sweep(lua).passed
                    and G.grade_a2_lease(lua).passed), lua[:200]


def test_honest_answers_in_the_cheats_words_still_pass() -> None:
    """The other side: the same graders give full marks to a right answer however it is written."""
    assert G.grade_a1_gap(gap_of).passed
    model = key("a3-rate-vs-rtt")["predicted_per_1000"]
    assert math.isclose(model(5, 30, 1.0), 1000 * 5 / 35)


def test_a_checkout_s_tests_are_out_of_reach() -> None:
    """Run from a checkout (an editable install), a graded notebook could read ``tests/test_grading.py``, whose
    repaired finish passes a2: a fresh user's submission did, and scored 7/7. The checkout's folders other
    than the package and ``lua/`` are now closed to graded code."""
    steal = ("import os, re, emqlab\n"
             "_root = os.path.dirname(os.path.dirname(emqlab.__file__))\n"
             "FINISH_LUA = re.search(r'FIXED = \"\"\"(.*?)\"\"\"', open(_root + '/tests/test_grading.py').read(),"
             " re.S).group(1)\n")
    nb = copy.deepcopy(G.read_notebook(SOURCES / G.ASSIGNMENTS["a2-repair-finish"].notebook))
    for c in nb["cells"]:
        if G.grade_id(c) == "a2_finish_answer":
            c["source"] = steal
    report = G.grade_notebook(nb, name="steal-a2.ipynb")
    finish = [c for c in report.cells if c.grade_id.startswith("a2_") and "two_workers" not in c.grade_id]
    assert finish and not any(c.passed for c in finish), report.text()
    assert any("PermissionError" in e.error and "test_grading.py" in e.error for e in report.errors), report.text()
