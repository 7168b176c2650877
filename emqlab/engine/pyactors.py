"""Actors written in Python: a plain function over a redis-py client, every round trip a scheduling point.

A *Python actor* is a function ``f(r, q)``: ``r`` is a ``redis.Redis`` client (synchronous redis-py, its
replies parsed exactly as redis-py parses them) and ``q`` an :class:`ActorHandle` (the queue's keys, the
virtual clock, lock tokens, execution bookkeeping, more connections). The function may also be
``async def``, taking a ``redis.asyncio.Redis``. Nothing the function sends reaches the server until the
scheduler picks the actor: each round trip — one command, or one pipeline / ``MULTI … EXEC`` batch — is
one step, and an ``EVALSHA``/``EVAL`` is one atomic step, or, in a split run (or with the actor's ``mode:
split``), the script run client-side one ``redis.call`` per step, as emqlab's own split finish does.

How it is scheduled:

* A synchronous actor runs in a greenlet (the ``greenlet`` package): when redis-py reads a reply, the
  connection switches back to the Runner with the request, and the Runner switches in again with the reply
  when the scheduler chooses the actor. Only one actor's code ever runs at a time, so a run is a pure
  function of the schedule. Where greenlet is missing (Pyodide), the actor is replayed instead: run again
  from its start with the replies so far, stopped at its next request (:mod:`emqlab.engine.pysync`, which
  says what replay asks of an actor's code).
* An asynchronous actor is a coroutine driven by hand, with no event loop: awaiting a reply yields the
  request to the Runner. Awaiting anything else (``asyncio.sleep``, a task, a timer) cannot be scheduled
  deterministically and is refused with a clear error.

What a Python actor may do (checked before each round trip, on fakeredis and on a live server alike, so
both give the same runs and a live server's other data is never touched): commands whose keys are all
under the run's queue (``q.keys``); ``MULTI``/``EXEC``/``DISCARD``/``WATCH``/``UNWATCH``; ``SCRIPT LOAD``/
``SCRIPT EXISTS``; ``EVAL``/``EVALSHA`` with keys under the queue; ``PING``/``ECHO``/``INFO``; ``CLIENT
SETNAME``/``GETNAME``/``ID``. Refused, with the
reason: keys outside the queue, keyspace-wide commands (``KEYS``, ``SCAN``, ``FLUSHDB``, ``RANDOMKEY``),
server commands (``CONFIG``, ``SELECT``, ``SCRIPT FLUSH``, ``DEBUG``, …), blocking commands (``BLMOVE``,
``BZPOPMIN``, …: under a scheduler only one actor runs, so a block would never end), ``TIME`` (use
``q.now()``) and ``time.sleep``, RESP3, and any Redis connection the actor opens itself (every redis-py connection that
sends while an actor's code runs is checked: sending outside the given client stops the run).

The script cache a Python actor sees is the run's own: it holds emqlab's script set when a run starts,
``SCRIPT LOAD`` and ``EVAL`` add to it, a ``script-flush`` fault empties it, and ``EVALSHA`` of a script not
in it answers ``NOSCRIPT`` — the same in every run and on both backends (a server's real cache keeps what an
earlier run loaded, which would make runs differ).

redis-py 6 and later retry a command that failed with a connection error three times, sleeping between
tries; the client given to an actor does not retry (``q.client(retries=N)`` asks for it, without the
sleeps), so the actor's own policy is what a ``disconnect`` fault tests.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from emqlab.engine.actors import FACTORIES, ActorGen, Op, split_run
from emqlab.engine.pyref import resolve
from emqlab.engine.pysync import CLOSED_TEXT, Tape, greenlet_driven, greenlet_round_trip, replayed, sync_driver
from emqlab.engine.pywire import SCRIPT_CALLS, refusal, script_ref, sha1_hex
from emqlab.protocol import messages

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.engine.context import ActorContext
    from emqlab.engine.specs import ActorSpec
    from emqlab.protocol.keys import QueueKeys

Command = tuple[bytes, ...]


class ActorError(ValueError):
    """A Python actor could not be run as written: it raised, it sent a command a scheduled actor may not
    send, it talked to Redis outside its client, or it awaited something the scheduler cannot drive. The
    message names the actor, its step and the reason; the run stops (nothing is silently unscheduled)."""


@dataclass(frozen=True)
class Request:
    """One round trip of a Python actor: the commands it sent since its last reply, on one connection.
    ``conn`` is the connection's name (``W1``, then ``W1/2`` for the actor's second connection)."""

    conn: str
    commands: tuple[Command, ...]


class _Running(threading.local):
    """The Python actors whose code runs now in this thread (the innermost last): a redis-py connection that
    sends from this thread while it is not empty, and is not an actor's scheduled connection, is talking to
    Redis behind the scheduler. Per thread: another thread of the process (a watchdog's ``time.sleep``, a
    client library's own thread) is not the actor."""

    def __init__(self) -> None:
        self.drivers: list[_Driver] = []


_RUNNING_HERE = _Running()

# -- the handle ---------------------------------------------------------------------------------------------


class ActorHandle:
    """What a Python actor gets besides its client: ``q.keys`` (the run's :class:`emqlab.protocol.keys.QueueKeys`:
    ``q.keys.wait``, ``q.keys.lock("1")``, ``q.keys.job("1")`` …), ``q.actor`` (its id), ``q.params`` (its
    ``with:`` parameters), ``q.now()``
    (virtual time in ms), ``q.token()`` (a fresh deterministic lock token, ``W1:1``), ``q.begin(job,
    token)`` / ``q.end(job, reply)`` (the actor starts / finishes executing a job: the checks for duplicate
    executions and lost work read them), and ``q.client()`` / ``q.async_client()`` (another connection of
    this actor)."""

    def __init__(self, driver: _Driver) -> None:
        self._driver = driver
        self.actor: str = driver.actor
        self.keys: QueueKeys = driver.ctx.keys
        #: the actor's parameters (``with:`` in a scenario file)
        self.params: dict[str, Any] = dict(driver.spec.params)
        self._finished: set[str] = set()  # (jobs whose finish was noted since begin(): end() notes it once)

    @property
    def mode(self) -> str:
        """How this actor's EVALSHAs run: its own ``mode:``, else the run's finish mode."""
        return str(self._driver.spec.mode or self._driver.ctx.mode)

    @property
    def scripts(self) -> Any:
        """The run's :class:`emqlab.scripting.registry.ScriptSet` (``q.scripts["moveToFinished"].text``)."""
        return self._driver.ctx.scripts

    def note(self, result: Any) -> None:
        """Record one of this actor's results (an :class:`emqlab.protocol.outcome.Result`: ``Result("finish", job="1",
        outcome=Outcome.of(reply))``), as emqlab's own actors do: the report's ``results`` and ``expect:
        codes:`` read them. :meth:`end` records the finish itself; note the other calls (a fetch, an
        extend, a sweep)."""
        if getattr(result, "kind", None) in ("finish", "cancel") and getattr(result, "job", None) is not None:
            self._finished.add(result.job)
        ctx = self._driver.ctx
        self._driver.outer("note", (result,), lambda: ctx.note(self.actor, result))

    def now(self) -> int:
        return self._driver.outer("now", (), self._driver.ctx.now)

    def token(self) -> str:
        return self._driver.outer("token", (), lambda: self._driver.ctx.new_token(self.actor))

    def begin(self, job: str, token: str = "") -> None:
        self._finished.discard(job)
        self._driver.outer("begin", (job, token), lambda: self._driver.ctx.begin(self.actor, job, token))

    def end(self, job: str, reply: Any = 0) -> None:
        """The actor's finish of ``job`` came back with ``reply`` (a script's reply, an int code, or an
        exception): classified as emqlab's own workers' finishes are (:class:`emqlab.protocol.outcome.Outcome`),
        it ends the execution :meth:`begin` started and is recorded as the actor's ``finish`` result (in the
        report's ``results`` as ``finish:<job>:<code>``), unless the actor noted a finish of ``job`` itself
        since :meth:`begin`."""
        from emqlab.protocol.outcome import Outcome, Result

        outcome = Outcome.of(reply)
        self._driver.outer("end", (job, outcome), lambda: self._driver.ctx.end(self.actor, job, outcome))
        if job not in self._finished:
            self.note(Result("finish", job=job, outcome=outcome))
        self._finished.discard(job)

    def client(self, *, decode_responses: bool = False, retries: int = 0) -> redis.Redis:
        return self._driver.sync_client(decode_responses=decode_responses, retries=retries)

    def async_client(self, *, decode_responses: bool = False, retries: int = 0) -> redis.asyncio.Redis:
        return self._driver.async_client(decode_responses=decode_responses, retries=retries)


# -- scheduled connections ----------------------------------------------------------------------------------


class _Packed:
    """Commands kept as argument tuples where redis-py would have packed RESP bytes."""

    __slots__ = ("commands",)

    def __init__(self, commands: list[Command]) -> None:
        self.commands = commands


class _Wire:
    """The part of a scheduled connection shared by the sync and the asyncio classes: the commands sent
    since the last reply (the outbox) and the replies not read yet (the inbox)."""

    _driver: _Driver
    _name: str
    encoder: Any

    def _setup(self, driver: _Driver) -> None:
        self._driver = driver
        self._name = driver.connection_name()
        self._outbox: list[Command] = []
        self._inbox: list[Any] = []

    def _encode(self, args: Sequence[Any]) -> Command:
        encode = self.encoder.encode
        if args and isinstance(args[0], (str, bytes)):  # "SCRIPT LOAD", as redis-py's packer splits it
            head = args[0].encode() if isinstance(args[0], str) else args[0]
            if b" " in head:
                args = (*head.split(), *args[1:])
        out = []
        for a in args:
            v = encode(a)
            out.append(v if type(v) is bytes else bytes(v))
        return tuple(out)

    def _queue(self, packed: Any) -> None:
        parts = packed if isinstance(packed, list) else [packed]
        for part in parts:
            if not isinstance(part, _Packed):
                raise ActorError(f"{self._driver.actor} wrote raw bytes to its connection: a scheduled connection"
                                 " takes commands (execute_command, pipelines), not RESP")
            self._outbox.extend(part.commands)

    def _next(self, replies: list[Any] | None, disable_decoding: bool) -> Any:
        if replies is not None:
            self._inbox.extend(replies)
        reply = self._inbox.pop(0)
        if isinstance(reply, redis.exceptions.ConnectionError):
            self._inbox.clear()
            raise reply
        if isinstance(reply, redis.exceptions.ResponseError):  # an error reply (nested ones stay values)
            raise reply
        return _convert(reply, self.encoder, not disable_decoding)

    def _request(self) -> Request:
        if not self._outbox:
            raise ActorError(f"{self._driver.actor} read a reply it never asked for (nothing was sent on its"
                             " connection): it would wait forever")
        req = Request(self._name, tuple(self._outbox))
        self._outbox = []
        return req


def _convert(reply: Any, encoder: Any, decode: bool) -> Any:
    from emqlab.scripting.host import Status

    if isinstance(reply, Status):
        reply = reply.value
    if isinstance(reply, bytes):
        return encoder.decode(reply) if decode else reply
    if isinstance(reply, list):
        return [_convert(x, encoder, decode) for x in reply]
    return reply


class ScheduledConnection(_Wire, redis.connection.Connection):
    """A redis-py connection with no socket: what is sent waits for the scheduler; reading a reply hands
    the request to the Runner (a greenlet switch) and returns when the scheduler has run it."""

    def connect(self, *args: Any, **kwargs: Any) -> None:
        pass

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_connect(self, *args: Any, **kwargs: Any) -> None:
        pass

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._outbox = []
        self._inbox = []

    def check_health(self) -> None:
        pass

    def can_read(self, timeout: float = 0) -> bool:
        return False

    def pack_command(self, *args: Any) -> Any:
        return [_Packed([self._encode(args)])]

    def pack_commands(self, commands: Any) -> Any:
        return [_Packed([self._encode(args) for args in commands])]

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        self._outbox.append(self._encode(args))

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self._queue(command)

    def read_response(self, disable_decoding: bool = False, **kwargs: Any) -> Any:
        replies = None
        if not self._inbox:
            replies = self._driver.round_trip(self._request())
        return self._next(replies, disable_decoding)


class _Await:
    """An awaitable that hands a request to the coroutine's driver and resumes with the replies."""

    __slots__ = ("request",)

    def __init__(self, request: Request) -> None:
        self.request = request

    def __await__(self) -> Generator[Any, Any, Any]:
        replies = yield self
        return replies


class ScheduledAsyncConnection(_Wire, redis.asyncio.connection.Connection):
    """The ``redis.asyncio`` twin of :class:`ScheduledConnection`: reading a reply awaits the scheduler."""

    async def connect(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def on_connect(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._outbox = []
        self._inbox = []

    async def check_health(self) -> None:
        pass

    async def can_read_destructive(self) -> bool:
        return False

    async def can_read(self, timeout: float = 0) -> bool:
        return False

    @property
    def is_connected(self) -> bool:
        return True

    def pack_command(self, *args: Any) -> Any:
        return [_Packed([self._encode(args)])]

    def pack_commands(self, commands: Any) -> Any:
        return [_Packed([self._encode(args) for args in commands])]

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        self._outbox.append(self._encode(args))

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self._queue(command)

    async def read_response(self, disable_decoding: bool = False, **kwargs: Any) -> Any:  # type: ignore[override]
        replies = None
        if not self._inbox:
            replies = await _Await(self._request())
        return self._next(replies, disable_decoding)


_DRIVER_INFO: dict[str, Any] | None = None


def _driver_info() -> dict[str, Any]:
    """redis-py 8 reads its own version from the package metadata for every new connection (a few ms):
    resolved once here and handed to each scheduled connection (older redis-py: nothing to pass)."""
    global _DRIVER_INFO
    if _DRIVER_INFO is None:
        try:
            from redis.driver_info import resolve_driver_info
        except ImportError:  # pragma: no cover - redis-py before 8
            _DRIVER_INFO = {}
        else:
            _DRIVER_INFO = {"driver_info": resolve_driver_info()}
    return _DRIVER_INFO


class _Bound:
    """A connection pool whose new connections belong to one actor's driver (sync and asyncio alike)."""

    _driver: _Driver

    def make_connection(self) -> Any:
        conn: Any = super().make_connection()  # type: ignore[misc]
        conn._setup(self._driver)
        return conn


class _Pool(_Bound, redis.ConnectionPool):
    def __init__(self, driver: _Driver, **kwargs: Any) -> None:
        super().__init__(connection_class=ScheduledConnection, **_driver_info(), **kwargs)
        self._driver = driver


class _AsyncPool(_Bound, redis.asyncio.ConnectionPool):
    def __init__(self, driver: _Driver, **kwargs: Any) -> None:
        super().__init__(connection_class=ScheduledAsyncConnection, **_driver_info(), **kwargs)
        self._driver = driver


# -- the outside-client guard -------------------------------------------------------------------------------

_GUARDED = False


def _install_guard() -> None:
    """Make every redis-py connection (sync and asyncio, fakeredis's included) refuse to send while a
    Python actor's code runs, unless it is one of the scheduled connections (which override the send)."""
    global _GUARDED
    if _GUARDED:
        return
    _GUARDED = True
    sync_send = redis.connection.AbstractConnection.send_packed_command
    async_send = redis.asyncio.connection.AbstractConnection.send_packed_command

    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _RUNNING_HERE.drivers:
            _RUNNING_HERE.drivers[-1].outside(self)
        return sync_send(self, *args, **kwargs)

    async def aguarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _RUNNING_HERE.drivers:
            _RUNNING_HERE.drivers[-1].outside(self)
        return await async_send(self, *args, **kwargs)

    redis.connection.AbstractConnection.send_packed_command = guarded  # type: ignore[method-assign]
    redis.asyncio.connection.AbstractConnection.send_packed_command = aguarded  # type: ignore[method-assign]

    import time

    wall_sleep = time.sleep

    def sleep(seconds: Any) -> None:
        if _RUNNING_HERE.drivers:
            raise ActorError(f"{_RUNNING_HERE.drivers[-1].actor} called time.sleep({seconds!r}): the scheduler's"
                             " time is virtual (q.now()), so a wall-clock wait changes nothing in the run and"
                             " only makes it slow; leave it out — the scheduler decides when the actor runs next")
        wall_sleep(seconds)

    time.sleep = sleep


# -- the driver: a Python function as an actor generator ----------------------------------------------------


class _Done:
    pass


_DONE = _Done()
_T = TypeVar("_T")


class _Driver:
    """Runs one Python actor for one run (sync in a greenlet or by replay, async as a hand-driven coroutine)."""

    def __init__(self, ctx: ActorContext, spec: ActorSpec, fn: Callable[..., Any]) -> None:
        self.ctx = ctx
        self.spec = spec
        self.actor = spec.id
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self._conns = 0
        self._violation: str | None = None
        self._closing = False
        #: the replay driver's record of the actor's exchanges (None: greenlet, or an async actor)
        self.tape: Tape | None = None
        self.steps = 0
        #: the actor's script set by SHA1 (hex, bytes) -> name, built on its first script call
        self._names: dict[bytes, str] | None = None

    def connection_name(self) -> str:
        self._conns += 1
        return self.actor if self._conns == 1 else f"{self.actor}/{self._conns}"

    def sync_client(self, *, decode_responses: bool = False, retries: int = 0) -> redis.Redis:
        if self.is_async:
            raise ActorError(f"{self.actor} is an async actor: ask for q.async_client()")
        pool = _Pool(self, decode_responses=decode_responses, retry=Retry(NoBackoff(), retries), protocol=2,
                     max_connections=64)
        return redis.Redis(connection_pool=pool, single_connection_client=False)

    def async_client(self, *, decode_responses: bool = False, retries: int = 0) -> redis.asyncio.Redis:
        if not self.is_async:
            raise ActorError(f"{self.actor} is a synchronous actor: ask for q.client()")
        pool = _AsyncPool(self, decode_responses=decode_responses, retry=Retry(NoBackoff(), retries), protocol=2,
                          max_connections=64)
        return redis.asyncio.Redis(connection_pool=pool)

    def outside(self, connection: Any) -> None:
        where = getattr(connection, "host", None) or type(connection).__name__
        self._violation = (f"{self.actor} sent a command on a Redis connection of its own ({where}), outside the"
                           " client it was given: the scheduler cannot place it, so the run would not be what it"
                           " reports. Use the client passed to the actor (or q.client() for another connection)")
        raise ActorError(self._violation)

    def round_trip(self, request: Request) -> Any:
        """(In the actor's code.) Hand ``request`` to the Runner; return the replies."""
        if self.tape is not None:
            return self.tape.round_trip(request)
        if self._closing:
            raise redis.exceptions.ConnectionError(CLOSED_TEXT)
        return greenlet_round_trip(request)

    def outer(self, name: str, args: tuple[Any, ...], do: Callable[[], _T]) -> _T:
        """A call ``q.<name>(*args)`` of the actor's handle that asks or tells the run something: done now, or,
        replayed, from the tape."""
        if self.tape is None:
            return do()
        return self.tape.call(f"{name}({', '.join(map(repr, args))})", do)

    @contextmanager
    def running(self) -> Iterator[None]:
        """The actor's code runs meanwhile (the outside-client guard knows it)."""
        _RUNNING_HERE.drivers.append(self)
        try:
            yield
        finally:
            _RUNNING_HERE.drivers.pop()

    def check(self, request: Request) -> None:
        base = self.ctx.keys.base
        for cmd in request.commands:
            why = refusal(cmd, base)
            if why is not None:
                head = [a.decode("utf-8", "replace") for a in cmd[:3]]
                if cmd[0].upper() in (b"EVAL", b"EVAL_RO") and len(cmd) > 1:
                    head[1] = script_ref(cmd[1])  # (a script by its SHA1, as histories show it, not its text)
                raise ActorError(f"{self.actor}'s step {self.steps + 1} ({' '.join(head)}…) is refused: {why}")

    def _fail(self, e: BaseException) -> ActorError:
        if isinstance(e, ActorError):
            return e
        frame = _user_frame(e)
        if isinstance(e, RuntimeError) and "no running event loop" in str(e):  # asyncio.sleep, wait_for, …
            return ActorError(f"{self.actor} awaited an asyncio timer or task (at its step {self.steps + 1}{frame}):"
                              " an event loop's timers and tasks cannot be scheduled deterministically, so an"
                              " async actor may await only its client's commands")
        if isinstance(e, ImportError):  # (a missing library is no failure a worker would catch: install it)
            return ActorError(f"{self.actor} cannot run: {e}")
        return ActorError(f"{self.actor} raised {type(e).__name__}: {e} (at its step {self.steps + 1}{frame}); a"
                          " Python actor that raises stops the run — catch what your worker would catch")

    # -- the generator ---------------------------------------------------------------------------------
    def run(self) -> ActorGen:
        if self.is_async:
            return self._run_async(ActorHandle(self))
        return self._run_sync()

    def _run_code(self, step: Callable[[], Any]) -> Any:
        """Run the actor's own code (``step``) until it hands back a request, with the outside-client guard
        knowing it runs; what it raises becomes an :class:`ActorError`."""
        with self.running():
            try:
                out = step()
            except (KeyboardInterrupt, SystemExit):  # (a Ctrl-C or a stop signal: the command's, not the actor's)
                raise
            except BaseException as e:
                raise self._fail(e) from e
        if self._violation is not None:
            raise ActorError(self._violation)
        return out

    def _run_sync(self) -> ActorGen:
        def body() -> None:
            self._conns = 0  # (a replayed run makes its connections again: the same names)
            self.fn(self.sync_client(), ActorHandle(self))

        if sync_driver() == "greenlet":
            return greenlet_driven(self, body)
        self.tape = Tape(self.actor)
        return replayed(self, body, self.tape, ActorError)

    def _step_coro(self, coro: Any, value: Any) -> Any:
        def send() -> Any:
            try:
                return coro.send(value)
            except StopIteration:
                return _DONE

        out = self._run_code(send)
        if out is _DONE:
            return _DONE
        if not isinstance(out, _Await):
            raise ActorError(f"{self.actor} awaited {out!r}, which is not a reply of its Redis client: an event"
                             " loop's timers and tasks (asyncio.sleep, create_task, wait_for) cannot be scheduled"
                             " deterministically, so an async actor may await only its client's commands")
        return out.request

    def _run_async(self, handle: ActorHandle) -> ActorGen:
        client = self.async_client()
        coro = self.fn(client, handle)
        try:
            msg = self._step_coro(coro, None)
            while isinstance(msg, Request):
                replies = yield from self._serve(msg)
                msg = self._step_coro(coro, replies)
        finally:
            if inspect.getcoroutinestate(coro) != inspect.CORO_CLOSED:
                self._closing = True
                try:
                    coro.close()
                except BaseException:  # noqa: BLE001
                    pass

    def _serve(self, request: Request) -> Generator[Op, Any, list[Any]]:
        """Turn one request into steps: one step for the round trip, or a split script's steps."""
        self.check(request)
        cmds = request.commands
        if len(cmds) == 1 and self._splits(cmds[0]):
            source = self._source(cmds[0])
            if source is not None:
                value = yield from self._split(cmds[0], source)
                self.steps += 1
                return [value]
        label = cmds[0][0].decode("utf-8", "replace").upper() if len(cmds) == 1 else "PIPELINE"
        if len(cmds) == 1:
            op = Op("command", label, command=cmds[0], session=True, conn=request.conn, python=True,
                    section="commands", script=self.script_of(cmds[0]))
        else:
            def batch(_now: int, c: tuple[Command, ...] = cmds) -> Sequence[Command]:
                return c

            op = Op("command", label, batch=batch, session=True, conn=request.conn, python=True, section="commands",
                    scripts=tuple(n for c in cmds if (n := self.script_of(c)) is not None))
        reply = yield op
        self.steps += 1
        if len(cmds) == 1 or isinstance(reply, BaseException):
            return [reply]
        return list(reply)

    def script_of(self, cmd: Command) -> str | None:
        """The script of the actor's script set that ``cmd`` (an EVALSHA by its SHA1, an EVAL by its
        source's) asks to run, by name; ``None`` for another command or a script outside the set."""
        name = cmd[0].upper()
        if name not in SCRIPT_CALLS or len(cmd) < 2:
            return None
        sha = cmd[1].lower() if name.startswith(b"EVALSHA") else sha1_hex(cmd[1])
        if self._names is None:
            self._names = {s.sha.encode(): s.name for s in self.ctx.scripts}
        return self._names.get(sha)

    def _splits(self, cmd: Command) -> bool:
        mode = self.spec.mode or self.ctx.mode
        return mode == "split" and cmd[0].upper() in SCRIPT_CALLS

    def _source(self, cmd: Command) -> bytes | None:
        name = cmd[0].upper()
        if name in (b"EVAL", b"EVAL_RO"):
            return cmd[1]
        return self.ctx.script_source(cmd[1].lower())

    def _split(self, cmd: Command, source: bytes) -> Generator[Op, Any, Any]:
        try:
            n = int(cmd[2])
        except (IndexError, ValueError):
            return redis.exceptions.ResponseError(messages.NOT_AN_INTEGER)
        keys, args = cmd[3:3 + n], cmd[3 + n:]
        label = f"script {cmd[1][:8].decode('utf-8', 'replace')}" if cmd[0].upper().startswith(b"EVALSHA") \
            else "EVAL"
        base = self.ctx.keys.base
        run = split_run(self.ctx, None, label, source=source, keys=keys, args=args, script=self.script_of(cmd),
                        read_only=cmd[0].upper().endswith(b"_RO"))
        reply: Any = None
        first = True
        while True:  # every redis.call of the split script is checked like the actor's own commands
            try:
                op = next(run) if first else run.send(reply)
            except StopIteration as stop:
                return stop.value
            first = False
            assert op.command is not None
            why = refusal(op.command, base)
            if why is not None:
                raise ActorError(f"{self.actor}'s split script ({label}) sent"
                                 f" {op.command[0].decode('utf-8', 'replace')}, which is refused: {why}")
            reply = yield op


def _user_frame(e: BaseException) -> str:
    tb = e.__traceback__
    here = str(Path(__file__).resolve().parents[1])  # any frame of the emqlab package
    last = ""
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if not f.startswith(here) and "site-packages" not in f and "greenlet" not in f:
            last = f", {Path(f).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return last


def python_actor(ctx: ActorContext, spec: ActorSpec) -> ActorGen:
    """The actor generator of a ``python`` actor (``spec.python``: a callable or ``"module:function"``)."""
    _install_guard()
    fn = resolve(spec.python, getattr(ctx.scenario, "base_dir", None))
    return _Driver(ctx, spec, fn).run()


FACTORIES["python"] = python_actor  # the actor kind is this module's: the actors' table does not import it


__all__ = ["ActorError", "ActorHandle", "Request", "ScheduledAsyncConnection", "ScheduledConnection",
           "python_actor", "refusal", "resolve"]
