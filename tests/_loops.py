"""Shared by the asyncio and compat fixtures: end a test's event loop the same way everywhere."""
from __future__ import annotations

import asyncio


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
