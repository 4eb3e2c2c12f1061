"""Fixtures of the compat tests: shims on the core under test, and a master that is not there."""
from __future__ import annotations

import socket

import pytest

import fastredlock.compat
from fastredlock.compat._common import close_clients


@pytest.fixture
def shim_core(core):
    """Clients built by the shims use the core under test; the session masters are fresh, so no
    restart-aware voting (one test turns it back on)."""
    fastredlock.compat.configure(core=core, restart_aware=False)
    yield core
    fastredlock.compat.configure()
    close_clients()


@pytest.fixture
def dead_port():
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
