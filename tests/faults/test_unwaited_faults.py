"""A release not waited for, then a majority of masters dies before its answers are read.

The kill is placed with a :class:`~fastredlock.testing.FaultProxy` on 3 of 5 masters: each master
executes the release (the key is deleted) and dies before its answer gets out. The caller had
returned already; the next round on those connections finds them broken. What must hold: no call
hangs (each is bounded by its rounds' deadlines), the next acquisition decides by quorum (2 of 5
alive: refused), the release's report comes (its dead masters' answers are connection errors,
not "not held": nothing is reported lost), and no key is left once the masters are back.
Both cores; sync, and asyncio on both loops.
"""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from fastredlock.asyncio import Redlock as AsyncRedlock

from _checks import bound, gone_within, timed, warm
from _loops import finish_loop

TTL = 2.0


def _arm(proxies, masters) -> None:
    for proxy, master in zip(proxies[:3], masters[:3]):
        proxy.stall("down")
        proxy.on_reply(master.kill)


def _until_dead(masters) -> None:
    deadline = time.monotonic() + bound(2)
    while any(m.running() for m in masters):
        assert time.monotonic() < deadline, "the armed masters did not die: the release never reached them"
        time.sleep(0.005)


def _reported(dlm) -> threading.Event:
    done = threading.Event()
    dlm.on_event = lambda event: done.set() if event.kind == "released" else None
    return done


def test_majority_killed_before_the_answers_sync(fault_client, fault_proxies, fault_masters, name):
    lost = threading.Event()
    dlm = fault_client()
    warm(dlm, name)
    lock = dlm.lock(name, ttl=TTL, on_lost=lambda handle: lost.set())
    assert lock.acquire(blocking=False)
    released = _reported(dlm)
    _arm(fault_proxies, fault_masters)
    timed(lock.release, bound(1), wait=False)
    _until_dead(fault_masters[:3])  # (the proxies kill them as their answers arrive)
    gone_within(fault_masters, name, bound(1))  # the survivors deleted it; the dead ones before dying
    assert timed(lock.acquire, bound(2), blocking=False) is False  # 2 of 5 alive: no quorum
    assert released.wait(bound(2)), "the release was never reported"
    assert not lost.is_set(), "dead masters were reported as 'not held'"
    for m in fault_masters[:3]:
        m.start()
    gone_within(fault_masters, name, bound(1))  # back empty: nothing of ours survives anywhere


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_majority_killed_before_the_answers_asyncio(core, loop_kind, fault_proxies, fault_masters, name):
    async def main():
        lost = asyncio.Event()

        async def on_lost(handle):
            lost.set()

        dlm = AsyncRedlock([p.url for p in fault_proxies], core=core, restart_aware=False, retry_count=0)
        warm_lock = dlm.lock(name + ":warm", ttl=1.0)
        assert await warm_lock.acquire(blocking=False)
        await warm_lock.release()
        lock = dlm.lock(name, ttl=TTL, on_lost=on_lost)
        assert await lock.acquire(blocking=False)
        released = asyncio.Event()
        dlm.on_event = lambda event: released.set() if event.kind == "released" else None
        _arm(fault_proxies, fault_masters)
        await asyncio.wait_for(lock.release(wait=False), bound(1))
        _until_dead(fault_masters[:3])
        assert await asyncio.wait_for(lock.acquire(blocking=False), bound(2)) is False
        await asyncio.wait_for(released.wait(), bound(2))
        assert not lost.is_set(), "dead masters were reported as 'not held'"
        await asyncio.wait_for(dlm.aclose(), bound(2))

    if loop_kind == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        finish_loop(loop)
    gone_within(fault_masters, name, bound(1))
    for m in fault_masters[:3]:
        m.start()
    gone_within(fault_masters, name, bound(1))
