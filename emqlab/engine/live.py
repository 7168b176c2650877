"""The home of a run's dealings with its backend beyond one command at a time: each actor's own connection
(its WATCH and MULTI state, pipelines and MULTI … EXEC), and what a run needs of a server emqlab does not
own — the safety TTLs on the run's keys, the server's identity (a restart or a failover must not go
unnoticed), SCRIPT KILL for a script that runs past the socket timeout, and the :class:`ServerFault` each of
these raises. Also the one fakeredis adjustment (sorted ``SMEMBERS``) that keeps runs the same from one
Python process to the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from emqlab.backend.connect import (
    SAFETY_TTL_MS,
    TTL_OBSERVED,
    BackendError,
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
from emqlab.protocol.commands import DROPS_TTL, key_access
from emqlab.protocol.keys import QueueKeys


class Safety:
    """The safety TTLs of a live run's keys: which keys commands wrote since the last step, which have the
    TTL, which the run ever wrote (:meth:`emqlab.backend.namespace.Namespace.protect` says why no script and no state
    reader can tell)."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
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
        the key had it."""

        def run(*command: Any) -> Any:
            try:
                return execute(*command)
            finally:
                access = key_access(command) if command else None
                if access is not None:
                    self.touched.extend(k if isinstance(k, bytes) else str(k).encode() for k in access.writes)
                    self.written.update(self.touched)
                    name = command[0]
                    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
                    if name.upper() in DROPS_TTL:
                        self.protected.difference_update(access.writes)

        return run

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


def same_server(conn: redis.Redis, execute: Callable[..., Any], started: str | None, when: str) -> None:
    """On a live server (``started``: its ``run_id`` when the run started, ``None`` on fakeredis): raise
    :class:`ServerFault` when the server is not the one the run started on (its ``run_id`` changed: a
    restart, or a failover to another node). redis-py reconnects silently, so
    without this a run would read an emptied database and report its state as the run's."""
    if started is None:
        return
    now = server_id(execute)
    if now is not None and now != started:
        raise fault_of(f"the server at {describe(conn)} restarted or failed over ({when}: its run_id"
                       f" changed from {started[:8]}… to {now[:8]}…), so this run's keys are gone"
                       " and its state cannot be reported truthfully",
                       f"the server restarted or failed over (its run_id changed from {started[:8]}…"
                       f" to {now[:8]}…)", "RESTARTED")


def fault_of(head: str, detail: str, code: str = "") -> ServerFault:
    """The :class:`ServerFault` for the error ``detail`` (the server's words; ``code`` from it unless given),
    its message ``head`` and what happens next: the run is aborted, or the exploration stops
    (:class:`emqlab.backend.faults.FaultScope`)."""
    fault = ServerFault(head, code=code, detail=detail)
    then = "the run is aborted" if fault.scope is FaultScope.RUN else "the exploration stops"
    fault.args = (f"{head}; {then}",)
    return fault


def server_id(execute: Callable[..., Any]) -> str | None:
    """The server's ``run_id`` (``INFO server``), or ``None`` where it cannot be read (a cluster client, an
    ACL user without INFO)."""
    try:
        info = execute(b"INFO", b"server")
    except (redis.exceptions.RedisError, BackendError):
        return None
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line[7:].strip()
    return None


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


__all__ = ["Safety", "Sessions", "fault_of", "kill_script", "same_server", "server_id", "sorted_smembers"]


@contextmanager
def as_fault(when: str, then: str = "") -> Iterator[None]:
    """An error reply about the server's state (:func:`~emqlab.backend.faults.server_fault`: another client's
    BUSY script, OOM, LOADING, …) to a command a run sends outside its steps — ``when``: registering the
    run, deleting the last run's keys, reading a state — raised as the :class:`ServerFault` it is, never as
    a bare ResponseError: a run-scoped one aborts the run (the exploration runs it again, goes on), as
    ``docs/cli.md`` says, instead of ending the command as if the server could not be used. ``then``: what
    follows instead of :func:`fault_of`'s (the run is aborted / the exploration stops)."""
    try:
        yield
    except redis.exceptions.ResponseError as e:
        fault = server_fault(e)
        if fault is None:
            raise
        if then:
            raise ServerFault(f"{when} got a server error ({fault}): {then}", detail=fault) from None
        raise fault_of(f"{when} got a server error ({fault}): a run cannot go on truthfully past a server fault",
                       fault) from None


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
