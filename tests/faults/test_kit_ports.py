"""``start_masters(..., ports=...)`` and ``start_master(port=...)``: masters on the ports asked for,
and a port in use refused up front, naming it, before any master starts."""
from __future__ import annotations

import errno
import random
import socket

import pytest

from fastredlock.testing import start_master, start_masters


def _free_ports(count):
    """``count`` free loopback ports below the kernel's ephemeral range (where a client connection
    of another test could take one before the master does)."""
    rng = random.Random()
    found = []
    while len(found) < count:
        port = rng.randrange(20000, 32000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in found:
            found.append(port)
    return found


def test_masters_listen_on_the_ports_given():
    ports = _free_ports(2)
    with start_masters(2, ports=ports) as local:
        assert [m.port for m in local] == ports
        assert local.urls == [f"redis://127.0.0.1:{p}" for p in ports]
        assert all(m.command("PING") == b"PONG" for m in local)


def test_a_port_in_use_is_refused_before_anything_starts():
    free, = _free_ports(1)
    with start_masters(1) as taken:
        busy = taken[0].port
        with pytest.raises(OSError) as caught:
            start_masters(2, ports=[free, busy])
        assert caught.value.errno == errno.EADDRINUSE and f"port {busy}" in str(caught.value)
        with pytest.raises(OSError, match=f"port {busy}"):
            start_master(port=busy)
        assert taken[0].command("PING") == b"PONG"
    with socket.socket() as probe:  # the first port was not taken by a master left behind
        probe.bind(("127.0.0.1", free))


def test_ports_must_match_the_count():
    with pytest.raises(ValueError, match="ports"):
        start_masters(2, ports=[7001])
    with pytest.raises(ValueError, match="distinct"):
        start_masters(2, ports=[7001, 7001])
