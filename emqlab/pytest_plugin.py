"""emqlab's pytest plugin (registered as the ``emqlab`` ``pytest11`` entry point; active once emqlab is
installed).

Fixtures:

``emqlab_redis``
    An :class:`emqlab.fakeserver.EmbeddedRedis`: a fresh in-process Redis (fakeredis with ``cmsgpack``,
    ``bit`` and ``INFO``) for one test. While the test runs, every redis-py connection pool created — sync or
    ``redis.asyncio``, from a ``redis://`` URL or from host/port options — connects to it, so BullMQ's
    ``Queue``, ``Worker`` and ``QueueEvents`` run unchanged without a Redis server. Clients:
    ``emqlab_redis.client()``, ``emqlab_redis.async_client()``. After the test its keys are deleted and the
    routing is undone.

Disable the plugin with ``-p no:emqlab``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .fakeserver import EmbeddedRedis


@pytest.fixture
def emqlab_redis() -> Iterator[EmbeddedRedis]:
    """A fresh embedded Redis for this test; ``redis://`` pools created during the test are routed to it."""
    from .fakeserver import fake_server  # imported on first use: loading the plugin costs pytest nothing

    with fake_server() as server:
        yield server
