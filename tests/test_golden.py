"""Golden outputs: what emqlab says, recorded once and held fixed while its code is reshaped.

Every shipped scenario in every mode it lists is explored exhaustively on fakeredis, and its
``Report.to_dict()`` (without the wall-clock fields), the annotated history of each witness and the
file's ``expect:`` are checked here; so are seeded random and PCT samples, one replay, the CLI text of
``simulate``/``replay``/``scenarios``/``check`` on a few cases and the rows of a seeded RTT sweep. The
recorded values live in ``tests/golden/``; ``EMQLAB_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` writes
them anew (only when a change of output is meant: the diff of the JSON files is then the review).

Each case is explored once and also checked against the scenario file's ``expect:``: the
anomaly kinds found equal the file's, and the return codes it names appear among the actors' results.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emqlab.backend.connect import connect
from emqlab.engine.scenario import load, shipped_names
from emqlab.explore import Report, explore
from emqlab.timing import TimingConfig, sweep_rtt
from emqlab.timing.model import MODES as TIMED_MODES

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[1]
UPDATE = os.environ.get("EMQLAB_UPDATE_GOLDEN") == "1"

NAMES = shipped_names()
CASES = [(name, mode) for name in NAMES for mode in load(name).modes]

#: seeded samples and a replay: (scenario, mode, strategy, options)
SAMPLES = [("two-workers", "split", "random", {"runs": 40, "seed": 7}),
           ("cancel-active", "split", "pct", {"runs": 30, "seed": 3, "depth": 2}),
           ("stalled-finish", "split", "random", {"runs": 25, "seed": 0}),
           ("stalled-finish", "split", "replay", {"schedule": "v1:W1*9.S1.W1*8"}),
           ("stalled-finish", "atomic", "exhaustive", {"reduce": False})]

#: CLI invocations whose whole text is held (after :func:`_stable`)
COMMANDS = [["simulate", "--split"],
            ["simulate", "--atomic"],
            ["simulate", "--split", "-s", "two-workers", "--jobs", "1"],
            ["simulate", "--split", "-s", "cancel-active", "--strategy", "random", "--runs", "30", "--seed", "2"],
            ["simulate", "--finish-then-fetch", "-s", "lease-lapse", "--json", "--jobs", "1"],
            ["replay", "v1:W1*9.S1.W1*8", "--split"],
            ["replay", "v1:W1*4.L1.S1", "--split", "-s", "lease-lapse"],
            ["scenarios"],
            ["scenarios", "--json"],
            ["check", "--lua", "lua/variants/no-active-check", "-s", "cancel-active", "-s", "stalled-finish"]]

#: fields that measure the machine, not the system: left out of every golden
_WALL_CLOCK = ("elapsed_s", "runs_per_second")


def golden(name: str, value: Any) -> None:
    """Compare ``value`` with the golden file ``name`` (write it with ``EMQLAB_UPDATE_GOLDEN=1``)."""
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True, default=str) + "\n"
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path}: run EMQLAB_UPDATE_GOLDEN=1 pytest {__file__}"
    want = path.read_text() if isinstance(value, str) else json.loads(path.read_text())
    got = value if isinstance(value, str) else json.loads(json.dumps(value, sort_keys=True, default=str))
    assert got == want, f"{name} differs from its golden file"


def _stable(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k not in _WALL_CLOCK}
    params = dict(out.get("params", {}))
    params.pop("divided", None)  # when a pool starts depends on the wall clock (explore.pool's warm-up)
    out["params"] = params
    return out


def report_golden(rep: Report) -> dict[str, Any]:
    """A report as the golden file holds it: its JSON minus wall-clock fields, plus each witness's text."""
    return {"report": _stable(rep.to_dict()),
            "annotated": {k: h.annotated() for k, h in sorted(rep.witnesses.items())}}


def _explored(name: str, mode: str) -> Report:
    return explore(load(name), mode, conn=connect())


def _codes_seen(rep: Report, actor: str) -> set[int]:
    return {o.code for o in rep.codes.get(actor, {}) if o.code is not None}


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_every_scenario_and_mode_keeps_its_report(name: str, mode: str) -> None:
    rep = _explored(name, mode)
    expected = load(name).expect[mode]
    assert rep.complete and rep.explored > 0
    assert rep.anomaly_kinds == sorted(expected.anomalies), (
        f"{name} ({mode}): found {rep.anomaly_kinds}, expect says {sorted(expected.anomalies)}; "
        f"witnesses: {({k: h.schedule for k, h in rep.witnesses.items()})}")
    for actor, codes in expected.codes.items():
        missing = set(codes) - _codes_seen(rep, actor)
        assert not missing, f"{name} ({mode}): {actor} never returned {sorted(missing)}; results: {rep.results[actor]}"
    for kind, h in rep.witnesses.items():
        assert kind in h.kinds, f"{name} ({mode}): the witness for {kind} does not show it"
    golden(f"reports/{name}.{mode}.json", report_golden(rep))


@pytest.mark.parametrize(("name", "mode", "strategy", "opts"), SAMPLES,
                         ids=[f"{n}-{m}-{s}-{i}" for i, (n, m, s, _) in enumerate(SAMPLES)])
def test_samples_and_replays_keep_their_report(name: str, mode: str, strategy: str, opts: dict[str, Any]) -> None:
    rep = explore(load(name), mode, strategy=strategy, conn=connect(), **opts)
    idx = SAMPLES.index((name, mode, strategy, opts))
    golden(f"samples/{idx}-{name}.{mode}.{strategy}.json", report_golden(rep))


def _cli_text(text: str) -> str:
    """CLI text without the figures that measure the machine (runs per second, seconds elapsed), and with
    each run of spaces held as one (the alignment of a table depends on the width of those figures)."""
    text = re.sub(r"(runs per second\s+)[\d,.]+", r"\1<n>", text)
    text = re.sub(r'("(?:elapsed_s|runs_per_second)": )[\d.e+-]+', r"\1<n>", text)
    text = re.sub(r"\b\d+(?:\.\d+)? ?(s|ms) (elapsed|wall)\b", r"<t> \2", text)
    text = re.sub(r'"divided": \{[^{}]*\}', '"divided": <pool>', text)
    # a table's columns are as wide as its widest figure, runs per second included: spaces are held as one
    return "\n".join(re.sub(r" {2,}", " ", line).rstrip() for line in text.split("\n"))


@pytest.mark.parametrize("args", COMMANDS, ids=["-".join(a)[:60] for a in COMMANDS])
def test_cli_text_is_kept(args: list[str]) -> None:
    # the console script's own code in a process of its own: its signal handlers and its pool stay there, and
    # its width is the one it picks when stdout is not a terminal
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    res = subprocess.run([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", *args], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", " ".join(args)).strip("-")[:80]
    golden(f"cli/{slug}.txt", f"exit {res.returncode}\n{_cli_text(res.stdout)}")


def test_sweep_rows_are_kept() -> None:
    sw = sweep_rtt([0.05, 2.0, 75.0], TIMED_MODES, TimingConfig(jobs=12, workers=2, seed=0))
    golden("sweep/rows.json", sw.rows())
