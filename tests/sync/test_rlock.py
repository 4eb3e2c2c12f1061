"""``dlm.rlock``: reentrant per owner thread, the count on the masters, wake on the last release."""
from __future__ import annotations

import threading
import time

import pytest

from fastredlock import LockError

from _bounded import joined
from _family import eventually, in_thread, no_key_without_ttl, tagged


def counts(masters, name):
    """The count field of the lock's hash on each master (None where there is no key)."""
    key = tagged(name, ":rlock")
    return [m.command("HGET", key, "count") for m in masters]


def test_reentry_counts_on_masters_and_last_release_frees(dlm, masters, name):
    lock = dlm.rlock(name, ttl=5)
    assert lock.acquire(blocking=False)
    assert lock.acquire(blocking=False)
    assert dlm.rlock(name, ttl=5).acquire(blocking=False)  # another handle, same thread: re-enters
    assert lock.count == 3
    assert eventually(lambda: counts(masters, name), [b"3"] * 5) == [b"3"] * 5
    assert no_key_without_ttl(masters, name)
    lock.release()
    assert lock.count == 2 and eventually(lambda: counts(masters, name), [b"2"] * 5) == [b"2"] * 5
    lock.release()
    lock.release()
    assert lock.count == 0 and eventually(lambda: counts(masters, name), [None] * 5) == [None] * 5
    with pytest.raises(LockError):
        lock.release()  # one release too many


def test_another_thread_is_refused_until_the_count_reaches_zero(dlm, name):
    lock = dlm.rlock(name, ttl=5)
    assert lock.acquire() and lock.acquire()
    results = []

    def other() -> None:
        results.append(lock.acquire(blocking=False))
        results.append(lock.count)

    t = threading.Thread(target=other)
    t.start()
    joined(t)
    assert results == [False, 0]
    errors = []  # the other thread cannot release the owner's entries
    t = threading.Thread(target=lambda: errors.append(_release(lock)))
    t.start()
    joined(t)
    assert isinstance(errors[0], LockError) and lock.count == 2
    lock.release()
    t = threading.Thread(target=other)
    t.start()
    joined(t)
    assert results[-2:] == [False, 0]  # still entered once
    lock.release()
    results.clear()

    def take() -> None:
        results.append(lock.acquire(blocking=False))
        lock.release()

    t = threading.Thread(target=take)
    t.start()
    joined(t)
    assert results == [True]


def _release(lock):
    try:
        lock.release()
    except LockError as exc:
        return exc
    return AssertionError("released another thread's entry")


def test_another_client_is_refused(dlm, make_client, masters, name):
    other = make_client(masters.urls, retry_count=0)
    with dlm.rlock(name, ttl=5):
        assert not other.rlock(name, ttl=5).acquire(blocking=False)
    assert other.rlock(name, ttl=5).acquire(blocking=False)


def test_with_blocks_nest(dlm, masters, name):
    with dlm.rlock(name, ttl=5) as outer:
        with dlm.rlock(name, ttl=5) as inner:
            assert inner.count == 2 and outer.count == 2
        assert outer.count == 1 and eventually(lambda: counts(masters, name), [b"1"] * 5) == [b"1"] * 5
    assert eventually(lambda: counts(masters, name), [None] * 5) == [None] * 5


def test_last_release_wakes_a_waiting_thread(make_client, masters, name):
    dlm = make_client(masters.urls, retry_delay=2.0, retry_jitter=0.0)
    lock = dlm.rlock(name, ttl=5)
    assert lock.acquire() and lock.acquire()
    join = in_thread(lambda: lock.acquire(timeout=5), lock.release)
    time.sleep(0.3)  # the waiter failed once and listens
    lock.release()
    time.sleep(0.1)
    assert not join.done()  # one entry left: still held
    lock.release()
    ok, waited = join()
    assert ok and waited < 1.0  # woken by the release, not after its 2 s backoff


def test_thread_that_exits_holding_leaves_no_hold_behind(dlm, name):
    """The registry of holds forgets a thread when it exits (no leak, no hold found by a later
    thread), while the lock stays held on the masters until its TTL."""
    import gc
    import weakref

    lock = dlm.rlock(name, ttl=5)
    refs = []

    def hold() -> None:
        assert lock.acquire(blocking=False) and lock.acquire(blocking=False)
        refs.append(weakref.ref(lock._hold()))

    t = threading.Thread(target=hold)
    t.start()
    joined(t)
    for _ in range(3):  # PyPy (no reference counting): the dead thread's locals go at a collection
        gc.collect()
    assert refs[0]() is None  # the dead thread's hold is gone with it
    assert lock.count == 0 and not lock.locked()
    assert not lock.acquire(blocking=False)  # and the masters still refuse anyone else


def test_new_thread_with_a_recycled_id_is_not_the_owner(dlm, name):
    """Thread ids are reused once a thread exits: a new thread with the dead owner's id must be
    refused like any other, not re-enter the dead thread's hold."""
    lock = dlm.rlock(name, ttl=5)
    first = []
    t = threading.Thread(target=lambda: first.append((threading.get_ident(), lock.acquire(blocking=False))))
    t.start()
    joined(t)
    assert first[0][1]
    for _ in range(50):  # the next thread usually gets the same id; try until one does
        seen = []

        def probe() -> None:
            seen.append(threading.get_ident())
            if seen[0] == first[0][0]:
                seen.append(lock.count)
                seen.append(lock.acquire(blocking=False))

        t = threading.Thread(target=probe)
        t.start()
        joined(t)
        if len(seen) > 1:
            assert seen[1:] == [0, False]  # count 0, refused: not taken for the dead owner
            return
    pytest.skip("no new thread was given the exited thread's id")


def test_a_thread_that_exits_holding_is_not_renewed_for_ever(dlm, masters, name):
    """With auto_extend, the watchdog stops renewing a hold whose thread exited holding it (nobody
    can release it any more): it expires within its TTL and on_lost is called."""
    lost = []
    lock = dlm.rlock(name, ttl=0.6, auto_extend=True, on_lost=lost.append)
    t = threading.Thread(target=lambda: lock.acquire(blocking=False) and lock.acquire(blocking=False))
    t.start()
    joined(t)
    del t
    assert eventually(lambda: counts(masters, name).count(b"2") >= 3, True)  # held, entered twice
    assert eventually(lambda: counts(masters, name), [None] * 5, seconds=3.0) == [None] * 5
    assert eventually(lambda: len(lost), 1) == 1
    taker = dlm.rlock(name, ttl=5)
    assert taker.acquire(blocking=False)
    taker.release()


def test_a_live_owner_stays_renewed(dlm, masters, name):
    """The negative side: while its thread lives the hold is renewed past several TTLs."""
    lock = dlm.rlock(name, ttl=0.6, auto_extend=True)
    assert lock.acquire(blocking=False)
    time.sleep(1.5)
    assert lock.locked() and counts(masters, name).count(b"1") >= 3
    lock.release()
