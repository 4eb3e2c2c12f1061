"""``fastredlock.compat.pottery``: pottery's Redlock API, its keys and values, without its bugs."""
from __future__ import annotations

import concurrent.futures
import logging
import time

import pytest
import redis

from fastredlock.compat.pottery import (
    ContextTimer, ExtendUnlockedLock, QuorumIsImpossible, QuorumNotAchieved, Redlock, ReleaseUnlockedLock, TooManyExtensions, synchronize,
)


@pytest.fixture
def clients(masters):
    made = [redis.Redis(host="127.0.0.1", port=m.port, socket_timeout=1) for m in masters]
    yield made
    for c in made:
        c.close()


def test_key_is_prefixed_and_value_is_checked_on_release(shim_core, masters, clients, name, keys_on):
    lock = Redlock(key=name, masters=clients, auto_release_time=1)
    assert lock.key == f"redlock:{name}" and repr(lock) == f"<Redlock key=redlock:{name}>"
    assert lock.acquire()
    values = {m.command("GET", lock.key) for m in masters}
    assert len(values) == 1 and values != {None}
    assert all(0 < m.command("PTTL", lock.key) <= 1000 for m in masters)
    lock.release()
    assert keys_on(masters, lock.key) == 0
    with pytest.raises(ReleaseUnlockedLock):
        lock.release()


def test_locked_reports_seconds_left_for_the_holder_only(shim_core, clients, name):
    lock = Redlock(key=name, masters=clients, auto_release_time=2)
    other = Redlock(key=name, masters=clients, auto_release_time=2)
    assert lock.locked() == 0
    started = time.monotonic()
    assert lock.acquire()
    left = lock.locked()
    # validity: the TTL less the rounds' time and the drift allowance (2 s x 1% + 2 ms); measured,
    # not assumed (a busy machine, or PyPy before its JIT warmed up, can take a while over a round;
    # locked() reads the PTTLs in a round of its own and takes that round's time off them too)
    elapsed = time.monotonic() - started
    assert 2 - 2 * elapsed - 0.05 <= left < 2  # (PTTL is whole ms, read after)
    assert other.locked() == 0
    lock.release()
    assert lock.locked() == 0


def test_blocking_nonblocking_and_timeouts(shim_core, clients, name):
    holder = Redlock(key=name, masters=clients, auto_release_time=0.3)
    other = Redlock(key=name, masters=clients, auto_release_time=5)
    assert holder.acquire()
    assert other.acquire(blocking=False) is False
    with pytest.raises(ValueError):
        other.acquire(blocking=False, timeout=1)
    assert other.acquire(timeout=0) is False  # one attempt (pottery made none)
    started = time.monotonic()
    assert other.acquire(timeout=0.05) is False
    assert time.monotonic() - started < 0.3
    assert other.acquire()  # waits for the holder's 0.3 s to run out
    other.release()


def test_blocking_acquire_that_waited_logs_once(shim_core, clients, name, caplog):
    holder = Redlock(key=name, masters=clients, auto_release_time=0.2)
    other = Redlock(key=name, masters=clients, auto_release_time=0.2)
    assert holder.acquire()
    with caplog.at_level(logging.INFO, logger="pottery"):
        assert other.acquire()
    lines = [r.getMessage() for r in caplog.records if "enqueued" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith(f"source=pottery sample#redlock.enqueued.{name}=")


def test_extend_up_to_num_extensions(shim_core, masters, clients, name):
    lock = Redlock(key=name, masters=clients, auto_release_time=1, num_extensions=2)
    with pytest.raises(ExtendUnlockedLock):
        lock.extend()
    assert lock.acquire()
    time.sleep(0.3)
    lock.extend()
    assert all(m.command("PTTL", lock.key) > 900 for m in masters)
    lock.extend()
    with pytest.raises(TooManyExtensions):
        lock.extend()
    lock.release()


def test_failed_extension_loses_the_lock(shim_core, masters, clients, name, keys_on):
    lock = Redlock(key=name, masters=clients, auto_release_time=0.1)
    assert lock.acquire()
    time.sleep(0.2)
    with pytest.raises(ExtendUnlockedLock):
        lock.extend()
    with pytest.raises(ExtendUnlockedLock):
        lock.extend()
    assert keys_on(masters, lock.key) == 0


def test_context_manager(shim_core, masters, clients, name, keys_on):
    lock = Redlock(key=name, masters=clients, auto_release_time=2)
    with lock as held:
        assert held is lock and lock.locked()
        busy = Redlock(key=name, masters=clients, context_manager_blocking=False)
        with pytest.raises(QuorumNotAchieved) as info:
            with busy:
                pass  # pragma: no cover
        assert info.value.key == lock.key and info.value.masters == frozenset(clients)
    assert keys_on(masters, lock.key) == 0
    with pytest.raises(ValueError):
        Redlock(key=name, masters=clients, context_manager_blocking=False, context_manager_timeout=1)


def test_context_manager_reports_a_lock_that_ran_out(shim_core, clients, name):
    with pytest.raises(ReleaseUnlockedLock):
        with Redlock(key=name, masters=clients, auto_release_time=0.05):
            time.sleep(0.1)


def test_failed_reacquire_keeps_the_hold(shim_core, masters, clients, name, keys_on):
    lock = Redlock(key=name, masters=clients, auto_release_time=5)
    assert lock.acquire()
    assert lock.acquire(blocking=False) is False
    lock.release()  # still frees it (pottery had forgotten its first value)
    assert keys_on(masters, lock.key) == 0


def test_too_short_auto_release_time_is_not_acquired(shim_core, masters, clients, name, keys_on):
    lock = Redlock(key=name, masters=clients, auto_release_time=0.001)
    assert lock.acquire(blocking=False) is False
    assert keys_on(masters, lock.key) == 0


def test_redis_errors_and_quorum_is_impossible(shim_core, masters, dead_port, name):
    up = redis.Redis(host="127.0.0.1", port=masters[0].port)
    down = [redis.Redis(host="127.0.0.1", port=dead_port), redis.Redis(host="127.0.0.1", port=dead_port + 1)]
    lock = Redlock(key=name, masters=[up, *down], auto_release_time=1)
    assert lock.acquire(blocking=False) is False
    with pytest.raises(QuorumIsImpossible) as info:
        lock.acquire(blocking=False, raise_on_redis_errors=True)
    assert len(info.value.redis_errors) == 2
    assert all(isinstance(e, redis.exceptions.ConnectionError) for e in info.value.redis_errors)
    strict = Redlock(key=name, masters=[up, *down], raise_on_redis_errors=True)
    with pytest.raises(QuorumIsImpossible):
        strict.acquire()


def test_a_minority_of_failing_masters_is_tolerated(shim_core, masters, dead_port, name, keys_on):
    clients = [redis.Redis(host="127.0.0.1", port=m.port) for m in masters[:2]]
    clients.append(redis.Redis(host="127.0.0.1", port=dead_port))
    lock = Redlock(key=name, masters=clients, auto_release_time=2, raise_on_redis_errors=True)
    assert lock.acquire(blocking=False)
    assert lock.locked() > 0
    lock.extend()
    lock.release()
    assert keys_on(masters, lock.key) == 0


def test_synchronize_runs_one_caller_at_a_time(shim_core, clients, name):
    @synchronize(key=name, masters=clients, auto_release_time=0.5)
    def func():
        time.sleep(0.05)
        return time.monotonic()

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        ends = sorted(pool.map(lambda _: func(), range(3)))
    assert all(b - a >= 0.05 for a, b in zip(ends, ends[1:]))

    @synchronize(key=name, masters=clients, auto_release_time=0.5, blocking=False)
    def busy():
        raise AssertionError("never runs")  # pragma: no cover

    holder = Redlock(key=name, masters=clients, auto_release_time=2)
    with holder:
        with pytest.raises(QuorumNotAchieved):
            busy()


def test_slots_and_context_timer():
    lock = Redlock(key="x", masters=[redis.Redis(port=1)])
    with pytest.raises(AttributeError):
        lock.__dict__
    with ContextTimer() as timer:
        time.sleep(0.02)
    assert 20 <= timer.elapsed() < 200
    with pytest.raises(RuntimeError):
        timer.stop()


def test_dbs_of_one_server_are_accepted_with_a_warning(shim_core, masters, name, caplog):
    dbs = [redis.Redis(host="127.0.0.1", port=masters[0].port, db=db) for db in (1, 2, 3)]
    with caplog.at_level(logging.WARNING, logger="pottery"), pytest.warns(RuntimeWarning) as warned:
        lock = Redlock(key=name, masters=dbs, auto_release_time=2)
    (message,) = [str(w.message) for w in warned]
    assert "single point of failure" in message and "mutual exclusion still holds" in message
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("pottery", message)]
    assert lock.acquire(blocking=False)
    assert [d.exists(lock.key) for d in dbs] == [1, 1, 1]  # one key, and one vote, per db
    with pytest.warns(RuntimeWarning):
        other = Redlock(key=name, masters=dbs, auto_release_time=2)
    assert other.acquire(blocking=False) is False
    lock.release()
    same_db = [redis.Redis(host="127.0.0.1", port=masters[0].port, db=1), redis.Redis(host="localhost", port=masters[0].port, db=1)]
    with pytest.raises(ValueError, match="same server and db"):
        Redlock(key=name, masters=same_db)


def test_failures_are_logged_to_potterys_logger_as_pottery_did(shim_core, dead_port, name, caplog):
    down = redis.Redis(host="127.0.0.1", port=dead_port)
    lock = Redlock(key=name, masters=[down], auto_release_time=1)
    with caplog.at_level(logging.INFO, logger="pottery"):
        assert lock.acquire(blocking=False) is False
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert records == [("pottery", "ERROR", "Redlock.__acquire_masters() caught ConnectionError")]
    assert caplog.records[0].exc_info is not None
