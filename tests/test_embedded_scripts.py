"""The embedded server's own ``EVAL`` against Redis's, case by case (issue 28).

The embedded server runs a script on the client-side host (``emqlab/backend/scripts.py``), so every case of
the host's differential suite (``tests/test_host_differential.py``) and of Redis's translated scripting tests
(``tests/test_redis_scripting_cases.py``, those that need no server-wide change, no blocked client and no
raw RESP) is sent here as one ``EVAL``/``EVAL_RO`` to the embedded server and to the live server, from the
same starting state, and compared: the reply or the full error text, the connection after it (database,
MULTI state, a PING) and the keys under the case's prefix in databases 0 and 9, read back portably (type and
value). A case the embedded server is known to answer differently is in :data:`EMBEDDED_DIFFERENCES` with the
reason, and must *still* differ.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from emqlab.backend.connect import unique_queue
from emqlab.backend.fakeserver import EmbeddedConnection, new_server
from tests.conftest import live_is_valkey
from tests.test_host_differential import CASES as HOST_CASES
from tests.test_host_differential import NOT_COMPARED, OTHER_DB, Case, _client, _outcome, _show, _sub
from tests.test_redis_scripting_cases import CASES as TCL_CASES
from tests.test_redis_scripting_cases import KNOWN_DIFFERENCES, T, _as_host_shows

pytestmark = pytest.mark.live

#: case -> why the embedded server answers it differently from Redis 7.0 (the host's own known differences,
#: ``KNOWN_DIFFERENCES``, are the embedded server's too)
EMBEDDED_DIFFERENCES: dict[str, str] = {
    "host:status_pfmerge": "fakeredis keeps a HyperLogLog as a set; Redis as a string in its HYLL encoding",
    "host:status_xsetid": "fakeredis has no XSETID: the script gets Redis's unknown-command error",
    "tcl:caller_db_is_scripts_db": "fakeredis's CLIENT INFO says db=0 for a connection made on another database "
                                   "until it SELECTs; the script itself reads the right one",
}


def _cases() -> dict[str, tuple[Case, str, int]]:
    out: dict[str, tuple[Case, str, int]] = {}
    for name, case in HOST_CASES.items():
        if name not in NOT_COMPARED:
            out[f"host:{name}"] = (case, "EVAL", 0)
    for name, t in TCL_CASES.items():
        if _plain(t) and name not in KNOWN_DIFFERENCES:
            out[f"tcl:{name}"] = (t.case, t.via, t.db)
    return out


def _plain(t: T) -> bool:
    return not t.server and t.waiter is None and not t.raw and t.runs is None and t.compare is None and not t.after


CASES = _cases()


@pytest.fixture(scope="module")
def embedded() -> Any:
    return new_server()


def _embedded_client(server: Any, db: int) -> redis.Redis:
    pool = redis.ConnectionPool(connection_class=EmbeddedConnection, server=server, db=db, protocol=2)
    c = redis.Redis(connection_pool=pool, single_connection_client=True)
    c.response_callbacks = {}  # type: ignore[assignment]
    return c


def _portable(c: redis.Redis, key: bytes) -> tuple[Any, ...]:
    kind = bytes(c.execute_command("TYPE", key))
    read = {b"string": ("GET",), b"hash": ("HGETALL",), b"list": ("LRANGE", 0, -1), b"set": ("SMEMBERS",),
            b"zset": ("ZRANGE", 0, -1, "WITHSCORES"), b"stream": ("XRANGE", "-", "+")}[kind]
    value = c.execute_command(read[0], key, *read[1:])
    if kind in (b"set", b"hash"):
        value = sorted(value) if kind == b"set" else sorted(zip(value[::2], value[1::2], strict=True))
    return kind, value, int(c.execute_command("PTTL", key)) > 0


def _state(connect: Any, prefix: str) -> dict[tuple[int, bytes], tuple[Any, ...]]:
    out = {}
    for db in (0, OTHER_DB):
        c = connect(db)
        try:
            pattern = prefix.replace("{", "\\{").replace("}", "\\}") + "*"
            for k in c.execute_command("KEYS", pattern):
                out[(db, bytes(k)[len(prefix):])] = _portable(c, k)
                c.execute_command("DEL", k)
        finally:
            c.close()
    return out


def _follow_up(c: redis.Redis) -> tuple[Any, ...]:
    fields = dict(p.split(b"=", 1) for p in bytes(c.execute_command("CLIENT", "INFO")).split() if b"=" in p)
    return fields[b"db"], fields[b"multi"], c.execute_command("PING")


def _side(connect: Any, case: Case, via: str, db: int) -> tuple[Any, ...]:
    prefix = f"emq:{{{unique_queue('es')}}}:"
    keys = [prefix + k for k in case.keys]
    c = connect(db)
    try:
        for cmd in case.setup:
            c.execute_command(*(_sub(a, keys) for a in cmd))
        out = _outcome(lambda: _as_host_shows(lambda: c.execute_command(via, case.src, len(keys), *keys,
                                                                          *case.args)))
        follow = _follow_up(c)
    finally:
        c.close()
    state = _state(connect, prefix)
    return _show(out, prefix.encode()), follow, state if case.compare_state else {}


@pytest.mark.parametrize("name", sorted(CASES))
def test_embedded_eval_equals_redis(name: str, embedded: Any) -> None:
    if live_is_valkey():
        pytest.skip("the embedded server follows Redis 7.0; the live server here is Valkey")
    case, via, db = CASES[name]
    live = _side(lambda d: _client(d), case, via, db)
    fake = _side(lambda d: _embedded_client(embedded, d), case, via, db)
    why = EMBEDDED_DIFFERENCES.get(name)
    if why is not None:
        assert live != fake, f"{name} now agrees: remove it from EMBEDDED_DIFFERENCES ({why})"
        return
    for label, lv, fv in zip(("reply or error", "follow-up (db, multi, PING)", "key state"), live, fake,
                             strict=True):
        assert fv == lv, f"{label}: embedded {fv!r} != Redis {lv!r}"
