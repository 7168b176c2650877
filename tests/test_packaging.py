"""Where emqlab finds its Lua scripts (checkout, editable install, wheel install, ``$EMQLAB_LUA_DIR``) and
whether the package configuration ships every one of them. ``scripts/check_wheel.sh`` builds and installs the
real wheel; these are the fast checks."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import re
from pathlib import Path

import pytest

from emqlab.scripting import registry
from emqlab.scripting.registry import ScriptError, ScriptSet, lua_dir

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _fake_module(monkeypatch: pytest.MonkeyPatch, package: Path) -> None:
    package.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(registry, "__file__", str(package / "scripting" / "registry.py"))
    monkeypatch.delenv("EMQLAB_LUA_DIR", raising=False)


def test_checkout_reads_the_repository_lua_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMQLAB_LUA_DIR", raising=False)
    assert lua_dir() == ROOT / "lua"
    assert (lua_dir() / "lib" / "cmsgpack.lua").is_file()


def test_env_variable_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EMQLAB_LUA_DIR", str(tmp_path))
    assert lua_dir() == tmp_path


def test_wheel_layout_reads_the_packaged_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "emqlab" / "lua" / "lib").mkdir(parents=True)
    _fake_module(monkeypatch, site / "emqlab")
    assert lua_dir() == site / "emqlab" / "lua"


def test_broken_install_names_the_package_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "lua").mkdir(parents=True)  # another distribution's top-level lua/ must not be picked
    (site / "lua" / "other-1.lua").write_text("return 1\n")
    _fake_module(monkeypatch, site / "emqlab")
    assert lua_dir() == site / "emqlab" / "lua"
    with pytest.raises(ScriptError, match=re.escape(str(site / "emqlab" / "lua"))):
        ScriptSet.emqlab()


def test_checkout_layout_without_packaged_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "lua").mkdir()
    _fake_module(monkeypatch, tmp_path / "emqlab")
    assert lua_dir() == tmp_path / "lua"


def test_package_data_ships_every_lua_file() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    assert "emqlab.lua" in setuptools["packages"]
    assert setuptools["package-dir"]["emqlab.lua"] == "lua"
    patterns = setuptools["package-data"]["emqlab.lua"]
    files = sorted(p.relative_to(ROOT / "lua").as_posix() for p in (ROOT / "lua").rglob("*.lua"))
    assert files, "no .lua files under lua/"
    # setuptools globs do not cross "/": a pattern's folder part must equal the file's folder.
    missing = [
        f for f in files
        if not any(Path(f).parent == Path(p).parent and fnmatch.fnmatch(Path(f).name, Path(p).name)
                   for p in patterns)
    ]
    assert not missing, f"package-data for emqlab.lua misses {missing}"


def test_bullmq_hint_names_the_pinned_package(monkeypatch: pytest.MonkeyPatch) -> None:
    pin = next(r for r in _pyproject()["project"]["optional-dependencies"]["test"] if r.startswith("bullmq"))

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(ScriptError) as e:
        ScriptSet.bullmq()
    assert f"pip install {pin}" in str(e.value)


def test_every_package_folder_is_in_the_wheel() -> None:
    """Each folder of ``emqlab/`` with an ``__init__.py`` is listed in pyproject's packages (setuptools ships
    only those: a layer left out installs without it)."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "emqlab").rglob("__init__.py")}
    assert folders - listed == set(), f"not in pyproject's packages: {sorted(folders - listed)}"
