"""``on_event`` on the asyncio client: the same events as the sync one (tests/sync/test_events.py)."""
from __future__ import annotations

import asyncio

from fastredlock.events import ACQUIRED, EXTENDED, REFUSED, RELEASED


def test_a_lock_life_in_events(aclient, arun, masters, name):
    seen = []

    async def main():
        dlm = aclient(masters.urls, on_event=seen.append, retry_count=1, retry_delay=0.05, retry_jitter=0.0)
        lock = dlm.lock(name, ttl=5)
        assert await lock.acquire()
        await asyncio.sleep(0.02)
        await lock.extend()
        assert not await dlm.lock(name, ttl=5).acquire()
        await lock.release()
        got = await dlm.acquire_many([name + ":a", name + ":b"], ttl=5)
        await dlm.release_many(got)

    arun(main())
    assert [e.kind for e in seen] == [ACQUIRED, EXTENDED, REFUSED, RELEASED, ACQUIRED, ACQUIRED, RELEASED, RELEASED]
    assert seen[2].attempts == 2 and seen[3].ok and seen[3].seconds >= 0.02
