"""The same answers from both Lua runtimes (issue 29): emqlab under Pyodide in Node, its Lua the WebAssembly
Lua 5.1 of npm's ``wasmoon-lua5.1`` (:mod:`emqlab.scripting.wasmlua`), against emqlab under CPython with lupa.

One Pyodide run (``scripts/pyodide/``: the harness installs the pinned npm packages and PyPI's files into a
cache outside the checkout, then runs ``scripts/pyodide/differential.py``) computes every answer; this process
computes them with the same file. Compared: the claims of each exploration of
:data:`differential.EXPLORATIONS` (interleaving counts, anomaly kinds and counts, minimal preemptions, witness
schedules and their explanations), and what the host makes of each script of :data:`differential.SCRIPTS`
(compile error, runtime error with its line, the instruction budget, binary strings both ways …).

Needs ``node`` and ``npm`` (skipped without them, failed in CI) and, the first time, npm's registry and PyPI.
With ``EMQLAB_PYODIDE_EVERY=1`` the explorations are every shipped scenario in every mode (long under
Pyodide, so not in CI); Python actors run there by replay (:mod:`emqlab.engine.pysync`: Pyodide
has no greenlet), which ``tests/test_pyreplay.py`` compares with greenlet on CPython.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

HARNESS = Path(__file__).resolve().parents[1] / "scripts" / "pyodide"
CASES = runpy.run_path(str(HARNESS / "differential.py"))
EVERY = os.environ.get("EMQLAB_PYODIDE_EVERY") == "1"
EXPLORATIONS = [CASES["explore_case"](*c) for c in (CASES["every"]() if EVERY else CASES["EXPLORATIONS"])]
SCRIPTS = list(CASES["SCRIPTS"])


@pytest.fixture(scope="module")
def under_pyodide() -> dict[str, Any]:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            require(tool, "Node.js runs Pyodide here (Debian's nodejs and npm packages)")
    sys.path.insert(0, str(HARNESS))
    try:
        import harness  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(HARNESS))
    try:
        harness.prepare()
    except (subprocess.CalledProcessError, OSError) as e:
        require("the Pyodide harness's npm packages and PyPI files", f"installing them failed ({e})")
    # (every case under Pyodide takes many times the CI cases' time: an hour's limit, not the harness's 15 minutes)
    done = harness.run(HARNESS / "differential.py", *(["--every"] if EVERY else []), timeout=3600 if EVERY else 900)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def under_cpython() -> dict[str, Any]:
    return dict(CASES["answers"](CASES["every"]() if EVERY else CASES["EXPLORATIONS"]))


@pytest.mark.parametrize("case", EXPLORATIONS)
def test_exploration_claims_are_the_same(case: str, under_pyodide: dict[str, Any],
                                         under_cpython: dict[str, Any]) -> None:
    assert under_pyodide["explore"][case] == under_cpython["explore"][case]


@pytest.mark.parametrize("case", SCRIPTS)
def test_host_outcome_is_the_same(case: str, under_pyodide: dict[str, Any], under_cpython: dict[str, Any]) -> None:
    assert under_pyodide["host"][case] == under_cpython["host"][case]


def test_the_cases_show_what_they_are_for(under_cpython: dict[str, Any]) -> None:
    # the comparison means something only if the cases reach what they are about: anomalies found, the line
    # of a runtime error, the budget's error, every byte of a binary string
    claims = under_cpython["explore"]
    assert not any("error" in c for c in claims.values())
    assert claims["stalled-finish split {}"]["interleavings_with"]
    assert not claims["stalled-finish atomic {}"]["interleavings_with"]
    assert claims["rq-two-schedulers split {}"]["interleavings_with"] == {"double-placement": 18}
    host = under_cpython["host"]
    assert "user_script:3:" in host["runtime-error-line"]["error"]
    assert "Lua instructions" in host["instruction-budget"]["error"]
    assert "\\x00\\xa1\\xff\\x80 z" in host["binary-round-trip"]["result"]
    assert host["binary-round-trip"]["sent"] == [[1, "GET", "k"]]
