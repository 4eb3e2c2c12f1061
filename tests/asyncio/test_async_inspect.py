"""``await dlm.inspect(name)`` on the asyncio client: held, free, expired and partially held locks, a
stalled master (SIGSTOP) within the timeouts, inspections that ride with other tasks' rounds, and
the token's secret never shown. Real masters, both cores, both loops."""
from __future__ import annotations

import asyncio
import json
from time import monotonic

from fastredlock import LockInfo, holder_of
from fastredlock.engine.tokens import new_token

from _checks import bound


def test_inspect_held_free_expired(arun, aclient, masters, name):
    async def main():
        async with aclient(masters.urls) as dlm:
            assert (await dlm.inspect(name)).state == "free"
            lock = dlm.lock(name, ttl=0.3, fencing=True)
            assert await lock.acquire()
            info = await dlm.inspect(name)
            assert isinstance(info, LockInfo) and info.held and info.holders == 5
            assert info.holder == holder_of(lock.token) and info.fence == lock.fence
            assert 0.2 < info.validity <= info.remaining < 0.31
            shown = repr(info) + json.dumps(info.to_dict())
            assert lock.token.decode().split(":")[0] not in shown
            await asyncio.sleep(0.35)
            assert (await dlm.inspect(name)).state == "free"  # expired

    arun(main())


def test_inspect_partial_and_while_other_tasks_lock(arun, aclient, masters, name):
    token = new_token()
    for m in masters[3:]:
        m.command("SET", name, token, "PX", 5000)

    async def main():
        async with aclient(masters.urls) as dlm:
            others = [dlm.lock(f"{name}:{i}", ttl=5) for i in range(8)]
            results = await asyncio.gather(dlm.inspect(name), *(lock.acquire() for lock in others),
                                           dlm.inspect(name))
            for info in (results[0], results[-1]):
                assert info.state == "partial" and info.holders == 2 and info.holder == holder_of(token)
                assert [m.held for m in info.masters] == [False, False, False, True, True]
            assert all(results[1:-1])
            for lock in others:
                await lock.release()

    try:
        arun(main())
    finally:
        for m in masters[3:]:
            m.command("DEL", name)


def test_inspect_a_stalled_master_within_the_timeouts(arun, aclient, fault_masters, name):
    async def main():
        async with aclient(fault_masters.urls) as dlm:
            lock = dlm.lock(name, ttl=5)
            assert await lock.acquire()
            fault_masters[0].pause()
            try:
                start = monotonic()
                info = await dlm.inspect(name)
                assert monotonic() - start < bound(1, reconnect=False)
                assert info.held and [m.outcome for m in info.masters] == ["timeout"] + ["held"] * 4
            finally:
                fault_masters[0].resume()
            await lock.release()

    arun(main())
