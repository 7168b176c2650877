"""The Lua scripts and how they run: the script registry, the calls that build their KEYS and ARGV, the
client-side Lua host (``host``: runs and steps; ``replies``: reply conversion; ``rules``: shebang, command
refusals and compiling; ``serverstate``: what it asks the server), the Redis 7 sandbox's Python side
(``sandbox``; the sandbox itself is ``lua/lib/sandbox.lua``, which the embedded server loads too), the frozen
clock of an atomic run and the restricted user's command list.

Imports only :mod:`emqlab.protocol`.
"""
