"""Real browser tests: the docs site and the workshop notebooks in headless Chromium.

Playwright drives Debian's Chromium (``/usr/bin/chromium``, or ``$EMQLAB_CHROMIUM``): ``apt-get install
chromium chromium-driver``; ``scripts/ci_browser.sh`` installs it in CI together with the ``lab`` extra.

* **The docs site**, built once for this module (``mkdocs build --strict``) and served by a local
  ``http.server`` thread: the generated figures are in the pages and load in the browser with a size; the
  round-trip slider page renders, moving the slider (and a preset) changes its numbers, bars and marker; no
  request leaves the machine.
* **JupyterLab**, started on a free port with a token, its own runtime, settings and workspace folders, on
  the ``students/`` folder that ``emqlab workshop`` writes (copies: nothing is saved into the working
  tree), killed afterwards: each notebook's cells all run without an error, every widget output renders,
  the round-trip slider's drag redraws its plots, the stepper's buttons advance the history and its atomic
  toggle collapses W1's steps, and the levels notebook's widget, clicked through a level's stored solution,
  shows the win the engine gives that run.

Screenshots go to ``$EMQLAB_ARTIFACTS`` (default: a new temp folder, printed) as CI artefacts. Without
Chromium, Playwright or JupyterLab the tests skip with the reason — except in CI (``CI=true``), where they
fail. The tests that need a browser are marked ``browser`` (``pytest -m browser``; ``-m "not browser"``
leaves them out); the checks of the built site's files need none.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import pty
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("EMQLAB_CHROMIUM", "/usr/bin/chromium")
NOTEBOOKS = ["01-read-decide-write.ipynb", "02-interleavings.ipynb", "03-round-trips.ipynb", "04-levels.ipynb"]
FIGURE_PAGES = {"tutorial": 2, "concepts": 1, "round-trips": 2}  # page → figures it shows at least
browser_mark = pytest.mark.browser


def _missing(msg: str) -> None:
    require("the browser tests' tools", f"{msg} (scripts/ci_browser.sh installs them)")


# -- shared fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts() -> Path:
    path = Path(os.environ.get("EMQLAB_ARTIFACTS") or tempfile.mkdtemp(prefix="emqlab-artifacts-"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    if not os.path.exists(CHROMIUM):
        _missing(f"no Chromium at {CHROMIUM}: apt-get install chromium chromium-driver (or set $EMQLAB_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()


def _page(browser: Any, **kw: Any) -> Any:
    """A new page whose console errors and page errors are collected in ``page.emqlab_errors``."""
    page = browser.new_page(**{"viewport": {"width": 1280, "height": 900}, **kw})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.emqlab_errors = errors
    return page


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the docs site -----------------------------------------------------------------------------------------------


class _SiteBuild:
    """``mkdocs build --strict`` of the docs site into ``out``, running in the background from the module's
    start (it generates the figures: CPU the JupyterLab tests leave idle while they wait for the server and
    the browser), finished by :meth:`wait`."""

    def __init__(self, out: Path) -> None:
        self.out = out
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "EMQLAB_FAST": os.environ.get("EMQLAB_FAST", "1")}
        self.log = out.with_suffix(".log").open("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
                                     cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float = 300) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            code = -1
        self.log.seek(0)
        return code, self.log.read()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # the build's own session: nothing else
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module", autouse=True)
def _site_build(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Starts the docs build at the module's start when a selected test needs the site (else None)."""
    needed = any("site" in getattr(item, "fixturenames", ()) and item.module is request.module
                 for item in request.session.items)
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        needed = False  # the `site` fixture skips with the reason
    build = _SiteBuild(tmp_path_factory.mktemp("site-build") / "site") if needed else None
    try:
        yield build
    finally:
        if build is not None:
            build.stop()
            build.log.close()


@pytest.fixture(scope="module")
def site(_site_build: _SiteBuild | None) -> Path:
    """The docs site, built strict (with ``$EMQLAB_FAST`` unless set otherwise: the small sweep)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    assert _site_build is not None
    code, log = _site_build.wait()
    assert code == 0, log
    return _site_build.out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site on a local port (a thread; stopped afterwards)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _offline(page: Any, base: str) -> list[str]:
    """Refuse every request that does not go to ``base``; returns the list of refused URLs."""
    refused: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith(base) or r.request.url.startswith("data:"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return refused


def _slider_state(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => {
        const root = document.getElementById('rtt-slider');
        const cell = (m, k) => root.querySelector(`td[data-mode="${m}"][data-metric="${k}"]`).textContent;
        const out = {rtt: root.getAttribute('data-rtt'), readout: document.getElementById('rtt-value').textContent,
                     note: document.getElementById('rtt-note').textContent, cells: {}, bars: {}, marker: null};
        for (const m of ['atomic', 'finish-then-fetch', 'transaction', 'split']) {
            out.cells[m] = {};
            for (const k of ['round_trips_per_job', 'jobs_per_s', 'anomalies_per_1000', 'aborts_per_job'])
                out.cells[m][k] = cell(m, k);
            const bar = root.querySelector(`g.rtt-bars[data-metric="jobs_per_s"] rect[data-mode="${m}"]`);
            out.bars[m] = Number(bar.getAttribute('width'));
        }
        out.marker = Number(root.querySelector('.rtt-marker').getAttribute('x1'));
        const svg = document.getElementById('rtt-plot').getBoundingClientRect();
        out.svg = [svg.width, svg.height];
        return out;
    }""")


# -- JupyterLab --------------------------------------------------------------------------------------------------


LAB_SETTINGS = {  # JUPYTERLAB_SETTINGS_DIR: every cell in the DOM, no autosave, no news or update checks
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                          "checkForUpdates": False},
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """JupyterLab on a free port with a token, started from the venv's ``bin`` (so its terminals and kernels
    find ``emqlab``), on the ``students/`` folder of a workshop written as ``emqlab workshop`` writes it
    (without its PDFs, which no notebook needs); its process group is ended afterwards."""
    from emqlab.teaching.workshop import write_workshop

    exe = Path(sys.executable).with_name("jupyter-lab")
    if not exe.exists():
        _missing(f"JupyterLab is not installed in {Path(sys.executable).parent}: pip install -e '.[lab]'")
    home = tmp_path_factory.mktemp("lab")
    write_workshop(home / "kit")
    work = home / "kit" / "students"
    assert all((work / name).is_file() for name in NOTEBOOKS)
    settings = home / "settings"
    for rel, value in LAB_SETTINGS.items():
        path = settings / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    # as `source .venv/bin/activate && jupyter lab …` sets it up
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "PATH": f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(exe.parent.parent),
           "EMQLAB_FAST": os.environ.get("EMQLAB_FAST", "1"), "PYTHONUNBUFFERED": "1"}
    # … from a terminal: its output on a pty (JupyterLab without a tty runs its terminals as login shells,
    # whose /etc/profile resets PATH; see docs/instructors.md)
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(exe), "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
                             "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
                             "--ServerApp.terminals_enabled=True", *(["--allow-root"] if os.geteuid() == 0 else [])],
                            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    log_path = home / "lab.log"
    drain = threading.Thread(target=_drain, args=(master, log_path), daemon=True)
    drain.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start: {log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield {"url": url, "token": token, "work": work, "log": log_path, "bin": exe.parent}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server, its kernels and terminals: the group we started
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        drain.join(timeout=10)
        os.close(master)


def _drain(fd: int, path: Path) -> None:
    """Copy the server's pty output to ``path`` until the pty closes (a full pty would block the server)."""
    with path.open("wb") as out:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: every process holding the other end has exited
                return
            if not data:
                return
            out.write(data)
            out.flush()


def _lab_page(browser: Any, lab: dict[str, Any], name: str) -> Any:
    """A new tab with JupyterLab open on notebook ``name``, its kernel idle."""
    page = _page(browser, viewport={"width": 1400, "height": 1000})
    page.goto(f"{lab['url']}/lab/tree/{name}?token={lab['token']}&reset")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.sessionContext", timeout=60_000)
    _kernel_idle(page)
    return page


def _click_and_wait(page: Any, out: Any, cell: int, button: Any) -> str:
    """Click ``button`` of the widget in output ``out`` of cell ``cell`` of the current notebook and wait until the
    cell's output has re-rendered; returns the output's text after."""
    before = out.inner_text()
    button.click()
    page.wait_for_function("([i, before]) => window.jupyterapp.shell.currentWidget.content.widgets[i]"
                           ".node.querySelector('.jp-OutputArea').innerText !== before", arg=[cell, before],
                           timeout=20_000)
    return str(out.inner_text())


def _open_notebook(page: Any, name: str) -> None:
    """Open notebook ``name`` in the JupyterLab of ``page`` (no reload of the page) and wait for its kernel."""
    page.evaluate("""async (name) => {
        const app = window.jupyterapp;
        const nb = await app.commands.execute('docmanager:open', {path: name});
        app.shell.activateById(nb.id);
    }""", name)
    page.wait_for_function("(name) => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === name && w.sessionContext; }", arg=name,
                           timeout=60_000)
    _kernel_idle(page)


def _close_notebook(page: Any) -> None:
    """Shut the current notebook's kernel down (its CPU and memory back for the next) and close its tab."""
    page.evaluate("""async () => {
        const nb = window.jupyterapp.shell.currentWidget;
        await nb.sessionContext.shutdown();
        nb.context.model.dirty = false;  // (autosave is off: nothing is written; no "save?" dialog)
        nb.dispose();
    }""")


def _kernel_idle(page: Any) -> None:
    page.evaluate("""async () => {
        const nb = window.jupyterapp.shell.currentWidget;
        await nb.context.ready;
        await nb.sessionContext.ready;
        for (let i = 0; i < 600 && !(nb.sessionContext.session && nb.sessionContext.session.kernel
                                      && nb.sessionContext.session.kernel.status === 'idle'); i++)
            await new Promise(r => setTimeout(r, 100));
    }""")


def _run(page: Any, command: str | None, active: int | None = None) -> None:
    """Run a notebook command (``notebook:run-all-cells``, ``…-above``, ``…-below``; ``None``: none) and wait
    until no cell is running and the kernel is idle."""
    page.evaluate("""async ([command, active]) => {
        const app = window.jupyterapp, nb = app.shell.currentWidget;
        if (active !== null) nb.content.activeCellIndex = active;
        if (command) await app.commands.execute(command);
        const busy = () => nb.content.widgets.some(c => c.model.type === 'code'
            && c.model.executionState === 'running');
        for (let i = 0; i < 3000 && (busy() || nb.sessionContext.session.kernel.status !== 'idle'); i++)
            await new Promise(r => setTimeout(r, 100));
    }""", [command, active])


def _cells(page: Any) -> list[dict[str, Any]]:
    """Per cell: its type, source, execution count, output types and widget-view outputs."""
    result: list[dict[str, Any]] = page.evaluate("""() => {
        const nb = window.jupyterapp.shell.currentWidget;
        return nb.content.widgets.map((c, i) => {
            const m = c.model, out = m.type === 'code' ? m.outputs.toJSON() : [];
            return {index: i, type: m.type, source: m.sharedModel.getSource(),
                    count: m.type === 'code' ? m.executionCount : null,
                    outputs: out.map(o => o.output_type),
                    errors: out.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
                    widgets: out.filter(o => o.data && o.data['application/vnd.jupyter.widget-view+json']).length};
        });
    }""")
    return result


def _widget_views(page: Any, index: int) -> list[dict[str, Any]]:
    """The rendered widget outputs of cell ``index``: their size and whether ipywidgets reported an error."""
    views: list[dict[str, Any]] = page.evaluate("""(index) => {
        const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
        return [...cell.node.querySelectorAll('.jp-OutputArea-output')]
            .filter(n => n.querySelector('.jupyter-widgets') || /widget/i.test(n.textContent.slice(0, 60)))
            .map(n => { const w = n.querySelector('.jupyter-widgets'); const r = (w || n).getBoundingClientRect();
                        return {rendered: !!w, width: r.width, height: r.height,
                                error: /Error displaying widget|model not found/i.test(n.textContent)}; });
    }""", index)
    return views


def _assert_ran_and_rendered(page: Any, name: str) -> list[dict[str, Any]]:
    cells = _cells(page)
    code = [c for c in cells if c["type"] == "code"]
    assert code, name
    for c in code:
        assert c["count"] is not None, f"{name}: cell {c['index']} did not run"
        assert not c["errors"], f"{name}: cell {c['index']} raised {c['errors']}"
        if c["widgets"]:
            views = _widget_views(page, c["index"])
            assert len(views) == c["widgets"], f"{name}: cell {c['index']}: {views}"
            for v in views:
                assert v["rendered"] and not v["error"] and v["width"] > 50 and v["height"] > 10, \
                    f"{name}: cell {c['index']}: a widget did not render: {v}"
    return cells


def _cell_of(cells: list[dict[str, Any]], needle: str) -> int:
    return next(c["index"] for c in cells if c["type"] == "code" and needle in c["source"])


def _output(page: Any, index: int) -> Any:
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea")


@pytest.fixture(scope="module")
def lab_tab(browser: Any, lab: dict[str, Any]) -> Iterator[Any]:
    """One tab of JupyterLab for the notebooks 1 and 2 in turn (loading JupyterLab once)."""
    page = _lab_page(browser, lab, NOTEBOOKS[0])
    try:
        yield page
    finally:
        page.close()


@pytest.fixture(scope="module")
def notebook_3(browser: Any, lab: dict[str, Any]) -> Iterator[Any]:
    """Notebook 3 (its sweeps take most of these tests' time) opened in a tab of its own and set running
    without waiting, so that it computes while the other tests use the browser; its test waits for it."""
    page = _lab_page(browser, lab, NOTEBOOKS[2])
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
                           " === 'busy' || window.jupyterapp.shell.currentWidget.content.widgets"
                           ".some(c => c.model.type === 'code' && c.model.executionCount)", timeout=30_000)
    try:
        yield page
    finally:
        page.close()


# -- the tests, in this order: notebook 3 (the slow one) runs in its own tab while the others run ------------


@browser_mark
@pytest.mark.usefixtures("notebook_3")  # (starts it: it runs while this test and the next ones do)
def test_notebook_1_runs_in_jupyterlab(lab_tab: Any, artifacts: Path) -> None:
    page = lab_tab
    _open_notebook(page, NOTEBOOKS[0])
    _run(page, "notebook:run-all-cells")
    cells = _assert_ran_and_rendered(page, NOTEBOOKS[0])
    assert "backend:" in page.locator(".jp-Notebook").inner_text()
    page.screenshot(path=str(artifacts / "lab-01.png"))
    assert len([c for c in cells if c["type"] == "code"]) >= 5
    assert page.emqlab_errors == [], page.emqlab_errors
    _close_notebook(page)


@browser_mark
def test_notebook_2_stepper_in_jupyterlab(lab_tab: Any, artifacts: Path) -> None:
    """The stepper: its actor buttons advance the history; its atomic toggle collapses W1's steps into one.
    Played in the browser before the cells below it drive (and close) the same stepper from code."""
    from playwright.sync_api import expect

    page = lab_tab
    _open_notebook(page, NOTEBOOKS[1])
    stepper = _cell_of(_cells(page), "SchedulerStepper(")
    _run(page, "notebook:run-all-above", active=stepper + 1)
    out = _output(page, stepper)
    out.locator(".jupyter-widgets").first.wait_for(timeout=30_000)
    w1 = out.locator("button", has_text=re.compile(r"^\s*W1\b"))
    s1 = out.locator("button", has_text=re.compile(r"^\s*S1\b"))
    atomic = out.locator("button", has_text="one atomic finish")
    assert w1.count() == 1 and s1.count() == 1 and atomic.count() == 1
    out.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "lab-02-stepper-start.png"))

    def clicked(button: Any) -> str:
        """Click ``button`` and wait for the widget to re-render; returns the widget's text after."""
        return _click_and_wait(page, out, stepper, button)

    start = out.inner_text()
    label0 = w1.inner_text()
    for _ in range(3):  # split: each click is one of W1's commands, and W1 has many more
        clicked(w1)
    expect(w1).to_be_enabled()  # split: W1 still has steps after three
    assert w1.inner_text() != label0
    after_w1 = out.inner_text()
    assert after_w1 != start
    clicked(s1)  # the sweep runs between two of W1's commands
    page.screenshot(path=str(artifacts / "lab-02-stepper-split.png"))

    clicked(atomic)  # resets the run in atomic mode
    expect(atomic).to_have_class(re.compile(r"\bmod-active\b"))  # ipywidgets' pressed ToggleButton
    expect(w1).to_be_enabled()
    clicked(w1)  # one click: W1's whole finish is one EVALSHA step
    expect(w1).to_be_disabled()  # … and W1 is done
    expect(w1).to_contain_text("done")
    page.screenshot(path=str(artifacts / "lab-02-stepper-atomic.png"))
    clicked(atomic)  # back to split (a reset), as the cells below expect to find it
    expect(atomic).not_to_have_class(re.compile(r"\bmod-active\b"))
    expect(w1).to_be_enabled()

    _run(page, "notebook:run-all-below", active=stepper + 1)
    _assert_ran_and_rendered(page, NOTEBOOKS[1])
    # the timeline and the interleaving counts are images with a size
    sizes = page.evaluate("""() => [...document.querySelectorAll('.jp-Notebook .jp-RenderedImage img')]
        .map(i => [i.naturalWidth, i.getBoundingClientRect().width])""")
    assert len(sizes) >= 2 and all(n > 300 and w > 300 for n, w in sizes), sizes
    page.screenshot(path=str(artifacts / "lab-02-end.png"))
    assert page.emqlab_errors == [], page.emqlab_errors
    _close_notebook(page)


#: the level the levels notebook's first widget plays (``SchedulerStepper(level=1)``)
PLAYED_LEVEL = 1


def _won_run(number: int) -> tuple[Any, list[str], str, str]:
    """Level ``number``, its stored solution as moves, and what the engine says of that run played to its
    end: the run's schedule and its because-sentence (the game's own, :class:`emqlab.teaching.levels.Game`)."""
    from emqlab.protocol.schedules import parse_schedule
    from emqlab.teaching.levels import Game, load_level

    lv = load_level(number)
    game = Game(lv)
    try:
        moves = parse_schedule(lv.solution, game.actors)
        for actor in moves:
            game.step(actor)
        game.finish()
        assert game.won(), lv.name
        return lv, moves, game.schedule, lv.goal.reasons(game.history())[0]
    finally:
        game.close()


@browser_mark
def test_levels_notebook_of_the_workshop_wins_a_level(lab_tab: Any, artifacts: Path) -> None:
    """The workshop's 04-levels.ipynb in JupyterLab: the level's widget, clicked through the level's stored
    solution (an actor button per move, then "run the rest in order"), shows "You win!" with the level's
    victory text, the engine's because-sentence for that run and its schedule; then the rest of the
    notebook runs and renders."""
    from emqlab.ui.kit import plain

    lv, moves, schedule, why = _won_run(PLAYED_LEVEL)
    page = lab_tab
    _open_notebook(page, NOTEBOOKS[3])
    cell = _cell_of(_cells(page), f"SchedulerStepper(level={PLAYED_LEVEL})")
    _run(page, "notebook:run-all-above", active=cell + 1)
    # (the cell of this notebook's panel: the tab may hold another notebook still, hidden)
    panel = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    out = page.locator(f'[id="{panel}"] .jp-Cell').nth(cell).locator(".jp-OutputArea")
    out.locator(".jupyter-widgets").first.wait_for(timeout=30_000)
    buttons = {a: out.locator("button", has_text=re.compile(rf"^\s*{a}\b")) for a in set(moves)}
    assert all(b.count() == 1 for b in buttons.values()), {a: b.count() for a, b in buttons.items()}

    def click(button: Any) -> None:
        """Click ``button`` and wait until the widget has re-rendered."""
        _click_and_wait(page, out, cell, button)

    for actor in moves:
        assert "You win!" not in out.inner_text()
        click(buttons[actor])
    click(out.locator("button", has_text="run the rest in order"))
    out.get_by_text("You win!").wait_for(timeout=20_000)
    out.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "lab-04-level-won.png"))
    shown = page.evaluate("""(i) => {
        const node = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
        const line = (start) => [...node.querySelectorAll('.jp-OutputArea div')]
            .map(d => d.innerText.trim()).find(t => t.startsWith(start) && !t.includes('\\n')) || null;
        return {win: line('You win!'), why: line('Why, in this run:'), schedule: line('Schedule:')};
    }""", cell)

    def words(text: str | None) -> str:
        return " ".join((text or "").split())

    assert words(shown["win"]) == words(f"You win! {plain(lv.victory)}"), shown
    assert words(shown["why"]) == words(f"Why, in this run: {why}"), shown
    assert words(shown["schedule"]).startswith(f"Schedule: {schedule} — replay it: "), shown
    # the history's "<== double-placement" marks stay whole: its lines do not wrap inside JupyterLab's output
    marks = page.evaluate("""(i) => {
        const pre = [...window.jupyterapp.shell.currentWidget.content.widgets[i].node.querySelectorAll('pre')]
            .find(p => p.innerText.includes('<== '));
        if (!pre) return null;
        const line = parseFloat(getComputedStyle(pre).lineHeight);
        return {rows: Math.round(pre.getBoundingClientRect().height / line),
                lines: pre.innerText.split('\\n').length, whiteSpace: getComputedStyle(pre).whiteSpace};
    }""", cell)
    assert marks is not None and marks["whiteSpace"] == "pre" and marks["rows"] <= marks["lines"] + 1, marks

    _run(page, "notebook:run-all-below", active=cell + 1)
    _assert_ran_and_rendered(page, NOTEBOOKS[3])
    assert page.emqlab_errors == [], page.emqlab_errors
    _close_notebook(page)


@browser_mark
def test_emqlab_is_on_path_in_jupyterlabs_terminal(lab: dict[str, Any]) -> None:
    """JupyterLab started as the README says (from the activated venv, in a terminal): a JupyterLab terminal
    (created through its REST API, typed into over its websocket, as the Terminal tab does) finds the venv's
    ``emqlab``."""
    import asyncio

    from tornado.websocket import websocket_connect

    found = lab["work"] / "which-emqlab.txt"
    req = urllib.request.Request(f"{lab['url']}/api/terminals?token={lab['token']}", method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=30) as r:
        name = json.load(r)["name"]
    command = f"(command -v emqlab || echo not found) > {found.name}.tmp; mv {found.name}.tmp {found.name}\r"

    async def type_it() -> None:
        ws = await websocket_connect(f"{lab['url'].replace('http', 'ws', 1)}/terminals/websocket/{name}"
                                     f"?token={lab['token']}")
        try:
            await ws.read_message()  # terminado's "setup": the shell has started (input waits in its pty)
            await ws.write_message(json.dumps(["stdin", command]))
            for _ in range(300):
                if found.exists():
                    return
                await asyncio.sleep(0.1)
        finally:
            ws.close()

    # in a thread of its own: Playwright's sync API keeps an event loop running in this one
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(asyncio.wait_for(type_it(), timeout=60))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=90)
    assert not errors, errors
    log = lab["log"].read_text(errors="replace")[-2000:]
    assert found.exists(), f"the terminal's shell never ran the command: {log}"
    assert Path(found.read_text().strip()) == lab["bin"] / "emqlab"


def test_site_has_the_generated_figures_and_data(site: Path) -> None:
    """Figures and the slider's data are generated by the build (not files in docs/), and the pages use them."""
    for name in ("tutorial-timeline", "tutorial-atomic", "concepts-interleavings", "round-trips-rate",
                 "round-trips-cost"):
        svg = (site / "figures" / f"{name}.svg").read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg, name
        assert not (ROOT / "docs" / "figures" / f"{name}.svg").exists(), "figures are generated, not committed"
    for page, n in FIGURE_PAGES.items():
        html = (site / page / "index.html").read_text()
        assert len(re.findall(r'<img [^>]*src="\.\./figures/[\w-]+\.svg"', html)) >= n, page
    data = json.loads((site / "assets" / "rtt-sweep.json").read_text())
    assert data["modes"] == ["atomic", "finish-then-fetch", "transaction", "split"]
    assert len(data["rows"]) == len(data["modes"]) * len(data["rtts"])
    assert data["command"].startswith("emqlab sweep-rtt --rtt ")
    by = {(r["mode"], r["rtt_ms"]): r for r in data["rows"]}
    assert all(by[("atomic", x)]["round_trips_per_job"] == 1.0 for x in data["rtts"])
    assert all(by[("finish-then-fetch", x)]["round_trips_per_job"] == 2.0 for x in data["rtts"])
    assert all(by[("split", x)]["round_trips_per_job"] > 15 for x in data["rtts"])
    assert all(by[(m, x)]["anomalies_per_1000"] == 0 for m in ("atomic", "finish-then-fetch") for x in data["rtts"])
    slider = (site / "slider" / "index.html").read_text()
    assert 'id="rtt-data"' in slider and 'id="rtt-slider"' in slider and "assets/slider.js" in slider
    assert data["command"] in slider and "emqlab:" not in slider  # every marker replaced
    assert "fonts.googleapis.com" not in slider  # no CDN: the site works offline


@browser_mark
def test_slider_page_works_in_chromium(browser: Any, served: str, site: Path, artifacts: Path) -> None:
    data = json.loads((site / "assets" / "rtt-sweep.json").read_text())
    page = _page(browser)
    refused = _offline(page, served)
    page.goto(f"{served}/slider/")
    page.wait_for_selector("#rtt-slider[data-ready=true]", timeout=10_000)
    before = _slider_state(page)
    page.screenshot(path=str(artifacts / "docs-slider-before.png"), full_page=True)
    assert before["svg"][0] > 300 and before["svg"][1] > 200
    assert before["cells"]["atomic"]["round_trips_per_job"] == "1.00"
    assert before["cells"]["finish-then-fetch"]["round_trips_per_job"] == "2.00"
    assert float(before["cells"]["split"]["round_trips_per_job"]) > 15

    # drag the slider's thumb to near the right end: a real pointer, the page's own input events
    box = page.locator("#rtt-range").bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] * 0.97, box["y"] + box["height"] / 2)
    after = _slider_state(page)
    page.screenshot(path=str(artifacts / "docs-slider-after.png"), full_page=True)
    assert float(after["rtt"]) > float(before["rtt"]) * 5, (before["rtt"], after["rtt"])
    assert after["readout"] != before["readout"] and after["marker"] > before["marker"]
    assert after["cells"]["split"]["jobs_per_s"] != before["cells"]["split"]["jobs_per_s"]
    assert after["bars"]["split"] < before["bars"]["split"]  # throughput falls with the RTT: N round trips
    assert after["cells"]["atomic"]["round_trips_per_job"] == "1.00"  # … one round trip at any RTT

    # a preset shows the measurement itself
    row = {r["mode"]: r for r in data["rows"] if r["rtt_ms"] == 75.0}
    page.get_by_role("button", name=re.compile(r"cross-region 75 ms")).click()
    at_75 = _slider_state(page)
    assert at_75["readout"] == "75 ms" and at_75["note"].startswith("Measured at 75 ms (cross-region)")
    assert float(at_75["cells"]["split"]["anomalies_per_1000"].replace(",", "")) == \
        pytest.approx(row["split"]["anomalies_per_1000"], rel=0.01, abs=0.5)
    assert at_75["cells"]["atomic"]["anomalies_per_1000"] == "0"

    # the keyboard moves it too (the range input is a real control)
    page.locator("#rtt-range").focus()
    page.keyboard.press("Home")
    home = _slider_state(page)
    assert float(home["rtt"]) == pytest.approx(data["rtts"][0], rel=1e-3)
    assert refused == [] and page.emqlab_errors == []
    page.close()


@browser_mark
def test_figures_load_in_chromium(browser: Any, served: str, artifacts: Path) -> None:
    page = _page(browser)
    refused = _offline(page, served)
    for name, n in FIGURE_PAGES.items():
        page.goto(f"{served}/{name}/")
        page.wait_for_load_state("load")
        figures = page.evaluate("""() => [...document.querySelectorAll('img[src*="figures/"]')].map(img => {
            const r = img.getBoundingClientRect();
            return {src: img.getAttribute('src'), complete: img.complete, natural: img.naturalWidth,
                    width: r.width, height: r.height};
        })""")
        assert len(figures) >= n, (name, figures)
        for f in figures:
            assert f["complete"] and f["natural"] > 0, (name, f)  # loaded and decoded
            assert f["width"] > 200 and f["height"] > 100, (name, f)  # laid out with a size
        page.locator('img[src*="figures/"]').first.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / f"docs-{name}.png"))
    assert refused == [] and page.emqlab_errors == []
    page.close()


@browser_mark
def test_notebook_3_slider_in_jupyterlab(notebook_3: Any, artifacts: Path) -> None:
    """The round-trip slider: dragging its handle reruns the point and redraws both plots."""
    page = notebook_3
    page.bring_to_front()
    _run(page, None)  # waits for the run the fixture started
    cells = _assert_ran_and_rendered(page, NOTEBOOKS[2])
    slider_cell = _cell_of(cells, "RoundTripSlider(")
    out = _output(page, slider_cell)
    handle = out.locator(".widget-slider .noUi-handle, .widget-hslider .noUi-handle").first
    handle.scroll_into_view_if_needed()
    images = out.locator("img")
    assert images.count() >= 2
    before = [images.nth(i).get_attribute("src") for i in range(images.count())]
    summary = out.locator(".widget-html").first.inner_text()
    page.screenshot(path=str(artifacts / "lab-03-slider-before.png"))
    box = handle.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 160, y, steps=8)  # drag left: a shorter round trip than the presets left it at
    page.mouse.up()
    page.wait_for_function("([i, before]) => { const imgs = [...window.jupyterapp.shell.currentWidget.content"
                           ".widgets[i].node.querySelectorAll('.jp-OutputArea img')];"
                           " return imgs.length >= 2 && imgs.every((im, k) => im.getAttribute('src') !== before[k]); }",
                           arg=[slider_cell, before], timeout=60_000)
    after = [images.nth(i).get_attribute("src") for i in range(images.count())]
    assert after[0] != before[0] and after[1] != before[1], "both plots redraw"
    assert out.locator(".widget-html").first.inner_text() != summary, "the summary line follows the slider"
    sizes = page.evaluate("""(i) => [...window.jupyterapp.shell.currentWidget.content.widgets[i].node
        .querySelectorAll('.jp-OutputArea img')].map(im => [im.naturalWidth, im.getBoundingClientRect().width])""",
                          slider_cell)
    assert all(n > 300 and w > 300 for n, w in sizes), sizes
    out.screenshot(path=str(artifacts / "lab-03-slider-after.png"))
