"""Notebook 01 shows the race (issue 27, item 6): its outputs have the scheduler's witness, the because-sentence
and a timeline figure, and show Redis values as text, never as Python bytes reprs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01-read-decide-write.ipynb"


def test_notebook_one_shows_the_race_with_a_figure_and_readable_values() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ.setdefault("EMQLAB_FAST", "1")
    NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    texts, images = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + str(out.get("data", {}).get("text/plain", "")))
            images += "image/png" in out.get("data", {})
    text = "\n".join(texts)
    assert images >= 1
    assert "why: job 1 is in wait" in text and "because S1 ran after W1 cleared the lock" in text
    assert re.search(r"split: double-placement in \d+ of \d+ interleavings · atomic: no anomaly", text)
    assert not re.search(r"\bb'|\bb\"", text), [line for line in text.splitlines() if "b'" in line][:3]
