"""The browser site's ``lite/`` folder: notebooks 01 and 02 in JupyterLite (``jupyterlite-core`` and
``jupyterlite-pyodide-kernel``), on the site's own Pyodide, with nothing fetched from elsewhere when they run.
Called by ``build.py``; what it makes:

* ``lite/static/pyodide/``: the npm ``pyodide`` the site already has (the kernel's Pyodide of the same
  series), the wheels beside it, and a ``pyodide-lock.json`` of ours that lists only those (so that Pyodide
  never looks for a package elsewhere). Pyodide takes one distribution per wheel, so each is its own:

  - ``micropip`` (PyPI's wheel of the version npm's lock names), which the kernel loads first;
  - ``emqlab`` (made here): the checkout's ``emqlab/`` with ``lua/``, and wasmoon-lua5.1's files in
    ``emqlab/scripting/wasmoon/`` (``emqlab.scripting.wasmlua`` loads them itself in the kernel's worker,
    where no page of ours runs); its lock entry depends on every wheel below;
  - what emqlab imports: the harness's PyPI wheels (fakeredis, redis, msgpack's Pyodide wheel …) and a
    ``pyyaml`` wheel made here of the pure ``yaml`` package the harness took from PyYAML's source archive;
  - IPython, ipywidgets and their dependencies (:func:`closure`: PyPI's pure wheels, into the cache's
    ``lite-wheels/``);

* the kernel's settings (``jupyter-lite.json``): ``emqlab`` preloaded when the kernel starts (so a notebook
  needs no ``%pip`` cell) and piplite's PyPI fallback off; every cell drawn (``overrides.json``);
* the two notebooks as its contents.

``jupyter lite build`` runs in a virtual environment of its own with pyproject.toml's ``site`` extra
(:func:`lite_python`).

Raises ``subprocess.CalledProcessError`` when pip or ``jupyter lite build`` fails.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from archive import write_zip  # type: ignore[import-not-found]  # (scripts/site/archive.py)

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
NOTEBOOKS = ("01-read-decide-write.ipynb", "02-interleavings.ipynb")
#: what the kernel and the notebooks import besides emqlab's own packages (PyPI's pure wheels, their
#: dependencies too), at the versions installed here
KERNEL_PACKAGES = ("ipython", "comm", "jedi", "ipywidgets")
#: dependencies no Python import needs in the kernel (ipywidgets' front-end halves: the site has its lab
#: extension; the kernel ships its own stand-in of widgetsnbextension) or that cannot run there
LEFT_OUT = ("widgetsnbextension", "jupyterlab-widgets", "pexpect", "ptyprocess")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


#: the environment markers of Pyodide's Python (a dependency's markers are read for it, not for this one)
PYODIDE_MARKERS = {"sys_platform": "emscripten", "platform_system": "Emscripten", "platform_machine": "wasm32",
                   "os_name": "posix", "python_version": "3.14", "python_full_version": "3.14.2",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def closure(names: tuple[str, ...]) -> list[str]:
    """``names`` and their dependencies under Pyodide (:data:`PYODIDE_MARKERS`), less :data:`LEFT_OUT`, as
    ``name==version`` at the versions installed here. Raises ``PackageNotFoundError`` for one not installed."""
    from packaging.requirements import Requirement

    seen: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = _norm(todo.pop())
        if name in seen or name in LEFT_OUT:
            continue
        dist = importlib.metadata.distribution(name)
        seen[name] = dist.version
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(PYODIDE_MARKERS):
                todo.append(req.name)
    return [f"{n}=={v}" for n, v in sorted(seen.items())]


def kernel_wheels(cache: Path, platform: tuple[str, ...]) -> list[Path]:
    """PyPI's wheels of :data:`KERNEL_PACKAGES` and their dependencies (:func:`closure`) for Pyodide's Python
    (``platform``: pip's platform options), downloaded once into ``cache/lite-wheels``."""
    wanted = closure(KERNEL_PACKAGES)
    folder = cache / "lite-wheels"
    stamp = json.dumps(wanted)
    if not ((folder / ".stamp").is_file() and (folder / ".stamp").read_text() == stamp):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        *platform, "--dest", str(folder), *wanted], check=True)
        (folder / ".stamp").write_text(stamp)
    return sorted(folder.glob("*.whl"))


def site_extra() -> list[str]:
    """The requirements of pyproject.toml's ``site`` extra (read as text: Python 3.10 has no tomllib)."""
    text = (CHECKOUT / "pyproject.toml").read_text()
    match = re.search(r"^site = \[(.*?)\]", text, re.M | re.S)
    if match is None:
        raise RuntimeError("pyproject.toml has no site extra")
    return re.findall(r'"([^"]+)"', match.group(1))


def lite_python(cache: Path) -> Path:
    """The Python of a virtual environment with the ``site`` extra (JupyterLite's build), made once in
    ``cache/lite-venv``: not this environment, whose JupyterLab the Pyodide kernel's lab extension breaks."""
    venv = cache / "lite-venv"
    python = venv / "bin" / "python"
    wanted = json.dumps(site_extra())
    if not ((venv / ".stamp").is_file() and (venv / ".stamp").read_text() == wanted and python.is_file()):
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *site_extra()], check=True)
        (venv / ".stamp").write_text(wanted)
    return python


def micropip_wheel(cache: Path, modules: Path, platform: tuple[str, ...]) -> Path:
    """PyPI's wheel of the micropip that npm's Pyodide locks (the kernel loads it first), downloaded once into
    ``cache``."""
    locked = json.loads((modules / "pyodide" / "pyodide-lock.json").read_text())["packages"]["micropip"]
    wheel = cache / locked["file_name"]
    if not wheel.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        *platform, "--dest", str(cache), f"micropip=={locked['version']}"], check=True)
    return wheel


def _made_wheel(out_dir: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    info = f"{name}-{version}.dist-info/"
    files = dict(files)
    files[info + "METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files[info + "WHEEL"] = b"Wheel-Version: 1.0\nGenerator: emqlab-site\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    out = out_dir / f"{name}-{version}-py3-none-any.whl"
    write_zip(out, files, compresslevel=6)
    return out


def _tree(root: Path, prefix: str) -> dict[str, bytes]:
    return {prefix + p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")}


def _harness() -> Any:
    """``scripts/pyodide/harness.py``, imported as the site's build imports it."""
    from build import _harness  # type: ignore[import-not-found]  # (scripts/site/build.py)

    return _harness()


def made_wheels(out_dir: Path, site_packages: Path, modules: Path) -> list[Path]:
    """Write the two wheels no registry has into ``out_dir``: ``emqlab`` (the checkout's ``emqlab/`` with
    ``lua/`` and wasmoon-lua5.1's files in ``emqlab/scripting/wasmoon/``) and ``PyYAML`` (the pure ``yaml``
    package the harness took from its source archive). Their paths."""
    from emqlab import __version__

    files = _tree(CHECKOUT / "emqlab", "emqlab/") | _tree(CHECKOUT / "lua", "emqlab/lua/")
    for name, path in _harness().wasmoon_files(modules).items():
        files[f"emqlab/scripting/wasmoon/{name}"] = path.read_bytes()
    yaml = _tree(site_packages / "yaml", "yaml/")
    return [_made_wheel(out_dir, "emqlab", __version__, files),
            _made_wheel(out_dir, "pyyaml", importlib.metadata.version("PyYAML"), yaml)]


def _lock_entry(wheel: Path, depends: list[str]) -> dict[str, object]:
    name, version = _norm(wheel.name.split("-")[0]), wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
    imports = sorted(t.removesuffix(".py") for t in tops
                     if not t.endswith((".dist-info", ".data", ".pth")) and (t.endswith(".py") or "." not in t))
    return {"name": name, "version": version, "file_name": wheel.name, "install_dir": "site",
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "package_type": "package",
            "imports": imports, "depends": depends, "unvendored_tests": False, "tool": {}}


def pyodide_folder(dest: Path, site_packages: Path, modules: Path, cache: Path, platform: tuple[str, ...],
                   core_files: tuple[str, ...]) -> None:
    """Fill ``dest`` with Pyodide's ``core_files``, the wheels (micropip, emqlab and what it needs) and
    their lock file: emqlab's entry depends on every other wheel but micropip's."""
    dest.mkdir(parents=True)
    for name in core_files:
        if name != "pyodide-lock.json":
            shutil.copyfile(modules / "pyodide" / name, dest / name)
    npm_lock = json.loads((modules / "pyodide" / "pyodide-lock.json").read_text())
    micropip = micropip_wheel(cache, modules, platform)
    # (by file name: a wheel both sides need, pygments, once)
    wheels = sorted({w.name: w for w in [*kernel_wheels(cache, platform), *(cache / "wheels").glob("*.whl")]}
                    .values())
    for whl in [micropip, *wheels]:
        shutil.copyfile(whl, dest / whl.name)
    emqlab, *others = made_wheels(dest, site_packages, modules)
    needed = [dest / w.name for w in wheels] + others
    packages = {e["name"]: e for e in [_lock_entry(w, []) for w in [dest / micropip.name, *needed]]}
    packages["emqlab"] = _lock_entry(emqlab, sorted(str(packages[_norm(w.name.split("-")[0])]["name"])
                                                    for w in needed))
    (dest / "pyodide-lock.json").write_text(json.dumps({"info": npm_lock["info"], "packages": packages},
                                                       indent=1, sort_keys=True))


def build_lite(out: Path, site_packages: Path, modules: Path, cache: Path, platform: tuple[str, ...],
               core_files: tuple[str, ...]) -> None:
    """Build the JupyterLite folder ``out`` (see the module's docstring)."""
    with tempfile.TemporaryDirectory(prefix="emqlab-lite-") as tmp:
        lite_dir = Path(tmp)
        pyodide_folder(lite_dir / "static" / "pyodide", site_packages, modules, cache, platform, core_files)
        settings = {"loadPyodideOptions": {"packages": ["emqlab"]}, "disablePyPIFallback": True}
        config = {"jupyter-lite-schema-version": 0,
                  "jupyter-config-data": {"appName": "emqlab notebooks",
                                          "litePluginSettings": {
                                              "@jupyterlite/pyodide-kernel-extension:kernel": settings}}}
        (lite_dir / "jupyter-lite.json").write_text(json.dumps(config, indent=1))
        # every cell drawn, not only those in view: a cell's output is then in the page (and the browser
        # test reads it) wherever the notebook is scrolled
        overrides = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}
        (lite_dir / "overrides.json").write_text(json.dumps(overrides, indent=1))
        contents = [a for nb in NOTEBOOKS for a in ("--contents", str(CHECKOUT / "notebooks" / nb))]
        done = subprocess.run([str(lite_python(cache)), "-m", "jupyterlite_core", "build", "--lite-dir", str(lite_dir),
                               "--output-dir", str(out), "--apps", "lab", "--apps", "notebooks", "--apps", "tree",
                               "--no-sourcemaps", *contents],
                              cwd=lite_dir, capture_output=True, text=True)
        if done.returncode:  # (its tasks' report is on stdout: shown only when it fails)
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            done.check_returncode()


def prepare() -> list[Path]:
    """Fill the harness's caches, this module's wheels and its virtual environment (CI: ``.ci/run``, before
    the tests): the wheels' paths."""
    harness = _harness()
    _, modules = harness.prepare()
    cache, platform = harness.cache_dir(), harness.PYODIDE_PLATFORM
    lite_python(cache)
    return [micropip_wheel(cache, modules, platform), *kernel_wheels(cache, platform)]


if __name__ == "__main__":
    if sys.argv[1:] != ["--prepare"]:
        sys.exit("usage: python scripts/site/lite.py --prepare  (the site's build calls this module itself)")
    print(f"{len(prepare())} wheels for the notebooks in JupyterLite")
