"""docs/check-your-code.md's test blocks run as they are written, through the emqlab pytest plugin (a
block after ``<!-- test: NAME -->`` is a whole pytest test file), and the block stays ten lines or fewer."""

from __future__ import annotations

import re
from pathlib import Path

# imported here so that pytester's in-process runs (which drop the modules they import afterwards) share
# one copy of emqlab's modules and their classes
import emqlab.anomalies  # noqa: F401
import emqlab.api  # noqa: F401
import emqlab.pyactors  # noqa: F401
import emqlab.pytest_plugin  # noqa: F401
import emqlab.schedule  # noqa: F401
import pytest

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parent.parent / "docs" / "check-your-code.md"


def blocks() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- test: ([\w-]+) -->\n```python\n(.*?)```", text, flags=re.S))


def run_inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    """The user's test run with only emqlab's plugin (as the entry point loads it): the other installed
    plugins' start-up would dominate the time."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return pytester.runpytest_inprocess("-p", "emqlab.check.pytest_plugin", "-p", "no:cacheprovider", "-q")


def test_the_doc_has_the_max_stalled_count_test() -> None:
    code = blocks()["max-stalled-count"]
    assert len(code.strip().splitlines()) <= 10
    assert "max_stalled" in code and "failed" in code


@pytest.mark.parametrize("name", sorted(blocks()))
def test_doc_block_passes_under_pytest(name: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(**{f"test_{name.replace('-', '_')}": blocks()[name]})
    result = run_inner(pytester, monkeypatch)
    result.assert_outcomes(passed=1)


def test_a_failing_exploration_prints_the_witness_and_schedule(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_race="""
        def finish(r, q):
            k = q.keys
            if r.get(k.lock("1")) == b"W1:1":
                r.delete(k.lock("1"))
                r.srem(k.stalled, "1")
                r.lrem(k.active, 0, "1")
                r.zadd(k.completed, {"1": 1})

        def test_finish(emqlab_explore):
            run = emqlab_explore({"W1": finish, "S1": {"kind": "sweep"}},
                                 state={"active": ["1"], "stalled": ["1"]}, locks={"1": "W1"})
            run.assert_never("double-placement")
        """)
    result = run_inner(pytester, monkeypatch)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "double-placement in 1 of 6 interleavings" in out
    assert "schedule: v1:W1*2.S1.W1*3" in out and "<== double-placement" in out
