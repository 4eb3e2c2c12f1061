"""A plain blocking RESP connection, for tools that talk to a master outside the cores.

``fastredlock audit`` (and the fault kit's own tests) send a few commands on one connection, with
no need for speed: a socket, hiredis, nothing of the engine (no owed replies). Error replies come
back as ``hiredis.ReplyError`` values, not raised.

It is guarded like the lock path all the same, since operators point it at production masters:
TLS as the cores set it up (:func:`~fastredlock.io.tls.context_for`, the certificate checked
against the host) whenever the master's settings ask for it, so no credential is sent in plain
text to a ``rediss://`` master; each reply read whole within ``timeout`` (not each ``recv``: a
master that trickles its reply byte by byte is cut off at the deadline); and at most ``limit``
bytes read for one reply.
"""
from __future__ import annotations

import socket
from time import monotonic
from typing import Any, Optional, Tuple, Union

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from ..protocol.resp import encode_command
from .sentinel import next_reply
from .tls import TlsOptions, context_for

__all__ = ["MAX_REPLY", "Connection"]

#: Most bytes read for one reply (``INFO`` is a few KB): a master that sends more is cut off.
MAX_REPLY = 16 << 20


class Connection:
    """One blocking connection to ``address``: ``(host, port)``, or a Unix socket's path; over TLS
    when ``tls`` (a master's :class:`~fastredlock.io.tls.TlsOptions`) is given."""

    def __init__(self, address: Union[Tuple[str, int], str], timeout: float = 2.0,
                 tls: Optional[TlsOptions] = None, limit: int = MAX_REPLY) -> None:
        self.timeout = timeout
        self.limit = limit
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(address)
            except OSError:
                self.sock.close()
                raise
        else:
            self.sock = socket.create_connection(address, timeout=timeout)
            if tls is not None:
                try:  # the handshake, before a byte of ours: bounded by the socket's timeout
                    self.sock = context_for(tls).wrap_socket(self.sock, server_hostname=address[0])
                except OSError:
                    self.sock.close()
                    raise
        self.reader = hiredis.Reader()

    def send(self, *args: Any) -> None:
        """Send one command (bytes sent as they are, anything else as its ``str``)."""
        self.sock.settimeout(self.timeout)
        self.sock.sendall(encode_command(*[a if isinstance(a, bytes) else str(a).encode() for a in args]))

    def reply(self) -> Any:
        """Read the next reply, whole within ``timeout`` (``socket.timeout`` otherwise);
        ``ConnectionError`` if the server closed the connection first, ``hiredis.ProtocolError``
        past ``limit`` bytes or for bytes that are not RESP."""
        return next_reply(self.sock, self.reader, monotonic() + self.timeout, "the server", self.limit)

    def call(self, *args: Any) -> Any:
        """Send one command and return its reply."""
        self.send(*args)
        return self.reply()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
