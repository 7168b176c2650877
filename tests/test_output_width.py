"""Output that fits (issue 13, item 6): no line of `emqlab simulate`, `replay` or `grade` exceeds 100 columns
at the default width, over every shipped scenario's witnesses in every mode; the `<==` marks stay on their
steps, effects that do not fit go on continuation lines, and `--wide` prints the same steps unwrapped.

Finding the witnesses takes an exhaustive exploration of every scenario in every mode (a minute and more:
tests/test_scenarios.py does it). Here :data:`WITNESSES` holds the minimal witness schedules those
explorations print, and `simulate` runs with its exploration replaced by the replays of those schedules —
the same histories, so the same witness blocks; the printed report is the real command's. One real
`simulate` checks that the two agree. A scenario or anomaly missing from the table (or a schedule that no
longer shows its anomaly) is explored for real, only slower; ``python -m tests.test_output_width`` prints the
table afresh.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from emqlab.backend.connect import connect
from emqlab.engine import scenario as scenario_module
from emqlab.engine.history import History, Step, render_reply
from emqlab.engine.scenario import shipped
from emqlab.explore import run as explore_module
from emqlab.explore.checked import ScheduleError
from emqlab.teaching import grading as G
from emqlab.text import elide_words, line_breaks, wrap
from emqlab.ui.cli import main

WIDTH = 100
MODES = ("atomic", "split", "finish-then-fetch", "transaction")

#: (scenario, mode) → {anomaly kind: the minimal witness's schedule}, as an exhaustive `emqlab simulate`
#: prints them (regenerate: python -m tests.test_output_width)
WITNESSES: dict[tuple[str, str], dict[str, str]] = {
    ("abandoned-after-success", "split"): {"double-placement": "v1:W1*3.E1*2.C1*5.W1*3"},
    ("abandoned-after-success", "transaction"): {"double-placement": "v1:W1*3.E1.W1*4.C1"},
    ("arq-abort-outlives-job", "split"): {"invariant:abort-outlives-job": "v1:W1.C1*2"},
    ("arq-cron-rerun", "split"): {"duplicate-execution": "v1:W1.P2*3.W3*5"},
    ("arq-status-not-found", "split"): {"invariant:status-found": "v1:R1.W1.R1*3"},
    ("asynq-orphan-active", "split"): {"invariant:leased-while-active": "v1:W1.X1.R1"},
    ("asynq-periodic-twice", "split"): {"double-placement": "v1:S1.S2*3.S1*2"},
    ("asynq-stale-recovery", "split"): {
        "invariant:retried-once": "v1:R1.R2*2.W2*2.R1.W2", "work-thrown-away": "v1:R1.R2*2.W2*2.R1.W2"},
    ("attempts-overrun", "split"): {
        "attempts-overrun": "v1:W1*7.S1.W1*9.W2*3", "double-placement": "v1:W1*7.W2.S1.W1*9",
        "duplicate-execution": "v1:W1*7.S1.W1*9.W2*3"},
    ("cancel-active", "split"): {"double-placement": "v1:W1*10.C1*17.W1*10"},
    ("crash-mid-finish", "split"): {"double-placement": "v1:W1*9.S1.W1*8.X1", "lost-job": "v1:W1*11.X1*2.S1"},
    ("delayed-promotion", "split"): {
        "double-placement": "v1:W1*18.W2.W1*31.W2", "duplicate-execution": "v1:W1*18.W2*2.W1*33",
        "stolen-lock": "v1:W1*18.W2.W1*31.W2", "stuck-active": "v1:W1*18.W2.W1*31.W2"},
    ("dramatiq-delayed-twice", "split"): {"invariant:promoted-once": "v1:W2*3.W1*2"},
    ("dramatiq-heartbeat-lapse", "split"): {"duplicate-execution": "v1:W2*2.W1"},
    ("empty-then-delete", "split"): {"lost-job": "v1:SCHED*3.PROD*2.SCHED*2"},
    ("failure-fields-orphan", "split"): {"orphan-data": "v1:W1*4.W2*2.W1.P1"},
    ("fetch-loop", "split"): {"duplicate-execution": "v1:W1*9.S1.W1*58"},
    ("horizon-late-record", "split"): {"invariant:status-agrees": "v1:P1*2.W1*3.P1"},
    ("horizon-late-release", "split"): {"double-placement": "v1:M1.W1*2"},
    ("horizon-retry-trail", "split"): {"invariant:trail-kept": "v1:U1.S2*2.U1"},
    ("laravel-migrate-twice", "split"): {"double-placement": "v1:M1.M2*3.M1*2"},
    ("laravel-pop-lost", "split"): {"lost-job": "v1:W1.X1"},
    ("late-finish-deleted", "atomic"): {"duplicate-execution": "v1:L1.W1.S1.W2*2"},
    ("late-finish-deleted", "split"): {
        "double-placement": "v1:W1*9.L1.W2.S1.W1*8", "duplicate-execution": "v1:L1.S1.W2*2.W1",
        "orphan-data": "v1:W1*9.L1.S1.W2*2.W1*11", "phantom-job": "v1:W1*9.L1.S1.W1*8.W2*2"},
    ("late-finish-deleted", "finish-then-fetch"): {"duplicate-execution": "v1:L1.W1.S1.W2*2"},
    ("late-finish-deleted", "transaction"): {"duplicate-execution": "v1:L1.W1*2.S1.W2*2"},
    ("lease-lapse", "split"): {"double-placement": "v1:W1*9.L1.S1.W1*8"},
    ("lost-finish-reply", "atomic"): {"stuck-active": "v1:N1.W1.L1"},
    ("lost-finish-reply", "split"): {"lost-job": "v1:W1*11.N1.W1.L1", "stuck-active": "v1:N1.W1.L1"},
    ("lost-finish-reply", "finish-then-fetch"): {"stuck-active": "v1:N1.W1.L1"},
    ("lost-finish-reply", "transaction"): {"stuck-active": "v1:N1.W1.L1"},
    ("lost-reply-retry", "split"): {
        "lost-job": "v1:W1*10.N1.W1*5", "metrics-drift": "v1:W1*12.N1.W1*5", "stuck-active": "v1:W1*8.N1.W1*5",
        "work-thrown-away": "v1:W1*8.N1.W1*5"},
    ("mark-then-recover", "split"): {"double-placement": "v1:W1*10.S1*2.W1*7"},
    ("metrics-drift", "split"): {
        "double-placement": "v1:W1*9.W2.S1.W1*11", "duplicate-execution": "v1:W1*9.S1.W1*11.W2*2",
        "metrics-drift": "v1:W1*9.S1.W1*11.W2*2"},
    ("noscript-no-fallback", "atomic"): {"stuck-active": "v1:W2.F1.W1.L1"},
    ("noscript-no-fallback", "finish-then-fetch"): {"stuck-active": "v1:W2.F1.W1.L1"},
    ("paused-queue", "split"): {"double-placement": "v1:W1*9.S1.W1*9.W2"},
    ("progress-after-removal", "atomic"): {"duplicate-execution": "v1:W1.L1.S1.W2*2.P1"},
    ("progress-after-removal", "split"): {
        "duplicate-execution": "v1:L1.S1.W2*2.W1.P1", "orphan-data": "v1:W1.L1.S1.W2*2.W1.P1"},
    ("progress-after-removal", "finish-then-fetch"): {"duplicate-execution": "v1:W1.L1.S1.W2*2.P1"},
    ("progress-after-removal", "transaction"): {"duplicate-execution": "v1:W1.L1.S1.W2*2.P1"},
    ("recovery-by-identity", "atomic"): {"duplicate-execution": "v1:OLD*3.NEW*3.X1", "lost-job": "v1:NEW*3.OLD.X1"},
    ("recovery-by-identity", "split"): {"duplicate-execution": "v1:OLD*4.NEW*5.X1", "lost-job": "v1:NEW*4.OLD.X1"},
    ("refresh-after-fail", "split"): {
        "double-placement": "v1:T1.W1.T1*2", "stuck-active": "v1:T1.W1.T1*2", "work-thrown-away": "v1:T1*2.W1.T1"},
    ("remove-on-complete", "split"): {
        "duplicate-execution": "v1:W1*9.S1.W1*7.W2*2", "phantom-job": "v1:W1*9.W2.S1.W1*7"},
    ("renew-after-finish", "split"): {"stolen-lock": "v1:R1.W1.W2.R1*2.W2"},
    ("retry-all-loop", "split"): {
        "duplicate-execution": "v1:A1*3.W1*2.A1*4.W1*2", "metrics-drift": "v1:A1*3.W1*2.A1*4.W1*2"},
    ("retry-requeue", "split"): {"double-placement": "v1:W1*7.S1.W1*11"},
    ("rq-cleanup-after-success", "split"): {"double-placement": "v1:C1*5.W1*4.L1"},
    ("rq-dequeue-crash", "split"): {"lost-job": "v1:W1*2.X1"},
    ("rq-intermediate-cleanup", "split"): {"double-placement": "v1:W1*2.C1*8.W1"},
    ("rq-two-schedulers", "split"): {"double-placement": "v1:S1*2.S2*3.S1"},
    ("saq-heartbeat-overwrites-abort", "split"): {
        "invariant:abort-seen": "v1:A1*3.W1*3", "orphan-data": "v1:A1.W1*3.A1*2"},
    ("saq-sweep-before-process", "split"): {"duplicate-execution": "v1:W1*2.S1*4.W1.W2*3"},
    ("shared-token", "atomic"): {"duplicate-execution": "v1:W2.W1", "stolen-lock": "v1:W1.W2"},
    ("shared-token", "split"): {
        "duplicate-execution": "v1:W2.W1*4", "metrics-drift": "v1:W1*5.W2.W1*17", "stolen-lock": "v1:W1*23.W2"},
    ("shared-token", "finish-then-fetch"): {"duplicate-execution": "v1:W2.W1", "stolen-lock": "v1:W1.W2"},
    ("shared-token", "transaction"): {"duplicate-execution": "v1:W2.W1", "stolen-lock": "v1:W1.W2"},
    ("shutdown-requeue", "atomic"): {"stolen-lock": "v1:M1.W1"},
    ("shutdown-requeue", "split"): {"double-placement": "v1:W1*6.M1*4.W1*12", "stolen-lock": "v1:M1*4.W1*2"},
    ("shutdown-requeue", "finish-then-fetch"): {"stolen-lock": "v1:M1.W1"},
    ("shutdown-requeue", "transaction"): {"stolen-lock": "v1:M1.W1*2"},
    ("sidekiq-poller-twice", "split"): {"double-placement": "v1:P1.P2*4.P1*3"},
    ("snapshot-sweep", "split"): {"duplicate-execution": "v1:S1*2.W1.S1*3"},
    ("split-promoter", "split"): {"double-placement": "v1:A1*3.B1*3.A1*2.X1", "lost-job": "v1:A1*4.B1.X1"},
    ("stale-sweep", "atomic"): {"work-thrown-away": "v1:S1*6.W1.S1.W2.S1*8.W2"},
    ("stalled-finish", "split"): {"double-placement": "v1:W1*9.S1.W1*8"},
    ("two-workers", "atomic"): {"duplicate-execution": "v1:L1.W1.S1.W2*2"},
    ("two-workers", "split"): {
        "double-placement": "v1:W1*9.L1.W2.S1.W1*8", "duplicate-execution": "v1:L1.W1*4.S1.W2*2",
        "stolen-lock": "v1:W1*8.L1.S1.W2.W1*12.W2"},
    ("two-workers", "finish-then-fetch"): {"duplicate-execution": "v1:L1.W1.S1.W2*2"},
    ("two-workers", "transaction"): {"duplicate-execution": "v1:L1.W1*2.S1.W2*2"},
    ("watch-misses-active", "transaction"): {"double-placement": "v1:W1*2.C1.W1"},
}

SHIPPED = {s.name: s for s in shipped()}
COMBOS = [(name, m) for name, s in SHIPPED.items() for m in s.modes]
#: the real exploration (the fixture below replaces the module's)
EXPLORE = explore_module.explore
LOAD = scenario_module.load


def load(name: str) -> Any:
    """A shipped scenario, parsed once (an exploration runs one Scenario object many times: runs do not
    change it)."""
    return SHIPPED[name] if name in SHIPPED else LOAD(name)


ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^ {0,2}(\d+)  ")
CONTINUATION = "     ↳ "
#: a step's mark under it (a terminal too narrow for the step and its mark on one line)
MARK_BELOW = "     <== "


def test_every_mode_and_scenario_is_covered() -> None:
    assert {m for _, m in COMBOS} == set(MODES)
    assert {n for n, _ in WITNESSES} <= {n for n, _ in COMBOS}


# -- the witnesses ------------------------------------------------------------------------------------------


@cache
def _explored(name: str, mode: str) -> Any:
    """A real exhaustive exploration (only when the table misses something)."""
    return EXPLORE(load(name), mode, conn=connect())


@cache
def _replayed(name: str, mode: str, schedule: str | None) -> Any:
    """The replay report of ``schedule`` (``None``: the actors in order, for a mode without witnesses)."""
    sc = load(name)
    if schedule is None:
        schedule = "v1:" + ".".join(a.id for a in sc.actors)
    return EXPLORE(sc, mode, strategy="replay", conn=connect(), schedule=schedule)


def _shows(name: str, mode: str, schedule: str, kind: str) -> bool:
    try:
        return kind in _replayed(name, mode, schedule).witnesses
    except ScheduleError:  # the scenario changed: the schedule no longer fits it
        return False


@cache
def witnesses(name: str, mode: str) -> dict[str, str]:
    """The combination's witness schedules: the table's, or explored when it misses an expected anomaly or
    one no longer shows."""
    table = WITNESSES.get((name, mode), {})
    exp = load(name).expect.get(mode)
    expected = set(exp.anomalies) if exp is not None else set(table)
    stale = [k for k, s in table.items() if not _shows(name, mode, s, k)]
    if expected - set(table) or stale:
        warnings.warn(f"{name} {mode}: the witness table is out of date (python -m tests.test_output_width)",
                      stacklevel=1)
        rep = _explored(name, mode)
        return {k: h.schedule for k, h in sorted(rep.witnesses.items())}
    return dict(table)


@cache
def stand_in_report(name: str, mode: str) -> Any:
    """What `simulate` reports for the combination, its witnesses from replays of their schedules: one report
    with every kind's witness (exact counts from the replays' single runs)."""
    found = witnesses(name, mode)
    reports = {k: _replayed(name, mode, s) for k, s in found.items()}
    base = _replayed(name, mode, next(iter(found.values()), None))
    if not found:
        return base
    return replace(base, witnesses={k: r.witnesses[k] for k, r in reports.items()},
                   runs_with={k: 1 for k in found}, interleavings_with={k: 1 for k in found},
                   min_preemptions={k: r.min_preemptions.get(k, 0) for k, r in reports.items()})


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """`simulate`'s exploration replaced by :func:`stand_in_report`; `replay`'s memoized."""
    def explore(sc: Any, mode: str, *, strategy: str = "exhaustive", schedule: str | None = None,
                **kw: Any) -> Any:
        if strategy != "replay":
            return stand_in_report(sc.name, mode)
        if kw.get("scripts") is None and schedule is not None:
            return _replayed(sc.name, mode, schedule)
        return EXPLORE(sc, mode, strategy=strategy, schedule=schedule, **kw)

    monkeypatch.setattr(explore_module, "explore", explore)
    monkeypatch.setattr(scenario_module, "load", load)


# -- checking an output -------------------------------------------------------------------------------------


def run(*args: str) -> Result:
    res = CliRunner().invoke(main, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    return [f"{len(line)}: {line}" for line in text.splitlines() if len(line) > width]


def step_blocks(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """Each step line of the histories in ``text``: its index, the line and its continuation lines (the
    effects that go on under it, and its mark when it is there)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = STEP.match(line)
        if m:
            more = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith((CONTINUATION, MARK_BELOW)):
                    break
                more.append(nxt[5:])
            yield int(m.group(1)), line, more


def marks(text: str) -> list[tuple[int, str]]:
    """The ``<==`` marks of the histories in ``text``: (step, anomaly kind), wherever the step shows them."""
    out = []
    for i, line, more in step_blocks(text):
        for part in (line, *more):
            if "<== " in part:
                out += [(i, k.strip()) for k in part.split("<== ", 1)[1].split(",")]
    return out


def prose(text: str) -> str:
    """The output without its histories, whitespace-normalized (wrapping must change nothing else)."""
    keep = [line for line in text.splitlines()
            if not (STEP.match(line) or line.startswith((CONTINUATION, MARK_BELOW, "-- ")))]
    return " ".join(w for w in " ".join(keep).split() if w != "\\")


def check_fits(wrapped: str, wide: str, histories: list[History]) -> None:
    """``wrapped`` (the default width) against ``wide`` (--wide) of the same command."""
    assert not too_wide(wrapped), "\n".join(too_wide(wrapped))
    assert marks(wrapped) == marks(wide), "every <== mark stays on its step"
    assert [(i, line.split(" -- ")[1].split()[0]) for i, line, _ in step_blocks(wrapped)] == \
           [(i, line.split(" -- ")[1].split()[0]) for i, line, _ in step_blocks(wide)], "the same steps, actors"
    assert all(not more for _, _, more in step_blocks(wide)), "--wide: one line per step"
    assert prose(wrapped) == prose(wide)
    # every effect of every step is shown, on the step's line or its continuation lines
    blocks = list(step_blocks(wrapped))
    for h in histories:
        mine = [b for b in blocks if b[0] in range(1, len(h.steps) + 1)]
        for s in h.steps:
            shown = " ".join(" ".join([line, *more]) for i, line, more in mine if i == s.index)
            for e in s.effects:
                assert str(e) in shown, (s.index, str(e), shown)


# -- simulate and replay over every scenario and mode ---------------------------------------------------------


@pytest.mark.parametrize(("name", "mode"), COMBOS, ids=[f"{n}-{m}" for n, m in COMBOS])
def test_simulate_fits(name: str, mode: str, stand_in: None) -> None:
    args = ["simulate", f"--{mode}", "--scenario", name, "-j", "1"]
    wrapped, wide = run(*args), run(*args, "--wide")
    assert wrapped.exit_code == wide.exit_code == 0
    rep = stand_in_report(name, mode)
    check_fits(wrapped.output, wide.output, list(rep.witnesses.values()))
    for kind, h in rep.witnesses.items():
        assert f"witness for {kind}" in wrapped.output and h.schedule in wrapped.output
        named = {s for a in h.anomalies if a["kind"] == kind for s in a["steps"] if 1 <= s <= len(h.steps)}
        assert named <= {s for s, k in marks(wrapped.output) if k == kind}  # every step it names is marked


def _kinds(name: str, mode: str) -> list[str]:
    """The anomalies the combination shows: its scenario file's expectation, and the table's."""
    exp = load(name).expect.get(mode)
    return sorted(set(exp.anomalies if exp is not None else ()) | set(WITNESSES.get((name, mode), {})))


WITNESS_CASES = [(n, m, k) for n, m in COMBOS for k in _kinds(n, m)]


@pytest.mark.parametrize(("name", "mode", "kind"), WITNESS_CASES, ids=["-".join(c) for c in WITNESS_CASES])
def test_replay_of_each_witness_fits(name: str, mode: str, kind: str, stand_in: None) -> None:
    schedule = witnesses(name, mode)[kind]
    args = ["replay", schedule, f"--{mode}", "--scenario", name]
    wrapped, wide = run(*args), run(*args, "--wide")
    assert wrapped.exit_code == wide.exit_code == 0, wrapped.output
    h = _replayed(name, mode, schedule).witnesses[kind]
    check_fits(wrapped.output, wide.output, [h])
    assert f"{kind}: " in wrapped.output  # the anomaly, its because-sentence
    # every step an anomaly names is marked with it
    named = {(s, a["kind"]) for a in h.anomalies for s in a["steps"] if 1 <= s <= len(h.steps)}
    assert named == set(marks(wrapped.output))


def test_the_stand_in_prints_what_the_real_exploration_does() -> None:
    """The default scenario, explored for real: the same witness block as the stand-in's, line for line."""
    real = run("simulate", "--split", "-j", "1").output
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(explore_module, "explore", lambda sc, mode, **_: stand_in_report(sc.name, mode))
        stand = run("simulate", "--split", "-j", "1").output

    def block(text: str) -> list[str]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("witness for"))
        end = next(i for i, line in enumerate(lines) if line.startswith("replay:"))
        return lines[start:end + 1]

    assert block(real) == block(stand)
    assert not too_wide(real)
    data = json.loads(run("simulate", "--split", "-j", "1", "--json").output)
    assert {k: w["schedule"] for k, w in data["witnesses"].items()} == witnesses("stalled-finish", "split")


def test_a_narrower_terminal_is_followed(stand_in: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal narrower than 100 columns the output fits the terminal (colours and all)."""
    from emqlab.ui import cli

    monkeypatch.setattr(cli.console, "_force_terminal", True)
    monkeypatch.setattr(cli.console, "_width", 80)
    out = re.sub(r"\x1b\[[0-9;]*m", "", run("simulate", "--split", "--scenario", "two-workers", "-j", "1").output)
    assert not too_wide(out, 80), "\n".join(too_wide(out, 80))
    assert marks(out) == marks(run("simulate", "--split", "--scenario", "two-workers", "--wide").output)
    monkeypatch.setattr(cli.console, "_width", 160)  # a wider terminal: still 100
    out = re.sub(r"\x1b\[[0-9;]*m", "", run("simulate", "--split", "--scenario", "two-workers", "-j", "1").output)
    assert not too_wide(out) and too_wide(out, 80)


# -- the renderer ------------------------------------------------------------------------------------------


def history(name: str = "stalled-finish", mode: str = "split", kind: str = "double-placement") -> History:
    h: History = _replayed(name, mode, witnesses(name, mode)[kind]).witnesses[kind]
    return h


def kind_marks(h: History) -> dict[int, str]:
    return {s: a["kind"] for a in h.anomalies for s in a["steps"]}


@pytest.mark.parametrize("width", [60, 72, 80, 100])
def test_narrower_widths_keep_the_marks(width: int) -> None:
    h = history("two-workers", "split", "stolen-lock")
    text = h.annotated(marks=kind_marks(h), width=width)
    assert not too_wide(text, width)
    assert marks(text) == marks(h.annotated(marks=kind_marks(h), width=None))
    assert len(list(step_blocks(text))) == len(h.steps)


def test_unwrapped_is_one_line_per_step_in_the_old_columns() -> None:
    h = history()
    lines = h.annotated(marks=kind_marks(h), width=None).splitlines()
    assert len(lines) == 1 + len(h.steps)
    nine = lines[9]
    assert nine.startswith("  9  DEL 1:lock" + " " * 34 + " -- W1  -> 1 ")
    assert nine.endswith("1:lock W1:1 -> -   <== double-placement")


def test_effects_that_do_not_fit_go_under_the_step() -> None:
    h = history()
    lines = h.annotated(marks=kind_marks(h)).splitlines()
    ten = next(i for i, line in enumerate(lines) if line.startswith(" 10  "))
    assert lines[ten].endswith("<== double-placement") and "1 -active" not in lines[ten]
    assert lines[ten + 1] == CONTINUATION + "(stalled interval elapsed)  1 -active  1 +wait  1 -stalled"
    # a step without a mark keeps effects that fit on its line
    assert history("remove-on-complete", "split", "phantom-job").annotated().splitlines()[9].endswith(
        "1:lock W1:1 -> -")


def test_long_argument_lists_are_elided_in_the_middle() -> None:
    s = Step(1, "W1", 1, "command", "HSET", ("1", "returnvalue", '{"sent":true}', "finishedOn", "1767225600000"))
    assert s.command_text(44) == "HSET 1 returnvalue … 1767225600000"
    assert s.command_text(200) == 'HSET 1 returnvalue {"sent":true} finishedOn 1767225600000'
    assert elide_words(["GET"], ["x" * 80], 20) == "GET xxxxxxxx…xxxxxxx"  # a long word is elided itself
    assert elide_words(["EVALSHA"], ["8847" * 10, "14", "wait", "1"], 40) == "EVALSHA 88478847…8478847 14 wait 1"
    script = Step(2, "W1", 2, "script", "moveToFinished", ("1", "1767225600002", "failedReason", "<msgpack>"))
    assert script.command_text(40) == "EVALSHA moveToFinished 1 … failedReason"
    assert Step(3, "S1", 1, "command", "HSET", ("1", "", "x")).command_text() == 'HSET 1 "" x'


def test_long_replies_are_shortened_by_structure() -> None:
    reply = [["name", "thumbnail", "data", "{}"], "1", 0, 0]
    assert render_reply(reply) == '[["name", "thumbnail", "data", …], "1", 0, …]'
    assert render_reply(reply, 20) == '[[…], "1", 0, …]'
    assert render_reply(reply, 10) == "[[…], …]"
    assert render_reply("NOSCRIPT No matching script. Please use EVAL.", 12) == '"NOSCRIPT N…'
    assert render_reply(None, 3) == "nil"


def test_a_long_schedule_breaks_after_a_dot() -> None:
    h = replace(history(), schedule="v1:" + ".".join(f"W{i}*9.S1" for i in range(1, 30)))
    head = [line for line in h.annotated().splitlines() if line.startswith("-- ")]
    assert len(head) > 2 and all(len(line) <= WIDTH for line in head)
    assert "".join(line[3:] for line in head[1:]) == h.schedule


def test_wrap_keeps_lines_that_fit_and_breaks_at_words() -> None:
    text = "short line\n" + "word " * 30 + "\n  " + "x" * 120
    lines = wrap(text, 40, indent=4)
    assert lines[0] == "short line"
    assert all(len(line) <= 40 for line in lines[1:-1]) and lines[2].startswith("    word")
    assert lines[-2] == "    word" and lines[-1] == "  " + "x" * 120  # a word longer than a line stays whole
    assert wrap(text, None) == text.split("\n")
    assert line_breaks("a b", 1) == [(0, 1), (2, 3)]


def test_notebook_default_fits() -> None:
    """The renderer from Python (a notebook's print(h.annotated())) fits 100 columns by default."""
    h = history("two-workers", "split", "stolen-lock")
    assert not too_wide(h.annotated(marks=kind_marks(h)))


# -- grade --------------------------------------------------------------------------------------------------

SOURCES = ROOT / "notebooks" / "assignments"


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """`emqlab grade` with the notebook run in this process (fast; the sandbox is tests/test_grading.py's)."""
    real = G.grade_notebook
    monkeypatch.setattr(G, "grade_notebook", lambda nb, **kw: real(nb, isolated=False, name=str(nb)))


def _notebooks(tmp_path: Path) -> list[Path]:
    out = []
    for name in ("a1-double-placement.ipynb", "a2-repair-finish.ipynb"):  # the solutions
        G.write_notebook(G.read_notebook(SOURCES / name), tmp_path / name)
        out.append(tmp_path / name)
    for aid in G.ASSIGNMENTS.values():
        student = tmp_path / f"student-{aid.notebook}"
        G.write_notebook(G.student_version(G.read_notebook(SOURCES / aid.notebook)), student)
        out.append(student)
    nb = G.read_notebook(SOURCES / "a2-repair-finish.ipynb")
    setup = next(c for c in nb["cells"] if G.grade_id(c) == "a2_setup")
    answer = next(c for c in nb["cells"] if G.grade_id(c) == "a2_finish_answer")
    answer["source"] = "FINISH_LUA = BROKEN_FINISH_LUA\n"
    assert "BROKEN_FINISH_LUA" in "".join(setup["source"])
    G.write_notebook(nb, tmp_path / "broken-a2.ipynb")
    nb = G.read_notebook(SOURCES / "a1-double-placement.ipynb")
    answer = next(c for c in nb["cells"] if G.grade_id(c) == "a1_schedule_answer")
    answer["source"] = 'def schedule_for(alone):\n    return "v1:S1"\n'
    G.write_notebook(nb, tmp_path / "early-a1.ipynb")
    answer["source"] = 'def schedule_for(alone):\n    return "v1:W1*9.S1"\n'  # fails a hidden variant
    G.write_notebook(nb, tmp_path / "copied-a1.ipynb")
    return [*out, tmp_path / "broken-a2.ipynb", tmp_path / "early-a1.ipynb", tmp_path / "copied-a1.ipynb"]


def test_grade_output_fits(tmp_path: Path, in_process: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the notebooks by short names: a path is one word, never broken (a path longer than a line stays whole)
    monkeypatch.chdir(tmp_path)
    for nb in _notebooks(tmp_path):
        res = run("grade", nb.name)
        assert res.exit_code in (0, 1), res.output
        assert "score" in res.output
        wide_lines = [line for line in too_wide(res.output) if len(line.split()) > 2]  # (a path is one word)
        assert not wide_lines, "\n".join(wide_lines)
    broken = "broken-a2.ipynb"
    wrapped, wide = run("grade", broken).output, run("grade", broken, "--wide").output
    assert "Shortest witness" in wrapped and CONTINUATION in wrapped  # the witness, its effects under steps
    assert too_wide(wide) and CONTINUATION not in wide

    def sentences(text: str) -> str:  # the output without the witness's lines (indented under feedback)
        history = re.compile(r"^ +(\d+  |↳ |-- \S+ · )|^score ")
        return " ".join(" ".join(line for line in text.splitlines() if not history.match(line)).split())

    assert sentences(wrapped) == sentences(wide)


def test_grade_report_text_fits() -> None:
    nb = G.student_version(G.read_notebook(SOURCES / "a3-rate-vs-rtt.ipynb"))
    report = G.grade_notebook(nb, name="a3.ipynb", isolated=False)
    assert not too_wide(report.text())
    assert too_wide(report.text(width=None))


# -- regenerating the table ------------------------------------------------------------------------------------


def _table() -> str:
    """:data:`WITNESSES` afresh, from exhaustive explorations of every scenario in every mode (minutes)."""
    rows = []
    for name, mode in COMBOS:
        rep = EXPLORE(load(name), mode, conn=connect())
        if not rep.witnesses:
            continue
        items = [f'"{k}": "{h.schedule}"' for k, h in sorted(rep.witnesses.items())]
        one = f'    ("{name}", "{mode}"): {{{", ".join(items)}}},'
        if len(one) <= 116:
            rows.append(one)
            continue
        rows.append(f'    ("{name}", "{mode}"): {{')
        cur = "       "
        for i, item in enumerate(items):
            piece = " " + item + ("," if i < len(items) - 1 else "},")
            if len(cur) + len(piece) > 116 and cur.strip():
                rows.append(cur)
                cur = "       "
            cur += piece
        rows.append(cur)
    return "WITNESSES: dict[tuple[str, str], dict[str, str]] = {\n" + "\n".join(rows) + "\n}"


if __name__ == "__main__":  # pragma: no cover
    print(_table())
