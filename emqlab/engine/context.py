"""The narrow seams between the engine's parts.

* :class:`ActorContext` — what an actor may ask of the run it is part of (instead of the whole Runner):
  the queue's keys, the scenario, the script set, the virtual clock, lock tokens, execution bookkeeping,
  typed results, and a client-side script run for a split step.
* :class:`Instrument` — an observer of the run with optional hooks (in the manner of trio's
  ``Instrument``): ``before_step`` / ``after_step`` around each step, ``after_run`` when the history is
  made. Effect recording (:class:`emqlab.engine.recorder.EffectRecorder`) and the timed model's exposure
  measurement are instruments.
  :class:`RunView` is what an instrument may read of the run.
* :data:`Check` — the anomaly check the Runner is given (it imports no analysis itself).
* :class:`OwnScripts` — the actor context of an actor with a script set of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from emqlab.engine.effects import Effect, QueueView
    from emqlab.engine.history import Anomaly, History
    from emqlab.engine.specs import Scenario
    from emqlab.protocol.keys import QueueKeys
    from emqlab.protocol.outcome import Outcome, Result
    from emqlab.scripting.host import ScriptRun
    from emqlab.scripting.registry import ScriptSet

Mode = Literal["atomic", "split", "finish-then-fetch", "transaction"]
FaultKind = Literal["crash", "disconnect", "script-flush", "restart"]
#: the finish modes: one EVALSHA; the same script run client-side one command at a time; EVALSHA without
#: fetch-next and a separate fetch; an optimistic WATCH/MULTI/EXEC transaction (and a separate fetch)
MODES: tuple[str, ...] = ("atomic", "split", "finish-then-fetch", "transaction")


@dataclass(frozen=True)
class Fault:
    """A fault event, one step the scheduler places like any other (``docs/concepts.md``, "Faults").

    * ``crash`` — process ``target`` dies: it sends nothing more (a split script it was running stops
      where it was), its connection closes; its open executions end with a crash (``info``: nobody knows
      how far they got).
    * ``disconnect`` — ``target``'s connection drops while its *next* round trip is in flight: with
      ``applied`` the request reached the server and ran and only the reply is lost, without it the request
      never arrived. Either way ``target`` sees a connection error (Jepsen's ``info``: it cannot tell which).
    * ``script-flush`` — the server's script cache is emptied (``SCRIPT FLUSH``, a failover to a replica that
      never loaded the scripts, a restart): the next EVALSHA of each script gets NOSCRIPT, and the client's
      fallback decides what follows. Only on a server emqlab owns (fakeredis).
    * ``restart`` — the server restarts without persistence: every key of the run is gone, the script cache
      is empty, and every connection drops (each process's next round trip fails with a connection error,
      its request never arrived; WATCH and MULTI state are gone). Only on a server emqlab owns (fakeredis):
      emqlab never restarts a server it did not start."""

    kind: FaultKind
    target: str | None = None
    applied: bool = True


class ActorContext(Protocol):
    """What an actor generator may use. The Runner implements it."""

    keys: QueueKeys
    scenario: Scenario
    scripts: ScriptSet
    mode: str

    def now(self) -> int:
        """Virtual time in ms (the time of the step about to run)."""
        ...

    def new_token(self, actor: str) -> str:
        """A fresh lock token for ``actor`` (``W1:1``, ``W1:2``, …)."""
        ...

    def current_token(self, actor: str | None, job: str) -> str | None:
        """The token of ``actor``'s latest execution of ``job``."""
        ...

    def begin(self, actor: str, job: str, token: str) -> None:
        """``actor`` starts executing ``job`` under ``token``."""
        ...

    def end(self, actor: str, job: str, outcome: Outcome) -> None:
        """``actor``'s finish of ``job`` came back with ``outcome``."""
        ...

    def note(self, actor: str, result: Result) -> None:
        """Record one of ``actor``'s results (a fetch, a finish, a sweep, …)."""
        ...

    def script_run(self) -> int:
        """A new script-run number (the commands of one split script share it)."""
        ...

    def connection_lost(self, actor: str) -> bool:
        """True when ``actor``'s last reply was lost to a dropped connection (a ``disconnect`` fault); the
        reply the actor got was a ``redis.ConnectionError``."""
        ...

    def script_source(self, sha: bytes) -> bytes | None:
        """The source of script ``sha`` (lower-case hex) if the run's script cache holds it (Python actors'
        EVALSHA, :mod:`emqlab.engine.pyactors`)."""
        ...

    def split(self, script: str | bytes, keys: Sequence[Any], args: Sequence[Any], *,
              read_only: bool = False) -> ScriptRun:
        """Start a script client-side (one ``redis.call`` per step): ``script`` is a name in the context's
        script set, or Lua text (bytes); ``read_only`` for an ``EVAL_RO``. The run is the Runner's and is
        closed when the Runner resets."""
        ...


class OwnScripts:
    """The actor context of an actor with a ``script:`` of its own: the run's context ``runner``, but with
    that actor's script set ``scripts`` for the scripts it runs split (its atomic steps are looked up by
    actor in the Runner)."""

    def __init__(self, runner: ActorContext, scripts: ScriptSet) -> None:
        self._runner = runner
        self.scripts = scripts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def split(self, script: str | bytes, keys: Sequence[Any], args: Sequence[Any], *,
              read_only: bool = False) -> ScriptRun:
        return self._runner.split(self.scripts[script].text if isinstance(script, str) else script, keys, args,
                                  read_only=read_only)

    def script_text(self, name: str) -> bytes:
        return self.scripts[name].text


@dataclass
class StepRecord:
    """A step while instruments look at it (it is frozen into a :class:`emqlab.engine.history.Step` afterwards):
    the actor, the op's name and shown arguments, the raw reply, and the effects recorded so far."""

    actor: str
    kind: str
    op: str
    args: list[str]
    reply: Any
    command: tuple[bytes, ...] | None
    effects: list[Effect] = field(default_factory=list)
    #: keys the step wrote (from the command table); ``None`` when unknown (a script, a clock event)
    written: Sequence[bytes] | None = None
    read_only: bool = False
    #: the commands of a pipelined or MULTI … EXEC step (``command`` is then ``None``)
    batch: Sequence[tuple[bytes, ...]] | None = None
    #: every command the step sent, in order, each with its raw reply (or the exception it raised), when
    #: the Runner knows them all (a command; an atomic script run through the Lua host); ``None`` otherwise
    calls: Sequence[tuple[Sequence[Any], Any]] | None = None


class RunView(Protocol):
    """What an instrument may read of the run it observes (the Runner implements it)."""

    keys: QueueKeys
    scenario: Scenario
    job_ids: list[str]
    #: ``exec(*command) -> reply``: a command on the run's backend
    exec: Callable[..., Any]
    #: steps taken so far in this run
    index: int

    def initial_view(self) -> QueueView:
        """The queue's view in the initial state."""
        ...


class Instrument(Protocol):
    """An observer of a run. Every method is optional; the Runner calls the ones an instrument has."""

    #: the input this instrument records for the checks (``"effects"``), or several, if any
    records: str | tuple[str, ...] | None


Check = Callable[["History", "Scenario"], "tuple[Sequence[Anomaly], Sequence[str]]"]
"""An anomaly check: ``check(history, scenario) -> (findings, kinds it could not check)``."""


__all__ = ["ActorContext", "Check", "Fault", "FaultKind", "Instrument", "MODES", "Mode", "OwnScripts", "RunView",
           "StepRecord"]
