"""The Lua scripts and how they run: the script registry, the calls that build their KEYS and ARGV, the
client-side Lua host (the Redis 7 sandbox) and the restricted user's command list.

Imports only :mod:`emqlab.protocol`.
"""
