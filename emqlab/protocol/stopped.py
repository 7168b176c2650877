"""The exception a stop signal's handler raised to end the process (KeyboardInterrupt for Ctrl-C, SystemExit
for SIGTERM and SIGHUP: :func:`emqlab.ui.entry._terminate`), recorded where a lower layer can read it.

A handler's exception can be raised at any Python bytecode; inside a Lua count hook
(:meth:`emqlab.scripting.host.LuaHost._tick`) it may come before the hook's ``try`` and reach Lua as an error,
which ends the script with the exception itself lost. The host then raises the one recorded here, so a
SIGHUP stays a SIGHUP. Imports nothing (the console script reads it before any heavy import).
"""

from __future__ import annotations

#: the exception the first stop signal's handler raised, if one did
raised: BaseException | None = None


def record(exc: BaseException) -> BaseException:
    """Remember ``exc`` as the stop signal's exception (the first one only) and return it, to be raised."""
    global raised
    if raised is None:
        raised = exc
    return exc


__all__ = ["raised", "record"]
