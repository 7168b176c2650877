"""How a synchronous Python actor is paused at each round trip, so that the scheduler decides when it goes on:
in a greenlet, or, where there is no greenlet (Pyodide has no build of it), by deterministic replay.

* **greenlet** (the ``greenlet`` package): the actor's function runs in a greenlet; reading a reply
  switches back to the Runner with the request, and the Runner switches in again with the reply.
* **replay**: the function is run again from its start each time the scheduler answers one of its round
  trips. A :class:`Tape` keeps what the actor exchanged with the run so far — each round trip's request and
  replies, each call of its handle (``q.now()``, ``q.token()``, ``q.begin``/``q.end``/``q.note``) and what it
  returned — and serves it again to the new run without sending or doing anything; the first round trip
  past the tape is the actor's next request, where the run is stopped by :class:`Pause`, a
  ``BaseException`` (an actor's ``except Exception`` does not catch it). While it unwinds, its ``finally``
  blocks send nothing and call nothing on the handle: what they try is stopped by the same :class:`Pause`.
  When the actor's process ends while it waits for a reply (a crash fault, the end of the run), it is run
  again to that round trip and :class:`Closed` is raised there, as greenlet raises ``GreenletExit``: its
  ``finally`` blocks then run for real, every command answered by a closed connection. An actor of *n*
  round trips runs its code *n* + 1 times (its Python work grows with *n*²; its Redis work does not).

Both give the same runs, provided the actor's code is a function of its replies and handle calls alone
(replay's rule): the same requests and handle calls in the same order each time it is run again — no wall
clock, no random numbers, no state kept between runs (a global counter, a cache), no effects outside its
client and its handle (printing, files), which would happen again on every replay. A run again that sends
a request or calls the handle otherwise than the tape holds is stopped with an error naming both (the
driver's :class:`ActorError <emqlab.engine.pyactors.ActorError>`), as is an actor that catches
:class:`Pause` and carries on.

The driver is greenlet when it imports, replay otherwise; ``EMQLAB_PYACTORS=replay`` (or ``greenlet``)
chooses it, read when each run's actor starts (so tests compare the two on CPython).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

#: the environment variable that chooses the driver of synchronous actors (``greenlet``, ``replay``)
DRIVER_VARIABLE = "EMQLAB_PYACTORS"
T = TypeVar("T")


def sync_driver() -> str:
    """``"greenlet"`` or ``"replay"``: :data:`DRIVER_VARIABLE` when set, else greenlet where it imports.
    Raises ``ValueError`` for another value, ``ImportError`` when ``greenlet`` is asked for and missing."""
    asked = os.environ.get(DRIVER_VARIABLE, "").strip().lower()
    if asked not in ("", "greenlet", "replay"):
        raise ValueError(f"{DRIVER_VARIABLE}={asked!r}: the driver of synchronous Python actors is 'greenlet' or"
                         " 'replay'")
    if asked == "greenlet":
        import greenlet  # noqa: F401 - asked for: its ImportError says what is missing
    global _HAS_GREENLET
    if not asked and _HAS_GREENLET is None:  # (probed once: a failed import searches the path again each time)
        try:
            import greenlet  # noqa: F401
        except ImportError:
            _HAS_GREENLET = False
        else:
            _HAS_GREENLET = True
    return asked or ("greenlet" if _HAS_GREENLET else "replay")


_HAS_GREENLET: bool | None = None


class Driver(Protocol):
    """What the two ways need of :class:`emqlab.engine.pyactors._Driver`."""

    actor: str
    _closing: bool

    def _run_code(self, step: Callable[[], Any]) -> Any: ...

    def _serve(self, request: Any) -> Generator[Any, Any, list[Any]]: ...

    def running(self) -> Any: ...


class _Done:
    pass


DONE = _Done()
#: what the actor's process answers once it has ended (a crash fault): redis-py's error for a lost connection
CLOSED_TEXT = "the process crashed: its connections are closed"


def greenlet_driven(driver: Driver, body: Callable[[], None]) -> Generator[Any, Any, None]:
    """The actor generator of ``body`` (the actor's function on its client and handle) in a greenlet."""
    import greenlet

    def main() -> _Done:
        body()
        return DONE

    g = greenlet.greenlet(main)
    try:
        msg = driver._run_code(g.switch)
        while msg is not DONE:
            replies = yield from driver._serve(msg)
            msg = driver._run_code(functools.partial(g.switch, replies))
    finally:
        if not g.dead:  # its process ends: its finally blocks run, each command answered by a closed connection
            driver._closing = True
            with driver.running():
                try:
                    g.throw(greenlet.GreenletExit)
                except BaseException:  # noqa: BLE001 - whatever the actor's finally blocks raise while it dies
                    pass


def greenlet_round_trip(request: Any) -> Any:
    """(In the actor's greenlet.) Hand ``request`` to the Runner; the replies."""
    import greenlet

    return greenlet.getcurrent().parent.switch(request)


class Pause(BaseException):  # noqa: N818 - not an error: the actor is stopped where the scheduler decides
    """Raised in a replayed actor at its first round trip past the tape: the run stops there."""


class Closed(BaseException):  # noqa: N818
    """Raised in a replayed actor at the round trip it was paused at when its process ended (a crash fault,
    the end of the run): greenlet's ``GreenletExit`` at the same point."""


_RUN, _UNWIND, _CLOSING, _CLOSED = "run", "unwind", "closing", "closed"


class Tape:
    """One synchronous actor's exchanges with its run, in order: ``("reply", request, replies)`` for a round
    trip, ``("call", what, value)`` for a call of its handle (``what``: the call and its arguments, as text)."""

    def __init__(self, actor: str) -> None:
        self.actor = actor
        self.entries: list[tuple[str, Any, Any]] = []
        self.cursor = 0
        self.state = _RUN
        #: the request the last run stopped at (None once answered, or when the actor returned)
        self.pending: Any = None
        #: why the last run was stopped as not replayable (the driver raises it as an ActorError)
        self.violation: str | None = None

    def _differs(self, what: str, detail: str = "") -> None:
        got = self.entries[self.cursor] if self.cursor < len(self.entries) else None
        first = ("nothing more (it had finished)" if got is None else _describe(got))
        self.violation = (f"{self.actor} ran differently when run again from its start (the replay driver, used"
                          f" where greenlet is missing): its exchange {self.cursor + 1} was {first} the first time"
                          f" and {what} now{detail}. Replay needs an actor's code to be a function of its replies and"
                          " handle calls: no wall clock, random numbers or state kept between runs")
        self.state = _UNWIND
        raise Pause

    def round_trip(self, request: Any) -> list[Any]:
        """The replies to ``request``: from the tape; past it, :class:`Pause` (its first run) or :class:`Closed`
        (its process ended); after :class:`Closed`, a closed connection's error."""
        if self.state == _UNWIND:
            raise Pause
        if self.state == _CLOSED:
            import redis

            raise redis.exceptions.ConnectionError(CLOSED_TEXT)
        if self.cursor < len(self.entries):
            kind, logged, replies = self.entries[self.cursor]
            if kind != "reply" or logged != request:
                self._differs(_describe(("reply", request, None)), _difference(logged, request, kind))
            self.cursor += 1
            return list(replies)
        if self.state == _CLOSING:
            if request != self.pending:
                self._differs(_describe(("reply", request, None)))
            self.state = _CLOSED
            raise Closed
        self.pending = request
        self.state = _UNWIND
        raise Pause

    def call(self, what: str, do: Callable[[], T]) -> T:
        """A call of the handle (``what`` names it and its arguments): its value from the tape, or done now
        and taped; nothing while the actor unwinds; done, untaped, once its process has ended."""
        if self.state == _UNWIND:
            raise Pause
        if self.state == _CLOSED:
            return do()
        if self.cursor < len(self.entries):
            kind, logged, value = self.entries[self.cursor]
            if kind != "call" or logged != what:
                self._differs(f"a call q.{what}")
            self.cursor += 1
            return value
        if self.state == _CLOSING:
            self._differs(f"a call q.{what}")
        value = do()
        self.entries.append(("call", what, value))
        self.cursor += 1
        return value

    def attempt(self, body: Callable[[], None]) -> Any:
        """Run ``body`` from its start over the tape: the request it stopped at, or :data:`DONE` (it returned,
        or :attr:`violation` says why it cannot be replayed)."""
        self.cursor, self.state, self.pending, self.violation = 0, _RUN, None, None
        returned = False
        try:
            body()
            returned = True
        except Pause:
            pass
        except BaseException:
            if self.state == _RUN:  # the actor's own error: the driver's to report
                raise
        if self.violation is not None:
            return DONE
        if self.state == _UNWIND:
            if returned:
                self.violation = (f"{self.actor} went on after the replay driver stopped it at a round trip (a"
                                  " BaseException, raised where greenlet would pause it): an actor run without"
                                  " greenlet must not catch BaseException and carry on (a bare except:, except"
                                  " BaseException)")
                return DONE
            return self.pending
        if self.cursor < len(self.entries):
            try:
                self._differs("a return from its function")
            except Pause:
                pass
        return DONE

    def answer(self, request: Any, replies: list[Any]) -> None:
        self.entries.append(("reply", request, list(replies)))
        self.pending = None

    def close(self, body: Callable[[], None]) -> None:
        """The actor's process ends while it waits for the reply to :attr:`pending`: run it again to that round
        trip, raise :class:`Closed` there and let its ``finally`` blocks run, as a greenlet's would."""
        self.cursor, self.state, self.violation = 0, _CLOSING, None
        try:
            body()
        except BaseException:  # noqa: BLE001 - whatever the actor's finally blocks raise while it dies
            pass
        self.pending = None


def _describe(entry: tuple[str, Any, Any]) -> str:
    kind, what, _ = entry
    if kind == "call":
        return f"a call q.{what}"
    cmds = what.commands
    words = " ".join(a.decode("utf-8", "replace")[:40] for a in cmds[0][:4])
    more = f" (+{len(cmds) - 1} more commands)" if len(cmds) > 1 else ""
    return f"a round trip on {what.conn}: {words}{'…' if len(cmds[0]) > 4 else ''}{more}"


def _difference(logged: Any, now: Any, kind: str) -> str:
    """Where two round trips' commands first differ (nothing when the tape held no round trip there)."""
    if kind != "reply":
        return ""
    for i, (was, new) in enumerate(zip(logged.commands, now.commands, strict=False)):
        for j, (a, b) in enumerate(zip(was, new, strict=False)):
            if a != b:
                return (f" (its command {i + 1}'s argument {j + 1} is {b.decode('utf-8', 'replace')[:60]!r}, was"
                        f" {a.decode('utf-8', 'replace')[:60]!r})")
        if len(was) != len(new):
            return f" (its command {i + 1} has {len(new) - 1} arguments, had {len(was) - 1})"
    return ""


def replayed(driver: Driver, body: Callable[[], None], tape: Tape,
             fail: Callable[[str], BaseException]) -> Generator[Any, Any, None]:
    """The actor generator of ``body`` by replay over ``tape``; ``fail(text)`` is the error that stops the run
    when the actor is not replayable."""

    def attempt() -> Any:
        out = tape.attempt(body)
        if tape.violation is not None:
            raise fail(tape.violation)
        return out

    msg = driver._run_code(attempt)
    try:
        while msg is not DONE:
            replies = yield from driver._serve(msg)
            tape.answer(msg, replies)
            msg = driver._run_code(attempt)
    finally:
        if tape.pending is not None:  # stopped at a round trip: its process ends there
            driver._closing = True
            with driver.running():
                tape.close(body)


__all__ = ["CLOSED_TEXT", "DRIVER_VARIABLE", "Closed", "Pause", "Tape", "greenlet_driven", "greenlet_round_trip",
           "replayed", "sync_driver"]
