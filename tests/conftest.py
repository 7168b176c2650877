"""Shared fixtures: both backends, a queue namespace per test, and the foreign-keys guard.

Live-Redis tests use ``$EMQLAB_REDIS_URL`` or ``redis://127.0.0.1:6379/0``. Without a server they skip with
the reason, except in CI (``CI=true``), where a missing server is an error.

The live suite runs under a user restricted to emqlab's key patterns and commands (:mod:`emqlab.scripting.acl`): what
the tests write *outside* those patterns — the foreign keys that prove emqlab never touches them — goes
through ``$EMQLAB_ADMIN_URL`` (default: ``$EMQLAB_REDIS_URL``). Tests that need more than the restricted user
has (MONITOR, INFO, CONFIG) carry the ``admin`` marker and are skipped, with the reason, when the live user
is restricted (``$EMQLAB_ADMIN_URL`` names another user, or the live user gets NOPERM for INFO).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis

from emqlab.backend.connect import BackendError, Namespace, connect, live_url, unique_queue
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting.dialect import Dialect, server_dialect

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BACKENDS = ["fake", "live"]

_live_error: str | None = None


def require(resource: str, why: str) -> NoReturn:
    """Skip the test because ``resource`` is missing (``why`` says how to get it), or fail it in CI
    (``CI=true``), where every resource the suite uses must be there: one rule for every skip of the suite."""
    if IN_CI:
        pytest.fail(f"CI=true requires {resource}: {why}")
    pytest.skip(f"{resource} not available: {why}")
_live_conn: redis.Redis | None = None
#: the test running now (its setup, call and teardown)
_running: list[pytest.Item] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _running[:] = [item]
    try:
        yield
    finally:
        _running.clear()


def live_conn() -> redis.Redis:
    """The live server's client, or skip (fail in CI) with the reason. A test that asks for it must be marked
    ``live`` (or run on the ``live`` backend), so that ``-m live`` selects every test that talks to the live
    server (the CI job that runs them on Valkey relies on it)."""
    global _live_conn, _live_error
    if _running and _running[0].get_closest_marker("live") is None:
        pytest.fail(f"{_running[0].nodeid} talks to the live server but is not marked live: add "
                    "@pytest.mark.live, so that -m live selects it")
    if _live_conn is None and _live_error is None:
        try:
            _live_conn = connect("live")
        except BackendError as e:
            _live_error = str(e)
    if _live_conn is None:
        require("the live Redis", f"{_live_error}; set EMQLAB_REDIS_URL or start redis-server")
    return _live_conn


def live_dialect() -> Dialect:
    """The dialect of the live server (:mod:`emqlab.scripting.dialect`: Redis 7.0 or Valkey): what a test
    that compares with the server's exact texts expects, and what a :class:`~emqlab.scripting.host.LuaHost`
    compared with it follows (``LuaHost(dialect=live_dialect())``). Skips (fails in CI) like
    :func:`live_conn` without a server."""
    return server_dialect(live_conn())


def live_is_valkey() -> bool:
    """Whether the live server is Valkey (whose Lua orders a table's string keys otherwise than Redis's)."""
    return live_dialect().valkey


def json_order_free(value: Any) -> Any:
    """``value`` with every JSON object or array text in it (a str or bytes that parses as one, in dicts,
    lists, tuples and sets at any depth) decoded into ``("json", …)``: each object's members sorted, numbers
    kept as their exact text, nothing else left out. Valkey's Lua visits a table's string keys in another
    order than Redis 7.0's (and the host's and fakeredis's) Lua, and ``cjson.encode`` writes an object's
    members in that order: a test comparing JSON that a script wrote on Valkey compares it through this."""
    if isinstance(value, dict):
        return {json_order_free(k): json_order_free(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(json_order_free(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return type(value)(json_order_free(v) for v in value)
    if isinstance(value, (str, bytes)) and value[:1] in ("{", b"{", "[", b"["):
        try:
            text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value  # (bytes kept)
            return ("json", json.loads(text, object_pairs_hook=lambda p: tuple(sorted(p)),
                                       parse_float=lambda t: ("number", t), parse_int=lambda t: ("number", t),
                                       parse_constant=lambda t: ("number", t)))
        except ValueError:
            return value
    return value


def admin_url() -> str:
    """``$EMQLAB_ADMIN_URL``, else the live URL: the user the tests' own keys outside emqlab's patterns are
    written with."""
    return os.environ.get("EMQLAB_ADMIN_URL") or live_url()


def admin_conn() -> redis.Redis:
    """A client on :func:`admin_url` (skips, or fails in CI, like :func:`live_conn` without a server)."""
    live_conn()
    return connect(admin_url())


_restricted: str | None = None


def restricted_reason() -> str:
    """Why the live user is restricted ('' when it is not): another admin URL, or NOPERM for INFO."""
    global _restricted
    if _restricted is None:
        _restricted = ""
        if admin_url() != live_url():
            _restricted = "EMQLAB_ADMIN_URL names another user than EMQLAB_REDIS_URL"
        else:
            try:
                connect("live").info("server")
            except redis.exceptions.NoPermissionError:
                _restricted = "the live user gets NOPERM for INFO"
            except (BackendError, redis.exceptions.RedisError):
                pass
    return _restricted


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``live`` every test on the ``live`` backend (the :func:`backend` fixture's parameter), before ``-m``
    selects: ``-m live`` is then every test that talks to the live server (:func:`live_conn` refuses a test
    without the mark). Skip ``admin`` tests, with the reason, when the live user is restricted."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "live" and not item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
    marked = [item for item in items if item.get_closest_marker("admin") is not None]
    if not marked:
        return
    why = restricted_reason()
    if why:
        skip = pytest.mark.skip(reason=f"needs MONITOR/INFO/CONFIG on the live server, which a restricted user lacks"
                                       f" ({why}); run it with the server's admin user")
        for item in marked:
            item.add_marker(skip)


def backend_conn(kind: str) -> redis.Redis:
    return connect() if kind == "fake" else live_conn()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name, ``fake`` or ``live``; tests parametrized over both."""
    if request.param == "live":
        live_conn()
    return str(request.param)


@pytest.fixture
def conn(backend: str) -> redis.Redis:
    """A client on the test's backend (a fresh fakeredis server per test)."""
    return backend_conn(backend)


@pytest.fixture
def qkeys(conn: redis.Redis, backend: str) -> Iterator[QueueKeys]:
    """A queue whose keys belong to this test alone: claimed before (refused if present), deleted after."""
    keys = QueueKeys(unique_queue("t") if backend == "live" else "q")
    ns = Namespace(conn, keys).claim()
    try:
        yield keys
    finally:
        ns.release()


#: the stop signals whose handlers each test gets as the session began (the console script's handling changes
#: them in process: a CLI command run in process, or a run's clean-up, may leave Ctrl-C ignored, and a later
#: test's child process inherits an ignored signal)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stops_by_default() -> None:
    """A child process's ``preexec_fn``: the stop signals as a terminal gives them (a suite started under
    nohup, or as a shell's background job, ignores SIGHUP or SIGINT, and the child would inherit that, as
    emqlab keeps an ignored signal ignored)."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def stop_signals_as_they_were() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    yield
    for sig, handler in before.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)


#: how long the foreign keys of :func:`foreign_keys_untouched` live if a run dies before deleting them
FOREIGN_TTL_S = 6 * 3600


@pytest.fixture(scope="session", autouse=True)
def foreign_keys_untouched() -> Iterator[None]:
    """Keys of other prefixes on the live server survive the whole test run untouched (issue 2); written and
    read through the admin URL (:func:`admin_url`), since a restricted live user may not touch them."""
    try:
        conn = connect(admin_url())
    except BackendError:
        yield
        return
    tag = secrets.token_hex(4)
    foreign = {
        f"foreign-{tag}:string": ("string", b"keep me"),
        f"bull:{{q}}:{tag}:wait": ("list", [b"1", b"2"]),
        f"emq:{{other-{tag}}}:wait": ("list", [b"9"]),
        f"foreign-{tag}:hash": ("hash", {b"a": b"1"}),
    }
    for k, (kind, value) in foreign.items():
        # (a TTL in case the run is killed before it deletes them: longer than any run, which CI stops at 90
        # minutes; an hour expired them under a run slowed to an hour, and the check took that for a touch)
        if kind == "string":
            conn.set(k, value, ex=FOREIGN_TTL_S)
        elif kind == "list":
            conn.rpush(k, *value)
            conn.expire(k, FOREIGN_TTL_S)
        else:
            conn.hset(k, mapping=value)
            conn.expire(k, FOREIGN_TTL_S)
    yield
    problems = []
    for k, (kind, value) in foreign.items():
        if kind == "string":
            got = conn.get(k)
        elif kind == "list":
            got = conn.lrange(k, 0, -1)
        else:
            got = conn.hgetall(k)
        if got != value:
            problems.append(f"{k}: {got!r} != {value!r}")
    conn.delete(*foreign)
    assert not problems, "the test run touched foreign keys on the live server: " + "; ".join(problems)


def pytest_report_header(config: pytest.Config) -> str:
    from emqlab.backend.connect import _redact, url_secrets

    admin = "" if admin_url() == live_url() else f", admin {_redact(admin_url(), url_secrets(admin_url()))}"
    live = _redact(live_url(), url_secrets(live_url()))
    return f"emqlab live Redis: {live}{admin} (CI={'true' if IN_CI else 'false'})"


@contextlib.contextmanager
def own_redis_server(*options: str) -> Iterator[str]:
    """A throwaway ``redis-server`` on a free local port with ``options`` (nothing on disk), for faults a
    shared server must never see; yields its URL and kills it afterwards. Skips (fails in CI) without the
    binary."""
    port = free_port()
    proc = start_redis_server(port, *options)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis_server(port: int, *options: str) -> subprocess.Popen[bytes]:
    """A ``redis-server`` on ``port`` (nothing on disk), answering PING when this returns; the caller kills
    it. Skips (fails in CI) without the binary."""
    exe = shutil.which("redis-server")
    if exe is None:
        require("redis-server", "it is not on PATH (Debian's redis-server package)")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            c.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    c.close()
    return proc


#: The two Node releases of BullMQ whose shipped scripts the host is checked against (issue 12), next to the
#: Python package's own set (`ScriptSet.bullmq()`).
NODE_RELEASES = ("6.7.0", "5.34.0")


def bullmq_node_release(version: str) -> Path:
    """The ``dist/cjs/commands`` folder of BullMQ's npm release ``version``, fetched once from the npm
    registry into /tmp/bullmq-node/<version>/ (nothing of it is kept in this repository). Skips (fails in
    CI) when the registry cannot be reached."""
    import tarfile
    import urllib.request

    root = Path(tempfile.gettempdir()) / "bullmq-node" / version
    folder = root / "package" / "dist" / "cjs" / "commands"
    if folder.is_dir():
        return folder
    url = f"https://registry.npmjs.org/bullmq/-/bullmq-{version}.tgz"
    try:
        root.mkdir(parents=True, exist_ok=True)
        tgz = root / "release.tgz"
        with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - a fixed https URL
            tgz.write_bytes(r.read())
        with tarfile.open(tgz) as t:
            t.extractall(root, filter="data")
    except OSError as e:
        require(f"BullMQ {version} from the npm registry", f"the download failed ({e})")
    return folder


def bee_queue_release() -> Path:
    """The ``package/lib/lua`` folder of bee-queue's npm release (``tests/atlas/beequeue_client.RELEASE``),
    fetched once from the npm registry into /tmp/bee-queue-npm/<version>/ and checked against the
    registry's SHA1 of the tarball (nothing of it is kept in this repository). It is unpacked beside and
    renamed into place, so a folder that exists is whole (two test processes may fetch it at once). Skips
    (fails in CI) when the registry cannot be reached."""
    import hashlib
    import os
    import tarfile
    import urllib.request

    from .atlas import beequeue_client as bq

    folder = bq.release_dir()
    if folder.is_dir():
        return folder
    root = folder.parents[2]
    url = f"https://registry.npmjs.org/bee-queue/-/bee-queue-{bq.RELEASE}.tgz"
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - a fixed https URL
            body = r.read()
    except OSError as e:
        require(f"bee-queue {bq.RELEASE} from the npm registry", f"the download failed ({e})")
    got = hashlib.sha1(body).hexdigest()
    assert got == bq.TARBALL_SHA1, f"{url}: SHA1 {got}, the registry says {bq.TARBALL_SHA1}"
    work = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=root.parent))
    (work / "release.tgz").write_bytes(body)
    with tarfile.open(work / "release.tgz") as t:
        t.extractall(work, filter="data")
    try:
        os.rename(work, root)
    except OSError:  # (another process put it in place first)
        shutil.rmtree(work, ignore_errors=True)
    return folder
