"""The workshop's printables (``emqlab workshop DIR``): ``handout.pdf``, the one-page handout drawn from the
blocks ``handout.md`` is written from, and ``slides.pdf``, 16:9 slides with the notebooks' figures.

Both are drawn with matplotlib's PDF backend (:class:`~matplotlib.backends.backend_pdf.PdfPages`), a
dependency emqlab has anyway: no browser, no LaTeX, nothing to install after ``pip install emqlab``. Their
text comes from the single sources — the handout's blocks (:func:`emqlab.teaching.workshop.handout`:
the schedule string written by the codec, a real run's boards, the 14 keys from
:mod:`emqlab.protocol.keys`), the levels' own files, and the engine's exploration of ``stalled-finish`` —
and :func:`slides` returns it as data before anything is drawn, so a test can hold the PDF against it.
Fonts are embedded as TrueType (``pdf.fonttype`` 42), so a PDF reader can search and copy the text; the
files carry no creation date, so the same checkout writes the same bytes.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from emqlab.text import PageBlock, table_lines
from emqlab.text import plain as text_plain

#: page sizes in inches: the handout on A4 portrait, the slides 16:9
A4 = (8.27, 11.69)
SLIDE = (13.333, 7.5)
#: the commands slide: each command and what it does (tests/test_workshop.py runs each one's --help)
COMMANDS = (("emqlab simulate --split -s stalled-finish", "every interleaving, the anomalies, a witness"),
            ("emqlab simulate --atomic -s stalled-finish", "the same, one EVALSHA per finish"),
            ("emqlab replay 'v1:…' --split -s NAME", "one run, step by step"),
            ("emqlab play N", "you are the scheduler"),
            ("emqlab scenarios", "the races from public bug reports"),
            ("jupyter lab students/", "the notebooks"))
#: the round-trips slide's sweep: small (a few seconds), and every mode's round trips per job do not depend
#: on its size; :func:`sweep_command` prints the same numbers
SWEEP_RTTS: tuple[float, ...] = (0.05, 1.0, 5.0, 20.0, 75.0)
SWEEP_JOBS, SWEEP_WORKERS, SWEEP_SEED = 16, 8, 0
#: the handout's fonts (points); it must fit one page at these sizes or :func:`write_handout_pdf` refuses
HANDOUT_SIZES = {"title": 16.0, "para": 10.0, "code": 8.0}
SLIDE_SIZES = {"title": 26.0, "para": 16.0, "code": 14.0}
_SANS, _MONO = "DejaVu Sans", "DejaVu Sans Mono"


@dataclass(frozen=True)
class Block:
    """One block of a page: ``title`` (a heading), ``para`` (text to wrap), ``code`` (lines kept as they
    are, monospaced) or ``figure`` (``png``: a figure's PNG bytes, ``lines``: its caption); ``size``: its
    font size in points when not the page's own for its kind."""

    kind: str
    lines: tuple[str, ...]
    png: bytes = b""
    size: float | None = None


@dataclass(frozen=True)
class Slide:
    """A slide: its title and its blocks, top to bottom."""

    title: str
    blocks: tuple[Block, ...] = field(default_factory=tuple)

    def text(self) -> str:
        """Every word the slide shows, in order (the title, then each block's lines)."""
        return "\n".join([self.title, *(line for b in self.blocks for line in b.lines)])


def plain(text: str) -> str:
    """Markdown's inline marks taken out (``**bold**``, ``*em*``, `` `code` ``) of a level's own text (its
    file's ``victory:``, ``lesson:``): the words a slide prints."""
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", text)
    return re.sub(r"`([^`]*)`", r"\1", text)


def page_blocks(page: Sequence[PageBlock]) -> list[Block]:
    """A page's blocks (:class:`emqlab.text.PageBlock`) as drawing blocks: titles and paragraphs as their
    words (marks left out), code as it is, a table as aligned monospaced rows (:func:`emqlab.text.table_lines`)."""
    out: list[Block] = []
    for b in page:
        if b.kind in ("title", "para"):
            out.append(Block(b.kind, (text_plain(b.inline),)))
        elif b.kind == "code":
            out.append(Block("code", b.lines))
        elif b.kind == "table":
            out.append(Block("code", tuple(table_lines(b))))
        else:
            raise ValueError(f"unknown block kind {b.kind!r}")
    return out


# -- drawing ----------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _measure(family: str) -> tuple[Any, Any]:
    """A text measurer and ``family`` at 1 pt (widths scale with the size)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    return TextToPath(), FontProperties(family=family, size=1.0)


@functools.lru_cache(maxsize=4096)
def _width_pt(text: str, size: float, family: str) -> float:
    """The width of ``text`` in points at ``size``: matplotlib's own measure of the glyphs it will draw."""
    measurer, prop = _measure(family)
    w, _h, _d = measurer.get_text_width_height_descent(text, prop, ismath=False)
    return float(w) * size


def wrap_pt(text: str, width_pt: float, size: float, family: str = _SANS) -> list[str]:
    """``text`` broken at spaces into lines no wider than ``width_pt`` points at ``size`` (a word wider
    than the line stands alone)."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        trial = f"{current} {word}" if current else word
        if current and _width_pt(trial, size, family) > width_pt:
            lines.append(current)
            current = word
        else:
            current = trial
    if current:
        lines.append(current)
    return lines


class _Cursor:
    """Writes blocks down a page, top to bottom, in points from the page's top-left corner."""

    def __init__(self, fig: Figure, margin_pt: float, sizes: dict[str, float]) -> None:
        self.fig, self.sizes, self.margin = fig, sizes, margin_pt
        w, h = fig.get_size_inches()
        self.w_pt, self.h_pt = w * 72, h * 72
        self.y = margin_pt
        self.overflow = False

    def _text(self, x_pt: float, text: str, size: float, family: str, weight: str = "normal") -> None:
        self.fig.text(x_pt / self.w_pt, 1 - (self.y + size) / self.h_pt, text, fontsize=size, family=family,
                      weight=weight, va="baseline", ha="left")
        self.y += size * 1.3
        if self.y > self.h_pt - self.margin + 0.5:  # (half a point: a figure fills the room to the point)
            self.overflow = True

    def room_pt(self) -> float:
        return self.h_pt - self.margin - self.y

    def block(self, b: Block, image_height_pt: float | None = None) -> None:
        width = self.w_pt - 2 * self.margin
        if b.kind == "title":
            for line in wrap_pt(b.lines[0], width, self.sizes["title"]):
                self._text(self.margin, line, self.sizes["title"], _SANS, "bold")
        elif b.kind == "para":
            for para in b.lines:
                for line in wrap_pt(para, width, self.sizes["para"]):
                    self._text(self.margin, line, self.sizes["para"], _SANS)
        elif b.kind == "code":
            size = b.size or self.sizes["code"]
            widest = max((_width_pt(line, 1.0, _MONO) for line in b.lines), default=0.0)
            if widest * size > width:  # a long line: the whole block a little smaller, never cut
                size = max(5.0, width / widest)
                self.overflow |= widest * size > width  # (too long even at 5 pt: it would run off the page)
            for line in b.lines:
                self._text(self.margin, line, size, _MONO)
        elif b.kind == "figure":
            self._figure(b, image_height_pt if image_height_pt is not None else self.room_pt())
        else:
            raise ValueError(f"unknown block kind {b.kind!r}")
        self.y += self.sizes["para"] * 0.6

    def _figure(self, b: Block, height_pt: float) -> None:
        from matplotlib.image import imread

        width = self.w_pt - 2 * self.margin
        small = self.sizes["para"] * 0.85
        captions = [line for caption in b.lines for line in wrap_pt(caption, width, small)]
        height_pt = max(40.0, height_pt - 4 - len(captions) * small * 1.3)  # (the image, a gap, the captions)
        img = imread(io.BytesIO(b.png), format="png")
        ih, iw = img.shape[0], img.shape[1]
        h = min(height_pt, width * ih / iw)
        w = h * iw / ih
        x = self.margin + (width - w) / 2
        ax = self.fig.add_axes((x / self.w_pt, 1 - (self.y + h) / self.h_pt, w / self.w_pt, h / self.h_pt))
        ax.imshow(img, interpolation="antialiased")
        ax.set_axis_off()
        self.y += h + 4
        for line in captions:
            self._text(self.margin, line, small, _SANS)


def _pdf(path: Path, pages: Iterable[Figure]) -> int:
    """Write ``pages`` to ``path``; returns the number of pages."""
    import matplotlib
    from matplotlib.backends.backend_pdf import PdfPages

    n = 0
    # TrueType fonts (text a reader can search and copy); no date, so the same input writes the same bytes
    with matplotlib.rc_context({"pdf.fonttype": 42, "pdf.compression": 6}), \
            PdfPages(path, metadata={"Creator": "emqlab workshop", "CreationDate": None}) as pdf:
        for fig in pages:
            pdf.savefig(fig)
            n += 1
    return n


def handout_figure(page: Sequence[PageBlock]) -> Figure:
    """The handout's one A4 page, drawn from ``page`` (:func:`emqlab.teaching.workshop.handout`'s blocks).
    Raises ``ValueError`` when the text does not fit one page at :data:`HANDOUT_SIZES`."""
    fig = Figure(figsize=A4)
    cur = _Cursor(fig, 40.0, HANDOUT_SIZES)
    for b in page_blocks(page):
        cur.block(b)
    if cur.overflow:
        raise ValueError("the handout does not fit one A4 page: shorten the handout's text")
    return fig


def write_handout_pdf(path: str | Path, page: Sequence[PageBlock] | None = None) -> Path:
    """``handout.pdf``: one A4 page with the words of the handout (:func:`emqlab.teaching.workshop.handout`,
    or ``page``), the blocks ``handout.md`` is written from."""
    from emqlab.teaching.workshop import handout

    out = Path(path)
    _pdf(out, [handout_figure(page if page is not None else handout())])
    return out


def _png(fig: Figure) -> bytes:
    from emqlab.ui.figure import to_png

    return to_png(fig, dpi=130)


def slides() -> list[Slide]:
    """The workshop's slides as data, every word from a single source: the title, moveToFinished's 14 keys
    (:mod:`emqlab.protocol.keys`), the ``stalled-finish`` race explored split and atomic (its shortest
    witness, the witness's own because-sentence, its timeline and the interleaving counts), round trips
    per job and throughput against the RTT (a small sweep, :data:`SWEEP_RTTS`), a real run's
    boards and the schedule string (the handout's), the levels (their files), the lesson of level 5 and of
    the unsolvable levels, the commands."""
    from emqlab.engine import scenario
    from emqlab.explore import explore
    from emqlab.protocol.keys import QueueKeys
    from emqlab.teaching.assignments import ASSIGNMENTS
    from emqlab.teaching.levels import load_level, shipped_levels
    from emqlab.teaching.workshop import LESSONS, example_boards, example_schedule
    from emqlab.ui import plots

    k = QueueKeys("q")
    keys = [f"KEYS[{i:>2}]  {k.relative(key)}" for i, key in enumerate(k.move_to_finished_keys("J", "completed"), 1)]
    race = scenario.load("stalled-finish")
    split, atomic = explore(race, "split"), explore(race, "atomic")
    witness = split.witnesses["double-placement"]
    because = next(a["because"] for a in witness.anomalies if a["kind"] == "double-placement")
    marks = {s: a["kind"] for a in witness.anomalies for s in a["steps"]}
    timeline, counts = plots.plot_timeline(plots.timeline_data(witness)), \
        plots.plot_interleavings(plots.interleaving_data([split, atomic]))
    levels = shipped_levels()
    unsolvable = [lv for lv in levels if not lv.solvable]
    twice = load_level(5)
    solution, before, after = example_boards()
    n_with = split.interleavings_with["double-placement"]
    return [
        Slide("Finishing a job: why one atomic script", (
            Block("para", ("A job queue on Redis finishes a job with a read (is the lock still mine?), a decision "
                           "and several writes. This workshop shows what happens when another client — the "
                           "recovery sweep — runs in between; why one EVALSHA of moveToFinished leaves it no "
                           "place to run; and what that does not fix: a lease that lapses while the work runs "
                           "still runs the job twice.",)),
            Block("para", (f"{len(levels)} levels (you are the scheduler), {len(LESSONS)} notebooks, "
                           f"{len(ASSIGNMENTS)} graded assignments: emqlab workshop DIR writes them all.",)),
        )),
        Slide("A finish is a read, a decision and writes over 14 keys", (
            Block("para", ("moveToFinished's keys, in protocol order (all share the {queue} hash tag, so on a "
                           "cluster they live in one slot):",)),
            Block("code", tuple(keys)),
            Block("para", ("Keys 11 and 13 follow the target: completed and metrics:completed as shown, or failed "
                           "and metrics:failed.",)),
        )),
        Slide("The race: the shortest run that goes wrong (split)", (
            Block("code", tuple(witness.annotated(marks=marks, width=110).splitlines()), size=10.0),
            Block("para", (f"why: {because}",)),
            Block("para", (f"replay it: emqlab replay '{witness.schedule}' --split -s stalled-finish",)),
        )),
        Slide("The same run, one box per step", (
            Block("figure", (f"stalled-finish, split: {plain(because)}",), _png(timeline)),
        )),
        Slide("Every interleaving, split and atomic", (
            Block("figure", (f"split: double-placement in {n_with} of {split.raw_interleavings} interleavings · "
                             f"atomic: {', '.join(atomic.anomaly_kinds) or 'no anomaly'} in all "
                             f"{atomic.raw_interleavings}",), _png(counts)),
        )),
        _round_trips(),
        Slide("You are the scheduler: schedules and the board", (
            Block("para", (f"{example_schedule()} is W1's first nine steps, then S1's one, then W1's next "
                           "eight; when the string ends, each actor left runs to its end, in scenario order.",)),
            Block("para", (f"Level 1 ({solution}), before and after its last step:",)),
            Block("code", tuple(before.splitlines())),
            Block("code", tuple(after.splitlines())),
        )),
        Slide("The levels", (
            Block("code", tuple(f"{lv.number:>2}  {lv.title:<28} {lv.mode:<17} {lv.tagline}" for lv in levels)),
            Block("para", (f"emqlab play N in a terminal, or notebook 04. Unsolvable: "
                           f"{', '.join(str(lv.number) for lv in unsolvable)}.",)),
        )),
        Slide("Atomic is not exactly-once", (
            Block("para", (f"Level {twice.number} · {twice.title}: {plain(twice.victory)}",)),
            Block("para", (f"Lesson: {plain(twice.lesson)}",)),
            *(Block("para", (f"Level {lv.number} · {lv.title} (unsolvable): {plain(lv.lesson)}",))
              for lv in unsolvable),
        )),
        Slide("Commands", (
            Block("code", tuple(f"{c:<44}{what}" for c, what in COMMANDS)),
        )),
    ]


def sweep_command() -> str:
    """The ``emqlab sweep-rtt`` command that gives the round-trips slide's numbers (:data:`SWEEP_RTTS`…)."""
    rtts = ",".join(f"{x:g}" for x in SWEEP_RTTS)
    return f"emqlab sweep-rtt --rtt {rtts} --jobs {SWEEP_JOBS} --workers {SWEEP_WORKERS} --seed {SWEEP_SEED}"


def _round_trips() -> Slide:
    """Round trips per job and throughput against the RTT, every finish mode (notebook 03's cost figure),
    from :data:`SWEEP_RTTS` on the in-process server."""
    from emqlab.backend.connect import connect
    from emqlab.timing import MODES, TimingConfig, sweep_rtt
    from emqlab.ui import plots

    sweep = sweep_rtt(SWEEP_RTTS, MODES, TimingConfig(jobs=SWEEP_JOBS, workers=SWEEP_WORKERS, seed=SWEEP_SEED),
                      connect())
    per_mode: dict[str, list[float]] = {}
    for r in sweep.results:
        per_mode.setdefault(r.mode, []).append(r.round_trips_per_job)
    trips = " · ".join(f"{m} {min(v):.3g}" + (f"–{max(v):.3g}" if max(v) != min(v) else "")
                       for m, v in per_mode.items())
    return Slide("Round trips: 1 vs 2 vs N", (
        Block("figure", (f"round trips per job: {trips} (RTTs {', '.join(f'{x:g}' for x in sweep.rtts)} ms) · "
                         f"{sweep_command()}",), _png(plots.plot_cost(plots.cost_data(sweep)))),
    ))


def slide_figure(slide: Slide, number: int, total: int) -> Figure:
    """One slide drawn on a 16:9 page, its number in the corner. Raises ``ValueError`` when its blocks do
    not fit the page."""
    fig = Figure(figsize=SLIDE)
    cur = _Cursor(fig, 42.0, SLIDE_SIZES)
    cur.block(Block("title", (slide.title,)))
    figures = [b for b in slide.blocks if b.kind == "figure"]
    for b in slide.blocks:
        if b.kind == "figure":
            cur.block(b, cur.room_pt() / len(figures))
        else:
            cur.block(b)
    if cur.overflow:
        raise ValueError(f"slide {number} ({slide.title!r}) does not fit its page: shorten its text")
    fig.text(1 - 30 / cur.w_pt, 18 / cur.h_pt, f"{number}/{total}", fontsize=10, family=_SANS, ha="right",
             color="#777777")
    return fig


def write_slides_pdf(path: str | Path, deck: Sequence[Slide] | None = None) -> Path:
    """``slides.pdf``: :func:`slides` (or ``deck``), one 16:9 page each."""
    out = Path(path)
    deck = list(deck if deck is not None else slides())
    _pdf(out, (slide_figure(s, i, len(deck)) for i, s in enumerate(deck, 1)))
    return out


def write_printables(out: str | Path) -> list[Path]:
    """Write ``handout.pdf`` (from the blocks :func:`~emqlab.teaching.workshop.write_workshop` wrote
    ``handout.md`` from) and ``slides.pdf`` into the workshop folder ``out``; returns their paths."""
    base = Path(out)
    return [write_handout_pdf(base / "handout.pdf"), write_slides_pdf(base / "slides.pdf")]


__all__ = ["A4", "COMMANDS", "SLIDE", "SWEEP_JOBS", "SWEEP_RTTS", "SWEEP_SEED", "SWEEP_WORKERS", "Block", "Slide",
           "handout_figure", "page_blocks", "plain", "slide_figure", "slides", "sweep_command", "wrap_pt",
           "write_handout_pdf", "write_printables", "write_slides_pdf"]
