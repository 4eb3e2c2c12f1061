"""Fixtures of the jobs tests: the event loops (default and uvloop) and asyncio clients, as in
tests/asyncio; a wait-until helper bounded by a deadline; raw key counts on the masters."""
from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from fastredlock.asyncio import Redlock as AsyncRedlock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the shared helpers
from _loops import finish_loop  # noqa: E402

LOOPS = ["asyncio", "uvloop"]


@pytest.fixture(params=LOOPS)
def loop_kind(request) -> str:
    """The event loop under test; uvloop must be installed where the test extra installs it."""
    if request.param == "uvloop":
        if sys.platform == "win32" or sys.implementation.name != "cpython":  # pragma: no cover
            pytest.skip("uvloop is CPython-only and not on Windows (the test extra installs it elsewhere)")
        try:
            import uvloop  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the failure this guards against
            pytest.fail(f"uvloop is expected (the test extra installs it) but not importable: {exc}")
    return request.param


@pytest.fixture
def arun(loop_kind):
    """``arun(coro)``: run a coroutine to completion on a new loop of the kind under test."""

    def run(coro):
        if loop_kind == "uvloop":
            import uvloop

            loop = uvloop.new_event_loop()
        else:
            loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            finish_loop(loop)

    return run


@pytest.fixture
def aclient(core):
    """``aclient(urls, **kwargs)``: an asyncio ``Redlock`` on the core under test (close it with
    ``aclose``); restart-aware voting off (young masters)."""

    def make(urls, **kwargs):
        kwargs.setdefault("core", core)
        kwargs.setdefault("restart_aware", False)
        return AsyncRedlock(urls, **kwargs)

    return make


def wait_until(predicate, timeout: float, what: str, interval: float = 0.01):
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def keys_left(masters):
    """``keys_left(name)``: on how many masters the key ``name`` exists (a raw read)."""
    return lambda key: sum(m.command("EXISTS", key) for m in masters)


@pytest.fixture
def drop_key(masters):
    """``drop_key(name)``: delete the key on every master behind its holder's back (a lost lock)."""
    return lambda key: [m.command("DEL", key) for m in masters]


@pytest.fixture
def until():
    """:func:`wait_until`: ``until(predicate, timeout, what)``."""
    return wait_until
