"""Check your own code from Python: explore your actors — Python functions over redis-py, emqlab's built-in
actors, or both — on an initial queue state, and assert what no interleaving (or some interleaving) shows.

::

    from emqlab.api import explore_actors

    def my_finish(r, q):                      # r: redis.Redis, q: emqlab.pyactors.ActorHandle
        if r.get(q.keys.lock("1")) == b"W1:1":
            r.delete(q.keys.lock("1"))
            ...

    result = explore_actors({"W1": my_finish, "S1": {"kind": "sweep"}},
                            state={"active": ["1"], "stalled": ["1"]}, locks={"1": "W1"})
    result.assert_never("double-placement")   # AssertionError with the witness and the schedule

The same is the pytest fixture ``emqlab_explore`` (:mod:`emqlab.check.pytest_plugin`). An actor is a function
``f(r, q)`` (or ``async def``; see :mod:`emqlab.engine.pyactors`), a built-in actor kind (``"sweep"``), or a
built-in actor's fields as a dict (``{"kind": "worker", "holds": "1"}``), exactly as in a scenario file's
``actors:`` list (``docs/scenarios.md``). Jobs default to one job ``"1"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from emqlab.engine.history import History
from emqlab.engine.pyactors import resolve
from emqlab.engine.scenario import Scenario, ScenarioError, loads
from emqlab.explore import Report, explore
from emqlab.protocol.verdict import Verdict, judge


def scenario(actors: Mapping[str, Any], *, jobs: Mapping[str, Any] | Sequence[str] | None = None,
             state: Mapping[str, Any] | None = None, locks: Mapping[str, str] | None = None,
             meta: Mapping[str, str] | None = None, name: str = "my-actors", queue: str = "q",
             preemptions: int | None = None, invariants: Sequence[Mapping[str, Any]] = ()) -> Scenario:
    """A :class:`emqlab.engine.specs.Scenario` from Python values, validated by the same rules as a scenario
    file (errors are :class:`emqlab.engine.yamlnodes.ScenarioError` naming the field). ``actors`` maps ids to a
    function, a kind, or a dict of a built-in actor's fields; ``jobs`` maps ids to job fields (``{}`` for
    the defaults) or lists ids; ``invariants`` are the scenario's own rules, as in a file's ``invariants:``
    (a ``python`` rule may be the function itself)."""
    if jobs is None:
        jobs = {"1": {}}
    if not isinstance(jobs, Mapping):
        jobs = {str(j): {} for j in jobs}
    functions: dict[str, Callable[..., Any]] = {}
    listed: list[dict[str, Any]] = []
    for actor_id, actor in actors.items():
        if callable(actor):
            functions[actor_id] = actor
            listed.append({"id": actor_id, "kind": "python", "python": "emqlab.api:_placeholder"})
        elif isinstance(actor, str):
            listed.append({"id": actor_id, "kind": actor})
        elif isinstance(actor, Mapping):
            fields = dict(actor)
            fn = fields.get("python")
            if callable(fn):
                functions[actor_id] = fn
                fields["python"] = "emqlab.api:_placeholder"
                fields.setdefault("kind", "python")
            listed.append({"id": actor_id, **fields})
        else:
            raise TypeError(f"actor {actor_id!r}: expected a function, a kind or a dict of fields, got"
                            f" {type(actor).__name__}")
    doc: dict[str, Any] = {"name": name, "queue": queue, "jobs": {str(k): dict(v or {}) for k, v in jobs.items()},
                           "state": dict(state or {}), "actors": listed}
    if locks:
        doc["state"]["locks"] = dict(locks)
    if meta:
        doc["meta"] = dict(meta)
    if preemptions is not None:
        doc["preemptions"] = preemptions
    rules: dict[str, Callable[..., Any]] = {}
    if invariants:
        doc["invariants"] = []
        for inv in invariants:
            if not isinstance(inv, Mapping):
                raise TypeError(f"invariants: each rule is a dict of a scenario file's fields ({{'name': …,"
                                f" 'python': my_function}}, …), not {type(inv).__name__} {inv!r}")
            fields = dict(inv)
            if callable(fields.get("python")):
                rules[str(fields.get("name"))] = fields["python"]
                fields["python"] = "emqlab.api:_placeholder"
            doc["invariants"].append(fields)
    sc = loads(yaml.safe_dump(doc, sort_keys=False), f"<{name}>")
    if rules:
        from dataclasses import replace

        sc.invariants = tuple(replace(i, python=rules[i.name]) if i.name in rules else i for i in sc.invariants)
    for spec in sc.actors:
        if spec.id in functions:
            try:
                spec.python = resolve(functions[spec.id])
            except ValueError as e:
                raise ScenarioError(f"<{name}>: actors.{spec.id}.python: {e}") from None
    return sc


def _placeholder(r: Any, q: Any) -> None:  # stands for a function while the scenario is validated
    raise AssertionError("placeholder actor")  # pragma: no cover


@dataclass
class Exploration:
    """What :func:`explore_actors` found: the :class:`emqlab.explore.Report` (``report``), its
    :class:`emqlab.protocol.verdict.Verdict` (``verdict``), and assertions that fail with the witness."""

    report: Report
    scenario: Scenario
    mode: str
    #: the run, when one schedule was replayed (``schedule=``)
    history: History | None = None

    @property
    def verdict(self) -> Verdict:
        return judge(self.report, witnesses="in .witness(kind)")

    def _known(self, kind: str | None) -> None:
        """A ``ValueError`` for a kind no check names (a typo would make an assertion pass for nothing)."""
        from emqlab.analysis.anomalies import KINDS

        known = [*KINDS, *(i.kind for i in self.scenario.invariants)]
        if kind is not None and kind not in known:
            raise ValueError(f"no anomaly kind {kind!r}; the kinds: {', '.join(known)}")

    @property
    def kinds(self) -> list[str]:
        """The anomaly kinds some interleaving showed."""
        return self.report.anomaly_kinds

    def witness(self, kind: str) -> History | None:
        """The witness of ``kind`` (fewest preemptions, then fewest steps), or ``None``."""
        return self.report.witnesses.get(kind)

    def schedule(self, kind: str) -> str | None:
        """The witness's schedule string, to pass back as ``explore_actors(…, schedule=…)``."""
        h = self.witness(kind)
        return h.schedule if h is not None else None

    def assert_never(self, kind: str | None = None) -> None:
        """No interleaving shows ``kind`` (``None``: no anomaly at all). Raises ``AssertionError`` with the
        witness, the because-sentence and the schedule; also when the exploration was not complete (a
        sampled strategy or a budget cannot show that none exists); ``ValueError`` for a kind no check
        names."""
        self._known(kind)
        found = [k for k in self.kinds if kind is None or k == kind]
        if found:
            raise AssertionError(self._explain(found[0]))
        if not self.verdict.complete:
            raise AssertionError(f"no {kind or 'anomaly'} seen, but the exploration was not complete"
                                 f" ({self.verdict.reason}): it cannot show that none exists")

    def assert_some(self, kind: str) -> History:
        """Some interleaving shows ``kind`` (the existential question); returns its witness."""
        self._known(kind)
        h = self.witness(kind)
        if h is None:
            seen = ", ".join(self.kinds) or "no anomaly"
            raise AssertionError(f"no interleaving of {self.report.raw_interleavings:,} shows {kind} (seen:"
                                 f" {seen}; {self.verdict.reason})")
        return h

    def _explain(self, kind: str) -> str:
        h = self.report.witnesses[kind]
        marks = {s: a.kind for a in h.findings if a.kind == kind for s in a.steps}
        because = next((a.because for a in h.findings if a.kind == kind), "")
        n = self.report.interleavings_with.get(kind, self.report.runs_with.get(kind, 0))
        import textwrap

        why = textwrap.fill(f"why: {because}", 100, subsequent_indent="     ")
        return (f"{kind} in {n:,} of {self.report.raw_interleavings:,} interleavings ({self.mode});"
                f" witness:\n{h.annotated(marks=marks)}\n{why}\n"
                f"schedule: {h.schedule}   (replay: explore_actors(…, schedule={h.schedule!r}))")


def explore_actors(actors: Mapping[str, Any] | Scenario, *, mode: str = "split", jobs: Any = None,
                   state: Mapping[str, Any] | None = None, locks: Mapping[str, str] | None = None,
                   meta: Mapping[str, str] | None = None, strategy: str = "exhaustive",
                   preemptions: int | None = None, runs: int = 100, seed: int = 0, depth: int = 2,
                   schedule: str | None = None, conn: Any = None, reduce: bool = True,
                   loaded: Sequence[str | bytes] = (), invariants: Sequence[Mapping[str, Any]] = ()) -> Exploration:
    """Explore ``actors`` (or a ready :class:`emqlab.engine.specs.Scenario`) in ``mode`` on fakeredis (or
    ``conn``: a client of a live server, its keys under a fresh run prefix, deleted afterwards).
    ``schedule`` replays one schedule string instead. Without ``preemptions`` the exhaustive search is
    unbounded. ``loaded`` are Lua sources the run's script cache holds from the start (as if loaded before
    the run), so that an actor's ``EVALSHA`` of them is one round trip. ``invariants``: the scenario's own
    rules (:func:`scenario`), reported as ``invariant:<name>`` like a built-in kind. Raises
    :class:`emqlab.engine.pyactors.ActorError` when a Python actor cannot run as written."""
    sc = actors if isinstance(actors, Scenario) else scenario(actors, jobs=jobs, state=state, locks=locks,
                                                              meta=meta, invariants=invariants)
    if loaded:
        from dataclasses import replace

        sc = replace(sc, loaded_scripts=tuple(x.encode() if isinstance(x, str) else x for x in loaded))
    if schedule is not None:
        from emqlab.explore import Explorer
        from emqlab.explore.checked import Runner

        with Runner(sc, mode, conn) as runner:
            rep = Explorer(runner).replay(schedule)
            return Exploration(rep, sc, mode, runner.history())
    rep = explore(sc, mode, strategy=strategy, conn=conn, runs=runs, seed=seed, depth=depth,
                  preemptions=preemptions, reduce=reduce, unbounded=preemptions is None)
    return Exploration(rep, sc, mode)


__all__ = ["Exploration", "explore_actors", "scenario"]
