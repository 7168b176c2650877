#!/usr/bin/env python3
"""BullMQ's own Python test suite (``python/tests`` of a BullMQ checkout), run unchanged on one route.

Routes:

``fake_server``
    every test runs inside emqlab's ``emqlab_redis`` fixture (``emqlab.fakeserver.fake_server()``), which
    routes each redis-py connection pool created during the test to a fresh embedded server;
``new_server``
    every test gets a fresh ``emqlab.fakeserver.new_server()``; ``redis.asyncio.Redis`` and
    ``redis.asyncio.from_url`` (what BullMQ's ``RedisConnection`` and the tests call) are replaced by a
    ``fakeredis.FakeAsyncRedis`` subclass bound to it, so fakeredis's own connection classes talk to the
    server (``INFO`` is answered by the server);
``redis``
    a redis-server started here, on port 6379 of a network namespace of its own.

The tests connect to ``localhost:6379`` and call FLUSHDB, so every route runs in a network namespace of its
own (``unshare -rn``): nothing outside it can be reached, whatever a test does. The script refuses to run when
the namespace cannot be made. The tests folder is copied to a temporary directory (so that ``bullmq`` is the
installed package, not the checkout's sources) and run there with a plugin module written next to it; the
checkout itself is not modified. ``postgres_backend_test.py`` needs ``psycopg`` and a PostgreSQL server and is
left out unless ``--with-postgres`` is given.

The Python that runs pytest (``--python``) needs ``bullmq`` (``pip install bullmq==3.0.4``), ``pytest``,
``pytest-timeout`` and, for the two emqlab routes, emqlab.

Example::

    git -C <bullmq git dir> archive vpy3.0.4 python | tar -x -C /tmp/bq-py
    python3 scripts/bullmq_python_suite.py --checkout /tmp/bq-py --route fake_server --python /tmp/bq-venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROUTES = ("fake_server", "new_server", "redis")

PLUGIN = '''\
"""Route BullMQ's tests to a server (written by emqlab's scripts/bullmq_python_suite.py)."""

import os

import pytest

ROUTE = os.environ["EMQLAB_BULLMQ_ROUTE"]

if ROUTE == "fake_server":

    @pytest.fixture(autouse=True)
    def _emqlab_route(emqlab_redis):
        yield emqlab_redis

elif ROUTE == "new_server":
    import fakeredis
    import redis.asyncio

    from emqlab.fakeserver import new_server

    _server = None

    class _Routed(fakeredis.FakeAsyncRedis):
        def __init__(self, *args, **kwargs):
            kwargs["server"] = _server
            super().__init__(*args, **kwargs)

        @classmethod
        def from_url(cls, url, **kwargs):
            kwargs["server"] = _server
            return super().from_url(url, **kwargs)

    @pytest.fixture(autouse=True)
    def _emqlab_route(monkeypatch):
        global _server
        _server = new_server()
        monkeypatch.setattr(redis.asyncio, "Redis", _Routed)
        monkeypatch.setattr(redis.asyncio, "from_url", _Routed.from_url)
        yield _server
'''


def _tests_dir(checkout: Path) -> Path:
    for candidate in (checkout / "python" / "tests", checkout / "tests", checkout):
        if (candidate / "conftest.py").is_file() and (candidate / "queue_test.py").is_file():
            return candidate
    raise SystemExit(f"no BullMQ python/tests folder under {checkout}")


def _counts(junit: Path) -> dict[str, int]:
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    if not junit.is_file():
        return counts
    for case in ET.parse(junit).getroot().iter("testcase"):
        counts["tests"] += 1
        if case.find("failure") is not None:
            counts["failed"] += 1
        elif case.find("error") is not None:
            counts["errors"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def _inner(args: argparse.Namespace, pytest_args: list[str]) -> int:
    """Inside the network namespace: loopback up, the server (route ``redis``), pytest."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path(args.workdir)
    redis_proc = None
    if args.route == "redis":
        redis_proc = subprocess.Popen([args.redis_server, "--port", "6379", "--save", "", "--appendonly", "no",
                                       "--dir", str(work)], stdout=subprocess.DEVNULL)
        for _ in range(100):
            if subprocess.run([args.redis_server.replace("redis-server", "redis-cli"), "ping"],
                              capture_output=True, text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
    env = dict(os.environ, EMQLAB_BULLMQ_ROUTE=args.route, PYTHONPATH=str(work / "plugin"))
    cmd = [args.python, "-m", "pytest", "-p", "emqlab_bullmq_route", "tests", "-q", "-p", "no:cacheprovider",
           f"--junitxml={work / 'junit.xml'}", *pytest_args]
    if not args.with_postgres:
        cmd.append("--ignore=tests/postgres_backend_test.py")
    try:
        return subprocess.run(cmd, cwd=work, env=env).returncode
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, help="a BullMQ checkout (or its python/ or python/tests folder)")
    parser.add_argument("--route", choices=ROUTES, required=True)
    parser.add_argument("--python", default=sys.executable, help="the Python with bullmq, pytest and emqlab")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument("--with-postgres", action="store_true", help="keep postgres_backend_test.py")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args, pytest_args = parser.parse_known_args(argv)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    if args.inner:
        return _inner(args, pytest_args)
    if args.checkout is None:
        parser.error("--checkout is required")
    tests = _tests_dir(args.checkout.resolve())
    work = Path(tempfile.mkdtemp(prefix="bullmq-pysuite-"))
    try:
        shutil.copytree(tests, work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        (work / "plugin").mkdir()
        (work / "plugin" / "emqlab_bullmq_route.py").write_text(PLUGIN)
        if (tests.parent / "pytest.ini").is_file():  # BullMQ's 30 s per-test timeout
            shutil.copy(tests.parent / "pytest.ini", work / "pytest.ini")
        if subprocess.run(["unshare", "-rn", "true"]).returncode != 0:
            raise SystemExit("cannot make a network namespace (unshare -rn): refusing to run tests that FLUSHDB "
                             "localhost:6379")
        cmd = ["unshare", "-rn", sys.executable, os.path.abspath(__file__), "--inner", "--route", args.route,
               "--python", args.python, "--redis-server", args.redis_server, "--workdir", str(work)]
        if args.with_postgres:
            cmd.append("--with-postgres")
        start = time.monotonic()
        rc = subprocess.run([*cmd, "--", *pytest_args]).returncode
        wall = time.monotonic() - start
        c = _counts(work / "junit.xml")
        print(f"route={args.route} tests={c['tests']} passed={c['passed']} failed={c['failed']} "
              f"errors={c['errors']} skipped={c['skipped']} wall={wall:.1f}s rc={rc}")
        return rc
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
