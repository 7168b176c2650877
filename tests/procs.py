"""The process table as tests read it (Linux: /proc): which processes a command started, and whether any of
them outlived it."""

from __future__ import annotations

from pathlib import Path


def process_tree() -> dict[int, int]:
    """pid -> parent pid of every process that has not ended (a zombie, an orphan no one reaps yet, has)."""
    tree = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":
                tree[int(d.name)] = int(fields[1])
    return tree


def descendants(root: int) -> set[int]:
    """Every process below ``root``."""
    tree = process_tree()
    found, todo = set(), [root]
    while todo:
        parent = todo.pop()
        kids = [c for c, p in tree.items() if p == parent]
        found.update(kids)
        todo.extend(kids)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` that have not ended."""
    now = process_tree()
    return {p for p in pids if p in now}


def pool_workers(root: int) -> set[int]:
    """The pool workers below ``root``: its descendants with none of their own (a fork server has its
    workers), bar multiprocessing's resource tracker."""
    below = descendants(root)
    parents = {p for c, p in process_tree().items() if c in below}
    workers = set()
    for pid in below - parents:
        try:
            if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                workers.add(pid)
        except OSError:
            continue
    return workers
