"""The one home of the Redis Cluster lesson: a queue whose keys lack the hash tag, run on a cluster
(``docs/cluster.md``'s generated part).

Without braces around the queue name, each key of the queue hashes to a slot of its own: the atomic finish
(one EVALSHA naming 14 keys) is refused with ``CROSSSLOT`` before it runs; the split finish goes through
command by command until a command naming two keys in two slots. :func:`lesson_transcript` reads every value
of the lesson off a live cluster (:mod:`emqlab.backend.cluster` routes the commands); :func:`main` prints it
or writes it between the docs page's markers::

    python -m emqlab.teaching.cluster_lesson --write docs/cluster.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from emqlab.analysis.anomalies import checker
from emqlab.backend.cluster import DEFAULT_CLUSTER_URL, cluster_url, is_cluster, slot_of
from emqlab.backend.connect import connect
from emqlab.engine.runner import Runner
from emqlab.engine.scenario import Scenario, loads
from emqlab.protocol.keys import QueueKeys, without_hash_tag
from emqlab.scripting.registry import default_scripts

#: The lesson's scenario: W1 finishes job 1 and wants the next one (fetch-next), the sweep runs; job 2 waits.
LESSON_YAML = """\
name: cluster-untagged
title: A queue whose keys lack the hash tag, on Redis Cluster
anomaly: none
lesson: >
  Without braces around the queue name, each key of the queue hashes to a slot of its own. The atomic
  finish is one EVALSHA naming 14 keys in many slots: the node it is sent to refuses it with CROSSSLOT
  before it runs, so nothing is written. The split finish sends one command per key, each to its key's node, and goes
  through, until the fetch-next's RPOPLPUSH wait active names two keys in two slots: CROSSSLOT again,
  after job 1 was already filed as completed.
source:
  - Redis Cluster specification (redis.io), hash tags and multi-key operations
jobs:
  "1": {name: email, data: {to: ada@example.com}}
  "2": {name: email, data: {to: bob@example.com}}
state:
  active: ["1"]
  wait: ["2"]
  locks: {"1": W1}
actors:
  - {id: W1, kind: worker, holds: "1", jobs: 2, finish: completed, value: {sent: true}}
  - {id: S1, kind: sweep, max_stalled: 1}
"""
#: the queue the lesson runs under (a fixed name, so that its slots and nodes read the same every time; the
#: run claims it like any run: refused where its keys exist)
LESSON_QUEUE = "orders"
LESSON_MODES = ("atomic", "split")
DOCS_BEGIN, DOCS_END = "<!-- emqlab:cluster:begin -->", "<!-- emqlab:cluster:end -->"


def lesson_scenario() -> Scenario:
    """The lesson's :class:`emqlab.engine.specs.Scenario` (:data:`LESSON_YAML`)."""
    return loads(LESSON_YAML, "emqlab.teaching.cluster_lesson.LESSON_YAML")


def run_lesson(conn: Any, mode: str, queue: str = LESSON_QUEUE) -> tuple[Any, Any]:
    """Run the lesson's scenario once (each actor in turn) in ``mode`` on ``conn`` with its queue's keys
    without the hash tag (:func:`emqlab.protocol.keys.without_hash_tag`); returns ``(history, keys)``. On a cluster
    the run's keys are deleted afterwards, as every run's are."""
    with without_hash_tag():
        runner = Runner(lesson_scenario(), mode, conn, queue=queue, check=checker)
    try:
        return runner.run(), runner.keys
    finally:
        runner.close()


def _port(cluster: RedisCluster, key: str) -> str:
    node = cluster.nodes_manager.get_node_from_slot(slot_of(key))
    return f":{node.port}"


def lesson_transcript(cluster: RedisCluster, queue: str = LESSON_QUEUE) -> str:
    """The lesson as Markdown, every value read off ``cluster``: the slots of moveToFinished-14's keys with
    and without the hash tag (``CLUSTER KEYSLOT``), what redis-py's RedisCluster says to the untagged EVALSHA
    (before sending it), and the atomic and split runs (:func:`run_lesson`) with each step's node."""
    tagged, untagged = QueueKeys(queue, hash_tag=True), QueueKeys(queue, hash_tag=False)
    out = ["```yaml", LESSON_YAML.rstrip("\n"), "```", ""]
    out += [f"The 14 keys of moveToFinished-14 for queue `{queue}` and job 1: `CLUSTER KEYSLOT` of each, and "
           "the node serving that slot.", "", "| KEYS[i] | with the hash tag | slot | node | without it | slot | "
           "node |", "|---:|---|---:|---|---|---:|---|"]
    pairs = zip(tagged.move_to_finished_keys("1", "completed"), untagged.move_to_finished_keys("1", "completed"),
                strict=True)
    slots: dict[bool, set[int]] = {True: set(), False: set()}
    for i, (a, b) in enumerate(pairs, 1):
        sa, sb = int(cluster.cluster_keyslot(a)), int(cluster.cluster_keyslot(b))
        slots[True].add(sa)
        slots[False].add(sb)
        out.append(f"| {i} | `{a}` | {sa} | {_port(cluster, a)} | `{b}` | {sb} | {_port(cluster, b)} |")
    out += ["", f"With the tag: {len(slots[True])} slot. Without it: {len(slots[False])} slots.", ""]
    script = default_scripts()["moveToFinished"]
    try:
        RedisCluster.evalsha(cluster, script.sha, 14, *untagged.move_to_finished_keys("1", "completed"))
        said = "(no error)"
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as e:
        said = f"{type(e).__module__}.{type(e).__name__}: {e}"
    out += ["redis-py's `RedisCluster.evalsha` with the untagged keys refuses before sending anything:", "",
            "```text", said, "```", ""]
    for mode in LESSON_MODES:
        h, keys = run_lesson(cluster, mode, queue)
        out += [f"`{mode}` run (W1, then S1; the sweep is one EVALSHA in both), each step with the node it was "
                "sent to (its first key's) and the number of slots its keys fall in when more than one:", "",
                "```text"]
        for st in h.steps:
            full = [keys.key(k) for k in st.keys]
            n = len(set(map(slot_of, full)))
            where = _port(cluster, full[0]) + (f" ({n} slots)" if n > 1 else "")  # (sent to its first key's node)
            shown = st.reply if isinstance(st.reply, str) else json.dumps(st.reply)
            label = st.op if st.kind != "script" else f"EVALSHA {st.op} ({len(st.keys)} keys)"
            what = f"{label} {' '.join(st.keys)}" if st.kind != "script" else label
            out.append(f"{st.index:>3}  {st.actor:<3} {what:<40} {where:<16} -> {shown}")
        out.append("```")
        placed = ", ".join(f"job {j} in {' + '.join(p) or 'nothing'}" for j, p in h.final["placements"].items())
        results = "; ".join(f"{a}: {r.outcome.error or r.outcome.code}" for a, rs in h.results.items() for r in rs)
        out += ["", f"Final state: {placed}. Results: {results}.", ""]
    return "\n".join(out).rstrip() + "\n"


def docs_block(text: str) -> str | None:
    """The generated part of a docs page (between :data:`DOCS_BEGIN` and :data:`DOCS_END`), or ``None``."""
    head, sep, rest = text.partition(DOCS_BEGIN)
    body, sep2, _ = rest.partition(DOCS_END)
    if not sep or not sep2:
        return None
    return body.strip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m emqlab.teaching.cluster_lesson [--url URL] [--write PAGE]``: print the lesson run on the
    cluster at URL (default :func:`cluster_url`), or write it between the markers of PAGE
    (``docs/cluster.md``). Returns the exit status: 0, or 1 when URL is no cluster node or PAGE has no
    markers."""
    ap = argparse.ArgumentParser(prog="python -m emqlab.teaching.cluster_lesson", description=main.__doc__)
    ap.add_argument("--url", default=None, help="a node of the cluster (default: $EMQLAB_CLUSTER_URL or "
                                                f"{DEFAULT_CLUSTER_URL})")
    ap.add_argument("--write", metavar="PAGE", default=None, help="write the lesson into PAGE between its markers")
    ns = ap.parse_args(argv)
    conn = connect(ns.url or cluster_url())
    if not is_cluster(conn):
        print(f"{ns.url or cluster_url()} is not a Redis Cluster node (INFO cluster: cluster_enabled:0)")
        return 1
    text = lesson_transcript(cast(RedisCluster, conn))
    if ns.write is None:
        print(text, end="")
        return 0
    page = Path(ns.write)
    old = page.read_text()
    if docs_block(old) is None:
        print(f"{page}: no {DOCS_BEGIN} … {DOCS_END} markers")
        return 1
    head, _, rest = old.partition(DOCS_BEGIN)
    _, _, tail = rest.partition(DOCS_END)
    page.write_text(f"{head}{DOCS_BEGIN}\n{text}{DOCS_END}{tail}")
    print(f"wrote the lesson into {page}")
    return 0


__all__ = ["DOCS_BEGIN", "DOCS_END", "LESSON_MODES", "LESSON_QUEUE", "LESSON_YAML", "docs_block", "lesson_scenario",
           "lesson_transcript", "main", "run_lesson"]

if __name__ == "__main__":  # pragma: no cover - python -m emqlab.teaching.cluster_lesson
    raise SystemExit(main())
