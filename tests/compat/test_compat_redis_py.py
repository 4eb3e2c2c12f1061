"""``fastredlock.compat.redis_py.AsyncLock``: redis-py's asyncio Lock API, keys, values and errors.

Each behavioural test runs on both cores against a real local server, and checks what redis-py's
own ``redis.asyncio.lock.Lock`` does to the same key where the two must agree (they exclude each
other on one name).
"""
from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.asyncio.lock import Lock as RedisPyLock
from redis.exceptions import LockError, LockNotOwnedError

from fastredlock.compat.redis_py import NO_TIMEOUT_TTL, AsyncLock
from fastredlock.testing import start_masters


def _client(master, **kwargs):
    return Redis(host="127.0.0.1", port=master.port, socket_timeout=1, **kwargs)


@pytest.fixture
def with_redis(arun, masters):
    """``with_redis(main)``: run ``main(r)`` with a redis-py asyncio client of the first master."""

    def run(main):
        async def body():
            r = _client(masters[0])
            try:
                await main(r)
            finally:
                await r.aclose()

        arun(body())

    return run


async def _released(r, lock, name):
    """Release ``lock`` and check its key is gone on the server."""
    await lock.release()
    assert await r.get(name) is None


def test_lock_class_stores_token_with_ttl_and_releases(shim_core, name, with_redis):
    async def main(r):
        lock = r.lock(name, timeout=2, lock_class=AsyncLock)
        assert isinstance(lock, AsyncLock)
        assert await lock.acquire(blocking=False)
        assert await r.get(name) == lock.local.token
        assert 1900 < await r.pttl(name) <= 2000
        assert await lock.owned() and await lock.locked()
        await lock.release()
        assert await r.get(name) is None and lock.local.token is None
        assert not await lock.locked()

    with_redis(main)


def test_user_token_is_encoded_and_stored(shim_core, name, with_redis):
    async def main(r):
        lock = AsyncLock(r, name, timeout=1, thread_local=False)
        assert await lock.acquire(blocking=False, token="test")
        assert await r.get(name) == b"test" and lock.local.token == b"test"
        await _released(r, lock, name)

    with_redis(main)


def test_no_timeout_lock_is_renewed_and_refuses_extend(shim_core, name, with_redis):
    async def main(r):
        lock = AsyncLock(r, name)
        assert await lock.acquire()
        assert 0 < await r.pttl(name) <= NO_TIMEOUT_TTL * 1000
        with pytest.raises(LockError, match="Cannot extend a lock with no timeout"):
            lock.extend(1)
        with pytest.raises(LockError, match="Cannot reacquire a lock with no timeout"):
            lock.reacquire()
        await _released(r, lock, name)

    with_redis(main)


def test_no_timeout_lock_outlives_its_ttl_while_held(shim_core, name, with_redis, monkeypatch):
    monkeypatch.setattr("fastredlock.compat.redis_py.NO_TIMEOUT_TTL", 0.3)

    async def main(r):
        lock = AsyncLock(r, name)
        assert await lock.acquire(token="mine")
        await asyncio.sleep(0.8)  # well past 0.3 s: the watchdog renewed it
        assert await r.get(name) == b"mine" and await lock.owned()
        await _released(r, lock, name)

    with_redis(main)


def test_competing_with_redis_py_on_the_same_name(shim_core, name, with_redis):
    async def main(r):
        original = RedisPyLock(r, name, timeout=5)
        shim = AsyncLock(r, name, timeout=5)
        assert await original.acquire(blocking=False)
        assert not await shim.acquire(blocking=False)
        assert await shim.locked() and not await shim.owned()
        await original.release()
        assert await shim.acquire(blocking=False)
        assert not await original.acquire(blocking=False)
        await shim.release()
        assert await original.acquire(blocking=False)  # the shim left nothing behind
        await original.release()

    with_redis(main)


def test_blocking_timeout_and_sleep(shim_core, name, with_redis):
    async def main(r):
        holder = AsyncLock(r, name, timeout=0.3)
        other = AsyncLock(r, name, timeout=5, sleep=0.05, blocking_timeout=0.1)
        assert await holder.acquire()
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert not await other.acquire()
        assert 0.05 <= loop.time() - started < 0.3
        # a sleep longer than the blocking timeout: one attempt, no sleep (as redis-py)
        slow = AsyncLock(r, name, timeout=5, sleep=10)
        started = loop.time()
        assert not await slow.acquire(blocking_timeout=0.5)
        assert loop.time() - started < 0.2
        assert await other.acquire(blocking_timeout=1)  # the holder's 0.3 s ran out
        await other.release()

    with_redis(main)


def test_context_manager_and_its_errors(shim_core, name, with_redis):
    async def main(r):
        async with r.lock(name, timeout=1, lock_class=AsyncLock) as lock:
            assert await r.get(name) == lock.local.token
        assert await r.get(name) is None
        holder = AsyncLock(r, name, timeout=5)
        assert await holder.acquire()
        with pytest.raises(LockError, match="Unable to acquire lock within the time specified"):
            async with AsyncLock(r, name, timeout=1, blocking=False):
                pass
        await holder.release()
        # the key vanished under the body: raises, unless raise_on_release_error=False
        with pytest.raises(LockNotOwnedError):
            async with AsyncLock(r, name, timeout=1):
                await r.delete(name)
        async with AsyncLock(r, name, timeout=1, raise_on_release_error=False):
            await r.delete(name)

    with_redis(main)


def test_release_errors(shim_core, name, with_redis):
    async def main(r):
        lock = AsyncLock(r, name, timeout=1)
        with pytest.raises(LockError, match="Cannot release a lock that's not owned or is already unlocked."):
            await lock.release()
        assert await lock.acquire()
        await r.set(name, "someone else")
        with pytest.raises(LockNotOwnedError, match="Cannot release a lock that's no longer owned"):
            await lock.release()
        assert await r.get(name) == b"someone else" and lock.local.token is None

    with_redis(main)


def test_extend_adds_or_replaces_and_reacquire_resets(shim_core, name, with_redis):
    async def main(r):
        lock = AsyncLock(r, name, timeout=10)
        assert await lock.acquire()
        assert await lock.extend(10) is True
        assert 16000 < await r.pttl(name) <= 20000
        assert await lock.extend(5, replace_ttl=True) is True
        assert 4000 < await r.pttl(name) <= 5000
        assert await lock.extend(0.5) is True
        assert 5000 < await r.pttl(name) <= 5500
        await r.pexpire(name, 1000)
        assert await lock.reacquire() is True
        assert 9000 < await r.pttl(name) <= 10000
        await lock.release()

    with_redis(main)


def test_extend_and_reacquire_errors(shim_core, name, with_redis):
    async def main(r):
        lock = AsyncLock(r, name, timeout=10)
        with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
            lock.extend(10)
        with pytest.raises(LockError, match="Cannot reacquire an unlocked lock"):
            lock.reacquire()
        assert await lock.acquire()
        await r.set(name, "someone else")
        with pytest.raises(LockNotOwnedError, match="Cannot extend a lock that's no longer owned"):
            await lock.extend(10)
        with pytest.raises(LockNotOwnedError, match="Cannot reacquire a lock that's no longer owned"):
            await lock.reacquire()
        assert await r.get(name) == b"someone else"  # never touched another holder's key

    with_redis(main)


def test_owned_with_decoded_responses_and_thread_local_token(shim_core, masters, name, arun):
    async def main():
        r = _client(masters[0], decode_responses=True)
        lock = AsyncLock(r, name, timeout=2)
        assert not await lock.owned()
        assert await lock.acquire()
        assert await lock.owned()
        seen = await asyncio.to_thread(lambda: getattr(lock.local, "token", None))
        assert seen is None  # another thread does not see this thread's token
        shared = AsyncLock(r, name + "2", timeout=2, thread_local=False)
        assert await shared.acquire()
        assert await asyncio.to_thread(lambda: shared.local.token) == shared.local.token
        await lock.release()
        await shared.release()
        await r.aclose()

    arun(main())


def test_server_not_answering_raises_redis_error_and_keeps_token(shim_core, name, arun):
    from redis.exceptions import TimeoutError as RedisTimeoutError

    with start_masters(1) as (master,):

        async def main():
            r = _client(master)
            lock = AsyncLock(r, name, timeout=5)
            assert await lock.acquire()
            token = lock.local.token
            master.pause()
            try:
                with pytest.raises(RedisTimeoutError):
                    await lock.release()
                assert lock.local.token == token  # kept: the release can be retried
            finally:
                master.resume()
            await asyncio.sleep(0.1)  # the server is awake again
            assert await r.get(name) == token  # the timed-out release did not delete it
            await lock.release()  # the retry does
            assert await r.get(name) is None and lock.local.token is None
            await r.aclose()

        arun(main())


def test_one_client_per_event_loop(shim_core, masters, name, arun):
    r_port = masters[0]

    async def on_new_loop():
        r = _client(r_port)
        lock = AsyncLock(r, name, timeout=1)
        assert await lock.acquire()
        await lock.release()
        await r.aclose()

    lock_loops = [arun(on_new_loop()) for _ in range(2)]  # a second loop: no "another event loop" error
    assert lock_loops == [None, None]


def test_bad_arguments(one_shim_core, masters, name):
    with pytest.raises(TypeError, match="redis.asyncio.Redis"):
        AsyncLock("redis://127.0.0.1", name)
    r = _client(masters[0])
    with pytest.raises(ValueError, match="timeout"):
        AsyncLock(r, name, timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        AsyncLock(r, name, timeout="10")
    with pytest.raises(ValueError, match="sleep"):
        AsyncLock(r, name, sleep=-1)
    lock = AsyncLock(r, name, timeout=2.5)
    assert repr(lock) == f"<AsyncLock name={name!r} timeout=2.5>"
