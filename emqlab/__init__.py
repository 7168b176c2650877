"""emqlab — why a job queue must finish a job in one atomic Redis script.

The real queue scripts (``lua/``, the BullMQ protocol with EchoMQ's ``emq:{queue}:`` keys) run atomically
(EVALSHA) or split (client-side, one command per round trip) against fakeredis or a live Redis; a
deterministic scheduler explores the interleavings with a recovery sweep and names the anomalies.

The package is layered, each folder importing only the ones before it (``docs/architecture.md``):
``protocol`` < ``scripting`` < ``backend`` < ``engine`` < ``analysis`` < ``explore`` < ``timing``, ``check``
< ``teaching`` < ``ui``. The module paths of the flat package of before keep working (:mod:`emqlab._moved`).
"""

from emqlab import _moved

__version__ = "0.1.0"

_moved.install()
