"""The scheduler stepper, "you are the scheduler": a button per actor takes its next step, with the Lua line
it runs, the board of places and locks, the history so far and, in a level, the goal
(:class:`SchedulerStepper`)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from emqlab.engine.scenario import Scenario, load
from emqlab.explore.checked import Runner, parse_schedule
from emqlab.explore.report import multinomial
from emqlab.ui.view import View

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.teaching.levels import Level



# -- the scheduler stepper ------------------------------------------------------------------------------------

#: the colour of each section badge (the scripts' own section names)
_SECTION_COLORS = {"READ": "#2166ac", "DECIDE": "#762a83", "WRITE": "#b2182b", "THROTTLE": "#4d4d4d",
                   "CHECK": "#2166ac", "MARK": "#b35806"}
_DANGER_STYLE = {"broken": "background:#fde0dd;color:#b2182b;font-weight:bold",
                 "exposed": "background:#fee8c8;color:#b35806;font-weight:bold",
                 "warning": "background:#fff7bc;color:#8c510a"}
_CODE_CONTEXT = (4, 8)  # lines shown before and after the current one


class SchedulerStepper(View):
    """"You are the scheduler", as a game: a button per actor takes that actor's next step (its label shows
    the pending command). Per actor, a panel shows the Lua line it will run next, highlighted in a small code
    view of its script, the script's section (READ / DECIDE / WRITE in moveToFinished, THROTTLE / CHECK /
    MARK in the sweep) and the command in words; the **board** shows the queue's lists and sets, the locks
    with their tokens and the job fields, with the dangerous states marked (a job in two places; active,
    marked and unlocked; back in wait while a worker still works on it); the annotated history so far, an
    anomaly banner with its "because", and a legend of the job fields and the scripts' return codes.

    **undo** replays the choices but the last from the initial state (runs are deterministic); **reset**
    starts over; the **one atomic finish** toggle switches the runner between split and atomic and resets:
    the worker's twenty-odd steps collapse into one, and the menu of choices shrinks visibly.

    With ``level`` (a :class:`~emqlab.teaching.levels.Level`, or its name or number) the stepper plays it:
    the level's scenario and mode (the toggle is then fixed), its question, story and goal above the
    buttons, the goal checked after every step, the victory text (with the lesson and the schedule string to
    replay it) once the run is over and the goal met, and, for a level no schedule wins, a clear
    "unsolvable" once every actor is done (the explorer confirms that no interleaving reaches the goal).

    Controls: ``buttons`` (actor id → Button), ``atomic`` (ToggleButton), ``undo_button``, ``reset_button``,
    ``rest_button`` (runs the remaining steps in scenario order), ``hint_button`` (a level's hint). Views:
    ``actor_views`` (actor id → HTML), ``state`` (the board), ``last_view`` (the last step in words),
    ``goal_view``, ``legend`` (an Accordion, closed; its HTML is ``legend_view``). Data: ``data``
    (dict), ``summary`` (str). Programmatic: :meth:`step`, :meth:`undo`, :meth:`play` (a schedule string),
    :meth:`reset`; :meth:`close` deletes the run's keys. The stepper's runner keeps its queue's keys while
    it lives: give it a connection of its own (on fakeredis a scenario's queue name is fixed, so another run
    of the same scenario on the same server would find the keys taken).
    """

    def __init__(self, scenario: str | Scenario | None = "stalled-finish", conn: Any = None, *,
                 atomic: bool = False, level: Level | str | int | None = None) -> None:
        from emqlab.teaching import levels

        self.level = levels.load_level(str(level)) if isinstance(level, (str, int)) else level
        if self.level is not None:
            scenario = self.level.scenario
            atomic = self.level.mode != "split"
        if scenario is None:
            raise TypeError("SchedulerStepper needs a scenario or a level")
        self.scenario = load(scenario) if isinstance(scenario, str) else scenario
        self.runner = Runner(self.scenario, self._mode_for(atomic), conn)
        self.atomic = W.ToggleButton(value=atomic, description="one atomic finish",
                                     tooltip="collapse the finish into one EVALSHA step (resets the run)",
                                     disabled=self.level is not None)
        self.buttons = {a.id: W.Button(layout=W.Layout(width="auto")) for a in self.scenario.actors}
        for actor, button in self.buttons.items():
            button.on_click(lambda _b, a=actor: self.step(a))
        self.undo_button = W.Button(description="undo", icon="step-backward",
                                    tooltip="take back the last step (the run is replayed without it)")
        self.undo_button.on_click(lambda _b: self.undo())
        self.reset_button = W.Button(description="reset", icon="refresh", tooltip="back to the initial state")
        self.reset_button.on_click(lambda _b: self.reset())
        self.rest_button = W.Button(description="run the rest in order", layout=W.Layout(width="auto"))
        self.rest_button.on_click(lambda _b: self.run_rest())
        self.hint_button = W.Button(description="hint", icon="lightbulb-o",
                                    layout=W.Layout(display="" if self.level is not None else "none"))
        self.hint_button.on_click(lambda _b: self.show_hint())
        self.atomic.observe(lambda _c: self.reset(), names="value")
        self.header = W.HTML(self._header_html())
        self.menu = W.HTML()
        self.banner = W.HTML()
        self.goal_view = W.HTML()
        self.last_view = W.HTML()
        self.state = W.HTML()
        self.history_view = W.HTML()
        self.actor_views = {a.id: W.HTML(layout=W.Layout(width="470px", margin="0 6px 6px 0", overflow="hidden"))
                            for a in self.scenario.actors}
        self.legend_view = W.HTML(_legend_html(levels.legend(self.runner)))
        self.legend = W.Accordion(children=[self.legend_view], titles=("legend: job fields, lock tokens, "
                                                                       "the scripts' return codes",))
        self.legend.selected_index = None
        self.widget = W.VBox([
            self.header,
            W.HBox([self.atomic, self.undo_button, self.reset_button, self.rest_button, self.hint_button]),
            self.menu,
            W.HBox(list(self.buttons.values()), layout=W.Layout(flex_flow="row wrap")),
            self.last_view,
            self.goal_view,
            self.banner,
            W.HBox(list(self.actor_views.values()), layout=W.Layout(flex_flow="row wrap")),
            W.HBox([self.state, self.history_view]),
            self.legend,
        ])
        self.steps_total: dict[str, int] = {}
        self._hint = False
        self._exhausted: tuple[int, str | None] | None = None
        self.reset()

    # -- actions -------------------------------------------------------------------------------------
    def _mode_for(self, atomic: bool) -> str:
        if self.level is not None:
            return self.level.mode
        return "atomic" if atomic else "split"

    @property
    def mode(self) -> str:
        return self._mode_for(bool(self.atomic.value))

    def reset(self) -> None:
        """Back to the scenario's initial state in the toggle's mode; recount the menu of choices."""
        r = self.runner
        r.mode = self.mode
        r.reset()
        h = r.run()  # one run in scenario order measures how many steps each actor takes in this mode
        counts = {a.id: sum(1 for s in h.steps if s.actor == a.id) for a in self.scenario.actors}
        self.steps_total = counts
        r.reset()
        self._hint = False
        self._render()

    def step(self, actor: str) -> None:
        """Let ``actor`` take its next step (no-op when it has none)."""
        if actor in self.runner.pending:
            self.runner.step(actor)
        self._render()

    def undo(self) -> bool:
        """Take back the last step: the run is replayed from the initial state with every choice but the
        last (runs are deterministic, so the history is exactly the one before that step). False when
        there is nothing to undo."""
        choices = list(self.runner.choices)
        if not choices:
            return False
        self._replay(choices[:-1])
        return True

    def _replay(self, choices: list[str]) -> None:
        r = self.runner
        r.reset()
        for actor in choices:
            r.step(actor)
        self._render()

    def play(self, schedule: str) -> None:
        """Reset, then step along ``schedule`` (``v1:W1*9.S1``)."""
        self.reset()
        for actor in parse_schedule(schedule, [a.id for a in self.scenario.actors]):
            self.runner.step(actor)
        self._render()

    def close(self) -> None:
        """Delete the run's keys (on a live server: the stepper's own unique queue)."""
        self.runner.close()

    def run_rest(self) -> None:
        """Run every remaining step, each actor to its end in scenario order."""
        r = self.runner
        while not r.done:
            r.step(r.enabled[0])
        self._render()

    def show_hint(self) -> None:
        """Show the level's hint (under the goal)."""
        self._hint = True
        self._render()

    # -- data ----------------------------------------------------------------------------------------
    def pending_text(self, actor: str) -> str | None:
        """The command ``actor`` will send next (``DEL 1:lock``, ``EVALSHA moveToFinished``,
        ``(clock) 1:lock of W1 lapses``), or ``None``."""
        op = self.runner.pending.get(actor)
        if op is None:
            return None
        if op.kind == "script":
            return f"EVALSHA {op.label}"
        if op.kind == "clock":
            return f"(clock) {op.section}"
        if op.kind == "fault":
            return f"(fault) {op.section}"
        if op.batch is not None:
            cmds = op.batch(self.runner.now())
            names = " ".join(c[0].decode().upper() for c in cmds)
            text = f"MULTI {names} EXEC" if op.multi else f"PIPELINE {names}"
            return text if len(text) <= 48 else text[:47] + "…"
        assert op.command is not None
        parts = [self.runner.keys.relative(p) if isinstance(p, bytes) and _printable(p) else
                 (p.decode() if isinstance(p, bytes) and _printable(p) else "<msgpack>") for p in op.command]
        text = " ".join(parts)
        return text if len(text) <= 48 else text[:47] + "…"

    def source(self, actor: str) -> dict[str, Any] | None:
        """What ``actor``'s code view shows: its position (:func:`emqlab.teaching.levels.position`) and the
        excerpt of its script around the current line (``excerpt``: (line in the flattened script, line in
        its file, text, current?) each), or ``None`` when it is done."""
        from emqlab.teaching.level_view import excerpt, position

        pos = position(self.runner, actor)
        if pos is None:
            return None
        pos = dict(pos)
        ex = excerpt(self.runner, pos, *_CODE_CONTEXT)
        pos["excerpt"], pos["file"] = ex["lines"], ex["file"]
        if ex["origin_file"] is not None:
            pos["origin_file"], pos["called_from"] = ex["origin_file"], ex["called_from"]
        return pos

    def _level_data(self, h: Any, done: bool) -> dict[str, Any] | None:
        lv = self.level
        if lv is None:
            return None
        from emqlab.teaching.levels import met_so_far, solve

        met = lv.goal.met(h)
        status = "playing"
        explored = None
        if done and met:
            status = "won"
        elif done:
            status = "lost"
            if not lv.solvable:
                if self._exhausted is None:
                    self._exhausted = solve(lv)
                explored, found = self._exhausted
                if found is None:
                    status = "unsolvable"
        elif met_so_far(lv, list(self.runner.choices), h):
            status = "met"
        schedule = str(self.runner.schedule)
        return {"number": lv.number, "name": lv.name, "title": lv.title, "tagline": lv.tagline,
                "story": lv.story, "goal": lv.goal.text, "hint": lv.hint, "mode": lv.mode,
                "solvable": lv.solvable, "met": met, "status": status, "won": status == "won",
                "unsolvable": status == "unsolvable", "explored": explored, "victory": lv.victory,
                "lesson": lv.lesson, "schedule": schedule, "replay": lv.replay_command(schedule),
                "why": (lv.goal.reasons(h) or [""])[0] if status == "won" else ""}

    @property
    def data(self) -> dict[str, Any]:
        """What the widget shows: mode, who can step and what they would send (``pending``; ``actors``: where
        each actor is in its script, the code excerpt, the command in words), the menu of choices, the queue
        state and the ``board`` (lists, sets, locks, fields, dangers), the history so far and the anomalies
        in it, the ``level`` (its goal and status) when playing one, and the ``legend``."""
        from emqlab.teaching.levels import board, explain, legend, result_text

        r = self.runner
        h = r.history()
        lg = legend(r)
        words = [_step_words(s, lg, explain) for s in h.steps]
        last = None
        if h.steps:
            s = h.steps[-1]
            last = {"index": s.index, "actor": s.actor, "command": s.command_text(), "explain": words[-1],
                    "reply": s.reply, "effects": [str(e) for e in s.effects]}
        final = h.final
        stalled = sorted(m.decode() if isinstance(m, bytes) else m for m in r.conn.smembers(r.keys.stalled))
        taken = dict(r.actor_steps)
        done = bool(r.done)
        sweeps = {a.id for a in r.scenario.actors if a.kind == "sweep"}
        return {
            "scenario": self.scenario.name, "mode": self.mode, "atomic": bool(self.atomic.value),
            "enabled": list(r.enabled),
            "pending": {a: self.pending_text(a) for a in r.enabled},
            "actors": {a: self.source(a) for a in r.enabled},
            "steps_total": dict(self.steps_total), "steps_taken": taken,
            "interleavings": multinomial(list(self.steps_total.values())),
            "schedule": r.schedule, "done": done,
            "state": {"placements": final["placements"], "locks": final["locks"], "stalled": stalled},
            "board": board(r),
            "history": h.annotated(marks={s: a.kind for a in h.findings for s in a.steps}),
            "history_words": words,
            "steps": len(h.steps),
            "anomalies": list(h.anomalies),
            "lesson": self.scenario.lesson,
            "results": {a: [result_text(x, lg["codes"], recovery=a in sweeps) for x in rs]
                        for a, rs in r.results.items()},
            "last": last,
            "level": self._level_data(h, done),
            "legend": lg,
        }

    @property
    def summary(self) -> str:
        d = self.data
        head = f"{d['mode']} · {d['steps']} step(s) · schedule {d['schedule']}"
        if d["level"] is not None:
            head += f" · level {d['level']['name']}: {d['level']['status']}"
        if d["anomalies"]:
            return head + " · " + "; ".join(f"{a['kind']}: {a['because']}" for a in d["anomalies"])
        return head + (" · no anomaly" if d["done"] else "")

    # -- rendering -----------------------------------------------------------------------------------
    def _header_html(self) -> str:
        lv = self.level
        if lv is None:
            return (f"<b>{_md(self.scenario.title)}</b> — you are the scheduler: pick who sends the next "
                    "command (each click is one round trip).")
        return (f"<div style='border-left:4px solid #2166ac;padding:4px 8px;background:#f0f4fa;line-height:1.35'>"
                f"<div style='font-size:13px;color:#555'>Level {lv.number} · {_md(lv.title)} · {lv.mode}</div>"
                f"<div style='font-size:16px;font-weight:bold;margin:2px 0'>{_md(lv.tagline)}</div>"
                f"<div>{_md(lv.story)}</div>"
                "<div style='margin-top:4px;color:#555'>You are the scheduler: each click sends one actor's "
                "next command (one round trip).</div></div>")

    def _render(self) -> None:
        d = self.data
        for actor, button in self.buttons.items():
            pending = d["pending"].get(actor)
            total = d["steps_total"].get(actor, 0)
            taken = d["steps_taken"].get(actor, 0)
            if pending is None:
                button.description = f"{actor}: done ({taken} step{'s' if taken != 1 else ''})"
                button.disabled = True
                button.button_style = ""
                button.tooltip = f"{actor} has no step left"
            else:
                button.description = f"{actor} ▶ {pending}   [{taken + 1}/{max(total, taken + 1)}]"
                button.disabled = False
                button.button_style = "info" if actor.startswith("W") else "warning"
                src = d["actors"].get(actor) or {}
                button.tooltip = src.get("explain") or pending
        self.undo_button.disabled = d["steps"] == 0
        counts = " · ".join(f"{a}: {n} step{'s' if n != 1 else ''}" for a, n in d["steps_total"].items())
        self.menu.value = (f"<b>{d['mode']}</b> — {counts} → <b>{d['interleavings']:,}</b> possible interleavings"
                           f" (the menu of choices). Schedule so far: <code>{html.escape(d['schedule'])}</code>")
        if d["anomalies"]:
            tag = "final" if d["done"] else "now"
            items = "".join(f"<li><b>{html.escape(a['kind'])}</b> ({tag}): {_md(a['because'])}</li>"
                            for a in d["anomalies"])
            self.banner.value = ("<div style='background:#fde0dd;padding:6px;border-left:4px solid #b2182b;"
                                 "line-height:1.35'>"
                                 f"<ul style='margin:0'>{items}</ul></div>")
        elif d["done"]:
            self.banner.value = ("<div style='background:#e5f5e0;padding:6px;border-left:4px solid #1b7837;"
                                 "line-height:1.35'>"
                                 f"<b>no anomaly</b>. {_md(d['lesson'])}</div>")
        else:
            self.banner.value = ""
        self.goal_view.value = _goal_html(d["level"], self._hint)
        self.last_view.value = _last_html(d["last"])
        for actor, view in self.actor_views.items():
            view.value = _actor_html(actor, d["actors"].get(actor), d["steps_taken"].get(actor, 0),
                                     d["results"].get(actor, []))
        self.state.value = _board_html(d["board"])
        self.history_view.value = _history_html(d["history"], d["history_words"])


def _printable(b: bytes) -> bool:
    try:
        return b.decode().isprintable()
    except UnicodeDecodeError:
        return False


def _elide(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _md(text: str) -> str:
    """Plain text with ``code`` spans (the scenarios' and levels' prose) as HTML."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _goal_html(level: dict[str, Any] | None, hint: bool) -> str:
    if level is None:
        return ""
    status = level["status"]
    goal = f"<b>Goal:</b> {_md(level['goal'])}"
    hint_html = (f"<div style='color:#555'><i>hint:</i> {_md(level['hint'] or 'no hint for this level')}</div>"
                 if hint else "")
    lesson = f"<div><b>Lesson:</b> {_md(level['lesson'])}</div>"
    if status == "won":
        return ("<div style='background:#e5f5e0;padding:6px 8px;border-left:4px solid #1b7837;line-height:1.35'>"
                f"<div style='font-size:15px'><b>You win!</b> {_md(level['victory'])}</div>"
                + (f"<div><b>Why, in this run:</b> {html.escape(level['why'])}</div>" if level.get("why") else "")
                + f"{lesson}"
                f"<div>Schedule: <code>{html.escape(level['schedule'])}</code> — replay it: "
                f"<code>{html.escape(level['replay'])}</code></div></div>")
    if status == "unsolvable":
        return ("<div style='background:#e0ecf4;padding:6px 8px;border-left:4px solid #2166ac;line-height:1.35'>"
                f"<div style='font-size:15px'><b>Unsolvable — and that is the answer.</b> Every actor is done and "
                f"the goal is not reached, and no order would reach it: the explorer ran all "
                f"{level['explored']} interleavings and none does.</div>"
                f"<div>{_md(level['victory'])}</div>{lesson}</div>")
    if status == "lost":
        return ("<div style='background:#fff7bc;padding:6px 8px;border-left:4px solid #8c510a;line-height:1.35'>"
                f"{goal}<div>The run is over and the goal is not reached: <b>undo</b> a step or two and try "
                f"another order, or <b>reset</b>.</div>{hint_html}</div>")
    note = ("the goal is met so far: let every actor finish (<i>run the rest in order</i>) to win"
            if status == "met" else "not reached yet")
    return (f"<div style='padding:4px 8px;border-left:4px solid #999;line-height:1.35'>{goal} — <i>{note}</i>"
            f"{hint_html}</div>")


def _step_words(s: Any, lg: dict[str, Any], explain: Callable[[Sequence[str]], str]) -> str:
    """A step of the history in words: the command explained, or a script's reply with its meaning (from
    the script's header comment)."""
    if s.kind == "command" and s.op not in ("EXEC", "PIPELINE"):
        return explain([s.op, *s.args])
    if s.kind == "script":
        for code, meaning in lg["returns"].get(s.op, []):
            if code and code == str(s.reply):
                return f"{s.op} replied {code}: {meaning}"
        return f"one EVALSHA of {s.op}: the whole script in one step"
    return ""


def _history_html(text: str, words: Sequence[str]) -> str:
    """The annotated history, each step's line with its meaning as a tooltip (the first line is the head)."""
    lines = text.split("\n")
    out = [html.escape(lines[0])]
    for line, meaning in zip(lines[1:], words, strict=False):
        out.append(f"<span title='{html.escape(meaning, quote=True)}'>{html.escape(line)}</span>" if meaning
                   else html.escape(line))
    # (white-space and word-break set here: JupyterLab's output styles wrap a <pre> anywhere, which cut the
    # history's "<== double-placement" marks mid-word; a line too long for the column scrolls instead)
    return ("<pre style='font-size:11px;line-height:1.3;margin:0 0 0 12px;white-space:pre;word-break:normal;"
            "overflow-x:auto'>" + "\n".join(out) + "</pre>")


def _last_html(last: dict[str, Any] | None) -> str:
    if last is None:
        return "<div style='color:#777;font-size:12px;line-height:1.35'>no step yet: pick an actor</div>"
    words = f" — {_md(last['explain'])}" if last["explain"] else ""
    effects = f" · changed: {html.escape(', '.join(last['effects']))}" if last["effects"] else ""
    reply = html.escape(_elide(str(last["reply"]), 60))
    return (f"<div style='font-size:12px;line-height:1.35'>last step {last['index']}: "
            f"<b>{html.escape(last['actor'])}</b> "
            f"<code>{html.escape(last['command'])}</code>{words} → <code>{reply}</code>{effects}</div>")


def _actor_html(actor: str, src: dict[str, Any] | None, taken: int, results: Sequence[str] = ()) -> str:
    box = ("border:1px solid #ccc;border-radius:3px;padding:4px 6px;font-size:12px;line-height:1.35;"
           "box-sizing:border-box;width:466px;overflow:hidden")
    so_far = (f"<div style='color:#555'>so far: {html.escape('; '.join(results))}</div>" if results else "")
    if src is None:
        return (f"<div style='{box};color:#777'><b>{html.escape(actor)}</b>: done "
                f"({taken} step{'s' if taken != 1 else ''}){so_far}</div>")
    head = [f"<b>{html.escape(actor)}</b>"]
    if src["script"]:
        head.append(html.escape(src["script"]))
    section = src["section"]
    if section:
        color = _SECTION_COLORS.get(section, "#4d4d4d")
        head.append(f"<span style='background:{color};color:white;padding:0 4px;border-radius:2px'>"
                    f"{html.escape(section)}</span>")
    if src["step"]:
        head.append(_md(src["step"]))
    lines = [" · ".join(head)]
    what = f"<b>{html.escape(src['access'])}</b>: " if src["access"] else ""
    lines.append(f"<div>next: {what}{_md(src['explain'])}</div>")
    if src.get("inside"):
        lines.append(f"<div style='color:#555'>{_md(src['inside'])}</div>")
    if src["excerpt"]:
        rows = []
        for _n, file_line, text, current in src["excerpt"]:
            style = "background:#ffeda0;font-weight:bold" if current else "color:#444"
            mark = "▶" if current else " "
            rows.append(f"<div style='white-space:pre;{style}'>{mark}{file_line:>4}  {html.escape(text)}</div>")
        if src["atomic"]:
            caption = (f"{html.escape(src['file'] or '')}: one step, every section at once — "
                       f"{_md(src['summary'])}")
        else:
            caption = html.escape(src["at"] or "")
            if src.get("origin_file") and src["origin_file"] != src["file"]:
                caption += f" (inlined into {html.escape(src['file'] or '')})"
            if src.get("called_from"):
                where, text = src["called_from"]
                caption += f"; called from {html.escape(where)}: <code>{html.escape(text)}</code>"
        lines.append(f"<div style='color:#555;margin-top:2px'>{caption}</div>")
        lines.append("<div class='emqlab-code' style='font-family:monospace;font-size:11px;line-height:1.3;"
                     "max-height:18em;max-width:100%;overflow:auto;border:1px solid #ddd;background:#fafafa'>"
                     + "".join(rows) + "</div>")
    elif src["summary"]:
        lines.append(f"<div style='color:#555'>{_md(src['summary'])}</div>")
    return f"<div style='{box}'>" + "".join(lines) + so_far + "</div>"


def _board_html(b: dict[str, Any]) -> str:
    flagged: dict[str, str] = {}
    rank = {"warning": 1, "exposed": 2, "broken": 3}
    for dg in b["dangers"]:
        if rank[dg["level"]] > rank.get(flagged.get(dg["job"], ""), 0):
            flagged[dg["job"]] = dg["level"]

    def chip(job: str) -> str:
        style = _DANGER_STYLE.get(flagged.get(job, ""), "background:#eee")
        return f"<span style='{style};padding:0 5px;border-radius:8px;margin-right:3px'>{html.escape(job)}</span>"

    rows = []
    for name, jobs in b["lists"].items():
        cells = "".join(chip(j) for j in jobs) or "<span style='color:#aaa'>–</span>"
        rows.append(f"<tr><td style='text-align:right;padding-right:6px'><b>{html.escape(name)}</b></td>"
                    f"<td>{cells}</td></tr>")
    locks = "".join(f"<div><code>{html.escape(j)}:lock</code> = <code>{html.escape(t)}</code></div>"
                    for j, t in b["locks"].items()) or "<span style='color:#aaa'>none</span>"
    rows.append(f"<tr><td style='text-align:right;padding-right:6px;vertical-align:top'><b>locks</b></td>"
                f"<td>{locks}</td></tr>")
    fields = []
    for job, f in b["jobs"].items():
        if not f.get("exists", True):
            fields.append(f"<div>{chip(job)} <i>no job data</i></div>")
            continue
        shown = " ".join(f"<code>{k}={html.escape(str(f[k]))}</code>" for k in ("atm", "ats", "stc", "defa") if k in f)
        if job in b.get("attempts", {}):
            shown += f" (attempts allowed: {b['attempts'][job]})"
        who = ", ".join(b["holders"].get(job, [])) or "nobody"
        fields.append(f"<div>{chip(job)} {shown or '<i>no counts yet</i>'} · worked on by {html.escape(who)}</div>")
    rows.append(f"<tr><td style='text-align:right;padding-right:6px;vertical-align:top'><b>jobs</b></td>"
                f"<td>{''.join(fields)}</td></tr>")
    if b.get("counters"):  # the queue's metrics counters: a level's goal can name one
        counters = " ".join(f"<code>{html.escape(k)}={v}</code>" for k, v in b["counters"].items())
        rows.append(f"<tr><td style='text-align:right;padding-right:6px'><b>counters</b></td><td>{counters}</td></tr>")
    dangers = "".join(f"<div style='{_DANGER_STYLE[dg['level']]};padding:1px 4px;margin-top:2px'>"
                      f"{'⚠' if dg['level'] != 'broken' else '✖'} {_md(dg['text'])}</div>" for dg in b["dangers"])
    return ("<div style='font-size:12px;line-height:1.35;min-width:320px'><b>the board</b>"
            "<table style='font-size:12px;border-collapse:collapse'>" + "".join(rows) + "</table>" + dangers
            + "</div>")


def _legend_html(legend: dict[str, Any]) -> str:
    fields = "".join(f"<tr><td><code>{html.escape(k)}</code></td><td>{_md(v)}</td></tr>"
                     for k, v in legend["fields"].items())
    terms = "".join(f"<tr><td><code>{html.escape(k)}</code></td><td>{_md(v)}</td></tr>"
                    for k, v in legend["terms"].items())
    scripts = []
    for name, rows in legend["returns"].items():
        body = "".join(f"<tr><td><code>{html.escape(code)}</code></td><td>{_md(text)}</td></tr>" if code else
                       f"<tr><td colspan='2'>{_md(text)}</td></tr>" for code, text in rows)
        scripts.append(f"<div style='margin-top:4px'><b>{html.escape(name)}</b> replies</div>"
                       f"<table style='font-size:12px'>{body}</table>")
    return ("<div style='font-size:12px;line-height:1.35'><b>job fields</b> (the job's hash)"
            f"<table style='font-size:12px'>{fields}</table><b>other words</b>"
            f"<table style='font-size:12px'>{terms}</table>" + "".join(scripts)
            + "<div style='color:#555;margin-top:4px'>(the replies are read from each script's header comment in"
              " <code>lua/</code>; see also <code>docs/protocol.md</code>)</div></div>")


__all__ = ["SchedulerStepper"]
