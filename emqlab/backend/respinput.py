"""A client's request bytes cut into commands as Redis 7.0 cuts them (``src/networking.c``:
``processMultibulkBuffer``, ``processInlineBuffer``), with Redis's default limits, for ``emqlab server``:
the front end keeps at most one unfinished command of a connection in memory, and refuses what Redis refuses
with Redis's own ``Protocol error`` text (the connection is then closed, as Redis does).

The limits, Redis's defaults (``redis.conf``, ``src/server.h``):

* ``proto-max-bulk-len`` 512 MB: a bulk string's length ``$N`` over it (or negative, or not a plain decimal
  number) is ``Protocol error: invalid bulk length``;
* a multibulk count ``*N`` over ``INT_MAX`` (2147483647) or not a number is ``Protocol error: invalid
  multibulk length``; zero or negative is an empty command, skipped;
* ``PROTO_INLINE_MAX_SIZE`` 64 KB: an inline command with no newline yet past it is ``Protocol error: too big
  inline request``, a ``*N`` / ``$N`` header line past it ``too big mbulk count string`` / ``too big bulk
  count string``;
* ``client-query-buffer-limit`` 1 GB: a command whose data so far passes it closes the connection (Redis
  closes it without a reply; emqlab first says why).

As Redis, a bulk string's two bytes after its data are skipped unread (a length that does not match the data
leaves the rest to be read as the next command), and a line not starting with ``*`` is an inline command: its
words split as ``redis-cli`` quotes them (``"…"`` with ``\\n``, ``\\xHH`` escapes, ``'…'``), an unclosed quote
being ``Protocol error: unbalanced quotes in request``.
"""

from __future__ import annotations

import re

from emqlab.protocol.messages import SERVER_ERROR

__all__ = ["MAX_BULK_LEN", "MAX_INLINE", "MAX_MULTIBULK", "QUERY_BUFFER_LIMIT", "ProtocolError", "RequestReader",
           "split_inline"]

#: Redis's ``proto-max-bulk-len`` default: the longest bulk string a client may send (bytes)
MAX_BULK_LEN = 512 * 1024 * 1024
#: Redis's multibulk count limit (``INT_MAX``)
MAX_MULTIBULK = 2**31 - 1
#: Redis's ``PROTO_INLINE_MAX_SIZE``: the longest inline command or header line (bytes)
MAX_INLINE = 64 * 1024
#: Redis's ``client-query-buffer-limit`` default: the most one unfinished command may hold (bytes)
QUERY_BUFFER_LIMIT = 1024 * 1024 * 1024
#: what each argument is charged beyond its bytes towards :data:`QUERY_BUFFER_LIMIT` (a Python ``bytes``
#: and its list slot): a command of millions of empty arguments is bounded too
ARG_OVERHEAD = 48

# a number as Redis's string2ll reads it: no sign but '-', no leading zero, no space
_NUMBER = re.compile(rb"0|-?[1-9][0-9]{0,18}")


class ProtocolError(Exception):
    """A request Redis refuses: ``str(e)`` the error reply's text (``ERR Protocol error: …``); the connection
    is to be closed once it is sent."""


def _number(text: bytes) -> int | None:
    return int(text) if _NUMBER.fullmatch(text) else None


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_HEX = re.compile(rb"[0-9a-fA-F]{2}")
_SPACE = b" \t\n\r\v\f"
_WORD_END = b" \t\n\r\0"  # (what ends an unquoted word)


def split_inline(line: bytes) -> list[bytes]:
    """An inline command's words (``bytes``), quoted as Redis reads them; raises :class:`ProtocolError` for an
    unclosed quote or a closing quote followed by anything but a space."""
    words: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return words
        word = bytearray()
        quote = 0  # (the open quote's byte, 0 outside quotes)
        while True:
            if i >= n:
                if quote:
                    raise ProtocolError("ERR Protocol error: unbalanced quotes in request")
                break
            c = line[i]
            if quote == ord('"') and c == ord("\\") and i + 3 < n and line[i + 1] == ord("x") \
                    and _HEX.fullmatch(line[i + 2:i + 4]):
                word.append(int(line[i + 2:i + 4], 16))
                i += 4
                continue
            if quote and c == ord("\\") and i + 1 < n and (quote == ord('"') or line[i + 1] == ord("'")):
                nxt = line[i + 1]
                word += _ESCAPES.get(nxt, bytes([nxt])) if quote == ord('"') else b"'"
                i += 2
                continue
            if quote and c == quote:
                i += 1
                if i < n and line[i] not in _SPACE:  # (a closing quote must end the word)
                    raise ProtocolError("ERR Protocol error: unbalanced quotes in request")
                break
            if not quote and c in _WORD_END:
                break
            if not quote and c in b"\"'":  # (as Redis: a quote opens inside a word too)
                quote = c
            else:
                word.append(c)
            i += 1
        words.append(bytes(word))


class RequestReader:
    """One connection's request stream: :meth:`feed` it the bytes as they come, take the complete commands
    (each a ``list[bytes]``, name first) from :meth:`next_command`. Holds the unread bytes and the unfinished
    command only; raises :class:`ProtocolError` where Redis would refuse the stream."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0  # (bytes of _buf already read)
        self._left = 0  # (arguments still to read of the current multibulk command; 0: between commands)
        self._args: list[bytes] = []
        self._bulk = -1  # (the length of the bulk string being read, -1 while its header is awaited)
        self._held = 0  # (what the unfinished command holds, towards QUERY_BUFFER_LIMIT)

    def feed(self, data: bytes) -> None:
        """Add bytes the client sent; raises :class:`ProtocolError` when the unfinished command would pass
        :data:`QUERY_BUFFER_LIMIT`."""
        if self._pos:  # (drop what has been read, so the buffer holds only unread bytes)
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data
        if self._held + len(self._buf) > QUERY_BUFFER_LIMIT:
            raise ProtocolError(f"{SERVER_ERROR}the command passed 1 GB, Redis's client-query-buffer-limit;"
                                " closing the connection")

    def next_command(self) -> list[bytes] | None:
        """The next complete command (``[]`` for an empty one, to be skipped), or None until more bytes
        come; raises :class:`ProtocolError` at a request Redis refuses (the commands before it are answered
        first, as Redis does)."""
        return self._next()

    def _line(self, limit_text: str, at: bytes = b"\r") -> bytes | None:
        """The header line at the read position (its end marker and the byte after ``\\r`` consumed), or None
        until it is whole; past :data:`MAX_INLINE` without its end, ``limit_text``'s protocol error."""
        end = self._buf.find(at, self._pos)
        if end < 0 or (at == b"\r" and end + 1 >= len(self._buf)):
            if len(self._buf) - self._pos > MAX_INLINE:
                raise ProtocolError(f"ERR Protocol error: {limit_text}")
            return None
        line = bytes(self._buf[self._pos:end])
        self._pos = end + (2 if at == b"\r" else 1)  # (Redis skips the byte after '\r' unread)
        return line

    def _next(self) -> list[bytes] | None:
        if self._left == 0:
            if self._pos >= len(self._buf):
                return None
            if self._buf[self._pos] != ord("*"):
                line = self._line("too big inline request", at=b"\n")
                if line is None:
                    return None
                return split_inline(line[:-1] if line.endswith(b"\r") else line)
            header = self._line("too big mbulk count string")
            if header is None:
                return None
            count = _number(header[1:])
            if count is None or count > MAX_MULTIBULK:
                raise ProtocolError("ERR Protocol error: invalid multibulk length")
            if count <= 0:
                return []
            self._left, self._args, self._held = count, [], 0
        while self._left:
            if self._bulk < 0:
                if self._pos >= len(self._buf):
                    return None
                if self._buf[self._pos] != ord("$"):
                    got = chr(self._buf[self._pos])
                    raise ProtocolError(f"ERR Protocol error: expected '$', got '{got}'")
                header = self._line("too big bulk count string")
                if header is None:
                    return None
                length = _number(header[1:])
                if length is None or length < 0 or length > MAX_BULK_LEN:
                    raise ProtocolError("ERR Protocol error: invalid bulk length")
                self._bulk = length
            if len(self._buf) - self._pos < self._bulk + 2:
                return None
            arg = bytes(self._buf[self._pos:self._pos + self._bulk])
            self._pos += self._bulk + 2  # (as Redis: the two bytes after the data are not looked at)
            self._args.append(arg)
            self._held += len(arg) + ARG_OVERHEAD
            self._bulk = -1
            self._left -= 1
        args, self._args, self._held = self._args, [], 0
        return args
