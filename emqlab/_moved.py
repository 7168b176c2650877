"""The one home of emqlab's old module paths: each name a notebook, a document or a user's code may import
from the flat package of before (``emqlab.backends``, ``emqlab.grading``, …) and the module of the layered
package that now holds its code. ``import emqlab.backends`` gives that very module object (the same object,
so an attribute set on one is set on the other), through a finder installed by ``emqlab/__init__.py``;
``python -m <old path>`` runs the new module's code as before.

Two of the old names are packages now and need no entry: ``emqlab.explore`` and ``emqlab.timing`` re-export
their documented names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType

#: old module path -> the module that holds its code now
MOVED: dict[str, str] = {
    "emqlab.keys": "emqlab.protocol.keys",
    "emqlab.commands": "emqlab.protocol.commands",
    "emqlab.outcome": "emqlab.protocol.outcome",
    "emqlab.schedules": "emqlab.protocol.schedules",
    "emqlab.verdict": "emqlab.protocol.verdict",
    "emqlab.registry": "emqlab.scripting.registry",
    "emqlab.scripts": "emqlab.scripting.calls",
    "emqlab.luahost": "emqlab.scripting.host",
    "emqlab.acl": "emqlab.scripting.acl",
    "emqlab.backends": "emqlab.backend.connect",
    "emqlab.fakeserver": "emqlab.backend.fakeserver",
    "emqlab.cluster": "emqlab.backend.cluster",
    "emqlab.state": "emqlab.backend.state",
    "emqlab.scenario": "emqlab.engine.scenario",
    "emqlab.context": "emqlab.engine.context",
    "emqlab.actors": "emqlab.engine.actors",
    "emqlab.effects": "emqlab.engine.effects",
    "emqlab.footprints": "emqlab.engine.footprints",
    "emqlab.history": "emqlab.engine.history",
    "emqlab.runner": "emqlab.engine.runner",
    "emqlab.pyactors": "emqlab.engine.pyactors",
    "emqlab.blocks": "emqlab.engine.pyblocks",
    "emqlab.anomalies": "emqlab.analysis.anomalies",
    "emqlab.parallel": "emqlab.explore",
    "emqlab.schedule": "emqlab.explore.checked",
    "emqlab.api": "emqlab.check.api",
    "emqlab.checking": "emqlab.check.lua",
    "emqlab.pytest_plugin": "emqlab.check.pytest_plugin",
    "emqlab.grading": "emqlab.teaching.grading",
    "emqlab.cli": "emqlab.ui.cli",
    # the console script of an editable install made before the move (pip writes it at install time)
    "emqlab._entry": "emqlab.ui.entry",
    "emqlab.widgets": "emqlab.ui.widgets",
    "emqlab.plots": "emqlab.ui.plots",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module that holds its code now (no second copy of the module)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:  # the target ran its own code when it was imported
        pass

    def get_code(self, fullname: str) -> CodeType | None:
        """The target's code, for ``python -m <old path>`` (runpy runs it as ``__main__``)."""
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec is not None else None
        get_code = getattr(loader, "get_code", None)
        return get_code(self.target) if get_code is not None else None


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and nothing else)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = _new_name(fullname)
        if new is None:
            return None
        try:
            found = importlib.util.find_spec(new)
        except ModuleNotFoundError:  # (a submodule of an old path whose new module is no package)
            return None
        if found is None:
            return None
        # its origin gives ``python -m <old path>`` a __file__; its search path makes an old path that is a
        # package now run its __main__ (``python -m emqlab.cli``)
        spec = importlib.machinery.ModuleSpec(fullname, _Alias(new), origin=found.origin,
                                              is_package=found.submodule_search_locations is not None)
        if found.submodule_search_locations is not None:
            spec.submodule_search_locations = list(found.submodule_search_locations)
        return spec


def _new_name(fullname: str) -> str | None:
    """The module that holds the code of old path ``fullname`` now (a module inside an old path that is a
    package now, ``emqlab.cli.explore``, included); None for a name that is no old path."""
    if fullname in MOVED:
        return MOVED[fullname]
    parts = fullname.split(".")
    for i in range(len(parts) - 1, 1, -1):
        old = ".".join(parts[:i])
        if old in MOVED:
            return MOVED[old] + "." + ".".join(parts[i:])
    return None


def install() -> None:
    """Put the finder on :data:`sys.meta_path` once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
