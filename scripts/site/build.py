"""Build emqlab's browser site — the levels and the round-trip slider running emqlab's own Python under
Pyodide, with no install — into one folder that any static server serves (``docs/browser.md``)::

    python scripts/site/build.py --out site/

Everything the pages load is in the folder, bundled here from the caches that
``scripts/pyodide/harness.py --prepare`` fills (npm's ``pyodide`` and ``wasmoon-lua5.1``, PyPI's files) and
from this checkout: nothing is fetched from elsewhere when the pages run. What it writes:

* ``pyodide/``: Pyodide's core files (the interpreter, its standard library); ``wasmoon/``: the Lua 5.1 in
  WebAssembly and the one library its browser build needs (lodash);
* ``emqlab.zip``: unpacked into Pyodide's site-packages by the worker: the pure-Python packages emqlab
  imports there, ``emqlab/`` with ``lua/`` and ``emqlab_site.py`` (what the pages call), and the bytecode
  of the packages the pages import, compiled under Pyodide in Node here (``bytecode.py``) so that the
  browser does not compile them at every start;
* ``sweep.json``: the slider's curves, :func:`emqlab.timing.sweep_rtt` over :data:`SWEEP_RTTS` and every
  mode with :data:`SWEEP_CONFIG` (the slider's own point is computed in the browser with the same config);
* the pages (``scripts/site/static/``) and ``manifest.json`` (the bundle's hash, which the worker asks for
  uncached so that a rebuilt site is not mixed with a cached one).

Raises ``subprocess.CalledProcessError`` when npm or pip fails to fill the caches.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from archive import write_zip  # type: ignore[import-not-found]  # (scripts/site/archive.py)

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
#: Pyodide's files the pages load (the package's other files are its docs, maps and a console page)
PYODIDE_FILES = ("pyodide.js", "pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json", "package.json")
#: the RTTs (ms) of the slider's curves and the timed runs' parameters (the docs' sweep: docs/hooks.py)
SWEEP_RTTS = (0.03, 0.05, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 75.0, 150.0, 250.0)
SWEEP_CONFIG = {"jobs": 16, "workers": 8, "seed": 0}
#: the index page's item for the notebooks in JupyterLite (``lite/``, ``lite.py``), in place of its marker
NOTEBOOK_LINKS = (
    '<li id="notebooks"><b>Notebooks in JupyterLite</b> — '
    '<a href="lite/notebooks/index.html?path=01-read-decide-write.ipynb">1 · Read, decide, write</a> and\n'
    '<a href="lite/notebooks/index.html?path=02-interleavings.ipynb">2 · Interleavings</a>: run them cell by '
    "cell, change them\n(figures need the install; their Lua needs a browser with WebAssembly's JSPI, such as "
    "Chrome or Edge 137\nor later).</li>")


def _harness() -> Any:
    sys.path.insert(0, str(CHECKOUT / "scripts" / "pyodide"))
    try:
        import harness  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    return harness


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


def bytecode() -> dict[str, bytes]:
    """Pyodide's bytecode of the packages the pages import (``bytecode.py``, run under Pyodide in Node):
    path in site-packages → pyc. Raises ``RuntimeError`` when the run fails."""
    done = _harness().run(HERE / "bytecode.py")
    if done.returncode != 0:
        raise RuntimeError(f"compiling under Pyodide failed: {done.stderr[-2000:]}")
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(done.stdout.strip().splitlines()[-1]))) as z:
        return {name: z.read(name) for name in z.namelist()}


def bundle(site_packages: Path, out: Path, pyc: dict[str, bytes]) -> str:
    """Write ``emqlab.zip`` to ``out``: the unpacked PyPI files of ``site_packages``, the checkout's
    ``emqlab/`` with ``lua/`` inside it (where an installed package's :func:`lua_dir` looks),
    ``emqlab_site.py`` and the bytecode ``pyc`` (path → content). Its sha256, hex."""
    entries: list[tuple[str, Path]] = []
    entries += [(p.relative_to(site_packages).as_posix(), p) for p in _files(site_packages) if p.name != ".stamp"]
    entries += [("emqlab/" + p.relative_to(CHECKOUT / "emqlab").as_posix(), p) for p in _files(CHECKOUT / "emqlab")]
    entries += [("emqlab/lua/" + p.relative_to(CHECKOUT / "lua").as_posix(), p) for p in _files(CHECKOUT / "lua")]
    entries.append(("emqlab_site.py", HERE / "emqlab_site.py"))
    files = {name: path.read_bytes() for name, path in entries} | pyc
    write_zip(out, files, compresslevel=9)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def sweep_data(rtts: tuple[float, ...] = SWEEP_RTTS) -> dict[str, Any]:
    """The slider's curves: every mode at every RTT of ``rtts`` (:class:`~emqlab.timing.Sweep`'s rows), with
    the config the browser's point uses and the ``emqlab sweep-rtt`` command that prints them."""
    from emqlab.backend.connect import connect
    from emqlab.timing import MODES, PRESETS, TimingConfig, sweep_rtt

    sweep = sweep_rtt(rtts, MODES, TimingConfig(**SWEEP_CONFIG), connect())
    grid = ",".join(f"{x:g}" for x in rtts)
    command = (f"emqlab sweep-rtt --rtt {grid} --jobs {SWEEP_CONFIG['jobs']} --workers {SWEEP_CONFIG['workers']}"
               f" --seed {SWEEP_CONFIG['seed']}")
    return {"command": command, "modes": list(sweep.modes), "rtts": list(sweep.rtts), "presets": dict(PRESETS),
            "config": SWEEP_CONFIG, "rows": sweep.rows()}


def build(out: Path, rtts: tuple[float, ...] = SWEEP_RTTS, *, with_bytecode: bool = True,
          with_lite: bool = True) -> dict[str, Any]:
    """Build the site into ``out`` (emptied first), the slider's curves at ``rtts`` (ms), the bytecode
    compiled under Pyodide unless ``with_bytecode`` is false, the notebooks in JupyterLite (``lite/``,
    ``lite.py``) unless ``with_lite`` is false; what it holds: ``{"files", "bytes", "bundle"}``."""
    harness = _harness()
    site_packages, modules = harness.prepare()
    if out.exists():
        shutil.rmtree(out)
    (out / "pyodide").mkdir(parents=True)
    (out / "wasmoon").mkdir()
    for name in PYODIDE_FILES:
        shutil.copyfile(modules / "pyodide" / name, out / "pyodide" / name)
    wasmoon = modules / "wasmoon-lua5.1"
    for name, path in harness.wasmoon_files(modules).items():
        shutil.copyfile(path, out / "wasmoon" / name)
    for package, folder in ((wasmoon, "wasmoon"), (modules / "lodash", "wasmoon"), (modules / "pyodide", "pyodide")):
        for licence in sorted(package.glob("LICEN[CS]E*")):
            shutil.copyfile(licence, out / folder / f"{package.name}-{licence.name}")
    for page in sorted((HERE / "static").iterdir()):
        shutil.copyfile(page, out / page.name)
    if with_lite:
        index = out / "index.html"
        index.write_text(index.read_text().replace("<!-- emqlab:notebooks -->", NOTEBOOK_LINKS))
    digest = bundle(site_packages, out / "emqlab.zip", bytecode() if with_bytecode else {})
    (out / "sweep.json").write_text(json.dumps(sweep_data(rtts), indent=1, sort_keys=True) + "\n")
    (out / "manifest.json").write_text(json.dumps({"bundle": digest[:16]}) + "\n")
    if with_lite:
        sys.path.insert(0, str(HERE))
        try:
            import lite  # type: ignore[import-not-found]
        finally:
            sys.path.remove(str(HERE))
        lite.build_lite(out / "lite", site_packages, modules, harness.cache_dir(), harness.PYODIDE_PLATFORM,
                        PYODIDE_FILES)
    files = [p for p in out.rglob("*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files), "bundle": digest[:16]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CHECKOUT / "site-browser", help="the folder to write")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="leave out the bytecode compiled under Pyodide (a quicker build, a slower start)")
    parser.add_argument("--no-lite", action="store_true", help="leave out the notebooks in JupyterLite (lite/)")
    args = parser.parse_args(argv)
    started, cpu = time.perf_counter(), time.process_time()
    done = build(args.out, with_bytecode=not args.no_bytecode, with_lite=not args.no_lite)
    print(f"{args.out}: {done['files']} files, {done['bytes'] / 1e6:.1f} MB (emqlab.zip {done['bundle']}),"
          f" built in {time.perf_counter() - started:.1f} s ({time.process_time() - cpu:.1f} s CPU);"
          f" serve it with: python -m http.server -d {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
