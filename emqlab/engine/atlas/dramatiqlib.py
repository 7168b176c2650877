"""dramatiq's Redis broker as scenario actors: ``python: "emqlab.engine.atlas.dramatiqlib:<actor>"``.

dramatiq's Redis broker sends every queue operation (``enqueue``, ``fetch``, ``ack``, ``nack``, ``requeue``,
…) as one Lua script, ``dramatiq/brokers/redis/dispatch.lua``, shipped in its wheel. The actors here send
that script as released: :func:`dispatch_script` reads it from the installed package (``dramatiq==2.2.1``,
``pip install "emqlab[atlas]"``) with :mod:`importlib.resources` each time a run needs it, and nothing of it
is kept in this repository. Messages are decoded with dramatiq's own ``Message.decode``.

The calling convention is the broker's (``RedisBroker._dispatch`` in ``dramatiq/brokers/redis.py``):
``KEYS = [namespace]`` and ``ARGV = [command, timestamp (ms), queue, worker id, heartbeat timeout (ms),
dead-message TTL (ms), do_maintenance ("1"/"0"), max unpack size, *command args]``. Every call first
records the worker's heartbeat (``ZADD <ns>:__heartbeats__ <timestamp> <worker>``); a call that drew
maintenance (dramatiq draws it for 1 call in 1000, never for ``ack``/``nack``) first pushes back onto the
queue the unacked messages of every worker whose heartbeat is older than ``timestamp - heartbeat timeout``
and deletes their ack set. Here:

* **Keys.** The script builds every key from its namespace (``KEYS[1]``) and ``ARGV``: ``<ns>:<queue>``
  (the queue, a list of message ids), ``<ns>:<queue>.msgs`` (their data, a hash), ``<ns>:__acks__.<worker>.
  <queue>`` (a worker's unacked messages, a set), ``<ns>:__heartbeats__``, ``<ns>:<queue>.XQ`` (dead
  letters). The namespace passed is ``<base>dramatiq`` (:func:`namespace`: dramatiq's default namespace
  under the run's base), so every key is ``<base>dramatiq:default``, ``<base>dramatiq:__acks__.W1.default``
  …: under the run's base, as every key of a run must be. Its maintenance also sends ``KEYS
  <ns>:__acks__.<worker>*``: a pattern whose fixed head is the run's base, which matches only the run's
  keys (the base holds no glob character, which :func:`namespace` checks).
* **One step per call.** Each dispatch is sent as ``MULTI``, ``EVAL``, ``EXEC``: one step in a run of
  either mode, the script atomic as Redis runs it. (Sent alone, an ``EVAL`` is split one ``redis.call``
  per step in a split run; for dispatch.lua that would explore interleavings Redis never produces, and its
  maintenance's ``KEYS`` is refused there: the split host runs a script on the run's keys only.) The run's
  mode chooses the variant instead, as each actor says: ``split`` is dramatiq as released and configured
  in the report, ``atomic`` the fix.
* **Clock and ids.** The timestamp is the virtual clock (``q.now()``), the worker id the actor's id
  (dramatiq's is a per-process UUID), and a message's Redis id its job id in the scenario.
"""

from __future__ import annotations

import json
from typing import Any

from emqlab.engine.atlas import require

#: the ``@dangerous`` commands dispatch.lua sends (its maintenance's KEYS): a Redis user limited to
#: ``emqlab.acl``'s table cannot run these scenarios (``scripts/gen_acl.py`` leaves them out of its workload)
ACL_DANGEROUS = ("KEYS",)
#: dramatiq's default heartbeat timeout (ms): a worker silent for longer is taken for dead
HEARTBEAT_TIMEOUT_MS = 60_000
#: dramatiq's default dead-message TTL (ms, 7 days)
DEAD_MESSAGE_TTL_MS = 86_400_000 * 7
#: the broker's max unpack size: what dramatiq's maxstack.lua finds on Redis 7 (7992), halved as the broker
#: halves it (it only sizes batches of ids, which a scenario's few messages never fill)
MAX_UNPACK = 3996


def dispatch_script() -> bytes:
    """The bytes of ``dispatch.lua`` as the installed dramatiq release ships it. Raises
    :class:`emqlab.engine.atlas.MissingLibrary` (naming ``pip install "emqlab[atlas]"``) when dramatiq is
    not installed."""
    require("dramatiq")
    from importlib.resources import files

    return files("dramatiq.brokers").joinpath("redis").joinpath("dispatch.lua").read_bytes()


def namespace(q: Any) -> str:
    """The namespace that puts every key of dispatch.lua under the run's base: dramatiq's default
    namespace there (``emq:{q}:`` → ``emq:{q}:dramatiq``). Raises ``ValueError`` if the base holds a glob
    character, since the maintenance's ``KEYS`` pattern would then reach beyond the run's keys."""
    base = str(q.keys.base)
    if any(c in base for c in "*?[]\\"):
        raise ValueError(f"the run's base {base!r} holds a glob character: dispatch.lua's KEYS pattern"
                         " would not be confined to it")
    return base + "dramatiq"


def dispatch(r: Any, q: Any, command: str, queue: str, *args: Any, maintenance: bool = False,
             heartbeat_timeout: int = HEARTBEAT_TIMEOUT_MS) -> Any:
    """One call of dispatch.lua (``command`` on ``queue`` by this actor, at ``q.now()``) as one step: the
    script's reply. ``maintenance``: this call drew dramatiq's maintenance chance."""
    argv = [command, q.now(), queue, q.actor, heartbeat_timeout, DEAD_MESSAGE_TTL_MS,
            1 if maintenance and command not in ("ack", "nack") else 0, MAX_UNPACK, *args]
    pipe = r.pipeline(transaction=True)
    pipe.eval(dispatch_script(), 1, namespace(q), *argv)
    return pipe.execute()[0]


def _timeout(q: Any) -> int:
    """The heartbeat timeout of the actor's broker (``heartbeat_timeout``; in an atomic run
    ``heartbeat_timeout_atomic`` when given: the fixed configuration)."""
    if q.mode == "atomic" and "heartbeat_timeout_atomic" in q.params:
        return int(q.params["heartbeat_timeout_atomic"])
    return int(q.params.get("heartbeat_timeout", HEARTBEAT_TIMEOUT_MS))


def message(job: str, queue: str = "default", message_id: str | None = None, eta: int | None = None) -> str:
    """A message's data as dramatiq's ``Message.encode`` writes it, for Redis id ``job`` on ``queue``
    (``message_id``: dramatiq's own id, default ``m<job>``; ``eta``: a delayed message's due time, ms): the
    ``seed:`` of a scenario's msgs hash (a test holds the shipped seeds to it)."""
    options: dict[str, Any] = {"redis_message_id": job}
    if eta is not None:
        options["eta"] = eta
    return json.dumps({"queue_name": queue, "actor_name": "work", "args": [], "kwargs": {}, "options": options,
                       "message_id": message_id or f"m{job}", "message_timestamp": 0}, separators=(",", ":"))


def busy_worker(r: Any, q: Any) -> None:
    """A worker process that holds message ``job`` (default ``"1"``, fetched before the run: in its ack set)
    and runs its handler from the start; the handler keeps every thread of the process busy (as a C
    extension holding the GIL does), so the process sends nothing until the handler returns, then acks the
    message (``ack`` on ``queue``, default ``default``). The ack's reply is nil whether or not the message
    was still in the worker's ack set: its finish is recorded with code 0 either way."""
    job, queue = str(q.params.get("job", "1")), str(q.params.get("queue", "default"))
    q.begin(job, q.token())
    dispatch(r, q, "ack", queue, job, heartbeat_timeout=_timeout(q))
    q.end(job, 0)


def consumer(r: Any, q: Any) -> None:
    """Another worker process's consumer: one ``fetch`` (prefetch 1) on ``queue`` (default ``default``)
    that drew maintenance (``maintenance``, default true); a message it gets is decoded with dramatiq's
    ``Message.decode``, its handler runs, and it is acked. The broker's heartbeat timeout is
    ``heartbeat_timeout`` (default 60 000 ms), in an atomic run ``heartbeat_timeout_atomic`` (see the
    scenario: the fixed configuration)."""
    dramatiq = require("dramatiq")
    queue = str(q.params.get("queue", "default"))
    timeout = _timeout(q)
    got = dispatch(r, q, "fetch", queue, 1, maintenance=bool(q.params.get("maintenance", True)),
                   heartbeat_timeout=timeout)
    for data in got or []:
        if data is None:  # an id whose data was gone (dramatiq's consumer skips it)
            continue
        msg = dramatiq.Message.decode(data)
        job = str(msg.options["redis_message_id"])
        q.begin(job, q.token())
        dispatch(r, q, "ack", queue, job, heartbeat_timeout=timeout)
        q.end(job, 0)



# -- delayed messages ------------------------------------------------------------------------------------------

#: The fix of the promotion (our own Lua, not dramatiq's; the guard dramatiq#859 proposes): the worker's
#: heartbeat, as any dispatch call records it, then the delayed message moves to its queue only if this
#: worker's SREM takes it out of its own ack set of the delay queue. KEYS: the ack set, the delay queue's
#: msgs, the queue's msgs, the queue, the heartbeats; ARGV: the delayed id, the copy's id, the copy's data,
#: the timestamp, the worker. 1 = promoted; 0 = the worker no longer held it (nothing written but the beat).
GUARDED_PROMOTE = """
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[5])
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
redis.call('RPUSH', KEYS[4], ARGV[2])
return 1
"""


def _promote(r: Any, q: Any, data: bytes, queue: str, timeout: int) -> Any:
    """The worker's promotion of a due delayed message (``data``, fetched from ``<queue>.DQ``) onto
    ``queue``, as dramatiq's ``Worker.handle_delayed_messages`` makes it: a copy of the message for the
    queue (``Message.copy``, its ``eta`` dropped) under a new Redis id — ``<id>.<actor>`` here, a UUID in
    dramatiq (``RedisBroker.enqueue``) — enqueued, then the delayed message acked on the delay queue. Split:
    those two dispatch calls, as released; atomic: :data:`GUARDED_PROMOTE`, one step. Returns the guarded
    script's reply, or None."""
    dramatiq = require("dramatiq")
    msg = dramatiq.Message.decode(data)
    old = str(msg.options["redis_message_id"])
    new = f"{old}.{q.actor}"
    copy = msg.copy(queue_name=queue, options={"redis_message_id": new})
    copy.options.pop("eta", None)
    if q.mode == "atomic":
        ns = namespace(q)
        return r.eval(GUARDED_PROMOTE, 5, f"{ns}:__acks__.{q.actor}.{queue}.DQ", f"{ns}:{queue}.DQ.msgs",
                      f"{ns}:{queue}.msgs", f"{ns}:{queue}", f"{ns}:__heartbeats__", old, new, copy.encode(),
                      q.now(), q.actor)
    dispatch(r, q, "enqueue", queue, new, copy.encode(), heartbeat_timeout=timeout)
    dispatch(r, q, "ack", f"{queue}.DQ", old, heartbeat_timeout=timeout)
    return None


def busy_promoter(r: Any, q: Any) -> None:
    """A worker process that fetched delayed message ``job`` (default ``"1"``) from ``<queue>.DQ`` before
    the run (it is in its ack set of the delay queue) and has sent nothing since (busy, as
    :func:`busy_worker`); the message is due, and the worker promotes it onto ``queue`` (default
    ``default``): :func:`_promote`, with the message as it holds it (``eta``: its due time, default 0)."""
    job, queue = str(q.params.get("job", "1")), str(q.params.get("queue", "default"))
    data = message(job, f"{queue}.DQ", eta=int(q.params.get("eta", 0))).encode()
    _promote(r, q, data, queue, _timeout(q))


def delay_consumer(r: Any, q: Any) -> None:
    """Another worker process's consumer of the delay queue ``<queue>.DQ``: one ``fetch`` (prefetch 1) that
    drew maintenance (``maintenance``, default true), and each due message it gets promoted onto ``queue``
    (:func:`_promote`)."""
    queue = str(q.params.get("queue", "default"))
    timeout = _timeout(q)
    got = dispatch(r, q, "fetch", f"{queue}.DQ", 1, maintenance=bool(q.params.get("maintenance", True)),
                   heartbeat_timeout=timeout)
    for data in got or []:
        if data is not None:
            _promote(r, q, data, queue, timeout)


def promoted_once(final: Any, history: Any) -> list[str]:
    """The rule ``promoted-once`` (reads ``dramatiq:default.msgs``): each dramatiq message (its
    ``message_id``) has at most one copy among the queue's messages; two copies are two runs of it. The
    sentence names the steps that wrote each copy."""
    from emqlab.engine.effects import Placed

    raw = final.values.get("dramatiq:default.msgs") or {}
    copies: dict[str, list[str]] = {}
    for rid, data in sorted(raw.items()):
        copies.setdefault(str(json.loads(data)["message_id"]), []).append(str(rid))
    out = []
    for mid, rids in sorted(copies.items()):
        if len(rids) < 2:
            continue
        by = [f"{s.actor}'s step {s.index}" for s in history.steps
              if any(isinstance(e, Placed) and e.job in rids and e.place == "dramatiq:default" for e in s.effects)]
        out.append(f"message {mid} has {len(rids)} copies on the queue default (Redis ids {', '.join(rids)})"
                   + (f", pushed by {' and '.join(by)}" if by else "") + ": each will run")
    return out


__all__ = ["ACL_DANGEROUS", "DEAD_MESSAGE_TTL_MS", "GUARDED_PROMOTE", "HEARTBEAT_TIMEOUT_MS", "MAX_UNPACK",
           "busy_promoter", "busy_worker", "consumer", "delay_consumer", "dispatch", "dispatch_script", "message",
           "namespace", "promoted_once"]
