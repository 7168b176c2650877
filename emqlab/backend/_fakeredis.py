"""fakeredis, imported without NumPy where this process has not imported NumPy yet.

fakeredis loads its vector-set commands (VADD …, Redis 8) only when NumPy imports, and importing NumPy is
about a third of a short ``emqlab`` command's start-up (``benchmarks/bench_startup.py``). emqlab's embedded
server plays Redis 7, which has no vector sets, so they are left out: while fakeredis imports, ``numpy`` is
marked unavailable in :data:`sys.modules` (Python's documented way to make an import fail), then unmarked.
A process that imported NumPy before fakeredis (a notebook that plotted first) keeps fakeredis's vector
sets; nothing in emqlab sends them.
"""

from __future__ import annotations

import sys

from emqlab.scripting.sandbox import stand_in_for_lupa

# (under Pyodide no lupa: fakeredis's scripting module, which imports it, gets the WebAssembly Lua's stand-in)
stand_in_for_lupa()

if "fakeredis" not in sys.modules and "numpy" not in sys.modules:
    sys.modules["numpy"] = None  # type: ignore[assignment]
    try:
        import fakeredis
    finally:
        if sys.modules.get("numpy", 0) is None:
            del sys.modules["numpy"]

import fakeredis  # noqa: E402,F811 - (already imported above, or now with NumPy)

__all__ = ["fakeredis"]
