"""The lock family for asyncio (rlock per task, semaphore, rwlock) on real masters, both cores and loops."""
from __future__ import annotations

import asyncio
import time

import pytest

from fastredlock import LockError
from fastredlock.asyncio import ReadLock, RLock, Semaphore, WriteLock

from _family import eventually, family_keys, tagged


def test_rlock_reenters_per_task_and_refuses_other_tasks(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls, retry_delay=2.0, retry_jitter=0.0) as dlm:
            lock = dlm.rlock(name, ttl=5)
            assert isinstance(lock, RLock)
            assert await lock.acquire() and await dlm.rlock(name, ttl=5).acquire()
            assert lock.count == 2
            counts = eventually(lambda: [m.command("HGET", tagged(name, ":rlock"), "count") for m in masters],
                                [b"2"] * 5)
            assert counts == [b"2"] * 5

            async def other():
                assert lock.count == 0  # another task: not the owner
                with pytest.raises(LockError):
                    await lock.release()
                start = time.monotonic()
                ok = await lock.acquire(timeout=5)  # waits until the owner's last release
                waited = time.monotonic() - start
                await lock.release()
                return ok, waited

            task = asyncio.ensure_future(other())
            await asyncio.sleep(0.3)
            await lock.release()
            await asyncio.sleep(0.1)
            assert not task.done()
            await lock.release()  # the last one: frees it and wakes the waiting task
            ok, waited = await task
            assert ok and waited < 1.0
            async with dlm.rlock(name, ttl=5) as outer:
                async with dlm.rlock(name, ttl=5):
                    assert outer.count == 2
        assert eventually(lambda: family_keys(masters, name), 0) == 0

    arun(main())


def test_rlock_task_that_finished_holding_is_not_renewed_for_ever(arun, aclient, masters, name):
    """With auto_extend, the watchdog stops renewing a hold whose task finished holding it: it
    expires within its TTL and on_lost is called (nobody can release it any more)."""
    lost = []

    async def main():
        async with aclient(masters.urls, retry_count=0) as dlm:
            lock = dlm.rlock(name, ttl=0.4, auto_extend=True, on_lost=lost.append)

            async def hold():
                assert await lock.acquire(blocking=False)

            await asyncio.ensure_future(hold())
            await asyncio.sleep(1.4)  # past three TTLs: renewed, it would still be there
            assert [m.command("EXISTS", tagged(name, ":rlock")) for m in masters] == [0] * 5
            assert len(lost) == 1
            assert await dlm.rlock(name, ttl=5).acquire(blocking=False)

    arun(main())


def test_rlock_task_that_finished_holding_leaves_no_hold(arun, aclient, masters, name):
    """The registry of holds forgets a task once it is gone (no task kept alive by it, no hold
    found by a later task), while the lock stays held on the masters until its TTL."""
    import gc
    import weakref

    async def main():
        async with aclient(masters.urls, retry_count=0) as dlm:
            lock = dlm.rlock(name, ttl=5)

            async def hold():
                assert await lock.acquire() and await lock.acquire()
                return weakref.ref(lock._hold())

            task = asyncio.ensure_future(hold())
            hold_ref = await task
            task_ref = weakref.ref(task)
            del task
            await asyncio.sleep(0)  # the loop lets go of the finished task's callbacks
            gc.collect()
            assert task_ref() is None and hold_ref() is None
            assert lock.count == 0 and not await lock.acquire(blocking=False)

    arun(main())


def test_semaphore_limit_and_release(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls, retry_delay=0.02, retry_jitter=0.02) as dlm:
            permits = [dlm.semaphore(name, 2, ttl=5) for _ in range(3)]
            assert isinstance(permits[0], Semaphore)
            assert await permits[0].acquire(blocking=False) and await permits[1].acquire(blocking=False)
            assert not await permits[2].acquire(blocking=False)
            await permits[0].release()
            assert await permits[2].acquire(blocking=False)
            await permits[1].release()
            await permits[2].release()
            inside, most = [0], [0]

            async def worker():
                permit = dlm.semaphore(name, 2, ttl=5)
                for _ in range(5):
                    assert await permit.acquire(timeout=5)
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                    await asyncio.sleep(0.005)
                    inside[0] -= 1
                    await permit.release()

            await asyncio.gather(*(worker() for _ in range(4)))
            assert most[0] == 2
        assert eventually(lambda: family_keys(masters, name), 0) == 0

    arun(main())


def test_rwlock_readers_share_writer_waits_and_excludes(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls, retry_delay=2.0, retry_jitter=0.0) as dlm:
            a, b, w = dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5), dlm.rwlock(name, ttl=5)
            assert isinstance(a.read, ReadLock) and isinstance(w.write, WriteLock)
            assert await a.read.acquire() and await b.read.acquire()

            async def write():
                start = time.monotonic()
                ok = await w.write.acquire(timeout=5)
                return ok, time.monotonic() - start

            task = asyncio.ensure_future(write())
            await asyncio.sleep(0.3)
            assert not await dlm.rwlock(name, ttl=5).read.acquire(blocking=False)  # the writer waits
            await a.read.release()
            await b.read.release()  # the last reader out wakes the writer
            ok, waited = await task
            assert ok and waited < 1.0
            assert not await a.read.acquire(blocking=False)
            await w.write.release()
            async with a.read:
                assert not await w.write.acquire(blocking=False)
        assert eventually(lambda: family_keys(masters, name), 0) == 0

    arun(main())


def test_auto_extend_renews_family_handles(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls) as dlm:
            reader = dlm.rwlock(name, ttl=0.3, auto_extend=True).read
            permit = dlm.semaphore(name + "s", 1, ttl=0.3, auto_extend=True)
            assert await reader.acquire() and await permit.acquire()
            await asyncio.sleep(0.8)
            assert reader.locked() and permit.locked()
            await reader.extend()
            await reader.release()
            await permit.release()

    arun(main())


def test_restart_aware_voting_applies(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls, restart_aware=True, restart_grace=3600.0, retry_count=0) as dlm:
            for lock in (dlm.rlock(name), dlm.rwlock(name).write, dlm.semaphore(name, 2)):
                assert not await lock.acquire(blocking=False)
                assert "restarted recently" in {o.outcome for o in await lock.settled_outcomes()}

    arun(main())
