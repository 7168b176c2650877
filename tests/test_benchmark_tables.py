"""The benchmarks' page writer (``benchmarks/_tables.py``): a benchmark's newest table takes the place of its
older ones, everything else on the page stays as it was, byte for byte."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tables():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("_tables", ROOT / "benchmarks" / "_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGE = ("# B\n\nintro\n\n## Measured tables\n\n### A (2026-01-01, x86_64, Python 3.11.7)\n\n`a`\n\nold A\n\nprose\n\n"
        "### B (2026-01-01, x86_64, Python 3.11.7, idle machine)\n\n`b`\n\nB\n\n<!-- x:start -->\n## X\n\n"
        "<!-- x:end -->\n\n### A (2026-01-02, x86_64, Python 3.11.7)\n\n`a`\n\nA2\n")


def test_a_new_table_replaces_every_older_one_of_its_benchmark(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE, encoding="utf-8")
    tables = _tables()
    assert "".join(chunk for _t, chunk in tables.sections(PAGE)) == PAGE
    tables.write_table(page, "A", "python a.py", "| new |")
    text = page.read_text(encoding="utf-8")
    assert "old A" not in text and "A2" not in text and "prose" not in text
    assert text.count("### A (") == 1 and text.index("### A (") < text.index("### B (")  # where the first was
    assert "### B (2026-01-01, x86_64, Python 3.11.7, idle machine)\n\n`b`\n\nB\n\n<!-- x:start -->\n## X\n\n" \
           "<!-- x:end -->\n" in text
    tables.write_table(page, "C", "python c.py", "| c |")
    assert page.read_text(encoding="utf-8").endswith("`python c.py`\n\n| c |\n")


def test_the_page_holds_one_table_per_benchmark() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    titles = re.findall(r"^### (.*) \(\d{4}-\d{2}-\d{2}, ", page, re.M)
    assert len(titles) == len(set(titles)), sorted(t for t in titles if titles.count(t) > 1)
