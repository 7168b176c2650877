"""Honest answers and the checkout's answer key, for the graders' tests: the key is the source notebooks'
key cells (:mod:`emqlab.teaching.key`), never a value the package holds."""

from __future__ import annotations

from typing import Any

from emqlab.teaching import grading as G
from emqlab.teaching.key import find_key


def key(aid: str) -> dict[str, Any]:
    """The checkout's answer key for assignment ``aid`` (its source notebook's key cells)."""
    found = G.key_answers(G.ASSIGNMENTS[aid], find_key())
    assert found is not None, "the checkout's notebooks/assignments is the answer key of the tests"
    return found


def model(rtt_ms: float, interval_ms: float, p_marked: float) -> float:
    """a3's window model, as the answer key writes it."""
    return float(key("a3-rate-vs-rtt")["predicted_per_1000"](rtt_ms, interval_ms, p_marked))


def gap_of(alone: Any) -> tuple[str, str]:
    """An honest a1 gap_of: W1's DEL of its lock and the SREM after it, with their arguments."""
    w1 = [s for s in alone.steps if s.actor == "W1"]
    i = next(i for i, s in enumerate(w1) if s.op == "DEL" and s.args[0].endswith(":lock"))
    j = next(j for j, s in enumerate(w1) if j > i and s.op == "SREM")
    return (f"{w1[i].op} {' '.join(w1[i].args)}", f"{w1[j].op} {' '.join(w1[j].args)}")


def pair(first: str, second: str) -> Any:
    """A gap_of that returns one pair whatever it is given (a typed-in answer)."""
    return lambda alone: (first, second)
