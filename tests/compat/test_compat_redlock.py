"""``fastredlock.compat.redlock``: glasslion's RedLock API, its keys and values, without its bugs."""
from __future__ import annotations

import time

import pytest
import redis

from fastredlock.compat.redlock import RedLock, RedLockError, RedLockFactory, ReentrantRedLock


@pytest.fixture
def details(masters):
    return [{"host": "127.0.0.1", "port": m.port} for m in masters]


def test_acquire_writes_resource_with_lock_key_and_release_deletes_it(shim_core, masters, details, name, keys_on):
    lock = RedLock(name, connection_details=details, ttl=1000)
    assert lock.acquire() is True
    assert lock.quorum == 3
    for m in masters:  # the same key and value layout as glasslion's: resource -> lock_key
        assert m.command("GET", name) == lock.lock_key.encode()
        assert 0 < m.command("PTTL", name) <= 1000
    lock.release()
    assert keys_on(masters, name) == 0


def test_a_held_lock_refuses_others_for_retry_times_attempts(shim_core, details, name):
    holder = RedLock(name, details, ttl=5000)
    assert holder.acquire()
    other = RedLock(name, details, retry_times=3, retry_delay=50, ttl=5000)
    started = time.monotonic()
    assert other.acquire() is False
    assert time.monotonic() - started < 0.5  # two random sleeps of at most 50 ms
    holder.release()
    assert other.acquire()
    other.release()


def test_context_manager_binds_the_lock_and_raises_when_taken(shim_core, masters, details, name, keys_on):
    with RedLock(name, details, ttl=5000) as lock:
        assert isinstance(lock, RedLock)  # glasslion's bound None
        assert keys_on(masters, name) == len(masters)
        with pytest.raises(RedLockError):
            with RedLock(name, details, retry_times=1):
                pass  # pragma: no cover
    assert keys_on(masters, name) == 0


def test_release_after_expiry_leaves_the_new_holder_alone(shim_core, masters, details, name):
    first = RedLock(name, details, ttl=50)
    assert first.acquire()
    time.sleep(0.1)
    second = RedLock(name, details, ttl=5000)
    assert second.acquire()
    first.release()
    assert all(m.command("GET", name) == second.lock_key.encode() for m in masters)
    second.release()


def test_release_without_acquire_does_nothing(shim_core, details, name):
    RedLock(name, details).release()  # glasslion raised AttributeError


def test_failed_reacquire_keeps_the_hold(shim_core, masters, details, name, keys_on):
    lock = RedLock(name, details, retry_times=1, ttl=5000)
    assert lock.acquire()
    assert lock.acquire() is False  # not reentrant
    lock.release()  # still frees it (glasslion had forgotten its first value)
    assert keys_on(masters, name) == 0


def test_reentrant_lock_is_released_by_the_last_release(shim_core, masters, details, name, keys_on):
    lock = ReentrantRedLock(name, details, ttl=5000)
    assert lock.acquire() and lock.acquire()
    assert lock.release() is True
    assert keys_on(masters, name) == len(masters)
    lock.release()
    assert keys_on(masters, name) == 0
    assert lock.release() is False


def test_factory_locks_share_masters_and_take_kwargs(shim_core, masters, details, name, keys_on):
    factory = RedLockFactory(details)
    lock = factory.create_lock(name, ttl=700, retry_times=5, retry_delay=10)
    assert (lock.ttl, lock.retry_times, lock.retry_delay, lock.factory) == (700, 5, 10, factory)
    assert lock.redis_nodes is factory.redis_nodes and lock.quorum == factory.quorum == 3
    assert isinstance(lock.redis_nodes[0], redis.Redis)
    assert lock.acquire()
    assert factory.create_lock(name, retry_times=1).acquire() is False
    lock.release()
    assert keys_on(masters, name) == 0


def test_url_details_with_extra_arguments_are_not_emptied(shim_core, masters, name):
    details = [{"url": f"redis://127.0.0.1:{m.port}/0", "socket_timeout": 1} for m in masters]
    lock = RedLock(name, details)
    assert lock.acquire()
    lock.release()
    assert all("url" in d for d in details)  # glasslion popped them
    assert RedLock(name, details).acquire()


def test_a_failing_master_counts_as_no_instead_of_raising(shim_core, masters, dead_port, name, keys_on):
    details = [{"host": "127.0.0.1", "port": m.port} for m in masters[:2]] + [{"host": "127.0.0.1", "port": dead_port}]
    lock = RedLock(name, details, ttl=2000)
    assert lock.acquire()  # 2 of 3; glasslion raised redis.ConnectionError
    lock.release()
    details = details[:1] + [{"host": "127.0.0.1", "port": dead_port}]
    assert RedLock(name, details, retry_times=1).acquire() is False
    assert keys_on(masters, name) == 0


def test_default_connection_details(one_shim_core, name):
    lock = RedLock(name)  # localhost:6379/0, as glasslion; nothing is sent until acquire
    assert lock.quorum == 1


def test_one_server_listed_twice_is_refused(one_shim_core, masters, name):
    port = masters[0].port
    with pytest.raises(ValueError, match="same server"):
        RedLock(name, [{"url": f"redis://127.0.0.1:{port}/1"}, {"url": f"redis://127.0.0.1:{port}/2"}])
