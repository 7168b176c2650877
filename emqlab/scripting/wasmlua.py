"""The Lua runtime of :mod:`emqlab.scripting.sandbox` under Pyodide: Lua 5.1 compiled to WebAssembly (npm's
``wasmoon-lua5.1``), driven through its C API from Python — imported only when ``sys.platform ==
"emscripten"``, so CPython never imports ``js``.

The page (or the Node harness, ``scripts/pyodide/``) loads the wasm module before Python asks for a runtime —
WebAssembly is instantiated asynchronously, a runtime is made synchronously — and leaves it on the JavaScript
global ``emqlabLua``: ``{api, LuaGlobal}``, where ``api`` is ``await LuaApi.initialize(wasmPath)`` and
``LuaGlobal`` the package's class of that name (a Lua state with a counting allocator and a memory cap).
Where no page did (a JupyterLite kernel, whose worker runs no code of ours), the package's own copy of the
module's files, ``emqlab/scripting/wasmoon/`` (``index.js``, ``liblua5.1.wasm``, ``lodash.min.js``: put
there by the browser site's build, ``scripts/site/lite.py``), is loaded instead: Python waits for its
asynchronous start with ``pyodide.ffi.run_sync``, which needs the browser's JavaScript Promise Integration
(JSPI).

What it gives is lupa's contract as :mod:`emqlab.scripting.sandbox` lists it, over the raw C API (never
wasmoon's conversions, which decode Lua strings as UTF-8 and so are not binary-safe):

* Lua → Python: ``nil`` → ``None``, booleans → ``bool``, a number → ``int`` when it is integral and within
  the int64 range, else ``float`` (lupa's rule), a string → ``bytes`` (read with ``lua_tolstring`` and its
  length: every byte), any other value → a :class:`LuaObject` holding a registry reference;
* Python → Lua: ``None``, ``bool``, ``int``/``float`` (a Lua number, a double), ``bytes`` (``str`` as UTF-8)
  pushed with ``lua_pushlstring``, a :class:`LuaObject` of the same runtime, and a Python callable (a C
  closure whose upvalues name it; a Python exception it raises becomes a Lua error with its text);
* calls run under ``lua_pcall``; an error comes back as :class:`LuaError` (``LUA_ERRMEM``:
  :class:`LuaMemoryError`), a failed compilation as :class:`LuaSyntaxError`; every call is synchronous.

Raises ``RuntimeError`` from :func:`new_runtime` when ``emqlabLua`` was not set up and the package holds no
copy of the module.
"""

from __future__ import annotations

import math
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.code import run_js  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

__all__ = ["LuaError", "LuaMemoryError", "LuaObject", "LuaRuntime", "LuaSyntaxError", "lua_type", "new_runtime"]

# lua.h (5.1)
_REGISTRY = -10000
_GLOBALS = -10002
_MULTRET = -1
_ERRSYNTAX, _ERRMEM = 3, 4
_TNIL, _TBOOLEAN, _TNUMBER, _TSTRING = 0, 1, 3, 4
_TYPE_NAMES = ("nil", "boolean", "userdata", "number", "string", "table", "function", "userdata", "thread")
_INT64 = 2.0**63


class LuaError(Exception):
    """A Lua error raised out of a call into Lua: its text (a string error's bytes as UTF-8, another
    value's empty, as lupa gives it)."""


class LuaSyntaxError(LuaError):
    """A chunk given to :meth:`LuaRuntime.eval` or :meth:`LuaRuntime.execute` did not compile."""


class LuaMemoryError(LuaError, MemoryError):
    """The runtime's memory cap (``max_memory``, :meth:`LuaRuntime.set_max_memory`) was reached."""


# The byte-level helpers, in JavaScript because each crosses the wasm heap once rather than once per byte:
# a string read by lua_tolstring and its length, bytes pushed by lua_pushlstring, a chunk loaded from bytes,
# and the C function every Python callable is reached through (it asks Python, and raises the Lua error
# Python left on the stack: lua_error may not unwind through Python's frames, so it is called here, after
# Python has returned).
_HELPERS_JS = """
(api, dispatch) => {
  const m = api.module;
  const lenp = m._malloc(4);
  const copy = (bytes) => {
    const p = m._malloc(bytes.length || 1);
    m.HEAPU8.set(bytes, p);
    return p;
  };
  const withBuffer = (pybytes, f) => {
    const buf = pybytes.getBuffer('u8');
    try { return f(buf.data); } finally { buf.release(); }
  };
  return {
    read(L, i) {
      const p = m._lua_tolstring(L, i, lenp);
      return m.HEAPU8.slice(p, p + m.HEAPU32[lenp >> 2]);
    },
    push(L, pybytes) {
      withBuffer(pybytes, (data) => {
        const p = copy(data);
        try { m._lua_pushlstring(L, p, data.length); } finally { m._free(p); }
      });
    },
    load(L, pybytes, name) {
      return withBuffer(pybytes, (data) => {
        const p = copy(data);
        const n = m.stringToNewUTF8(name);
        try { return m._luaL_loadbuffer(L, p, data.length, n); } finally { m._free(p); m._free(n); }
      });
    },
    trampoline: m.addFunction((L) => {
      const n = dispatch(L);
      return n < 0 ? m._lua_error(L) : n;
    }, 'ii'),
  };
}
"""

# wasmoon-lua5.1 from its files' contents: lodash and the UMD bundle evaluated as scripts (they set globals),
# the wasm module from a Blob URL; LuaApi.initialize is asynchronous (the module fetches and instantiates
# the wasm), and its promise is what Python waits for (pyodide.ffi.run_sync).
_LOAD_JS = """
(lodashText, indexText, wasmBytes) => {
  if (typeof globalThis._ !== 'function') (0, eval)(lodashText);
  globalThis.lodash = globalThis._;  // (the name wasmoon's browser build looks for)
  (0, eval)(indexText);
  const w = globalThis['wasmoon-lua5']['1'];
  const url = URL.createObjectURL(new Blob([wasmBytes.toJs()], { type: 'application/wasm' }));
  return w.LuaApi.initialize(url).then((api) => {
    URL.revokeObjectURL(url);
    globalThis.emqlabLua = { api, LuaGlobal: w.LuaGlobal };
  });
}
"""
#: where the site's build puts wasmoon-lua5.1's files inside the package (absent from a checkout)
BUNDLED = Path(__file__).resolve().parent / "wasmoon"


def _load_bundled() -> bool:
    # (False when the package holds no copy; RuntimeError when it does but Python cannot wait for a promise)
    files = [BUNDLED / name for name in ("lodash.min.js", "index.js", "liblua5.1.wasm")]
    if not all(f.is_file() for f in files):
        return False
    from pyodide.ffi import can_run_sync, run_sync

    if not can_run_sync():
        raise RuntimeError("starting the WebAssembly Lua here needs a browser with WebAssembly's JavaScript "
                           "Promise Integration (JSPI; Chrome and Edge have it from version 137): use one, "
                           "or run the notebook on your machine (pip install emqlab)")
    run_sync(run_js(_LOAD_JS)(files[0].read_text(), files[1].read_text(), files[2].read_bytes()))
    return True


#: the C API functions Python calls (the wasm module's exports)
_C_API = ("_luaL_openlibs", "_luaL_ref", "_luaL_unref", "_lua_createtable", "_lua_getmetatable", "_lua_gettop",
          "_lua_next", "_lua_objlen", "_lua_pcall", "_lua_pushboolean", "_lua_pushcclosure", "_lua_pushnil",
          "_lua_pushnumber", "_lua_pushstring", "_lua_pushvalue", "_lua_rawget", "_lua_rawgeti", "_lua_rawset",
          "_lua_rawseti", "_lua_settop", "_lua_toboolean", "_lua_tonumber", "_lua_type")
_helpers: list[Any] = []  # [the C API, the helpers]: one wasm module for every runtime
_runtimes: weakref.WeakValueDictionary[int, LuaRuntime] = weakref.WeakValueDictionary()


def _setup() -> tuple[Any, Any]:
    if not _helpers:
        lua = getattr(js, "emqlabLua", None)
        if lua is None and _load_bundled():
            lua = js.emqlabLua
        if lua is None:
            raise RuntimeError("no WebAssembly Lua: the page must set globalThis.emqlabLua = {api, LuaGlobal} "
                               "(wasmoon-lua5.1's LuaApi.initialize()) before Python makes a runtime, or the "
                               f"package hold wasmoon-lua5.1's files in {BUNDLED}")
        module = lua.api.module
        # (each function looked up once: an attribute of a JavaScript object is a crossing of its own)
        c_api = types.SimpleNamespace(**{name: getattr(module, name) for name in _C_API})
        _helpers.extend([c_api, run_js(_HELPERS_JS)(lua.api, create_proxy(_dispatch))])
    return _helpers[0], _helpers[1]


def lua_type(obj: object) -> str | None:
    """The Lua type name (``"table"``, ``"function"`` …) of a Lua value held by Python, ``None`` for a Python
    value."""
    return obj._type if isinstance(obj, LuaObject) else None


def new_runtime(**options: Any) -> LuaRuntime:
    """A :class:`LuaRuntime` (``options``: its keyword arguments)."""
    return LuaRuntime(**options)


def _number(x: float) -> int | float:
    # lupa's rule: an integral number within the int64 range comes back an int
    if math.isfinite(x) and x == math.floor(x) and -_INT64 <= x < _INT64:
        return int(x)
    return x


class LuaRuntime:
    """One Lua 5.1 state in the wasm module, with the standard libraries opened. ``max_memory``: bytes of
    Lua heap its allocations may reach (``None``/0: no cap); ``unpack_returned_tuples``: a tuple a Python
    callable returns is several Lua values (else a tuple is refused: ``TypeError``). Lua reaches no Python
    but the callables handed to it. ``encoding``: lupa's option, ``None`` only (strings are bytes). Not
    thread-safe."""

    def __init__(self, *, max_memory: int | None = None, unpack_returned_tuples: bool = False,
                 encoding: None = None) -> None:
        if encoding is not None:  # (lupa's option, as fakeredis passes it: strings are bytes here, always)
            raise ValueError("the WebAssembly Lua's strings are bytes: encoding must be None")
        self._m, self._js = _setup()
        self._state = js.emqlabLua.LuaGlobal.new(js.emqlabLua.api, True)  # (True: the counting allocator)
        self._L = int(self._state.address)
        self._m._luaL_openlibs(self._L)
        self._unpack = unpack_returned_tuples
        self._callables: list[Callable[..., Any]] = []
        #: registry references of LuaObjects Python dropped: released at the next call (a __del__ may run
        #: inside a call into Lua, when the stack is not ours to touch)
        self._dead: list[int] = []
        self._id = id(self)
        _runtimes[self._id] = self
        self._getter: Any = None
        self.set_max_memory(max_memory or 0)

    def __del__(self) -> None:
        state = getattr(self, "_state", None)
        if state is not None:
            state.close()

    def set_max_memory(self, max_memory: int) -> None:
        """Cap the Lua heap at ``max_memory`` bytes (0: no cap)."""
        self._state.setMemoryMax(int(max_memory or 0))

    def memory_used(self) -> int:
        """Bytes the Lua state has allocated."""
        return int(self._state.getMemoryUsed())

    # -- values across -------------------------------------------------------------------------------------
    def _push(self, L: int, v: Any) -> None:  # noqa: N803 - the C API's name
        m = self._m
        if v is None:
            m._lua_pushnil(L)
        elif v is True or v is False:
            m._lua_pushboolean(L, 1 if v else 0)
        elif isinstance(v, (int, float)):
            m._lua_pushnumber(L, float(v))
        elif isinstance(v, (bytes, bytearray, memoryview)):
            self._js.push(L, bytes(v))
        elif isinstance(v, str):
            self._js.push(L, v.encode())
        elif isinstance(v, LuaObject):
            if v._runtime is not self:
                raise ValueError("a Lua value of another runtime")
            m._lua_rawgeti(L, _REGISTRY, v._ref)
        elif callable(v):
            self._callables.append(v)
            m._lua_pushnumber(L, len(self._callables) - 1)
            m._lua_pushnumber(L, self._id)
            m._lua_pushcclosure(L, self._js.trampoline, 2)
        else:
            raise TypeError(f"cannot pass a {type(v).__name__} to the WebAssembly Lua")

    def _get(self, L: int, i: int) -> Any:  # noqa: N803
        m = self._m
        t = m._lua_type(L, i)
        if t == _TNIL:
            return None
        if t == _TBOOLEAN:
            return bool(m._lua_toboolean(L, i))
        if t == _TNUMBER:
            return _number(float(m._lua_tonumber(L, i)))
        if t == _TSTRING:
            return self._js.read(L, i).to_bytes()
        m._lua_pushvalue(L, i)
        return LuaObject(self, int(m._luaL_ref(L, _REGISTRY)), _TYPE_NAMES[t])

    def _release(self) -> None:
        while self._dead:
            self._m._luaL_unref(self._L, _REGISTRY, self._dead.pop())

    def _results(self, L: int, base: int, status: int) -> Any:  # noqa: N803
        m = self._m
        if status:
            err = self._get(L, -1) if m._lua_type(L, -1) in (_TSTRING, _TNUMBER) else b""
            m._lua_settop(L, base)
            text = (str(err) if not isinstance(err, bytes) else err.decode("utf-8", "replace"))
            raise (LuaMemoryError if status == _ERRMEM else LuaError)(text)
        out = tuple(self._get(L, i) for i in range(base + 1, m._lua_gettop(L) + 1))
        m._lua_settop(L, base)
        if not out:
            return None
        return out[0] if len(out) == 1 else out

    def _call(self, pushed: Callable[[], None], args: tuple[Any, ...]) -> Any:
        self._release()
        L, m = self._L, self._m
        base = m._lua_gettop(L)
        try:
            pushed()
            for a in args:
                self._push(L, a)
        except BaseException:
            m._lua_settop(L, base)
            raise
        return self._results(L, base, m._lua_pcall(L, len(args), _MULTRET, 0))

    def _load(self, text: bytes | str) -> None:
        body = text.encode() if isinstance(text, str) else bytes(text)
        status = self._js.load(self._L, body, "<python>")
        if status:
            err = self._get(self._L, -1)
            self._m._lua_settop(self._L, -2)
            msg = err.decode("utf-8", "replace") if isinstance(err, bytes) else ""
            raise (LuaMemoryError if status == _ERRMEM else LuaSyntaxError)(f"error loading code: {msg}")

    # -- the contract ------------------------------------------------------------------------------------------
    def execute(self, text: bytes | str, *args: Any) -> Any:
        """Run the chunk ``text`` with ``args`` (its ``...``); its results (``None``, one value, or a tuple).
        Raises :class:`LuaSyntaxError`, :class:`LuaError`."""
        self._release()
        base = self._m._lua_gettop(self._L)
        self._load(text)
        m = self._m
        for a in args:
            self._push(self._L, a)
        return self._results(self._L, base, m._lua_pcall(self._L, len(args), _MULTRET, 0))

    def eval(self, text: bytes | str, *args: Any) -> Any:
        """The value of the Lua expression ``text`` (as :meth:`execute` of ``return text``)."""
        body = text.encode() if isinstance(text, str) else bytes(text)
        return self.execute(b"return " + body, *args)

    def table_from(self, *sources: Any) -> LuaObject:
        """A new Lua table: each dict's items, then each list's or tuple's values at 1, 2, … in turn."""
        self._release()
        L, m = self._L, self._m
        base = m._lua_gettop(L)
        m._lua_createtable(L, 0, 0)
        n = 0
        try:
            for src in sources:
                if isinstance(src, dict):
                    for k, v in src.items():
                        self._push(L, k)
                        self._push(L, v)
                        m._lua_rawset(L, -3)
                else:
                    for v in src:
                        n += 1
                        self._push(L, v)
                        m._lua_rawseti(L, -2, n)
            return LuaObject(self, int(m._luaL_ref(L, _REGISTRY)), "table")
        finally:
            m._lua_settop(L, base)

    def _index(self, obj: LuaObject, key: Any) -> Any:
        L, m = self._L, self._m
        self._release()
        base = m._lua_gettop(L)
        m._lua_rawgeti(L, _REGISTRY, obj._ref)
        if obj._type == "table" and not m._lua_getmetatable(L, -1):
            # a plain table: read it raw, without a protected call (nothing can raise)
            self._push(L, key)
            m._lua_rawget(L, -2)
            out = self._get(L, -1)
            m._lua_settop(L, base)
            return out
        m._lua_settop(L, base)
        if self._getter is None:
            self._getter = self.eval("function(t, k) return t[k] end")
        return self._getter(obj, key)


def _dispatch(L: int) -> int:  # noqa: N803
    # A Python callable called from Lua (the trampoline's C closure): upvalue 1 its index in its runtime's
    # list, upvalue 2 the runtime. Returns the number of results pushed, or -1 with an error text pushed.
    m = _helpers[0]
    runtime = _runtimes.get(int(m._lua_tonumber(L, _GLOBALS - 2)))
    if runtime is None:
        m._lua_pushstring(L, 0)
        return -1
    fn = runtime._callables[int(m._lua_tonumber(L, _GLOBALS - 1))]
    args = [runtime._get(L, i) for i in range(1, m._lua_gettop(L) + 1)]
    try:
        result = fn(*args)
        if isinstance(result, tuple) and runtime._unpack:
            for v in result:
                runtime._push(L, v)
            return len(result)
        runtime._push(L, result)
        return 1
    except BaseException as e:  # noqa: BLE001 - no Python exception may unwind through the wasm frames
        runtime._push(L, str(e) or type(e).__name__)
        return -1


class LuaObject:
    """A Lua table, function, coroutine or userdata held by Python (a registry reference, released when
    Python drops it): called like a function, read by key (``obj[key]``, honouring ``__index``), ``len()``
    (the ``#`` of a table, raw), ``keys()``, ``values()``, ``items()`` (a plain table's pairs)."""

    __slots__ = ("__weakref__", "_ref", "_runtime", "_type")

    def __init__(self, runtime: LuaRuntime, ref: int, type_name: str) -> None:
        self._runtime = runtime
        self._ref = ref
        self._type = type_name

    def __del__(self) -> None:
        try:
            self._runtime._dead.append(self._ref)
        except AttributeError:
            pass

    def __repr__(self) -> str:
        return f"<Lua {self._type} ref {self._ref}>"

    def __call__(self, *args: Any) -> Any:
        rt = self._runtime
        return rt._call(lambda: rt._m._lua_rawgeti(rt._L, _REGISTRY, self._ref), args)

    def __getitem__(self, key: Any) -> Any:
        return self._runtime._index(self, key)

    def __len__(self) -> int:
        rt = self._runtime
        rt._m._lua_rawgeti(rt._L, _REGISTRY, self._ref)
        try:
            return int(rt._m._lua_objlen(rt._L, -1))
        finally:
            rt._m._lua_settop(rt._L, -2)

    def items(self) -> Iterator[tuple[Any, Any]]:
        """The table's key-value pairs (``lua_next``: no order)."""
        rt, m = self._runtime, self._runtime._m
        L = rt._L  # noqa: N806
        base = m._lua_gettop(L)
        m._lua_rawgeti(L, _REGISTRY, self._ref)
        m._lua_pushnil(L)
        pairs = []
        while m._lua_next(L, -2):
            pairs.append((rt._get(L, -2), rt._get(L, -1)))
            m._lua_settop(L, -2)
        m._lua_settop(L, base)
        return iter(pairs)

    def keys(self) -> Iterator[Any]:
        return (k for k, _ in self.items())

    def values(self) -> Iterator[Any]:
        return (v for _, v in self.items())
