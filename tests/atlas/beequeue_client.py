"""What bee-queue's Node client does around its Lua scripts, as Python actors over redis-py, with the scripts
themselves taken unmodified from bee-queue's npm release (:data:`RELEASE`).

The release is fetched at test time from the npm registry into ``/tmp/bee-queue-npm/<RELEASE>/`` by
``tests/conftest.py`` (:func:`tests.conftest.bee_queue_release`); nothing of it is kept in this repository.
This module only reads the extracted ``package/lib/lua/*.lua`` and sends each file's bytes as they are
(``EVAL``: the text whose SHA1 bee-queue's own loader computes and sends with ``EVALSHA``).

The queue's keys: bee-queue names a queue's keys ``<prefix>:<name>:<suffix>``. Here the queue is named
so that its keys sit under the run's base, ``<base>bq:<suffix>`` (``bq:waiting``, ``bq:active``,
``bq:succeeded``, ``bq:stalling``, ``bq:jobs`` …), apart from emqlab's BullMQ-shaped ones.

The client's side, in our words (from bee-queue's protocol, not its code):

* a worker takes a job by moving its id from ``waiting`` to ``active`` (the client blocks on the move; a
  scheduled actor may not block, so it sends the same move without the wait), then reads the job's data
  from the ``jobs`` hash;
* while it runs the job, the worker takes its id out of ``stalling`` every half stall interval (that is
  how it says "still alive"); the stall check (``checkStalledJobs.lua``) puts every job still in
  ``stalling`` back to ``waiting`` and copies ``active`` into ``stalling`` for the next check;
* when the job ends, the worker sends one ``MULTI``: take the id out of ``active`` and ``stalling``, write
  the job's data with its new status, and add the id to ``succeeded`` (or ``failed``). Nothing in it asks
  whether the id was still in ``active``.

:func:`finish` runs that ``MULTI`` in a split run (the client as released). In an atomic run it runs the
fix, one small script of our own (:data:`GUARDED_FINISH`) that files the job only if this worker still
held it, or if the stall check's requeued copy is still waiting (then it withdraws that copy).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

#: the bee-queue release whose scripts the scenarios run (npm)
RELEASE = "2.0.0"
#: the npm registry's SHA1 of that release's tarball (``dist.shasum``): the download is checked against it
TARBALL_SHA1 = "64cae7625aa60720bf89f44a6605cbe33eb420cc"
#: bee-queue's default stall interval (ms), the argument of checkStalledJobs.lua
STALL_INTERVAL = 5000

#: the fix (our own Lua, not bee-queue's): KEYS active, stalling, waiting, jobs, succeeded; ARGV id, data,
#: "1" = removeOnSuccess (the data is deleted instead of filed). 0 = done; 1 = the job was removed while it
#: ran (its data is gone: nothing to file, as the remover wanted); -1 = someone else holds the job (nothing
#: written): the finish of a worker that lost it.
GUARDED_FINISH = """
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 0 then return 1 end
local mine = redis.call('LREM', KEYS[1], 0, ARGV[1])
if mine == 0 then
  mine = redis.call('LREM', KEYS[3], 0, ARGV[1])
end
if mine == 0 then return -1 end
redis.call('SREM', KEYS[2], ARGV[1])
if ARGV[3] == '1' then
  redis.call('HDEL', KEYS[4], ARGV[1])
  return 0
end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[5], ARGV[1])
return 0
"""


def release_dir() -> Path:
    """The extracted release's script folder (``package/lib/lua``); it exists once the test helper has
    fetched the release."""
    return Path(tempfile.gettempdir()) / "bee-queue-npm" / RELEASE / "package" / "lib" / "lua"


def script(name: str) -> bytes:
    """The bytes of bee-queue's ``<name>.lua`` as released. Raises ``FileNotFoundError`` (naming the test
    helper that fetches it) when the release has not been fetched."""
    path = release_dir() / f"{name}.lua"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: bee-queue {RELEASE} is fetched from npm by the tests"
                                " (tests/conftest.py bee_queue_release)")
    return path.read_bytes()


def sha1(name: str) -> str:
    return hashlib.sha1(script(name)).hexdigest()


class Keys:
    """The bee-queue queue's keys under the run's base (``q.keys``)."""

    def __init__(self, q: Any) -> None:
        self._k = q.keys

    def __getattr__(self, suffix: str) -> str:
        return str(self._k.key(f"bq:{suffix}"))


def _data(status: str) -> str:
    """A job's entry in the ``jobs`` hash as the client writes it: its data, options and status (JSON)."""
    return json.dumps({"data": {}, "options": {"timeout": 0, "retries": 0, "stacktraces": []}, "status": status},
                      separators=(",", ":"))


def stall_check(r: Any, q: Any) -> None:
    """``Queue#checkStalledJobs``: bee-queue's own checkStalledJobs.lua, ``runs`` times (default 1)."""
    k = Keys(q)
    for _ in range(int(q.params.get("runs", 1))):
        r.eval(script("checkStalledJobs"), 4, k.stallBlock, k.stalling, k.waiting, k.active, STALL_INTERVAL)


def _file(r: Any, q: Any, job: str) -> Any:
    """The end of a job this worker ran: the released client's MULTI (split) or the fix (atomic);
    ``remove_on_success`` (a parameter): the job's data is deleted, not filed."""
    k = Keys(q)
    remove = bool(q.params.get("remove_on_success", False))
    if q.mode == "atomic":
        return r.eval(GUARDED_FINISH, 5, k.active, k.stalling, k.waiting, k.jobs, k.succeeded, job,
                      _data("succeeded"), "1" if remove else "0")
    pipe = r.pipeline(transaction=True)
    pipe.lrem(k.active, 0, job)
    pipe.srem(k.stalling, job)
    if remove:
        pipe.hdel(k.jobs, job)
    else:
        pipe.hset(k.jobs, job, _data("succeeded"))
        pipe.sadd(k.succeeded, job)
    pipe.execute()
    return 0


def remove_job(r: Any, q: Any) -> None:
    """``Queue#removeJob(job)``: bee-queue's own removeJob.lua."""
    k = Keys(q)
    r.eval(script("removeJob"), 7, k.succeeded, k.failed, k.waiting, k.active, k.stalling, k.jobs, k.delayed,
           str(q.params.get("job", "1")))


def removed_stays_removed(final: Any, history: Any) -> list[str]:
    """The rule ``removed-stays-removed``: a job some actor removed (removeJob.lua ran) ends in no list or set
    and without data, whatever order the removal and the job's other writes come in. The sentence names
    the removal and the last step that put the job back."""
    from emqlab.engine.effects import HashCreated, Placed

    ref = sha1("removeJob")[:12]
    removals = {s.args[-1]: s for s in history.steps if s.op == "EVAL" and s.args and ref in s.args[0]}
    out = []
    for job, removal in sorted(removals.items()):
        places = final.placements.get(job, [])
        data = final.jobs.get(job, {}).get("exists")
        if not places and not data:
            continue
        back = next((s for s in reversed(history.steps) if s.index > removal.index and any(
            isinstance(e, (Placed, HashCreated)) and e.job == job for e in s.effects)), None)
        out.append(f"job {job} was removed by {removal.actor}'s {removal.op} (step {removal.index}) but is back"
                   f" in {', '.join(places) or 'no list'}{', with its data written again' if data else ''}"
                   + (f": {back.actor}'s {back.op} (step {back.index}) put it back" if back is not None else ""))
    return out


def finish(r: Any, q: Any) -> None:
    """A worker that already runs job ``job`` (from the start, and missed taking it out of ``stalling``:
    a long job or a blocked process) and now ends it: :func:`_file`."""
    job = str(q.params.get("job", "1"))
    q.begin(job, q.token())
    q.end(job, _file(r, q, job))


def worker(r: Any, q: Any) -> None:
    """A worker's turn: take the next waiting job (if any), read its data, say it is alive (out of
    ``stalling``), run it and end it (:func:`_file`)."""
    k = Keys(q)
    got = r.rpoplpush(k.waiting, k.active)
    if got is None:
        return
    job = got.decode()
    if r.hget(k.jobs, job) is None:  # (the client drops a job whose data is gone)
        return
    q.begin(job, q.token())
    r.srem(k.stalling, job)
    q.end(job, _file(r, q, job))

