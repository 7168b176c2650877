"""Per-actor ``script:`` (issue 10 item 3): one actor runs a variant of a script (the historical bug) while the
others keep the fix, in the same run; bad paths are one-line errors naming the file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from emqlab.engine.runner import Runner
from emqlab.engine.scenario import ScenarioError, load, loads, shipped_path
from emqlab.explore import explore

VARIANT = "variants/no-active-check"


def with_script(actor: str, script: str) -> str:
    path = shipped_path("cancel-active")
    assert path is not None
    text = path.read_text()
    line = next(x for x in text.splitlines() if x.strip().startswith(f"- {{id: {actor},"))
    text = text.replace(line, line.rstrip("}") + f", script: {script}}}")
    return text.split("\nexpect:")[0] + "\n"


def test_a_variant_for_one_actor_shows_the_bug_even_atomic() -> None:
    fixed = explore(load("cancel-active"), "atomic")
    assert fixed.anomaly_kinds == []
    buggy = explore(loads(with_script("C1", VARIANT), "c.yaml"), "atomic")
    assert buggy.anomaly_kinds == ["double-placement"]  # the cancel writes `failed` without the active check
    h = buggy.witnesses["double-placement"]
    assert sorted(h.final.placements["1"]) == ["completed", "failed"]


def test_only_that_actor_runs_the_variant() -> None:
    sc = loads(with_script("C1", VARIANT), "c.yaml")
    with Runner(sc, "split") as r:
        assert set(r._actor_scripts) == {"C1"}
        mine = r._actor_scripts["C1"]["moveToFinished"].text
        assert mine != r.scripts["moveToFinished"].text and b"R5 left out" in mine
        # split, W1 runs the fixed script's LPOS check and C1 does not
        r.run()  # W1 to its end, then C1
        w1 = [s.op for s in r.steps if s.actor == "W1"]
        c1 = [s.op for s in r.steps if s.actor == "C1"]
        assert "LPOS" in w1 and "LPOS" not in c1


@pytest.mark.parametrize("script, words", [
    ("nope/none.lua", ["c.yaml:", "actors[1].script", "no script file or folder 'nope/none.lua'"]),
    ("moveToFinished-13.lua", ["actors[1].script"]),
])
def test_bad_scripts_are_one_line_errors(tmp_path: Path, script: str, words: list[str]) -> None:
    if script.endswith("-13.lua"):
        (tmp_path / script).write_text("return 0\n")
    path = tmp_path / "c.yaml"
    path.write_text(with_script("C1", script))
    with pytest.raises(ScenarioError) as e:
        load(path)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_a_script_that_does_not_compile(tmp_path: Path) -> None:
    (tmp_path / "moveToFinished-14.lua").write_text("if then\n")
    path = tmp_path / "c.yaml"
    path.write_text(with_script("C1", "moveToFinished-14.lua"))
    with pytest.raises(ScenarioError, match="actors\\[1\\].script"):
        load(path)
