"""What every figure of emqlab shares: the colours of modes, step kinds and anomalies, the smallest font,
rendering to PNG and SVG, and the table of a figure's named artists that the ``update_*`` functions of
:mod:`emqlab.ui.plots` change in place."""

from __future__ import annotations

import io
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (matplotlib is imported when a figure is made: importing emqlab.ui.plots needs none)
    from matplotlib.figure import Figure

MODE_COLORS = {"atomic": "#1b7837", "finish-then-fetch": "#2166ac", "split": "#b2182b",
               "split-then-fetch": "#e08214", "transaction": "#762a83"}
KIND_COLORS = {"command": "#bdbdbd", "script": "#4393c3", "clock": "#f4a582", "fault": "#000000"}
ANOMALY_COLORS = {"double-placement": "#d6604d", "lost-job": "#8073ac", "stolen-lock": "#e08214",
                  "duplicate-execution": "#b2182b", "metrics-drift": "#35978f", "attempts-overrun": "#762a83"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def to_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (starts with :data:`PNG_SIGNATURE`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def to_svg(fig: Figure) -> str:
    """The figure as SVG text, byte-for-byte the same for the same figure (no date, fixed element ids):
    what the docs build writes into the site."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "emqlab", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def save(fig: Figure, path: str) -> None:
    """Write the figure to ``path``; the format follows the suffix (``.png``, ``.svg``, ``.pdf``)."""
    fig.savefig(path, bbox_inches="tight")


#: The smallest font size (points) any plot uses: 10 px at the notebooks' 90 dpi.
MIN_FONT = 8.0

#: figure -> its named artists (curves, markers), which the update_* functions change in place; weak, so a
#: figure closed and dropped takes its entry with it
_ARTISTS: weakref.WeakKeyDictionary[Figure, dict[str, Any]] = weakref.WeakKeyDictionary()


def artists(fig: Figure) -> dict[str, Any]:
    """The named artists of a figure from :func:`~emqlab.ui.plots.plot_rate` or
    :func:`~emqlab.ui.plots.plot_cost` (``"marker"``, ``"<mode>:observed"``, ``"<mode>:tput"``,
    ``"current:<key>"``, …); ``{}`` for any other figure."""
    return _ARTISTS.get(fig, {})


def color_of(mapping: dict[str, str], key: str, default: str = "#777777") -> str:
    """``mapping[key]``, or a neutral grey for a key the table has no colour for."""
    return mapping.get(key, default)


def new_figure(width: float, height: float) -> Figure:
    """A new :class:`matplotlib.figure.Figure` of ``width`` × ``height`` inches. Raises ``ImportError``
    (saying so) where matplotlib is not installed: in the browser site's JupyterLite, whose Pyodide has no
    matplotlib (``docs/browser.md``); the ``*_data`` functions of :mod:`emqlab.ui.plots` work there."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("emqlab draws its figures with matplotlib, which is not installed here (the browser "
                          "site's notebooks have none): install emqlab with pip to see them") from e
    return Figure(figsize=(width, height))


def fresh(fig: Figure | None, width: float, height: float) -> tuple[Figure, Any]:
    """``fig`` (or a new figure) cleared and sized ``width`` × ``height`` inches, with one axes."""
    if fig is None:
        fig = new_figure(width, height)
    else:
        fig.set_size_inches(width, height)
    fig.clear()
    return fig, fig.add_subplot(1, 1, 1)
