"""The home of the conversions between Redis replies and Lua values, as Redis 7 makes them for a script:
a reply handed to ``redis.call``'s caller (status replies as ``{ok=…}``, errors as ``{err=…}``, nil as
``false``), and a script's result made a reply (the tree the sandbox's ``to_reply`` builds, read here
without Python recursion); the error texts a script sees and raises.

The rules are listed with the host's (:mod:`emqlab.scripting.host`) and checked against a Redis 7.0 server by
``tests/test_host_differential.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from emqlab.protocol import commands as _commands
from emqlab.protocol import messages
from emqlab.scripting.sandbox import lua_type

Command = tuple[bytes, ...]

#: Commands (named as in the command table, ``container|sub`` for subcommands) whose success reply is a RESP
#: *status* (simple string); they become ``{ok=…}`` tables in Lua. Checked against a Redis 7.0 server by
#: ``tests/test_host_differential.py``. ``PING`` only without an argument, ``SET`` not with ``GET``.
STATUS_REPLY_COMMANDS: frozenset[str] = frozenset(
    "set setex psetex mset rename lset ltrim hmset type select flushdb flushall restore restore-asking swapdb "
    "pfmerge migrate xsetid ping xgroup|create xgroup|setid slowlog|reset memory|purge".split()
)

class LuaScriptError(redis.exceptions.ResponseError):
    """An error reply produced by a script run in the host (an error raised inside the script, or a
    ``{err=…}`` return). The message has Redis 7's shape as redis-py gives it (a leading ``ERR`` dropped),
    e.g. ``user_script:3: boom script: <sha1>, on @user_script:3.``; ``reply`` is the error as Redis writes
    it after the ``-`` (its code kept, CR and LF as spaces: ``ERR user_script:3: boom …``), or ``None``
    where the host made the error itself before the script ran (a compile error, a refused shebang)."""

    def __init__(self, message: str, reply: bytes | None = None) -> None:
        super().__init__(message)
        self.reply = reply


class MapReply(list[Any]):
    """A ``{map=…}`` reply for a RESP3 client: its keys and values in turn (``tree_to_py(…)`` of a RESP3 tree)."""


def wire_error(text: bytes) -> bytes:
    """An error reply's text as Redis writes it: each CR and LF a space (RESP's error is one line)."""
    return text.replace(b"\r", b" ").replace(b"\n", b" ")


@dataclass(frozen=True)
class Status:
    """A status reply (``+OK``); ``bytes(Status(b"OK")) == b"OK"``."""

    value: bytes

    def __bytes__(self) -> bytes:
        return self.value



def as_bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bool):
        raise TypeError("booleans are not Redis arguments")
    if isinstance(v, int):
        return str(v).encode()
    if isinstance(v, float):
        return (str(int(v)) if v.is_integer() else repr(v)).encode()
    raise TypeError(f"cannot send {type(v).__name__} as a Redis argument")


def as_text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


#: Error codes of Redis 7.0 replies; redis-py removes some of them from the message (it keeps them in
#: ``status_code``), the script must see them.
_ERROR_CODES = frozenset(
    "ERR WRONGTYPE NOSCRIPT BUSY BUSYKEY BUSYGROUP NOGROUP NOPROTO LOADING OOM NOAUTH NOPERM WRONGPASS EXECABORT "
    "READONLY MASTERDOWN MISCONF NOREPLICAS NOTBUSY UNBLOCKED CROSSSLOT MOVED ASK TRYAGAIN CLUSTERDOWN "
    "UNKILLABLE NOMASTERLINK".split()
)


def error_text(e: BaseException) -> bytes:
    """The error reply as the server sent it: redis-py strips the code of some errors (``ERR``, ``NOSCRIPT``,
    ``OOM`` …) from the message; put it back (scripts see it)."""
    msg = str(e)
    if msg.startswith("unknown command "):  # Redis checks the command table before running it
        return messages.UNKNOWN_COMMAND.encode()
    # redis-py 8 names the code of every error in ``status_code``, kept in the message or not; older
    # releases only on the classes whose message lost it
    code = getattr(e, "status_code", None)
    first = msg.split(" ", 1)[0]
    if code:
        return (msg if first == code else f"{code} {msg}").encode()
    if first not in _ERROR_CODES:
        msg = "ERR " + msg
    return msg.encode()


def _status_command(cmd: Command) -> bool:
    name = cmd[0].decode("utf-8", "replace").lower()
    if name in _commands._containers() and len(cmd) >= 2:
        name = f"{name}|{cmd[1].decode('utf-8', 'replace').lower()}"
    if name not in STATUS_REPLY_COMMANDS:
        return False
    if name == "ping":
        return len(cmd) == 1
    if name == "set":
        return not any(a.upper() == b"GET" for a in cmd[3:])
    return True


def reply_to_lua(table_from: Callable[[Any], Any], cmd: Command, reply: Any) -> Any:
    """``reply`` (a raw RESP2 reply of ``cmd``, as redis-py or a command executor gives it) as the Lua value
    ``redis.call`` returns; ``table_from`` makes a Lua table (the runtime's)."""
    if type(reply) is bytes:
        if _status_command(cmd):
            return table_from({b"ok": reply})
        return reply
    if isinstance(reply, bool):
        return 1 if reply else 0
    if isinstance(reply, int):
        return reply
    if reply is None:
        return False
    if isinstance(reply, list):
        return table_from([_nested_to_lua(table_from, x) for x in reply])
    if isinstance(reply, Status):
        return table_from({b"ok": reply.value})
    if isinstance(reply, float):  # RESP3 doubles never reach us on RESP2; keep it safe
        return repr(reply).encode()
    raise TypeError(f"unexpected reply {reply!r} to {cmd[0]!r}")


def _nested_to_lua(table_from: Callable[[Any], Any], x: Any) -> Any:
    if x is None:
        return False
    if isinstance(x, list):
        return table_from([_nested_to_lua(table_from, y) for y in x])
    if isinstance(x, Status):
        return table_from({b"ok": x.value})
    if isinstance(x, BaseException):
        return table_from({b"err": error_text(x)})
    return x


_INT64_MIN = -(2**63)


def _to_int(v: Any) -> int:
    # Redis casts the Lua number to long long: truncation toward zero; out of range, inf and NaN give the
    # int64 minimum (x86-64's cvttsd2si)
    if isinstance(v, int):
        return v
    if v != v or v >= 2.0**63 or v < -(2.0**63):
        return _INT64_MIN
    return int(v)


def tree_to_py(tree: Any, status: bool = False) -> Any:
    """The reply tree from Lua (``{kind, value}`` tables) as Python values, without Python recursion (a
    reply may nest thousands of arrays deep). A status reply is its bytes, as redis-py gives it, or with
    ``status`` a :class:`Status`."""
    if isinstance(tree, bytes):
        return tree
    kind = tree[1]
    if kind == b"err":
        raise _error_reply(tree[2])
    if kind not in _NODES:
        return _leaf(tree, status)
    root: list[Any] = MapReply() if kind == b"map" else []
    stack: list[tuple[Any, int, list[Any]]] = [(tree, 2, root)]
    while stack:
        node, i, out = stack.pop()
        while True:
            item = node[i]
            if item is None:
                break
            i += 1
            if isinstance(item, bytes):
                out.append(item)
                continue
            k = item[1]
            if k in _NODES:
                child: list[Any] = MapReply() if k == b"map" else []
                out.append(child)
                stack.append((node, i, out))
                node, i, out = item, 2, child
                continue
            if k == b"err":
                out.append(_error_reply(item[2]))
            else:
                out.append(_leaf(item, status))
    return root


#: the kinds of a reply tree's inner nodes (``map``: a RESP3 client's ``{map=…}``)
_NODES = (b"array", b"map")


def _error_reply(text: bytes) -> LuaScriptError:
    return LuaScriptError(_strip_err(as_text(text)), wire_error(text))


def _leaf(tree: Any, status: bool) -> Any:
    kind = tree[1]
    if kind == b"int":
        return _to_int(tree[2])
    if kind == b"nil":
        return None
    if kind == b"double":  # (a RESP3 client's {double=…})
        return float(tree[2])
    return Status(tree[2]) if status else tree[2]  # status


def _strip_err(msg: str) -> str:
    # what redis-py does to an error reply: drop a leading "ERR "
    return msg[4:] if msg.startswith("ERR ") else msg


def lua_error_text(err: Any) -> str:
    if err is None:
        return "nil"
    if lua_type(err) == "table":
        e = err[b"err"]
        if e is not None:
            return _strip_err(as_text(e))
        return "Error running script: error object is a table"
    return _strip_err(as_text(err))


def lua_error_line(err: Any) -> int:
    if lua_type(err) == "table":
        line = err[b"line"]
        return int(line) if line is not None else 0
    return 0


def line_of(msg: str) -> int:
    if msg.startswith("user_script:"):
        rest = msg[len("user_script:"):]
        digits = rest.split(":", 1)[0]
        if digits.isdigit():
            return int(digits)
    return 0
