"""The sample outputs in README.md, docs/tutorial.md and docs/levels.md are the real output (issue 13, item 6).

A sample is a ```text block whose first line is a command, ``$ emqlab …``; the lines after it are what the
command prints on fakeredis at the default width. A line ``…`` in a sample stands for any run of lines the
sample leaves out (none, one or many); every other line must match the output's line exactly (trailing
spaces aside), in order.
"""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from emqlab.ui.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "tutorial.md", ROOT / "docs" / "levels.md"]
FENCE = re.compile(r"^```text\n(.*?)^```", re.M | re.S)
ELISION = "…"


def samples(path: Path) -> list[tuple[int, str, list[str]]]:
    """The samples in ``path``: (line number of the command, the command, the sample's output lines)."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        lines = m.group(1).rstrip("\n").split("\n")
        if lines and lines[0].startswith("$ emqlab "):
            out.append((text.count("\n", 0, m.start()) + 2, lines[0][2:], lines[1:]))
    return out


CASES = [(p, *s) for p in DOCS for s in samples(p)]


def matches(sample: list[str], output: list[str]) -> bool:
    """``output`` is ``sample`` with each ``…`` line standing for any run of lines (possibly none)."""
    want = [line.rstrip() for line in sample]
    got = [line.rstrip() for line in output]

    @cache
    def at(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i].strip() == ELISION:
            return any(at(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and want[i] == got[j] and at(i + 1, j + 1)

    return at(0, 0)


@cache
def output_of(command: str) -> str:
    words = shlex.split(command)
    assert words[0] == "emqlab"
    res = CliRunner().invoke(main, words[1:])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.output


def test_the_docs_have_samples() -> None:
    counts = {p.name: len(samples(p)) for p in DOCS}
    assert counts["README.md"] >= 1 and counts["tutorial.md"] >= 3, counts


@pytest.mark.parametrize(("path", "line", "command", "sample"), CASES,
                         ids=[f"{p.name}:{n}" for p, n, _, _ in CASES])
def test_sample_is_the_real_output(path: Path, line: int, command: str, sample: list[str]) -> None:
    output = output_of(command).splitlines()
    assert matches(sample, output), (
        f"{path.name}:{line}: the sample of `{command}` is not its output; the real output is:\n"
        + "\n".join(output))


def test_matching_rules() -> None:
    assert matches(["a", "…", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "…", "b"], ["a", "b"])
    assert matches(["…"], [])
    assert matches([" …", "x  "], ["y", "x"])
    assert not matches(["a", "b"], ["a", "b", "c"])
    assert not matches(["a", "…", "c"], ["a", "b"])
