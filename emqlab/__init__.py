"""emqlab — why a job queue must finish a job in one atomic Redis script.

The real queue scripts (``lua/``, the BullMQ protocol with EchoMQ's ``emq:{queue}:`` keys) run atomically
(EVALSHA) or split (client-side, one command per round trip) against fakeredis or a live Redis; a
deterministic scheduler explores the interleavings with a recovery sweep and names the anomalies.

The package is layered, each folder importing only the ones before it (``docs/architecture.md``):
``protocol`` < ``scripting`` < ``backend`` < ``engine`` < ``analysis`` < ``explore`` < ``timing``, ``check``
< ``teaching`` < ``ui``. The module paths of the flat package of before keep working (:mod:`emqlab._moved`).
"""

from __future__ import annotations

import importlib
from typing import Any

from emqlab import _moved

__version__ = "0.1.0"

#: names of the package's top level that live in a layer (loaded on first use: ``import emqlab`` stays
#: cheap, and the package's root imports no layer): ``with emqlab.server() as url:``
PUBLIC = {"server": "emqlab.backend.tcp"}

_moved.install()


def __getattr__(name: str) -> Any:
    if name in PUBLIC:
        return getattr(importlib.import_module(PUBLIC[name]), name)
    raise AttributeError(f"module 'emqlab' has no attribute {name!r}")
