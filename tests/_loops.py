"""Shared by the asyncio, jobs and compat fixtures: the loops under test, and ending a test's event
loop the same way everywhere. A conftest imports the fixtures it offers (``loop_kind``, ``arun``)."""
from __future__ import annotations

import asyncio
import sys

import pytest

#: The event loops every asyncio test runs under.
LOOPS = ["asyncio", "uvloop"]


def finish_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the test left running, close the loop, then fail if anything was left."""
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    assert not left, f"tasks left running after the test: {left}"


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
