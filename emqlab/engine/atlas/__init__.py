"""The race atlas's actors: other queue projects' released client code run unmodified under the scheduler, and
where that cannot be done, their commands modelled in our own words (each module says which).

* :mod:`emqlab.engine.atlas.rqlib` — RQ's released code (``pip install "emqlab[atlas]"`` installs the pinned
  version), its key prefixes set to the run's queue base.
* :mod:`emqlab.engine.atlas.dramatiqlib` — dramatiq's Redis broker script ``dispatch.lua``, read from the
  installed release (``pip install "emqlab[atlas]"``) and sent unmodified, its namespace under the run's base.
* :mod:`emqlab.engine.atlas.arqmodel`, :mod:`emqlab.engine.atlas.saqmodel` — arq's and SAQ's commands,
  modelled (their keys are fixed module constants or fixed ``saq:`` names, their workers block or await
  timers), over redis-py;
* :mod:`emqlab.engine.atlas.luaqueues` — asynq's, Laravel's and Horizon's, and Sidekiq's scripts, modelled
  in our own Lua (``lua/atlas/``), and the actors that send them; bee-queue's released scripts, which
  ``tests/atlas/`` runs from its npm release.

Nothing here imports a queue library at module import: the real-library actors import it when they run and
name ``pip install "emqlab[atlas]"`` when it is missing (:func:`require`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: the versions the atlas's scenarios were written against (pyproject's ``atlas`` extra pins them)
PINNED: dict[str, str] = {"rq": "1.16.2", "dramatiq": "2.2.1"}


class MissingLibrary(ImportError):
    """A real-library actor ran without its library installed."""


def require(name: str) -> ModuleType:
    """Import the queue library ``name`` (``rq``, ``dramatiq``); raises :class:`MissingLibrary` naming the extra to
    install when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingLibrary(f"this actor runs the released {name} package ({name}=={PINNED.get(name, '?')}),"
                             f" which is not installed: pip install \"emqlab[atlas]\" (in a checkout:"
                             f" pip install -e \".[atlas]\")") from e


__all__ = ["PINNED", "MissingLibrary", "require"]

