"""Wake on release on the asyncio client (fastredlock.asyncio.notifier): the sync tests' cases
(tests/sync/test_wake.py) with tasks; the waiters' backoff is long, so a quick turn was a wake-up."""
from __future__ import annotations

import asyncio
import time

from fastredlock.engine.wake import LINGER
from fastredlock.protocol.scripts import ACQUIRE_QUEUED, RELEASE, UNQUEUE
from _server import capabilities

SLOW = 2.0


def subscriptions(masters, name: str) -> int:
    return sum(m.command("PUBSUB", "NUMSUB", b"fastredlock-wake:" + name.encode())[1] for m in masters)


async def until(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


async def turn(aclient, masters, name, kill_before_release: bool = False, fencing: bool = False,
               **waiter_kwargs) -> float:
    """A task waits while another client holds ``name``; seconds from the release to its turn."""
    async with aclient(masters.urls) as a, aclient(masters.urls, retry_count=None, **waiter_kwargs) as b:
        holder = a.lock(name, ttl=10, fencing=fencing)
        assert await holder.acquire(blocking=False)
        waiter = b.lock(name, ttl=10, fencing=fencing)
        task = asyncio.ensure_future(waiter.acquire())
        assert await until(lambda: subscriptions(masters, name) == len(masters), 2.0)
        if kill_before_release:
            for m in masters:
                m.command("CLIENT", "KILL", "TYPE", "pubsub")
        released = time.monotonic()
        await holder.release()
        assert await asyncio.wait_for(task, 3 * SLOW)
        took = time.monotonic() - released
        await waiter.release()
    return took


def test_a_waiting_task_wakes_within_ms_of_the_release(aclient, arun, masters, name, keys_on):
    took = arun(turn(aclient, masters, name, retry_delay=SLOW, retry_jitter=0.0))
    assert took < 0.25, f"the waiter took {took * 1000:.1f} ms: it polled (retry_delay {SLOW} s)"
    assert keys_on(masters, name) == 0
    assert subscriptions(masters, name) == 0  # aclose ended the subscriptions


def test_without_wake_the_task_sleeps_its_backoff(aclient, arun, masters, name):
    # The negative control of the test above.
    async def main():
        async with aclient(masters.urls) as a, aclient(masters.urls, retry_count=None, retry_delay=0.6,
                                                       retry_jitter=0.0, wake=False) as b:
            holder = a.lock(name, ttl=10)
            assert await holder.acquire(blocking=False)
            task = asyncio.ensure_future(b.lock(name, ttl=10).acquire())
            await asyncio.sleep(0.1)
            released = time.monotonic()
            await holder.release()
            assert await asyncio.wait_for(task, 3.0)
            return time.monotonic() - released

    assert arun(main()) > 0.3


def test_a_killed_notification_connection_costs_one_backoff(aclient, arun, fault_masters, name):
    took = arun(turn(aclient, fault_masters, name, kill_before_release=True, retry_delay=0.4, retry_jitter=0.0))
    assert took < 0.4 + 1.0, "the waiter hung after its notifications were lost"


def test_subscriptions_end_with_the_last_waiting_task(aclient, arun, masters, name):
    async def main():
        async with aclient(masters.urls) as a, aclient(masters.urls, retry_count=None, retry_delay=SLOW) as b:
            holder = a.lock(name, ttl=10)
            assert await holder.acquire(blocking=False)
            waiters = [b.lock(name, ttl=10) for _ in range(4)]

            async def take(lock):
                assert await lock.acquire()
                await lock.release()

            tasks = [asyncio.ensure_future(take(w)) for w in waiters]
            assert await until(lambda: subscriptions(masters, name) == len(masters), 2.0)  # one per master
            await holder.release()
            await asyncio.wait_for(asyncio.gather(*tasks), 4 * SLOW)
            assert await until(lambda: subscriptions(masters, name) == 0, LINGER + 2.0)
            assert not [t for t in asyncio.all_tasks() if "AsyncNotifier" in repr(t)]

    arun(main())


def queued(masters, name: str) -> int:
    return sum(m.command("ZCARD", "{" + name + "}:wait") for m in masters)


def turn_channels(masters) -> int:
    """Clients' turn channels subscribed, over the masters (a turn named before its client's
    subscription is in place is not heard: the release then wakes everybody instead)."""
    return sum(len(m.command("PUBSUB", "CHANNELS", "fastredlock-turn:*")) for m in masters)


def test_queued_tasks_take_turns_in_order_and_leave_no_queue(aclient, arun, masters, name, keys_on):
    # Tasks of three clients queue one after another; each release names the next (turns), and
    # a releaser asking again at once queues behind them. Afterwards: no queue, no turn key.
    # The scripts are in the masters' caches first: on a fresh master a queued attempt's EVALSHA
    # meets NOSCRIPT, and an attempt decided (refused) before that master's EVAL fallback joins its
    # queue only at the next attempt, a backoff later (documented: "Order guaranteed").
    for m in masters:
        for script in (RELEASE, ACQUIRE_QUEUED, UNQUEUE):
            m.command("SCRIPT", "LOAD", script)

    native = any(capabilities(m).native_delete for m in masters)

    async def main():
        clients = [aclient(masters.urls, retry_count=None, retry_delay=SLOW, retry_jitter=0.0) for _ in range(4)]
        for c in clients:
            await c.__aenter__()
        try:
            holder = clients[0].lock(name, ttl=10)
            assert await holder.acquire(blocking=False)
            order = []

            async def take(k):
                lock = clients[k].lock(name, ttl=10)
                asked = time.monotonic()
                assert await lock.acquire(timeout=4 * SLOW)
                log.append((k, round(asked - started, 3), round(time.monotonic() - started, 3),
                            [(o.outcome, o.detail) for o in lock.outcomes]))
                order.append(k)
                await asyncio.sleep(0.01)
                await lock.release()

            tasks = []
            for k in (1, 2, 3):
                tasks.append(asyncio.ensure_future(take(k)))
                assert await until(lambda: queued(masters, name) == k * len(masters), 2.0)
                assert await until(lambda: turn_channels(masters) == k * len(masters), 2.0), [
                    m.command("PUBSUB", "CHANNELS", "fastredlock-turn:*") for m in masters]
            await holder.release()
            again = asyncio.ensure_future(take(0))  # the releaser asks again at once
            await asyncio.wait_for(asyncio.gather(*tasks, again), 3 * SLOW)
            if native:
                # A native release (DELIFEQ/DELEX) deletes, then gives the turn in a follow-up: a
                # queued attempt in that instant may take the key out of turn (docs/guides/
                # waiting.md, "Turns"). The first turn is given by a waited release, whose
                # follow-up is done before the releaser asks again; every task still gets it.
                assert order[0] == 1 and sorted(order) == [0, 1, 2, 3], order
            else:
                assert order == [1, 2, 3, 0], order  # woken one by one, each well before its backoff
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)

    log = []  # (client, asked at, acquired at, its last round's outcomes): says which turn was missed
    started = time.monotonic()
    arun(main())
    assert time.monotonic() - started < SLOW, log
    time.sleep(0.1)
    assert queued(masters, name) == 0 and keys_on(masters, "{" + name + "}:next") == 0
    assert keys_on(masters, name) == 0


def test_a_fenced_waiting_task_is_woken(aclient, arun, masters, name):
    # A fenced lock's waiter has no place in the queue: it marks the name before each pause (a
    # step the asyncio driver runs like the sync one), so the holder's release still publishes.
    took = arun(turn(aclient, masters, name, fencing=True, retry_delay=SLOW, retry_jitter=0.0))
    assert took < 0.25, f"the fenced waiter took {took * 1000:.1f} ms: it was not woken"
