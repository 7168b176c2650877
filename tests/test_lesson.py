"""THE LESSON: finishing a job is correct only as ONE atomic script.

moveToFinished-14 reads (lock, active) and then writes (DEL lock, SREM stalled, LREM active, ZADD completed)
without re-checking. Run as one EVALSHA, nothing can come between the reads and the writes. Run "split" — the
very same Lua, but each ``redis.call`` sent as its own command (emqlab.scripting.host) — a stalled-jobs sweep can run
in the gap right after the finish deletes the lock: it sees a marked job without a lock, moves it back to
``wait``, and the finish, which does not look again, files it as ``completed`` too. The job is then both done
and waiting to run again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from emqlab.backend.connect import Namespace, command_executor
from emqlab.protocol.keys import QueueKeys
from emqlab.scripting import calls as S
from emqlab.scripting.host import LuaHost

TS = 1_700_000_000_000
TOKEN = "worker-1"


def t(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def placements(conn: redis.Redis, k: QueueKeys, job_id: str) -> set[str]:
    """The lists/sets that hold ``job_id``."""
    found = set()
    for name in ("wait", "active"):
        if job_id in [t(x) for x in conn.lrange(k.key(name), 0, -1)]:
            found.add(name)
    for name in ("completed", "failed", "delayed", "prioritized"):
        if conn.zscore(k.key(name), job_id) is not None:
            found.add(name)
    return found


def setup_marked_active_job(conn: redis.Redis, k: QueueKeys) -> str:
    """One job, active and locked by TOKEN, already marked in ``stalled`` by a previous sweep whose
    throttle has lapsed: the state of any job that takes longer than one stalled interval."""
    job_id = S.add_job(conn, k, "lesson", {"n": 1}, timestamp=TS)
    nxt = S.move_to_active(conn, k, TOKEN, timestamp=TS + 1)
    assert nxt is not None and nxt.job_id == job_id
    assert S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 1) == []  # marks it
    conn.delete(k.stalled_check)  # the interval passes
    assert {t(x) for x in conn.smembers(k.stalled)} == {job_id}
    return job_id


def finish_call(k: QueueKeys, job_id: str) -> S.ScriptCall:
    return S.move_to_finished_call(k, job_id, TOKEN, "completed", {"ok": True}, S.FinishOpts(TOKEN),
                                   fetch_next=False, timestamp=TS + 2)


def sweep(conn: redis.Redis, k: QueueKeys) -> list[str]:
    return S.move_stalled_jobs_to_wait(conn, k, 1, 30_000, timestamp=TS + 2)


def run_split(conn: redis.Redis, call: S.ScriptCall,
              between: Callable[[int, tuple[bytes, ...]], None]) -> tuple[Any, list[tuple[bytes, ...]]]:
    """Run ``call``'s Lua client-side, one command per round trip; ``between(i, cmd)`` runs after the i-th
    command (0-based) has been executed and before the next one is sent. Returns (result, commands)."""
    host = LuaHost()
    execute = command_executor(conn)
    run = host.start(call.script(), call.keys, call.args)
    sent: list[tuple[bytes, ...]] = []
    while run.pending is not None:
        cmd = run.pending
        try:
            reply: Any = execute(*cmd)
        except redis.ResponseError as e:
            reply = e
        sent.append(cmd)
        run.resume(reply)
        between(len(sent) - 1, cmd)
    return run.value(), sent


def test_split_finish_sweep_after_lock_delete_duplicates_job(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    job_id = setup_marked_active_job(conn, k)
    lock = k.lock(job_id).encode()
    swept: list[str] = []

    def between(_: int, cmd: tuple[bytes, ...]) -> None:
        if cmd[0].upper() == b"DEL" and cmd[1:] == (lock,) and not swept:
            swept.extend(sweep(conn, k) or ["(none)"])

    result, _ = run_split(conn, finish_call(k, job_id), between)

    assert swept == [job_id]  # the sweep recovered the job in the gap...
    assert result == 0  # ...and the finish, which re-checks nothing, still "succeeded"
    assert placements(conn, k, job_id) == {"completed", "wait"}  # THE ANOMALY: done AND waiting to run again
    fields = S.job_fields(conn, k, job_id)
    assert fields["stc"] == "1" and fields["returnvalue"] == '{"ok":true}'
    names = [t(e[b"event"]) for _, e in conn.xrange(k.events)]
    assert names[-3:] == ["waiting", "stalled", "completed"]
    # and another worker will indeed run it again
    again = S.move_to_active(conn, k, "worker-2", timestamp=TS + 3)
    assert again is not None and again.job_id == job_id and again.attempts_started == 2


def test_atomic_finish_sweep_before_or_after_never_duplicates(conn: redis.Redis, qkeys: QueueKeys) -> None:
    k = qkeys
    ns = Namespace(conn, k)
    for sweep_first in (True, False):
        ns.reset()
        job_id = setup_marked_active_job(conn, k)
        if sweep_first:
            assert sweep(conn, k) == []  # the lock is alive: the sweep only re-marks the job
            conn.delete(k.stalled_check)
        assert S.run_call(conn, finish_call(k, job_id)) == 0  # one EVALSHA
        if not sweep_first:
            assert sweep(conn, k) == []  # the job left active and stalled together with its lock
        assert placements(conn, k, job_id) == {"completed"}
        assert "stc" not in S.job_fields(conn, k, job_id)
        assert conn.smembers(k.stalled) == set()


def test_the_window_is_exactly_the_gap_after_the_lock_delete(conn: redis.Redis, qkeys: QueueKeys) -> None:
    """Inject the sweep into every gap of the split finish, one gap per run: only the gap between
    ``DEL lock`` and ``SREM stalled`` produces the anomaly. Also pins the protocol's write order."""
    k = qkeys
    ns = Namespace(conn, k)
    job_id = setup_marked_active_job(conn, k)
    _, commands = run_split(conn, finish_call(k, job_id), lambda i, c: None)
    verbs = [c[0].upper().decode() for c in commands]
    writes = [v for v in verbs if v in ("DEL", "SREM", "LREM", "HINCRBY", "ZADD", "HSET", "XADD")]
    assert writes[:6] == ["DEL", "SREM", "LREM", "HINCRBY", "ZADD", "HSET"]  # lock, stalled, active, target
    assert verbs.index("LPOS") < verbs.index("DEL")  # every check comes before the first write

    anomalous_gaps = []
    for gap in range(len(commands)):
        ns.reset()
        job_id = setup_marked_active_job(conn, k)

        def between(i: int, _: tuple[bytes, ...], gap: int = gap) -> None:
            if i == gap:
                sweep(conn, k)

        run_split(conn, finish_call(k, job_id), between)
        if placements(conn, k, job_id) != {"completed"}:
            anomalous_gaps.append(verbs[gap])
    assert anomalous_gaps == ["DEL"]
