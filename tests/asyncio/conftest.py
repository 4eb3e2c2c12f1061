"""Fixtures of the asyncio tests: the event loop (the default one and uvloop) and async clients.

Every test here takes ``core`` (through ``aclient``) and ``arun``, so it runs on both cores and on
both loops. Tests are plain functions that run one coroutine to completion with ``arun``: no
pytest plugin, each test gets a fresh loop.
"""
from __future__ import annotations

import asyncio
import sys

import pytest

from fastredlock.asyncio import Redlock

from _loops import finish_loop

LOOPS = ["asyncio", "uvloop"]


@pytest.fixture(params=LOOPS)
def loop_kind(request) -> str:
    """The event loop under test; uvloop must be installed where it exists (not on Windows)."""
    if request.param == "uvloop":
        if sys.platform == "win32":  # pragma: no cover
            pytest.skip("uvloop does not run on Windows")
        if sys.implementation.name != "cpython":
            pytest.skip("uvloop is CPython-only (the test extra installs it on CPython alone)")
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
    ``async with`` or ``aclose``). Short retries; restart-aware voting off (young masters)."""

    def make(urls, **kwargs):
        kwargs.setdefault("core", core)
        kwargs.setdefault("restart_aware", False)
        kwargs.setdefault("retry_count", 2)
        kwargs.setdefault("retry_delay", 0.05)
        kwargs.setdefault("retry_jitter", 0.02)
        return Redlock(urls, **kwargs)

    return make

