"""Random scenarios for the reduction's oracle tests: a few jobs in ``active``, ``wait`` and ``stalled``, and
two to four actors drawn from the shipped scenarios' building blocks (split and atomic workers that hold a
job or fetch one, a lease lapse, a sweep, a cancel, a producer, a script flush, a crash), each scenario
made from one seed (:func:`scenario_text`) and explored in one mode (:func:`mode_of`)."""

from __future__ import annotations

import random

import yaml

from emqlab.engine import scenario
from emqlab.engine.specs import Scenario


def scenario_text(seed: int) -> str:
    """The YAML of random scenario number ``seed`` (the same text for the same seed)."""
    rng = random.Random(seed)
    jobs = {"1": {"name": "a", "data": {"n": 1}}, "2": {"name": "b", "data": {"n": 2}}}
    if rng.random() < 0.3:
        jobs["1"]["attempts"] = 2
    state: dict = {"active": ["1"], "locks": {"1": "W1"}}
    if rng.random() < 0.5:
        state["stalled"] = ["1"]
    if rng.random() < 0.5:
        state["wait"] = ["2"]
    actors: list[dict] = [{"id": "W1", "kind": "worker", "holds": "1",
                           "finish": rng.choice(["completed", "failed"]),
                           "fetch_next": rng.random() < 0.5}]
    if rng.random() < 0.3:
        actors[0]["mode"] = "atomic"
    pool = ["worker", "lease", "sweep", "canceller", "producer", "script-flush", "crash"]
    for n, kind in enumerate(rng.sample(pool, rng.randint(1, 3)), start=2):
        actor: dict = {"id": f"{kind[0].upper()}{n}", "kind": kind}
        if kind == "worker":
            actor.update(id="W2", mode=rng.choice(["atomic", "split"]) if rng.random() < 0.5 else "atomic",
                         finish=rng.choice(["completed", "failed"]), fetch_next=False)
        elif kind == "lease":
            actor.update(job="1", of="W1")
        elif kind == "sweep":
            actor.update(max_stalled=1)
            if rng.random() < 0.3:
                actor["mode"] = "split"
        elif kind == "canceller":
            actor.update(job="1", value="cancelled")
        elif kind == "producer":
            jobs["3"] = {"name": "c", "data": {"n": 3}}
            actor.update(job="3")
        elif kind == "crash":
            actor.update(of="W1", lapse=rng.random() < 0.5)
        actors.append(actor)
    doc = {"name": f"random-{seed}", "title": "t", "lesson": "l", "source": ["random"], "anomaly": "none",
           "jobs": jobs, "state": state, "actors": actors, "expect": {}}
    return yaml.safe_dump(doc, sort_keys=False)


def mode_of(seed: int) -> str:
    """The finish mode random scenario ``seed`` is explored in (split most often: it has the most races)."""
    return random.Random(seed * 7 + 1).choice(["split", "split", "atomic", "transaction", "finish-then-fetch"])


def random_scenario(seed: int) -> Scenario:
    """Random scenario number ``seed`` (:func:`scenario_text`), loaded."""
    return scenario.loads(scenario_text(seed))
