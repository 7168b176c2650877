"""The one home of how emqlab names what a server refused: :class:`BackendError` and its kinds, and
:class:`ServerFault` — an error reply that is no answer of the system under test (out of memory, a busy
script, a read-only replica, a restart, …), with the scope it spoils (one run or the whole exploration)."""

from __future__ import annotations

import enum

import redis

from emqlab.backend import cluster as _cluster
from emqlab.protocol.errors import error_text


class BackendError(Exception):
    """A backend could not be reached or used; the message is one line meant for a terminal."""


class FaultRefused(BackendError):
    """A fault the scenario asks for that emqlab refuses on this backend (a restart or a script flush of a
    server it did not start): a usage error — the fault is the scenario's subject, and the server is fine."""


class FaultScope(enum.Enum):
    """How much of an exploration an infrastructure error spoils.

    * ``RUN`` — the run it happened in, only: the next run starts from a fresh initial state and may well
      complete (NOSCRIPT where EVAL cannot answer it, OOM, BUSY with a
      script that SCRIPT KILL stopped or that another client runs, TRYAGAIN, NOREPLICAS, MISCONF, a failed
      initial-state write or run-index renewal). The exploration goes on without that run.
    * ``EXPLORATION`` — every later run too, because the server is no longer the one the exploration began
      on or no longer answers: it restarted or failed over (``emqlab.engine.live.ServerWatch``), READONLY
      (a failover made it a replica), LOADING, MOVED/ASK/CLUSTERDOWN/MASTERDOWN (the queue's slot or its
      primary moved), NOPERM/NOAUTH (the user lacks what every run needs), a lost connection or a command
      timeout, a script Redis refuses to kill. The exploration stops and says how much it covered.
    """

    RUN = "run"
    EXPLORATION = "exploration"


#: fault codes (:func:`fault_code`) after which no later run can be trusted (:attr:`FaultScope.EXPLORATION`);
#: every other code aborts one run
EXPLORATION_FAULTS = frozenset({"READONLY", "LOADING", "MOVED", "ASK", "CLUSTERDOWN", "MASTERDOWN", "NOPERM",
                                "NOAUTH", "RESTARTED", "CONNECTION", "UNKILLABLE"})


class ServerFault(BackendError):
    """The server answered with an error about itself, not about the queue (out of memory, read-only
    replica, busy with a script, loading, a cluster redirection, a lost connection): the run cannot go on
    truthfully, so it stops instead of treating the error as the step's answer.

    ``code`` is the error's code (``OOM``, ``NOSCRIPT``, ``BUSY``, …; ``RESTARTED`` for a restart or failover,
    ``CONNECTION`` for a lost connection or a timeout, ``UNKILLABLE`` for a script Redis would not kill),
    ``detail`` the server's words (one line, no actor or step), ``scope`` what it spoils
    (:class:`FaultScope`, from the code by default: :data:`EXPLORATION_FAULTS`). The message (``str()``) is
    one line for a terminal."""

    def __init__(self, message: str, *, code: str = "", detail: str = "", scope: FaultScope | None = None) -> None:
        super().__init__(message)
        self.code = code or fault_code(detail or message)
        self.detail = detail or message
        self.scope = scope or (FaultScope.EXPLORATION if self.code in EXPLORATION_FAULTS else FaultScope.RUN)


def fault_code(text: str) -> str:
    """The code of a server error's text (``"OOM command not allowed …"`` → ``OOM``; a script's
    ``"ERR Error running script: …: OOM …"`` → ``OOM``); ``ERR`` when it names none of
    :data:`SERVER_FAULT_PREFIXES`."""
    for part in (text, text.rsplit(": ", 1)[-1]):
        word = part.split(" ", 1)[0].upper().lstrip("-")
        if word in SERVER_FAULT_PREFIXES:
            return word
    return "ERR"


#: error prefixes that describe the server's state, not the command's answer (redis.io, "Errors")
SERVER_FAULT_PREFIXES = ("NOSCRIPT", "OOM", "READONLY", "BUSY", "LOADING", "MOVED", "ASK", "MASTERDOWN", "CLUSTERDOWN",
                         "TRYAGAIN", "NOREPLICAS", "MISCONF", "NOPERM", "NOAUTH")


def server_fault(reply: object) -> str | None:
    """The error text when ``reply`` is an error about the server's state (:data:`SERVER_FAULT_PREFIXES`),
    also when a script's ``redis.call`` raised it; else ``None``."""
    if not isinstance(reply, redis.exceptions.ResponseError):
        return None
    reply = _cluster.full_error(reply)  # (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, MASTERDOWN: redis-py strips the code)
    text = str(reply)
    e = redis.exceptions
    named = {e.OutOfMemoryError: "OOM", e.ReadOnlyError: "READONLY", e.BusyLoadingError: "LOADING",
             e.NoScriptError: "NOSCRIPT", e.NoPermissionError: "NOPERM", e.AuthenticationError: "NOAUTH"}
    for cls, prefix in named.items():  # redis-py strips the prefix of the errors it has a class for
        if isinstance(reply, cls) and not text.startswith(prefix):
            return error_text(f"{prefix} {text}")
    for part in (text, text.rsplit(": ", 1)[-1]):
        if part.split(" ", 1)[0].upper().lstrip("-") in SERVER_FAULT_PREFIXES:
            return error_text(text)
    return None


class KeysExist(BackendError):
    """The run's keys already exist on the server: emqlab refuses to touch them."""
