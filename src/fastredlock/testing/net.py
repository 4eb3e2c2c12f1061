"""Loopback plumbing shared by the fault kit: address checks, a background loopback server, resets.

Everything in :mod:`fastredlock.testing` listens on loopback addresses only; :func:`_check_loopback`
enforces it. :func:`blackhole_address` gives an address where a TCP connect never completes.
"""
from __future__ import annotations

import ipaddress
import socket
import struct
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Tuple, Union
from urllib.parse import urlsplit

__all__ = ["HOST", "blackhole_address"]

#: The loopback address masters, proxies and fake masters listen on by default.
HOST = "127.0.0.1"

Address = Union[str, Tuple[str, int], Any]


def _check_loopback(host: str) -> str:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"the fault kit listens on loopback addresses only, not {host!r}")
    return host


def _address(target: Address) -> Tuple[str, int]:
    """``(host, port)`` from a tuple, a ``redis://`` URL, or anything with ``host`` and ``port``."""
    if isinstance(target, tuple):
        return str(target[0]), int(target[1])
    if isinstance(target, str):
        parts = urlsplit(target)
        if not parts.hostname or not parts.port:
            raise ValueError(f"expected redis://host:port, got {target!r}")
        return parts.hostname, parts.port
    if hasattr(target, "host") and hasattr(target, "port"):
        return str(target.host), int(target.port)
    raise TypeError(f"expected (host, port), a URL or a master, not {type(target).__name__}")


def _arm_reset(sock: socket.socket) -> None:
    """Make the socket's close send an RST instead of a FIN (SO_LINGER 0): the peer sees ECONNRESET."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN."""
    _arm_reset(sock)
    sock.close()


class _LoopbackServer:
    """A listening socket on a loopback address and the background thread that serves it."""

    _thread_name = "server"

    def __init__(self, host: str, port: int) -> None:
        self.host = _check_loopback(host)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._thread: Optional[threading.Thread] = None
        self._running = False

    @property
    def url(self) -> str:
        """``redis://host:port``: give this to the client."""
        return f"redis://{self.host}:{self.port}"

    @property
    def address(self) -> Tuple[str, int]:
        """``(host, port)``."""
        return self.host, self.port

    def start(self):
        """Start serving in a background thread; return ``self``."""
        if self._thread is None:
            self._running = True
            self._thread = threading.Thread(target=self._run, name=f"{self._thread_name}:{self.port}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


@contextmanager
def blackhole_address(host: str = HOST) -> Iterator[Tuple[str, int]]:
    """Yield ``(host, port)`` where a TCP connect never completes, as behind a firewall that drops SYNs.

    A listening socket with a backlog of 0 that never accepts, whose queue is filled by one
    connection of our own: the kernel then drops further SYNs, so connects hang until their timeout.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((_check_loopback(host), 0))
    listener.listen(0)
    filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    filler.settimeout(1.0)
    try:
        filler.connect(listener.getsockname())
        yield listener.getsockname()
    finally:
        filler.close()
        listener.close()
