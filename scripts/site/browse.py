"""Driving the built browser site (``scripts/site/build.py``) in headless Chromium through Playwright: a
local static server for its folder, a page whose requests may reach that server only, the game's and the
slider's controls, and a notebook run in the site's JupyterLite. Shared by ``tests/test_site.py`` and
``benchmarks/bench_site.py``."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: how long a page may take to start Python and Lua (ms): minutes on a loaded machine, seconds on a laptop
START_TIMEOUT_MS = 300_000


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """``folder`` served on a free local port (a thread, stopped afterwards): its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def offline(context: Any, base: str) -> dict[str, list[str]]:
    """Refuse every request of ``context`` (a Playwright browser context: its pages and their workers) that
    does not go to ``base``: ``{"passed": URLs, "refused": URLs}``, filled as they come."""
    seen: dict[str, list[str]] = {"passed": [], "refused": []}

    def route(r: Any) -> None:
        if r.request.url.startswith(base + "/"):
            seen["passed"].append(r.request.url)
            r.continue_()
        else:
            seen["refused"].append(r.request.url)
            r.abort()

    context.route("**/*", route)
    return seen


def open_level(page: Any, base: str, level: int = 1) -> dict[str, Any]:
    """Open the levels page at ``level`` and wait until it is playable (Python started, the level loaded):
    the start-up timings the worker reports (seconds)."""
    page.goto(f"{base}/play.html#{level}")
    page.wait_for_selector(f"#game[data-level='{level}'][data-busy='false']", timeout=START_TIMEOUT_MS)
    return dict(json.loads(page.get_attribute("#game", "data-startup")))


def press(page: Any, key: str) -> float:
    """Press the game's button for ``key`` (an actor's id, or u r f x h s) and wait for the answer: the
    milliseconds Python took for it."""
    if key in ("u", "r", "f", "x", "h", "s"):
        page.click(f"#keys button[data-key='{key}']")
    else:
        page.click(f"button.actor[data-actor='{key}']")
    page.wait_for_selector("#game[data-busy='false']", timeout=START_TIMEOUT_MS)
    return float(page.get_attribute("#game", "data-ms"))


def slider_point(page: Any, timeout_ms: int = START_TIMEOUT_MS, **want: Any) -> dict[str, Any]:
    """Wait until the slider has computed a point whose fields equal ``want``; the point."""
    page.wait_for_function("""(want) => {
        const box = document.getElementById('slider');
        if (box.dataset.busy !== 'false' || !box.dataset.point) return false;
        const p = JSON.parse(box.dataset.point);
        return Object.entries(want).every(([k, v]) => p[k] === v);
    }""", arg=want, timeout=timeout_ms)
    return dict(json.loads(page.get_attribute("#slider", "data-point")))


#: the notebook page's code cells, read in the page: their prompts (``[3]:``, ``[*]:`` while queued or
#: running, ``[ ]:`` never run), their outputs' text, and the text of the outputs that are errors or stderr
_CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell')).map((c) => ({
  prompt: (c.querySelector('.jp-InputPrompt') || {}).textContent.trim(),
  output: (c.querySelector('.jp-OutputArea') || { innerText: '' }).innerText,
  errors: Array.from(c.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
    .map((e) => e.innerText),
}))"""


def run_notebook(page: Any, base: str, name: str, timeout_ms: int = START_TIMEOUT_MS) -> dict[str, Any]:
    """Open the notebook ``name`` in the site's JupyterLite (``lite/``), run all its cells (the *Run* menu's
    *Run All Cells*, as a student would) and wait until none is left to run (the run stops at a cell that
    raises). ``{"first_cell_s", "all_cells_s"}``: wall seconds from the page's request to the first code
    cell's result and to the last one; ``"cells"``: each code cell's ``prompt``, ``output`` (its text) and
    ``errors`` (its tracebacks and stderr)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    t0 = time.perf_counter()
    page.goto(f"{base}/lite/notebooks/index.html?path={name}")
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=timeout_ms)
    # (a Run All chosen while the notebook is still being set up can be dropped, its cells left unqueued: it
    # is chosen again until the first cell is queued or run)
    started = f"() => ['[*]:', '[1]:'].includes(({_CELLS_JS})()[0].prompt)"
    while True:
        page.click("li.lm-MenuBar-item:has-text('Run')")
        page.click("li.lm-Menu-item:has-text('Run All Cells')")
        try:
            page.wait_for_function(started, timeout=10_000)
            break
        except PlaywrightTimeout:
            if (time.perf_counter() - t0) * 1000 > timeout_ms:
                raise
    page.wait_for_function(f"() => ({_CELLS_JS})()[0].prompt === '[1]:'", timeout=timeout_ms)
    first = time.perf_counter() - t0
    page.wait_for_function(f"() => ({_CELLS_JS})().every((c) => c.prompt !== '[*]:')", timeout=timeout_ms)
    return {"first_cell_s": first, "all_cells_s": time.perf_counter() - t0, "cells": page.evaluate(_CELLS_JS)}


def cpu_seconds(root: int | None = None) -> float:
    """User + system CPU seconds of the live processes below ``root`` (default: this one), read from
    ``/proc`` (Linux): Chromium's, when Playwright started it from here."""
    root = os.getpid() if root is None else root
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        stats[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo += children.get(pid, [])
    return total
