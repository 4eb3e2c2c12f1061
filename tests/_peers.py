"""Small real loopback peers for the transport tests: a TCP server thread on 127.0.0.1 that speaks
just enough to stand where a master, a sentinel or a cluster node should be.

They are real peers on real sockets (the client under test opens its own connections to them),
used where a test needs a peer that misbehaves in a way no real server does: a plain listener on a
TLS port (it records every byte a client sends it), a master that streams a huge reply, trickles
one, or answers malformed sentinel and cluster replies. Every wait is bounded; :meth:`Peer.stop`
ends the threads.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable, List, Optional

from fastredlock.io import reader as hiredis


def encode(value: Any) -> bytes:
    """A RESP2 reply for ``value`` (bytes/str: bulk, int: integer, list: array, None: null,
    ``Exception``: error)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, Exception):
        return b"-%s\r\n" % str(value).encode()
    if isinstance(value, bool) or isinstance(value, int):
        return b":%d\r\n" % int(value)
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    return b"*%d\r\n" % len(value) + b"".join(encode(v) for v in value)


class Conn:
    """One accepted connection: its socket and every byte received on it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = bytearray()
        #: Bytes this peer managed to send on it.
        self.sent = 0
        self.closed = threading.Event()

    def recv(self, timeout: float) -> bytes:
        """Up to 64 KB received within ``timeout`` (b"" on a close or nothing in time)."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, OSError):
            return b""
        self.received += data
        return data

    def wait_closed(self, timeout: float) -> bool:
        """Read (and record) until the client closes the connection; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(min(left, 0.1))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return True
            if not data:
                return True
            self.received += data

    def send(self, data: bytes) -> bool:
        """Send ``data``; False once the client has closed the connection."""
        try:
            self.sock.settimeout(2.0)
            self.sock.sendall(data)
        except OSError:
            return False
        self.sent += len(data)
        return True

    def commands(self, stop: threading.Event, idle: float = 5.0):
        """Yield each command the client sends (a list of bytes), until it closes, ``stop`` is
        set or ``idle`` seconds pass without a byte."""
        reader = hiredis.Reader()
        quiet_since = time.monotonic()
        while not stop.is_set() and time.monotonic() - quiet_since < idle:
            command = reader.gets()
            if command is not False:
                yield command
                continue
            data = self.recv(0.05)
            if data:
                quiet_since = time.monotonic()
                reader.feed(data)
            elif self.sock.fileno() < 0:
                return
            else:
                try:  # a closed client: recv returns b"" at once, without the timeout
                    self.sock.settimeout(0)
                    if self.sock.recv(1, socket.MSG_PEEK) == b"":
                        return
                except (BlockingIOError, socket.timeout):
                    pass
                except OSError:
                    return


class Peer:
    """A TCP server on 127.0.0.1 (:attr:`port`); ``handler(conn, peer)`` serves each connection in
    a thread of its own; the connection is closed when it returns. A context manager."""

    def __init__(self, handler: Callable[[Conn, "Peer"], None]) -> None:
        self.handler = handler
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(32)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.conns: List[Conn] = []
        self.stopping = threading.Event()
        self._threads: List[threading.Thread] = []
        self._accept = threading.Thread(target=self._run, name="test-peer", daemon=True)
        self._accept.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            conn = Conn(sock)
            self.conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: Conn) -> None:
        try:
            self.handler(conn, self)
        except OSError:
            pass
        finally:
            conn.sock.close()
            conn.closed.set()

    def received(self) -> bytes:
        """Every byte received on every connection so far, one connection after another."""
        return b"".join(bytes(c.received) for c in list(self.conns))

    def wait_conns(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` connections were accepted and served (closed), or ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conns = list(self.conns)
            if len(conns) >= n and all(c.closed.is_set() for c in conns[:n]):
                return True
            time.sleep(0.01)
        return False

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()
        self._accept.join(2.0)
        for conn in list(self.conns):
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(5.0)

    def __enter__(self) -> "Peer":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def record(conn: Conn, peer: Peer) -> None:
    """A plain listener: record what the client sends (its first write, and whatever follows within
    0.3 s of it), then close, as a server that does not speak the client's protocol would."""
    if conn.recv(3.0):
        while conn.recv(0.3):
            pass


def tls_client_hello(data: bytes) -> bool:
    """Whether ``data`` begins with a TLS handshake record (a ClientHello: type 22, version 3.x)."""
    return len(data) >= 3 and data[0] == 0x16 and data[1] == 0x03


def answers(table: Callable[[List[bytes]], Optional[bytes]], idle: float = 5.0):
    """A handler that answers each command with ``table(command)`` (bytes sent as they are; None:
    no answer)."""

    def handler(conn: Conn, peer: Peer) -> None:
        for command in conn.commands(peer.stopping, idle):
            out = table(command)
            if out is not None and not conn.send(out):
                return

    return handler


# --- hostile masters of the wake-on-release tests -----------------------------------------------
STREAM = 200 << 20  # what the hostile master streams on the wake connection
CHUNK = b"x" * 65536


def rss() -> int:
    """This process's resident memory, bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The peak of :func:`rss` while the block runs, sampled every 5 ms by a thread: ``base`` (at
    entry), ``peak``, and ``growth`` (peak - base)."""

    def __init__(self) -> None:
        self.base = self.peak = 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base

    def __enter__(self) -> "PeakRss":
        self.base = self.peak = rss()
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._sampler.join(2.0)
        self.peak = max(self.peak, rss())


def stream_after_subscribe(conn, peer):
    """A master whose notification connection, once subscribed, receives a 200 MB bulk reply."""
    deadline = time.monotonic() + 5.0
    while b"SUBSCRIBE" not in conn.received and time.monotonic() < deadline and not peer.stopping.is_set():
        conn.recv(0.05)
    if b"SUBSCRIBE" not in conn.received:
        return  # the lock path's connections: never answered (their rounds time out)
    conn.streamed = True
    if not conn.send(b"$%d\r\n" % STREAM):
        return
    while conn.sent < STREAM and not peer.stopping.is_set():
        if not conn.send(CHUNK):
            return


def begin_and_go_silent(conn, peer):
    """A master that begins a pub/sub reply on the notification connection and never finishes it."""
    deadline = time.monotonic() + 5.0
    while b"SUBSCRIBE" not in conn.received and time.monotonic() < deadline and not peer.stopping.is_set():
        conn.recv(0.05)
    if b"SUBSCRIBE" in conn.received:
        conn.began = time.monotonic()
        conn.send(b"*3\r\n$7\r\nmessage\r\n$10\r\nfastr")
        if conn.wait_closed(10.0):
            conn.ended = time.monotonic()
