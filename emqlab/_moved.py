"""The one home of emqlab's old module paths: each name a notebook, a document or a user's code may import
from the flat package of before (``emqlab.backends``, ``emqlab.grading``, …) and the module of the layered
package that now holds its code. ``import emqlab.backends`` gives that very module object (the same object,
so an attribute set on one is set on the other), through a finder installed by ``emqlab/__init__.py``.

Two of the old names are packages now and need no entry: ``emqlab.explore`` and ``emqlab.timing`` re-export
their documented names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

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


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and nothing else)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on :data:`sys.meta_path` once."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
