"""``fastredlock.compat.pottery.AIORedlock``: pottery's asyncio Redlock, its keys, values and errors.

Every behavioural test runs on both cores against the session's five real masters (through
``redis.asyncio`` clients, as pottery's users pass them). The last tests lock against pottery's own
``AIORedlock``, run in a subprocess from its isolated install, on the same key.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time

import pytest
import redis
from redis.asyncio import Redis as AIORedis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from fastredlock.compat import _common
from fastredlock.compat.pottery import (
    AIORedlock, ExtendUnlockedLock, QuorumIsImpossible, QuorumNotAchieved, ReleaseUnlockedLock, TooManyExtensions,
)

import _originals


def _aio(port, **kwargs):
    return AIORedis(host="127.0.0.1", port=port, socket_timeout=1, **kwargs)


def _dead(port):
    """A redis.asyncio client of a port nothing listens on, failing at once (no redis-py retries)."""
    return _aio(port, retry=Retry(NoBackoff(), 0))


@pytest.fixture
def with_clients(arun, masters):
    """``with_clients(main)``: run ``main(clients)`` with redis.asyncio clients of the five masters."""

    def run(main):
        async def body():
            clients = [_aio(m.port) for m in masters]
            try:
                await main(clients)
            finally:
                for c in clients:
                    await c.aclose()

        arun(body())

    return run


def test_key_value_and_owner_checked_release(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=1)
        assert lock.key == f"redlock:{name}" and repr(lock) == f"<AIORedlock key=redlock:{name}>"
        assert await lock.acquire()
        values = {m.command("GET", lock.key) for m in masters}
        assert len(values) == 1 and values != {None}
        assert all(0 < m.command("PTTL", lock.key) <= 1000 for m in masters)
        await lock.release()
        assert keys_on(masters, lock.key) == 0
        with pytest.raises(ReleaseUnlockedLock) as info:
            await lock.release()
        assert info.value.key == lock.key and info.value.redis_errors == []

    with_clients(main)


def test_release_leaves_a_key_another_value_holds(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=0.1)
        assert await lock.acquire()
        await asyncio.sleep(0.15)
        for m in masters:  # someone else's lock now, with pottery's value shape
            m.command("SET", lock.key, "another-value", "PX", "5000")
        with pytest.raises(ReleaseUnlockedLock):
            await lock.release()
        assert keys_on(masters, lock.key) == len(masters)
        for m in masters:
            m.command("DEL", lock.key)

    with_clients(main)


def test_locked_reports_seconds_left_for_the_holder_only(shim_core, name, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=2)
        other = AIORedlock(key=name, masters=clients, auto_release_time=2)
        assert await lock.locked() == 0
        started = time.monotonic()
        assert await lock.acquire()
        left = await lock.locked()
        # the TTL less the rounds' time and the drift allowance (2 s x 1% + 2 ms), measured: a busy
        # machine can take a while over the rounds (as the sync test); the servers' PTTL is whole
        # milliseconds of a clock read when the command started, so allow a few ms more
        # locked() reads the PTTLs in a round of its own and takes that round's time off them too
        elapsed = time.monotonic() - started
        assert 2 - 2 * elapsed - 0.05 <= left < 2
        assert await other.locked() == 0
        await lock.release()
        assert await lock.locked() == 0

    with_clients(main)


def test_blocking_nonblocking_and_timeouts(shim_core, name, with_clients, caplog):
    async def main(clients):
        holder = AIORedlock(key=name, masters=clients, auto_release_time=0.3)
        other = AIORedlock(key=name, masters=clients, auto_release_time=5)
        assert await holder.acquire()
        assert await other.acquire(blocking=False) is False
        with pytest.raises(ValueError, match="non-blocking"):
            await other.acquire(blocking=False, timeout=1)
        assert await other.acquire(timeout=0) is False  # one attempt (pottery made none)
        started = time.monotonic()
        assert await other.acquire(timeout=0.05) is False
        assert time.monotonic() - started < 0.3
        with caplog.at_level(logging.INFO, logger="pottery"):
            assert await other.acquire()  # waits for the holder's 0.3 s to run out
        await other.release()
        lines = [r.getMessage() for r in caplog.records if "enqueued" in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith(f"source=pottery sample#aioredlock.enqueued.{name}=")
        assert lines[0].endswith(f"sample#aioredlock.acquired.{name}=1")

    with_clients(main)


def test_extend_up_to_num_extensions(shim_core, masters, name, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=1, num_extensions=2)
        with pytest.raises(ExtendUnlockedLock):
            await lock.extend()
        assert await lock.acquire()
        await asyncio.sleep(0.3)
        await lock.extend()
        assert all(m.command("PTTL", lock.key) > 900 for m in masters)
        assert 0.75 < await lock.locked() <= 1  # reset: 0.69 s at most were left without it
        await lock.extend()
        with pytest.raises(TooManyExtensions):
            await lock.extend()
        await lock.release()
        assert await lock.acquire()  # a new acquisition may be extended again
        await lock.extend()
        await lock.release()

    with_clients(main)


def test_failed_extension_loses_the_lock(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=0.1)
        assert await lock.acquire()
        await asyncio.sleep(0.2)
        with pytest.raises(ExtendUnlockedLock):
            await lock.extend()
        with pytest.raises(ExtendUnlockedLock):
            await lock.extend()
        assert keys_on(masters, lock.key) == 0
        with pytest.raises(ReleaseUnlockedLock):
            await lock.release()

    with_clients(main)


def test_async_with_and_its_errors(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=2)
        async with lock as held:
            assert held is lock and await lock.locked() > 0
            busy = AIORedlock(key=name, masters=clients, context_manager_blocking=False)
            with pytest.raises(QuorumNotAchieved) as info:
                async with busy:
                    pass  # pragma: no cover
            assert info.value.key == lock.key and info.value.masters == frozenset(clients)
            waiting = AIORedlock(key=name, masters=clients, context_manager_timeout=0.1)
            with pytest.raises(QuorumNotAchieved):
                async with waiting:
                    pass  # pragma: no cover
        assert keys_on(masters, lock.key) == 0
        with pytest.raises(ReleaseUnlockedLock):  # released in the block: the exit finds nothing
            async with lock:
                await lock.release()
        with pytest.raises(ReleaseUnlockedLock):  # ran out in the block
            async with AIORedlock(key=name, masters=clients, auto_release_time=0.05):
                await asyncio.sleep(0.1)
        with pytest.raises(KeyError):  # the body's exception, and the lock is released
            async with lock:
                raise KeyError("body")
        assert keys_on(masters, lock.key) == 0

    with_clients(main)


def test_too_short_auto_release_time_is_not_acquired(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        lock = AIORedlock(key=name, masters=clients, auto_release_time=0.001)
        assert await lock.acquire(blocking=False) is False
        lock.context_manager_blocking = False
        with pytest.raises(QuorumNotAchieved):
            async with lock:
                pass  # pragma: no cover
        assert keys_on(masters, lock.key) == 0

    with_clients(main)


def test_redis_errors_and_quorum_is_impossible(shim_core, masters, dead_port, name, arun):
    async def main():
        up = _aio(masters[0].port)
        down = [_dead(dead_port), _dead(dead_port + 1)]
        lock = AIORedlock(key=name, masters=[up, *down], auto_release_time=1)
        assert await lock.acquire(blocking=False) is False
        with pytest.raises(QuorumIsImpossible) as info:
            await lock.acquire(blocking=False, raise_on_redis_errors=True)
        assert len(info.value.redis_errors) == 2
        assert all(isinstance(e, redis.exceptions.ConnectionError) for e in info.value.redis_errors)
        strict = AIORedlock(key=name, masters=[up, *down], raise_on_redis_errors=True)
        with pytest.raises(QuorumIsImpossible):
            await strict.acquire()
        await up.aclose()

    arun(main())


def test_a_minority_of_failing_masters_is_tolerated(shim_core, masters, dead_port, name, keys_on, arun):
    async def main():
        clients = [_aio(m.port) for m in masters[:2]] + [_dead(dead_port)]
        lock = AIORedlock(key=name, masters=clients, auto_release_time=2, raise_on_redis_errors=True)
        assert await lock.acquire(blocking=False)
        await lock.extend()
        await lock.release()
        assert keys_on(masters, lock.key) == 0
        for c in clients:
            await c.aclose()

    arun(main())


def test_locked_with_a_majority_down_raises_when_asked(shim_core, masters, dead_port, name, arun):
    async def main():
        clients = [_aio(m.port) for m in masters[:3]]
        lock = AIORedlock(key=name, masters=clients, auto_release_time=10)
        assert await lock.acquire()
        lock.masters = frozenset([clients[0], _dead(dead_port), _dead(dead_port + 1)])
        assert await lock.locked() == 0  # one master of three still confirms: not a quorum
        with pytest.raises(QuorumIsImpossible) as info:
            await lock.locked(raise_on_redis_errors=True)
        assert len(info.value.redis_errors) == 2
        lock.masters = frozenset(clients)
        await lock.release()
        for c in clients:
            await c.aclose()

    arun(main())


async def _four_tasks_inside(clients, name, exclusive=True):
    """Four tasks take ``AIORedlock(key=name)`` three times each and hold it 5 ms; return the
    overlaps they saw (how many were inside when one entered). ``exclusive=False`` is the negative
    control: each task locks a key of its own, so the lock excludes nobody."""
    inside = []
    overlaps = []

    async def worker(k):
        lock = AIORedlock(key=name if exclusive else f"{name}:unshared:{k}", masters=clients, auto_release_time=1)
        for _ in range(3):
            async with lock:
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(len(inside))
                await asyncio.sleep(0.005)
                inside.pop()

    await asyncio.wait_for(asyncio.gather(*[worker(k) for k in range(4)]), 20)
    return overlaps


def test_tasks_exclude_each_other(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        started = time.monotonic()
        assert await _four_tasks_inside(clients, name) == []
        assert time.monotonic() - started >= 12 * 0.005
        assert keys_on(masters, f"redlock:{name}") == 0

    with_clients(main)


def test_tasks_overlap_when_the_lock_excludes_nobody(shim_core, name, with_clients):
    # The negative control of the overlap check above.
    async def main(clients):
        assert await _four_tasks_inside(clients, name, exclusive=False) != []

    with_clients(main)


def test_one_round_of_contention_has_at_most_one_winner(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        locks = [AIORedlock(key=name, masters=clients, auto_release_time=1) for _ in range(10)]
        results = await asyncio.gather(*[lock.acquire(blocking=False) for lock in locks])
        assert results.count(True) <= 1
        for lock, won in zip(locks, results):
            if won:
                await lock.release()
        assert keys_on(masters, f"redlock:{name}") == 0

    with_clients(main)


def test_acquire_cancelled_while_waiting_leaves_no_key(shim_core, masters, name, keys_on, with_clients):
    async def main(clients):
        holder = AIORedlock(key=name, masters=clients, auto_release_time=5)
        assert await holder.acquire()
        waiter = AIORedlock(key=name, masters=clients, auto_release_time=5)
        task = asyncio.ensure_future(waiter.acquire())
        await asyncio.sleep(0.3)  # several attempts and pauses
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.release()
        assert keys_on(masters, holder.key) == 0

    with_clients(main)


def test_loops_closed_without_aclose_drop_their_clients(shim_core, masters, name):
    async def main():
        client = _aio(masters[0].port)
        lock = AIORedlock(key=name, masters=[client], auto_release_time=1)
        assert await lock.acquire()
        await lock.release()
        await client.aclose()
        return asyncio.get_running_loop()

    first = asyncio.run(main())
    assert first in _common._aio_clients  # its client stays: nobody called aclose_clients()
    second_loop = asyncio.new_event_loop()
    try:
        second_loop.run_until_complete(main())
        assert first not in _common._aio_clients
        assert second_loop in _common._aio_clients
        second_loop.run_until_complete(_common.aclose_clients())
    finally:
        second_loop.close()


def test_bad_arguments(one_shim_core, masters, name):
    with pytest.raises(ValueError, match="needs masters"):
        AIORedlock(key=name, masters=[])
    with pytest.raises(TypeError, match="redis.asyncio"):
        AIORedlock(key=name, masters=[redis.Redis(port=masters[0].port)])
    with pytest.raises(TypeError, match="not a single one"):
        AIORedlock(key=name, masters="redis://127.0.0.1:1")
    with pytest.raises(ValueError, match="non-blocking"):
        AIORedlock(key=name, masters=[_aio(masters[0].port)], context_manager_blocking=False,
                   context_manager_timeout=1)
    dbs = [_aio(masters[0].port, db=db) for db in (1, 2, 3)]
    with pytest.warns(RuntimeWarning, match="dbs of one server"):
        AIORedlock(key=name, masters=dbs)  # accepted, without fault tolerance (as the sync Redlock)
    with pytest.raises(ValueError, match="same server and db"):
        AIORedlock(key=name, masters=[dbs[0], _aio(masters[0].port, db=1)])
    lock = AIORedlock(key=name, masters=[_aio(masters[0].port)])
    with pytest.raises(AttributeError):
        lock.__dict__


# --- against pottery's own AIORedlock, in a subprocess ------------------------------------------
_ORIGINAL = """
import asyncio, json, sys
from redis.asyncio import Redis
from pottery import AIORedlock, ReleaseUnlockedLock

async def main(spec):
    masters = [Redis(host="127.0.0.1", port=p, socket_timeout=1) for p in spec["ports"]]
    lock = AIORedlock(key=spec["key"], masters=masters, auto_release_time=spec["ttl"])
    out = {"acquired": await lock.acquire(blocking=False)}
    if spec["release_other"]:
        try:
            await lock.release()
            out["released"] = True
        except ReleaseUnlockedLock:
            out["released"] = False
    print(json.dumps(out))

asyncio.run(main(json.loads(sys.argv[1])))
"""


def _original(spec):
    try:
        path = _originals.install("pottery")
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot install the original pottery: {exc}")
    env = dict(os.environ, PYTHONPATH=str(path))
    proc = subprocess.run([sys.executable, "-c", _ORIGINAL, json.dumps(spec)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pottery_aioredlock_and_the_shim_exclude_each_other(shim_core, masters, name, keys_on, with_clients):
    ports = [m.port for m in masters]

    async def main(clients):
        shim = AIORedlock(key=name, masters=clients, auto_release_time=5)
        assert await shim.acquire(blocking=False)
        seen = _original({"ports": ports, "key": name, "ttl": 5, "release_other": True})
        assert seen == {"acquired": False, "released": False}
        assert keys_on(masters, shim.key) == len(masters)  # pottery could not take nor free it
        await shim.release()
        assert _original({"ports": ports, "key": name, "ttl": 0.5, "release_other": False}) == {"acquired": True}
        assert await shim.acquire(blocking=False) is False  # pottery's lock holds
        assert await shim.acquire(timeout=2)  # until its auto_release_time ran out
        await shim.release()
        assert keys_on(masters, shim.key) == 0

    with_clients(main)
