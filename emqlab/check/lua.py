"""Check your own Lua: run a script set — emqlab's with your files in place of some scripts, or a BullMQ
release's folder — through the shipped scenarios, split and atomic, against the recovery sweep, and compare
what it shows with what emqlab's own scripts show in the same exploration (for a shipped scenario, its
``expect:``, which the test suite holds true; any scenario file works).

Each scenario and mode is explored twice, with your scripts and with emqlab's, and compared on three
things: the anomaly kinds, the errors a finish raised (a Lua error, a WRONGTYPE — never one emqlab's
raises), and the final placements and locks. Both explorations check one rule more than a plain
exploration does, :func:`finish_files_its_job` (``invariant:finish-files-its-job``): a finish that replies
success must have moved its job (out of active, into completed, failed or back for a retry, or deleted
it) — a finish that returns 0 and files nothing breaks it, which emqlab's own finish never does.

The verdict (``emqlab check``): **fails** when, in some scenario, your script's *atomic* finish shows an
anomaly emqlab's does not, or raises an error emqlab's never does (it admits a race or breaks, whatever its
atomicity); **holds** otherwise, every exploration having been complete and at least one scenario having
run one of your scripts (a scenario whose runs never call them is *unused*: it says nothing of them, and
counts for neither verdict; when every scenario is unused the verdict is **inconclusive**). Final states
emqlab's finish never leaves are listed for review with a warning, not judged: a protocol variant may
mean them (BullMQ's client retries a failed job with retryJob, emqlab's finish retries it itself).
Split-mode differences are listed, not judged (a split run of any finish has races). Witnesses are the
shortest schedules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from emqlab.engine.effects import HashDeleted, Placed, Removed
from emqlab.engine.history import FinalState, History
from emqlab.engine.scenario import Scenario
from emqlab.engine.specs import InvariantSpec
from emqlab.explore import Report, explore
from emqlab.scripting.registry import ScriptSet

CHECK_MODES = ("atomic", "split")


def finish_files_its_job(final: FinalState, h: History) -> list[str]:
    """The rule every checked exploration adds (``invariant:finish-files-its-job``): an execution whose
    finish ran a script as one step (atomic: ``EVALSHA``, a transaction) and replied success
    (:attr:`emqlab.engine.history.Execution.released`) moved its job in that step — took it out of active,
    put it somewhere (completed, failed, or back for a retry), or deleted its hash (keepJobs 0): a
    ``Placed``, ``Removed`` or ``HashDeleted`` effect on the job. A split finish is not checked: another
    actor can make its moves first (its commands then change nothing), which the other kinds report. A
    finish that fetched the same job again in its own step (a retry taken at once as the next job) starts a
    new execution there and is not checked either. Returns one sentence per finish that breaks it
    (``final`` is not read: the rule is about what the finish's step did)."""
    out = []
    for e in h.executions:
        if not e.released or e.end is None:
            continue
        steps = [s for s in h.steps if e.start < s.index <= e.end and s.actor == e.actor and s.scripts]
        if not steps or any(s.kind == "command" for s in steps):
            continue  # (a finish without a script, or a split one)
        if any(x.start == e.end and x.job == e.job and x.actor == e.actor for x in h.executions if x is not e):
            continue
        if any(isinstance(x, (Placed, Removed, HashDeleted)) and x.job == e.job
               for s in steps for x in s.effects):
            continue
        first, last = steps[0].index, steps[-1].index
        where = f"step {first}" if first == last else f"steps {first}-{last}"
        out.append(f"{e.actor}'s finish of job {e.job} replied {e.result}, a success, and did not move the job"
                   f" (nothing taken out of active or put anywhere, no delete) in its {steps[-1].script}"
                   f" ({where})")
    return out


FINISH_RULE = InvariantSpec("finish-files-its-job", python=finish_files_its_job)
"""The rule :func:`finish_files_its_job`, as a scenario invariant."""


@dataclass(frozen=True)
class CheckRow:
    """One scenario in one mode: the anomaly kinds the checked scripts show (``yours``), those emqlab's own
    scripts show in the same exploration (``reference``), and a witness schedule per kind of yours."""

    scenario: str
    mode: str
    yours: tuple[str, ...]
    reference: tuple[str, ...]
    witnesses: dict[str, str] = field(default_factory=dict)
    complete: bool = True
    error: str = ""
    #: your replaced scripts ran in some run of this exploration (False: it says nothing of them)
    ran: bool = True
    #: errors your scripts' finishes raised that emqlab's never do
    errors: tuple[str, ...] = ()
    #: final (placements, locks) your scripts reach and emqlab's never do: how many, and one of them
    unmatched: int = 0
    example: str = ""

    @property
    def extra(self) -> list[str]:
        """Kinds your scripts show and emqlab's do not."""
        return sorted(set(self.yours) - set(self.reference))

    @property
    def missing(self) -> list[str]:
        """Kinds emqlab's scripts show and yours do not."""
        return sorted(set(self.reference) - set(self.yours))

    @property
    def differs(self) -> bool:
        """Your scripts show an anomaly, an error or a final state emqlab's do not (or the run failed)."""
        return bool(self.extra or self.error or self.errors or self.unmatched)

    @property
    def broken(self) -> bool:
        """Your scripts show an anomaly or an error emqlab's do not, or the run failed."""
        return bool(self.extra or self.error or self.errors)

    def problems(self) -> list[str]:
        """What differs, one phrase each."""
        out = [f"+{k}" for k in self.extra]
        out += [f"error: {e}" for e in self.errors]
        if self.unmatched:
            out.append(f"{self.unmatched} final state(s) emqlab's finish never leaves, e.g. {self.example}")
        if self.error:
            out.append(f"the run failed: {self.error}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "mode": self.mode, "yours": list(self.yours),
                "emqlab": list(self.reference), "extra": self.extra, "missing": self.missing,
                "witnesses": self.witnesses, "complete": self.complete, "errors": list(self.errors),
                "unmatched_final_states": self.unmatched, "example": self.example, "ran_your_scripts": self.ran,
                **({"error": self.error} if self.error else {})}


@dataclass(frozen=True)
class CheckResult:
    """Every row of a check, and its verdict (``holds`` / ``fails`` / ``inconclusive``) with one sentence."""

    origin: str
    rows: tuple[CheckRow, ...]
    #: the scripts put in place of emqlab's, and those of the folder emqlab never calls (skipped)
    replaced: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def failing(self) -> list[CheckRow]:
        return [r for r in self.rows if r.mode == "atomic" and r.broken]

    @property
    def to_review(self) -> list[CheckRow]:
        """Atomic rows whose only difference is final states emqlab's finish never leaves."""
        return [r for r in self.rows if r.mode == "atomic" and r.unmatched and not r.broken]

    @property
    def unused(self) -> list[str]:
        """The scenarios none of whose runs called one of your scripts, in any mode (their rows say nothing
        of your scripts)."""
        ran = {r.scenario for r in self.rows if r.ran or r.error}
        return sorted({r.scenario for r in self.rows} - ran)

    @property
    def verdict(self) -> str:
        if self.failing:
            return "fails"
        if not all(r.complete for r in self.rows) or len(self.unused) == len({r.scenario for r in self.rows}):
            return "inconclusive"
        return "holds"

    @property
    def reason(self) -> str:
        if self.failing:
            what = "; ".join(f"{r.scenario}: {r.problems()[0]}" for r in self.failing)
            return f"the atomic finish does what emqlab's never does — {what}"
        names = ", ".join(self.replaced) if 0 < len(self.replaced) <= 2 else "the replaced scripts"
        unused = self.unused
        if len(unused) == len({r.scenario for r in self.rows}):
            return f"no scenario checked runs {names}"
        if self.verdict == "inconclusive":
            return "no atomic anomaly beyond emqlab's seen, but an exploration stopped at its budget"
        n = len({r.scenario for r in self.rows}) - len(unused)
        return (f"in the {n} scenario{'' if n == 1 else 's'} that run {names} the atomic finish shows nothing"
                " emqlab's does not")

    def to_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "verdict": self.verdict, "reason": self.reason,
                "replaced": list(self.replaced), "skipped": list(self.skipped),
                "rows": [r.to_dict() for r in self.rows]}


def check_scripts(scripts: ScriptSet, scenarios: Sequence[Scenario], *, modes: Sequence[str] = CHECK_MODES,
                  conn: Any = None, progress: Callable[[str, str], None] | None = None) -> CheckResult:
    """Explore each scenario in each of ``modes`` it lists with ``scripts`` and with emqlab's own
    (exhaustively at the scenario's bound; on ``conn``, default a new fakeredis per run) and compare. A run
    that raises (a Lua error the script does not catch, a missing script) becomes a row with ``error``.
    ``progress(scenario, mode)`` is called before each exploration."""
    rows: list[CheckRow] = []
    replaced = tuple(getattr(scripts, "replaced", ()))
    for sc in scenarios:
        sc = replace(sc, invariants=(*sc.invariants, FINISH_RULE))
        for mode in modes:
            if mode not in sc.modes:
                continue
            if progress is not None:
                progress(sc.name, mode)
            ref = explore(sc, mode, conn=conn)
            reference = tuple(ref.anomaly_kinds)
            try:
                rep: Report = explore(sc, mode, conn=conn, scripts=scripts)
            except Exception as e:  # noqa: BLE001 - the user's script failed: a finding, not a crash
                rows.append(CheckRow(sc.name, mode, (), reference, error=str(e).splitlines()[0][:200]))
                continue
            states = {_placed(o) for o in rep.outcomes} - {_placed(o) for o in ref.outcomes}
            errors = sorted(_errors(rep) - _errors(ref))
            rows.append(CheckRow(sc.name, mode, tuple(rep.anomaly_kinds), reference,
                                 {k: h.schedule for k, h in rep.witnesses.items()}, rep.complete and ref.complete,
                                 ran=not replaced or not rep.scripts_run.isdisjoint(replaced),
                                 errors=tuple(e[:160] for e in errors), unmatched=len(states),
                                 example=_show(min(states)) if states else ""))
    skipped = tuple(getattr(scripts, "skipped", ()))
    return CheckResult(scripts.origin, tuple(rows), replaced, skipped)


def _placed(outcome: Any) -> tuple[Any, Any]:
    """The placements and locks of a final state (:meth:`emqlab.engine.history.FinalState.logical`)."""
    return outcome[0], outcome[1]


def _errors(rep: Report) -> set[str]:
    return {o.error for c in rep.codes.values() for o in c if o.error}


def _show(state: tuple[Any, Any]) -> str:
    placements, locks = state
    where = "; ".join(f"job {j} in {', '.join(p) or 'nothing'}" for j, p in placements)
    held = ", ".join(f"{j} by {t}" for j, t in locks)
    return where + (f"; locks: {held}" if held else "")


__all__ = ["CHECK_MODES", "FINISH_RULE", "CheckResult", "CheckRow", "check_scripts", "finish_files_its_job"]
