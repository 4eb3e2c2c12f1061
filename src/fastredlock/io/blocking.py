"""A plain blocking RESP connection, for tools that talk to a master outside the cores.

``fastredlock audit`` (and the fault kit's own tests) send a few commands on one connection, with
no need for speed: a socket, hiredis, nothing of the engine (no reply guard, no deadlines, no owed
replies). Error replies come back as ``hiredis.ReplyError`` values, not raised.
"""
from __future__ import annotations

import socket
from typing import Any, Tuple, Union

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from ..protocol.resp import encode_command

__all__ = ["Connection"]


class Connection:
    """One blocking connection to ``address``: ``(host, port)``, or a Unix socket's path."""

    def __init__(self, address: Union[Tuple[str, int], str], timeout: float = 2.0) -> None:
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
        self.reader = hiredis.Reader()

    def send(self, *args: Any) -> None:
        """Send one command (bytes sent as they are, anything else as its ``str``)."""
        self.sock.sendall(encode_command(*[a if isinstance(a, bytes) else str(a).encode() for a in args]))

    def reply(self) -> Any:
        """Read the next reply; ``ConnectionError`` if the server closed the connection first."""
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.reader.feed(data)

    def call(self, *args: Any) -> Any:
        """Send one command and return its reply."""
        self.send(*args)
        return self.reply()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
