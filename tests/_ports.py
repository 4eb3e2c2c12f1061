"""Loopback ports and ``serve``'s output for the tests that start ``fastredlock serve`` themselves.

``serve`` takes a block of consecutive ports chosen by the test (the quickstart's and the CLI's
tests), so the block is picked below the kernel's ephemeral range: there, a client connection of
another test could take a port between the probe and serve's bind.
"""
from __future__ import annotations

import random
import socket
import threading
from contextlib import contextmanager
from typing import IO, Iterator, List


def free_block(count: int) -> int:
    """A first port such that ``count`` consecutive loopback ports are free (20000-32000)."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20000, 32000 - count)
        probes = []
        try:
            for port in range(first, first + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError(f"no {count} consecutive free ports found")


@contextmanager
def dead_ports(count: int) -> Iterator[List[int]]:
    """``count`` distinct loopback ports where a connection is refused, for as long as the block
    runs: each is held by a socket bound without listening (and without ``SO_REUSEADDR``), so the
    kernel answers a connect with a reset, and no server started meanwhile (another test's master,
    another xdist worker's, all on ports from ``bind(("127.0.0.1", 0))``) can take it. A port
    probed and let go at once could be taken by such a server during the test: its master then
    answers, and a test of refusals sees it up."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        yield [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def refused(port: int) -> bool:
    """Whether a connection to ``port`` on loopback is refused (nothing listens there)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return True
    return False


class ReadyLines:
    """A child's output lines, collected by a daemon thread as they come; :attr:`ready` is set at
    the first line starting with ``ready`` (what ``serve`` prints once its masters answer) or at
    the stream's end (whoever waits then looks at the lines and the exit status)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: List[str] = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)
            if line.startswith("ready"):
                self.ready.set()
        self.ready.set()

    def text(self) -> str:
        """Every line so far, joined."""
        return "".join(self.lines)
