"""The home of a run's dealings with its backend beyond one command at a time: each actor's own connection
(its WATCH and MULTI state, pipelines and MULTI … EXEC), and what a run needs of a server emqlab does not
own — the safety TTLs on the run's keys, the server's identity (a restart or a failover must not go
unnoticed), SCRIPT KILL for a script that runs past the socket timeout, and the :class:`ServerFault` each of
these raises. Also the one fakeredis adjustment (sorted ``SMEMBERS``) that keeps runs the same from one
Python process to the next.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from emqlab.backend.cluster import is_cluster
from emqlab.backend.connect import (
    SAFETY_TTL_MS,
    TTL_OBSERVED,
    FaultScope,
    Namespace,
    ServerFault,
    describe,
    fault_code,
    pipeline,
    server_fault,
    session_client,
)
from emqlab.engine import footprints
from emqlab.engine.footprints import Footprint
from emqlab.protocol.commands import DROPS_TTL, KeyAccess, command_flags, key_access
from emqlab.protocol.keys import QueueKeys

#: scripts go in a transaction although their flags do not say ``write``
_SCRIPT_CALLS = frozenset({"EVALSHA", "EVAL", "FCALL"})
#: commands that must not go in a transaction
_NOT_IN_MULTI = frozenset({"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"})


class Safety:
    """The safety TTLs of a live run's keys: which keys commands wrote since the last step, which have the
    TTL, which the run ever wrote (:meth:`emqlab.backend.namespace.Namespace.protect` says why no script and no state
    reader can tell)."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self._base = namespace.keys.base.encode()
        #: the run's keys that never get the safety TTL (a script reads their TTL)
        self._exempt = frozenset(self._base + k.encode() for k in TTL_OBSERVED)
        self.clear()

    def clear(self) -> None:
        """A run starts: nothing written, nothing protected."""
        #: keys commands wrote since the last step (live: they get the safety TTL after the step)
        self.touched: list[bytes] = []
        #: keys of this run given the safety TTL (and not since stripped of it by a SET, DEL, …)
        self.protected: set[bytes] = set()
        #: every key written in this run (given the safety TTL again when it ends)
        self.written: set[bytes] = set()

    def tracking(self, execute: Callable[..., Any]) -> Callable[..., Any]:
        """``execute`` that notes the keys each command may write (live: :meth:`protect` gives them the
        safety TTL after the step); a command that may drop a key's TTL (SET, DEL, RENAME, …) forgets that
        the key had it.

        Where ``execute`` can send a transaction (the run's own executor on a live server, not an actor's
        session, whose WATCH and MULTI are its own), a write command or script that writes keys of the run
        goes with ``PEXPIRE key ms NX`` for each of them in one MULTI … EXEC: a key has its TTL from the
        command that creates it, so a process killed between two round trips leaves none without one. Every
        time, not only the first: a key emptied (LREM, SPOP, a script's DEL) is gone, and the next write
        creates it anew. (Keys a script writes that its KEYS do not name get it right after the step,
        :meth:`protect`.)"""
        transaction = getattr(execute, "transaction", None)

        def run(*command: Any) -> Any:
            access = key_access(command) if command else None
            try:
                fresh = self._written(command, access) if transaction is not None else []
                if transaction is None or not fresh:
                    return execute(*command)
                self.protected.update(fresh)
                return transaction(command, [(b"PEXPIRE", k, SAFETY_TTL_MS, b"NX") for k in fresh])
            finally:
                if access is not None:
                    self.touched.extend(k if isinstance(k, bytes) else str(k).encode() for k in access.writes)
                    self.written.update(self.touched)
                    name = command[0]
                    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
                    if name.upper() in DROPS_TTL:
                        self.protected.difference_update(access.writes)

        return run

    def _written(self, command: tuple[Any, ...], access: KeyAccess | None) -> list[bytes]:
        """The run's keys (not TTL-observed) that ``command`` writes (``access``: its key access); none for a
        command that cannot go in a transaction (blocking, MULTI, WATCH, … or not a write)."""
        if not command or access is None:
            return []
        name = command[0].decode("utf-8", "replace") if isinstance(command[0], bytes) else str(command[0])
        if name.upper() not in _SCRIPT_CALLS:
            flags = command_flags(name)
            if "write" not in flags or "blocking" in flags or name.upper() in _NOT_IN_MULTI:
                return []
        keys = (k if isinstance(k, bytes) else str(k).encode() for k in access.writes)
        return [k for k in dict.fromkeys(keys) if k.startswith(self._base) and k not in self._exempt]

    def protect(self, script_keys: Sequence[Any] = (), *, fresh: bool = False) -> None:
        """Give the keys written since the last call (and an atomic script's KEYS, which it may have deleted
        and written again) the safety TTL, between two steps: :meth:`emqlab.backend.namespace.Namespace.protect` says
        why no script and no state reader can tell. ``fresh``: these keys too, whether written or not."""
        extra = [k if isinstance(k, bytes) else str(k).encode() for k in script_keys]
        self.protected.difference_update(extra)
        chosen = [k for k in dict.fromkeys([*self.touched, *extra]) if k not in self.protected]
        if fresh:
            chosen += [k for k in self.written if k not in chosen]
        self.touched = []
        if chosen:
            self.namespace.protect(chosen)
            self.protected.update(chosen)

    def seed(self, conn: redis.Redis, keys: QueueKeys, cmds: Sequence[tuple[bytes, ...]]) -> None:
        """Write the initial state ``cmds`` in one transaction, every key but the TTL-observed ones given the
        safety TTL in it (before any step, so no script can tell). Raises :class:`ServerFault` for a server
        error."""
        pipe = pipeline(conn, transaction=True)
        for cmd in cmds:
            pipe.execute_command(*cmd)
        seeded = list(dict.fromkeys(cmd[1] for cmd in cmds))
        exempt = {keys.key(k).encode() for k in TTL_OBSERVED}
        for key in seeded:
            if key not in exempt:
                pipe.execute_command(b"PEXPIRE", key, SAFETY_TTL_MS, b"NX")
        self.protected.update(k for k in seeded if k not in exempt)
        self.written.update(seeded)
        try:
            pipe.execute()
        except redis.exceptions.ResponseError as e:
            fault = server_fault(e)
            if fault is None:
                raise
            prefix, _, rest = fault.partition(" ")
            said = f"{prefix} {rest.split(' of pipeline caused error: ')[-1]}"
            raise fault_of(f"writing the initial state got a server error ({said}): a run cannot go on truthfully"
                           " past a server fault", said) from None


class Sessions:
    """Each actor's own connection to the backend ``conn`` (its WATCH and MULTI state are its own), opened at
    its first use in a run, and the keys each actor's open WATCH covers. ``fake``: the backend is fakeredis;
    ``base``: the queue's key prefix; ``tracking(execute)``: ``execute`` noting the keys it writes (the run's
    :meth:`Safety.tracking`)."""

    def __init__(self, conn: redis.Redis, fake: bool, base: str,
                 tracking: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.conn = conn
        self.fake = fake
        self.base = base
        self.tracking = tracking
        self.clients: dict[str, redis.Redis] = {}
        #: the keys each actor's open WATCH covers
        self.watched: dict[str, tuple[bytes, ...]] = {}

    def execute(self, actor: str) -> Callable[..., Any]:
        """``actor``'s own connection (its WATCH and MULTI state), opened at its first use in a run."""
        client = self.clients.get(actor)
        if client is None:
            client = self.clients[actor] = session_client(self.conn)
        return client.execute_command

    def tracked(self, actor: str) -> Callable[..., Any]:
        """``actor``'s connection as the run's own executor is: sorted SMEMBERS on fakeredis, tracked live."""
        execute = self.execute(actor)
        return sorted_smembers(execute) if self.fake else self.tracking(execute)

    def close(self, actor: str) -> None:
        client = self.clients.pop(actor, None)
        if client is not None:
            client.close()

    def close_all(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients = {}

    def batch(self, actor: str, cmds: Sequence[tuple[bytes, ...]], multi: bool) -> tuple[Any, Footprint]:
        """Several commands in one round trip on ``actor``'s connection: pipelined (the replies, errors as
        values), or as MULTI … EXEC (EXEC's reply: ``None`` when a watched key changed). The footprint is
        every command's, plus for EXEC a read of the keys the actor WATCHed."""
        execute = self.execute(actor)
        if not self.fake:
            execute = self.tracking(execute)
        base = self.base
        fp = footprints.of_commands(list(cmds), base)
        if not multi:
            out: list[Any] = []
            for c in cmds:
                try:
                    out.append(execute(*c))
                except redis.exceptions.ResponseError as e:
                    out.append(e)
            return out, fp
        watched = self.watched.pop(actor, ())
        if watched:
            fp = fp | footprints.of_commands([(b"EXISTS", *watched)], base)
        execute(b"MULTI")
        for c in cmds:
            execute(*c)
        try:
            return execute(b"EXEC"), fp
        except redis.exceptions.ResponseError as e:
            return e, fp


def kill_script(conn: redis.Redis, base: str, name: str) -> ServerFault:
    """A script step ran past the socket timeout: the server is busy with it, for every client. Send
    SCRIPT KILL from a connection of its own; returns the fault to raise (code ``BUSY``, which aborts the
    run, once the server is free; ``UNKILLABLE`` — Redis refuses to kill a script that has written, only
    SHUTDOWN NOSAVE stops it then, which emqlab never sends — or ``CONNECTION``, which stop the
    exploration)."""
    killer = session_client(conn)
    code = "BUSY"
    try:
        killer.execute_command("SCRIPT", "KILL")
        done = "emqlab sent SCRIPT KILL and the server is free again"
    except redis.exceptions.ResponseError as e:
        if "UNKILLABLE" in str(e):
            code = "UNKILLABLE"
            done = ("Redis refuses SCRIPT KILL because the script already wrote; the server stays busy until"
                    " it ends — only an operator's SHUTDOWN NOSAVE stops it, which emqlab never sends")
        else:  # NOTBUSY: it ended meanwhile
            done = f"the script ended on its own ({e})"
    except redis.exceptions.RedisError as e:
        code = "CONNECTION"
        done = f"SCRIPT KILL could not be sent ({e})"
    finally:
        killer.close()
    return fault_of(f"the script {name} ran past the socket timeout ({base}…): {done}; a run cannot"
                    " go on truthfully past it", f"{code} the script {name} ran past the socket timeout: {done}",
                    code)


class ServerWatch:
    """How a run notices that the live server is no longer the process it started on (a restart, or a
    failover to another node) — redis-py reconnects silently, so without this a run would read an emptied
    or rolled-back database and report its state as the run's. Without ``INFO`` (its ``run_id``), which a
    restricted ACL user is denied (``docs/cli.md``, "A restricted Redis user"): what such a user may read,
    and a restart always changes, is the script cache together with the connection.

    * A watch keeps one connection of its own and loads a *probe*, a one-line script whose text holds a
      random token, so no other client loads the same script. Redis 7.0 persists no script (neither RDB
      nor AOF holds one) and replicates no ``SCRIPT LOAD``: after a restart, with or without persistence,
      or on the replica a failover promoted, ``SCRIPT EXISTS`` answers 0 for it.
    * A restart also closes every connection: the watch's connection had to be made again
      (redis-py's connect callback says so). A ``SCRIPT FLUSH`` from another client empties the cache but
      leaves the connection alone, and a dropped connection (``CLIENT KILL``, a network blip) leaves the
      cache alone: neither is taken for a restart; the probe is loaded again after a flush.

    :attr:`restarts` counts the restarts seen; a run compares the count at its start with the count when it
    checks (:meth:`check`). One watch per process and server (:func:`watch_for`), shared by every run of the
    process on that server, so each process loads one probe per server into a cache that never evicts.
    Commands: ``SCRIPT LOAD`` and ``SCRIPT EXISTS``, both in the restricted user's list."""

    def __init__(self, conn: redis.Redis) -> None:
        self._client = session_client(conn)
        self._probe = f"return 'emqlab restart probe {secrets.token_hex(8)}'"
        self._reconnected = False
        self._lock = threading.Lock()
        #: restarts seen so far
        self.restarts = 0
        self._sha = self._client.execute_command("SCRIPT", "LOAD", self._probe)
        self._client.execute_command("SCRIPT", "EXISTS", self._sha)  # (a user denied it is found out here, once)
        self._client.connection.register_connect_callback(self._connected)  # type: ignore[union-attr]

    def _connected(self, _connection: Any) -> None:
        self._reconnected = True

    def check(self) -> int:
        """Look again; the number of restarts seen so far. A server that does not answer is no restart
        here (the run's next command says why)."""
        with self._lock:
            for attempt in (1, 2):  # (a connection the server closed fails once; redis-py makes it again)
                try:
                    there = self._client.execute_command("SCRIPT", "EXISTS", self._sha)
                    reconnected, self._reconnected = self._reconnected, False
                    if not int(there[0]):
                        self.restarts += 1 if reconnected else 0
                        self._client.execute_command("SCRIPT", "LOAD", self._probe)
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                    if attempt == 1:
                        continue
                except redis.exceptions.RedisError:
                    pass
                break
            return self.restarts

    def close(self) -> None:
        self._client.close()


#: one watch per (process, server and user): :func:`watch_for`; ``None`` where the server cannot be watched
_WATCHES: dict[tuple[Any, ...], ServerWatch | str] = {}


def watch_for(conn: redis.Redis) -> ServerWatch | str:
    """The :class:`ServerWatch` of this process on ``conn``'s live server, made at the first call; or why
    restart detection is off there (a cluster client; a user denied ``SCRIPT LOAD``), which is decided
    once per process and server, so a denied command is not sent again and again."""
    if is_cluster(conn):
        return ("restart detection is off on a Redis Cluster: a restart or failover of the queue's node is"
                " noticed only through the errors it causes")
    kw = conn.connection_pool.connection_kwargs
    key = (os.getpid(), kw.get("host"), kw.get("port"), kw.get("path"), kw.get("username"))
    watch = _WATCHES.get(key)
    if watch is None:
        try:
            watch = ServerWatch(conn)
        except redis.exceptions.ResponseError as e:  # NOPERM: a user narrower than emqlab's list
            watch = (f"restart detection is off on {describe(conn)}: the server refused the probe's SCRIPT LOAD"
                     f" or SCRIPT EXISTS ({e}), so a restart of the server would go unnoticed")
        except (redis.exceptions.RedisError, OSError):
            return "restart detection is off: the server did not answer"
        _WATCHES[key] = watch
    return watch


class SameServer:
    """A run's check that its server is still the process it started on: on a live server, through the
    process's :class:`ServerWatch` there (:func:`watch_for`); nothing to check on fakeredis (``fake``: a
    restart there is a fault emqlab injects). ``off``: why restart detection is off on this server (a
    report says it once), else ``None``."""

    def __init__(self, conn: redis.Redis, fake: bool) -> None:
        self.conn = conn
        watch = None if fake else watch_for(conn)
        self.watch = watch if isinstance(watch, ServerWatch) else None
        self.off = watch if isinstance(watch, str) else None
        #: the restarts the watch had seen when the Runner started
        self.started = self.watch.check() if self.watch is not None else 0

    def check(self, when: str) -> None:
        """Raise :class:`ServerFault` (code ``RESTARTED``, which stops the exploration) when the watch saw a
        restart or a failover since the Runner started; ``when`` says at which point of the run."""
        if self.watch is None or self.watch.check() == self.started:
            return
        raise fault_of(f"the server at {describe(self.conn)} restarted or failed over ({when}: the probe emqlab"
                       " loaded into its script cache is gone and the connection had to be made again), so this"
                       " run's keys may be gone or older than the run left them and its state cannot be"
                       " reported truthfully",
                       "the server restarted or failed over (emqlab's probe script is gone from its cache"
                       " and the connection was made again)", "RESTARTED")


def fault_of(head: str, detail: str, code: str = "") -> ServerFault:
    """The :class:`ServerFault` for the error ``detail`` (the server's words; ``code`` from it unless given),
    its message ``head`` and what happens next: the run is aborted, or the exploration stops
    (:class:`emqlab.backend.faults.FaultScope`)."""
    fault = ServerFault(head, code=code, detail=detail)
    then = "the run is aborted" if fault.scope is FaultScope.RUN else "the exploration stops"
    fault.args = (f"{head}; {then}",)
    return fault


def _member_order(m: Any) -> tuple[int, Any]:
    return (0, int(m)) if isinstance(m, bytes) and m.isdigit() else (1, m if isinstance(m, bytes) else str(m))


def sorted_smembers(execute: Callable[..., Any]) -> Callable[..., Any]:
    """fakeredis keeps a set's members in a Python set, whose order follows ``PYTHONHASHSEED``; Redis
    returns a small set of integer ids (an intset) sorted. Sorting ``SMEMBERS`` on fakeredis keeps runs the
    same from one Python process to the next (the sweep's candidate order decides which job is requeued
    first)."""

    def run(*command: Any) -> Any:
        reply = execute(*command)
        if isinstance(reply, list) and command and command[0].upper() == b"SMEMBERS":
            reply = sorted(reply, key=_member_order)
        return reply

    return run



class as_fault:  # noqa: N801 - used as a function: ``with as_fault(when):``
    """An error reply about the server's state (:func:`~emqlab.backend.faults.server_fault`: another client's
    BUSY script, OOM, LOADING, …) to a command a run sends outside its steps — ``when``: registering the
    run, deleting the last run's keys, reading a state — raised as the :class:`ServerFault` it is, never as
    a bare ResponseError: a run-scoped one aborts the run (the exploration runs it again, goes on), as
    ``docs/cli.md`` says, instead of ending the command as if the server could not be used. ``then``: what
    follows instead of :func:`fault_of`'s (the run is aborted / the exploration stops). (A class, not a
    generator: every step of a run enters two.)"""

    __slots__ = ("when", "then")

    def __init__(self, when: str, then: str = "") -> None:
        self.when, self.then = when, then

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: object) -> None:
        if e is None or not isinstance(e, redis.exceptions.ResponseError):
            return
        fault = server_fault(e)
        if fault is None:
            return
        if self.then:
            raise ServerFault(f"{self.when} got a server error ({fault}): {self.then}", detail=fault) from None
        raise fault_of(f"{self.when} got a server error ({fault}): a run cannot go on truthfully past a server"
                       " fault", fault) from None


#: how long (s) a run's clean-up asks again a server that is busy with a script or loading (the keys are
#: then left to their safety TTL and the run index's lease: ``emqlab clean``)
RELEASE_WAIT_S = 10.0


def release(namespace: Namespace, wait_s: float = RELEASE_WAIT_S) -> bool:
    """Delete the run's keys and give up its claim (:meth:`emqlab.backend.namespace.Namespace.release`);
    False when they are left behind: the server cannot be reached, or refuses with a fault about its state
    (``BUSY`` — another client's script — or ``LOADING``: asked again every 0.1 s for up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            namespace.release()
            return True
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            return False
        except redis.exceptions.ResponseError as e:
            fault = server_fault(e)
            if fault is None:
                raise
            if fault_code(fault) not in ("BUSY", "LOADING") or time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
__all__ = ["RELEASE_WAIT_S", "Safety", "SameServer", "ServerWatch", "Sessions", "as_fault", "fault_of", "kill_script",
           "release", "sorted_smembers", "watch_for"]
