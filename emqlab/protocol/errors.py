"""The one home of how an error reply's text is cut for showing: Redis 7 ends the error of a script with
`` script: <sha1>, on @user_script:<line>.`` (and emqlab's host the same), which names no cause and differs
from run to run of the same mistake, so every place that shows or compares an error drops it."""

from __future__ import annotations

#: what starts the suffix Redis puts after a script's error (``ERR … script: 5d41…, on @user_script:1.``)
SCRIPT_SUFFIX = " script:"


def error_text(error: object) -> str:
    """``str(error)`` without Redis's script suffix (:data:`SCRIPT_SUFFIX` and what follows it)."""
    return str(error).split(SCRIPT_SUFFIX)[0]
