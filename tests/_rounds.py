"""Shared by the tests of rounds on real masters (tests/io/test_early_return.py, test_master_health.py,
tests/engine/test_core_pool.py): the slow master's deadline, and small helpers around one lock cycle.

Timing bounds are measured with ``time.monotonic`` but kept generous (a 2-core machine shared with
other suites): each one still separates "waited for the slow master" from "did not", because the
slow master's deadline is set far above the bound.
"""
from __future__ import annotations

import time

#: A per-master deadline far above what an early return may take on a busy machine.
SLOW_IO = 0.4
#: What "returned without waiting for the slow master" may take at most.
EARLY = SLOW_IO / 3


def warm(dlm, name: str) -> None:
    """One lock cycle, so that every connection is open."""
    lock = dlm.lock(name + ":warm", ttl=1.0)
    assert lock.acquire(blocking=False)
    lock.release()


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def names(lock):
    return [o.outcome for o in lock.outcomes]


def wait_not_cooling(dlm, i: int, limit: float = 10.0) -> None:
    end = time.monotonic() + limit
    while dlm.stats()[i].cooling_down > 0:
        assert time.monotonic() < end, dlm.stats()[i]
        time.sleep(0.005)
