"""The browser site in headless Chromium (``scripts/site/``, ``docs/browser.md``): cold start to the first
playable level, the same page again from the browser's cache, one step of level 1, and cold start to notebook
01's first cell run in the site's JupyterLite.

    python benchmarks/bench_site.py [--repeat N] [--site DIR] [--write docs/benchmarks.md]

The site is built into a temp folder (or ``--site``: one built already), served by a local static server,
and opened in Debian's Chromium (``$EMQLAB_CHROMIUM``, default ``/usr/bin/chromium``) with every request
not to that server refused. Each of ``--repeat`` runs launches a fresh browser (an empty cache):

* **cold start**: from ``play.html#1`` requested to level 1 playable (Python and Lua started in the worker,
  emqlab unpacked and imported, the level's first state shown) — wall seconds, the worker's own split
  (Pyodide, the Lua wasm module, emqlab) and the CPU seconds (user + system) of Chromium's processes;
* **cached start**: the same page opened again in a new tab of that browser (its HTTP cache full);
* **one step**: level 1 played to a win by its key presses (W1 nine times, S1, then f: the rest in order);
  per actor's step (f, eight steps, is left out), the milliseconds Python took in the worker and the wall
  milliseconds from the click to the page's update;
* **notebook 01** (another fresh browser): from ``lite/notebooks/index.html?path=01-read-decide-write.ipynb``
  requested, with *Run All Cells* chosen as soon as the notebook shows, to its first code cell's result
  (JupyterLite's pages, the kernel's Pyodide and its wheels loaded, the cell run) and to its last one — wall
  seconds, and the CPU seconds of Chromium's processes to the last.

Medians over the runs (steps: over every press of every run; the largest too). The load average is
printed with the table: on a shared machine the wall times grow with it, the CPU much less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _tables import write_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "site"))
import browse  # type: ignore[import-not-found]  # noqa: E402
import build  # type: ignore[import-not-found]  # noqa: E402

KEYS = ["W1"] * 9 + ["S1", "f"]


def measure(site: Path, repeat: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {k: [] for k in ("cold_s", "cold_cpu_s", "pyodide_s", "lua_s", "emqlab_s",
                                                   "cached_s", "cached_cpu_s", "step_py_ms", "step_wall_ms",
                                                   "nb_first_s", "nb_all_s", "nb_cpu_s", "load")}
    chromium = os.environ.get("EMQLAB_CHROMIUM", "/usr/bin/chromium")
    with browse.serve(site) as base, sync_playwright() as p:
        for _ in range(repeat):
            out["load"].append(os.getloadavg()[0])
            cpu0, t0 = browse.cpu_seconds(), time.perf_counter()
            browser = p.chromium.launch(executable_path=chromium, headless=True)
            try:
                context = browser.new_context()
                seen = browse.offline(context, base)
                page = context.new_page()
                timings = browse.open_level(page, base, 1)
                out["cold_s"].append(time.perf_counter() - t0)
                out["cold_cpu_s"].append(browse.cpu_seconds() - cpu0)
                for k in ("pyodide_s", "lua_s", "emqlab_s"):
                    out[k].append(timings[k])
                for key in KEYS:
                    t = time.perf_counter()
                    ms = browse.press(page, key)
                    if key != "f":  # (f runs the rest of the run: eight steps)
                        out["step_py_ms"].append(ms)
                        out["step_wall_ms"].append((time.perf_counter() - t) * 1000)
                if page.get_attribute("#game", "data-won") != "true":
                    raise SystemExit("level 1 was not won: the site is broken")
                cpu1, t1 = browse.cpu_seconds(), time.perf_counter()
                again = context.new_page()
                browse.open_level(again, base, 1)
                out["cached_s"].append(time.perf_counter() - t1)
                out["cached_cpu_s"].append(browse.cpu_seconds() - cpu1)
                if seen["refused"]:
                    raise SystemExit(f"requests left the local server: {seen['refused']}")
            finally:
                browser.close()
            out["load"].append(os.getloadavg()[0])
            cpu0 = browse.cpu_seconds()
            browser = p.chromium.launch(executable_path=chromium, headless=True)
            try:
                context = browser.new_context()
                seen = browse.offline(context, base)
                run = browse.run_notebook(context.new_page(), base, "01-read-decide-write.ipynb")
                out["nb_cpu_s"].append(browse.cpu_seconds() - cpu0)
                if any(c["errors"] for c in run["cells"]) or run["cells"][-1]["prompt"] != f"[{len(run['cells'])}]:":
                    raise SystemExit("notebook 01 did not run to its end without an error: the site is broken")
                out["nb_first_s"].append(run["first_cell_s"])
                out["nb_all_s"].append(run["all_cells_s"])
                if seen["refused"]:
                    raise SystemExit(f"requests left the local server: {seen['refused']}")
            finally:
                browser.close()
    return out


def table(m: dict[str, list[float]]) -> str:
    med = statistics.median
    rows = [
        "| measure | median | target |",
        "|---|---:|---:|",
        f"| cold start to level 1 playable, wall s | {med(m['cold_s']):.1f} | ≤ 30 |",
        f"| … of which Pyodide / the Lua wasm / emqlab unpacked and imported, wall s | {med(m['pyodide_s']):.1f}"
        f" / {med(m['lua_s']):.2f} / {med(m['emqlab_s']):.1f} | |",
        f"| cold start, CPU s of Chromium's processes | {med(m['cold_cpu_s']):.1f} | |",
        f"| cached start (a new tab, the HTTP cache full), wall s | {med(m['cached_s']):.1f} | |",
        f"| cached start, CPU s of Chromium's processes | {med(m['cached_cpu_s']):.1f} | |",
        f"| one step of level 1, ms in Python (max) | {med(m['step_py_ms']):.1f}"
        f" ({max(m['step_py_ms']):.1f}) | ≤ 100 |",
        f"| one step, ms from the click to the page's update (max) | {med(m['step_wall_ms']):.1f}"
        f" ({max(m['step_wall_ms']):.1f}) | ≤ 100 |",
        f"| cold start to notebook 01's first cell run (JupyterLite), wall s | {med(m['nb_first_s']):.1f} | ≤ 30 |",
        f"| … to its last cell run, wall s | {med(m['nb_all_s']):.1f} | |",
        f"| notebook 01 cold start to its last cell run, CPU s of Chromium's processes | {med(m['nb_cpu_s']):.1f} | |",
    ]
    return "\n".join(rows) + (f"\n\n{len(m['cold_s'])} runs, each a fresh headless Chromium for the level and"
                              " another for the notebook; "
                              f"{len(m['step_py_ms'])} steps; load average {min(m['load']):.1f}–{max(m['load']):.1f}"
                              f" on {os.cpu_count()} cores.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--site", type=Path, help="a site built already (default: build one into a temp folder)")
    parser.add_argument("--write", type=Path, help="write the table to this markdown page (replacing the older one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="emqlab-site-") as tmp:
        site = args.site or Path(tmp) / "site"
        if args.site is None:
            build.build(site)
        text = table(measure(site, args.repeat))
    print(text)
    if args.write:
        command = ("python benchmarks/bench_site.py" + (f" --repeat {args.repeat}" if args.repeat != 3 else "")
                   + (" --site DIR (built by python scripts/site/build.py --out DIR)" if args.site else ""))
        write_table(args.write, "The browser site in headless Chromium", command, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
