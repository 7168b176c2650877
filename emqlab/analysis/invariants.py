"""A scenario's own invariants (``invariants:``, :class:`emqlab.engine.specs.InvariantSpec`): rules its final
states must keep, checked like the built-in kinds and reported as ``invariant:<name>``, each broken one with
a because-sentence that names the last step that changed what it reads (a lock's changes are recorded; for
another key, the last command that wrote it, or the last script step that named it: a script names its KEYS
whether it writes them or not).

The shapes, over the run's final state (:class:`emqlab.engine.history.FinalState`; its ``values`` hold the
keys the rules read):

* ``field`` + ``agrees``: while a job is in place *P* (one of its final places), its hash field holds
  ``agrees[P]``; a job whose hash is gone is not checked;
* ``counter`` + ``equals_count_in``: the counter (a string key, or a hash field) equals the number of jobs in
  that place (a missing counter counts 0);
* ``exists_while_active``: the key (``{job}``: the job's id) exists while the job is in active;
* ``python``: ``function(final, history)`` returns None, True or an empty list (holds), or False, a sentence
  or a list of sentences (broken); anything else, or an exception it raises, is reported as the rule
  broken, saying so. It must answer the same for every interleaving of a trace — read the final state and
  what the steps did, not the order of steps that commute (on different keys, or on different members of
  one key: :mod:`emqlab.engine.footprints`): with reduction, one run stands for its trace (``--no-reduce``
  runs every schedule).
"""

from __future__ import annotations

from typing import Any

from emqlab.engine.effects import LockChanged
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


def _last_write(h: History, key: str) -> tuple[Step | None, str]:
    """The last step that changed ``key`` (relative to the queue's base), with how sure that is: a lock's
    changes are recorded (its effects), so ``"the last change of"``; for any other key, the last step that
    named it and is no read: one command that writes it (``"the last write to"``), or a script or batch,
    which names its keys whether it writes them or not (``"the last step that could have written"``)."""
    job = key[: -len(":lock")] if key.endswith(":lock") else None
    if job is not None and job in h.final.placements:
        found = next((s for s in reversed(h.steps)
                      if any(isinstance(x, LockChanged) and x.job == job for x in s.effects)), None)
        return found, "the last change of"
    found = next((s for s in reversed(h.steps) if key in s.keys and not s.read_only), None)
    if found is None or found.kind == "command" and found.script is None and found.op not in _BATCHES:
        return found, "the last write to"  # (one command that writes the key: its write is certain)
    return found, "the last step that could have written"


#: steps that carry several commands: which of them wrote the key is not recorded
_BATCHES = frozenset({"PIPELINE", "EXEC", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


def _with_write(h: History, because: str, key: str) -> tuple[str, tuple[int, ...]]:
    s, how = _last_write(h, key)
    if s is None:
        return because + f" (no step changed {key})", ()
    return because + f": {how} {key} was {s.actor}'s {s.op} (step {s.index})", (s.index,)


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
                                                f" {want!r}", sc.job_key.replace("{job}", job))
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

    name = inv.python if isinstance(inv.python, str) else getattr(inv.python, "__name__", "the rule")
    try:
        fn = resolve(inv.python, sc.base_dir, takes="(final, history): the final state and the run's history")
        verdict: Any = fn(h.final, h)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's rule: its failure is the finding, named
        return [Anomaly(inv.kind, "-", f"{name} raised {type(e).__name__}: {_one_line(str(e))}", ())]
    if verdict is None or verdict is True or (isinstance(verdict, (list, tuple)) and not verdict):
        return []
    if verdict is False:
        sentences = [f"{name} says the rule does not hold"]
    elif isinstance(verdict, str) and verdict.strip():
        sentences = [verdict]
    elif isinstance(verdict, (list, tuple)) and all(isinstance(v, str) and v.strip() for v in verdict):
        sentences = list(verdict)
    else:
        if hasattr(verdict, "close") and hasattr(verdict, "send"):  # (a coroutine or generator: not run)
            verdict.close()
        return [Anomaly(inv.kind, "-", f"{name} returned a {type(verdict).__name__}: a rule returns None or True"
                                       " (it holds), or False, a sentence or a list of sentences (it does not)",
                        ())]
    out = []
    for sentence in map(_one_line, sentences):
        steps: tuple[int, ...] = ()
        for key in inv.reads:
            s, how = _last_write(h, key)
            if s is not None:
                sentence += f"; {how} {key} was {s.actor}'s {s.op} (step {s.index})"
                steps += (s.index,)
        out.append(Anomaly(inv.kind, "-", sentence, steps))
    return out


def _one_line(text: str, limit: int = 500) -> str:
    """``text`` on one line: whitespace runs as one space, control characters (an ANSI escape) dropped."""
    flat = " ".join("".join(c for c in text if c.isprintable() or c.isspace()).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


__all__ = ["check_invariants"]
