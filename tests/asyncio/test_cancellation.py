"""The cancellation contract: a release that was asked for reaches the masters, whatever happens to
the task that asked (``wait_for``, ``asyncio.timeout``, ``task.cancel()``, repeatedly), and the
caller still gets its CancelledError/TimeoutError at once. Both cores, both loops, real masters.

Each test counts the keys left on every master once the client is closed (``aclose`` waits for the
releases it owns) and, before that, waits for the keys to go (the masters are the judge). The
negative control turns the protection off (``fastredlock.asyncio.lock.PROTECT``) and shows that the
same storm then leaves keys: the tests can fail.
"""
from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from typing import Any, List

import pytest

import fastredlock.asyncio.lock as async_lock
from fastredlock.testing import FaultProxy, paused

TASKS = 200


def _keys(masters: Any, prefix: str) -> int:
    """Keys under ``prefix`` on all masters together (the family's keys carry it in a hash tag)."""
    return sum(len(m.command("KEYS", "*" + prefix + "*")) for m in masters)


async def _until_no_keys(masters: Any, prefix: str, seconds: float = 1.0) -> int:
    """Wait (at most ``seconds``) until no key under ``prefix`` is left; the count then."""
    deadline = time.monotonic() + seconds
    left = _keys(masters, prefix)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        left = _keys(masters, prefix)
    return left


async def _cut_release(lock: Any, seconds: float, outcomes: List[str]) -> None:
    """Release ``lock`` under ``wait_for`` with a deadline of ``seconds``; record what the caller saw."""
    try:
        await asyncio.wait_for(lock.release(), seconds)
        outcomes.append("released")
    except asyncio.TimeoutError:
        outcomes.append("timeout")


def _prefix() -> str:
    return f"cut:{uuid.uuid4().hex}:"


async def _releases_cut_by_wait_for(aclient: Any, masters: Any, prefix: str, kind: str) -> List[str]:
    """TASKS locks of ``kind`` acquired, then each release cut by wait_for(0 to 4 ms)."""
    # io_timeout: the first round opens every connection; on a loaded machine 50 ms is not enough,
    # and what is tested here is the releases cut short, not the acquisitions' timing
    async with aclient(masters.urls, retry_count=0, io_timeout=1.0) as dlm:
        def handle(j: int) -> Any:
            name = f"{prefix}{j}"
            if kind == "lock":
                return dlm.lock(name, ttl=30)
            if kind == "read":
                return dlm.rwlock(name, ttl=30).read
            if kind == "write":
                return dlm.rwlock(name, ttl=30).write
            return dlm.semaphore(name, 3, ttl=30)

        locks = [handle(j) for j in range(TASKS)]
        assert all(await asyncio.gather(*(lock.acquire(blocking=False) for lock in locks)))
        assert _keys(masters, prefix) > 0
        outcomes: List[str] = []
        await asyncio.gather(*(_cut_release(lock, random.uniform(0.0, 0.004), outcomes) for lock in locks))
        assert len(outcomes) == TASKS
        left = await _until_no_keys(masters, prefix)
    return [str(left), str(outcomes.count("timeout"))]


@pytest.mark.parametrize("kind", ["lock", "read", "write", "semaphore"])
def test_releases_cut_by_wait_for_leave_no_key(aclient, arun, masters, kind):
    prefix = _prefix()
    left, timeouts = arun(_releases_cut_by_wait_for(aclient, masters, prefix, kind))
    assert left == "0", f"{left} keys left 1 s after {TASKS} cut releases ({timeouts} callers timed out)"
    assert _keys(masters, prefix) == 0  # and none after aclose either


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is Python 3.11+")
def test_reentrant_releases_cut_in_their_own_task_leave_no_key(aclient, arun, masters):
    """A reentrant lock's owner is its task: each task enters twice and leaves twice, the last
    release cut by ``asyncio.timeout`` in the owning task."""
    prefix = _prefix()

    async def one(dlm: Any, j: int, seen: List[str]) -> None:
        lock = dlm.rlock(f"{prefix}{j}", ttl=30)
        assert await lock.acquire(blocking=False)
        assert await lock.acquire(blocking=False)
        await lock.release()
        try:
            async with asyncio.timeout(random.uniform(0.0, 0.004)):  # type: ignore[attr-defined]
                await lock.release()
            seen.append("released")
        except TimeoutError:
            seen.append("timeout")

    async def main() -> int:
        async with aclient(masters.urls, retry_count=0) as dlm:
            seen: List[str] = []
            await asyncio.gather(*(one(dlm, j, seen) for j in range(TASKS)))
            assert len(seen) == TASKS
            return await _until_no_keys(masters, prefix)

    assert arun(main()) == 0
    assert _keys(masters, prefix) == 0


async def _storm(aclient: Any, fault_masters: Any, prefix: str) -> List[int]:
    """Two waves of TASKS tasks on 5 masters, one behind a 5 ms delay, another SIGSTOPped for
    150 ms: each acquires with a random cut (wait_for or task.cancel()), and half of the
    releases are cut the same way. Returns ``[keys left after 1 s, callers not told, tasks left]``."""
    untold = 0
    with FaultProxy(fault_masters[1]) as proxy:
        proxy.latency(0.005, "both")
        urls = [fault_masters[0].url, proxy.url] + fault_masters.urls[2:]
        async with aclient(urls, retry_count=0, io_timeout=0.05) as dlm:
            async def one(j: int) -> None:
                nonlocal untold
                lock = dlm.lock(f"{prefix}{j % 50}:{j}", ttl=30)
                try:
                    if random.random() < 0.5:
                        await asyncio.wait_for(lock.acquire(blocking=False), random.uniform(0.0, 0.01))
                    else:
                        await lock.acquire(blocking=False)
                except asyncio.TimeoutError:
                    return
                if lock.token is None:
                    return
                cut = random.random() < 0.5
                if not cut:
                    await lock.release()
                    return
                if random.random() < 0.5:
                    try:
                        await asyncio.wait_for(lock.release(), random.uniform(0.0, 0.01))
                    except asyncio.TimeoutError:
                        pass
                    return
                task = asyncio.ensure_future(lock.release())
                await asyncio.sleep(random.uniform(0.0, 0.003))
                task.cancel()
                task.cancel()  # repeated
                try:
                    await task
                except asyncio.CancelledError:
                    return
                if not task.done():  # pragma: no cover - what the contract forbids
                    untold += 1

            for wave in range(2):
                tasks = [asyncio.ensure_future(one(wave * TASKS + j)) for j in range(TASKS)]
                if wave == 0:
                    await asyncio.sleep(0.002)
                    with paused(fault_masters[3]):
                        await asyncio.sleep(0.15)
                results = await asyncio.gather(*tasks, return_exceptions=True)
                errors = [r for r in results if isinstance(r, BaseException)]
                assert not errors, errors[:3]
            left = await _until_no_keys(fault_masters, prefix)
        remaining = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    return [left, untold, len(remaining)]


def test_a_cancellation_storm_leaves_no_key(aclient, arun, fault_masters):
    prefix = _prefix()
    left, untold, remaining = arun(_storm(aclient, fault_masters, prefix))
    assert left == 0, f"{left} keys left 1 s after the storm"
    assert untold == 0
    assert remaining == 0, "tasks left running after aclose"
    assert _keys(fault_masters, prefix) == 0


def test_without_the_protection_the_storm_leaves_keys(aclient, arun, fault_masters, monkeypatch):
    """Negative control: the contract switched off (the release of a cancelled caller is
    withdrawn, as before it), the same storm leaves keys, so the test above can fail."""
    monkeypatch.setattr(async_lock, "PROTECT", False)
    left, _untold, _remaining = arun(_storm(aclient, fault_masters, _prefix()))
    assert left > 0


def test_a_cancelled_release_is_reported_when_the_lock_was_lost(aclient, arun, masters):
    """The release of a lock that expired meanwhile, its caller cancelled: nobody is left to raise
    to, so on_lost hears of it (and the event stream says the release was not confirmed)."""
    prefix = _prefix()

    async def main() -> List[Any]:
        lost: List[Any] = []
        events: List[Any] = []
        async with aclient(masters.urls, retry_count=0) as dlm:
            dlm.on_event = events.append
            lock = dlm.lock(f"{prefix}x", ttl=0.05, on_lost=lost.append)
            assert await lock.acquire(blocking=False)
            deadline = time.monotonic() + 2
            while _keys(masters, prefix) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # the masters expire it
            lost.clear()  # (the watchdog may have told already; the release must tell too)
            blockers = [dlm.lock(f"{prefix}b{j}", ttl=30) for j in range(20)]
            hold = [asyncio.ensure_future(b.acquire(blocking=False)) for b in blockers]  # a busy executor
            task = asyncio.ensure_future(lock.release())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.gather(*hold)
            await asyncio.gather(*(b.release() for b in blockers if b.token is not None))
        return [lost, [e for e in events if e.name == f"{prefix}x"]]

    lost, events = arun(main())
    assert lost, "on_lost was not told of the lost lock"
    kinds = [e.kind for e in events]
    assert "released" in kinds and not [e for e in events if e.kind == "released"][-1].ok
    assert kinds[-1] == "lost", kinds  # the release's finding, after it
