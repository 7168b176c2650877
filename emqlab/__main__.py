"""``python -m emqlab``: the console script ``emqlab``."""

from emqlab.ui.entry import entry

entry()
