"""The anomaly checks: pure functions over a final state and a history that name what went wrong.

Imports only the layers below it.
"""
