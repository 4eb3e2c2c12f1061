"""The asyncio client with Sentinel masters: the same resolution, role check and outcomes as the
sync client (the core asks the sentinels when it opens such a link, from the loop's callbacks)."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from fastredlock import LockError
from fastredlock.testing import blackhole_address, start_sentinels

TTL = 5.0
CONNECT = 0.5


@pytest.fixture(scope="module")
def group():
    """One service shared by the module's tests, which must not fail it over."""
    with start_sentinels("ashared", failover_ready=False) as g:
        yield g


async def outcomes(lock):
    return [o.outcome for o in await lock.settled_outcomes()]


def test_lock_extend_release_through_sentinels(arun, aclient, group, masters, name, keys_on):
    async def main():
        async with aclient([group.url], connect_timeout=CONNECT) as dlm:
            for _ in range(10):
                lock = dlm.lock(name, ttl=TTL)
                assert await lock.acquire()
                assert await outcomes(lock) == ["ok"]
                assert group.master.command("EXISTS", name) == 1
                await lock.extend()
                await lock.release()
                assert group.master.command("EXISTS", name) == 0  # (the replica follows asynchronously)
            assert [(s.connect_errors, s.connection_errors) for s in dlm.stats()] == [(0, 0)]
        async with aclient([group.url] + masters.urls[:2], connect_timeout=CONNECT) as mixed:
            async with mixed.lock(name, ttl=TTL) as lock:
                assert await outcomes(lock) == ["ok"] * 3
                assert group.master.command("EXISTS", name) == 1 and keys_on(masters[:2], name) == 2
            # 8 tasks at once ride the same connections
            async def one(j):
                async with mixed.lock(f"{name}:{j}", ttl=TTL):
                    await asyncio.sleep(0)
            await asyncio.gather(*(one(j) for j in range(8)))

    arun(main())


def test_sentinel_errors_are_outcomes_within_the_timeouts(arun, aclient, group, masters, dead_port, name):
    unknown = group.url.rsplit("/", 1)[0] + "/nosuchservice"

    async def main():
        async with aclient([unknown] + masters.urls[:2], connect_timeout=CONNECT) as dlm:
            lock = dlm.lock(name, ttl=TTL)
            assert await lock.acquire()
            first = (await lock.settled_outcomes())[0]
            assert first.outcome == "sentinel error" and "unknown service 'nosuchservice'" in first.detail
            await lock.release()
        with blackhole_address() as (host, port):
            down = {"sentinels": [("127.0.0.1", dead_port), (host, port)], "service": "x"}
            async with aclient([down], connect_timeout=CONNECT, retry_count=0, cooldown=0) as alone:
                started = time.monotonic()
                with pytest.raises(LockError) as info:
                    async with alone.lock(name, ttl=TTL):
                        pass
                assert time.monotonic() - started < 2 * (CONNECT + 0.05) + 0.5  # two rounds: the acquire, its cleanup
                assert [o.outcome for o in info.value.outcomes] == ["sentinel error"]

    arun(main())


GRACE = 2.0


@pytest.fixture(scope="module")
def failover_group():
    """A service with three replicas: each loop and core's run of the failover test fails it over once."""
    with start_sentinels("aforced", replicas=3) as g:
        yield g


def _uptime(server):
    return int(server.command("INFO", "server").split(b"uptime_in_seconds:")[1].split(b"\r")[0])


async def _promoted_replica_waits(dlm, name, new, promoted_at):
    lock = dlm.lock(name, ttl=TTL)
    assert not await lock.acquire(blocking=False)
    assert await outcomes(lock) == ["restarted recently"]  # promoted: no vote during the grace
    assert await lock.acquire(blocking=True, timeout=GRACE + 5.0)
    assert time.monotonic() - promoted_at > GRACE - 1.0
    assert new.command("GET", name) == lock.token
    await lock.release()


@pytest.mark.slow
def test_forced_failover_the_promoted_replica_votes_after_restart_grace(arun, aclient, failover_group, name):
    g = failover_group
    while min(_uptime(s) for s in g.replicas) <= GRACE:
        time.sleep(0.2)  # their uptime alone would not distrust them
    new = g.failover(demoted=False)
    promoted_at = time.monotonic()

    async def main():  # a client that connects for the first time after the failover
        async with aclient([g.url], connect_timeout=CONNECT, restart_aware=True, restart_grace=GRACE) as dlm:
            await _promoted_replica_waits(dlm, name, new, promoted_at)

    arun(main())


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("FASTREDLOCK_FAILOVER_TESTS"),
                    reason="a killed master's failover: FASTREDLOCK_FAILOVER_TESTS=1 runs it")
def test_master_killed_then_the_promoted_replica_votes_after_restart_grace(arun, aclient, name):
    with start_sentinels("akilled") as g:
        new = g.replicas[0]

        async def main():
            async with aclient([g.url], connect_timeout=CONNECT, restart_aware=True, restart_grace=GRACE,
                               cooldown=0) as dlm:
                while _uptime(new) <= GRACE:
                    await asyncio.sleep(0.2)  # its uptime alone would not distrust it
                async with dlm.lock(name, ttl=TTL):
                    pass
                assert g.kill_master() is new  # (blocks the loop: nothing else runs meanwhile)
                await _promoted_replica_waits(dlm, name, new, time.monotonic())

        arun(main())
