"""Fixtures of the compat tests: shims on the core under test (or only the active one, for argument
checks), and ``arun``/``aloop`` for the asyncio shims (``dead_port`` is in tests/conftest.py)."""
from __future__ import annotations

import asyncio

import pytest

import fastredlock.compat
from fastredlock.compat._common import aclose_clients, close_clients

from _loops import finish_loop


def _shims_on(core):
    fastredlock.compat.configure(core=core, restart_aware=False)
    yield core
    fastredlock.compat.configure()
    close_clients()


@pytest.fixture
def shim_core(core):
    """Clients built by the shims use the core under test; the session masters are fresh, so no
    restart-aware voting (one test turns it back on)."""
    yield from _shims_on(core)


@pytest.fixture
def one_shim_core(one_core):
    """``shim_core`` on the active core only: for the shims' argument checks (refused before any I/O)."""
    yield from _shims_on(one_core)


def _finish(loop):
    loop.run_until_complete(aclose_clients())
    finish_loop(loop)


@pytest.fixture
def arun():
    """``arun(coro)``: run a coroutine on a fresh event loop, then close the shims' clients of that
    loop and fail if the coroutine left tasks running (as ``tests/asyncio``; no pytest plugin)."""

    def run(coro):
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            _finish(loop)

    return run


@pytest.fixture
def aloop():
    """A fresh event loop for a test that runs several coroutines on it; ended as ``arun`` ends its."""
    loop = asyncio.new_event_loop()
    yield loop
    _finish(loop)


from _celery_workers import celery_fleet  # noqa: E402,F401 (the Celery drop-ins' workers, one set per session)
