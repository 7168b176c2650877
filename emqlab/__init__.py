"""emqlab — why a job queue must finish a job in one atomic Redis script.

The real queue scripts (``lua/``, the BullMQ protocol with EchoMQ's ``emq:{queue}:`` keys) run atomically
(EVALSHA) or split (client-side, one command per round trip) against fakeredis or a live Redis; a
deterministic scheduler explores the interleavings with a recovery sweep and names the anomalies.
"""

__version__ = "0.1.0"
