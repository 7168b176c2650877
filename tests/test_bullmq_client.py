"""A real client (issue 3): BullMQ's own Python client (``bullmq`` 3.4.4, asyncio) and emqlab's scripts
share one queue on the live server.

The queue is named ``{<unique>}`` on BullMQ's side, so that with prefix ``emq`` BullMQ's keys are
``emq:{<unique>}:wait`` … — exactly emqlab's ``QueueKeys("<unique>")``.

* BullMQ adds, emqlab works: jobs added by ``bullmq.Queue.add`` are fetched and finished by emqlab's scripts
  (``move_to_active`` / ``move_to_completed``, emqlab's script set); BullMQ then reads them as completed with
  their return values (``Job.fromId``, ``Queue.getJobState``, ``Queue.getJobs``, ``Queue.getJobCounts``).
* emqlab adds, BullMQ works: jobs added by emqlab (``add_job``) are processed by a ``bullmq.Worker`` whose
  processor returns a value; emqlab then finds them in ``completed`` with that value.

Every BullMQ client is closed; every key of the queue is deleted afterwards; waits are bounded by
``asyncio.wait_for`` so that the test can never hang.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import bullmq  # a test dependency: emqlab[test] pins bullmq==3.4.4
import pytest
import redis

from emqlab.backend.connect import Namespace, live_url, unique_queue
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting import calls as S
from emqlab.scripting.calls import FinishOpts
from emqlab.scripting.registry import default_scripts
from tests.conftest import live_conn

pytestmark = pytest.mark.live


TIMEOUT_S = 20  # upper bound for any wait on the BullMQ side


@pytest.fixture
def live() -> redis.Redis:
    return live_conn()  # skips (fails in CI) without a server


@pytest.fixture
def shared(live: redis.Redis) -> Iterator[QueueKeys]:
    """A fresh queue on the live server, its keys deleted afterwards."""
    keys = QueueKeys(unique_queue("bullmq"))
    ns = Namespace(live, keys).claim()
    try:
        yield keys
    finally:
        ns.release()


def client_opts(**extra: Any) -> dict[str, Any]:
    return {"prefix": "emq", "connection": live_url(), **extra}


def bullmq_name(keys: QueueKeys) -> str:
    """The queue name BullMQ needs for its keys to be ``keys``' keys: the name in braces."""
    return "{" + keys.name + "}"


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def test_bullmq_queue_keys_are_emqlab_keys(shared: QueueKeys) -> None:
    queue = bullmq.Queue(bullmq_name(shared), client_opts())
    try:
        assert queue.toKey("wait") == shared.wait
        assert queue.toKey("") == shared.base
    finally:
        asyncio.run(queue.close())


def test_jobs_added_by_bullmq_are_finished_by_emqlab(live: redis.Redis, shared: QueueKeys) -> None:
    ours = default_scripts()

    async def scenario() -> None:
        queue = bullmq.Queue(bullmq_name(shared), client_opts())
        try:
            added = [await queue.add("double", {"n": n}) for n in (1, 2, 3)]
            ids = [job.id for job in added]
            assert [text(x) for x in live.lrange(shared.wait, 0, -1)] == ids[::-1]  # LPUSHed: oldest at the right

            # emqlab works: fetch, then finish each job and fetch the next in the same call.
            token = "emqlab-worker:1"
            nxt = S.move_to_active(live, shared, token, name="emqlab", scripts=ours)
            worked: dict[str, Any] = {}
            while nxt is not None and nxt.is_job:
                assert nxt.job_id is not None
                assert nxt.name == "double"
                result = {"doubled": nxt.payload["n"] * 2, "by": "emqlab"}
                worked[nxt.job_id] = result
                nxt = S.move_to_completed(live, shared, nxt.job_id, token, result, FinishOpts(token=token),
                                          fetch_next=True, scripts=ours)
            assert sorted(worked) == sorted(ids)

            # BullMQ reads the outcome.
            for job_id, n in zip(ids, (1, 2, 3), strict=True):
                job = await bullmq.Job.fromId(queue, job_id)
                assert job is not None
                assert job.returnvalue == {"doubled": 2 * n, "by": "emqlab"}
                assert job.attemptsMade == 1
                assert job.finishedOn is not None and job.processedOn is not None
                assert await queue.getJobState(job_id) == "completed"
            completed = await queue.getJobs(["completed"])
            assert sorted(job.id for job in completed) == sorted(ids)
            assert {job.id: job.returnvalue for job in completed} == worked
            counts = await queue.getJobCounts("completed", "waiting", "active", "failed")
            assert counts == {"completed": 3, "waiting": 0, "active": 0, "failed": 0}
        finally:
            await queue.close()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
    assert live.llen(shared.active) == 0
    assert not [k for k in live.scan_iter(match=shared.pattern) if text(k).endswith(":lock")]


def test_jobs_added_by_emqlab_are_processed_by_a_bullmq_worker(live: redis.Redis, shared: QueueKeys) -> None:
    ours = default_scripts()
    ids = [S.add_job(live, shared, "square", {"n": n}, scripts=ours) for n in (2, 3, 4)]
    ids.append(S.add_job(live, shared, "square", {"n": 5}, job_id="custom-5", scripts=ours))
    ids.append(S.add_job(live, shared, "square", {"n": 6}, priority=1, scripts=ours))
    seen: list[str] = []

    async def process(job: Any, token: str) -> dict[str, Any]:
        seen.append(job.id)
        return {"square": job.data["n"] ** 2, "name": job.name}

    async def wait_until_completed() -> None:
        while live.zcard(shared.completed) < len(ids):
            await asyncio.sleep(0.05)

    async def scenario() -> None:
        worker = bullmq.Worker(bullmq_name(shared), process,
                               client_opts(drainDelay=1, stalledInterval=60_000))
        try:
            await asyncio.wait_for(wait_until_completed(), TIMEOUT_S)
        finally:
            await asyncio.wait_for(worker.close(), TIMEOUT_S)

    asyncio.run(scenario())
    assert sorted(seen) == sorted(ids)

    # emqlab reads the outcome.
    assert sorted(text(x) for x in live.zrange(shared.completed, 0, -1)) == sorted(ids)
    for job_id, n in zip(ids, (2, 3, 4, 5, 6), strict=True):
        fields = S.job_fields(live, shared, job_id)
        assert json.loads(fields["returnvalue"]) == {"square": n * n, "name": "square"}
        assert fields["atm"] == "1" and fields["ats"] == "1"
        assert "processedOn" in fields and "finishedOn" in fields
    assert live.llen(shared.wait) == 0 and live.llen(shared.active) == 0
    assert live.zcard(shared.prioritized) == 0
    events = [{text(a): text(b) for a, b in e.items()} for _, e in live.xrange(shared.events)]
    assert sorted(e["jobId"] for e in events if e["event"] == "completed") == sorted(ids)
