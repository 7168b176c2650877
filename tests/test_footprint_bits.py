"""Footprint.conflicts answers through bit masks (footprints._signature) where no key is a wildcard: the same
answer, for every pair, as the key-by-key relation the module docstring states (written out again here)."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from emqlab.engine.footprints import ANY, Footprint, Key, conflicting

_names = st.sampled_from(["wait", "stalled", "1", "2", "*"])
_whole = st.tuples(st.sampled_from(["q", "job"]), _names)
_member = st.tuples(st.sampled_from(["q", "job"]), _names, st.sampled_from(["set", "hash", "zset"]),
                    st.sampled_from(["1", "2", "atm"]))
_key = st.one_of(_whole, _member, st.just(ANY))
_keys = st.frozensets(_key, max_size=4)
_fps = st.builds(Footprint, _keys, _keys, _keys)


def _one(a: Key, b: Key) -> bool:
    if a == ANY or b == ANY:
        return True
    if a[0] != b[0] or (a[1] != b[1] and "*" not in (a[1], b[1])):
        return False
    if len(a) == 2 or len(b) == 2:
        return True
    return a[2] != b[2] or a[3] == b[3]


def _meet(xs: frozenset[Key], ys: frozenset[Key]) -> bool:
    return any(_one(x, y) for x in xs for y in ys)


def _reference(f: Footprint, g: Footprint) -> bool:
    return (_meet(f.writes, g.reads | g.writes | g.appends) or _meet(g.writes, f.reads | f.appends)
            or _meet(f.appends, g.reads) or _meet(g.appends, f.reads))


@settings(max_examples=3000, deadline=None)
@given(_fps, _fps)
def test_conflicts_is_the_key_relation(f: Footprint, g: Footprint) -> None:
    want = _reference(f, g)
    assert f.conflicts(g) is want
    assert g.conflicts(f) is want
    assert (f | g).conflicts(g) is (_reference(f | g, g))


@settings(max_examples=500, deadline=None)
@given(st.lists(_fps, max_size=6), _fps)
def test_conflicting_is_conflicts_over_a_list(fps: list[Footprint], fp: Footprint) -> None:
    assert conflicting(fps, fp) == sum(1 << i for i, f in enumerate(fps) if _reference(f, fp))


def test_the_masks_are_not_pickled_and_not_part_of_the_value() -> None:
    f = Footprint(reads=frozenset({("q", "stalled", "set", "1")}), writes=frozenset({("q", "wait")}))
    g = Footprint(writes=frozenset({("q", "stalled", "set", "2")}))
    assert not f.conflicts(g)  # (both signatures made)
    h = pickle.loads(pickle.dumps(f))
    assert h == f and hash(h) == hash(f)
    assert h._sig is None  # another process numbers its keys anew
    assert f._sig  # this one's masks were made, and are kept
