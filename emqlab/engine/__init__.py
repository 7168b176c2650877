"""The deterministic engine: scenarios, actors, the Runner that takes one step at a time, effects,
footprints and the recorded history.

From the bottom up: ``effects``, ``footprints``, ``specs`` (a scenario as data), ``history``, ``context``
(the seams: what an actor and an instrument see), ``pyref`` (``python:`` references), ``yamlnodes`` and
``scenario`` (reading a scenario file), ``seed`` (the initial state), ``actors`` (the built-in actor kinds),
``pywire`` and ``pyactors`` (actors written in Python: the Runner's side and the driver), ``pyblocks``,
``live`` (sessions and a live server's care), ``derived`` (a step's effects from its commands and replies),
``recorder`` (effect recording) and ``runner``.

Imports only the layers below it (protocol, scripting, backend).
"""
