"""Refusals that say why, and down is not held: the asyncio client (both cores, both loops).

The rules are the sync client's (tests/sync/test_refusals.py): with nothing listening, a waiting
``async with dlm.lock(...)`` logs one warning at once and raises :class:`QuorumUnreachableError`
after ``unreachable_timeout`` (short here; the default is measured by the sync test); a held lock
is waited for past that bound; masters younger than the restart grace refuse with one warning and
an error that leads with restart-aware voting.
"""
from __future__ import annotations

import asyncio
import logging
import time

import pytest

from fastredlock import LockNotAcquiredError, QuorumUnreachableError
from fastredlock.asyncio import Redlock
from fastredlock.testing import FaultProxy, start_masters

from _checks import gone_within, library_warnings


def test_nothing_listening_raises_naming_the_masters(arun, core, dead_urls, caplog):
    caplog.set_level(logging.WARNING, logger="fastredlock")

    async def main():
        async with Redlock(dead_urls, core=core, unreachable_timeout=0.5) as dlm:
            started = time.monotonic()
            with pytest.raises(QuorumUnreachableError) as caught:
                async with dlm.lock("orders:42", ttl=10.0):
                    pass  # pragma: no cover - never held
            took = time.monotonic() - started
            lock = dlm.lock("orders:42", ttl=10.0)
            shorter = await lock.acquire(timeout=0.1)  # a timeout that ends first: False, as before
        return caught.value, took, shorter

    error, took, shorter = arun(main())
    assert 0.5 <= took < 5.0
    labels = tuple(u[len("redis://"):] for u in dead_urls)
    assert error.unreachable == labels and isinstance(error, LockNotAcquiredError)
    assert all(label in str(error) for label in labels)
    assert shorter is False
    warned = library_warnings(caplog)
    assert len(warned) == 2, [r.getMessage() for r in warned]  # one per acquisition
    assert all("no quorum of masters is reachable" in r.getMessage() for r in warned)


def test_a_master_whose_answer_is_still_due_when_the_attempt_is_decided_is_named(arun, core, dead_urls, masters,
                                                                                 name):
    """As in the sync client: the raising attempt is decided at once (two masters refuse) while the
    third, behind a proxy that now drops its replies, owes its answer; the error awaits that
    answer's deadline (``io_timeout``) and names all three."""
    with FaultProxy(masters[0]) as proxy:
        urls = dead_urls[:2] + [proxy.url]

        async def main():
            async with Redlock(urls, core=core, unreachable_timeout=0, io_timeout=0.2, restart_aware=False) as dlm:
                assert await dlm.lock(name, ttl=2.0).acquire(blocking=False) is False  # the third's connection is up
                proxy.blackhole("down")
                started = time.monotonic()
                lock = dlm.lock(name, ttl=2.0)
                with pytest.raises(QuorumUnreachableError) as caught:
                    await lock.acquire()
                return caught.value, time.monotonic() - started, lock.key

        error, took, key = arun(main())
        gone_within(masters[:1], key, 2.0)  # (while the proxy runs)
    assert 0.1 <= took < 3.0  # it waited for the third master's deadline
    labels = tuple(u[len("redis://"):] for u in urls)
    assert error.unreachable == labels
    assert error.outcomes[2].outcome == "timeout"
    assert f"3 of 3 masters unreachable: {', '.join(labels)};" in str(error)


def test_a_cancellation_while_the_error_awaits_the_masters_answers_is_raised(arun, core, dead_urls, masters, name):
    """The wait for the masters' answers before the error is awaited: cancelled during it, the
    task ends with its CancelledError at once (not at the answers' deadline), holding nothing,
    and no key is left (the attempt, which may have landed, was released behind its SET)."""
    with FaultProxy(masters[0]) as proxy:
        urls = dead_urls[:2] + [proxy.url]

        async def main():
            ready = asyncio.Event()
            armed = []

            def on_event(event):  # "refused" comes right before that wait
                if event.kind == "refused" and armed:
                    ready.set()

            async with Redlock(urls, core=core, unreachable_timeout=0, io_timeout=1.0, restart_aware=False,
                               on_event=on_event) as dlm:
                assert await dlm.lock(name, ttl=5.0).acquire(blocking=False) is False  # the third's connection is up
                proxy.blackhole("down")
                armed.append(True)
                lock = dlm.lock(name, ttl=5.0)
                task = asyncio.ensure_future(lock.acquire())
                await asyncio.wait_for(ready.wait(), 3.0)
                assert not task.done()
                started = time.monotonic()
                task.cancel()
                done, _ = await asyncio.wait([task], timeout=0.5)  # half the answers' deadline
                took = time.monotonic() - started
                assert done and task.cancelled(), task
                assert lock.token is None and not lock.locked()
            return took, lock.key

        took, key = arun(main())
        assert took < 0.5
        gone_within(masters[:1], key, 2.0)  # (while the proxy runs)


def test_held_lock_is_waited_for_past_the_unreachable_bound(arun, core, masters, name, caplog):
    caplog.set_level(logging.WARNING, logger="fastredlock")

    async def main():
        async with Redlock(masters.urls, core=core, restart_aware=False) as holder_client, \
                Redlock(masters.urls, core=core, restart_aware=False, unreachable_timeout=0.2,
                        retry_delay=0.05, retry_jitter=0.0) as waiter_client:
            holder = holder_client.lock(name, ttl=30.0)
            assert await holder.acquire()

            async def wait_for_it():
                async with waiter_client.lock(name, ttl=5.0):
                    return True

            waiter = asyncio.ensure_future(wait_for_it())
            done, _ = await asyncio.wait([waiter], timeout=1.0)  # five times the bound
            assert not done, f"the waiter stopped waiting on a held lock: {waiter}"
            await holder.release()
            return await asyncio.wait_for(waiter, 10.0)

    assert arun(main()) is True
    assert not library_warnings(caplog)


def test_restart_refusal_is_logged_once_and_leads_the_error(arun, core, caplog):
    caplog.set_level(logging.WARNING, logger="fastredlock")
    with start_masters(3) as fresh:
        async def main():
            async with Redlock(fresh.urls, core=core, retry_delay=0.05, retry_jitter=0.0) as dlm:
                refused = await dlm.lock("orders:42", ttl=10.0).acquire(timeout=0.3)
                warned = len(library_warnings(caplog))
                async with Redlock(fresh.urls, core=core, retry_count=0) as bounded:
                    with pytest.raises(LockNotAcquiredError) as caught:
                        async with bounded.lock("orders:42", ttl=10.0):
                            pass  # pragma: no cover
            return refused, warned, caught.value

        refused, warned, error = arun(main())
    assert refused is False and warned == 1
    message = library_warnings(caplog)[0].getMessage()
    assert "refused by restart-aware voting" in message and "its vote counts in" in message
    assert str(error).startswith("lock 'orders:42' refused by restart-aware voting: ")
