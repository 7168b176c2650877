"""The package's layers: each folder of ``emqlab/`` imports only the folders below it, and no set of modules
imports itself round — counting every import, at the top of a module, inside a function or under
``TYPE_CHECKING``. :data:`emqlab.layers.LAYERS` is the layers' one home; ``docs/architecture.md`` draws them.

Also here: every old module path of the flat package (:data:`emqlab._moved.MOVED`, the paths the docs,
notebooks and assignments use) imports and is the very module that now holds its code, and no module of
``emqlab/`` is over :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from emqlab._moved import MOVED
from emqlab.layers import RANK

PACKAGE = Path(__file__).resolve().parents[1] / "emqlab"

#: no module of emqlab/ is longer (a longer one does several jobs: split it along its seams)
MAX_LINES = 700


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _target(module: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The emqlab modules an import statement loads (a name imported from a package that is a module of it
    counts as that module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if MODULES[module].name != "__init__.py":
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _target(m, node):
                    t = MOVED.get(t, t)
                    while t and t not in MODULES:  # `import emqlab.x.y` loads emqlab.x.y's package too
                        t = t.rpartition(".")[0]
                    if t.startswith("emqlab") and t != m:
                        graph[m].add(t)
    return graph


def _rank(module: str) -> int:
    if module == "emqlab.__main__":  # ``python -m emqlab``: the console script, above every layer
        return max(RANK.values()) + 1
    if MODULES[module].parent == PACKAGE:
        return -1  # a root module (emqlab.layers, emqlab._moved, …): below every layer, imports none of them
    layer = module.split(".")[1]
    assert layer in RANK, f"{module}: emqlab/{layer}/ is in no layer of emqlab.layers.LAYERS"
    return RANK[layer]


def test_every_import_goes_down_the_layers() -> None:
    graph = _imports()
    upward = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if t == "emqlab":  # the package's own __init__ (the version, the finder) is below everything
                continue
            if _rank(t) > _rank(m) or (_rank(t) == _rank(m) and m.split(".")[1:2] != t.split(".")[1:2]
                                       and _rank(m) >= 0):
                upward.append(f"{m} -> {t}")
    assert not upward, "imports that reach up a layer (or across timing/check):\n" + "\n".join(upward)


def test_no_import_loops() -> None:
    graph = _imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not loops, "modules that import each other round:\n" + "\n".join(" ⇄ ".join(c) for c in loops)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_are_the_new_modules(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_python_m_runs_the_console_script_and_old_paths() -> None:
    """``python -m emqlab`` is the console script, and ``python -m <old path>`` runs the new module as before."""
    import subprocess
    import sys

    for args, want in ((["-m", "emqlab", "--version"], "emqlab, version"),
                       (["-m", "emqlab.cli", "--version"], "emqlab, version")):
        res = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and want in res.stdout, (args, res.stdout, res.stderr)


def test_documented_packages_keep_their_names() -> None:
    import emqlab.explore
    import emqlab.timing

    assert callable(emqlab.explore.explore) and emqlab.explore.Report.__name__ == "Report"
    assert callable(emqlab.timing.sweep_rtt) and callable(emqlab.timing.simulate)


def test_no_module_is_too_long() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in MODULES.values()
            if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_top_level_names_load_their_layer_only_when_used() -> None:
    """``emqlab.PUBLIC`` names (``emqlab.server``) resolve to their layer's function, and ``import emqlab``
    alone loads none of the layers."""
    import importlib
    import subprocess
    import sys

    import emqlab

    for name, module in emqlab.PUBLIC.items():
        assert getattr(emqlab, name) is getattr(importlib.import_module(module), name)
    out = subprocess.run([sys.executable, "-c", "import sys, emqlab; print(sorted(m for m in sys.modules"
                          " if m.startswith('emqlab.') and m.count('.') > 1))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_only_the_sandbox_module_names_the_lua_runtime() -> None:
    """``lupa`` is imported by :mod:`emqlab.scripting.sandbox` alone: the one home of the Lua runtime, so that
    a second Lua can go in there (the embedded server's shim of fakeredis's scripting reaches it through it)."""
    users = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "lupa" for a in node.names) \
                    or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lupa":
                users.add(name)
    assert users == {"emqlab.scripting.sandbox"}, sorted(users)


def test_only_the_wasm_runtime_imports_javascript() -> None:
    """``js`` and ``pyodide`` (Pyodide's bridge to JavaScript) are imported by :mod:`emqlab.scripting.wasmlua`
    alone, and that module by :mod:`emqlab.scripting.sandbox` alone (under Pyodide only): CPython never
    imports them."""
    users: dict[str, set[str]] = {"js": set(), "pyodide": set(), "emqlab.scripting.wasmlua": set()}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _target(name, node):
                    for wanted in users:
                        if target == wanted or target.startswith(wanted + "."):
                            users[wanted].add(name)
    assert users == {"js": {"emqlab.scripting.wasmlua"}, "pyodide": {"emqlab.scripting.wasmlua"},
                     "emqlab.scripting.wasmlua": {"emqlab.scripting.sandbox"}}, users
