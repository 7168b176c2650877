"""Check your own Lua: a file or folder of scripts put in place of
emqlab's, run through the scenarios split and atomic, compared with emqlab's own; a lesson variant that
shows the bug an atomic finish still has without its precondition; BullMQ's shipped scripts unchanged;
every bad input refused with one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from emqlab.check.lua import FINISH_RULE, check_scripts
from emqlab.engine import scenario
from emqlab.explore import explore
from emqlab.scripting.registry import ScriptError, ScriptSet, default_scripts, lua_dir
from emqlab.ui.cli import main

VARIANT = lua_dir() / "variants" / "no-active-check"


def test_the_variant_replaces_only_the_finish_and_differs_only_by_rule_r5() -> None:
    v = default_scripts().overlay(VARIANT)
    base = default_scripts()
    assert v.names() == base.names()
    changed = [n for n in v.names() if v[n].sha != base[n].sha]
    assert changed == ["moveToFinished"]
    assert b'call("LPOS", KEYS[2], jobId)' in base["moveToFinished"].text
    assert b'call("LPOS", KEYS[2], jobId)' not in v["moveToFinished"].text
    assert v.origin == f"emqlab + {VARIANT}"


def test_an_atomic_finish_without_the_active_check_still_double_places() -> None:
    sc = scenario.load("cancel-active")
    fixed = explore(sc, "atomic")
    broken = explore(sc, "atomic", scripts=default_scripts().overlay(VARIANT))
    assert fixed.anomaly_kinds == [] and broken.anomaly_kinds == ["double-placement"]
    h = broken.witnesses["double-placement"]
    assert h.schedule == "v1:W1.C1"
    assert h.anomalies[0]["because"] == ("job 1 is in completed (W1 step 1, moveToFinished) and in failed (C1 step 2,"
                                         " moveToFinished) because C1's moveToFinished (step 2) did not check that"
                                         " the job had already been placed in completed")


def test_check_judges_the_atomic_rows_and_lists_the_split_differences() -> None:
    chosen = [scenario.load(n) for n in ("cancel-active", "stalled-finish")]
    bad = check_scripts(default_scripts().overlay(VARIANT), chosen)
    assert bad.verdict == "fails"
    assert [(r.scenario, r.mode, r.extra) for r in bad.failing] == [("cancel-active", "atomic", ["double-placement"])]
    assert bad.failing[0].witnesses == {"double-placement": "v1:W1.C1"}
    own = check_scripts(default_scripts().overlay(lua_dir()), chosen)  # emqlab's scripts over themselves
    assert own.verdict == "holds" and all(not r.extra and not r.missing for r in own.rows)
    assert len(own.rows) == 4


def test_bullmqs_shipped_scripts_run_unchanged_through_check() -> None:
    folder = Path(str(ScriptSet.bullmq()["moveToFinished"].path)).parent
    res = check_scripts(default_scripts().overlay(folder), [scenario.load("stalled-finish")])
    rows = {r.mode: r for r in res.rows}
    assert rows["atomic"].yours == () and res.verdict == "holds"
    # BullMQ's finish deletes the lock and only then learns from LREM that the job had left active (-3):
    # the requeued job's finish is refused and its result lost, where emqlab's files it twice
    assert rows["split"].yours == ("work-thrown-away",) and rows["split"].reference == ("double-placement",)


@pytest.mark.parametrize(("files", "message"), [
    ({"moveToFinished-14.lua": "return ("}, "moveToFinished-14.lua: does not compile:"),
    ({"moveToFinished-13.lua": "return 1"}, "none of its scripts is one emqlab calls"),  # (another protocol's)
    ({"moveToFinished-14.lua": '--@include "includes/nothere.lua"\nreturn 1'}, "included file includes/nothere.lua"
                                                                                " not found"),
    ({"notAScript-3.lua": "return 1"}, "none of its scripts is one emqlab calls"),
    ({"readme.txt": "hello"}, "no <name>-<numkeys>.lua file in this folder"),
])
def test_a_bad_script_folder_is_refused_with_one_line(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ScriptError) as e:
        default_scripts().overlay(tmp_path)
    assert message in str(e.value) and "\n" not in str(e.value)
    res = CliRunner().invoke(main, ["check", "--lua", str(tmp_path)])
    assert res.exit_code == 2 and message in " ".join(res.output.split())


def test_a_single_file_must_name_a_script_emqlab_calls(tmp_path: Path) -> None:
    f = tmp_path / "mystery-2.lua"
    f.write_text("return 1")
    with pytest.raises(ScriptError, match="has no script named 'mystery' to replace"):
        default_scripts().overlay(f)
    with pytest.raises(ScriptError, match="no script file or folder at"):
        default_scripts().overlay(tmp_path / "missing")
    thirteen = tmp_path / "moveToFinished-13.lua"
    thirteen.write_text("return 1")
    with pytest.raises(ScriptError, match="declares 13 KEYS, but moveToFinished-14.lua takes 14"):
        default_scripts().overlay(thirteen)


def test_the_check_command_prints_the_witness_and_exits_with_the_verdict() -> None:
    res = CliRunner().invoke(main, ["check", "--lua", str(VARIANT), "-s", "cancel-active"])
    assert res.exit_code == 1, res.output
    joined = res.output.replace(" \\\n    ", " ")  # (a long command goes on after " \\")
    assert f"emqlab replay 'v1:W1.C1' --atomic --scenario cancel-active --lua {VARIANT}" in joined
    assert "verdict: fails" in res.output
    data = json.loads(CliRunner().invoke(main, ["check", "--lua", str(VARIANT), "-s", "stalled-finish",
                                                "--json"]).output)
    assert data["verdict"] == "holds" and [r["mode"] for r in data["rows"]] == ["atomic", "split"]
    replay = CliRunner().invoke(main, ["replay", "v1:W1.C1", "--atomic", "-s", "cancel-active", "--lua",
                                       str(VARIANT)])
    assert replay.exit_code == 0 and "verdict: fails — double-placement in the replayed schedule" in replay.output


def test_a_finish_that_errors_fails_and_one_that_files_nothing_fails_too(tmp_path: Path) -> None:
    erring, idle = tmp_path / "erring", tmp_path / "idle"
    erring.mkdir()
    idle.mkdir()
    (erring / "moveToFinished-14.lua").write_text("return redis.call('LPOP', KEYS[12])\n")  # KEYS[12]: the job hash
    (idle / "moveToFinished-14.lua").write_text("return 0\n")
    (idle / "fooBar-3.lua").write_text("return 1\n")
    chosen = [scenario.load("stalled-finish")]
    bad = check_scripts(default_scripts().overlay(erring), chosen)
    assert bad.verdict == "fails"
    atomic = next(r for r in bad.rows if r.mode == "atomic")
    assert atomic.errors and "WRONGTYPE" in atomic.errors[0] and atomic.broken
    # a finish that replies 0 and moves nothing: it said "holds" (final states listed for review only)
    quiet = check_scripts(default_scripts().overlay(idle), chosen)
    assert quiet.verdict == "fails" and [r.scenario for r in quiet.failing] == ["stalled-finish"]
    row = quiet.failing[0]
    assert row.extra == ["invariant:finish-files-its-job"] and row.witnesses[row.extra[0]] == "v1:W1.S1"
    assert row.unmatched == 1 and row.example == "job 1 in active; locks: 1 by W1:1"
    assert quiet.replaced == ("moveToFinished",) and quiet.skipped == ("fooBar-3.lua",)
    res = CliRunner().invoke(main, ["check", "--lua", str(idle), "-s", "stalled-finish"])
    assert res.exit_code == 1 and "verdict: fails" in res.output
    assert "skipped (emqlab never calls them): fooBar-3.lua" in res.output
    # the witness the check prints replays to the same verdict
    replay = CliRunner().invoke(main, ["replay", "v1:W1.S1", "--atomic", "-s", "stalled-finish", "--lua",
                                       str(idle / "moveToFinished-14.lua")])
    assert replay.exit_code == 0 and "verdict: fails" in replay.output, replay.output
    assert ("W1's finish of job 1 replied 0, a success, and did not move the job (nothing taken out of active or"
            " put anywhere, no delete) in its moveToFinished (step 1)") in " ".join(replay.output.split())


def test_a_scenario_that_never_runs_the_replaced_script_says_nothing_of_it(tmp_path: Path) -> None:
    """rq-two-schedulers runs RQ's own code, never moveToFinished: its row is unused, and a check of such
    scenarios alone is inconclusive (it said 'holds' and counted them as scenarios the finish passed)."""
    (tmp_path / "moveToFinished-14.lua").write_text("return 0\n")
    res = check_scripts(default_scripts().overlay(tmp_path), [scenario.load("rq-two-schedulers")])
    assert res.unused == ["rq-two-schedulers"] and all(not r.ran for r in res.rows)
    assert res.verdict == "inconclusive" and res.reason == "no scenario checked runs moveToFinished"
    own = check_scripts(default_scripts().overlay(lua_dir()),
                        [scenario.load("rq-two-schedulers"), scenario.load("stalled-finish")])
    assert own.verdict == "holds" and own.unused == ["rq-two-schedulers"]
    assert own.reason.startswith("in the 1 scenario that run ")
    text = CliRunner().invoke(main, ["check", "--lua", str(tmp_path), "-s", "rq-two-schedulers"]).output
    assert "1 unused (no run calls your scripts), of 1" in text and "unused  rq-two-schedulers" in text, text


def test_emqlabs_own_finish_keeps_the_rule_in_every_shipped_scenario_and_mode() -> None:
    """The check's rule must not flag emqlab's own scripts anywhere: every shipped scenario, every mode it
    lists but split (the rule does not check a split finish), explored with the rule added (the reference
    side of every check)."""
    broken = []
    for sc in scenario.shipped():
        sc = dataclasses.replace(sc, invariants=(*sc.invariants, FINISH_RULE))
        for mode in [m for m in sc.modes if m != "split"]:
            rep = explore(sc, mode)
            if FINISH_RULE.kind in rep.anomaly_kinds:
                broken.append((sc.name, mode, rep.witnesses[FINISH_RULE.kind].schedule))
    assert broken == []


def test_the_report_puts_the_verdict_first_one_line_per_scenario_and_details_for_the_failing() -> None:
    """A finish without its lock check: the verdict and a summary first, then one line per scenario within
    100 columns, then the details (kinds side by side, the witness) of the failing scenarios only."""
    import tempfile

    text = (Path(lua_dir()) / "moveToFinished-14.lua").read_text()
    with tempfile.TemporaryDirectory(prefix="emq") as short:  # (a path short enough for one line)
        unlocked = Path(short) / "moveToFinished-14.lua"
        unlocked.write_text(text.replace('local checksLock = token ~= "0"', "local checksLock = false"))
        names = ["two-workers", "stalled-finish", "cancel-active"]
        res = CliRunner().invoke(main, ["check", "--lua", str(unlocked), *[a for n in names for a in ("-s", n)]])
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    verdict = next(i for i, line in enumerate(lines) if line.startswith("verdict: fails"))
    rows = [i for i, line in enumerate(lines) if line.split()[:2] and line.split()[1] in names
            and line.split()[0] in ("fails", "review", "differs", "same")]
    assert len(rows) == 3 and verdict < rows[0] and rows == list(range(rows[0], rows[0] + 3))
    assert lines[rows[0]].startswith("fails   two-workers ") and "atomic: +non-owner-finish" in lines[rows[0]]
    details = "\n".join(lines[rows[-1] + 1:])
    assert "two-workers (atomic): +non-owner-finish" in details
    assert "witness of non-owner-finish: emqlab replay" in details
    assert "stalled-finish (" not in details and "cancel-active (" not in details  # not failing: no details


def test_the_count_of_scenarios_that_differ_in_split_only_counts_kinds_missing_too(tmp_path: Path) -> None:
    """A finish that files the job without checking anything loses the split run's kinds in two scenarios
    (each row says ``-kind``): the summary counted only kinds the user's finish adds, and said 0 of 2 differ."""
    (tmp_path / "moveToFinished-14.lua").write_text(
        "redis.call('LREM', KEYS[2], -1, ARGV[1])\nredis.call('ZADD', KEYS[11], 1, ARGV[1])\n"
        "redis.call('DEL', KEYS[12] .. ':lock')\nreturn 0\n")
    res = CliRunner().invoke(main, ["check", "--lua", str(tmp_path), "-s", "stalled-finish", "-s",
                                    "mark-then-recover"])
    assert "scenarios: 0 fail, 0 to review, 2 differ in split only, of 2" in res.output, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("differs ")]
    assert len(rows) == 2 and len({line.index(" atomic:") for line in rows}) == 1, rows
