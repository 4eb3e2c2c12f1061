"""``await lock.release(wait=False)`` on asyncio: written (or queued first for the next round),
not waited for; its answers still reported. Both cores, both loops, real masters.

The same contract as the sync handle's (tests/sync/test_release_unwaited.py): the key goes, the
same client takes the name again at once, a lock found not held is reported through ``on_lost``
(awaited when it is a coroutine function), the ``lost`` event and ``stats()``, and ``aclose()``
delivers what is still in flight. Specific to asyncio: a release asked for while another task's
round is in flight is queued ahead of that client's next acquisitions, and a caller cancelled in
the middle of it still sends it.
"""
from __future__ import annotations

import asyncio
import time
import uuid

from fastredlock.protocol.outcomes import PENDING


def _keys(masters, prefix: str) -> int:
    return sum(len(m.command("KEYS", prefix + "*")) for m in masters)


async def _until(predicate, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while not predicate() and time.monotonic() < end:
        await asyncio.sleep(0.002)
    return predicate()


def test_not_waited_for_and_the_name_taken_again_at_once(aclient, arun, masters, name):
    async def main():
        async with aclient(masters.urls, retry_count=0) as dlm:
            events: list = []
            dlm.on_event = events.append
            lock = dlm.lock(name, ttl=10)
            assert await lock.acquire(blocking=False)
            await lock.release(wait=False)
            assert set(lock._last.outcomes) == {PENDING}
            for _ in range(200):
                assert await lock.acquire(blocking=False)
                await lock.release(wait=False)
            assert await _until(lambda: sum(1 for e in events if e.kind == "released") == 201)
            assert all(e.ok for e in events if e.kind == "released")
        assert _keys(masters, name) == 0

    arun(main())


def test_a_release_that_finds_the_lock_gone_reports_it(aclient, arun, masters, name):
    async def main():
        async with aclient(masters.urls) as dlm:
            lost = asyncio.Event()

            async def on_lost(handle):  # a coroutine function: awaited
                await asyncio.sleep(0)
                lost.set()

            events: list = []
            dlm.on_event = events.append
            lock = dlm.lock(name, ttl=10, on_lost=on_lost)
            assert await lock.acquire(blocking=False)
            for m in masters[:3]:
                m.command("SET", name, b"another-holder", "PX", 10000)
            await lock.release(wait=False)  # returns: the answers are not in
            await asyncio.wait_for(lost.wait(), 5)
            assert ("lost", False) in [(e.kind, e.ok) for e in events]
            assert [s.releases_not_held for s in dlm.stats()] == [1, 1, 1, 0, 0]
            assert [m.command("GET", name) for m in masters[:3]] == [b"another-holder"] * 3
        for m in masters[:3]:
            m.command("DEL", name)

    arun(main())


def test_a_release_asked_for_during_a_round_goes_out_first_in_the_next(aclient, arun, masters):
    """40 tasks cycling 25 times each on one client: most releases are asked for while another
    task's round is in flight and queue; every acquisition still succeeds at once (its own earlier
    release went out ahead of it), and nothing is left."""
    prefix = f"q:{uuid.uuid4().hex}:"

    async def main():
        async with aclient(masters.urls, retry_count=0) as dlm:
            async def cycles(k: int) -> int:
                lock = dlm.lock(f"{prefix}{k}", ttl=10)
                done = 0
                for _ in range(25):
                    assert await lock.acquire(blocking=False)
                    await lock.release(wait=False)
                    done += 1
                return done

            assert sum(await asyncio.gather(*[cycles(k) for k in range(40)])) == 1000
            assert dlm._async_executor.carried > 0  # requests did ride in others' rounds
        assert _keys(masters, prefix) == 0

    arun(main())


def test_aclose_right_after_delivers_and_reports(aclient, arun, masters):
    prefix = f"close:{uuid.uuid4().hex}:"

    async def main():
        dlm = aclient(masters.urls)
        events: list = []
        dlm.on_event = events.append
        for j in range(50):
            lock = dlm.lock(f"{prefix}{j}", ttl=30)
            assert await lock.acquire(blocking=False)
            await lock.release(wait=False)
        await dlm.aclose()
        assert sum(1 for e in events if e.kind == "released" and e.ok) == 50

    arun(main())
    assert _keys(masters, prefix) == 0


def test_a_cancelled_caller_still_sends_it(aclient, arun, masters):
    """A release not waited for suspends its caller only while a connection opens: 40 releases,
    each after the client's connections were closed (restart-aware voting makes each new
    connection's handshake a round trip of its own, before the release is written), under
    wait_for(0 to 0.4 ms). Whatever the caller saw, a release that was asked for went out (no key
    is left); one cut before its coroutine ran at all (wait_for(..., 0)) was never asked for and
    leaves its handle holding."""
    prefix = f"cut:{uuid.uuid4().hex}:"

    async def main():
        async with aclient(masters.urls, retry_count=0, restart_aware=True, restart_grace=0) as dlm:
            locks = [dlm.lock(f"{prefix}{j}", ttl=30) for j in range(40)]
            assert all(await asyncio.gather(*[lock.acquire(blocking=False) for lock in locks]))
            cut_short = []
            for j, lock in enumerate(locks):
                dlm._async_executor._loop_core.core.close()  # the release must connect again: its caller waits
                try:
                    await asyncio.wait_for(lock.release(wait=False), (j % 5) / 10000)
                except asyncio.TimeoutError:
                    cut_short.append(lock)
            never = [lock for lock in locks if lock.token is not None]
            assert len(never) < len(cut_short), "no release was cut once asked for: the test tests nothing"
            for lock in never:
                await lock.release()
        assert _keys(masters, prefix) == 0

    arun(main())


def test_release_many_and_the_client_option(aclient, arun, masters):
    prefix = f"many:{uuid.uuid4().hex}:"

    async def main():
        async with aclient(masters.urls, wait_release=False) as dlm:
            events: list = []
            dlm.on_event = events.append
            locks = await dlm.acquire_many([f"{prefix}{j}" for j in range(8)], ttl=10)
            assert all(locks)
            assert await dlm.release_many(locks) is None  # the client's default: not waited for
            async with dlm.lock(f"{prefix}with", ttl=10) as lock:
                pass
            assert set(lock._last.outcomes) == {PENDING}
            assert await _until(lambda: sum(1 for e in events if e.kind == "released") == 9)
            assert all(e.ok for e in events)
        assert _keys(masters, prefix) == 0

    arun(main())


def test_a_loop_of_cycles_barely_wakes_the_reap_timer_and_its_last_release_is_reported(aclient, arun, masters, name):
    """A loop of lock cycles releasing without waiting reports each release at the next one: the
    reap timer looks less and less often (every 2 ms before: about 300 looks in this loop's 0.6 s
    when the loop keeps up; now about 30-40), as the sync client's reaper does. The loop's last
    release, found not held on 3 masters, is still reported once the client goes idle (on_lost),
    within a bound."""
    async def main():
        async with aclient(masters.urls, retry_count=0) as dlm:
            lost = asyncio.Event()
            lock = dlm.lock(name, ttl=10, on_lost=lambda handle: lost.set())
            unwaited = dlm.async_executor.unwaited
            assert await lock.acquire(blocking=False)
            await lock.release(wait=False)
            assert await _until(lambda: not unwaited)  # the first release reported by the timer
            start, end = unwaited.looks, time.monotonic() + 0.6
            cycles = 0
            while time.monotonic() < end:
                assert await lock.acquire(blocking=False)
                await lock.release(wait=False)
                cycles += 1
            looks = unwaited.looks - start
            assert looks < 100, f"the reap timer looked {looks} times in 0.6 s ({cycles} cycles)"
            assert await lock.acquire(blocking=False)
            for m in masters[:3]:
                m.command("DEL", name.encode())
            await asyncio.sleep(0.1)  # (a straggler of the loop, late under load, is reported first)
            before = [s.releases_not_held for s in dlm.stats()]
            idle = time.monotonic()
            await lock.release(wait=False)
            await asyncio.wait_for(lost.wait(), 5)
            assert time.monotonic() - idle < 1.0
            after = [s.releases_not_held for s in dlm.stats()]
            assert [a - b for a, b in zip(after, before)] == [1, 1, 1, 0, 0]

    arun(main())
