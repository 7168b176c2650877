"""The queue's Redis side as data: keys, the command table, outcomes, the schedule codec, the verdicts.

The lowest layer: imports nothing from emqlab.
"""
