"""The Node harness that runs emqlab under Pyodide, its Lua on WebAssembly (``wasmoon-lua5.1``): not part of
the installed package. Used by ``tests/test_pyodide_runtime.py``; by hand::

    python scripts/pyodide/harness.py file.py [arg …]  # runs file.py under Pyodide, prints its output
    python scripts/pyodide/harness.py --prepare    # only installs what a run needs (CI: .ci/run)

What it builds, once, in a cache folder outside the checkout (``$EMQLAB_PYODIDE_CACHE``, default
``~/.cache/emqlab-pyodide``; nothing of it is committed):

* ``npm/``: the npm packages of ``package.json`` (``pyodide``, ``wasmoon-lua5.1``, exact versions), by ``npm
  install``;
* ``site/``: the Python packages emqlab imports that Pyodide lacks, unpacked from PyPI's files at the versions
  installed in this (CPython) environment: the pure-Python wheels, msgpack's Pyodide wheel, PyYAML's pure
  ``yaml`` package from its source archive (PyPI has no pure wheel of it).

Each run (``run.mjs``) copies ``site/``, the checkout's ``emqlab/`` and ``lua/`` into Pyodide's file system:
nothing is fetched at run time.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
#: the pure-Python distributions emqlab imports under Pyodide (lupa and greenlet have no Pyodide build: see
#: emqlab.scripting.wasmlua and emqlab.engine.pysync), with the atlas's queue libraries (its real-library actors)
PURE = ("redis", "fakeredis", "sortedcontainers", "click", "rich", "markdown-it-py", "mdurl", "pygments",
        "typing_extensions", "rq", "dramatiq")
#: the Pyodide platform of the pinned ``pyodide`` npm package (Python 3.14)
PYODIDE_PLATFORM = ("--platform", "pyemscripten_2026_0_wasm32", "--python-version", "3.14",
                    "--implementation", "cp", "--abi", "cp314")


def cache_dir() -> Path:
    return Path(os.environ.get("EMQLAB_PYODIDE_CACHE") or Path.home() / ".cache" / "emqlab-pyodide")


def _pip_download(dest: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--dest", str(dest), *args], check=True)


def _site(cache: Path) -> Path:
    site = cache / "site"
    wanted = [f"{name}=={importlib.metadata.version(name)}" for name in PURE]
    msgpack = f"msgpack=={importlib.metadata.version('msgpack')}"
    yaml = importlib.metadata.version("PyYAML")
    stamp = json.dumps([wanted, msgpack, yaml])
    if (site / ".stamp").is_file() and (site / ".stamp").read_text() == stamp:
        return site
    wheels = cache / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    wheels.mkdir(parents=True)
    _pip_download(wheels, *wanted)
    try:
        _pip_download(wheels, *PYODIDE_PLATFORM, msgpack)
    except subprocess.CalledProcessError:  # (no Pyodide wheel of the installed version: PyPI's newest)
        _pip_download(wheels, *PYODIDE_PLATFORM, "msgpack")
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
    # (pip download would build the source archive's metadata, which PyYAML's needs a compiler for: the
    # archive is taken from PyPI's simple index, JSON form, and checked against its hash)
    ask = urllib.request.Request("https://pypi.org/simple/pyyaml/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(ask, timeout=60) as r:
        sdist = next(f for f in json.load(r)["files"] if f["filename"].lower() == f"pyyaml-{yaml}.tar.gz")
    archive = wheels / sdist["filename"]
    with urllib.request.urlopen(sdist["url"], timeout=120) as r:
        archive.write_bytes(r.read())
    if hashlib.sha256(archive.read_bytes()).hexdigest() != sdist["hashes"]["sha256"]:
        raise RuntimeError(f"{archive.name}: not the file PyPI lists (sha256 differs)")
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) > 3 and parts[1:3] == ("lib", "yaml") and m.isfile():
                out = site / "yaml" / Path(*parts[3:])
                out.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                assert src is not None
                out.write_bytes(src.read())
    (site / ".stamp").write_text(stamp)
    return site


def _node_modules(cache: Path) -> Path:
    npm = cache / "npm"
    spec = (HERE / "package.json").read_text()
    if (npm / "package.json").is_file() and (npm / "package.json").read_text() == spec \
            and (npm / "node_modules" / "wasmoon-lua5.1").is_dir() and (npm / "node_modules" / "pyodide").is_dir():
        return npm / "node_modules"
    npm.mkdir(parents=True, exist_ok=True)
    (npm / "package.json").write_text(spec)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=npm, check=True)
    return npm / "node_modules"


#: the files of the Lua on WebAssembly a browser build ships beside emqlab (``emqlab/scripting/wasmoon/``, which
#: :mod:`emqlab.scripting.wasmlua` loads): name → path under ``node_modules/``
WASMOON_FILES = {"index.js": "wasmoon-lua5.1/dist/index.js", "liblua5.1.wasm": "wasmoon-lua5.1/dist/liblua5.1.wasm",
                 "lodash.min.js": "lodash/lodash.min.js"}


def wasmoon_files(modules: Path) -> dict[str, Path]:
    """:data:`WASMOON_FILES` in ``modules`` (the ``node_modules/`` of :func:`prepare`): name → file."""
    return {name: modules / rel for name, rel in WASMOON_FILES.items()}


def prepare() -> tuple[Path, Path]:
    """The ``site/`` and ``node_modules/`` folders, built if missing or stale. Raises ``CalledProcessError``
    when npm or pip fails."""
    cache = cache_dir()
    return _site(cache), _node_modules(cache)


def run(file: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the Python file ``file`` under Pyodide (``run.mjs``) with ``args`` as its ``sys.argv[1:]``: its
    output, its exit status."""
    site, modules = prepare()
    return subprocess.run(["node", str(HERE / "run.mjs"), str(site), str(modules), str(CHECKOUT), str(file),
                           *args], capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":
    if sys.argv[1:] == ["--prepare"]:
        for folder in prepare():
            print(folder)
        sys.exit(0)
    done = run(Path(sys.argv[1]), *sys.argv[2:])
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)
