"""What the browser site (``scripts/site/``) asks of emqlab under Pyodide: the levels as the terminal game
plays them (:class:`emqlab.teaching.levels.Session`: the same keys, the same lines) and a point of the timed
round-trip model (:func:`emqlab.timing.simulate`). Every function takes and returns JSON text, so the page's
JavaScript holds no rule of its own: it shows the lines and the numbers these give.

Bundled into the site's ``emqlab.zip`` next to the package; runs under CPython too (the build checks it there).
"""

from __future__ import annotations

import json
import time
from typing import Any

from emqlab.teaching.levels import GAME_WIDTH, Session, intro, load_level, shipped_levels, tokens
from emqlab.text import command_lines, wrap

_session: list[Session] = []  # the level in play (at most one)


def _lines(text: str) -> list[str]:
    return wrap(text, GAME_WIDTH)


def levels() -> str:
    """Every shipped level: ``[{number, name, title, tagline}]``."""
    return json.dumps([{"number": lv.number, "name": lv.name, "title": lv.title, "tagline": lv.tagline}
                       for lv in shipped_levels()])


def _state(answer: list[str], started: float) -> str:
    session = _session[0]
    game = session.game
    over: list[str] = []
    won = False
    if session.solved or game.done:
        over = session.over_text(GAME_WIDTH)
        won = session.solved or game.won()
        if won:
            over = ["", *over, *command_lines("  replay it: ", session.level.replay_words(game.schedule),
                                              GAME_WIDTH)]
    enabled = [] if game.done else list(game.runner.enabled)
    return json.dumps({"level": session.level.number, "actors": game.actors, "enabled": enabled,
                       "status": _lines(game.status()), "answer": [x for a in answer for x in _lines(a)],
                       "done": bool(game.done) or session.solved, "won": won, "over": over,
                       "schedule": game.schedule, "ms": round((time.perf_counter() - started) * 1000, 1)})


def start(which: str) -> str:
    """Start level ``which`` (its number or name): its introduction and the game's state (see :func:`keys`).
    A level whose actors this runtime cannot run answers ``{"error": text}``."""
    started = time.perf_counter()
    while _session:
        _session.pop().close()
    level = load_level(which)
    try:
        _session.append(Session(level))
    except ImportError as e:  # (an actor's library missing from the bundle)
        return json.dumps({"error": f"{type(e).__name__}: {e}", "level": level.number})
    state = json.loads(_state([], started))
    state["intro"] = _lines(intro(level))
    return json.dumps(state)


def keys(line: str) -> str:
    """Carry out a line of the game's keys (``1``, ``W1*9``, ``u``, ``f``, ``h``, ``s``, ``x7`` …) as
    ``emqlab play`` does: ``{"answer": lines, "status": lines, "enabled": actor ids, "done", "won", "over":
    lines, "schedule", "ms": milliseconds Python took}``."""
    started = time.perf_counter()
    session = _session[0]
    answer: list[str] = []
    for key in tokens(line) or [""]:
        answer += session.handle(key)
        if session.quit or session.solved or session.game.done:
            break
    return _state(answer, started)


_conns: list[Any] = []


def rtt_point(mode: str, rtt_ms: float, config: str) -> str:
    """One timed run (:func:`emqlab.timing.simulate`) of ``mode`` at ``rtt_ms`` with ``config`` (the
    :class:`~emqlab.timing.TimingConfig` fields, JSON): the result's numbers and, in words, the slider's
    summary (:func:`emqlab.ui.roundtrip.summary`); ``ms``: milliseconds it took here."""
    from emqlab.backend.connect import connect
    from emqlab.timing import TimingConfig, simulate
    from emqlab.ui.roundtrip import summary

    started = time.perf_counter()
    if not _conns:
        _conns.append(connect())
    cfg = TimingConfig(**{**json.loads(config), "rtt_ms": float(rtt_ms)})
    r = simulate(mode, cfg, _conns[0], keep_history=False)
    return json.dumps({"mode": r.mode, "rtt_ms": float(rtt_ms), "round_trips_per_job": r.round_trips_per_job,
                       "jobs_per_s": r.jobs_per_s, "anomalies_per_1000": r.anomalies_per_1000,
                       "anomalies": dict(r.anomalies), "aborts_per_job": r.aborts_per_job,
                       "summary": summary(r, float(rtt_ms)),
                       "ms": round((time.perf_counter() - started) * 1000, 1)})
