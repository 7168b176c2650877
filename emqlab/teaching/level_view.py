"""The one home of what a level's player sees, computed as data for the terminal
(:class:`emqlab.teaching.levels.Game`) and the stepper widget (:class:`emqlab.ui.stepper.SchedulerStepper` with
``level=``) alike: :func:`board` (the queue's lists, sets and locks with the dangerous states marked),
:func:`position` (the Lua line an actor runs next, and the READ / DECIDE / WRITE section of its script),
:func:`explain` (a command in words), :func:`result_text` and :func:`legend` (the job fields and the scripts'
return codes, read from the scripts' own header comments), :func:`excerpt` (the script lines around an actor's
current one) and :func:`script_calls` (the commands a whole-script step ran).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from emqlab.protocol.keys import QUEUE_KEY_NAMES

#: the lists and sets the board always shows (others only when they hold a job)
BOARD = ("wait", "active", "stalled", "completed", "failed")
_MORE = ("delayed", "prioritized", "paused")


@dataclass(frozen=True)
class Danger:
    """A dangerous state on the board: ``level`` is ``broken`` (the damage is done), ``exposed`` (a sweep
    that runs now does the damage) or ``warning``."""

    job: str
    kind: str
    level: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"job": self.job, "kind": self.kind, "level": self.level, "text": self.text}


def _job_order(job: str) -> tuple[int, int, str]:
    return (0, int(job), "") if job.isdigit() else (1, 0, job)


def board(runner: Any) -> dict[str, Any]:
    """The queue as the player sees it now: ``lists`` (wait, active, stalled, completed, failed, and
    delayed / prioritized / paused when not empty: name → job ids), ``locks`` (job → token), ``jobs``
    (job → its fields ``atm``, ``ats``, ``stc``, ``defa``…, and ``exists``), ``holders`` (job → the actors
    working on it), ``dangers`` (a list of :class:`Danger` as dicts), ``counters`` (the queue's metrics
    counters, ``completed``/``failed`` → count, when the scenario keeps them; else empty) and ``attempts``
    (job → the attempts its options allow, for a job that sets them): every value a level's goal names."""
    fs = runner.final_state()
    members = runner.conn.smembers(runner.keys.stalled)
    stalled = sorted((m.decode() if isinstance(m, bytes) else str(m)) for m in members)
    placements: dict[str, list[str]] = {**fs["placements"], **fs.get("others", {})}
    lists: dict[str, list[str]] = {n: [] for n in BOARD + _MORE}
    for job in sorted(placements, key=_job_order):
        for p in placements[job]:
            lists.setdefault(p, []).append(job)
    lists["stalled"] = sorted(stalled, key=_job_order)
    shown = {n: v for n, v in lists.items() if n in BOARD or v}
    lost_lists = _unindexed(runner)
    for key, lost in lost_lists.items():
        shown[f"{key} (unindexed)"] = lost
    locks: dict[str, str] = dict(sorted(fs["locks"].items()))
    holders: dict[str, list[tuple[str, str]]] = {}
    for e in runner.executions:
        if e.open:
            holders.setdefault(e.job, []).append((e.actor, e.token))
    dangers: list[Danger] = []
    jobs: dict[str, dict[str, Any]] = fs["jobs"]
    for job in sorted(set(placements) | set(holders), key=_job_order):
        places = placements.get(job, [])
        exists = jobs.get(job, {}).get("exists", True)
        if len(places) > 1:
            dangers.append(Danger(job, "two-places", "broken",
                                  f"job {job} is in {' and '.join(places)} at once: it is in more than one place"))
        if places and not exists:
            dangers.append(Danger(job, "phantom", "broken",
                                  f"job {job} is in {' and '.join(places)} but its data is gone: a worker "
                                  "will fetch an id with no job behind it"))
        who = holders.get(job, [])
        if len(who) > 1:
            dangers.append(Danger(job, "two-holders", "broken",
                                  f"{' and '.join(a for a, _ in who)} both work on job {job}: it runs twice"))
        if "active" in places and job not in locks:
            if job in stalled:
                dangers.append(Danger(job, "exposed", "exposed",
                                      f"job {job} is active, marked and unlocked: a sweep now would recover it"))
            else:
                dangers.append(Danger(job, "unlocked", "warning",
                                      f"job {job} is active without a lock: the next sweep marks it, the one "
                                      "after recovers it"))
        for actor, token in who:
            held = locks.get(job)
            if held is not None and held != token:
                dangers.append(Danger(job, "foreign-lock", "warning",
                                      f"{actor} still works on job {job}, but its lock now holds {held}"))
        waiting = [p for p in places if p in ("wait", "prioritized", "delayed", "paused")]
        if who and waiting:
            dangers.append(Danger(job, "requeued", "broken",
                                  f"job {job} is back in {waiting[0]} while {' and '.join(a for a, _ in who)} "
                                  "still works on it: another worker will run it again"))
        if not places and exists and who:
            dangers.append(Danger(job, "nowhere", "warning",
                                  f"job {job} is in no list or set: it has left active and is not filed yet"))
    for key, lost in lost_lists.items():
        place = next(p for p in runner.scenario.places if p.key == key)
        for job in lost:
            dangers.append(Danger(job, "unindexed", "broken",
                                  f"job {job} sits in {key}, but {place.index} no longer names {place.member}: "
                                  "no poll will find it"))
    counters = {k: int(v or 0) for k, v in fs["metrics"].items()} if fs.get("metrics_on") else {}
    ceilings = {j: spec.attempts for j, spec in runner.scenario.jobs.items() if spec.attempts}
    return {"lists": shown, "locks": locks, "jobs": {j: dict(v) for j, v in jobs.items()},
            "holders": {j: [a for a, _ in w] for j, w in holders.items()},
            "dangers": [d.to_dict() for d in dangers], "counters": counters, "attempts": ceilings}


def _unindexed(runner: Any) -> dict[str, list[str]]:
    """The scenario's indexed places whose index no longer names them but that still hold jobs (relative
    key → job ids): in no place for the engine (no poller finds them), but the data is there, and the board
    shows it rather than let the job vanish."""
    out: dict[str, list[str]] = {}
    conn, keys = runner.conn, runner.keys
    for place in runner.scenario.places:
        if place.index is None or conn.zscore(keys.key(place.index), place.member) is not None:
            continue
        key = keys.key(place.key)
        if place.type == "list":
            members = conn.lrange(key, 0, -1)
        elif place.type == "set":
            members = sorted(conn.smembers(key))
        else:
            members = conn.zrange(key, 0, -1)
        held = [place.job_of(m.decode() if isinstance(m, bytes) else str(m)) for m in members]
        if held:
            out[place.key] = held
    return out


@dataclass(frozen=True)
class ScriptSource:
    """A script's text as the host runs it (includes inlined) and what the stepper shows of it: for each
    line its ``origin`` (file, line in that file), the ``sections`` its own comments mark (``-- 1. READ
    --``, ``-- THROTTLE``: (line, name), lines of the main file only), its ``steps`` (``-- W1: release
    the lock.``: (line, label)), its local ``functions`` (line, name), its ``summary`` (the first
    paragraph of its header comment) and ``returns`` (its header's RETURNS rows: (reply, meaning))."""

    name: str
    file: str
    lines: tuple[str, ...]
    origin: tuple[tuple[str, int], ...]
    sections: tuple[tuple[int, str], ...]
    steps: tuple[tuple[int, str], ...]
    functions: tuple[tuple[int, str], ...]
    summary: str
    returns: tuple[tuple[str, str], ...]

    def _last(self, marks: Sequence[tuple[int, str]], line: int, file: str | None = None,
              after: int = 0) -> tuple[int, str] | None:
        found = None
        for at, what in marks:
            if at > line:
                break
            if at > after and (file is None or self.origin[at - 1][0] == file):
                found = (at, what)
        return found

    def section_at(self, line: int) -> tuple[int, str] | None:
        """The section (line of its header, name) that main-file ``line`` is in, if the script marks any."""
        return self._last(self.sections, line)

    def step_at(self, line: int) -> str | None:
        """The step comment (``write 1: release the lock.``, from ``-- W1: release the lock.``) above ``line``
        in its file, within its section."""
        file = self.origin[line - 1][0] if 0 < line <= len(self.origin) else None
        sec = self.section_at(line) if file == self.file else None
        found = self._last(self.steps, line, file, sec[0] if sec else 0)
        return found[1] if found else None

    def function_at(self, line: int) -> str | None:
        """The local function ``line`` is in (the last one defined above it in the same file)."""
        file = self.origin[line - 1][0] if 0 < line <= len(self.origin) else None
        found = self._last(self.functions, line, file)
        return found[1] if found else None

    def where(self, line: int) -> str:
        """``moveToFinished-14.lua:232`` or ``includes/fetchNextJob.lua:45``."""
        file, n = self.origin[line - 1] if 0 < line <= len(self.origin) else (self.file, line)
        return f"{file}:{n}"


_SECTION = re.compile(r"^--\s+(?:\d+\.\s+)?([A-Z][A-Z-]{2,})(?:\s+--.*)?\s*$")
_STEP = re.compile(r"^\s*--\s+((?:[RW]\d+)|(?:Step \d+)):\s*(.*?)\s*$")
_FUNCTION = re.compile(r"^\s*(?:local\s+)?function\s+([A-Za-z_][A-Za-z0-9_.:]*)\s*\(")
_RETURN_ROW = re.compile(r"^\s{4,}(\S.*?)\s{2,}(\S.*?)\s*$")


def _step_label(label: str) -> str:
    """A script's step label as a reader sees it: ``W1`` → ``write 1``, ``R4`` → ``rule 4`` (the script's
    own ``W1`` would read as the actor W1 next to it)."""
    kind, n = label[:1], label[1:]
    if n.isdigit() and kind in "RW":
        return f"{'rule' if kind == 'R' else 'write'} {n}"
    return label


def _sentence(text: str) -> str:
    """The first sentence of a comment (without a trailing colon)."""
    m = re.match(r"(.+?[.])(\s|$)", text)
    return (m.group(1) if m else text).rstrip(":").strip()


def _comment_text(lines: Sequence[str], i: int, first: str) -> str:
    """``first`` (the text of comment line ``i``, 0-based) and the comment lines that continue its first
    sentence."""
    text = first
    for ln in lines[i + 1:i + 4]:
        if re.search(r"[.](\s|$)", text):
            break
        m = re.match(r"^\s*--\s+(.*)$", ln)
        if not m or _STEP.match(ln):
            break
        text += " " + m.group(1).strip()
    return text


@lru_cache(maxsize=64)
def script_source(name: str, file: str, text: bytes) -> ScriptSource:
    """The :class:`ScriptSource` of a flattened script (cached)."""
    lines = tuple(text.decode("utf-8", "replace").split("\n"))
    stack: list[list[Any]] = [[file, 0]]
    origin: list[tuple[str, int]] = []
    for ln in lines:
        opened = re.match(r"^-- >>> (\S+)\s*$", ln)
        closed = re.match(r"^-- <<< (\S+)\s*$", ln)
        if opened:
            stack[-1][1] += 1
            origin.append((stack[-1][0], stack[-1][1]))
            stack.append([opened.group(1), 0])
        elif closed and len(stack) > 1:
            stack.pop()
            origin.append((stack[-1][0], stack[-1][1]))
        else:
            stack[-1][1] += 1
            origin.append((stack[-1][0], stack[-1][1]))
    sections, steps, functions = [], [], []
    for i, ln in enumerate(lines, start=1):
        if origin[i - 1][0] == file:
            m = _SECTION.match(ln)
            if m:
                sections.append((i, m.group(1)))
        m = _STEP.match(ln)
        if m:
            steps.append((i, f"{_step_label(m.group(1))}: {_sentence(_comment_text(lines, i - 1, m.group(2)))}"))
        m = _FUNCTION.match(ln)
        if m:
            functions.append((i, m.group(1)))
    header: list[str] = []
    if lines and lines[0].startswith("--[["):
        for ln in lines[1:]:
            if ln.startswith("]]"):
                break
            header.append(ln)
    para: list[str] = []
    for ln in header:
        if not ln.strip():
            break
        para.append(ln.strip())
    summary = " ".join(para).split(" Protocol: ")[0]
    returns: list[tuple[str, str]] = []
    in_returns = False
    for ln in header:
        if ln.strip().startswith("RETURNS"):
            in_returns = True
            rest = ln.strip()[len("RETURNS"):].strip()
            if rest:
                returns.append(("", rest))
            continue
        if not in_returns:
            continue
        if not ln.strip() or re.match(r"^\s{0,3}[A-Z][A-Z ]{2,}\b", ln):
            break
        m = _RETURN_ROW.match(ln)
        if m and (m.group(1)[0] in "-{0123456789"):
            returns.append((m.group(1), " ".join(m.group(2).split())))
        elif returns and returns[-1][0] == "":  # a note goes on
            returns[-1] = ("", f"{returns[-1][1]} {ln.strip()}")
        else:
            returns.append(("", ln.strip()))
    return ScriptSource(name, file, lines, tuple(origin), tuple(sections), tuple(steps), tuple(functions),
                        summary, tuple(returns))


def _source_of(runner: Any, name: str) -> ScriptSource | None:
    try:
        sc = runner.scripts[name]
    except KeyError:
        return None
    return script_source(sc.name, sc.file_name, sc.text)


def _split_run_of(runner: Any, op: Any) -> Any:
    """The split script run whose pending command ``op`` is (the op carries the very tuple)."""
    for run in runner.split_runs:
        if run.pending is not None and run.pending is op.command:
            return run
    return None


def _parts(runner: Any, command: Sequence[Any]) -> list[str]:
    out = []
    for p in command:
        if isinstance(p, bytes):
            try:
                text = p.decode()
            except UnicodeDecodeError:
                out.append("<msgpack>")
                continue
            out.append(runner.keys.relative(text) if text.isprintable() else "<msgpack>")
        else:
            out.append(str(p))
    return out


def position(runner: Any, actor: str) -> dict[str, Any] | None:
    """Where ``actor`` is: its next step's ``kind``, ``script`` (the script it belongs to; ``summary``, the
    first paragraph of its header comment), ``atomic``
    (the whole script is the step), ``line`` (the line of the pending ``redis.call`` in the flattened
    script, highlighted by the stepper; ``lines`` is the Lua stack, innermost first), ``at`` (that line
    as ``file:line``), ``section`` (the script's own section: READ, DECIDE, WRITE in moveToFinished;
    THROTTLE, CHECK, MARK in the sweep), ``step`` (``W1: release the lock.``), ``inside`` (the included
    function the call is in), ``access`` (``reads`` / ``writes``) and ``explain`` (the command in
    words). ``None`` when the actor is done."""
    from emqlab.protocol.commands import is_read_only

    op = runner.pending.get(actor)
    if op is None:
        return None
    pos: dict[str, Any] = {"kind": op.kind, "script": None, "atomic": False, "line": None, "lines": (),
                           "at": None, "section": None, "step": None, "inside": None, "access": None,
                           "explain": "", "summary": ""}
    if op.kind == "script":
        name = op.label
        try:
            name = op.build(runner.now()).name
        except Exception:  # noqa: BLE001 - a call that cannot be built here: the label names the script
            pass
        src = _source_of(runner, name)
        pos.update(script=name, atomic=True, section="the whole script", summary=src.summary if src else "",
                   explain="one EVALSHA: the whole script runs, first line to last, before anyone else")
        return pos
    if op.kind in ("clock", "fault"):
        pos["explain"] = (f"a clock event, not a round trip: {op.section} (its time to live ran out)"
                          if op.kind == "clock" else f"a fault: {op.section}")
        return pos
    if op.batch is not None:
        cmds = op.batch(runner.now())
        names = " ".join(c[0].decode().upper() for c in cmds)
        pos.update(access="writes" if op.multi else "reads",
                   explain=(f"one transaction (MULTI {names} EXEC): runs only if no WATCHed key changed"
                            if op.multi else f"one pipelined round trip: {names}"))
        return pos
    assert op.command is not None
    pos["access"] = "reads" if is_read_only(op.command[0]) else "writes"
    pos["explain"] = explain(_parts(runner, op.command))
    run = _split_run_of(runner, op)
    if run is None:
        return pos
    script = next((s for s in runner.scripts if s.sha == run.sha), None)
    pos["script"] = script.name if script is not None else op.label
    lines = tuple(run.lines)
    if script is None or not lines:
        return pos
    src = script_source(script.name, script.file_name, script.text)
    pos["summary"] = src.summary
    inner, outer = lines[0], lines[-1]
    sec = src.section_at(outer)
    pos.update(line=inner, lines=lines, at=src.where(inner), section=sec[1] if sec else None,
               step=src.step_at(outer))
    if src.origin[inner - 1][0] != src.file or inner != outer:
        fn = src.function_at(inner)
        inner_step = src.step_at(inner)
        pos["inside"] = " · ".join(x for x in (f"in {fn}()" if fn else None, inner_step) if x) or None
    return pos


def excerpt(runner: Any, pos: dict[str, Any], before: int, after: int) -> dict[str, Any]:
    """The lines of an actor's script around its current line (``pos``: its :func:`position`), for the
    terminal game and the stepper alike: ``file`` (the script's file), ``lines`` ((line in the flattened
    script, line in its file, text, current?) each; ``before`` and ``after`` lines around the current one,
    fewer at the script's ends; for a whole-script step, the script's section headers, all current),
    ``origin_file`` (the file the current line comes from: an include's) and ``called_from`` ((file:line,
    text) of the main script's line that called the include, or None). Empty ``lines`` when the step is
    no script's (a plain command, a clock event, a fault)."""
    out: dict[str, Any] = {"file": None, "lines": [], "origin_file": None, "called_from": None}
    name = pos.get("script")
    if not name or name not in runner.scripts:
        return out
    sc = runner.scripts[name]
    src = script_source(sc.name, sc.file_name, sc.text)
    out["file"] = sc.file_name
    line = pos.get("line")
    if line:
        first, last = max(1, line - before), min(len(src.lines), line + after)
        out["lines"] = [(n, src.origin[n - 1][1], src.lines[n - 1], n == line) for n in range(first, last + 1)]
        out["origin_file"] = src.origin[line - 1][0]
        outer = pos["lines"][-1] if pos.get("lines") else line
        out["called_from"] = (src.where(outer), src.lines[outer - 1].strip()) if outer != line else None
    elif pos.get("atomic"):
        out["lines"] = [(n, src.origin[n - 1][1], src.lines[n - 1], True) for n, _ in src.sections]
    return out


def script_calls(runner: Any, index: int) -> list[dict[str, str]] | None:
    """The commands the whole-script step number ``index`` ran (each ``redis.call``, in order), each as
    ``command`` (keys relative to the queue: ``HGET 1 atm``), ``reply`` (Redis style: ``1``, ``"W1:1"``,
    ``nil``, ``ERR …``) and ``explain`` (the command in words). ``None`` when step ``index`` is no
    whole-script step run through the Lua host (a split command, a clock event, a script sent to a live
    server as one EVALSHA: the server does not say what it ran)."""
    from emqlab.engine.history import render_reply, step_reply

    calls = getattr(runner, "script_calls", {}).get(index)
    if calls is None:
        return None
    out = []
    for command, reply in calls:
        parts = _parts(runner, command)
        shown = render_reply(step_reply(reply))
        if parts[0].upper() == "XADD" and not shown.startswith("ERR"):
            shown = "<entry id>"  # (the server's clock: it differs from run to run, as in the history)
        out.append({"command": " ".join(p if p else '""' for p in parts), "reply": shown, "explain": explain(parts)})
    return out


# -- a command in words ---------------------------------------------------------------------------------------

#: the job-hash fields a student meets, in words (from lua/*.lua and docs/protocol.md)
FIELDS: dict[str, str] = {
    "atm": "attempts made: moveToFinished counts one when it files an attempt (W5: HINCRBY atm 1); a failure "
           "is retried while atm + 1 < attempts and the job has no defa",
    "ats": "attempts started: the fetch counts one each time a worker takes the job (HINCRBY ats 1)",
    "stc": "stalled counter: the sweep counts one each time it takes the job back from an active worker "
           "whose lock is gone (HINCRBY stc 1)",
    "defa": "deferred failure: the sweep sets it once stc passes maxStalledCount (\"job stalled more than "
            "allowable limit\"); the job still goes back to wait, and the worker that fetches it next fails "
            "it with that reason",
    "processedOn": "when a worker took the job (virtual ms)",
    "finishedOn": "when the finish filed the job in completed or failed (virtual ms)",
    "returnvalue": "a completed job's result (JSON text)",
    "failedReason": "why a failed job failed",
    "priority": "the job's priority (0 = none; a prioritized job waits in prioritized)",
    "pb": "processed by: the name of the worker that took the job",
}
_SHORT = {"atm": "attempts made (atm)", "ats": "attempts started (ats)", "stc": "stalled counter (stc)",
          "defa": "deferred failure (defa)", "priority": "priority", "processedOn": "processedOn",
          "finishedOn": "finishedOn", "returnvalue": "returnvalue", "failedReason": "failedReason",
          "pb": "processed by (pb)"}
#: the other words on the board
TERMS: dict[str, str] = {
    "W1:1": "a lock token: W1's first lock (W1:2 is its second). A job's lock key holds the token of the "
            "worker that owns the job; a finish checks it (-2 no lock, -6 another token)",
    "stalled": "the stall candidates (\"marked\"): every job a sweep saw in active. The next sweep recovers "
               "each marked job whose lock is gone; a live worker clears its mark by renewing its lock or by "
               "finishing",
    "round trip": "one command (or one EVALSHA) sent and answered; each click of an actor is one round trip",
}


def _job_key(k: str) -> str | None:
    if k in QUEUE_KEY_NAMES or ":" in k or not k or k.startswith("<"):
        return None
    return k


def _fields(names: Sequence[str]) -> str:
    return ", ".join(_SHORT.get(n, n) for n in names)


def explain(parts: Sequence[str]) -> str:
    """A command (its parts, keys relative to the queue: ``["HMGET", "1", "atm", "defa", "priority"]``) in
    words: ``read job 1's attempts made (atm), deferred failure (defa), priority``."""
    if not parts:
        return ""
    name, a = parts[0].upper(), list(parts[1:])
    key = a[0] if a else ""
    job = _job_key(key)
    lock = key[:-len(":lock")] if key.endswith(":lock") else None
    if name == "EXISTS":
        if lock:
            return f"is job {lock} still locked? (1 yes, 0 no)"
        if job:
            return f"does job {job} exist? (1 yes, 0 no)"
        if key == "stalled-check":
            return "did a sweep already run in this stalled interval?"
        return f"does {key} exist?"
    if name == "GET":
        if lock:
            return f"read job {lock}'s lock: the token of the worker that holds it (nil: nobody)"
        if key == "limiter":
            return "read the rate limiter's count"
        return f"read {key}"
    if name == "SET":
        ms = a[a.index("PX") + 1] if "PX" in a and a.index("PX") + 1 < len(a) else None
        ttl = f" for {ms} ms" if ms else ""
        if lock:
            return f"lock job {lock} with token {a[1] if len(a) > 1 else '?'}{ttl}"
        if key == "stalled-check":
            return f"start a stalled interval: no other sweep runs{ttl}"
        return f"set {key}"
    if name == "DEL":
        if lock:
            return f"release job {lock}'s lock"
        if key == "stalled":
            return "clear every stall mark (the candidates were just read)"
        if job:
            return f"delete job {job}'s data"
        return "delete " + ", ".join(a)
    if name == "LPOS":
        return f"is job {a[1] if len(a) > 1 else '?'} in {key}?"
    if name in ("HMGET", "HGET"):
        if job:
            return f"read job {job}'s {_fields(a[1:])}"
        if key == "meta":
            return "read the queue's settings: " + ", ".join(a[1:])
        return f"read {', '.join(a[1:])} of {key}"
    if name == "HGETALL":
        return f"read every field of job {job or key}"
    if name in ("HSET", "HMSET"):
        names = a[1::2]
        if job and names == ["defa"]:
            return f"give job {job} a deferred failure (defa): the next worker to fetch it fails it"
        if job:
            return f"store job {job}'s {_fields(names)}"
        return f"store {', '.join(names)} in {key}"
    if name == "HDEL":
        return f"remove job {job or key}'s {_fields(a[1:])}"
    if name == "HINCRBY":
        field_ = a[1] if len(a) > 1 else ""
        if job:
            return f"count one more: job {job}'s {_SHORT.get(field_, field_)} + {a[2] if len(a) > 2 else 1}"
        if key.startswith("metrics:"):
            return f"count one more {key.split(':', 1)[1]} job in the metrics"
        return f"add to {key}'s {field_}"
    if name == "SREM" and key == "stalled":
        return f"take job {', '.join(a[1:])} off the stall candidates (unmark it)"
    if name == "SADD" and key == "stalled":
        return f"mark {', '.join(a[1:]) or 'nothing'} as stall candidates for the next sweep"
    if name == "SMEMBERS" and key == "stalled":
        return "read the stall candidates (the jobs the previous sweep marked)"
    if name == "SCARD":
        return f"how many children does job {key.split(':')[0]} still wait for?"
    if name == "ZCARD" and key.endswith(":unsuccessful"):
        return f"did a child of job {key.split(':')[0]} fail?"
    if name == "LREM":
        return f"take job {a[-1] if a else '?'} out of {key} (replies how many it removed)"
    if name in ("RPUSH", "LPUSH"):
        end = "taken next" if (name == "RPUSH") == (key == "wait") else "taken last"
        return f"put job {', '.join(a[1:])} in {key} ({end})"
    if name in ("RPOPLPUSH", "LMOVE"):
        return f"take the next job from {key} into {a[1] if len(a) > 1 else '?'}"
    if name == "ZADD":
        member = a[-1] if a else "?"
        if key in ("completed", "failed"):
            return f"file job {member} as {key}"
        if key == "marker":
            if member == "0":
                return "wake the workers: there is work (the marker)"
            return "tell the workers when the next delayed job is due (the marker)"
        if key in QUEUE_KEY_NAMES:
            return f"put job {member} in {key}"
        # (a scenario's own sorted set need not hold jobs: an index of timestamps does not)
        return f"add {member} to {key}" + (f" (score {a[1]})" if len(a) > 2 else "")
    if name == "ZPOPMIN":
        return f"take the first job of {key}"
    if name == "ZRANGEBYSCORE" and key == "delayed":
        return "find the delayed jobs now due"
    if name in ("LLEN", "ZCARD"):
        return f"how many jobs are in {key}?"
    if name == "LRANGE":
        return f"read every job in {key}"
    if name == "XTRIM":
        return "trim the event stream to its length cap"
    if name == "XADD":
        ev = a[a.index("event") + 1] if "event" in a and a.index("event") + 1 < len(a) else "?"
        return f"announce the event \u201c{ev}\u201d in the event stream"
    if name in ("INCR", "PEXPIRE", "PTTL") and key == "limiter":
        return {"INCR": "count one more job against the rate limit", "PEXPIRE": "start the rate-limit window",
                "PTTL": "how long until the rate-limit window ends?"}[name]
    return f"{name} {' '.join(a)}".strip()


def result_text(result: Any, codes: dict[str, str] | None = None, *, recovery: bool = True) -> str:
    """An actor's result in words, a negative code with its meaning (``codes``: :func:`legend`'s):
    ``finish of job 1 → -2 (the job's lock does not exist (JobLockNotExist))``. A ``sweep`` result is the
    jobs a pass took: ``sweep recovered 1`` from the recovery sweep (``recovery``), ``took 1`` from another
    actor's pass (a scheduler's poll, a registry's cleanup)."""
    kind = result.kind
    if kind == "lapsed":
        return "the lock lapsed"
    if kind == "sweep" and result.jobs is not None:
        return ("sweep recovered " if recovery else "took ") + (", ".join(result.jobs) or "nothing")
    code = str(result.outcome) if result.outcome is not None else "0"
    meaning = (codes or {}).get(code)
    if meaning is None:
        meaning = {"0": "done", "next": "done, and the next job fetched"}.get(code, "")
    head = f"{kind} of job {result.job}" if kind in ("finish", "cancel") else kind
    return f"{head} → {code}" + (f" ({meaning})" if meaning else "")


def legend(runner: Any = None) -> dict[str, Any]:
    """The legend: ``fields`` (the job fields in words), ``terms`` (tokens, stall marks) and ``returns``
    (script → its header's RETURNS rows, (reply, meaning)), for the scripts a worker and a sweep run;
    ``codes`` maps moveToFinished's negative codes to their meaning."""
    from emqlab.scripting.registry import default_scripts

    scripts = runner.scripts if runner is not None else default_scripts()
    returns: dict[str, list[tuple[str, str]]] = {}
    for name in ("moveToFinished", "moveToActive", "moveStalledJobsToWait", "extendLock"):
        if name in scripts:
            src = script_source(name, scripts[name].file_name, scripts[name].text)
            if src.returns:
                returns[name] = list(src.returns)
    codes = {c: m for c, m in returns.get("moveToFinished", []) if c.startswith("-")}
    return {"fields": dict(FIELDS), "terms": dict(TERMS), "returns": returns, "codes": codes}
