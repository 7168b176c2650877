"""The base of emqlab's notebook widgets: an object that displays as its ``widget`` (an ipywidgets box)."""

from __future__ import annotations

from typing import Any

import ipywidgets as W


class View:
    """Displays as its ``widget`` (a VBox)."""

    widget: W.Widget

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


