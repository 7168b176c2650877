"""The one home of the package's layer order: each folder of ``emqlab/`` and what it holds, bottom to top.

A module may import from its own folder and the folders of the layers before it, never from a later one,
and no set of modules may import itself round (``tests/test_layers.py`` checks every import, lazy ones and
``TYPE_CHECKING`` ones included). ``timing`` and ``check`` share a rank: neither imports the other. The root
modules (``emqlab``, ``emqlab.layers``, ``emqlab._moved``, ``emqlab.text``) import nothing from the layers,
so every layer may use them. ``docs/architecture.md`` draws this table.
"""

from __future__ import annotations

#: (rank, folder, what it holds), bottom to top
LAYERS: tuple[tuple[int, str, str], ...] = (
    (0, "protocol", "the queue's Redis side as data: keys, the command table, outcomes, the schedule codec, "
                    "verdicts"),
    (1, "scripting", "the Lua scripts and how they run: the registry, KEYS/ARGV builders, the Lua host "
                     "(the Redis 7 sandbox)"),
    (2, "backend", "where commands go: fakeredis, a live Redis, a cluster, the embedded server; live-server "
                   "safety"),
    (3, "engine", "the deterministic engine: scenarios, actors, the Runner, effects, footprints, the history"),
    (4, "analysis", "the anomaly checks: a final state and a history in, named findings out"),
    (5, "explore", "the search: exhaustive with reduction and a bound, random, PCT, replay; divided over "
                   "processes"),
    (6, "timing", "the timed model: virtual time, a round trip per command, sweeps over the RTT"),
    (6, "check", "check your own code: Python actors over redis-py, your own Lua, the pytest plugin"),
    (7, "teaching", "the classroom: notebooks graded in a sandbox, levels, the cluster lesson"),
    (8, "ui", "the faces: the command line, the notebook widgets, the plots"),
)

#: folder -> rank
RANK: dict[str, int] = {folder: rank for rank, folder, _ in LAYERS}
