"""Redis Cluster: running emqlab's scripts on a cluster, one command to the node that owns its key's slot.

Redis Cluster splits the key space into 16384 hash slots, each served by one primary; a command or a script
whose keys hash to different slots is refused with ``CROSSSLOT``. A queue's keys are
``emq:{<queue>}:<suffix>``: only the text in braces — the *hash tag* — is hashed, so all of them, job hashes
and locks included, share one slot and a script's 14 keys are one node's business (``docs/cluster.md``).

* :func:`emqlab.backend.connect.connect` finds a cluster by itself: a URL of any one node (``redis://127.0.0.1:7000``)
  whose ``HELLO`` says ``mode cluster`` (:func:`cluster_enabled`) gives a :class:`ClusterClient` — redis-py's
  :class:`redis.cluster.RedisCluster`, discovering the other nodes, with a pipeline that takes raw commands.
* :class:`ClusterExecutor` is :func:`emqlab.backend.executor.command_executor` for a cluster: each command goes to
  the primary owning the slot of its first key (``EVALSHA`` by its KEYS), raw reply back; ``SCRIPT LOAD`` and
  ``SCRIPT EXISTS`` go to every primary; any other keyless command is refused (there is no "the server" to
  send it to). A multi-key command is not split: the node answers what Redis answers, ``CROSSSLOT`` when its
  keys' slots differ.
* :class:`ClusterSession` is :func:`emqlab.backend.clients.session_client`'s connection of its own: bound to the
  node of its first keyed command, so that WATCH, MULTI and EXEC share one connection as they must.
* :func:`scan_keys` finds a queue's keys with SCAN on the one node that owns the hash tag's slot (every
  primary for a pattern without a literal tag).

Errors keep Redis's own text, code first (``CROSSSLOT Keys in request don't hash to the same slot``), where
redis-py's parser would strip the code; a ``MOVED`` (the slot moved: a resharding or a failover) refreshes
the slot table and the command is sent again, once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import DataAccessCommands
from redis.crc import key_slot

from emqlab.protocol import messages
from emqlab.protocol.commands import command_keys

DEFAULT_CLUSTER_URL = "redis://127.0.0.1:7000"

#: the cluster errors redis-py parses into classes of their own and strips the code of
_CLUSTER_ERRORS: dict[type[BaseException], str] = {
    redis.exceptions.ClusterCrossSlotError: "CROSSSLOT",
    redis.exceptions.MovedError: "MOVED",
    redis.exceptions.AskError: "ASK",
    redis.exceptions.TryAgainError: "TRYAGAIN",
    redis.exceptions.ClusterDownError: "CLUSTERDOWN",
    redis.exceptions.MasterDownError: "MASTERDOWN",
}
#: keyless commands a cluster executor sends to every primary (the script cache is per node)
_ALL_PRIMARIES = ("SCRIPT LOAD", "SCRIPT EXISTS", "SCRIPT KILL")


class ClusterError(redis.exceptions.RedisError):
    """A command emqlab cannot route on a cluster (no key, and no node it would be right to pick)."""


def cluster_url() -> str:
    """``$EMQLAB_CLUSTER_URL`` or ``redis://127.0.0.1:7000`` (the first node of ``scripts/start_cluster.sh``)."""
    return os.environ.get("EMQLAB_CLUSTER_URL") or DEFAULT_CLUSTER_URL


def is_cluster(conn: object) -> bool:
    """True for a redis-py cluster client (:class:`redis.cluster.RedisCluster` or :class:`ClusterClient`)."""
    return isinstance(conn, RedisCluster)


def cluster_enabled(node: redis.Redis) -> bool:
    """Does the server ``node`` is connected to run in cluster mode? ``HELLO 2`` says (its ``mode``:
    ``cluster`` or ``standalone``), and every user may send it: Redis checks no ACL rule for HELLO, as for
    AUTH, so a restricted user (``docs/cli.md``) is not refused INFO at every connection. A server without
    HELLO (before Redis 6) is asked ``INFO cluster`` (``cluster_enabled:1``). False where neither answers
    (the next command says why)."""
    try:
        reply = node.execute_command("HELLO", "2")
        fields = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=False))
        mode = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in fields.items()}.get("mode", b"")
        return (mode.decode() if isinstance(mode, bytes) else str(mode)) == "cluster"
    except redis.exceptions.ResponseError:  # (no HELLO)
        pass
    except redis.exceptions.RedisError:
        return False
    try:
        info = node.info("cluster")
    except redis.exceptions.RedisError:
        return False
    return str(info.get("cluster_enabled", 0)) == "1"


def slot_of(key: str | bytes) -> int:
    """The hash slot of ``key`` (CRC16 of its hash tag, or of the whole key without one; 0…16383), as
    ``CLUSTER KEYSLOT`` computes it."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def hash_tag(pattern: str) -> str | None:
    """The hash tag every key matching the SCAN pattern ``pattern`` carries, when the pattern fixes it:
    ``emq:\\{q-1\\}:*`` → ``q-1`` (a literal text, then an escaped ``{``, a tag without glob characters, an
    escaped ``}``); ``None`` when keys matching it may hash anywhere."""
    head, sep, rest = pattern.partition("\\{")
    if not sep or any(c in head for c in "*?[]{}\\"):
        return None
    tag, sep, _ = rest.partition("\\}")
    if not sep or not tag or any(c in tag for c in "*?[]{}\\"):
        return None
    return tag


def full_error(e: redis.exceptions.ResponseError) -> redis.exceptions.ResponseError:
    """``e`` with Redis's text whole: the cluster errors redis-py strips the code of (``CROSSSLOT``,
    ``MOVED``, ``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``) become a plain ``ResponseError`` whose
    message starts with the code, as ``redis-cli`` shows it; every other error is returned unchanged."""
    for cls, code in _CLUSTER_ERRORS.items():
        if isinstance(e, cls):
            text = str(e)
            return redis.exceptions.ResponseError(text if text.startswith(code) else f"{code} {text}")
    return e


def _name(command: Sequence[Any]) -> str:
    def word(a: Any) -> str:
        return (a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a)).upper()

    first = word(command[0]) if command else ""
    if first in ("SCRIPT", "CLUSTER", "CLIENT", "CONFIG", "OBJECT", "MEMORY", "XINFO") and len(command) > 1:
        return f"{first} {word(command[1])}"
    return first


def _raw(node: ClusterNode) -> redis.Redis:
    """A client on ``node``'s pool whose replies are raw (no response callbacks)."""
    conn = node.redis_connection
    if conn is None:  # pragma: no cover - redis-py makes a node's client when it discovers the node
        raise ClusterError(f"no connection to cluster node {node.name}")
    raw = redis.Redis(connection_pool=conn.connection_pool)
    raw.response_callbacks = {}  # type: ignore[assignment]
    return raw


class ClusterExecutor:
    """:func:`emqlab.backend.executor.command_executor` on a cluster: ``execute(*command) -> raw reply``, each
    command sent to the primary owning its first key's slot, on that node's pool (a connection borrowed per
    command, as the standalone executor does). ``close()`` makes it refuse further commands."""

    def __init__(self, cluster: RedisCluster) -> None:
        self._cluster: RedisCluster | None = cluster
        self._nodes: dict[str, redis.Redis] = {}

    def node_for(self, command: Sequence[Any]) -> ClusterNode | None:
        """The primary that owns the slot of ``command``'s first key; ``None`` for a keyless command."""
        keys = command_keys(command)
        if not keys:
            return None
        return self._live().nodes_manager.get_node_from_slot(slot_of(keys[0]))

    def _live(self) -> RedisCluster:
        if self._cluster is None:
            raise RuntimeError("this command executor is closed")
        return self._cluster

    def _client(self, node: ClusterNode) -> redis.Redis:
        client = self._nodes.get(node.name)
        if client is None:
            client = self._nodes[node.name] = _raw(node)
        return client

    def __call__(self, *command: Any) -> Any:
        cluster = self._live()
        node = self.node_for(command)
        if node is None:
            return self._keyless(cluster, command)
        try:
            return self._client(node).execute_command(*command)
        except redis.exceptions.MovedError:
            # the slot has moved (resharding, failover): nothing ran; refresh the slot table and send it again
            cluster.nodes_manager.initialize()
            self._nodes.clear()
            node = self.node_for(command)
            assert node is not None
            try:
                return self._client(node).execute_command(*command)
            except redis.exceptions.ResponseError as e:
                raise full_error(e) from None
        except redis.exceptions.ResponseError as e:
            raise full_error(e) from None

    def _keyless(self, cluster: RedisCluster, command: Sequence[Any]) -> Any:
        name = _name(command)
        if name not in _ALL_PRIMARIES:
            raise ClusterError(f"{name or 'an empty command'} names no key: on Redis Cluster emqlab sends a command to "
                               f"the node owning its key's slot, and refuses one without a key "
                               f"(only {', '.join(_ALL_PRIMARIES)} go to every primary)")
        replies: list[Any] = []
        errors: list[redis.exceptions.ResponseError] = []
        for node in cluster.get_primaries():
            try:
                replies.append(self._client(node).execute_command(*command))
            except redis.exceptions.ResponseError as e:
                errors.append(e)
        if name == "SCRIPT KILL":  # the busy node answers OK; the others NOTBUSY
            if replies:
                return replies[0]
            unkillable = [e for e in errors if "UNKILLABLE" in str(e)]
            raise (unkillable or errors)[0]
        if errors:
            raise errors[0]
        if name == "SCRIPT EXISTS":  # cached where it counts only when cached on every node
            return [int(all(r[i] for r in replies)) for i in range(len(replies[0]))]
        return replies[0]  # SCRIPT LOAD: the SHA1, the same from every node

    def close(self) -> None:
        self._cluster = None
        self._nodes.clear()

    def __enter__(self) -> ClusterExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ClusterSession:
    """:func:`emqlab.backend.clients.session_client` on a cluster: one connection of its own, to the primary that
    owns the slot of its first keyed command (a queue's keys share one slot, so that is the queue's node), with
    raw replies. Per-connection state — WATCH, MULTI — lives on that one connection, as on a standalone server:
    a later command for a key another node owns is sent there all the same, and Redis answers it (``MOVED``,
    or ``CROSSSLOT`` for keys in several slots). A MULTI sent before any key is held back until the first
    keyed command names the node; ``SCRIPT KILL`` goes to every primary. ``close()`` closes the connection
    (and with it any WATCH or open MULTI)."""

    def __init__(self, cluster: RedisCluster) -> None:
        self._cluster = cluster
        self._router = ClusterExecutor(cluster)
        self._client: redis.Redis | None = None
        self._multi = False  # a MULTI held back
        self.response_callbacks: dict[Any, Any] = {}

    @property
    def node(self) -> str | None:
        """The node the session is bound to (``host:port``), ``None`` before its first keyed command."""
        if self._client is None:
            return None
        kw = self._client.connection_pool.connection_kwargs
        return f"{kw.get('host')}:{kw.get('port')}"

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if self._client is None:
            node = self._router.node_for(args)
            if node is None:
                return self._unbound(args)
            conn = node.redis_connection
            assert conn is not None
            pool = conn.connection_pool
            own = redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
            self._client = redis.Redis(connection_pool=own, single_connection_client=True)
            self._client.response_callbacks = {}  # type: ignore[assignment]
            if self._multi:
                self._multi = False
                self._client.execute_command("MULTI")
        try:
            return self._client.execute_command(*args, **options)
        except redis.exceptions.ResponseError as e:
            raise full_error(e) from None

    def _unbound(self, args: Sequence[Any]) -> Any:
        name = _name(args)
        if name == "MULTI":
            if self._multi:
                raise redis.exceptions.ResponseError(messages.MULTI_NESTED)
            self._multi = True
            return b"OK"
        if name == "EXEC":
            if not self._multi:
                raise redis.exceptions.ResponseError(messages.EXEC_WITHOUT_MULTI)
            self._multi = False
            return []  # nothing was queued
        if name == "DISCARD":
            if not self._multi:
                raise redis.exceptions.ResponseError(messages.DISCARD_WITHOUT_MULTI)
            self._multi = False
            return b"OK"
        if name == "UNWATCH":
            return b"OK"
        return self._router(*args)

    def close(self) -> None:
        client, self._client = self._client, None
        self._multi = False
        if client is not None:
            client.close()
            client.connection_pool.disconnect()
        self._router.close()


class SlotPipeline(DataAccessCommands):
    """:meth:`ClusterClient.pipeline`: redis-py's data commands (``pipe.hset``, ``pipe.lrange`` …) and raw
    ``execute_command`` (command names as bytes, as emqlab's Runner sends them), queued, then sent per node on
    :meth:`execute`. ``transaction=True`` sends one MULTI … EXEC per hash slot on the node owning it: the
    whole pipeline is one transaction when its keys share a slot (a queue's keys, with the hash tag), and
    Redis Cluster has no transaction spanning slots, so a pipeline spanning them is one per slot, in order
    of first use. Replies come back in the order of the commands, parsed as redis-py parses them. A command
    goes to its first key's node, or to the one node given as ``target_nodes`` (as redis-py's multi-key
    helpers pass it); WATCH is not offered (``ClusterClient.cluster_pipeline`` is redis-py's pipeline)."""

    def __init__(self, cluster: RedisCluster, transaction: bool) -> None:
        self._cluster = cluster
        self._transaction = transaction
        self._router = ClusterExecutor(cluster)
        self._stack: list[tuple[tuple[Any, ...], dict[str, Any], ClusterNode, int | None]] = []
        self._event_dispatcher = cast(Any, getattr(cluster, "_event_dispatcher", None))  # (the mixins' protocol)

    def execute_command(self, *args: Any, **options: Any) -> SlotPipeline:
        target = options.pop("target_nodes", None)
        keys = command_keys(args)
        if keys:
            slot: int | None = slot_of(keys[0])
            node = self._cluster.nodes_manager.get_node_from_slot(slot_of(keys[0]))
        elif isinstance(target, ClusterNode) or (isinstance(target, list) and len(target) == 1):
            node, slot = (target if isinstance(target, ClusterNode) else target[0]), None
        else:
            raise ClusterError(f"{_name(args)} names no key: a cluster pipeline sends each command to the node "
                               "owning its key's slot")
        self._stack.append((args, options, node, slot))
        return self

    def __len__(self) -> int:
        return len(self._stack)

    def reset(self) -> None:
        self._stack = []

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack, self._stack = self._stack, []
        groups: dict[Any, list[int]] = {}
        nodes: dict[Any, ClusterNode] = {}
        for i, (_args, _opts, node, slot) in enumerate(stack):
            group = (node.name, slot) if self._transaction else node.name
            groups.setdefault(group, []).append(i)
            nodes[group] = node
        replies: list[Any] = [None] * len(stack)
        for group, members in groups.items():
            conn = nodes[group].redis_connection
            assert conn is not None
            pipe = conn.pipeline(transaction=self._transaction)
            for i in members:
                args, opts, _node, _slot = stack[i]
                pipe.execute_command(*args, **opts)
            try:
                got = pipe.execute(raise_on_error=raise_on_error)
            except redis.exceptions.ResponseError as e:
                raise full_error(e) from None
            for i, reply in zip(members, got, strict=True):
                replies[i] = full_error(reply) if isinstance(reply, redis.exceptions.ResponseError) else reply
        return replies

    def __enter__(self) -> SlotPipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.reset()


class ClusterClient(RedisCluster):
    """The cluster client :func:`emqlab.backend.connect.connect` hands out: redis-py's :class:`RedisCluster` (same
    arguments, same commands), with two differences that let emqlab's Runner use it as it uses a server:

    * :meth:`pipeline` is a :class:`SlotPipeline`, which takes raw commands with bytes names (redis-py's
      cluster pipeline asks the server for the keys of each command and knows no bytes names) and runs a
      transaction per hash slot (:meth:`cluster_pipeline` is redis-py's, and ``transaction()``, which WATCHes,
      is not offered);
    * :attr:`connection_pool` is the first node's pool, for code that reads the server's address and
      credentials off a client to connect again elsewhere (a worker process then finds the cluster through
      that node). Commands never go through it."""

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> SlotPipeline:
        return SlotPipeline(self, bool(transaction))

    def cluster_pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> Any:
        """redis-py's own cluster pipeline (str command names; WATCH and transactions within one slot)."""
        return RedisCluster.pipeline(self, transaction, shard_hint)

    def transaction(self, func: Any, *watches: Any, **kwargs: Any) -> Any:
        raise ClusterError("ClusterClient.transaction is not offered: its pipeline() is emqlab's SlotPipeline; "
                           "use cluster_pipeline(transaction=True) with WATCH, or a redis.cluster.RedisCluster")

    @property
    def connection_pool(self) -> redis.ConnectionPool:
        node = self.get_default_node()
        conn = node.redis_connection if node is not None else None
        if conn is None:  # pragma: no cover - redis-py sets a default node when it discovers the cluster
            raise ClusterError("the cluster client has no node")
        return cast(redis.ConnectionPool, conn.connection_pool)


def scan_keys(cluster: RedisCluster, pattern: str, count: int = 500) -> Iterator[bytes]:
    """Every key matching ``pattern`` on the cluster (SCAN, never KEYS): on the one primary that owns the
    slot of the pattern's hash tag when it fixes one (:func:`hash_tag`; every key of a tagged queue lives
    there), else on every primary."""
    tag = hash_tag(pattern)
    if tag is not None:
        nodes = [cluster.nodes_manager.get_node_from_slot(slot_of(tag))]
    else:
        nodes = list(cluster.get_primaries())
    for node in nodes:
        conn = node.redis_connection
        assert conn is not None
        yield from conn.scan_iter(match=pattern, count=count)


def describe(cluster: RedisCluster) -> str:
    """``redis://host:port/0 (Redis Cluster, N primaries)`` — the first node's address and the size."""
    node = cluster.get_default_node()
    where = f"{node.host}:{node.port}" if node is not None else "?"
    n = len(cluster.get_primaries())
    return f"redis://{where}/0 (Redis Cluster, {n} primar{'y' if n == 1 else 'ies'})"


__all__ = ["ClusterClient", "ClusterError", "ClusterExecutor", "ClusterSession", "DEFAULT_CLUSTER_URL",
           "SlotPipeline", "cluster_enabled", "cluster_url", "full_error", "hash_tag", "is_cluster",
           "scan_keys", "slot_of"]
