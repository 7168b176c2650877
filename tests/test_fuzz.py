"""Property-based fuzzing of every input emqlab reads: schedule strings, scenario files (mutations of the
shipped ones), CLI option values, notebooks and Redis URLs.

The invariant everywhere: a one-line error (the input's own error class, or a click usage error) or a
result — never a traceback, and never an unbounded expansion (the YAML alias bomb is refused before any
node is built). Hypothesis runs derandomized with a fixed example budget per property, without an example
database, so the suite is deterministic and takes a bounded time.
"""

from __future__ import annotations

import copy
import json
import random
import re
import tracemalloc
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqlab.backend.connect import BackendError, connect, url_secrets
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import ScenarioError, loads, shipped_names, shipped_path
from emqlab.explore.checked import ScheduleError, parse_schedule
from emqlab.protocol.verdict import ExitCode
from emqlab.teaching import grading
from emqlab.ui.cli import main


def fuzz(examples: int) -> settings:
    """Deterministic (derandomized, no example database) with a fixed example budget."""
    return settings(derandomize=True, database=None, deadline=None, print_blob=False, max_examples=examples,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = {n: shipped_path(n).read_text(encoding="utf-8") for n in shipped_names()}  # type: ignore[union-attr]
NOTEBOOK = ROOT / "notebooks" / "assignments" / "a1-double-placement.ipynb"


def one_line(message: str) -> None:
    assert message and "\n" not in message.strip() and "Traceback" not in message, message


# -- schedule strings -----------------------------------------------------------------------------------------

_SCHEDULE_CHARS = st.sampled_from(list("vV1:.*WSL2 09x\t-\u0663é*."))


@fuzz(300)
@given(st.one_of(
    st.text(_SCHEDULE_CHARS, max_size=40),
    st.builds(lambda parts: "v1:" + ".".join(parts),
              st.lists(st.builds(lambda a, n: a + (f"*{n}" if n is not None else ""),
                                 st.sampled_from(["W1", "S1", "L1", "w1", "Q9", "", "W"]),
                                 st.one_of(st.none(), st.integers(-3, 10**25))), max_size=6)),
    st.text(max_size=30),
))
def test_schedule_strings_parse_or_give_one_line(text: str) -> None:
    try:
        steps = parse_schedule(text, ["W1", "S1"])
    except ScheduleError as e:
        one_line(str(e))
        return
    assert len(steps) <= 100_000 and set(steps) <= {"W1", "S1"}


@fuzz(25)
@given(st.builds(lambda parts: "v1:" + ".".join(parts),
                 st.lists(st.builds(lambda a, n: f"{a}*{n}", st.sampled_from(["W1", "S1"]), st.integers(1, 12)),
                          min_size=1, max_size=4)))
def test_replay_of_any_schedule_is_a_result_or_one_line(schedule: str) -> None:
    res = CliRunner().invoke(main, ["replay", schedule, "--split"])
    if res.exit_code == 0:
        assert "verdict: " in res.output
    else:
        assert res.exit_code == ExitCode.USAGE, res.output
        one_line(res.output)


# -- scenario files ---------------------------------------------------------------------------------------------

#: values that crashed the loader or a run before (dates, sets, binary, tags, infinities, huge numbers, deep
#: nesting, aliases), and ordinary ones
_NASTY = ["2024-01-01", "2024-01-01T10:00:00Z", "!!set {a, b}", "!!binary aGVsbG8=", "!!python/object:os.system x",
          ".inf", "-.inf", ".nan", "99999999999999999999999", "-1", "0", "1", "3", "1e400", "~", "null", "true",
          "no", "'[bold]x[/]'", "\"a}b\"", "[1, [2, [3]]]", "{}", "[]", "{count: x}", "{count: 2, age: 10}",
          "[" * 60 + "]" * 60, "&a [x]", "*a", "!custom 5", "{a: *b}", "{? [a] : b}", "\"\"", "'1'", "\"\\x00\"",
          "12:30:00", "0x1F", "0o17", "1_000", "'W1'", "[W1, S1]", "{<<: {a: 1}}"]

_SCALAR = re.compile(r"(?<=: )([^,{}\[\]\n]+)|(?<=\[)([^,\[\]\n]+)(?=[,\]])")


def _mutate(text: str, rng: random.Random, n: int) -> str:
    lines = text.split("\n")
    for _ in range(n):
        op = rng.randrange(6)
        i = rng.randrange(len(lines))
        if op == 0:  # replace one scalar with a nasty value
            spots = list(_SCALAR.finditer(lines[i]))
            if spots:
                m = rng.choice(spots)
                lines[i] = lines[i][: m.start()] + rng.choice(_NASTY) + lines[i][m.end():]
        elif op == 1:
            del lines[i]
            lines = lines or [""]
        elif op == 2:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 3 and lines[i]:  # flip one character
            j = rng.randrange(len(lines[i]))
            lines[i] = lines[i][:j] + rng.choice(list(":-[]{}&*!|>'\" \t#,?1aZ")) + lines[i][j + 1:]
        elif op == 4:  # a new key with a nasty value, at the line's indentation
            indent = len(lines[i]) - len(lines[i].lstrip())
            key = rng.choice(["data", "value", "keep_jobs", "attempts", "delay", "priority", "jobs", "runs",
                              "preemptions", "renewals", "fetch_attempts", "max_stalled", "backoff", "fields"])
            lines.insert(i, " " * indent + f"{key}: {rng.choice(_NASTY)}")
        else:  # indent or dedent
            lines[i] = ("  " + lines[i]) if rng.random() < 0.5 else lines[i][2:]
    return "\n".join(lines)


@fuzz(400)
@given(st.sampled_from(sorted(SHIPPED)), st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_mutated_scenarios_load_or_give_one_line(name: str, seed: int, n: int) -> None:
    text = _mutate(SHIPPED[name], random.Random(seed), n)
    try:
        sc = loads(text, f"{name}.yaml")
    except ScenarioError as e:
        one_line(str(e))
        assert str(e).startswith(f"{name}.yaml:"), e
        return
    json.dumps([j.data for j in sc.jobs.values()] + [a.value for a in sc.actors])  # JSON data only


@fuzz(60)
@given(st.sampled_from(sorted(SHIPPED)), st.integers(0, 2**32 - 1))
def test_a_mutated_scenario_that_loads_also_runs(name: str, seed: int) -> None:
    """One default run (no preemption) of each mutation that loads: a result or the runner's one-line error."""
    text = _mutate(SHIPPED[name], random.Random(seed), 1)
    try:
        sc = loads(text, f"{name}.yaml")
    except ScenarioError:
        return
    for mode in sc.modes[:1]:
        try:
            with Runner(sc, mode) as r:
                r.run(max_steps=2_000)
        except (ScenarioError, ScheduleError, ValueError) as e:
            one_line(str(e))


def test_the_alias_bomb_is_refused_before_expansion() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{b}: &{b} [" + ", ".join([f"*{a}"] * 9) + "]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))
    assert len(bomb) < 800
    tracemalloc.start()
    try:
        with pytest.raises(ScenarioError, match=r"^<scenario>:2: aliases \(\*a\) are not supported"):
            loads(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # expanded, it would be 9^9 nodes: gigabytes


def test_size_and_depth_limits(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="larger than 1,000,000 bytes"):
        loads("# " + "x" * 1_000_001)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * 1_000_001)
    res = CliRunner().invoke(main, ["simulate", "--scenario", str(big)])
    assert res.exit_code == ExitCode.USAGE and "larger than" in res.output
    deep = "name: x\nactors: []\njobs:\n  '1': {data: " + "[" * 500 + "]" * 500 + "}\n"
    with pytest.raises(ScenarioError, match=r"^<scenario>:4: nested more than 40 levels deep"):
        loads(deep)


@pytest.mark.parametrize(("old", "new", "words"), [
    ("data: {to: ada@example.com}", "data: {to: 2024-01-01}", "jobs.1.data.to: expected JSON data"),
    ("data: {to: ada@example.com}", "data: !!set {a, b}", "jobs.1.data: expected JSON data, got a set"),
    ("value: {sent: true}", "value: 2024-01-01", "actors[0].value: expected JSON data"),
    ("value: {sent: true}", "value: {sent: true}, keep_jobs: nope", "actors[0].keep_jobs: expected true, false"),
    ("value: {sent: true}", "value: {sent: true}, keep_jobs: [1]", "actors[0].keep_jobs: expected true, false"),
    ("data: {to: ada@example.com}", "data: {}, delay: .inf", "jobs.1.delay: expected an integer, got inf"),
    ("data: {to: ada@example.com}", "data: {}, attempts: 99999999999999999999", "jobs.1.attempts: must be <="),
    ("value: {sent: true}", "value: {sent: true}, attempts: 99999999999999999999", "actors[0].attempts: must be"),
    ("value: {sent: true}", "value: {sent: true}, jobs: 1000000000", "actors[0].jobs: must be <= 100"),
    ('active: ["1"]', 'delayed: {"1": .inf}', "state.delayed.1: expected a finite number"),
    ("max_stalled: 1", "max_stalled: 1, runs: 100000000", "actors[1].runs: must be <= 100"),
    ("data: {to: ada@example.com}", "data: {to: .nan}", "JSON has no infinity or NaN"),
    ("data: {to: ada@example.com}", "data: {to: !!binary aGVsbG8=}", "expected JSON data"),
    ("value: {sent: true}", "value: !!python/object:os.system x", "cannot read the value"),
])
def test_each_crashing_scenario_input_is_one_line(old: str, new: str, words: str) -> None:
    text = SHIPPED["stalled-finish"]
    assert text.count(old) == 1
    with pytest.raises(ScenarioError) as info:
        loads(text.replace(old, new), "stalled-finish.yaml")
    one_line(str(info.value))
    assert str(info.value).startswith("stalled-finish.yaml:") and words in str(info.value), info.value


# -- CLI option values ------------------------------------------------------------------------------------------

_NUMBERS = st.one_of(st.integers(-10, 10**6).map(str), st.integers(-(2**70), 2**70).map(str),
                     st.sampled_from(["nan", "inf", "-inf", "1e400", "", "x", "0x10", "1.5", " 3", "٣", "1_0"]))


def _parse(command: click.Command, args: list[str]) -> None:
    with command.make_context(command.name or "x", args, parent=click.Context(main)) as ctx:
        assert ctx.params is not None


@fuzz(300)
@given(st.lists(st.tuples(st.sampled_from(["--runs", "--depth", "--seed", "--preemptions", "--strategy",
                                           "--scenario", "--scripts", "--expect"]),
                          st.one_of(_NUMBERS, st.sampled_from(["pct", "random", "exhaustive", "none",
                                                               "double-placement", "bogus"]))), max_size=4))
def test_simulate_options_parse_or_give_a_usage_error(pairs: list[tuple[str, str]]) -> None:
    args = [x for pair in pairs for x in pair]
    cmd = main.get_command(None, "simulate")
    try:
        _parse(cmd, args)
    except click.UsageError as e:
        one_line(e.format_message())
        return
    except click.exceptions.Exit:
        return
    with cmd.make_context("simulate", args, parent=click.Context(main)) as ctx:
        p = ctx.params
        assert 1 <= p["runs"] <= 100_000 and 1 <= p["depth"] <= 10
        assert p["preemptions"] is None or 0 <= p["preemptions"] <= 1000


@fuzz(200)
@given(st.lists(st.tuples(st.sampled_from(["--jobs", "--workers", "--processing", "--interval", "--jitter",
                                           "--lock", "--rtt", "--seed", "--modes"]), _NUMBERS), max_size=4))
def test_sweep_rtt_options_parse_or_give_a_usage_error(pairs: list[tuple[str, str]]) -> None:
    args = [x for pair in pairs for x in pair]
    try:
        _parse(main.get_command(None, "sweep-rtt"), args)
    except click.UsageError as e:
        one_line(e.format_message())


@pytest.mark.parametrize("args", [
    ["simulate", "--strategy", "pct", "--runs", "999999999999999999999"],
    ["simulate", "--strategy", "pct", "--depth", "1000000"],
    ["simulate", "--preemptions", "99999999999"],
    ["sweep-rtt", "--jobs", "10000000000"],
    ["simulate", "--redis", "redis://127.0.0.1:6379/0?foo=1"],
])
def test_huge_or_unknown_values_are_refused_at_once(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == ExitCode.USAGE, res.output
    assert "Traceback" not in res.output


# -- notebooks --------------------------------------------------------------------------------------------------

_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False),
                               st.text(max_size=5)),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                     max_leaves=8)


def _paths(x: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(x, dict):
        for k, v in x.items():
            out += _paths(v, (*at, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out += _paths(v, (*at, i))
    return out


BASE_NB = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
BASE_PATHS = [p for p in _paths(BASE_NB) if p and p[0] in ("cells", "metadata") and len(p) <= 5]


@fuzz(150)
@given(st.lists(st.tuples(st.sampled_from(BASE_PATHS), _JSON), min_size=1, max_size=3))
def test_mutated_notebooks_read_or_give_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                 edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    nb = copy.deepcopy(BASE_NB)
    for path, value in edits:
        target: Any = nb
        try:
            for k in path[:-1]:
                target = target[k]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    f = tmp_path_factory.mktemp("nb") / "a1.ipynb"
    f.write_text(json.dumps(nb))
    try:
        read = grading.read_notebook(f)
    except grading.GradingError as e:
        one_line(str(e))
        return
    # a notebook that reads is one every cell accessor can look at
    for cell in read["cells"]:
        grading.grade_id(cell), grading.is_grade(cell), grading.is_solution(cell), grading.is_locked(cell)
    list(grading.graded_cells(read))
    grading.assignment_of(read)
    try:
        grading.student_version(read)
    except grading.GradingError as e:
        one_line(str(e))


@pytest.mark.parametrize(("edit", "words"), [
    (lambda nb: nb["cells"][0].__setitem__("source", 5), "cells[0].source"),
    (lambda nb: nb["cells"][0].__setitem__("source", ["a", 5]), "cells[0].source"),
    (lambda nb: nb["cells"].__setitem__(0, "a cell"), "cells[0]"),
    (lambda nb: nb["cells"][0].__setitem__("metadata", []), "cells[0].metadata"),
    (lambda nb: nb.__setitem__("metadata", []), "metadata"),
    (lambda nb: nb["metadata"].__setitem__("emqlab", {"assignment": ["a1"]}), "metadata.emqlab.assignment"),
])
def test_each_crashing_notebook_is_one_line_from_the_cli(tmp_path: Path, edit: Any, words: str) -> None:
    nb = copy.deepcopy(BASE_NB)
    edit(nb)
    f = tmp_path / "a1.ipynb"
    f.write_text(json.dumps(nb))
    res = CliRunner().invoke(main, ["grade", str(f)])
    assert res.exit_code == ExitCode.USAGE, res.output
    one_line(res.output)
    assert words in res.output


def test_deeply_nested_json_is_refused_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "deep.ipynb"
    f.write_text("[" * 100_000)
    with pytest.raises(grading.GradingError, match="nested more than 100 levels"):
        grading.read_notebook(f)
    res = CliRunner().invoke(main, ["grade", str(f)])
    assert res.exit_code == ExitCode.USAGE and "Traceback" not in res.output


# -- Redis URLs -------------------------------------------------------------------------------------------------

_URL_PART = st.text(st.sampled_from(list("abc019:/@?&=#[]%.-_ ")), max_size=12)


@fuzz(300)
@given(st.sampled_from(["redis://", "rediss://", "unix://", "http://", "", "redis:", "redis:///"]),
       st.text(st.sampled_from(list("Zq7@%/:!")), min_size=1, max_size=8), _URL_PART, _URL_PART,
       st.sampled_from(["", "?db=1", "?foo=1", "?socket_timeout=x", "?protocol=3", "?db=", "?password=Zq7Zq7"]))
def test_urls_connect_lazily_or_give_one_line_without_the_password(scheme: str, password: str, host: str,
                                                                   tail: str, query: str) -> None:
    url = f"{scheme}user:Zq7{password}@{host}{tail}{query}"
    secrets = [s for s in url_secrets(url) if len(s) >= 3]
    try:
        c = connect(url, ping=False)
    except BackendError as e:
        one_line(str(e))
        for s in secrets:
            assert s not in str(e), (url, str(e))
        return
    c.close()


def test_yaml_loader_is_safe_for_python_tags() -> None:
    with pytest.raises(ScenarioError, match="cannot read the value"):
        loads("name: !!python/object:os.system x\nactors: []\n")
    assert yaml.__version__  # PyYAML, the pure-Python composer with aliases refused


@fuzz(10)
@given(st.text(st.sampled_from(list("[]/bold red:\\ab")), min_size=1, max_size=12))
def test_scenario_text_with_markup_is_printed_as_text(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    """A title or lesson is the author's text, never console markup (``[/]`` once made rich raise)."""
    quoted = json.dumps(text)
    src = SHIPPED["stalled-finish"].replace("title: A finish racing the recovery sweep", f"title: {quoted}")
    src = re.sub(r"lesson: >\n(?:  .*\n)+", lambda _m: f"lesson: {quoted}\n", src)
    f = tmp_path_factory.mktemp("sc") / "markup.yaml"
    f.write_text(src)
    assert loads(src, "markup.yaml").title == text
    res = CliRunner().invoke(main, ["simulate", "--atomic", "--scenario", str(f)])
    assert res.exit_code == 0, res.output
    assert text.strip() in res.output or not text.strip()
