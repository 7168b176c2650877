"""Check your own code: Python actors over redis-py explored against emqlab's sweep (the API and the pytest
plugin) and your own Lua run through every scenario.

Imports only the layers below it.
"""
