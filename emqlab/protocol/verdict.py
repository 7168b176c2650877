"""Verdicts and exit codes: the one home of what a checking command concludes and how it exits.

A command that checks (``emqlab simulate``, ``emqlab replay``, ``emqlab scenarios --check``) ends with one of
three verdicts:

* **holds** — the exploration was complete at the stated bound (every interleaving, or every one with at most
  K preemptions when a bound is stated) and no run showed an anomaly;
* **fails** — a run showed an anomaly; its witness and replay command are printed;
* **inconclusive** — no anomaly was seen, but the exploration was not complete: a sampled strategy (random,
  PCT — with PCT's probability bound and the bug depth it assumes), or a run budget was hit, or
  infrastructure errors aborted runs or stopped the exploration (:attr:`emqlab.explore.Report.aborted`,
  :attr:`~emqlab.explore.Report.stopped`: the reason and how many runs, or how much was covered). An anomaly
  found in the runs that completed still *fails* (its witness replays); the reason then says the counts are
  lower bounds.

Without a check option, an exploration in which server errors aborted runs or stopped it exits 3 (a command
whose runs could not all complete truthfully never exits 0 by default); with ``--fail-on-anomaly`` the
verdict's own code, with ``--expect`` whether the expectation is settled, as always.

:class:`ExitCode` lists every exit status of the ``emqlab`` command; :func:`markdown_table` renders it for
the docs (``docs/cli.md`` carries the table; a test checks that the two match).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ExitCode", "Verdict", "judge", "markdown_table", "REPORT_TO", "HOLDS", "FAILS", "INCONCLUSIVE"]

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"

#: where an internal error (a bug in emqlab) should be reported
REPORT_TO = "the emqlab issue tracker (include the command line and `emqlab --version`)"


class ExitCode(enum.IntEnum):
    """The exit status of ``emqlab``. Codes 0, 1 and 3 carry the verdict only when the command was asked to
    check (``--expect`` or ``--fail-on-anomaly``; ``scenarios --check`` always); otherwise a completed run
    exits 0 whatever it found."""

    HOLDS = 0
    FAILS = 1
    USAGE = 2
    INCONCLUSIVE = 3
    INFRASTRUCTURE = 4  # (before any run could start; later server errors make a verdict inconclusive)
    INTERNAL = 5
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS: dict[ExitCode, str] = {
    ExitCode.HOLDS: "holds: complete exploration at the stated bound, no anomaly; or the `--expect` "
                    "expectation is met; `grade`: full marks; or a command that does not check completed",
    ExitCode.FAILS: "fails: an anomaly was found (`--fail-on-anomaly`), or the `--expect` expectation is not "
                    "met (an unexpected anomaly, or an expected one absent from a complete exploration); "
                    "`grade`: below full marks",
    ExitCode.USAGE: ("usage error: a bad option, scenario file, schedule string, notebook or Redis URL, or a fault"
                     " the scenario asks for that emqlab refuses on a server it did not start (`restart`,"
                     " `script-flush` on a live server)"),
    ExitCode.INCONCLUSIVE: "inconclusive: no anomaly seen (or an expected one not seen) but the exploration "
                           "was sampled (random, PCT) or stopped at a budget; or, without a check option, "
                           "server errors aborted runs or stopped the exploration (whatever it found: the "
                           "verdict line says fails when the runs that completed showed an anomaly)",
    ExitCode.INFRASTRUCTURE: "infrastructure error: Redis unreachable, authentication failed, a server "
                             "error before any run could start, or the run's keys already exist",
    ExitCode.INTERNAL: "internal error: an unexpected exception (a bug in emqlab); one line, the traceback "
                       "with `--debug` or `EMQLAB_DEBUG=1`",
    ExitCode.INTERRUPTED: "interrupted by Ctrl-C (128 + SIGINT); SIGTERM and SIGHUP exit 128 + the signal "
                          "number (143, 129) and say `stopped by SIGTERM` / `stopped by SIGHUP`, after the run's "
                          "keys are deleted. The first stop signal decides the status; a second one is ignored "
                          "while the clean-up runs, and a third ends the command at once without cleaning up",
}


def markdown_table() -> str:
    """The exit-code table of the docs (``docs/cli.md``), generated from :class:`ExitCode`."""
    rows = ["| exit code | name | meaning |", "|---:|---|---|"]
    rows += [f"| {c.value} | `{c.name.lower()}` | {c.meaning} |" for c in ExitCode]
    return "\n".join(rows)


@dataclass
class Verdict:
    """What a check concludes. ``kind`` is holds, fails or inconclusive; ``reason`` one sentence;
    ``expect`` the expected anomaly kinds (``[]`` = ``--expect none``; ``None`` = no expectation);
    ``infrastructure`` is the sentence on runs aborted or an exploration stopped by server errors ('' when
    none were)."""

    kind: str
    reason: str
    anomalies: list[str] = field(default_factory=list)
    complete: bool = True
    bound: dict[str, Any] = field(default_factory=dict)
    expect: list[str] | None = None
    expectation: str = ""
    infrastructure: str = ""

    @property
    def expectation_met(self) -> bool | None:
        """True/False when an expectation was given and the run settles it; None when there is none or the
        run cannot settle it (sampled, no unexpected anomaly, an expected one not seen)."""
        if self.expect is None:
            return None
        found, wanted = set(self.anomalies), set(self.expect)
        if found - wanted:
            return False
        if wanted - found or not wanted:
            # an expected kind not seen, or `--expect none`: only a complete exploration settles it
            return (not (wanted - found)) if self.complete else None
        return True  # every expected kind was seen (a witness each) and nothing else

    def exit_code(self, check: bool) -> ExitCode:
        """The exit status: with an expectation, whether it is met (met 0, not met 1, unsettled 3); else,
        when ``check`` (``--fail-on-anomaly``), the verdict's own code; else 0 — or 3 when infrastructure
        errors aborted runs or stopped the exploration."""
        if self.expect is not None:
            met = self.expectation_met
            return ExitCode.HOLDS if met else (ExitCode.FAILS if met is False else ExitCode.INCONCLUSIVE)
        if not check:
            return ExitCode.INCONCLUSIVE if self.infrastructure else ExitCode.HOLDS
        return {HOLDS: ExitCode.HOLDS, FAILS: ExitCode.FAILS, INCONCLUSIVE: ExitCode.INCONCLUSIVE}[self.kind]

    def line(self) -> str:
        return f"verdict: {self.kind} — {self.reason}"

    def expectation_line(self) -> str:
        """``expectation met: …`` / ``expectation not met: …`` / ``expectation not settled: …`` ('' without one)."""
        if self.expect is None:
            return ""
        met = self.expectation_met
        head = {True: "expectation met", False: "expectation not met", None: "expectation not settled"}[met]
        return f"{head}: {self.expectation}"

    def to_dict(self, check: bool = False) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "anomalies": self.anomalies, "complete": self.complete,
                "bound": self.bound, "expect": self.expect, "expectation_met": self.expectation_met,
                "infrastructure": self.infrastructure, "exit_code": int(self.exit_code(check))}


def _pct_bound(params: dict[str, Any]) -> dict[str, Any]:
    p = float(params.get("p_per_run_at_least") or 0.0)
    runs = int(params.get("runs") or 0)
    miss = (1.0 - p) ** runs if 0.0 < p <= 1.0 else 1.0
    return {"strategy": "pct", "depth": params.get("depth"), "runs": runs, "p_per_run_at_least": p,
            "bound_per_run": params.get("bound_per_run"), "miss_probability_at_most": miss,
            "assumes": params.get("assumes")}


def judge(rep: Any, expect: Iterable[str] | None = None, *, witnesses: str = "above") -> Verdict:
    """The verdict of an :class:`emqlab.explore.Report` (``expect``: the expected anomaly kinds, ``[]`` for
    none, ``None`` for no expectation); ``witnesses`` says where the reader finds them (``above`` in the
    text report, ``in "witnesses"`` in its JSON, ``is this history`` in a replay's JSON)."""
    kinds = list(rep.anomaly_kinds)
    strategy = rep.strategy
    bound: dict[str, Any] = {}
    # a report says why it is not conclusive in params["inconclusive"] (a time budget, aborted runs)
    stopped = rep.params.get("inconclusive") if isinstance(rep.params, dict) else None
    infra = rep.infrastructure() if hasattr(rep, "infrastructure") else ""
    if infra:
        stopped = infra
    complete = strategy in ("exhaustive", "replay") and bool(rep.complete) and not stopped
    if strategy == "exhaustive":
        k = rep.params.get("preemption_bound")
        bound = {"strategy": "exhaustive", "preemption_bound": k}
        scope = (f"all {rep.raw_interleavings:,} interleaving(s)" if k is None else
                 f"all {rep.raw_interleavings:,} interleaving(s) with at most {k} preemption(s)")
    elif strategy == "replay":
        bound = {"strategy": "replay", "schedule": rep.params.get("schedule")}
        scope = "the one schedule replayed"
    elif strategy == "pct":
        bound = _pct_bound(rep.params)
        scope = f"{rep.explored:,} PCT run(s)"
    else:
        bound = {"strategy": strategy, "runs": rep.explored}
        scope = f"{rep.explored:,} {strategy} run(s)"
    if kinds:
        exact = strategy == "exhaustive" and rep.raw_exact
        counts = rep.interleavings_with if exact else rep.runs_with
        total = rep.raw_interleavings if exact else rep.explored
        unit = "interleavings" if exact else "runs"
        if strategy == "replay":
            found = f"{', '.join(kinds)} in the replayed schedule"
        else:
            found = "; ".join(f"{k} in {counts.get(k, 0):,} of {total:,} {unit}" for k in kinds)
            if bound.get("preemption_bound") is not None:
                found += f" (at most {bound['preemption_bound']} preemption(s))"
            elif strategy != "exhaustive":
                found += f" ({strategy} samples)"
        shown = getattr(rep, "witnesses", None)
        unshown = [k for k in kinds if shown is not None and k not in shown]
        shows = (f"witness {witnesses}" if not unshown else
                f"witness{'es' if len(unshown) > 1 else ''} of {', '.join(unshown)} not replayed"
                 + (" (see above)" if witnesses == "above" else ""))
        v = Verdict(FAILS, f"{found}; {shows}" + (f"; {infra}" if infra else ""), kinds, complete, bound)
    elif complete and strategy == "replay":  # (one schedule: nothing was explored beyond it)
        v = Verdict(HOLDS, f"no anomaly in {scope}", kinds, complete, bound)
    elif complete:
        v = Verdict(HOLDS, f"no anomaly in {scope} (complete exploration"
                           f"{' at that bound' if bound.get('preemption_bound') is not None else ''})",
                    kinds, complete, bound)
    elif infra:
        covered = ("the one schedule replayed" if strategy == "replay" else
                   f"the {rep.explored:,} run(s) that completed")
        v = Verdict(INCONCLUSIVE, f"no anomaly in {covered}, but {infra}", kinds, complete, bound)
    elif strategy == "pct":
        v = Verdict(INCONCLUSIVE,
                    f"no anomaly in {scope} (sampled): each run finds a bug of depth <= {bound['depth']} with "
                    f"probability >= {bound['bound_per_run']} = {bound['p_per_run_at_least']:.3g}, so one is "
                    f"missed by all {bound['runs']} runs with probability <= "
                    f"{bound['miss_probability_at_most']:.3g}; a deeper bug has no bound", kinds, complete, bound)
    elif strategy == "random":
        v = Verdict(INCONCLUSIVE, f"no anomaly in {scope} (sampled, no probability bound; "
                                  "use --strategy exhaustive for a complete answer)", kinds, complete, bound)
    else:
        why = str(stopped) if stopped else "the exploration stopped at its run budget"
        v = Verdict(INCONCLUSIVE, f"no anomaly in {scope.removeprefix('all ')}, but {why}", kinds, complete, bound)
    v.infrastructure = infra
    if expect is not None:
        wanted = sorted(set(expect))
        v.expect = wanted
        seen = set(kinds)
        unexpected = sorted(seen - set(wanted))
        missing = sorted(set(wanted) - seen)
        said = f"--expect {' --expect '.join(wanted) if wanted else 'none'}"
        partial = "an exploration that server errors cut short" if infra else "a sampled exploration"
        if unexpected:
            v.expectation = f"{said}, but found {', '.join(unexpected)}"
        elif missing and complete:
            v.expectation = f"{said}, but the complete exploration never showed {', '.join(missing)}"
        elif missing:
            v.expectation = f"{said}: {', '.join(missing)} not seen by {partial}"
        elif not wanted and not complete:
            v.expectation = f"{said}: no anomaly seen, but {partial} cannot show there is none"
        else:
            v.expectation = said
    return v
