"""The package's layers: each folder of ``emqlab/`` imports only the folders below it, and no set of modules
imports itself round — counting every import, at the top of a module, inside a function or under
``TYPE_CHECKING``. ``docs/architecture.md`` draws the layers; :data:`LAYERS` is their one home.

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

PACKAGE = Path(__file__).resolve().parents[1] / "emqlab"

#: bottom to top; a module may import from its own layer and the layers before it. ``timing`` and ``check``
#: share a rank: neither imports the other.
LAYERS: list[tuple[str, ...]] = [("protocol",), ("scripting",), ("backend",), ("engine",), ("analysis",),
                                 ("explore",), ("timing", "check"), ("teaching",), ("ui",)]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}

#: the package's root modules and the layer they count as
ROOT_MODULES = {"emqlab": -1, "emqlab._moved": -1}

#: modules over the size limit while the layered-package work splits them (each entry is a promise to cut)
MAX_LINES = 700
TOO_LONG_FOR_NOW = {"emqlab/teaching/grading.py", "emqlab/ui/cli.py",
                    "emqlab/scripting/host.py", "emqlab/engine/runner.py",
                    "emqlab/engine/scenario.py", "emqlab/engine/pyactors.py", "emqlab/backend/connect.py",
                    "emqlab/timing/model.py", "emqlab/teaching/levels.py", "emqlab/ui/widgets.py"}

#: imports that break the layering today, each with the cut that removes it (the list only shrinks)
KNOWN: dict[tuple[str, str], str] = {
    ("emqlab.protocol.outcome", "emqlab.scripting.calls"): "RETURN_CODES move to protocol.outcome",
    ("emqlab.scripting.host", "emqlab.backend.connect"): "the frozen clock moves to the host",
    ("emqlab.scripting.registry", "emqlab.scripting.host"): "a script's local run moves to the host",
    ("emqlab.backend.connect", "emqlab.backend.cluster"): "is_cluster moves to connect",
    ("emqlab.backend.fakeserver", "emqlab.backend.connect"): "one Lua environment: the sandbox in lua/lib/",
    ("emqlab.backend.cluster", "emqlab.analysis.anomalies"): "the cluster lesson moves to teaching",
    ("emqlab.backend.cluster", "emqlab.engine.runner"): "the cluster lesson moves to teaching",
    ("emqlab.backend.cluster", "emqlab.engine.scenario"): "the cluster lesson moves to teaching",
    ("emqlab.engine.actors", "emqlab.engine.pyactors"): "pyactors adds its factory to FACTORIES",
    ("emqlab.engine.scenario", "emqlab.engine.pyactors"): "loads() parses; resolve() is a second pass",
    ("emqlab.engine.context", "emqlab.engine.scenario"): "the context's types move below the scenario",
    ("emqlab.teaching.sandbox", "emqlab.teaching.grading"): "grading splits into notebooks/run/grade",
    ("emqlab.ui.cli", "emqlab.ui.entry"): "the entry's signal handling stays in entry",
}


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
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    layer = module.split(".")[1]
    assert layer in RANK, f"{module}: emqlab/{layer}/ is in no layer of LAYERS"
    return RANK[layer]


def test_every_import_goes_down_the_layers() -> None:
    graph = _imports()
    upward = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if t == "emqlab":  # the package's own __init__ (the version, the finder) is below everything
                continue
            if _rank(t) > _rank(m) or (_rank(t) == _rank(m) and m.split(".")[1:2] != t.split(".")[1:2]
                                       and m not in ROOT_MODULES):
                if (m, t) not in KNOWN:
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
            if (v, w) in KNOWN:
                continue
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


def test_known_exceptions_still_exist() -> None:
    """An entry of :data:`KNOWN` whose import is gone is taken off (the list only shrinks)."""
    graph = _imports()
    gone = [f"{m} -> {t}" for m, t in KNOWN if t not in graph.get(m, set())]
    assert not gone, "cut already, take them off KNOWN:\n" + "\n".join(gone)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_are_the_new_modules(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_documented_packages_keep_their_names() -> None:
    import emqlab.explore
    import emqlab.timing

    assert callable(emqlab.explore.explore) and emqlab.explore.Report.__name__ == "Report"
    assert callable(emqlab.timing.sweep_rtt) and callable(emqlab.timing.simulate)


def test_no_module_is_too_long() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in MODULES.values()
            if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES}
    over = {p: n for p, n in long.items() if p not in TOO_LONG_FOR_NOW}
    assert not over, f"modules over {MAX_LINES} lines: {over}"
    done = sorted(TOO_LONG_FOR_NOW - set(long))
    assert not done, f"split already, take them off TOO_LONG_FOR_NOW: {done}"
