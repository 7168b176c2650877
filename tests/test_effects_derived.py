"""The effect recorder derives the queue's view after a step from the commands the step sent and their replies
(:mod:`emqlab.engine.derived`) instead of reading it back. Shown equal, not assumed: with the debug switch
(``derived.VERIFY``) every step also reads the whole view and the run fails on any difference — over every
run of every shipped scenario in every mode it lists, on random command sequences against fakeredis (the
commands the model knows, their refusals and error replies among them), and on the live server."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqlab.backend.connect import command_executor, connect
from emqlab.engine import derived
from emqlab.engine.effects import ExtraPlace, read_view
from emqlab.engine.scenario import load, shipped_names
from emqlab.explore import explore
from emqlab.protocol.keys import QueueKeys

CASES = [(name, mode) for name in shipped_names() for mode in load(name).modes]


@pytest.fixture
def verify(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """The debug switch on; counts the components derived and those the model left to a read."""
    seen: Counter[str] = Counter()
    model = derived._derive

    def counted(*a: Any) -> Any:
        out = model(*a)
        seen["read" if out is derived.UNKNOWN else "derived"] += 1
        return out

    monkeypatch.setattr(derived, "VERIFY", True)
    monkeypatch.setattr(derived, "_derive", counted)
    yield seen


@pytest.mark.slow
@pytest.mark.parametrize(("name", "mode"), CASES)
def test_every_run_of_a_shipped_scenario_keeps_the_view_it_would_read(name: str, mode: str,
                                                                     verify: Counter[str]) -> None:
    rep = explore(load(name), mode)  # (the recorder raises AssertionError at the first step that differs)
    assert rep.explored > 0


def test_the_split_search_derives_nearly_every_change(verify: Counter[str]) -> None:
    explore(load("two-workers"), "split", preemptions=1)
    assert verify["derived"] > 1000
    assert verify["read"] < verify["derived"] / 10  # (a clock event's EVAL, an HDEL: read)


@pytest.mark.parametrize("backend", ["fake", pytest.param("live", marks=pytest.mark.live)])
def test_the_derived_view_is_the_read_one_on_both_backends(backend: str, verify: Counter[str]) -> None:
    from tests.conftest import backend_conn

    conn = backend_conn(backend)
    for name in ("two-workers", "cancel-delayed"):
        explore(load(name), "split", conn=conn, strategy="random", runs=6, seed=5)
        explore(load(name), "atomic", conn=conn, strategy="random", runs=4, seed=5)
    assert verify["derived"] > 0


# -- random command sequences --------------------------------------------------------------------------------

KEYS = QueueKeys("q")
JOBS = ["1", "2"]
EXTRA = (ExtraPlace("rq", "list"), ExtraPlace("tags", "set"), ExtraPlace("sched", "zset"))
MEMBERS = st.sampled_from([b"1", b"2", b"3"])
SCORES = st.sampled_from([b"0", b"1", b"1", b"2.5", b"-inf", b"+inf", b"1e3", b"x"])


def _k(name: str) -> bytes:
    return KEYS.key(name).encode()


LISTS = st.sampled_from([_k("wait"), _k("active"), _k("paused"), _k("rq")])
ZSETS = st.sampled_from([_k("completed"), _k("delayed"), _k("failed"), _k("sched")])
SETS = st.sampled_from([_k("stalled"), _k("tags")])
LOCKS = st.sampled_from([KEYS.lock(j).encode() for j in JOBS])
HASHES = st.sampled_from([KEYS.job(j).encode() for j in JOBS])
SIDE = st.sampled_from([b"LEFT", b"RIGHT", b"left", b"UP"])


def _cmd(*parts: Any) -> Any:
    return st.tuples(*(p if isinstance(p, st.SearchStrategy) else st.just(p) for p in parts))


def _var(head: tuple[Any, ...], more: st.SearchStrategy[Any], least: int = 1) -> Any:
    return st.tuples(*(p if isinstance(p, st.SearchStrategy) else st.just(p) for p in head),
                     st.lists(more, min_size=least, max_size=3)).map(lambda t: (*t[:-1], *t[-1]))


COMMANDS = st.one_of(
    _var((st.sampled_from([b"LPUSH", b"RPUSH", b"LPUSHX", b"RPUSHX"]), LISTS), MEMBERS),
    _cmd(b"LREM", LISTS, st.sampled_from([b"0", b"1", b"-1", b"2", b"-2", b"z"]), MEMBERS),
    _cmd(st.sampled_from([b"LPOP", b"RPOP"]), LISTS),
    _cmd(st.sampled_from([b"LPOP", b"RPOP"]), LISTS, st.sampled_from([b"1", b"2", b"0"])),
    _cmd(b"RPOPLPUSH", LISTS, LISTS),
    _cmd(b"LMOVE", LISTS, LISTS, SIDE, SIDE),
    st.tuples(st.just(b"ZADD"), ZSETS, st.lists(st.sampled_from([b"NX", b"XX", b"CH", b"GT"]), max_size=2),
              st.lists(st.tuples(SCORES, MEMBERS), min_size=1, max_size=3)).map(
        lambda t: (t[0], t[1], *t[2], *(x for pair in t[3] for x in pair))),
    _var((b"ZREM", ZSETS), MEMBERS),
    _cmd(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), ZSETS),
    _cmd(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), ZSETS, st.sampled_from([b"1", b"2"])),
    _cmd(b"ZINCRBY", ZSETS, SCORES, MEMBERS),
    _var((st.sampled_from([b"SADD", b"SREM"]), SETS), MEMBERS),
    _cmd(b"SET", LOCKS, st.sampled_from([b"W1:1", b"W2:1"])),
    _cmd(b"SET", LOCKS, st.sampled_from([b"W1:1", b"W2:1"]), st.sampled_from([b"NX", b"XX", b"GET"]),
         b"PX", st.sampled_from([b"30000", b"0"])),
    _cmd(b"SETNX", LOCKS, b"W1:2"),
    _cmd(b"PSETEX", LOCKS, b"30000", b"W2:2"),
    _cmd(st.sampled_from([b"PEXPIRE", b"EXPIRE"]), LOCKS, st.sampled_from([b"30000", b"0", b"-5"])),
    _cmd(b"GETDEL", LOCKS),
    _cmd(st.sampled_from([b"HSET", b"HSETNX"]), HASHES, b"f", b"v"),
    _cmd(b"HINCRBY", HASHES, b"atm", b"1"),
    _cmd(b"HDEL", HASHES, st.sampled_from([b"f", b"atm"])),
    _var((st.sampled_from([b"DEL", b"UNLINK"]),), st.one_of(LISTS, ZSETS, SETS, LOCKS, HASHES)),
)


@given(st.lists(st.lists(COMMANDS, min_size=1, max_size=3), min_size=1, max_size=12))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_commands_derive_the_view_a_read_gives(steps: list[list[tuple[bytes, ...]]]) -> None:
    execute = command_executor(connect())
    try:
        execute(b"RPUSH", _k("wait"), b"1", b"2", b"1", b"3", b"2")
        execute(b"RPUSH", _k("rq"), b"3", b"1", b"3")
        execute(b"ZADD", _k("delayed"), b"5", b"3", b"1", b"2")
        execute(b"HSET", KEYS.job("1").encode(), b"data", b"{}")
        model = derived.Derivation(KEYS, JOBS, EXTRA)
        view = read_view(execute, KEYS, JOBS, extra=EXTRA)
        scores = {name: model.read_scores(execute, name)[1] for name in model.zsets()}
        for step in steps:  # (one step: a few commands, as a script's calls)
            calls = []
            for command in step:
                try:
                    reply: Any = execute(*command)
                except redis.exceptions.ResponseError as e:
                    reply = e
                calls.append((command, reply))
            after = model.after(execute, view, scores, calls)
            read = read_view(execute, KEYS, JOBS, extra=EXTRA)
            assert after == read, f"after {calls}"
            view = after
    finally:
        execute.close()  # type: ignore[attr-defined]
