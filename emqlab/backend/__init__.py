"""Where commands go: fakeredis (embedded) or a live Redis, a Redis Cluster, the embedded server, state
snapshots, and the safety rules for a live server (own keys only, a TTL on each, faults named).

Imports only the layers below it (protocol, scripting).
"""
