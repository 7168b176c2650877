"""The faces: the command line, the notebook widgets and the plots.

The top layer: may import any layer below it; nothing imports it but the console script.
"""
