"""`emqlab workshop DIR` (issue 27, item 5): the students' copies without answers, the instructor's answer key
built from the engine's own winning runs, an agenda, a one-page handout (Markdown and PDF) whose 14 keys are
the protocol's, and slides with the figures; `emqlab grade DIR` hands back one feedback file per student."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from emqlab.protocol.keys import QueueKeys
from emqlab.teaching.levels import shipped_levels
from emqlab.teaching.workshop import write_workshop
from emqlab.ui.cli import main


def test_a_workshop_folder_from_the_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import functools

    from emqlab.ui import kit

    # the deck the command draws is the one the PDF is checked against below (made once: an exploration)
    monkeypatch.setattr(kit, "slides", functools.cache(kit.slides))
    out = tmp_path / "kit"
    res = CliRunner().invoke(main, ["workshop", str(out)])
    assert res.exit_code == 0, res.output
    students = sorted(p.name for p in (out / "students").iterdir())
    assert students == ["01-read-decide-write.ipynb", "02-interleavings.ipynb", "03-round-trips.ipynb",
                        "04-levels.ipynb", "a1-double-placement.ipynb", "a2-repair-finish.ipynb",
                        "a3-rate-vs-rtt.ipynb"]
    for nb in (out / "students").glob("a*.ipynb"):  # no solution, no hidden test in what students get
        text = nb.read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
        assert "raise NotImplementedError()" in text
        assert "BEGIN SOLUTION" in (out / "instructor" / nb.name).read_text()
    key = (out / "instructor" / "answer-key.md").read_text()
    for lv in shipped_levels():
        assert f"## Level {lv.number} · {lv.title}" in key
        if lv.solvable:
            section = key.split(f"## Level {lv.number} · ")[1].split("\n## ")[0]
            why = re.search(r"- why: (.*)", section)
            assert why and re.search(lv.teaches["because"], why.group(1)), lv.name
    handout = (out / "handout.md").read_text()
    k = QueueKeys("q")
    keys = [k.relative(x) for x in k.move_to_finished_keys("J", "completed")]
    listed = re.findall(r"^\| (\d+) \| `([^`]+)` \|$", handout, re.M)
    assert [name for _n, name in listed] == keys and len(keys) == 14
    assert "90 minutes" in (out / "agenda.md").read_text() and "Half a day" in (out / "agenda.md").read_text()
    for nb in (out / "students").glob("*.ipynb"):
        json.loads(nb.read_text())  # (every copy is a notebook)
    _check_printables(out, keys)


def _words(text: str) -> str:
    return " ".join(text.split())


def _check_printables(out: Path, keys: list[str]) -> None:
    """handout.pdf is one page whose text is the handout's words (the blocks handout.md is written from),
    the 14 keys in protocol order among them;
    slides.pdf has a page per slide of :func:`emqlab.ui.kit.slides`, each with that slide's words, the keys
    and every level's title where the slides list them."""
    from pypdf import PdfReader

    from emqlab.protocol.schedules import format_schedule, parse_schedule
    from emqlab.teaching.workshop import example_boards, example_schedule
    from emqlab.teaching.workshop import handout as handout_page
    from emqlab.ui.kit import COMMANDS, page_blocks, slides, write_handout_pdf  # (slides: as patched)

    handout = PdfReader(out / "handout.pdf")
    assert len(handout.pages) == 1
    text = handout.pages[0].extract_text()
    for block in page_blocks(handout_page()):
        for line in block.lines:
            assert _words(line) in _words(text), line
    listed = re.findall(r"^\s*(\d+)\s+(\S+)\s*$", text, re.M)
    assert [(int(n), k) for n, k in listed] == list(enumerate(keys, start=1))
    # the schedule string is the codec's own, and means what the handout says (nine W1, one S1, eight W1)
    schedule = example_schedule()
    assert parse_schedule(schedule) == ["W1"] * 9 + ["S1"] + ["W1"] * 8 and schedule == format_schedule(
        parse_schedule(schedule)) and schedule in text
    solution, before, after = example_boards()
    assert "!  job 1 is active, marked and unlocked" in before and "!! job 1 is back in wait" in after
    assert _words(before) in _words(text) and _words(after) in _words(text)

    deck = slides()
    pdf = PdfReader(out / "slides.pdf")
    assert len(pdf.pages) == len(deck) >= 8
    pages = [_words(p.extract_text()) for p in pdf.pages]
    for page, slide in zip(pages, deck, strict=True):
        for line in slide.text().splitlines():
            assert _words(line) in page, (slide.title, line)
    page = {s.title: text for s, text in zip(deck, pages, strict=True)}
    assert all(f"KEYS[{i:>2}] {k}".replace("  ", " ") in page["A finish is a read, a decision and writes over 14 keys"]
               for i, k in enumerate(keys, start=1))
    assert sum(b.kind == "figure" for s in deck for b in s.blocks) >= 3  # the timeline, the counts, the cost
    assert all(lv.title in page["The levels"] for lv in shipped_levels())
    # every emqlab command the slides name exists, with the options they give it
    for command, _what in COMMANDS:
        if command.startswith("emqlab "):
            words = [w for w in command.split()[1:] if "…" not in w and w not in ("N", "NAME")]
            res = CliRunner().invoke(main, [words[0], "--help"])
            assert res.exit_code == 0 and all(w in res.output for w in words[1:] if w.startswith("-")), command
    # the same text gives the same bytes (no date in the file)
    assert write_handout_pdf(out / "again.pdf").read_bytes() == (out / "handout.pdf").read_bytes()


def test_a_workshop_never_overwrites_and_says_where_the_notebooks_are(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep")
    with pytest.raises(ValueError, match="is not empty"):
        write_workshop(tmp_path / "full")
    assert (tmp_path / "full" / "mine.txt").read_text() == "keep"
    with pytest.raises(ValueError, match="--notebooks PATH"):
        write_workshop(tmp_path / "new", notebooks=tmp_path)
    res = CliRunner().invoke(main, ["workshop", str(tmp_path / "full")])
    assert res.exit_code == 2 and "is not empty" in res.output


def test_grading_against_the_workshops_answer_key(tmp_path: Path) -> None:
    """`emqlab grade --key kit/instructor`: the instructor's folder is the answer key. With it the solution
    gets full marks; with a folder that lacks it, the key's cells score 0 and say why while the others are
    graded by the engine; a graded notebook cannot read the key's folder."""
    from emqlab.teaching import grading as G

    kit = tmp_path / "kit"
    write_workshop(kit)
    solution = kit / "instructor" / "a2-repair-finish.ipynb"
    res = CliRunner().invoke(main, ["grade", str(solution), "--key", str(kit / "instructor")])
    assert res.exit_code == 0 and "score 7/7" in res.output, res.output
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    report = G.grade_notebook(solution, key=empty)
    cells = {c.grade_id: c for c in report.cells}
    assert not cells["a2_two_workers"].passed and "--key DIR" in cells["a2_two_workers"].feedback
    assert all(c.passed for gid, c in cells.items() if gid != "a2_two_workers")
    assert any("No answer key here" in n for n in report.notes)
    nb = G.read_notebook(solution)
    peek = f"TWO_WORKERS_SPLIT_SAFE = 'False' in open({str(kit / 'instructor' / 'answer-key.md')!r}).read()\n"
    next(c for c in nb["cells"] if G.grade_id(c) == "a2_two_workers_answer")["source"] = peek
    report = G.grade_notebook(nb, name="peek.ipynb", key=kit / "instructor")
    assert not next(c for c in report.cells if c.grade_id == "a2_two_workers").passed
    assert any("PermissionError" in e.error for e in report.errors if e.grade_id == "a2_two_workers_answer")


def test_printables_refuse_text_that_does_not_fit() -> None:
    """A handout longer than one page, or a slide taller or wider than its page, is refused, never cut."""
    from emqlab.text import para, title
    from emqlab.ui.kit import Block, Slide, handout_figure, slide_figure

    with pytest.raises(ValueError, match="does not fit one A4 page"):
        handout_figure([title("title"), *(para(f"paragraph {i} " + "word " * 40) for i in range(40))])
    with pytest.raises(ValueError, match="slide 2 .*does not fit"):
        slide_figure(Slide("tall", (Block("code", tuple(f"line {i}" for i in range(60))),)), 2, 3)
    with pytest.raises(ValueError, match="does not fit"):
        slide_figure(Slide("wide", (Block("code", ("x" * 400,)),)), 1, 1)
    assert slide_figure(Slide("fits", (Block("code", ("x" * 100,)),)), 1, 1) is not None
