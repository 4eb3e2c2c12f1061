"""RESP encoding and the reply guard: the bytes a lock client sends, and what it accepts back.

A master answers a lock client with a few shapes only: status (``+OK``), error (``-ERR ...``),
integer (``:1``) and bulk (``$n``) replies of bounded size. :class:`ReplyGuard` checks a stream of
bytes against that before any parser buffers it, so a hostile or confused master (arrays, RESP3
types, a gigabyte bulk, an endless line) is cut off at once instead of filling memory.
"""

#: Largest bulk reply accepted (``INFO server`` is a few KB; lock replies are a few bytes). A master
#: announcing more is hostile or confused: it is cut off at the header, before anything is buffered.
MAX_BULK = 1 << 20
#: Longest status/error/integer line accepted.
MAX_LINE = 1 << 16


def encode_command(*args):
    """Encode one command as a RESP array of bulk strings (binary-safe: names may hold CRLF)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class ReplyGuard:
    """Tracks where a connection's byte stream is between replies and refuses unexpected shapes.

    One per connection, :meth:`reset` when the connection is (re)opened. :meth:`check` is given
    each chunk read, in order, and returns a description of the first problem, or None; then
    :attr:`good` says where the last whole reply before it ended in that chunk. The replies before
    a bad byte are as good as if the read had stopped there (a twin's fast path settles them
    before it sees the rest), so they are handed on, and the connection is refused after them.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        """A new connection: the stream starts between replies."""
        self.kind = 0       # type byte of the reply being read, 0 between replies
        self.line = 0       # bytes of its line seen so far
        self.header = b""   # the bulk length digits seen so far
        self.skip = 0       # bulk body bytes (and CRLF) still to pass over
        self.good = 0       # where the last whole reply of the chunk last checked ended
        self.problem = None  # the first problem found (the stream is refused from there on)

    def check(self, data, start, end):
        """Check ``data[start:end]`` (bytes or bytearray) as the next part of the stream."""
        pos = start
        self.good = start
        while pos < end:
            if self.skip:
                take = self.skip if self.skip < end - pos else end - pos
                self.skip -= take
                pos += take
                if not self.skip:
                    self.good = pos
                continue
            if not self.kind:
                kind = data[pos]
                if kind != 43 and kind != 45 and kind != 58 and kind != 36:  # + - : $
                    return self._refuse("unexpected reply type %r" % bytes([kind]))
                self.kind = kind
                self.line = 0
                self.header = b""
                pos += 1
            nl = data.find(b"\n", pos, end)
            stop = end if nl == -1 else nl + 1
            self.line += stop - pos
            if self.line > MAX_LINE:
                return self._refuse("reply line longer than %d bytes" % MAX_LINE)
            if self.kind == 36:  # '$': keep the length digits
                self.header += bytes(data[pos:stop])
            if nl == -1:
                return None
            pos = stop
            if self.kind == 36:
                try:
                    length = int(self.header)
                except ValueError:
                    return self._refuse("bad bulk length %r" % self.header[:20])
                if length > MAX_BULK:
                    return self._refuse("bulk reply of %d bytes, over the %d-byte limit" % (length, MAX_BULK))
                if length >= 0:
                    self.skip = length + 2
            self.kind = 0
            if not self.skip:
                self.good = pos
        return None

    def _refuse(self, problem):
        self.problem = problem
        return problem
