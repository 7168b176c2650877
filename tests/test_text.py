"""emqlab.text, the one home of text layout: the number formatter every layer prints with (the CLI's
sweep-rtt table, the timed result's summary, the slider's line) and the progress bar the CLI shows."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from emqlab.text import progress_bar, share_text, sig3


@pytest.mark.parametrize(("x", "text"), [(0, "0"), (0.0, "0"), (152.4, "152"), (39.44, "39.4"), (0.38449, "0.384"),
                                         (-3.14159, "-3.14"), (1e-5, "0.0000100"), (999.6, "1,000"),
                                         (12345.6, "12,346")])
def test_sig3_gives_three_significant_digits_without_an_exponent(x: float, text: str) -> None:
    assert sig3(x) == text


@pytest.mark.parametrize(("x", "text"), [(0, "0.0%"), (1, "100.0%"), (0.5, "50.0%"), (0.99949, "99.9%"),
                                         (0.999998, ">99.9%"), (0.0004, "<0.1%"), (0.0005, "0.1%"), (1 / 3, "33.3%")])
def test_a_share_never_prints_as_a_whole_it_is_not(x: float, text: str) -> None:
    """A share of 99.9998 % printed as 100.0 %: every interleaving, to a reader, where one in 500,000 was not."""
    assert share_text(x) == text


@pytest.mark.parametrize(("eta", "threadless"), [(True, True), (False, False)])
def test_the_progress_bar_counts_and_leaves_nothing_behind(eta: bool, threadless: bool) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with progress_bar(console, "exploring parts", eta=eta, threadless=threadless) as update:
        update(0, None)
        update(3, 7)
    text = out.getvalue()
    assert "exploring parts" in text and "3/7" in text and (" eta " in text) == eta
    assert text.endswith("\x1b[1A\x1b[2K")  # erased at the end: the bar is transient
