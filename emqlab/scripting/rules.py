"""The home of the checks Redis 7 makes on a script's text and on the commands it calls: the ``#!lua`` shebang
line and its flags; the commands a script may not run, refused with Redis's message and in Redis's order
(unknown command, arity, ``noscript``, ``#!lua flags=no-writes``, ``XREAD … BLOCK``), and the blocking
commands sent without blocking; the bytecode rewrite that keeps the script's line in its errors.

Where Valkey's checks differ (its texts, the blocking commands it runs in a script, its shebang order), each
rule follows the host's server dialect (:mod:`emqlab.scripting.dialect`).

The rules are listed with the host's (:mod:`emqlab.scripting.host`) and checked against a Redis 7.0 server and
a Valkey 9.1 server by ``tests/test_host_differential.py``.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from emqlab.protocol import commands as _commands
from emqlab.protocol import messages
from emqlab.scripting.dialect import REDIS7, Dialect
from emqlab.scripting.replies import Command, LuaScriptError, as_text
from emqlab.scripting.sandbox import new_runtime

#: Commands refused in a read-only (``#!lua flags=no-writes``) script although the table does not flag them
#: ``write``: Redis 7.0's ``may-replicate`` commands that a script may call.
_MAY_REPLICATE = frozenset({"publish", "spublish", "pfcount"})
#: Blocking commands that Redis runs without blocking inside a script, and what the host sends instead.
_NON_BLOCKING = {"blmpop": b"LMPOP", "bzmpop": b"ZMPOP"}
_SHEBANG_FLAGS = frozenset({"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"})
_FLOAT = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")



#: keyless commands a script confined to its run's keys may still send: they read or change no key
CONFINED_KEYLESS = frozenset({b"PING", b"ECHO", b"TIME"})
#: keyed commands that reach another database or server with the run's own keys
_ELSEWHERE = frozenset({b"MOVE", b"MIGRATE"})


def confine(cmd: Command, base: bytes) -> bytes | None:
    """``None`` when every key ``cmd`` names is under ``base`` (a run's prefix, ``emq:{q-1a2b3c4d}:``) and it
    reaches no other database or server; else the error the script gets (:data:`messages.OUTSIDE_RUN`).
    Keyless commands pass only when in :data:`CONFINED_KEYLESS` (KEYS, SCAN, FLUSHALL, SELECT, PUBLISH …
    reach beyond the run)."""
    return _CONFINED.answer((base, *cmd), sum(map(len, cmd)), lambda: _confine(cmd, base))


_CONFINED: _commands.LineCache[bytes | None] = _commands.LineCache()


def _confine(cmd: Command, base: bytes) -> bytes | None:
    name = cmd[0].upper()
    # Redis reads an option word as a C string, up to its first NUL ("STORE\0" is STORE): the command's keys as
    # Redis finds them with each argument cut there, and as written, must both stay inside
    accesses = [_commands.key_access(cmd, trust_script_keys=False)]
    cut = cmd
    if any(b"\0" in a for a in cmd[1:]):
        cut = tuple(a.split(b"\0", 1)[0] for a in cmd)
        accesses.append(_commands.key_access(cut, trust_script_keys=False))
    shown = as_text(name)
    what = None
    if any(a is None or a.reads_any or a.writes_any for a in accesses):
        what = f"{shown} reaches every key"
    elif name in _ELSEWHERE or (name == b"COPY" and any(a.upper() == b"DB" for a in cut[3:])):
        what = f"{shown} reaches another database or server"
    elif not any(a.reads or a.writes for a in accesses if a) and name not in CONFINED_KEYLESS:
        what = f"{shown} reaches beyond its keys"
    else:
        keys = [k for a in accesses if a for k in (*a.reads, *a.writes)]
        outside = next((k for k in keys if not k.startswith(base)), None)
        if outside is not None:
            what = f"{shown} names key {as_text(outside)!r}"
    return None if what is None else (messages.OUTSIDE_RUN % (as_text(base), what)).encode()


def known_command(name: Any, sub: Any) -> bool:
    argv = [bytes(name)] + ([bytes(sub)] if sub is not None else [])
    return _commands._entry(argv) is not None or _command_entry(argv[0]) is not None


def _command_entry(name: bytes) -> dict[str, Any] | None:
    entry: dict[str, Any] | None = _commands._table()["commands"].get(name.decode("utf-8", "replace").lower())
    return entry


def vet(cmd: Command, flags: frozenset[str], dialect: Dialect = REDIS7) -> tuple[bytes | None, Command]:
    """``(None, command to send)`` or ``(error text, cmd)`` for a command the script may not run, checked in
    the server's order: known command, arity, ``noscript``, read-only script, blocking options. ``dialect``:
    the server's (:mod:`emqlab.scripting.dialect`): its texts, and the blocking commands it runs in a script
    (sent without blocking, :data:`_UNBLOCKED`, :func:`unblocked_reply`)."""
    name = cmd[0].decode("utf-8", "replace").lower()
    table = _commands._table()["commands"]
    entry = None if "|" in name else table.get(name)
    if entry is None:
        return dialect.text(messages.UNKNOWN_COMMAND).encode(), cmd
    full = name
    if name in _commands._containers() and len(cmd) >= 2:
        full = f"{name}|{cmd[1].decode('utf-8', 'replace').lower()}"
        entry = table.get(full)
        if entry is None:
            # Valkey sends an unknown subcommand on: the container command answers it
            return (None if dialect.valkey else dialect.text(messages.UNKNOWN_COMMAND).encode()), cmd
    arity = int(entry["arity"])
    if (arity > 0 and len(cmd) != arity) or (arity < 0 and len(cmd) < -arity):
        return dialect.text(messages.SCRIPT_ARITY).encode(), cmd
    eflags = entry["flags"]
    if "noscript" in eflags and not dialect.allowed_in_script(name):
        return dialect.text(messages.NOSCRIPT_COMMAND).encode(), cmd
    if "no-writes" in flags and ("write" in eflags or full in _MAY_REPLICATE):
        return messages.WRITE_IN_READONLY_SCRIPT.encode(), cmd
    if name in ("xread", "xreadgroup"):
        for i, a in enumerate(cmd[1:], 1):
            u = a.upper()
            if u == b"STREAMS":
                break
            if u == b"BLOCK":
                if not dialect.valkey:
                    return messages.BLOCKING_STREAM_READ.encode() % cmd[0], cmd
                # Valkey reads at once: the timeout checked, the command sent without its BLOCK option
                if i + 1 < len(cmd):
                    if not re.fullmatch(rb"-?\d+", cmd[i + 1]):
                        return messages.TIMEOUT_NOT_INTEGER.encode(), cmd
                    if int(cmd[i + 1]) < 0:
                        return messages.TIMEOUT_NEGATIVE.encode(), cmd
                    return None, (*cmd[:i], *cmd[i + 2:])
                break
    replacement = _NON_BLOCKING.get(name)
    if replacement is not None:
        refusal = _timeout(cmd[1])
        return (refusal, cmd) if refusal is not None else (None, (replacement, *cmd[2:]))
    if name in _UNBLOCKED:
        return _UNBLOCKED[name](cmd)
    return None, cmd


_SORT_ARGS = {b"BY": 1, b"LIMIT": 2, b"GET": 1, b"STORE": 1}


def constant_sort(cmd: Command) -> bool:
    """Whether ``cmd`` is a ``SORT``/``SORT_RO`` ``BY`` a constant (a pattern without ``*``) and without
    ``STORE``: inside a script Redis then sorts a set's members ``ALPHA``, so that a script's reply does not
    depend on a set's internal order (``sortCommandGeneric`` in Redis's ``sort.c``; with ``STORE`` the
    server does so for any client, and a list's or sorted set's order is kept)."""
    if cmd[0].upper() not in (b"SORT", b"SORT_RO") or len(cmd) < 4:
        return False
    constant = False
    i = 2
    while i < len(cmd):
        word = cmd[i].upper()
        if word == b"STORE":
            return False
        if word == b"BY" and i + 1 < len(cmd) and b"*" not in cmd[i + 1]:
            constant = True
        i += 1 + _SORT_ARGS.get(word, 0)
    return constant


def alpha_sort(cmd: Command) -> Command:
    """``cmd`` (a :func:`constant_sort` of a set) as Redis runs it inside a script: its ``BY`` clauses
    dropped and ``ALPHA`` added (``LIMIT``, ``GET``, ``ASC``/``DESC`` kept)."""
    out = list(cmd[:2])
    alpha = False
    i = 2
    while i < len(cmd):
        word = cmd[i].upper()
        n = _SORT_ARGS.get(word, 0)
        if word != b"BY":
            out.extend(cmd[i:i + 1 + n])
        alpha = alpha or word == b"ALPHA"
        i += 1 + n
    if not alpha:
        out.append(b"ALPHA")
    return tuple(out)


def _timeout(timeout: bytes) -> bytes | None:
    if not _FLOAT.fullmatch(timeout):
        return messages.TIMEOUT_NOT_FLOAT.encode()
    if float(timeout) < 0:
        return messages.TIMEOUT_NEGATIVE.encode()
    return None


def _pop(cmd: Command, last: bytes, pop: bytes) -> tuple[bytes | None, Command]:
    # BLPOP / BRPOP / BZPOPMIN / BZPOPMAX k1 … kn timeout: the first non-empty key's element, at once
    keys = cmd[1:-1]
    return _timeout(cmd[-1]), (pop, str(len(keys)).encode(), *keys, last)


def _wait(cmd: Command) -> tuple[bytes | None, Command]:
    # WAIT numreplicas timeout: in a script it answers at once with the replicas that have acknowledged
    for a, text in ((cmd[1], messages.NOT_AN_INTEGER), (cmd[2], messages.TIMEOUT_NOT_INTEGER)):
        if not re.fullmatch(rb"-?\d+", a):
            return text.encode(), cmd
    if int(cmd[2]) < 0:
        return messages.TIMEOUT_NEGATIVE.encode(), cmd
    return None, (b"WAIT", b"0", b"0")


#: The blocking commands Valkey runs inside a script (:data:`emqlab.scripting.dialect.VALKEY_SCRIPT_BLOCKING`;
#: Redis 7.0 refuses them as ``noscript`` before they get here): checked as the server checks them and sent
#: as the command that does the same without blocking; :func:`unblocked_reply` gives the reply back the shape
#: of the blocking command's.
_UNBLOCKED = {
    "blpop": lambda cmd: _pop(cmd, b"LEFT", b"LMPOP"),
    "brpop": lambda cmd: _pop(cmd, b"RIGHT", b"LMPOP"),
    "bzpopmin": lambda cmd: _pop(cmd, b"MIN", b"ZMPOP"),
    "bzpopmax": lambda cmd: _pop(cmd, b"MAX", b"ZMPOP"),
    "brpoplpush": lambda cmd: (_timeout(cmd[3]), (b"RPOPLPUSH", cmd[1], cmd[2])),
    "blmove": lambda cmd: (_timeout(cmd[5]), (b"LMOVE", *cmd[1:5])),
    "wait": _wait,
}


def unblocked_reply(script_cmd: Command, reply: Any) -> Any:
    """``reply`` (to the command :func:`vet` sent for ``script_cmd``) in the shape of ``script_cmd``'s own:
    ``LMPOP``'s ``[key, [element]]`` becomes ``BLPOP``'s ``[key, element]``, ``ZMPOP``'s ``[key, [[member,
    score]]]`` ``BZPOPMIN``'s ``[key, member, score]``; any other reply is returned as it is."""
    name = script_cmd[0].lower()
    if name in (b"blpop", b"brpop") and isinstance(reply, list) and len(reply) == 2:
        return [reply[0], reply[1][0]]
    if name in (b"bzpopmin", b"bzpopmax") and isinstance(reply, list) and len(reply) == 2:
        return [reply[0], *reply[1][0]]
    return reply


_OP_CALL, _OP_TAILCALL = 28, 29


def without_tail_calls(chunk: bytes) -> bytes:
    """The Lua 5.1 chunk with every ``TAILCALL`` made a ``CALL`` (its ``RETURN`` follows it already).

    Redis's ``redis.call`` is a C function, so ``return redis.call(…)`` keeps the script's frame, and Redis
    names the script's line in its error messages; the host's ``redis.call`` is a Lua function, which a tail
    call would replace. (Lua 5.1 bytecode: ``CALL A B C`` and ``TAILCALL A B 0`` share their operand layout;
    with ``C = 0`` the call keeps all results, which the following ``RETURN A 0`` returns.)"""
    if chunk[:4] != b"\x1bLua" or chunk[4] != 0x51:
        return chunk
    little = chunk[6] == 1
    size_int, size_t, size_ins, size_num = chunk[7], chunk[8], chunk[9], chunk[10]
    order: Any = "little" if little else "big"
    out = bytearray(chunk)
    pos = 12

    def integer(n: int) -> int:
        nonlocal pos
        v = int.from_bytes(out[pos:pos + n], order)
        pos += n
        return v

    def string() -> None:
        nonlocal pos
        n = integer(size_t)
        pos += n

    def function() -> None:
        nonlocal pos
        string()  # source
        pos += 2 * size_int + 4  # line defined, last line defined, nups, numparams, is_vararg, maxstack
        n = integer(size_int)
        for _ in range(n):
            ins = int.from_bytes(out[pos:pos + size_ins], order)
            if ins & 0x3F == _OP_TAILCALL:
                out[pos:pos + size_ins] = ((ins & ~0x3F) | _OP_CALL).to_bytes(size_ins, order)
            pos += size_ins
        for _ in range(integer(size_int)):  # constants
            kind = out[pos]
            pos += 1
            if kind == 1:
                pos += 1
            elif kind == 3:
                pos += size_num
            elif kind == 4:
                string()
        for _ in range(integer(size_int)):  # nested functions
            function()
        pos += integer(size_int) * size_int  # line info
        for _ in range(integer(size_int)):  # local variables
            string()
            pos += 2 * size_int
        for _ in range(integer(size_int)):  # upvalue names
            string()

    try:
        function()
    except (IndexError, ValueError):  # pragma: no cover - a chunk of another layout: leave it alone
        return chunk
    return bytes(out)


def parse_shebang(text: bytes, dialect: Dialect = REDIS7) -> tuple[bytes, frozenset[str]]:
    """The script body to compile (the ``#!`` line blanked, so line numbers stay) and its flags. Redis checks
    the engine first; Valkey after the options, and names the engine it did not find."""
    if not text.startswith(b"#!"):
        return text, frozenset()
    end = text.find(b"\n")
    if end < 0:
        raise LuaScriptError("Invalid script shebang")
    line, rest = text[:end], text[end:]
    parts = line.split()
    if not dialect.valkey and (not parts or parts[0] != b"#!lua"):
        raise LuaScriptError(f"Unexpected engine in script shebang: {as_text(parts[0] if parts else line)}")
    flags: set[str] = set()
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            raise LuaScriptError(f"Unknown lua shebang option: {as_text(part)}")
        for flag in part[len(b"flags="):].split(b","):
            if not flag:
                continue
            if flag.decode("utf-8", "replace") not in _SHEBANG_FLAGS:
                raise LuaScriptError(f"Unexpected flag in script shebang: {as_text(flag)}")
            flags.add(flag.decode())
    engine = parts[0][2:] if parts else b""
    if dialect.valkey and engine.lower() != b"lua":
        raise LuaScriptError(messages.VALKEY_SHEBANG_ENGINE % as_text(engine))
    return rest, frozenset(flags)



# -- compiling ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """A compiled script: its bytecode (for the host's own loader) and its shebang flags."""

    bytecode: bytes
    flags: frozenset[str]
    #: the script begins with a ``#!lua`` line (its flags are then all it may do; without one, Redis's
    #: defaults for scripts without flags apply)
    shebang: bool = False


# The script's text compiled as Redis compiles it (chunk name "@user_script"), never loaded as bytecode: a
# chunk that starts with ESC is compiled as text, as a Redis without the undumper does (lua/lib/sandbox.lua
# applies the same rule to a script's own loadstring and load).
_COMPILE_LUA = r"""
function(src)
  if src:sub(1, 1) == '\27' then
    local _, msg = loadstring('\1', '@user_script')
    return nil, (msg:gsub('char%(1%)', 'char(27)'))
  end
  local f, err = loadstring(src, '@user_script')
  if not f then return nil, err end
  return string.dump(f), nil
end
"""
_compiler: list[Any] = []
_compiler_lock = threading.Lock()


def compile_script(text: bytes, dialect: Dialect = REDIS7) -> Compiled:
    """``text`` (a script, maybe with a ``#!lua`` line) compiled, its tail calls made calls
    (:func:`without_tail_calls`). Raises :class:`LuaScriptError` with Redis's message for a syntax error
    (``Error compiling script (new function): user_script:1: …``) or a bad ``#!`` line. Runs nothing of the
    script (the compiler has a Lua runtime of its own)."""
    body, flags = parse_shebang(text, dialect)
    with _compiler_lock:
        if not _compiler:
            _compiler.append(new_runtime().eval(_COMPILE_LUA))
        bc, err = _compiler[0](body)
    if bc is None:
        raise LuaScriptError(f"Error compiling script (new function): {as_text(err)}")
    return Compiled(without_tail_calls(bytes(bc)), flags, text.startswith(b"#!"))
