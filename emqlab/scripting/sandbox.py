"""The home of the Redis 7 scripting sandbox's Python side: a Lua 5.1 runtime in which Lua reaches no Python, and
``lua/lib/sandbox.lua`` (the sandbox itself, one file) set up in it — for the client-side host
(:mod:`emqlab.scripting.host`) and for the embedded fakeredis server (:mod:`emqlab.backend.fakeserver`).

What the sandbox gives a script, and the few intended differences from Redis, are listed in the docstring
of :mod:`emqlab.scripting.host` and in ``docs/lua-host.md``; the escape probes of
``tests/test_lua_sandbox_probes.py`` check both environments and a live Redis.

**The one home of the Lua runtime.** This module is the only one of :mod:`emqlab.scripting` that names the
Lua implementation (``tests/test_layers.py`` holds every other module to it): ``lupa.lua51`` under CPython,
:mod:`emqlab.scripting.wasmlua` under Pyodide (npm's ``wasmoon-lua5.1``, a Lua 5.1 in WebAssembly, for a
browser build; ``tests/test_pyodide_runtime.py`` checks that both give the same answers). What the host asks
of a runtime, all of it here: :func:`new_runtime` (a runtime whose Lua reaches no Python, strings as bytes,
an optional memory cap changed with ``set_max_memory``), ``runtime.eval(text)`` and ``runtime.table_from``
(a Lua function or table from Python values), calling a Lua function with bytes, numbers and tables and
getting a tuple back, a Lua table read by key from Python, Python callables called from Lua (the helpers
of :func:`load`), :func:`lua_type` and the errors :data:`LuaError` and :data:`LuaMemoryError`.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from emqlab.protocol import messages

#: Under Pyodide (WebAssembly, where lupa has no build) the runtime is :mod:`emqlab.scripting.wasmlua`: the
#: Lua 5.1 of npm's ``wasmoon-lua5.1`` driven through its C API, the same contract; elsewhere lupa's.
WASM = sys.platform == "emscripten"
if sys.platform == "emscripten":  # (spelled out: mypy reads the platform check and types lupa's branch)
    from emqlab.scripting import wasmlua as lua51
else:
    import lupa.lua51 as lua51

#: the type name (``"table"``, ``"function"`` …) of a Lua value held by Python, ``None`` for a Python value
lua_type = lua51.lua_type
#: a Lua error raised out of a call into Lua, and the one raised when the runtime's memory cap is reached
LuaError = lua51.LuaError
LuaMemoryError = lua51.LuaMemoryError

#: The sandbox's file in the ``lib/`` folder of :func:`emqlab.scripting.registry.lua_dir`.
SANDBOX_FILE = "sandbox.lua"
#: The library modules the sandbox loads from the same folder (``<name>.lua``), as Redis 7's globals.
LIB_MODULES = ("cjson", "cmsgpack", "bit")
#: The module (``lib/<name>.lua``, no global) that bounds string.find/match/gmatch/gsub: Lua's pattern matcher
#: backtracks inside one C call, where no count hook runs.
PATTERNS = "patterns"
#: The most steps the matcher may take in one call, by the module's bound (about the 5 s CPU limit).
MATCH_STEPS = 1e9
#: Default budget of Lua instructions of one script run (on the host: over all its steps; on the server: one
#: script): an endless loop stops within seconds (benchmarks/bench_script_limits.py measures how soon), far
#: above what a queue script runs (a BullMQ obliterate of 900 jobs).
DEFAULT_MAX_INSTRUCTIONS = 100_000_000
#: Default cap on the commands one script run the host runs may send: a loop of ``redis.call`` stops with
#: an error instead of running forever (Redis has no such cap; it stops a script at its time limit).
DEFAULT_MAX_COMMANDS = 50_000
#: Default limit of the CPU seconds one script run may use (on the host: over all its steps; Redis's default
#: busy-reply threshold is 5 s too)
DEFAULT_MAX_SECONDS = 5.0
#: Bytes of Lua heap the scripts of one Lua runtime (the host's, an embedded server's) may use in all; past
#: it a script fails with ``not enough memory``.
MAX_MEMORY = 256 << 20


def soft_cap_kib(max_memory: int) -> int:
    """The Lua heap (KiB) past which the count hook ends a run, for a runtime capped at ``max_memory`` bytes
    (0: none): 16 MiB or a tenth below the cap, whichever is less, so that ending the run still finds memory."""
    if max_memory <= 0:
        return 0
    return max(1, (max_memory - min(16 << 20, max_memory // 10)) // 1024)
#: Instructions between two calls of the count hook that enforces the budget.
HOOK_EVERY = 10_000


def _nothing(obj: object, name: object, *value: object) -> None:
    # every attribute of a Python object held by Lua reads as nil and ignores a write (as a field missing
    # from a Lua table would read), rather than a Python exception running out through the embedding code
    return None


def new_runtime(**options: Any) -> Any:
    """A Lua 5.1 runtime whose Lua code can reach no Python: no ``python.eval``, no ``python.builtins``, and
    no attribute or item of a Python object that Lua holds (an error raised by a Python function and caught
    by a script's ``pcall`` is such an object): each reads as ``nil``, a write is ignored. Strings are bytes
    (``encoding=None``). ``options`` go to ``lupa.lua51.LuaRuntime`` (``unpack_returned_tuples``,
    ``max_memory`` …); under Pyodide, :class:`emqlab.scripting.wasmlua.LuaRuntime` (which holds no
    Python object but the callables given to it, so the attribute rule has nothing to guard)."""
    if WASM:
        return lua51.new_runtime(**options)
    return lua51.LuaRuntime(encoding=None, register_eval=False, register_builtins=False,
                            attribute_handlers=(_nothing, _nothing), **options)


def stand_in_for_lupa() -> None:
    """Under Pyodide, make ``import lupa`` and ``import lupa.lua51`` give :mod:`emqlab.scripting.wasmlua`
    (fakeredis's scripting module imports lupa as it loads; the embedded server's ``EVAL`` and ``FCALL`` are
    the host's). Does nothing elsewhere, or when a lupa is importable."""
    if not WASM or "lupa" in sys.modules:
        return
    import contextlib
    import types

    lupa = types.ModuleType("lupa", "emqlab's stand-in for lupa under Pyodide: lua51 is emqlab.scripting.wasmlua")
    lupa.lua51 = lua51  # type: ignore[attr-defined]
    lupa.allow_lua_module_loading = contextlib.nullcontext  # type: ignore[attr-defined]
    sys.modules["lupa"], sys.modules["lupa.lua51"] = lupa, lua51


def sha1hex(s: bytes) -> bytes:
    """``redis.sha1hex``: the SHA1 of ``s`` in lowercase hex."""
    return hashlib.sha1(s).hexdigest().encode()


def load(runtime: Any, lib: Path, py: dict[bytes, Any], **options: Any) -> Any:
    """Run ``lib/sandbox.lua`` in ``runtime`` and return the host's API table it gives (see the file's
    header). ``py``: the Python helpers the sandbox calls (``sha1hex``, ``log``, ``known_command``, ``tick``,
    ``stopped_at``); the sandbox's texts come from
    :mod:`emqlab.protocol.messages`; ``options``: the further options (Lua values
    or tables). The library modules of :data:`LIB_MODULES` found in ``lib`` are loaded; a missing one is
    left out. Raises ``FileNotFoundError`` without ``lib/sandbox.lua``."""
    source = (lib / SANDBOX_FILE).read_bytes()
    fields: dict[bytes, Any] = {b"py": runtime.table_from(py), b"hook_every": HOOK_EVERY,
                                b"msg": runtime.table_from(messages.lua_table())}
    for name in (*LIB_MODULES, PATTERNS):
        p = lib / f"{name}.lua"
        if p.is_file():
            fields[name.encode()] = p.read_bytes()
    fields[b"match_steps"] = MATCH_STEPS
    fields.update({k.encode(): v for k, v in options.items()})
    loader = runtime.eval("function(src, name) return assert(loadstring(src, name)) end")
    return loader(source, b"@" + SANDBOX_FILE.encode())(runtime.table_from(fields))
