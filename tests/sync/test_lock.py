"""Acquire, extend and release on five healthy masters, on both cores."""
from __future__ import annotations

import time

import pytest

from fastredlock import LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError

from _bounded import joined


def test_acquire_release_happy_path(dlm, masters, name, keys_on):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.token is None and not lock.locked()
    assert lock.acquire() is True
    assert lock.locked()
    assert keys_on(masters, name) == 5
    assert all(m.command("GET", name) == lock.token for m in masters)
    assert [o.outcome for o in lock.outcomes] == ["ok"] * 5
    lock.release()
    assert not lock.locked() and lock.token is None
    assert keys_on(masters, name) == 0


def test_acquire_sets_ttl_on_masters(dlm, masters, name):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    for m in masters:
        assert 4000 < m.command("PTTL", name) <= 5000
    lock.release()


def test_extend_resets_ttl_and_validity(dlm, masters, name):
    lock = dlm.lock(name, ttl=2.0)
    assert lock.acquire()
    lock.extend(20.0)
    assert 19.0 < lock.validity <= 20.0
    assert lock.ttl == 20.0
    for m in masters:
        assert 19000 < m.command("PTTL", name) <= 20000
    lock.extend()  # default: the handle's (new) ttl
    assert 19.0 < lock.validity <= 20.0
    lock.release()


def test_second_client_refused_while_held_then_succeeds_after_release(dlm, make_client, masters, name):
    other = make_client(masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    rival = other.lock(name, ttl=5.0)
    assert rival.acquire(blocking=False) is False
    assert [o.outcome for o in rival.outcomes] == ["no"] * 5
    assert all(m.command("GET", name) == lock.token for m in masters)  # untouched by the refusal
    lock.release()
    assert rival.acquire(blocking=False) is True
    rival.release()


def test_second_client_succeeds_after_ttl(dlm, make_client, masters, name):
    other = make_client(masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=0.3)
    assert lock.acquire()
    rival = other.lock(name, ttl=5.0)
    assert not rival.acquire(blocking=False)
    time.sleep(0.35)
    assert rival.acquire(blocking=False)
    rival.release()


def test_validity_at_most_ttl_and_shrinks(dlm, name):
    lock = dlm.lock(name, ttl=2.0)
    assert lock.acquire()
    first = lock.validity
    # ttl - drift (1% + 2 ms) is the ceiling, before elapsed time is even subtracted
    assert 0 < first <= 2.0 - 2.0 * 0.01 - 0.002
    time.sleep(0.1)
    second = lock.validity
    assert second < first - 0.09
    lock.release()


def test_validity_zero_when_not_held(dlm, name):
    lock = dlm.lock(name, ttl=1.0)
    assert lock.validity == 0.0
    assert lock.acquire()
    lock.release()
    assert lock.validity == 0.0


def test_release_after_expiry_raises_not_owned(dlm, masters, name):
    lock = dlm.lock(name, ttl=0.1)
    assert lock.acquire()
    time.sleep(0.2)
    assert not lock.locked()
    with pytest.raises(LockNotOwnedError) as info:
        lock.release()
    assert info.value.name == name
    assert [o.outcome for o in info.value.outcomes] == ["no"] * 5
    assert lock.token is None


def test_release_after_taken_by_other_raises_and_spares_new_holder(dlm, make_client, masters, name, keys_on):
    other = make_client(masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=0.1)
    assert lock.acquire()
    time.sleep(0.2)
    thief = other.lock(name, ttl=5.0)
    assert thief.acquire(blocking=False)
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert keys_on(masters, name) == 5  # the new holder's keys are untouched
    with pytest.raises(LockNotOwnedError):
        lock_extend = dlm.lock(name, ttl=1.0)
        lock_extend.token = b"not-the-token"
        lock_extend.extend()
    assert keys_on(masters, name) == 5
    thief.release()


def test_extend_after_expiry_raises_and_marks_lost(dlm, masters, name, keys_on):
    lock = dlm.lock(name, ttl=0.1)
    assert lock.acquire()
    time.sleep(0.2)
    with pytest.raises(LockNotOwnedError) as info:
        lock.extend(5.0)
    assert "lost" in str(info.value)
    assert isinstance(info.value, LockLostError)
    assert lock.lost and not lock.locked() and lock.validity == 0.0
    with pytest.raises(LockLostError):
        lock.check()
    assert keys_on(masters, name) == 0
    with pytest.raises(LockLostError):
        lock.release()  # honest to the end: the handle was lost, not released cleanly
    assert lock.token is None and not lock.lost


def test_release_unheld_handle_raises_lock_error(dlm, name):
    lock = dlm.lock(name, ttl=1.0)
    with pytest.raises(LockError):
        lock.release()
    with pytest.raises(LockError):
        lock.extend()


def test_acquire_twice_on_one_handle_raises(dlm, name):
    lock = dlm.lock(name, ttl=1.0)
    assert lock.acquire()
    with pytest.raises(LockError):
        lock.acquire()
    lock.release()


def test_context_manager_acquires_and_releases(dlm, masters, name, keys_on):
    with dlm.lock(name, ttl=5.0) as lock:
        assert lock.locked()
        assert keys_on(masters, name) == 5
    assert keys_on(masters, name) == 0


def test_context_manager_raises_when_not_acquired(dlm, make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=5.0)
    assert holder.acquire()
    with pytest.raises(LockNotAcquiredError) as info:
        with dlm.lock(name, ttl=5.0):
            pytest.fail("the body must not run")
    assert len(info.value.outcomes) == 5
    holder.release()


def test_context_manager_exit_reports_lost_lock(dlm, name):
    with pytest.raises(LockNotOwnedError):
        with dlm.lock(name, ttl=0.1):
            time.sleep(0.2)


def test_context_manager_body_error_wins_over_lost_lock(dlm, name):
    with pytest.raises(ZeroDivisionError):
        with dlm.lock(name, ttl=0.1):
            time.sleep(0.2)
            1 / 0


def test_blocking_acquire_with_timeout_honours_deadline(make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=10.0)
    assert holder.acquire()
    waiter = make_client(masters.urls, retry_delay=0.05, retry_jitter=0.0).lock(name, ttl=1.0)
    t0 = time.monotonic()
    assert waiter.acquire(timeout=0.5) is False
    took = time.monotonic() - t0
    assert 0.5 <= took <= 0.5 + 0.05 + 0.1  # deadline, plus at most one more round and scheduling
    holder.release()


def test_blocking_acquire_succeeds_when_released_during_wait(make_client, masters, name):
    import threading

    holder = make_client(masters.urls).lock(name, ttl=10.0)
    assert holder.acquire()
    threading.Timer(0.2, holder.release).start()
    waiter = make_client(masters.urls, retry_delay=0.05, retry_jitter=0.01).lock(name, ttl=1.0)
    t0 = time.monotonic()
    assert waiter.acquire(timeout=2.0)
    assert 0.15 < time.monotonic() - t0 < 1.0
    waiter.release()


def test_retry_count_bounds_attempts(make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=10.0)
    assert holder.acquire()
    waiter = make_client(masters.urls, retry_count=3, retry_delay=0.05, retry_jitter=0.0).lock(name, ttl=1.0)
    t0 = time.monotonic()
    assert waiter.acquire() is False
    took = time.monotonic() - t0
    assert 0.15 <= took < 0.4  # three sleeps of 50 ms between four attempts
    assert waiter.acquire(blocking=False) is False
    holder.release()


def test_single_master_is_classic_lock(make_client, masters, name):
    dlm = make_client(masters.urls[:1])
    assert dlm.quorum == 1
    lock = dlm.lock(name, ttl=1.0)
    assert lock.acquire()
    assert not make_client(masters.urls[:1]).lock(name, ttl=1.0).acquire(blocking=False)
    lock.release()


def test_prefix_is_prepended_to_key(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls, prefix="app:")
    with dlm.lock(name, ttl=1.0) as lock:
        assert lock.key == b"app:" + name.encode()
        assert keys_on(masters, "app:" + name) == 5
        assert keys_on(masters, name) == 0


def test_threads_share_one_client(dlm, masters, name, keys_on):
    import threading

    errors = []
    acquired = []

    def work(i):
        try:
            for j in range(30):
                lock = dlm.lock(f"{name}:{i}:{j}", ttl=5.0)
                assert lock.acquire(blocking=False)
                lock.release()
                acquired.append(1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        joined(t)
    assert not errors
    assert len(acquired) == 120
    assert all(m.command("KEYS", f"{name}:*") == [] for m in masters)


def test_release_with_signal_pushes_to_the_list_where_it_deleted(dlm, masters, name, keys_on):
    """``signal=(list, ms)``: the owner-checked delete and the push are one script per master."""
    signal = f"{name}:signal"
    lock = dlm.lock(name, ttl=5)
    with pytest.raises(TypeError):
        lock.release(signal=signal)  # checked before anything is released
    assert lock.acquire()
    with pytest.raises(ValueError):
        lock.release(signal=(signal, 0))
    assert lock.locked() and keys_on(masters, name) == len(masters)
    lock.release(signal=(signal, 800))
    assert keys_on(masters, name) == 0
    assert [m.command("LRANGE", signal, 0, -1) for m in masters] == [[b"1"]] * len(masters)
    assert all(0 < m.command("PTTL", signal) <= 800 for m in masters)
    for m in masters:
        m.command("DEL", signal)
    with pytest.raises(LockNotOwnedError):
        dlm.lock(name, ttl=5).release(token=b"not-held", signal=(signal, 800))
    assert keys_on(masters, signal) == 0  # nothing deleted, nothing pushed


def test_acquire_with_a_chosen_token(dlm, make_client, masters, name, keys_on):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(token="job-42:é")
    assert lock.token == "job-42:é".encode()
    assert {m.command("GET", name) for m in masters} == {"job-42:é".encode()}
    other = make_client(masters.urls, retry_count=0).lock(name, ttl=5.0)
    assert not other.acquire(blocking=False, token=b"job-43")
    assert {m.command("GET", name) for m in masters} == {"job-42:é".encode()}  # the refusal left it be
    lock.extend()
    lock.release()
    assert keys_on(masters, name) == 0
    for bad, error in ((b"", ValueError), (42, TypeError)):
        with pytest.raises(error, match="token"):
            dlm.lock(name).acquire(token=bad)
    assert keys_on(masters, name) == 0
