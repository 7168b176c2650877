"""emqlab's pytest plugin (registered as the ``emqlab`` ``pytest11`` entry point; active once emqlab is
installed).

Fixtures:

``emqlab_redis``
    An :class:`emqlab.backend.fakeserver.EmbeddedRedis`: a fresh in-process Redis (fakeredis with ``cmsgpack``,
    ``bit`` and ``INFO``) for one test. While the test runs, every redis-py connection pool created — sync or
    ``redis.asyncio``, from a ``redis://`` URL or from host/port options — connects to it, so BullMQ's
    ``Queue``, ``Worker`` and ``QueueEvents`` run unchanged without a Redis server. Clients:
    ``emqlab_redis.client()``, ``emqlab_redis.async_client()``. After the test its keys are deleted and the
    routing is undone.

``emqlab_server``
    :class:`emqlab.backend.tcp.EmbeddedTcp`: the same embedded Redis served on a free TCP port of
    127.0.0.1 for one test, for clients in other processes or languages (``emqlab_server.url``,
    ``.port``; ``.server`` is the fakeredis server behind it). Stopped after the test.

``emqlab_explore``
    :func:`emqlab.check.api.explore_actors`: explore your actors (Python functions over a redis-py client,
    emqlab's built-in actors, or both) on an initial queue state, on fakeredis — or, with
    ``--emqlab-redis URL``, on that live server under a fresh run prefix (deleted afterwards). The result's
    ``assert_never(kind)`` / ``assert_some(kind)`` fail with the witness, the because-sentence and the
    schedule string to paste back as ``schedule=…`` (``docs/check-your-code.md``).

Disable the plugin with ``-p no:emqlab``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from emqlab.backend.fakeserver import EmbeddedRedis
    from emqlab.backend.tcp import EmbeddedTcp
    from emqlab.check.api import Exploration


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("emqlab")
    group.addoption("--emqlab-redis", default=None, metavar="URL",
                    help="run emqlab_explore's explorations on this live Redis (keys under a fresh run prefix, "
                         "deleted afterwards) instead of fakeredis")


@pytest.fixture
def emqlab_redis() -> Iterator[EmbeddedRedis]:
    """A fresh embedded Redis for this test; ``redis://`` pools created during the test are routed to it."""
    from emqlab.backend.fakeserver import fake_server  # imported on first use: loading the plugin costs pytest nothing

    with fake_server() as server:
        yield server


@pytest.fixture
def emqlab_server() -> Iterator[EmbeddedTcp]:
    """The embedded Redis on a free TCP port of 127.0.0.1 for this test (``.url``, ``.port``)."""
    from emqlab.backend.tcp import serve

    with serve() as running:
        yield running


@pytest.fixture
def emqlab_explore(request: pytest.FixtureRequest) -> Callable[..., Exploration]:
    """``emqlab_explore(actors, state=…, locks=…, mode="split", schedule=None, …)`` →
    :class:`emqlab.check.api.Exploration` (the arguments of :func:`emqlab.check.api.explore_actors`)."""
    from emqlab.check.api import explore_actors

    url = request.config.getoption("--emqlab-redis")

    def run(actors: Any, **kwargs: Any) -> Exploration:
        if url and "conn" not in kwargs:
            from emqlab.backend.connect import connect

            kwargs["conn"] = connect(url)
        return explore_actors(actors, **kwargs)

    return run
