"""``fastredlock.compat.redlock_py``: redlock-py's API, its keys and values, without its bugs."""
from __future__ import annotations

import time

import pytest
import redis

import fastredlock.compat
from fastredlock.compat._common import close_clients
from fastredlock.compat.redlock_py import CannotObtainLock, Lock, MultipleRedlockException, Redlock


@pytest.fixture
def dicts(masters):
    return [{"host": "127.0.0.1", "port": m.port} for m in masters]


def test_lock_writes_resource_with_key_and_unlock_deletes_it(shim_core, masters, dicts, name, keys_on):
    dlm = Redlock(dicts)
    lock = dlm.lock(name, 1000)
    assert isinstance(lock, Lock) and lock.resource == name
    assert isinstance(lock.validity, int) and 900 < lock.validity <= 1000
    assert isinstance(lock.key, bytes)
    for m in masters:  # the same key and value as redlock-py: resource -> key
        assert m.command("GET", name) == lock.key
        assert 0 < m.command("PTTL", name) <= 1000
    dlm.unlock(lock)
    assert keys_on(masters, name) == 0


def test_second_lock_is_refused_after_retry_count_attempts(shim_core, dicts, name):
    dlm = Redlock(dicts, retry_count=3, retry_delay=0.05)
    held = dlm.lock(name, 5000)
    started = time.monotonic()
    assert dlm.lock(name, 5000) is False
    # three attempts, two sleeps between them (redlock-py also slept after the last one)
    assert 0.1 <= time.monotonic() - started < 0.5
    dlm.unlock(held)
    assert dlm.lock(name, 5000)


def test_unlock_accepts_a_lock_rebuilt_from_its_key(shim_core, masters, dicts, name, keys_on):
    """redlock-py's CLI prints lock.key and unlocks with Lock(0, name, key) in another process."""
    lock = Redlock(dicts).lock(name, 5000)
    Redlock(dicts).unlock(Lock(0, name, lock.key.decode()))
    assert keys_on(masters, name) == 0


def test_unlock_never_deletes_another_holders_key(shim_core, masters, dicts, name):
    dlm = Redlock(dicts)
    first = dlm.lock(name, 50)
    time.sleep(0.1)  # expired
    second = dlm.lock(name, 5000)
    assert second
    dlm.unlock(first)  # silent, as redlock-py
    assert all(m.command("GET", name) == second.key for m in masters)
    dlm.unlock(second)
    dlm.unlock(second)  # again: silent


def test_masters_as_urls_and_redis_clients(shim_core, masters, name):
    entries = [m.url for m in masters[:2]] + [redis.Redis(host="127.0.0.1", port=m.port) for m in masters[2:]]
    dlm = Redlock(entries)
    lock = dlm.lock(name, 1000)
    assert lock
    assert dlm.servers[0].get(name) == lock.key  # redis-py clients for the caller's own use
    assert dlm.servers[2] is entries[2]
    dlm.unlock(lock)


def test_bad_arguments_are_reported_as_the_original_did(one_shim_core, dicts, name):
    with pytest.raises(Warning):
        Redlock([{"cat": "hog"}])
    with pytest.raises(Warning):
        Redlock(["http://nope"])
    with pytest.raises(ValueError):
        Redlock(dicts).lock(name, 1000.0)
    assert Redlock(dicts, retry_count=0, retry_delay=0).retry_count == 3  # redlock-py's `or` defaults
    assert issubclass(CannotObtainLock, Exception)


def test_a_minority_of_failing_masters_does_not_raise_while_holding(shim_core, masters, dead_port, name, keys_on):
    """redlock-py raised MultipleRedlockException here and dropped the Lock it had acquired."""
    entries = [{"host": "127.0.0.1", "port": m.port} for m in masters[:3]] + [
        {"host": "127.0.0.1", "port": dead_port}
    ]
    dlm = Redlock(entries)
    lock = dlm.lock(name, 2000)
    assert lock  # 3 of 4
    dlm.unlock(lock)  # the dead master is logged, not raised
    assert keys_on(masters, name) == 0


def test_a_majority_of_failing_masters_means_false(shim_core, masters, dead_port, name, keys_on):
    entries = [{"host": "127.0.0.1", "port": masters[0].port}, {"host": "127.0.0.1", "port": dead_port}]
    assert Redlock(entries, retry_count=1).lock(name, 2000) is False
    assert keys_on(masters, name) == 0  # the failed attempt was released


def test_a_ttl_that_can_never_be_valid_returns_false_at_once(shim_core, dicts, name):
    started = time.monotonic()
    assert Redlock(dicts, retry_delay=1.0).lock(name, 2) is False
    assert time.monotonic() - started < 0.5


def test_multiple_redlock_exception_joins_its_errors():
    exc = MultipleRedlockException([Exception("connection error"), Exception("timed out")])
    assert str(exc) == "connection error :: timed out" == repr(exc)
    assert len(exc.errors) == 2


def test_restart_aware_voting_is_on_by_default(core, masters, dicts, name):
    """Masters up for less than the TTL may have forgotten locks: their votes wait (configurable)."""
    fastredlock.compat.configure(core=core)
    try:
        assert Redlock(dicts, retry_count=1).lock(name, 3_600_000) is False  # masters up < 1 h
    finally:
        fastredlock.compat.configure()
        close_clients()


def test_one_server_listed_twice_is_refused(one_shim_core, masters):
    port = masters[0].port
    with pytest.raises(Warning, match="same server"):
        Redlock([{"host": "127.0.0.1", "port": port, "db": 1}, {"host": "localhost", "port": port, "db": 2}])
