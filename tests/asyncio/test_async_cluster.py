"""The asyncio client with Redis Cluster masters: the same routing and redirections as the sync
client (the event loop watches every node's socket; a redirected command opens its node from the
loop's callbacks)."""
from __future__ import annotations

import asyncio
import random
import time

import pytest

from fastredlock.testing import start_cluster

TTL = 5.0
CONNECT = 0.5
IO = 0.5  # per node: the shared test machine can be slow


@pytest.fixture(scope="module")
def cluster():
    """Three primaries shared by the module's tests, which may move slots but not break it."""
    with start_cluster(3) as c:
        yield c


def other_primary(cluster, node):
    return next(p for p in cluster.primaries if p is not node)


def test_names_across_slots_lock_extend_release(arun, aclient, cluster):
    names = [f"a:{random.random()}:{i}" for i in range(40)]

    async def main():
        async with aclient([cluster.url], connect_timeout=CONNECT, io_timeout=IO) as dlm:
            for name in names:
                lock = dlm.lock(name, ttl=TTL)
                assert await lock.acquire(), lock.outcomes
                assert cluster.primary_of(name).command("GET", name) == lock.token
                await lock.extend()
                await lock.release()
                assert cluster.primary_of(name).command("EXISTS", name) == 0
            assert [(s.connect_errors, s.connection_errors, s.error_replies) for s in dlm.stats()] == [(0, 0, 0)]

    arun(main())


def test_batches_and_tasks_on_a_cluster(arun, aclient, cluster):
    names = [f"ab:{random.random()}:{i}" for i in range(300)]

    async def main():
        async with aclient([cluster.url], connect_timeout=CONNECT, io_timeout=1.0, retry_count=500,
                           retry_delay=0.005, retry_jitter=0.005) as dlm:
            locks = await dlm.acquire_many(names, ttl=TTL)
            assert all(lock is not None for lock in locks)
            assert all(await dlm.release_many(locks))
            inside, worst = [0], [0]

            async def one(j):  # 4 tasks contend for one name
                for _ in range(5):
                    async with dlm.lock(names[0], ttl=TTL) as lock:
                        assert lock.validity > 0
                        inside[0] += 1
                        worst[0] = max(worst[0], inside[0])
                        await asyncio.sleep(0.001)
                        inside[0] -= 1

            await asyncio.gather(*(one(j) for j in range(4)))
            assert worst[0] == 1

    arun(main())


def test_moved_and_ask_are_followed(arun, aclient, cluster):
    name = f"am:{random.random()}"

    async def main():
        async with aclient([cluster.url], connect_timeout=CONNECT, io_timeout=IO) as dlm:
            lock = dlm.lock(name, ttl=TTL)
            assert await lock.acquire()
            slot = cluster.keyslot(name)
            source = cluster.owner(slot)
            cluster.migrate_slot(slot, other_primary(cluster, source))
            await lock.extend()  # -MOVED: resent to the new owner within the call
            await lock.release()
            source = cluster.owner(slot)
            target = other_primary(cluster, source)
            cluster.migrate_slot(slot, target, finish=False)
            try:
                lock = dlm.lock(name, ttl=TTL)
                assert await lock.acquire()  # -ASK: ASKING + SET on the importing node
                await lock.release()
            finally:
                cluster.finish_migration(slot, source, target)
            assert [s.error_replies for s in dlm.stats()] == [0]

    arun(main())


def test_a_waiting_task_is_woken_on_a_cluster(arun, aclient, cluster):
    # The notification connection of a cluster master goes to a seed node (messages reach every
    # node's subscribers): a task waiting with a 2 s backoff gets the lock well before it.
    name = f"aw:{random.random()}"

    async def main():
        async with aclient([cluster.url], connect_timeout=CONNECT, io_timeout=IO) as a, \
                aclient([cluster.url], connect_timeout=CONNECT, io_timeout=IO, retry_count=None,
                        retry_delay=2.0, retry_jitter=0.0) as b:
            holder = a.lock(name, ttl=TTL)
            assert await holder.acquire(blocking=False)
            task = asyncio.ensure_future(b.lock(name, ttl=TTL).acquire(timeout=5.0))
            channel = b"fastredlock-wake:" + name.encode()
            deadline = time.monotonic() + 3.0
            while sum(n.command("PUBSUB", "NUMSUB", channel)[1] for n in cluster.nodes) != 1:
                assert time.monotonic() < deadline, "the task did not subscribe"
                await asyncio.sleep(0.01)
            released = time.monotonic()
            await holder.release()
            assert await asyncio.wait_for(task, 5.0)
            return time.monotonic() - released

    took = arun(main())
    assert took < 1.0, f"the waiting task took {took:.2f} s: it was not woken"
