"""The one home of assignment 2, "Repair a split finish": the student's Lua run split (one step per
``redis.call``) as W1's finish, every interleaving of it explored (:func:`explore_finish`, and its summary
:func:`try_finish` for the notebook), and the four graders.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from emqlab.protocol.errors import error_text
from emqlab.teaching.assignments.a1 import A1_SCENARIO
from emqlab.teaching.assignments.base import Assignment, GradedCell, Verdict, conn, short

#: Commands a split finish may not send: each would make the finish (or part of it) atomic on the server.
FORBIDDEN = frozenset(b"EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO MULTI EXEC SCRIPT FUNCTION".split())

A2_KEYS_DOC = ("KEYS: 1 lock, 2 stalled, 3 active, 4 completed, 5 job hash; "
               "ARGV: 1 job id, 2 token, 3 timestamp (ms), 4 returnvalue (JSON)")


def _student_finish_factory(lua: str, violations: list[str]) -> Callable[..., Any]:
    """A worker that finishes the job it holds with the student's Lua, run split (one step per
    redis.call) through :func:`emqlab.engine.actors.scripted_finish`. A command Redis refuses inside a script
    (EVAL, MULTI, SCRIPT, …: :data:`FORBIDDEN` among them) is refused by the Lua host with Redis's error,
    never sent, and noted in ``violations``."""
    from emqlab.engine.actors import scripted_finish

    def note(cmd: tuple[bytes, ...]) -> None:
        violations.append(cmd[0].decode("utf-8", "replace").upper())

    def worker(ctx: Any, spec: Any) -> Any:
        job = spec.holds
        token = ctx.new_token(spec.id)
        ctx.begin(spec.id, job, token)
        k = ctx.keys
        keys = [k.lock(job), k.stalled, k.active, k.completed, k.job(job)]
        args = [job, token, str(ctx.now()), json.dumps(spec.value, separators=(",", ":"))]
        yield from scripted_finish(ctx, spec.id, job, lua.encode(), keys, args, on_refused=note)

    return worker


def _lua_problem(lua: Any) -> str | None:
    if not isinstance(lua, str) or not lua.strip():
        return "FINISH_LUA must be the text of a Lua script (a string)."
    from emqlab.scripting.host import LuaHost

    try:
        LuaHost().compile(lua.encode())
    except Exception as e:  # noqa: BLE001
        return f"FINISH_LUA does not compile: {error_text(e)}"
    return None


#: a job waiting in the sequential test's queue that no actor touches: a finish must leave it where it is
BYSTANDER = "2"


def _a2_runner(scenario: str, lua: str, violations: list[str], *, bystander: bool = False) -> Any:
    """A Runner of ``scenario`` in which W1 finishes by ``lua``; with ``bystander``, job :data:`BYSTANDER`
    waits in ``wait`` too (a finish that empties the wait list, or deletes more than its own job's keys, is
    seen)."""
    import dataclasses

    from emqlab.engine.scenario import load
    from emqlab.explore.checked import Runner

    sc = load(scenario)
    if bystander:
        sc.jobs = {**sc.jobs, BYSTANDER: dataclasses.replace(sc.jobs["1"], id=BYSTANDER)}
        sc.state = {**sc.state, "wait": [*sc.state.get("wait", []), BYSTANDER]}
    return Runner(sc, "split", conn(), factories={"worker": _student_finish_factory(lua, violations)})


@dataclass(frozen=True)
class FinishExploration:
    """Every interleaving of a scenario with W1 finishing by the student's Lua, run split: the counts, the
    anomalies with their shortest witnesses, and each run's (schedule, placements of job 1, W1's return
    code)."""

    scenario: str
    explored: int
    anomalies: dict[str, int]
    witnesses: dict[str, Any]
    runs: tuple[tuple[str, tuple[str, ...], str], ...]
    violations: tuple[str, ...]

    @property
    def anomalous(self) -> bool:
        return any(self.anomalies.values())

    def codes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, _, code in self.runs:
            out[code] = out.get(code, 0) + 1
        return dict(sorted(out.items()))


@lru_cache(maxsize=32)
def explore_finish(lua: str, scenario: str = "stalled-finish") -> FinishExploration:
    """Explore every interleaving of ``scenario`` (``stalled-finish``: the sweep; ``lease-lapse``: a lapsing
    lease and the sweep) with W1 finishing job 1 by ``lua``, one step per ``redis.call``. Deterministic
    (fakeredis, virtual clock), so results are cached per (script, scenario)."""
    from emqlab.explore import Explorer

    violations: list[str] = []
    runs: list[tuple[str, tuple[str, ...], str]] = []
    with _a2_runner(scenario, lua, violations) as r:
        def each(_done: int, _total: int | None) -> None:
            runs.append((r.schedule, tuple(_placements(r)), _w1_code(r)))

        rep = Explorer(r, progress=each).exhaustive()
    return FinishExploration(scenario, rep.explored, {k: n for k, n in rep.runs_with.items() if n},
                             dict(rep.witnesses), tuple(runs), tuple(dict.fromkeys(violations)))


def try_finish(lua: str, scenario: str = "stalled-finish") -> str:
    """A readable summary of :func:`explore_finish`: how many interleavings, the anomalies (with the
    shortest witness), where job 1 ended and what the finish returned."""
    problem = _lua_problem(lua)
    if problem:
        return problem
    out = explore_finish(lua, scenario)
    ends: dict[str, int] = {}
    for _, places, _ in out.runs:
        key = " + ".join(places) or "no list"
        ends[key] = ends.get(key, 0) + 1
    lines = [f"{scenario}: {out.explored} interleavings of your split finish",
             "  job 1 ended in: " + ", ".join(f"{k} ({n})" for k, n in sorted(ends.items())),
             "  finish returned: " + ", ".join(f"{c} ({n})" for c, n in out.codes().items())]
    if out.violations:
        lines.append(f"  not allowed: {', '.join(out.violations)} (a split finish sends plain commands)")
    if out.anomalous:
        lines.append(_anomaly_feedback(out))
    else:
        lines.append("  no anomaly in any interleaving")
    return "\n".join(lines)


def _placements(r: Any) -> list[str]:
    return list(r.final_state()["placements"].get("1", []))


def _w1_code(r: Any) -> str:
    res = [x for x in r.results.get("W1", []) if x.kind == "finish"]
    return str(res[-1].outcome) if res else "none"


def _anomaly_feedback(out: FinishExploration) -> str:
    kind = sorted(out.anomalies)[0]
    h = out.witnesses[kind]
    because = next(a["because"] for a in h.anomalies if a["kind"] == kind)
    return (f"In {out.anomalies[kind]} of {out.explored} interleavings on {out.scenario} your finish leaves a "
            f"{kind}: {because}.\nShortest witness ({h.schedule}):\n{short(h)}")


_ATOMIC_NOTE = ("Atomicity is the course's answer, but this exercise asks for a finish that is safe by the order of "
                "its commands alone, each sent on its own.")


def _violation(violations: Iterable[str]) -> Verdict | None:
    first = next(iter(violations), None)
    if first is None:
        return None
    return Verdict(False, f"Your finish sends {first}: that runs part of it atomically on the server. {_ATOMIC_NOTE}")


def grade_a2_sequential(FINISH_LUA: Any) -> Verdict:  # noqa: N803
    """With nothing running beside it, the finish must complete the job: 0, job 1 in completed only, lock and
    mark gone, returnvalue stored; and job :data:`BYSTANDER`, waiting in the same queue, left alone."""
    problem = _lua_problem(FINISH_LUA)
    if problem:
        return Verdict(False, problem)
    violations: list[str] = []
    with _a2_runner(A1_SCENARIO, FINISH_LUA, violations, bystander=True) as r:
        h = r.run()  # W1 to its end, then the sweep
        k = r.keys
        stalled = {m.decode() for m in r.conn.smembers(k.stalled)}
        returnvalue = r.conn.hget(k.job("1"), "returnvalue")
        lock = r.conn.get(k.lock("1"))
        other = r.conn.exists(k.job(BYSTANDER))
    bad = _violation(violations)
    if bad:
        return bad
    res = [x for x in h.results.get("W1", []) if x.kind == "finish"]
    code = str(res[-1].outcome) if res else "none"
    places = h.final["placements"].get("1", [])
    problems = []
    if code != "0":
        problems.append(f"it returned {code} instead of 0")
    if places != ["completed"]:
        problems.append(f"job 1 ended in {', '.join(places) or 'no list'} instead of completed only")
    if lock is not None:
        problems.append("job 1's lock is still there")
    if "1" in stalled:
        problems.append("job 1 is still marked in stalled")
    if returnvalue is None:
        problems.append("the job's returnvalue was not stored (HSET <job> returnvalue …)")
    elsewhere = h.final["placements"].get(BYSTANDER, [])
    if elsewhere != ["wait"] or not other:
        where = "is gone" if not other else f"ended in {', '.join(elsewhere) or 'no list'}"
        problems.append(f"job {BYSTANDER}, waiting in the same queue, {where}: a finish touches its own job only")
    if problems:
        return Verdict(False, "Run on its own (W1 to its end, then the sweep), your finish does not do what a finish "
                              "must: " + "; ".join(problems) + f". {A2_KEYS_DOC}.\n{short(h)}")
    return Verdict(True, f"On its own your finish completes job 1 in {sum(1 for s in h.steps if s.actor == 'W1')} "
                         "commands: job 1 in completed, lock and mark gone, returnvalue stored, "
                         f"job {BYSTANDER} still waiting.")


def grade_a2_sweep(FINISH_LUA: Any) -> Verdict:  # noqa: N803
    """Every interleaving with the sweep (stalled-finish): no anomaly, and the job always ends completed."""
    problem = _lua_problem(FINISH_LUA)
    if problem:
        return Verdict(False, problem)
    out = explore_finish(FINISH_LUA, "stalled-finish")
    bad = _violation(out.violations)
    if bad:
        return bad
    if out.anomalous:
        return Verdict(False, _anomaly_feedback(out))
    unfinished = [(s, p, c) for s, p, c in out.runs if p != ("completed",)]
    if unfinished:
        s, p, c = unfinished[0]
        return Verdict(False, f"No anomaly, but the job is not always finished: here no lease lapses, so the finish "
                              f"must always complete job 1. In {len(unfinished)} of {out.explored} interleavings it "
                              f"does not, e.g. {s}: job 1 ends in {' + '.join(p) or 'no list'} and the finish "
                              f"returned {c}.")
    return Verdict(True, f"All {out.explored} interleavings of your split finish with the sweep end with job 1 in "
                         "completed only, and no anomaly.")


def grade_a2_lease(FINISH_LUA: Any) -> Verdict:  # noqa: N803
    """Hidden: every interleaving with a lease lapse and the sweep (lease-lapse): no anomaly; the job ends in
    exactly one place, completed exactly when the finish returned 0."""
    problem = _lua_problem(FINISH_LUA)
    if problem:
        return Verdict(False, problem)
    out = explore_finish(FINISH_LUA, "lease-lapse")
    bad = _violation(out.violations)
    if bad:
        return bad
    if out.anomalous:
        return Verdict(False, "When W1's lease lapses during the finish (lease-lapse: the lock expires and the sweep "
                              "recovers the job), your finish is not safe. " + _anomaly_feedback(out)
                              + "\nHint: a write whose result you ignore (an LREM count) cannot tell you that the "
                                "job was taken away after your lock check.")
    for s, p, c in out.runs:
        if len(p) != 1 or (c == "0") != (p == ("completed",)):
            return Verdict(False, "When W1's lease lapses during the finish, the outcome is inconsistent: in "
                                  f"{s} the finish returned {c} and job 1 is in {' + '.join(p) or 'no list'}. A "
                                  "finish that returns 0 must have completed the job; one that refuses (a negative "
                                  "code) must leave it where the sweep put it.")
    codes = out.codes()
    odd = [c for c in codes if c != "0" and not (c.startswith("-") and c[1:].isdigit())]
    if odd:
        return Verdict(False, f"When W1's lease lapses during the finish, your finish returned {odd[0]} in "
                              f"{codes[odd[0]]} of {out.explored} interleavings: a finish returns 0 when it "
                              "completed the job and a negative code when it refuses.")
    if "0" not in codes:
        return Verdict(False, f"When W1's lease lapses, your finish never completed the job: it refused in all "
                              f"{out.explored} interleavings, also where it runs before the lease lapses and "
                              "still holds the lock.")
    refused = sum(n for c, n in codes.items() if c.startswith("-"))
    return Verdict(True, f"All {out.explored} interleavings with a lapsing lease are consistent: the job is completed "
                         f"when your finish returns 0, and left to the sweep when it refuses ({refused} run(s)).")


def grade_a2_two_workers(TWO_WORKERS_SPLIT_SAFE: Any, key: Mapping[str, Any]) -> Verdict:  # noqa: N803
    """A yes/no question no run can answer for every finish: graded against the instructor's key
    (``key["TWO_WORKERS_SPLIT_SAFE"]``, :mod:`emqlab.teaching.key`), which the package does not hold."""
    if not isinstance(TWO_WORKERS_SPLIT_SAFE, bool):
        return Verdict(False, "TWO_WORKERS_SPLIT_SAFE must be True or False.")
    if TWO_WORKERS_SPLIT_SAFE is key["TWO_WORKERS_SPLIT_SAFE"]:
        return Verdict(True, "Right. Compare with the stolen-lock witness of `emqlab simulate --split --scenario "
                             "two-workers`: what W2 does between two of W1's commands, and what W1 can see of it.")
    return Verdict(False, f"TWO_WORKERS_SPLIT_SAFE is {TWO_WORKERS_SPLIT_SAFE}, which is not the answer. Run "
                          "`emqlab simulate --split --scenario two-workers` and read the stolen-lock witness: "
                          "after W1 checks its lock, what can the lease, the sweep and W2 do before W1's writes, "
                          "and what could a later command of W1 see of it?")


ASSIGNMENT = Assignment("a2-repair-finish", "Repair a split finish", "a2-repair-finish.ipynb", [
    GradedCell("a2_sequential", 1, "a2_finish_answer", ("FINISH_LUA",), grade_a2_sequential,
               "the finish still finishes the job"),
    GradedCell("a2_sweep", 3, "a2_finish_answer", ("FINISH_LUA",), grade_a2_sweep,
               "no anomaly in any interleaving with the sweep"),
    GradedCell("a2_lease", 2, "a2_finish_answer", ("FINISH_LUA",), grade_a2_lease,
               "consistent when the lease lapses too"),
    GradedCell("a2_two_workers", 1, "a2_two_workers_answer", ("TWO_WORKERS_SPLIT_SAFE",), grade_a2_two_workers,
               "can any order save two-workers?", key=("TWO_WORKERS_SPLIT_SAFE",)),
], key_cells=("a2_two_workers_answer",))
