"""A scenario's own invariants (``invariants:``, :class:`emqlab.engine.specs.InvariantSpec`): rules its final
states must keep, checked like the built-in kinds and reported as ``invariant:<name>``, each broken one with
a because-sentence that names the last write to what it reads.

The shapes, over the run's final state (:class:`emqlab.engine.history.FinalState`; its ``values`` hold the
keys the rules read):

* ``field`` + ``agrees``: while a job is in place *P* (one of its final places), its hash field holds
  ``agrees[P]``; a job whose hash is gone is not checked;
* ``counter`` + ``equals_count_in``: the counter (a string key, or a hash field) equals the number of jobs in
  that place (a missing counter counts 0);
* ``exists_while_active``: the key (``{job}``: the job's id) exists while the job is in active;
* ``python``: ``function(final, history)`` returns None or True (holds), False or a sentence, or a list of
  sentences (broken). An exception it raises is reported as the rule broken, with the exception.
"""

from __future__ import annotations

from typing import Any

from emqlab.engine.history import Anomaly, History, Step
from emqlab.engine.specs import InvariantSpec, Scenario


def check_invariants(h: History, scenario: Scenario | None) -> list[Anomaly]:
    """Every broken invariant of ``scenario`` in the run ``h`` (one finding per job it fails for, or one for
    the run)."""
    if scenario is None or not scenario.invariants:
        return []
    out: list[Anomaly] = []
    for inv in scenario.invariants:
        out += _check(inv, h, scenario)
    return out


def _last_write(h: History, key: str) -> Step | None:
    """The last step that wrote (or may have written) ``key`` (relative to the queue's base)."""
    return next((s for s in reversed(h.steps) if key in s.keys and not s.read_only), None)


def _with_write(h: History, because: str, key: str) -> tuple[str, tuple[int, ...]]:
    s = _last_write(h, key)
    if s is None:
        return because + f" (no step wrote {key})", ()
    return because + f": the last write to {key} was {s.actor}'s {s.op} (step {s.index})", (s.index,)


def _check(inv: InvariantSpec, h: History, sc: Scenario) -> list[Anomaly]:
    final = h.final
    out: list[Anomaly] = []
    if inv.field is not None:
        agrees = dict(inv.agrees)
        for job, places in sorted(final.placements.items(), key=lambda kv: (len(kv[0]), kv[0])):
            info = final.jobs.get(job, {})
            if not info.get("exists"):
                continue
            value = info.get(inv.field)
            for place in dict.fromkeys(places):
                want = agrees.get(place)
                if want is None or value == want:
                    continue
                held = f"{value!r}" if value is not None else "nothing"
                because, steps = _with_write(h, f"job {job} is in {place} but its {inv.field} is {held}, not"
                                                f" {want!r}", job)
                out.append(Anomaly(inv.kind, job, because, steps))
    elif inv.counter is not None:
        raw = final.values.get(inv.counter)
        if inv.counter_field is not None:
            raw = raw.get(inv.counter_field) if isinstance(raw, dict) else None
        count = int(raw) if isinstance(raw, str) and raw.lstrip("-").isdigit() else 0
        place = inv.equals_count_in or ""
        jobs = sorted(j for j, ps in {**final.placements, **final.others}.items() if place in ps)
        if count != len(jobs):
            shown = inv.counter + (f" {inv.counter_field}" if inv.counter_field else "")
            because, steps = _with_write(h, f"{shown} counts {count} but {len(jobs)} job(s) are in {place}",
                                         inv.counter)
            out.append(Anomaly(inv.kind, ",".join(jobs) or "-", because, steps))
    elif inv.exists_while_active is not None:
        for job, places in sorted(final.placements.items(), key=lambda kv: (len(kv[0]), kv[0])):
            key = inv.exists_while_active.replace("{job}", job)
            if "active" in places and final.values.get(key) is None:
                because, steps = _with_write(h, f"job {job} is in active but {key} does not exist", key)
                out.append(Anomaly(inv.kind, job, because, steps))
    elif inv.python is not None:
        out += _python(inv, h, sc)
    return out


def _python(inv: InvariantSpec, h: History, sc: Scenario) -> list[Anomaly]:
    from emqlab.engine.pyref import resolve

    try:
        fn = resolve(inv.python, sc.base_dir)
        verdict: Any = fn(h.final, h)
    except Exception as e:  # noqa: BLE001 - the user's rule: its failure is the finding, named
        return [Anomaly(inv.kind, "-", f"{inv.python} raised {type(e).__name__}: {e}", ())]
    if verdict is None or verdict is True:
        return []
    sentences = ([] if verdict is False else [verdict] if isinstance(verdict, str)
                 else [str(v) for v in verdict] if isinstance(verdict, (list, tuple)) else [str(verdict)])
    if not sentences:
        sentences = [f"{inv.python} says the rule does not hold"]
    out = []
    for sentence in sentences:
        steps: tuple[int, ...] = ()
        for key in inv.reads:
            s = _last_write(h, key)
            if s is not None:
                sentence += f"; the last write to {key} was {s.actor}'s {s.op} (step {s.index})"
                steps += (s.index,)
        out.append(Anomaly(inv.kind, "-", sentence, steps))
    return out


__all__ = ["check_invariants"]
