"""A pure-Python RESP reader with ``hiredis.Reader``'s interface, for interpreters without hiredis.

hiredis-py ships wheels for CPython only; on PyPy (and wherever it does not install) this reader
parses the replies instead. :mod:`fastredlock.io.reader` picks one of the two; nothing else imports
this module directly (but the tests, which compare it with hiredis).

It follows hiredis where fastredlock can tell the difference:

- :meth:`Reader.gets` returns ``False`` while the buffered bytes hold no complete reply;
- error replies (``-ERR ...``, RESP3 ``!``) come back as :class:`ReplyError` *values*, never raised
  (also inside arrays), so ``NOSCRIPT`` can drive the EVALSHA -> EVAL fallback;
- status and bulk replies are ``bytes``, integers ``int``, null bulk/array ``None``, arrays ``list``;
- a reply that is not RESP raises :class:`ProtocolError`, and the reader stays broken after that
  (hiredis does too): the caller closes the connection;
- arrays nested deeper than :data:`MAX_DEPTH` raise :class:`ProtocolError` ("Max nesting depth
  exceeded", hiredis's words; hiredis allows 1024 levels, this reader, which recurses, fewer: no
  Redis reply nests more than a few, and a peer that does must not exhaust the interpreter's stack).

RESP3 types (``_ , # = ( % ~ > |``) are parsed as hiredis 3 parses them (``!`` is a protocol
error there too); fastredlock never asks for RESP3, and the reply guard refuses them on the lock
path before any parser sees them.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

__all__ = ["ProtocolError", "Reader", "ReplyError"]


class ProtocolError(Exception):
    """The bytes are not RESP (hiredis.ProtocolError)."""


class ReplyError(Exception):
    """An error reply, returned as a value (hiredis.ReplyError)."""


_NOT_YET = object()  # an incomplete reply: wait for more bytes
#: Deepest nesting of aggregate replies parsed (one Python frame per level).
MAX_DEPTH = 200


class Reader:
    """Feed bytes with :meth:`feed`, take complete replies with :meth:`gets` (``False``: none yet)."""

    def __init__(self, protocolError: Any = None, replyError: Any = None, notEnoughData: Any = False,
                 encoding: Optional[str] = None, errors: Optional[str] = None) -> None:
        self._buf = bytearray()
        self._pos = 0               # where the next reply starts in _buf
        self._failed: Optional[str] = None  # a protocol error makes the reader unusable
        self._protocol_error = protocolError or ProtocolError
        self._reply_error = replyError or ReplyError
        self._not_enough = notEnoughData
        self._encoding = encoding
        self._errors = errors or "strict"

    def feed(self, data: Any, offset: int = 0, length: Optional[int] = None) -> None:
        """Append ``data[offset:offset + length]`` (all of it by default) to the buffer."""
        view = memoryview(data)
        end = len(view) if length is None else offset + length
        if offset < 0 or end > len(view) or offset > end:
            raise ValueError("offset and length out of the buffer")
        if self._pos and self._pos == len(self._buf):
            del self._buf[:]
            self._pos = 0
        self._buf += view[offset:end]

    def has_data(self) -> bool:
        """Whether bytes that were fed are not part of a reply returned yet."""
        return self._pos < len(self._buf)

    def gets(self, *args: Any) -> Any:
        """The next complete reply, or ``False`` (``notEnoughData``) when the buffer holds none."""
        if self._failed is not None:
            raise self._protocol_error(self._failed)
        try:
            reply, pos = self._read(self._pos)
        except _Broken as exc:
            self._failed = str(exc)
            raise self._protocol_error(self._failed) from None
        if reply is _NOT_YET:
            return self._not_enough
        self._pos = pos
        if pos > 65536 and pos * 2 > len(self._buf):  # drop what was read, now and then
            del self._buf[:pos]
            self._pos = 0
        return reply

    # -- parsing: each step returns (value, position after it) or (_NOT_YET, start) --------------
    def _line(self, pos: int) -> Tuple[Optional[bytes], int]:
        end = self._buf.find(b"\r\n", pos)
        if end < 0:
            return None, pos
        return bytes(self._buf[pos:end]), end + 2

    def _int(self, line: bytes, what: str) -> int:
        try:
            return int(line)
        except ValueError:
            raise _Broken(f"Bad {what}" if "length" in what else f"Bad {what} value") from None

    def _text(self, data: bytes) -> Any:
        if self._encoding is None:
            return data
        return data.decode(self._encoding, self._errors)

    def _error(self, data: bytes) -> Any:
        return self._reply_error(data.decode("utf-8", "replace"))

    def _read(self, pos: int, depth: int = 0) -> Tuple[Any, int]:
        buf = self._buf
        if pos >= len(buf):
            return _NOT_YET, pos
        kind = buf[pos]
        line, after = self._line(pos + 1)
        if line is None:
            return _NOT_YET, pos
        if kind == 43:  # + status
            return self._text(line), after
        if kind == 45:  # - error
            return self._error(line), after
        if kind == 58:  # : integer
            return self._int(line, "integer"), after
        if kind in (36, 61):  # $ bulk, = verbatim
            size = self._int(line, "bulk string length")
            if size < 0:
                if size == -1 and kind == 36:
                    return None, after
                raise _Broken("Bulk string length out of range")
            end = after + size
            if len(buf) < end + 2:
                return _NOT_YET, pos
            body = bytes(buf[after:end])  # the two bytes after it are skipped unread, as hiredis does
            if kind == 61:  # "txt:" + text
                body = body[4:]
            return self._text(body), end + 2
        if kind in (42, 37, 126, 62, 124):  # * array, % map, ~ set, > push, | attribute
            count = self._int(line, "multi-bulk length")
            if count < 0:
                if count == -1 and kind == 42:
                    return None, after
                raise _Broken("Multi-bulk length out of range")
            items: List[Any] = []
            cursor = after
            if count and depth >= MAX_DEPTH:
                raise _Broken("Max nesting depth exceeded")
            for _ in range(count * 2 if kind in (37, 124) else count):
                item, cursor = self._read(cursor, depth + 1)
                if item is _NOT_YET:
                    return _NOT_YET, pos
                items.append(item)
            if kind == 37:
                return {items[i]: items[i + 1] for i in range(0, len(items), 2)}, cursor
            return items, cursor  # an attribute too: its pairs, as a list (then the reply it annotates)
        if kind == 95:  # _ null
            return None, after
        if kind == 35:  # # boolean
            if line not in (b"t", b"f"):
                raise _Broken("Bad bool value")
            return line == b"t", after
        if kind == 44:  # , double
            try:
                return float(line), after
            except ValueError:
                raise _Broken("Bad double value") from None
        if kind == 40:  # ( big number: its digits
            return line, after
        raise _Broken(f'Protocol error, got "{chr(kind)}" as reply type byte')


class _Broken(Exception):
    """Internal: the stream is not RESP."""
