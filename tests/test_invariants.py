"""A scenario's own invariants (issue 26, item 3): declared in YAML (a hash field agrees with the job's
place, a counter equals a count of placements, a key exists while the job is active) or as a Python function,
each reported like a built-in kind — interleavings, min preemptions, a witness, and a because-sentence that
names the last write to what the rule reads — positive and negative, from a file and from the Python API."""

from __future__ import annotations

from typing import Any

import pytest

from emqlab.check.api import explore_actors
from emqlab.engine.scenario import loads
from emqlab.engine.yamlnodes import ScenarioError
from emqlab.explore import explore

STATUS = """
name: status-race
jobs: {"1": {name: j}}
state: {active: ["1"], locks: {"1": W1}}
actors:
  - {id: W1, python: "tests.pyactors_toys:finish_with_status"}
  - {id: P1, python: "tests.pyactors_toys:late_status"}
invariants:
  - name: status-agrees
    field: status
    agrees: {completed: done, active: running}
  - name: one-done
    counter: {key: stats, field: done}
    equals_count_in: completed
  - name: status-in-python
    python: "tests.pyactors_toys:status_rule"
"""


def test_a_field_that_disagrees_with_the_jobs_place_is_named_with_the_write_that_broke_it() -> None:
    sc = loads(STATUS)
    rep = explore(sc, "split")
    assert "invariant:status-agrees" in rep.anomaly_kinds and "invariant:status-in-python" in rep.anomaly_kinds
    assert rep.interleavings_with["invariant:status-agrees"] > 0
    assert rep.min_preemptions["invariant:status-agrees"] == 0  # P1's update after W1's finish: no switch needed
    w = rep.witnesses["invariant:status-agrees"]
    because = next(a["because"] for a in w.anomalies if a["kind"] == "invariant:status-agrees")
    assert because.startswith("job 1 is in completed but its status is 'running', not 'done': the last write"
                              " to 1 was P1's HSET (step ")
    py = next(a["because"] for a in w.anomalies if a["kind"] == "invariant:status-in-python")
    assert py == "job 1 is completed but its status says 'running'"
    # the counter counts the one completion: that rule holds in every run
    assert "invariant:one-done" not in rep.anomaly_kinds
    # negative: with the status update first, every rule holds
    p1_first = explore(sc, "split", strategy="replay", schedule="v1:P1")
    assert not [k for k in p1_first.anomaly_kinds if k.startswith("invariant:")]


def test_a_counter_and_a_key_while_active() -> None:
    # two finishes of the same job both count it: the counter says 2 while one job is in completed
    twice = """
name: counted-twice
jobs: {"1": {name: j}}
state: {active: ["1"], locks: {"1": W1}}
actors:
  - {id: W1, python: "tests.pyactors_toys:finish_with_status"}
  - {id: W2, python: "tests.pyactors_toys:finish_with_status"}
invariants:
  - {name: one-done, counter: {key: stats, field: done}, equals_count_in: completed}
  - {name: at-most-one, python: "tests.pyactors_toys:stats_rule", reads: [stats]}
"""
    rep = explore(loads(twice), "split")
    assert {"invariant:one-done", "invariant:at-most-one"} <= set(rep.anomaly_kinds)
    w = rep.witnesses["invariant:one-done"]
    because = next(a["because"] for a in w.anomalies if a["kind"] == "invariant:one-done")
    assert because.startswith("stats done counts 2 but 1 job(s) are in completed: the last write to stats was")
    at_most = next(a["because"] for a in w.anomalies if a["kind"] == "invariant:at-most-one")
    assert "the last write to stats was" in at_most
    # a lock that must exist while its job is active: lease-lapse's atomic refusal leaves the job active
    # without it (the built-in checks excuse it: the sweep's next pass recovers the job; this rule does not)
    from emqlab.engine.scenario import shipped_path

    text = shipped_path("lease-lapse").read_text() + """
invariants:
  - {name: locked-while-active, exists_while_active: "{job}:lock"}
"""
    sc = loads(text)
    atomic = explore(sc, "atomic")
    assert "invariant:locked-while-active" in atomic.anomaly_kinds
    w = atomic.witnesses["invariant:locked-while-active"]
    because = next(a["because"] for a in w.anomalies if a["kind"] == "invariant:locked-while-active")
    assert because.startswith("job 1 is in active but 1:lock does not exist: the last change of 1:lock was L1's lapse")
    # negative: W1 finishes before the lapse in some run, and then the job is not active
    assert atomic.interleavings_with["invariant:locked-while-active"] < atomic.raw_interleavings


def test_invariants_from_the_python_api_and_in_expect() -> None:
    def status_done(final: Any, history: Any) -> Any:
        return final.jobs["1"].get("status") in (None, "done") or "the status is not done"

    res = explore_actors({"W1": {"python": "tests.pyactors_toys:finish_with_status"},
                          "P1": {"python": "tests.pyactors_toys:late_status"}},
                         state={"active": ["1"]}, locks={"1": "W1"},
                         invariants=[{"name": "done", "python": status_done}])
    assert "invariant:done" in res.kinds
    res.assert_some("invariant:done")
    sc = loads(STATUS.replace("invariants:", "expect: {split: [invariant:status-agrees, invariant:status-in-python]}"
                              "\ninvariants:"))
    assert sc.expect["split"].anomalies == ["invariant:status-agrees", "invariant:status-in-python"]


@pytest.mark.parametrize(("rule", "message"), [
    ("{name: x, field: status}", "a field invariant needs agrees"),
    ("{name: x, field: status, agrees: {nowhere: a}}", "not a place a job is in"),
    ("{name: x, counter: stats}", "a counter invariant needs equals_count_in"),
    ("{name: x, counter: stats, equals_count_in: completed, field: a}", "an invariant has one shape"),
    ("{name: X!, python: 'a:b'}", "lowercase letters, digits"),
    ("{name: x, python: nomodule}", "module:function"),
    ("{name: x, exists_while_active: 'a b'}", "a key relative to the queue's base"),
])
def test_a_bad_invariant_is_refused_with_its_line(rule: str, message: str) -> None:
    text = STATUS.split("invariants:")[0] + f"invariants:\n  - {rule}\n"
    with pytest.raises(ScenarioError, match=message):
        loads(text)


def test_a_python_rule_that_cannot_be_imported_is_the_files_error() -> None:
    base = STATUS.split("invariants:")[0] + "invariants:\n"
    with pytest.raises(ScenarioError, match="cannot import 'no_such_module'"):
        loads(base + "  - {name: x, python: 'no_such_module:f'}\n")
    with pytest.raises(ScenarioError, match="has no 'nothing'"):
        loads(base + "  - {name: x, python: 'tests.pyactors_toys:nothing'}\n")
    with pytest.raises(ScenarioError, match=r"must take two arguments \(final, history\)"):
        loads(base + "  - {name: x, python: 'tests.pyactors_toys:check_rule_arity'}\n")


@pytest.mark.parametrize(("answer", "broken"), [
    ("null", None), ("true", None), ("[]", None), ("false", "says the rule does not hold"),
    ('"two lines\\nand a \\u001b[31mcolour"', "two lines and a [31mcolour"),
    ('["one", "two"]', "one"), ("0", "returned a int: a rule returns None or True"),
    ('{"a": 1}', "returned a dict"),
])
def test_what_a_python_rule_may_return(answer: str, broken: str | None) -> None:
    import json

    text = """
name: rule-returns
jobs: {"1": {name: j}}
state: {active: ["1"], locks: {"1": W1}, meta: {}}
actors:
  - {id: W1, python: "tests.pyactors_toys:finish_with_status"}
invariants:
  - {name: r, python: "tests.pyactors_toys:rule_returns", reads: [answer]}
"""
    sc = loads(text)
    from emqlab.explore.checked import Runner

    with Runner(sc, "split") as r:
        r.reset()
        r.exec(b"SET", r.keys.key("answer").encode(), answer.encode())
        h = r.run()
    found = [a.because for a in h.findings if a.kind == "invariant:r"]
    if broken is None:
        assert found == [], found
    else:
        assert found and broken in found[0] and "\\n" not in found[0] and "\\x1b" not in found[0], found
    json.dumps(found)


def test_a_misspelled_kind_is_refused_not_passed() -> None:
    from click.testing import CliRunner

    from emqlab.ui.cli import main

    res = explore_actors({"W1": {"python": "tests.pyactors_toys:finish_with_status"}},
                         state={"active": ["1"]}, locks={"1": "W1"})
    with pytest.raises(ValueError, match="no anomaly kind 'double-placment'"):
        res.assert_never("double-placment")
    with pytest.raises(ValueError, match="no anomaly kind 'invariant:typo'"):
        res.assert_some("invariant:typo")
    res.assert_never("double-placement")  # (a real kind: holds)
    out = CliRunner().invoke(main, ["simulate", "--split", "-s", "lease-lapse", "--expect", "invariant:nope"])
    assert out.exit_code == 2 and "declares no invariants" in out.output


def test_a_hash_an_invariant_reads_is_the_same_state_whatever_order_the_server_answers_in() -> None:
    """A hash has no order, and HGETALL's differs between servers (a live Redis answered dramatiq-delayed-twice's
    two copies in the other order than fakeredis): the value a rule reads, and the distinct final states
    counted from it, do not depend on it."""
    from emqlab.engine.history import FinalState, _read_value

    def server(order: list[bytes]) -> Any:
        def execute(*cmd: bytes) -> Any:
            return b"hash" if cmd[0] == b"TYPE" else order

        return execute

    a = _read_value(server([b"x", b"1", b"y", b"2"]), b"k")
    b = _read_value(server([b"y", b"2", b"x", b"1"]), b"k")
    assert list(a) == list(b) == ["x", "y"]
    assert FinalState(values={"k": a}).logical() == FinalState(values={"k": b}).logical()
