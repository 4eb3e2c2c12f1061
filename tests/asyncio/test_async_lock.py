"""The asyncio client's behaviours on real masters: the sync suite's basics through the async API."""
from __future__ import annotations

import asyncio
import threading

import pytest

from fastredlock import LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError
from fastredlock.asyncio import Lock, Redlock


def test_acquire_refuse_extend_release(arun, aclient, masters, name, keys_on):
    async def main():
        async with aclient(masters.urls) as dlm:
            lock = dlm.lock(name, ttl=5.0)
            assert isinstance(lock, Lock)
            assert await lock.acquire()
            assert lock.locked() and 4.8 < lock.validity <= 5.0
            assert keys_on(masters, name) == 5
            other = dlm.lock(name, ttl=5.0)
            assert not await other.acquire(blocking=False)
            assert {o.outcome for o in await other.settled_outcomes()} == {"no"}
            await lock.extend(2.0)
            assert 1.8 < lock.validity <= 2.0 and lock.ttl == 2.0
            assert masters[0].command("PTTL", name) <= 2000
            await lock.release()
            assert not lock.locked() and lock.token is None
            assert keys_on(masters, name) == 0
            with pytest.raises(LockError):
                await lock.release()
            assert await other.acquire(blocking=False)
            await other.release()

    arun(main())


def test_context_manager_and_its_errors(arun, aclient, masters, name, keys_on):
    async def main():
        async with aclient(masters.urls) as dlm:
            async with dlm.lock(name, ttl=5.0) as lock:
                assert lock.locked() and keys_on(masters, name) == 5
                with pytest.raises(LockNotAcquiredError) as info:
                    async with dlm.lock(name, ttl=5.0):
                        pass  # pragma: no cover - never entered
                assert len(info.value.outcomes) == 5
            assert keys_on(masters, name) == 0
            with pytest.raises(TypeError, match="async with"):
                with dlm.lock(name):
                    pass  # pragma: no cover
            # the key deleted under the holder: leaving the block says the lock was lost
            with pytest.raises(LockLostError):
                async with dlm.lock(name, ttl=5.0):
                    for m in masters:
                        m.command("DEL", name)

    arun(main())


def test_blocking_acquire_waits_for_the_holder_with_asyncio_sleep(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls, retry_delay=0.02, retry_jitter=0.01) as dlm:
            holder = dlm.lock(name, ttl=5.0)
            assert await holder.acquire()
            ticks = 0

            async def ticker():  # runs while the waiter sleeps between attempts: no blocking
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.005)
                    ticks += 1

            t = asyncio.ensure_future(ticker())
            loop = asyncio.get_running_loop()
            loop.call_later(0.15, lambda: asyncio.ensure_future(holder.release()))
            waiter = dlm.lock(name, ttl=5.0)
            started = loop.time()
            assert await waiter.acquire(timeout=3.0)
            assert 0.1 < loop.time() - started < 2.0
            t.cancel()
            assert ticks >= 10
            await waiter.release()

    arun(main())


def test_release_with_a_token_and_not_owned(arun, aclient, masters, name, keys_on):
    async def main():
        async with aclient(masters.urls) as dlm:
            lock = dlm.lock(name, ttl=5.0)
            assert await lock.acquire()
            stranger = dlm.lock(name, ttl=5.0)
            with pytest.raises(LockNotOwnedError):
                await stranger.release(token=b"not-the-token")
            await stranger.release(token=lock.token)  # another handle's acquisition, by token
            assert keys_on(masters, name) == 0
            with pytest.raises(LockNotOwnedError):
                await lock.release()  # it was released under it

    arun(main())


def test_batches(arun, aclient, masters, name, keys_on):
    async def main():
        async with aclient(masters.urls) as dlm:
            names = [f"{name}:{i}" for i in range(10)]
            taken = dlm.lock(names[3], ttl=5.0)
            assert await taken.acquire()
            got = await dlm.acquire_many(names, ttl=5.0)
            assert [g is None for g in got] == [i == 3 for i in range(10)]
            assert all(isinstance(g, Lock) and g.locked() for g in got if g is not None)
            assert await dlm.release_many([g for g in got if g is not None]) == [True] * 9
            assert await dlm.lock_all(names, ttl=5.0) is None  # names[3] is held: all or none
            assert sum(keys_on(masters, n) for n in names) == 5
            await taken.release()
            locks = await dlm.lock_all(names, ttl=5.0)
            assert locks is not None and len({lk.token for lk in locks}) == 1
            assert await dlm.release_many(locks) == [True] * 10
            assert sum(keys_on(masters, n) for n in names) == 0
            # a batch's handles are whole handles: each extends and releases on its own
            got = await dlm.acquire_many(names[:2], ttl=5.0)
            await got[0].extend()
            await got[0].release()
            await got[1].release()
            assert sum(keys_on(masters, n) for n in names) == 0

    arun(main())


def test_fencing_tokens_increase_across_holders(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls) as dlm:
            fences = []
            for _ in range(3):
                lock = dlm.lock(name, ttl=5.0, fencing=True)
                assert await lock.acquire()
                fences.append(lock.fence)
                await lock.release()
            assert fences == sorted(fences) and len(set(fences)) == 3

    arun(main())


def test_auto_extend_renews_and_on_lost_is_awaited(arun, aclient, masters, name, keys_on):
    async def main():
        lost = []

        async def on_lost(lock):
            await asyncio.sleep(0)
            lost.append(lock.name)

        async with aclient(masters.urls) as dlm:
            renewed = dlm.lock(name, ttl=0.3, auto_extend=True)
            assert await renewed.acquire()
            await asyncio.sleep(0.7)  # two TTLs: held only because the watchdog renewed it
            assert renewed.locked() and keys_on(masters, name) == 5
            await renewed.release()
            watched = dlm.lock(name + ":w", ttl=1.0, auto_extend=True, on_lost=on_lost)
            assert await watched.acquire()
            for m in masters:
                m.command("DEL", name + ":w")  # taken away: the next renewal finds it gone
            for _ in range(100):
                if lost:
                    break
                await asyncio.sleep(0.05)
            assert lost == [name + ":w"] and watched.lost
        # aclose stopped the watchdog task (arun fails a test that leaves a task behind)

    arun(main())


def test_one_client_per_event_loop(core, masters, name):
    dlm = Redlock(masters.urls, core=core, restart_aware=False)

    async def use():
        lock = dlm.lock(name, ttl=5.0)
        assert await lock.acquire()
        await lock.release()

    asyncio.run(use())
    errors = []

    def other_thread():
        try:
            asyncio.run(use())
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(10)
    assert errors and "another event loop" in errors[0]
    with pytest.raises(RuntimeError, match="another event loop"):
        asyncio.run(use())  # a new loop in this thread is another loop too
    dlm._async_executor._loop_core.core.close()  # its loop is gone: close the connections directly


def test_closed_client_refuses_work(arun, aclient, masters, name):
    async def main():
        dlm = aclient(masters.urls)
        lock = dlm.lock(name, ttl=5.0)
        assert await lock.acquire()
        await lock.release()
        await dlm.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await dlm.lock(name).acquire()
        await dlm.aclose()  # twice is fine

    arun(main())


def test_restart_aware_voting_distrusts_young_masters(arun, aclient, fault_masters, name, keys_on):
    # masters started just now are younger than the TTL: their OKs do not count, the attempt fails
    # and is released behind its SETs; with a grace the masters' age passed, the lock is taken
    async def main():
        async with aclient(fault_masters.urls, restart_aware=True, retry_count=0) as dlm:
            lock = dlm.lock(name, ttl=10.0)
            assert not await lock.acquire()
            assert {o.outcome for o in await lock.settled_outcomes()} == {"restarted recently"}
        await asyncio.sleep(0.2)
        assert keys_on(fault_masters, name) == 0
        async with aclient(fault_masters.urls, restart_aware=True, restart_grace=0.0) as dlm:
            lock = dlm.lock(name, ttl=10.0)
            assert await lock.acquire()
            await lock.release()

    arun(main())


# (not "never-ending line": an in-process fake streaming at full speed starved the four good masters'
# 50 ms rounds of the GIL; the stream's content is a protocol table, tests/protocol/test_hostile_replies.py)
@pytest.mark.parametrize("case", ["garbage", "wrong type", "error", "truncated", "half then close", "silent"])
def test_a_hostile_master_counts_as_no(arun, aclient, masters, name, keys_on, case):
    from fastredlock.testing import HOSTILE_REPLIES, FakeMaster

    async def main():
        with FakeMaster(HOSTILE_REPLIES[case]) as fake:
            async with aclient(masters.urls[:4] + [fake.url], retry_count=0, connect_timeout=0.02) as dlm:
                lock = dlm.lock(name, ttl=5.0)
                loop = asyncio.get_running_loop()
                started = loop.time()
                assert await lock.acquire()
                assert loop.time() - started < 1.0
                outcomes = await lock.settled_outcomes()
                assert [o.outcome for o in outcomes[:4]] == ["ok"] * 4
                assert outcomes[4].outcome in ("protocol error", "error reply", "timeout", "connection error", "no")
                assert outcomes[4].outcome != "ok"
                await lock.release()  # 4 of 5 confirm: no exception
        assert keys_on(masters, name) == 0

    arun(main())


def test_acquire_with_a_chosen_token(arun, aclient, masters, name, keys_on):
    async def main():
        async with aclient(masters.urls) as dlm:
            lock = dlm.lock(name, ttl=5.0)
            assert await lock.acquire(token="job-42:é")
            assert lock.token == "job-42:é".encode()
            assert {m.command("GET", name) for m in masters} == {"job-42:é".encode()}
            other = dlm.lock(name, ttl=5.0)
            assert not await other.acquire(blocking=False, token=b"job-43")
            await lock.extend()
            await lock.release()
            assert keys_on(masters, name) == 0
            for bad, error in ((b"", ValueError), (42, TypeError)):
                with pytest.raises(error, match="token"):
                    await dlm.lock(name).acquire(token=bad)
            assert keys_on(masters, name) == 0

    arun(main())
