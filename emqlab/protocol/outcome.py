"""Replies as typed values: what a script call came back with (:class:`Outcome`) and what an actor reports
about one of its calls (:class:`Result`).

The text forms are the ones the history files, the CLI and the graders have always shown: an outcome is
``0``, ``-2``, ``next`` (a finish or fetch that returned the next job) or ``ERR <message>``; a result is
``finish:1:-2``, ``fetch:next``, ``sweep:1,2``, ``extend:0``, ``lapsed``, ``add:1``, ``cancel:1:-3``. The
engine passes the typed values; ``str()`` makes the text at the edges and :meth:`Result.parse` reads it
back (History JSON v1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from emqlab.protocol.errors import error_text

#: The negative codes the scripts return (``PROTOCOL.md`` §1.3), by their protocol names
#: (BullMQ ``src/enums/error-code.ts``).
RETURN_CODES: dict[int, str] = {
    -1: "JobNotExist",
    -2: "JobLockNotExist",
    -3: "JobNotInState",
    -4: "JobPendingChildren",
    -5: "ParentJobNotExist",
    -6: "JobLockMismatch",
    -7: "ParentJobCannotBeReplaced",
    -9: "JobHasFailedChildren",
}

#: What each code means, in a few words.
RETURN_CODE_MEANINGS: dict[int, str] = {
    -1: "missing key",
    -2: "missing lock",
    -3: "not in active state",
    -4: "pending children",
    -5: "missing parent",
    -6: "lock mismatch",
    -7: "parent cannot be replaced",
    -9: "failed children",
}



@dataclass(frozen=True, slots=True)
class Outcome:
    """A classified script reply.

    ``code`` is the integer reply (``0`` = done, negative = the protocol's refusal codes, ``PROTOCOL.md``
    §1.3), or ``None`` for a reply that is not an integer; ``next_job`` is the id a fetch (or a finish with
    fetch-next) returned; ``error`` the error text of an error reply (a Lua error included)."""

    code: int | None = 0
    next_job: str | None = None
    error: str | None = None
    #: a reply that is neither an integer, a next-job reply nor an error (shown as is)
    other: str | None = None
    #: the reply was a next-job array with a job in it (``[fields, id, …]``), as opposed to "nothing"
    fetched: bool = False

    @classmethod
    def of(cls, reply: Any) -> Outcome:
        """Classify a raw reply (bytes, int, list, ``None`` or an exception instance). A nil reply is no
        code: it is shown as ``nil``, never as ``0`` (a finish that forgot its ``return 0`` did not say done)."""
        if isinstance(reply, BaseException):
            return cls(code=None, error=error_text(reply))
        if isinstance(reply, bool):
            return cls(code=int(reply))
        if isinstance(reply, int):
            return cls(code=reply)
        if reply is None:  # (a script's ``return nil``, or ``return false``: Redis answers both with nil)
            return cls(code=None, other="nil")
        if isinstance(reply, list):
            if reply and reply[0] not in (0, None):
                nxt = None
                if len(reply) >= 2 and isinstance(reply[0], list):
                    jid = reply[1]
                    nxt = jid.decode() if isinstance(jid, bytes) else str(jid)
                return cls(code=None, next_job=nxt, fetched=True)
            return cls(code=0)
        if isinstance(reply, bytes):
            return cls(code=None, other=reply.decode("utf-8", "replace"))
        return cls(code=None, other=str(reply))

    @classmethod
    def parse(cls, text: str) -> Outcome:
        """The inverse of ``str``: ``"0"``, ``"-2"``, ``"next"``, ``"ERR …"``, anything else as is."""
        if text.startswith("ERR "):
            return cls(code=None, error=text[4:])
        if text == "next":
            return cls(code=None, fetched=True)
        try:
            return cls(code=int(text))
        except ValueError:
            return cls(code=None, other=text)

    @property
    def ok(self) -> bool:
        """The call did what it was asked: no error reply and no negative code."""
        return self.error is None and not (self.code is not None and self.code < 0)

    @property
    def refused(self) -> bool:
        """A negative protocol code: the script checked something and wrote nothing (or little)."""
        return self.code is not None and self.code < 0

    @property
    def code_name(self) -> str | None:
        """The protocol name of a negative code (``-2`` → ``JobLockNotExist``)."""
        return RETURN_CODES.get(self.code) if self.code is not None else None

    @property
    def meaning(self) -> str | None:
        """A few words for a negative code (``-2`` → ``missing lock``)."""
        return RETURN_CODE_MEANINGS.get(self.code) if self.code is not None else None

    def __str__(self) -> str:
        if self.error is not None:
            return f"ERR {self.error}"
        if self.fetched:
            return "next"
        if self.other is not None:
            return self.other
        return str(self.code)


ResultKind = Literal["fetch", "finish", "sweep", "extend", "lapsed", "add", "cancel", "crash", "disconnect",
                     "script-flush", "restart"]
RESULT_KINDS: tuple[str, ...] = get_args(ResultKind)


@dataclass(frozen=True, slots=True)
class Result:
    """What an actor reports about one of its calls: the kind of call, the job it concerned (finish,
    cancel), its outcome, and for a sweep the ids it requeued."""

    kind: ResultKind
    job: str | None = None
    outcome: Outcome | None = None
    jobs: tuple[str, ...] | None = None

    def __str__(self) -> str:
        if self.kind == "lapsed":
            return "lapsed"
        if self.kind == "sweep" and self.jobs is not None:
            return "sweep:" + ",".join(self.jobs)
        code = str(self.outcome) if self.outcome is not None else "0"
        if self.kind in ("finish", "cancel"):
            return f"{self.kind}:{self.job}:{code}"
        return f"{self.kind}:{code}"

    @property
    def code(self) -> int | None:
        """The outcome's integer code, if any."""
        return self.outcome.code if self.outcome is not None else None

    @classmethod
    def parse(cls, text: str) -> Result:
        """The inverse of ``str`` (for History JSON v1). Raises ``ValueError`` for other text."""
        kind, _, rest = text.partition(":")
        if kind not in RESULT_KINDS:
            raise ValueError(f"not an actor result: {text!r}")
        if kind == "lapsed":
            return cls("lapsed")
        job = None
        if kind in ("finish", "cancel"):
            job, _, rest = rest.partition(":")
        if kind == "sweep" and not rest.startswith("ERR") and not rest.lstrip("-").isdigit():
            return cls("sweep", jobs=tuple(x for x in rest.split(",") if x))
        return cls(kind, job=job, outcome=Outcome.parse(rest))  # type: ignore[arg-type]


__all__ = ["Outcome", "RESULT_KINDS", "Result", "ResultKind"]
