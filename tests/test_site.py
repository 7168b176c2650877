"""The browser site (``scripts/site/build.py``, ``docs/browser.md``): emqlab's levels and round-trip slider
running its own Python under Pyodide in headless Chromium, with nothing installed and nothing fetched but
the site's own files.

Built once for the module into a temp folder (the Pyodide harness's caches first: npm's ``pyodide`` and
``wasmoon-lua5.1``, PyPI's files — ``scripts/pyodide/harness.py --prepare``), served by a local static
server, and opened in a Chromium context whose every request not to that server is refused:

* level 1 is played to a win with the game's buttons, and what the page shows at the end is what the same
  keys give under CPython (``emqlab_site``, the terminal game's lines);
* the slider's first point, a switch to the split finish and a move of the slider are each a timed run
  computed in the browser, and the browser's run at a swept RTT gives the build's numbers (CPython's);
* a browser without WebAssembly gets the message and the link to the install instructions;
* notebook 01, opened in the site's JupyterLite (``lite/``) from the start page's link, runs all its cells
  without an error, and prints the race's witness and counts that CPython gives.

Needs ``node``, ``npm``, Debian's Chromium and Playwright (skipped without them with the reason, failed in
CI); the browser tests are marked ``browser``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[1]
SITE_SCRIPTS = ROOT / "scripts" / "site"
CHROMIUM = os.environ.get("EMQLAB_CHROMIUM", "/usr/bin/chromium")
sys.path.insert(0, str(SITE_SCRIPTS))
try:
    import browse  # type: ignore[import-not-found]
    import build  # type: ignore[import-not-found]
    import emqlab_site  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(SITE_SCRIPTS))

#: the slider's curves here: fewer RTTs than a real build's (the sweep is most of the build's CPU)
RTTS = (0.05, 1.0, 5.0, 75.0)
#: level 1 won with the game's buttons: the hint (W1 nine times, then S1), then the rest in order
LEVEL_1_KEYS = ["W1"] * 9 + ["S1", "f"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            require(tool, "the site bundles npm's pyodide and wasmoon-lua5.1 (Debian's nodejs and npm packages)")
    out = tmp_path_factory.mktemp("browser-site") / "site"
    try:
        build.build(out, RTTS)
    except (subprocess.CalledProcessError, OSError) as e:
        require("the Pyodide harness's npm packages and PyPI files", f"installing them failed ({e})")
    return out


def test_the_folder_holds_everything_the_pages_load(site: Path) -> None:
    for name in ("index.html", "play.html", "slider.html", "install.html", "app.js", "worker.js", "play.js",
                 "slider.js", "site.css", "sweep.json", "manifest.json", "emqlab.zip", "pyodide/pyodide.mjs",
                 "pyodide/pyodide.asm.wasm", "pyodide/python_stdlib.zip", "wasmoon/index.js",
                 "wasmoon/liblua5.1.wasm", "wasmoon/lodash.min.js"):
        assert (site / name).is_file(), name
    for page in ("index.html", "play.html", "slider.html", "app.js", "worker.js", "play.js", "slider.js"):
        text = (site / page).read_text()
        assert "https://" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", ""), page
    with zipfile.ZipFile(site / "emqlab.zip") as z:
        names = set(z.namelist())
    assert {"emqlab_site.py", "emqlab/__init__.py", "emqlab/lua/moveToFinished-14.lua",
            "yaml/__init__.py", "fakeredis/__init__.py", "redis/__init__.py"} <= names
    # bytecode: Pyodide's own (compiled under it at the build), of a source the bundle holds; none of this
    # interpreter's from the checkout
    pyc = [n for n in names if n.endswith(".pyc")]
    for package in ("emqlab", "fakeredis", "redis", "yaml"):
        assert f"{package}/__pycache__/__init__.cpython-314.pyc" in pyc, package
    for n in pyc:
        folder, _, file = n.rpartition("__pycache__/")
        assert file.endswith(".cpython-314.pyc") and f"{folder}{file.split('.')[0]}.py" in names, n
    sweep = json.loads((site / "sweep.json").read_text())
    assert {(r["mode"], r["rtt_ms"]) for r in sweep["rows"]} == {(m, x) for m in sweep["modes"]
                                                                 for x in RTTS}
    # the notebooks in JupyterLite: its pages, the notebooks, and a Pyodide whose lock lists only the wheels
    # beside it (each as locked), emqlab's with the Lua module's files
    for name in ("lite/notebooks/index.html", "lite/jupyter-lite.json", "lite/files/01-read-decide-write.ipynb",
                 "lite/files/02-interleavings.ipynb", "lite/static/pyodide/pyodide.mjs"):
        assert (site / name).is_file(), name
    pyodide = site / "lite" / "static" / "pyodide"
    lock = json.loads((pyodide / "pyodide-lock.json").read_text())["packages"]
    assert {"micropip", "emqlab", "fakeredis", "redis", "msgpack", "pyyaml", "ipython", "ipywidgets"} <= set(lock)
    for entry in lock.values():
        wheel = pyodide / entry["file_name"]
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == entry["sha256"], wheel.name
    assert sorted(lock["emqlab"]["depends"]) == sorted(set(lock) - {"emqlab", "micropip"})
    with zipfile.ZipFile(pyodide / lock["emqlab"]["file_name"]) as z:
        assert {"emqlab/lua/moveToFinished-14.lua", "emqlab/scripting/wasmoon/liblua5.1.wasm",
                "emqlab/scripting/wasmoon/index.js"} <= set(z.namelist())
    assert 'href="lite/notebooks/index.html?path=01-read-decide-write.ipynb"' in (site / "index.html").read_text()


def _cpython_game(keys: list[str], level: str = "1") -> dict[str, Any]:
    state = json.loads(emqlab_site.start(level))
    for k in keys:
        state = json.loads(emqlab_site.keys(k))
    return dict(state)


def test_level_1_won_under_cpython_by_the_same_keys() -> None:
    state = _cpython_game(LEVEL_1_KEYS)
    assert state["won"] and state["done"] and state["over"][1].startswith("*** You win!")
    assert state["schedule"] == "v1:W1*9.S1.W1*8"
    assert any("emqlab replay 'v1:W1*9.S1.W1*8'" in line for line in state["over"])


def test_a_level_of_python_actors_plays() -> None:
    # level 15's actors are Python code: greenlets under CPython, replayed under Pyodide (the page would turn
    # an ImportError into "needs the install for now")
    state = json.loads(emqlab_site.start("15"))
    assert "error" not in state and state["actors"] and state["level"] == 15


# -- in headless Chromium -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        require("Chromium", f"no Chromium at {CHROMIUM}: apt-get install chromium (scripts/ci_browser.sh)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require("Playwright", "pip install -e '.[test]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def served(site: Path) -> Iterator[str]:
    with browse.serve(site) as base:
        yield base


def _context(browser: Any, base: str, **kw: Any) -> tuple[Any, Any, dict[str, list[str]], list[str]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **kw)
    seen = browse.offline(context, base)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    return context, page, seen, errors


@pytest.mark.browser
def test_level_1_is_won_in_the_browser_offline(browser: Any, served: str, tmp_path: Path) -> None:
    context, page, seen, errors = _context(browser, served)
    try:
        timings = browse.open_level(page, served, 1)
        assert timings["total_s"] > 0
        assert "[1] W1  next: EXISTS 1" in page.inner_text("#status")
        assert page.is_enabled("button.actor[data-actor='S1']")
        for key in LEVEL_1_KEYS:
            browse.press(page, key)
        assert page.get_attribute("#game", "data-won") == "true"
        over = page.inner_text("#over")
        assert "*** You win!" in over and "emqlab replay 'v1:W1*9.S1.W1*8'" in over
        # the browser's lines are CPython's for the same keys
        cpython = _cpython_game(LEVEL_1_KEYS)
        assert [x for x in over.splitlines() if x.strip()] == [x for x in cpython["over"] if x.strip()]
        assert page.inner_text("#status").splitlines() == cpython["status"]
        assert page.is_disabled("button.actor[data-actor='W1']")
        # what came from the server: the worker's loads too (they pass through the same filter)
        for name in ("/emqlab.zip", "/pyodide/pyodide.asm.wasm", "/pyodide/python_stdlib.zip",
                     "/wasmoon/liblua5.1.wasm"):
            assert any(name in url for url in seen["passed"]), name
        assert seen["refused"] == [] and errors == []
        # and the filter is on: a request elsewhere is refused
        assert page.evaluate("fetch('https://example.com/x').then(() => 'fetched', () => 'refused')") == "refused"
        assert seen["refused"] == ["https://example.com/x"]
        errors.clear()  # (the refused fetch's console error)
        page.screenshot(path=str(tmp_path / "level-1.png"))
        # level 15's actors are Python code: under Pyodide, with no greenlet, they run by replay
        # (emqlab.engine.pysync); the level plays and is won by the same keys as under CPython
        page.select_option("#level", "15")
        page.click("#start")
        page.wait_for_selector("#game[data-level='15'][data-busy='false']", timeout=browse.START_TIMEOUT_MS)
        assert not page.is_visible("#needs") and "[1] SCHED" in page.inner_text("#status")
        keys15 = ["SCHED"] * 3 + ["PROD"] * 2 + ["SCHED"] * 2
        for key in keys15:
            browse.press(page, key)
        assert page.get_attribute("#game", "data-won") == "true"
        cpython15 = _cpython_game(keys15, level="15")
        assert [x for x in page.inner_text("#over").splitlines() if x.strip()] == \
            [x for x in cpython15["over"] if x.strip()]
        assert errors == []
    finally:
        context.close()


@pytest.mark.browser
def test_the_slider_runs_the_model_in_the_browser(browser: Any, served: str, site: Path) -> None:
    sweep = json.loads((site / "sweep.json").read_text())
    row = {(r["mode"], r["rtt_ms"]): r for r in sweep["rows"]}
    context, page, seen, errors = _context(browser, served)
    try:
        page.goto(f"{served}/slider.html")
        first = browse.slider_point(page, mode="atomic", rtt_ms=1)
        assert first["round_trips_per_job"] == 1.0 and "RTT 1 ms (cross-AZ) · atomic finish" in first["summary"]
        page.click("input[name=finish][value=split]")
        split = browse.slider_point(page, mode="split", rtt_ms=1)
        # the browser's timed run at a swept RTT: the build's (CPython's) numbers
        want = row[("split", 1.0)]
        assert round(split["anomalies_per_1000"], 2) == want["anomalies_per_1000"] > 0
        assert round(split["round_trips_per_job"], 3) == want["round_trips_per_job"]
        assert round(split["jobs_per_s"], 2) == want["jobs_per_s"]
        assert page.inner_text("#summary") == split["summary"]
        # move the slider: 90 % of the way (log scale) is 101 ms
        page.fill("#rtt", "900")
        page.dispatch_event("#rtt", "change")
        rtt = float(f"{0.03 * (250 / 0.03) ** 0.9:.3g}")
        moved = browse.slider_point(page, mode="split", rtt_ms=rtt)
        assert page.inner_text("#rtt-value") == f"{rtt:g}" and moved["anomalies_per_1000"] > split["anomalies_per_1000"]
        marker = page.get_attribute("#figure circle.current[data-metric='anomalies_per_1000']", "cx")
        assert marker is not None and float(marker) > 400
        assert seen["refused"] == [] and errors == []
    finally:
        context.close()


@pytest.mark.browser
def test_a_browser_without_webassembly_is_sent_to_the_install(browser: Any, served: str) -> None:
    context, page, seen, errors = _context(browser, served)
    context.add_init_script("delete globalThis.WebAssembly;")
    try:
        for name in ("play.html", "slider.html", "index.html"):
            page.goto(f"{served}/{name}")
            page.wait_for_selector("#cannot", state="visible", timeout=30_000)
            assert "no WebAssembly" in page.inner_text("#cannot")
            assert page.get_attribute("#cannot a", "href") == "install.html"
        page.click("#cannot a")
        assert "pip install -q -e \".[lab]\"" in page.inner_text("main")
        assert seen["refused"] == [] and errors == []
    finally:
        context.close()


@pytest.mark.browser
def test_notebook_01_runs_in_jupyterlite_offline(browser: Any, served: str, tmp_path: Path) -> None:
    from emqlab import __version__
    from emqlab.engine.scenario import load
    from emqlab.explore import explore

    context, page, seen, errors = _context(browser, served)
    try:
        page.goto(f"{served}/index.html")
        link = page.get_attribute("#notebooks a[href*='01-read-decide-write']", "href")
        assert link is not None
        run = browse.run_notebook(page, served, link.split("path=")[1])
        cells = run["cells"]
        page.screenshot(path=str(tmp_path / "notebook-01.png"), full_page=True)
        # every code cell ran, in order, and none raised (a raise stops Run All there) or wrote to stderr
        assert [c["prompt"] for c in cells] == [f"[{i}]:" for i in range(1, len(cells) + 1)]
        assert [c["errors"] for c in cells] == [[]] * len(cells)
        out = "\n".join(c["output"] for c in cells)
        assert "backend: fakeredis" in out and "Same reply: True" in out
        # the race: the witness and the counts, as CPython finds them
        race = load("stalled-finish")
        split, atomic = explore(race, "split"), explore(race, "atomic")
        assert f"-- stalled-finish · split · {split.witnesses['double-placement'].schedule}" in out
        assert (f"split: double-placement in {split.interleavings_with['double-placement']} of "
                f"{split.raw_interleavings} interleavings · atomic: no anomaly in all {atomic.raw_interleavings}"
                in out)
        assert atomic.anomaly_kinds == [] and "placements: {'1': ['completed']}" in out
        assert "[plot_timeline: a figure, drawn with matplotlib" in out  # (no matplotlib in this Pyodide)
        assert "cleaned up" in cells[-1]["output"]
        for name in ("/lite/static/pyodide/pyodide.asm.wasm", "/lite/files/01-read-decide-write.ipynb",
                     f"/lite/static/pyodide/emqlab-{__version__}-py3-none-any.whl"):
            assert any(name in url for url in seen["passed"]), name
        assert seen["refused"] == [] and errors == []
    finally:
        context.close()
