"""Bad input gets a clear one-line error and loses nothing; interrupted live runs clean up after themselves."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from emqlab.backend.connect import BackendError, connect
from emqlab.explore.checked import ScheduleError, parse_schedule
from emqlab.protocol.verdict import ExitCode, markdown_table
from emqlab.teaching import run as notebook_run
from emqlab.ui.cli import main
from tests.conftest import backend_conn


def _one_line_error(args: list[str], code: int = ExitCode.USAGE) -> str:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == code, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    assert "Traceback" not in res.output
    return res.output


@pytest.mark.parametrize("text", ["v1:W1*99999999999999999999", "v1:W1*100001", "v1:" + ".".join(["W1*60000"] * 2)])
def test_huge_repeat_counts_are_refused_before_expanding(text: str) -> None:
    with pytest.raises(ScheduleError, match="more than 100000 steps"):
        parse_schedule(text)


def test_a_long_bad_schedule_is_shortened_in_its_one_line_error() -> None:
    """The error quotes a long schedule with its middle left out, so the line fits 100 columns; the part
    number still says where the fault is, and a short schedule is quoted whole."""
    long = "v1:" + "W1." * 60 + "X9"
    out = _one_line_error(["replay", "--split", long])
    assert len(out.rstrip("\n")) <= 100 and "part 61: unknown actor 'X9'" in out and "…" in out
    assert "'v1:W1.X9'" in _one_line_error(["replay", "--split", "v1:W1.X9"])


def test_a_mode_the_scenario_lacks_is_one_line_that_names_its_modes() -> None:
    """simulate and replay alike (replay ran a mode the scenario does not define); when the mode was left
    out, the line says split is the default and which flags to give instead."""
    for cmd in (["simulate"], ["replay", "v1:W1"]):
        out = _one_line_error([*cmd, "-s", "noscript-no-fallback", "--transaction"])
        assert "has no mode transaction; its modes: atomic, finish-then-fetch" in out and len(out) <= 101
        out = _one_line_error([*cmd, "-s", "stale-sweep"])
        assert "has no mode split (the default); give one of its modes: --atomic" in out


def test_only_ascii_digits_and_letters_in_schedules() -> None:
    with pytest.raises(ScheduleError, match="is not ACTOR or ACTOR\\*COUNT"):
        parse_schedule("v1:W1*\u0663")  # ARABIC-INDIC DIGIT THREE


@pytest.mark.parametrize(
    ("url", "words", "code"),
    [
        ("redis://127.0.0.1:6379/abc", "the database 'abc' is not a number", ExitCode.USAGE),
        ("redis://:@/", "no host", ExitCode.USAGE),
        ("redis://127.0.0.1:notaport/0", "malformed Redis URL", ExitCode.USAGE),
        ("foo", "malformed Redis URL 'foo'", ExitCode.USAGE),
        ("redis://127.0.0.1:6379/0?foo=1", "unknown option foo", ExitCode.USAGE),
        ("redis://127.0.0.1:6379/0?socket_timeout=abc", "Invalid value for 'socket_timeout'", ExitCode.USAGE),
        # an unreachable server is an infrastructure error (exit 4), no longer a usage error (2)
        ("redis://127.0.0.1:1/0", "cannot reach Redis at redis://127.0.0.1:1/0", ExitCode.INFRASTRUCTURE),
    ],
)
def test_bad_redis_urls(url: str, words: str, code: ExitCode) -> None:
    with pytest.raises(BackendError, match=words):
        connect(url)
    assert words in _one_line_error(["simulate", "--redis", url], code)


def test_a_bad_url_in_the_environment_says_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMQLAB_REDIS_URL", "garbage")
    with pytest.raises(BackendError, match=r"\(from \$EMQLAB_REDIS_URL\)"):
        connect("live")


def test_replay_with_too_long_a_schedule_names_the_step_count() -> None:
    out = _one_line_error(["replay", "v1:W1*30", "--split"])
    assert re.search(r"actor W1 has no step left at step \d+ \(it took all its \d+ steps", out), out


@pytest.mark.parametrize(("schedule", "words"), [
    ("v1:", "bad schedule 'v1:': no steps"),
    ("v1: ", "bad schedule 'v1: ': no steps"),
    (" V1 :\t", "bad schedule ' V1 :\\t': no steps"),
    ("", "replay needs a schedule string"),
    (" ", "bad schedule ' ': expected 'v1:' then actor ids"),
])
def test_an_empty_schedule_is_a_usage_error_not_a_verdict(schedule: str, words: str) -> None:
    """Issue 25, item 7: ``replay 'v1:'`` ran the actors one after another and said "holds". A schedule of
    no steps is a usage error, before any run, in text and JSON alike, and from Python too."""
    from emqlab.engine.scenario import load
    from emqlab.explore import explore

    for extra in ([], ["--json"], ["--expect", "none"], ["--fail-on-anomaly"]):
        out = _one_line_error(["replay", schedule, "--split", *extra])
        assert out.startswith(f"error: {words}") and "verdict" not in out, out
    with pytest.raises(ScheduleError, match=re.escape(words)):
        explore(load("stalled-finish"), "split", strategy="replay", schedule=schedule)


@pytest.mark.parametrize("args", [
    ["sweep-rtt", "--rtt", "nan"],
    ["sweep-rtt", "--rtt", "inf"],
    ["sweep-rtt", "--processing", "inf"],
    ["sweep-rtt", "--processing", "1e12"],
    ["sweep-rtt", "--jitter", "inf"],
    ["sweep-rtt", "--workers", "100000"],
    ["sweep-rtt", "--out", "/nonexistent/dir/x.png"],
    ["sweep-rtt", "--csv", "/nonexistent/dir/x.csv"],
])
def test_sweep_rtt_refuses_unusable_numbers_and_paths_at_once(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def test_student_and_grade_paths(tmp_path: Path) -> None:
    src = "notebooks/assignments/a1-double-placement.ipynb"
    out = _one_line_error(["student", src, "/nonexistent/dir/a1.ipynb"])
    assert "the folder /nonexistent/dir does not exist" in out
    res = CliRunner().invoke(main, ["student", src, f"{tmp_path}/out/"])
    assert res.exit_code == 0 and (tmp_path / "out" / "a1-double-placement.ipynb").is_file()
    text = tmp_path / "notes.txt"
    text.write_text("not a notebook")
    assert CliRunner().invoke(main, ["grade", str(text)]).exit_code == 2
    assert CliRunner().invoke(main, ["grade", str(tmp_path / "missing.ipynb")]).exit_code == 2


def test_a_cell_that_never_ends_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notebook_run, "CELL_TIMEOUT_S", 1)
    nb = {"cells": [{"cell_type": "code", "source": "while True:\n    pass\n", "metadata": {}},
                    {"cell_type": "code", "source": "after = 1\n", "metadata": {}}]}
    t0 = time.monotonic()
    run = notebook_run.run_notebook(nb)
    assert time.monotonic() - t0 < 10
    assert run.errors and run.errors[0].error.startswith("CellTimeout")
    assert "used more than 1 s of CPU time" in run.errors[0].error
    assert run.namespace["after"] == 1  # the run went on


def test_a_cell_is_timed_by_its_cpu_time_and_a_waiting_one_by_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time a cell spends off the CPU (on a busy grading machine: waiting for it) does not count against its
    limit; a cell that only waits is stopped after CELL_WALL_FACTOR times the limit."""
    monkeypatch.setattr(notebook_run, "CELL_TIMEOUT_S", 1)
    nb = {"cells": [{"cell_type": "code", "source": "import time\ntime.sleep(1.5)\nslept = 1\n", "metadata": {}},
                    {"cell_type": "code", "source": "time.sleep(60)\n", "metadata": {}}]}
    t0 = time.monotonic()
    run = notebook_run.run_notebook(nb)
    assert time.monotonic() - t0 < 30
    assert run.namespace["slept"] == 1
    assert [e.cell for e in run.errors] == [2]
    want = f"ran longer than {notebook_run.CELL_WALL_FACTOR} s"
    assert run.errors[0].error.startswith("CellTimeout") and want in run.errors[0].error


def test_bullmq_script_set_runs_from_the_cli() -> None:
    res = CliRunner().invoke(main, ["simulate", "--split", "--scripts", "bullmq", "--json"])
    assert res.exit_code == 0, res.output
    # BullMQ's moveToFinished re-checks LREM's count after its writes began: split, it answers -3 instead
    # of filing the job twice (PROTOCOL.md §11)
    assert '"finish:1:-3"' in res.output


@pytest.mark.live
def test_sigterm_on_a_live_run_deletes_its_keys(tmp_path: Path) -> None:
    conn = backend_conn("live")
    # a queue name of this test's own, so that other runs on the shared server (a parallel test session)
    # cannot be mistaken for this one's keys
    base = f"sig{secrets.token_hex(4)}"
    shipped = Path(__file__).resolve().parents[1] / "emqlab" / "scenarios" / "two-workers.yaml"
    scenario_file = tmp_path / "two-workers.yaml"
    scenario_file.write_text(shipped.read_text(encoding="utf-8").replace("name: two-workers",
                                                                        f"name: two-workers\nqueue: {base}"))

    def ours() -> set[bytes]:
        return set(conn.scan_iter(match=f"emq:{{{base}-*", count=1000))

    before = ours()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # stderr to a file: a pipe nobody reads could fill and stall the run; and on a failure it says why
    err_path = tmp_path / "stderr.txt"
    started = time.monotonic()
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate", "--split", "--scenario",
             str(scenario_file), "--preemptions", "2", "--redis", "live"],
            stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = started + 60
        seen: set[bytes] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            seen = ours() - before
            if seen:
                break
            time.sleep(0.02)
        assert seen, (f"the run wrote no key in {time.monotonic() - started:.1f} s (status {proc.poll()}); "
                      f"its stderr: {err_path.read_text(errors='replace')[-2000:]!r}")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err_path.read_text(errors="replace")[-2000:]
    assert ours() - before == set()


def test_options_that_do_not_apply_are_refused() -> None:
    assert "--runs only applies to --strategy random or pct" in _one_line_error(["simulate", "--runs", "5"])
    assert "--runs, --seed only apply to --strategy random" in _one_line_error(
        ["simulate", "--runs", "5", "--seed", "3"])
    assert "only apply to --strategy exhaustive" in _one_line_error(
        ["simulate", "--strategy", "pct", "--preemptions", "1"])


def test_two_finish_modes_at_once_are_refused() -> None:
    res = subprocess.run([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate", "--split",
                          "--atomic"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "choose one finish mode, not --split and --atomic" in res.stderr


# -- verdicts and exit codes ------------------------------------------------------------------------------------


def test_the_docs_exit_code_table_is_the_enum() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    between = re.search(r"<!-- emqlab:exit-codes -->\n(.*?)\n<!-- /emqlab:exit-codes -->", text, re.S)
    assert between is not None, "docs/cli.md lost its exit-code table markers"
    assert between.group(1) == markdown_table()
    assert len({c.value for c in ExitCode}) == len(ExitCode)  # distinct codes


def test_main_help_lists_every_exit_code() -> None:
    out = CliRunner().invoke(main, ["--help"]).output
    for c in ExitCode:
        assert re.search(rf"\b{c.value}\s+{c.name.lower()}\b", out), c


@pytest.mark.parametrize(("args", "code", "verdict"), [
    (["simulate", "--split"], ExitCode.HOLDS, "fails"),  # no check asked: a completed run exits 0
    (["simulate", "--split", "--fail-on-anomaly"], ExitCode.FAILS, "fails"),
    (["simulate", "--atomic", "--fail-on-anomaly"], ExitCode.HOLDS, "holds"),
    (["simulate", "--atomic", "--expect", "none"], ExitCode.HOLDS, "holds"),
    (["simulate", "--split", "--expect", "none"], ExitCode.FAILS, "fails"),
    (["simulate", "--split", "--expect", "double-placement"], ExitCode.HOLDS, "fails"),
    (["simulate", "--atomic", "--expect", "double-placement"], ExitCode.FAILS, "holds"),
    (["simulate", "--split", "--expect", "double-placement", "--expect", "lost-job"], ExitCode.FAILS, "fails"),
    (["simulate", "--atomic", "--strategy", "pct", "--runs", "5", "--fail-on-anomaly"], ExitCode.INCONCLUSIVE,
     "inconclusive"),
    (["simulate", "--atomic", "--strategy", "random", "--runs", "5", "--expect", "none"], ExitCode.INCONCLUSIVE,
     "inconclusive"),
    (["simulate", "--split", "--strategy", "pct", "--runs", "200", "--expect", "double-placement"], ExitCode.HOLDS,
     "fails"),
    (["simulate", "--atomic", "--strategy", "pct", "--runs", "5", "--expect", "double-placement"],
     ExitCode.INCONCLUSIVE, "inconclusive"),
    (["replay", "v1:W1*9.S1", "--split", "--expect", "double-placement"], ExitCode.HOLDS, "fails"),
    (["replay", "v1:W1*9.S1", "--split", "--fail-on-anomaly"], ExitCode.FAILS, "fails"),
    (["replay", "v1:S1", "--split", "--fail-on-anomaly"], ExitCode.HOLDS, "holds"),
])
def test_verdicts_and_their_exit_codes(args: list[str], code: ExitCode, verdict: str) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == code, res.output
    assert f"verdict: {verdict} — " in res.output
    js = CliRunner().invoke(main, [*args, "--json"])
    assert js.exit_code == code, js.output
    data = __import__("json").loads(js.stdout)
    assert data["verdict"] == verdict and data["verdict_detail"]["exit_code"] == code


def test_pct_inconclusive_states_its_bound_and_depth() -> None:
    res = CliRunner().invoke(main, ["simulate", "--atomic", "--strategy", "pct", "--runs", "5", "--depth", "2"])
    out = " ".join(res.output.split())
    assert res.exit_code == 0
    assert "verdict: inconclusive" in out and "depth <= 2" in out and "probability >= 1/(" in out
    assert "missed by all 5 runs with probability <=" in out


def test_a_bounded_exhaustive_run_holds_at_its_bound() -> None:
    res = CliRunner().invoke(main, ["simulate", "--atomic", "--preemptions", "1",
                                    "--expect", "none"])
    assert res.exit_code == ExitCode.HOLDS, res.output
    assert "with at most 1 preemption(s) (complete exploration at that bound)" in " ".join(res.output.split())


def test_expect_none_with_a_kind_is_a_usage_error() -> None:
    assert "--expect none cannot be combined" in _one_line_error(
        ["simulate", "--expect", "none", "--expect", "lost-job"])


def test_an_internal_error_is_one_line_unless_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    import emqlab.ui.cli.explore as cli_explore

    def boom(*_a: object, **_k: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(cli_explore, "_load", boom)
    res = CliRunner().invoke(main, ["simulate", "--split"])
    assert res.exit_code == ExitCode.INTERNAL
    assert res.stderr.startswith("internal error: KeyError: 'a bug' — a bug in emqlab")
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr and "--debug" in res.stderr
    for args, env in ((["--debug", "simulate", "--split"], {}), (["simulate", "--split"], {"EMQLAB_DEBUG": "1"})):
        res = CliRunner().invoke(main, args, env=env)
        assert res.exit_code == ExitCode.INTERNAL
        assert "Traceback" in res.stderr and "internal error: KeyError" in res.stderr


def test_an_unreachable_server_is_an_infrastructure_error_in_a_subprocess() -> None:
    res = subprocess.run([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", "simulate", "--redis",
                          "redis://127.0.0.1:1/0"], capture_output=True, text=True, timeout=60)
    assert res.returncode == ExitCode.INFRASTRUCTURE, res.stderr
    assert res.stderr.startswith("error: cannot reach Redis") and res.stderr.count("\n") == 1


@pytest.mark.parametrize(("args", "words"), [
    (["simulate", "--strategy", "pct", "--runs", "100001"], "--runs"),
    (["simulate", "--strategy", "pct", "--depth", "11"], "--depth"),
    (["simulate", "--preemptions", "1001"], "--preemptions"),
    (["simulate", "--strategy", "pct", "--seed", str(2**64)], "--seed"),
    (["sweep-rtt", "--jobs", "1000001"], "--jobs"),
    (["sweep-rtt", "--lock", "1e300"], "--lock"),
])
def test_option_upper_bounds(args: list[str], words: str) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == ExitCode.USAGE, res.output
    assert f"Invalid value for '{words}'" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("args", [["scenarios"], ["scenarios", "--json"], ["simulate", "--split"]])
def test_a_reader_that_closes_the_pipe_ends_the_command_with_status_0(args: list[str]) -> None:
    """``emqlab scenarios | head``: the reader has left (here before the first write, so every write meets
    a closed pipe); nothing failed, so the status is 0 — not rich's 1, which the exit-code table calls
    *fails* — and nothing is printed on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-c", "from emqlab.ui.entry import entry; entry()", *args],
                             stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert res.returncode == 0 and res.stderr == b"", (res.returncode, res.stderr.decode())


def test_every_command_is_in_the_readmes_table() -> None:
    from emqlab.ui.cli import COMMANDS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `emqlab ")]
    for name in COMMANDS:
        assert any(line.startswith(f"| `emqlab {name}") for line in table), name


def test_the_scenario_list_is_one_line_per_scenario_and_long_wraps_under_its_indent() -> None:
    from emqlab.engine.scenario import shipped_names

    res = CliRunner().invoke(main, ["scenarios"])
    lines = res.output.splitlines()
    assert res.exit_code == 0 and len(lines) == len(shipped_names()) + 1
    assert all(len(line) <= 100 for line in lines)
    long = CliRunner().invoke(main, ["scenarios", "--long"]).output.splitlines()
    assert all(len(line) <= 100 for line in long)
    # a wrapped lesson goes on indented, never at the left margin
    body = [line for line in long[:-1] if line and not line.startswith(" ")]
    assert len(body) == len(shipped_names())  # only the name lines start at the margin


def test_the_json_verdict_points_at_its_witnesses_not_at_text_above() -> None:
    import json

    res = CliRunner().invoke(main, ["simulate", "--split", "--json"])
    detail = json.loads(res.output)["verdict_detail"]
    assert detail["reason"].endswith('witness in "witnesses"') and "above" not in detail["reason"]
    text = CliRunner().invoke(main, ["simulate", "--split"]).output
    assert "witness above" in text


def test_scenarios_by_project_filters_and_refuses_an_unknown_project(tmp_path: Path) -> None:
    import json

    from emqlab.engine.scenario import ScenarioError, load, shipped

    projects = {s.project for s in shipped()}
    one = sorted(projects)[0]
    res = CliRunner().invoke(main, ["scenarios", "--json", "--project", one])
    got = json.loads(res.output)
    assert res.exit_code == 0 and got and {s["project"] for s in got} == {one}
    assert len(got) == sum(s.project == one for s in shipped())
    bad = CliRunner().invoke(main, ["scenarios", "--project", "no-such-queue"])
    assert bad.exit_code == 2 and "no scenario of 'no-such-queue'" in bad.output and one in bad.output
    # a file's project: its package's name, or the line that says otherwise
    f = tmp_path / "p.yaml"
    f.write_text("name: p\nproject: Not A Name\nactors: [{id: W1, kind: worker}]\n")
    with pytest.raises(ScenarioError, match="project"):
        load(f)
    f.write_text(f.read_text().replace("Not A Name", "rq"))
    assert load(f).project == "rq"
