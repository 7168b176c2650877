"""The exhaustive search's tree (:mod:`emqlab.explore.dpor`): a scheduling point on the search path
(:class:`Node`), the race reversals it keeps, and what a divided search hands from one part to another
(:class:`Branch`, :class:`Request`, :class:`NodeState`: :mod:`emqlab.explore.divide`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from emqlab.engine.footprints import Footprint


@dataclass(frozen=True)
class Branch:
    """A node of the exhaustive search handed to another search (:class:`emqlab.explore.parts.Donor`): its sleep
    set, the children already explored or handed on (``done``; ``fps`` the footprints of those explored), and
    the ``children`` the other search takes over there, in this order: it explores the ``planned`` ones (all
    when None) and the others only where a race of its own asks for them
    (:meth:`emqlab.explore.dpor.Exhaustive.search`)."""

    sleep: dict[str, Footprint]
    done: frozenset[str]
    fps: dict[str, Footprint]
    children: tuple[str, ...]
    #: for each child done: whether its actor still had a step to take after it (a bounded search's sleep
    #: sets need it)
    goes_on: dict[str, bool] = field(default_factory=dict)
    #: the children a race had asked for when the node was handed on (None: every child)
    planned: frozenset[str] | None = None
    #: of ``done``: the children an earlier hand-on of this node gave away unplanned (a race for one is a
    #: :class:`Request`)
    unplanned: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Request:
    """A child a race asks for at a node the search that found the race does not own (a node of its root
    prefix), or that it handed on unplanned (:class:`Branch`): the node's path (the actors chosen on the way
    to it) and the child. :class:`emqlab.explore.divide._Asked` explores it there where the part it was handed
    to did not."""

    path: tuple[str, ...]
    child: str


@dataclass(frozen=True)
class NodeState:
    """What a divided search's part did at its root node (the node handed on to it): the node's path, its
    sleep set, the children it explored there (with their footprints and whether their actor went on), and
    the ones it was given and left unexplored (``skipped``: no race asked for them)."""

    path: tuple[str, ...]
    sleep: dict[str, Footprint]
    explored: dict[str, Footprint]
    goes_on: dict[str, bool]
    skipped: tuple[str, ...]


@dataclass
class Node:
    """One scheduling point on the current path of the exhaustive search."""

    enabled: list[str]
    sleep: dict[str, Footprint]
    backtrack: list[str] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    fps: dict[str, Footprint] = field(default_factory=dict)
    current: str | None = None
    child_sleep: dict[str, Footprint] = field(default_factory=dict)
    #: the actor that took the step before this node (None at the start)
    prev: str | None = None
    #: preemptions the path spent before this node, and what taking ``current`` here costs
    used: int = 0
    paid: int = 0
    #: BPOR's conservative backtrack entries (explored after the regular ones:
    #: :meth:`emqlab.explore.dpor.Exhaustive._plan`)
    conservative: list[str] = field(default_factory=list)

    #: for each actor taken here: whether it still had a step to take after it
    goes_on: dict[str, bool] = field(default_factory=dict)

    #: the search's preemption bound (None: none)
    bound: int | None = None

    #: for a backtrack entry planned by races: each race's reversal that begins with it, as (actor,
    #: footprint) steps (:meth:`emqlab.explore.dpor.Exhaustive._plan`); the run taking the entry follows one
    #: no sleeper covers
    wake: dict[str, list[list[tuple[str, Footprint]]]] = field(default_factory=dict)
    #: children handed on before any race asked for them (:class:`Branch`), and those a race asked for since
    unplanned: set[str] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)

    def sleepers(self, q: str) -> dict[str, Footprint]:
        """The sleep set a run taking ``q`` here starts with, before ``q``'s step wakes any: the node's own
        and the siblings explored here that may sleep below ``q`` (:meth:`sleeps_free`)."""
        kept = {s: f for s, f in self.fps.items()
                if s in self.done and s not in (q, self.current) and self.sleeps_free(s, q)}
        return {s: f for s, f in {**self.sleep, **kept}.items() if s != q}

    def cost(self, q: str) -> int:
        """What taking ``q`` here costs in preemptions: one when it switches away from the previous actor
        while that actor could still run (CHESS's preemption)."""
        return 1 if self.prev is not None and q != self.prev and self.prev in self.enabled else 0

    def sleeps_free(self, q: str, p: str) -> bool:
        """Whether ``q`` (explored here before ``p``) may sleep below ``p`` under a preemption bound: a run
        below ``p`` that takes ``q``'s step while it sleeps is equivalent to the run with that step moved
        up here, before ``p``'s, which has no more preemptions exactly when taking ``q`` then ``p`` here
        costs no more than taking ``p`` (the switches further on cost the same or less). Otherwise the run
        with the step moved up may be over the bound while the one below ``p`` is not, and ``q`` stays
        awake (sleep sets and bounds combine only so: Coons, Musuvathi, McKinley, OOPSLA 2013)."""
        if self.bound is None:
            return True
        moved = self.cost(q) + (1 if self.goes_on.get(q, True) else 0)
        return moved <= self.cost(p)

    def fits(self, q: str) -> bool:
        """Whether taking ``q`` here keeps the path within the bound."""
        return self.bound is None or self.used + self.cost(q) <= self.bound


def path_of(nodes: list[Node], keep: int) -> list[str]:
    """The choices that lead to node ``keep`` on the current path."""
    out = []
    for n in nodes[:keep]:
        assert n.current is not None
        out.append(n.current)
    return out


def note_reversal(node: Node, steps: list[tuple[str, Footprint]], q: str) -> None:
    """Record at ``node`` a race reversal's ``steps`` (actor, footprint) for its entry ``q``, an initial of them:
    ``q``'s first step moved to the front. Only while ``q`` is still to be explored there: a sibling already
    explored covers it."""
    if q in node.done:
        return
    at = next(n for n, (a, _f) in enumerate(steps) if a == q)
    w = [steps[at], *steps[:at], *steps[at + 1:]]
    if any(covers(s, w) for s in node.sleepers(q)):
        w = []
    node.wake.setdefault(q, []).append(w)


def covers(s: str, steps: list[tuple[str, Footprint]]) -> bool:
    """Whether sleeper ``s`` takes a step in ``steps`` that commutes with every step before it there (its footprint
    as observed in them): every run that follows ``steps`` is then equivalent to one that takes ``s``'s step
    first, which the search below ``s`` covers. (Only an initial: a sleeper merely independent of every step,
    a weak initial in Abdulla et al., POPL 2014, is not enough with footprints observed per state: on
    lease-lapse split, W1's sleeping step commutes with L1's, but the trace L1, S1, W1… needs L1 first, and
    the race that would plan it from W1's subtree never shows there, where S1 no longer reads the lock.)"""
    at = next((n for n, (a, _f) in enumerate(steps) if a == s), None)
    if at is None:
        return False
    f = steps[at][1]
    return not any(f.conflicts(g) for _a, g in steps[:at])


__all__ = ["Branch", "Node", "NodeState", "Request", "covers", "note_reversal", "path_of"]
