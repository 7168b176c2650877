"""The deterministic engine: scenarios, actors, the Runner that takes one step at a time, effects,
footprints and the recorded history.

Imports only the layers below it (protocol, scripting, backend).
"""
