"""BullMQ's own Python client as emqlab actors (tests/test_pyactors.py): its Queue, Job and Worker, unmodified,
on the client emqlab gives the actor. The queue is named ``{<queue>}`` with prefix ``emq``, so that BullMQ's keys
are emqlab's ``emq:{<queue>}:…``."""

from __future__ import annotations

from typing import Any


def _name(q: Any) -> str:
    return "{" + q.keys.name + "}"


async def add(r: Any, q: Any) -> None:
    from bullmq import Queue

    queue = Queue(_name(q), {"connection": r, "prefix": "emq"})
    await queue.add("email", {"to": "ada@example.com"}, {"jobId": "1"})


async def finish(r: Any, q: Any) -> None:
    """W1 holds job 1 (lock W1:1) and completes it with BullMQ's Job.moveToCompleted."""
    from bullmq import Job, Queue

    queue = Queue(_name(q), {"connection": r, "prefix": "emq"})
    job = await Job.fromId(queue, "1")
    q.begin("1", "W1:1")
    try:
        await job.moveToCompleted("done", "W1:1", fetchNext=False)
        q.end("1", 0)
    except Exception as e:  # BullMQ raises on a refused finish; its Worker catches it the same way
        q.end("1", e)


async def worker_loop(r: Any, q: Any) -> None:
    from bullmq import Worker

    async def process(job: Any, token: str) -> str:
        return "done"

    w = Worker(_name(q), process, {"connection": r, "prefix": "emq", "autorun": False})
    await w.run()
