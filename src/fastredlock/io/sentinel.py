"""Ask a Sentinel master's sentinels where it is: the I/O half, shared by both twins.

What to ask and what the answers mean is :mod:`fastredlock.protocol.sentinel`'s; this module only
talks: a short blocking exchange (one connect, one write, two replies) with one sentinel after
another, the whole bounded by ``connect_timeout``, before a twin opens the master's connection.

Why blocking, in Python: it runs only when a Sentinel master's connection is (re)opened, which is
rare (connections are kept), and off the hot path of plain masters, which never come here. The
cost: a round that reconnects a Sentinel master waits for the sentinels first (on loopback or a
LAN, well under a millisecond; at worst ``connect_timeout`` when none answers), and with the
asyncio client that wait holds up the event loop as long.

**TLS.** Sentinels are asked over TLS when the spec's :attr:`~.masters.SentinelSpec.tls` is set
(``rediss+sentinel://``, ``sentinel_ssl=true``), with the same contexts as the cores
(:func:`~.tls.context_for`), each sentinel's certificate checked against the host it is asked at.
Asked in plain text, a sentinel's AUTH password crosses the network readable, and so does the
master's address it returns: whoever can change that answer can point the client at a server of
their own (which then receives the master's AUTH, in plain text unless the master is TLS).

**Guards.** A sentinel's replies are read under the same deadline as the whole exchange and at
most :data:`MAX_REPLY` bytes per reply; a reply of another shape than the ones asked for is that
sentinel's problem (the next one is asked), never an exception out of a lock's round.
"""
from __future__ import annotations

import socket
import ssl
from time import monotonic
from typing import Any, List, Optional, Tuple

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from .tls import context_for, reason
from ..protocol.sentinel import master_address, role_age_ms, sentinel_query

__all__ = ["MAX_REPLY", "Resolver", "SentinelError", "next_reply", "resolve"]

#: Most bytes read for one reply of a sentinel (its answers are a few hundred bytes; a peer that
#: sends more is cut off, as the lock path's reply guard cuts a master off).
MAX_REPLY = 1 << 20

#: What a malformed reply can raise in the parsing helpers: the sentinel's problem, not the caller's.
_MALFORMED = (TypeError, ValueError, IndexError, KeyError, AttributeError, UnicodeError, RecursionError)


class SentinelError(Exception):
    """No sentinel told where the master is; ``str()`` says what each one did."""


class Resolver:
    """The sentinels of one Sentinel master (a :class:`~fastredlock.io.masters.MasterSpec` with
    ``sentinel`` set), asked in turn; the last one that answered is asked first next time."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.service = spec.sentinel.service
        self.order: List[Tuple[str, int]] = list(spec.sentinel.sentinels)
        self.query, self.replies = sentinel_query(spec.sentinel)

    def ask(self, timeout: float) -> Tuple[Tuple[str, int], int]:
        """``((host, port), role_age_ms)`` from the first sentinel that names a master within
        ``timeout`` seconds in all; :class:`SentinelError` otherwise."""
        deadline = monotonic() + timeout
        problems = []
        unknown = 0
        for k, sentinel in enumerate(self.order):
            left = deadline - monotonic()
            if left <= 0.0:
                problems.append(f"{sentinel[0]}:{sentinel[1]}: not asked, {timeout:g}s passed")
                continue
            try:
                replies = self._exchange(sentinel, deadline)
                address = master_address(replies[-2])
                age_ms = role_age_ms(replies[-1], address) if address is not None else -1
            except (OSError, hiredis.ProtocolError) as exc:
                problems.append(f"{sentinel[0]}:{sentinel[1]}: {_why(exc)}")
                continue
            except _MALFORMED as exc:
                problems.append(f"{sentinel[0]}:{sentinel[1]}: malformed reply ({type(exc).__name__})")
                continue
            if address is None:
                if replies[-2] is None:
                    unknown += 1
                    problems.append(f"{sentinel[0]}:{sentinel[1]}: no master named {self.service!r}")
                else:
                    problems.append(f"{sentinel[0]}:{sentinel[1]}: {replies[-2]!s}")
                continue
            if k:
                self.order.insert(0, self.order.pop(k))
            return address, age_ms
        if unknown == len(self.order):
            raise SentinelError(f"unknown service {self.service!r}: no sentinel knows it")
        raise SentinelError(f"no sentinel named the master of {self.service!r} (" + "; ".join(problems) + ")")

    def _exchange(self, sentinel: Tuple[str, int], deadline: float) -> list:
        """Send the query to one sentinel and read its replies (error replies as values)."""
        sock = socket.create_connection(sentinel, timeout=max(0.001, deadline - monotonic()))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.spec.sentinel.tls
            if tls is not None:  # the handshake is bounded by the socket's timeout (the time left)
                sock = context_for(tls).wrap_socket(sock, server_hostname=sentinel[0])
            sock.settimeout(max(0.001, deadline - monotonic()))
            sock.sendall(self.query)
            reader = hiredis.Reader()
            replies = [next_reply(sock, reader, deadline, "the sentinel") for _ in range(self.replies)]
            if isinstance(replies[0], hiredis.ReplyError) and self.replies == 3:
                raise ConnectionError(f"AUTH failed: {replies[0]}")
            return replies
        finally:
            sock.close()


def next_reply(sock: Any, reader: Any, deadline: float, who: str, limit: int = MAX_REPLY) -> Any:
    """The next reply on a blocking socket (error replies as values), read whole by ``deadline``
    (``socket.timeout`` otherwise, however the bytes trickle in) and within ``limit`` bytes read
    for it (``hiredis.ProtocolError`` otherwise: the connection is to be closed)."""
    read = 0
    while True:
        reply = reader.gets()
        if reply is not False:
            return reply
        if read > limit:
            raise hiredis.ProtocolError(f"{who} sent over {limit} bytes without completing a reply")
        left = deadline - monotonic()
        if left <= 0.0:
            raise socket.timeout("timed out")
        sock.settimeout(left)
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"{who} closed the connection")
        read += len(data)
        reader.feed(data)


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {reason(exc)}"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def resolve(session: Any, i: int, resolver: Resolver) -> Optional[Any]:
    """Ask master ``i``'s sentinels (bounded by the session's ``connect_timeout``) and tell the
    session (the time spent, then the answer); return the spec to connect to (the address filled
    in), or None: the session was told of the failure (``sentinel error``)."""
    started = monotonic()
    try:
        address, age_ms = resolver.ask(session.connect_timeout)
    except SentinelError as exc:
        now = monotonic()
        session.blocked(i, now - started)
        session.sentinel_failed(i, str(exc), now)
        return None
    now = monotonic()
    session.blocked(i, now - started)
    session.resolved(i, address, age_ms, now)
    return resolver.spec._replace(host=address[0], port=address[1])
