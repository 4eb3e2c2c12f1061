"""Fixtures of the asyncio tests: the event loop (the default one and uvloop) and async clients.

Every test here takes ``core`` (through ``aclient``) and ``arun``, so it runs on both cores and on
both loops. Tests are plain functions that run one coroutine to completion with ``arun``: no
pytest plugin, each test gets a fresh loop.
"""
from __future__ import annotations


import pytest

from fastredlock.asyncio import Redlock

from _loops import arun, loop_kind  # noqa: F401 (fixtures offered to the tests below)



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

