"""``release(wait=False)``: written to every master, not waited for, and its answers still count.

Real masters, both cores. What a release not waited for must still do: free the lock (a quorum of
masters deletes the key), let the same client take the name again at once (the release is written
ahead of the next SET on each connection), wake a waiter, report a lock it found not held (through
``on_lost``, the ``lost`` event and ``stats()``, since nothing is raised to the caller), and be
delivered by ``close()``. The negative controls: a release that finds the key in place reports
nothing; a waited release raises where the not-waited one reports.
"""
from __future__ import annotations

import threading
import time

import pytest

from fastredlock import LockLostError, LockNotOwnedError
from fastredlock.protocol.outcomes import PENDING
from fastredlock.testing import LocalMaster

from _contender import contend_cycles, run_contenders


def _wait_for(predicate, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while not predicate() and time.monotonic() < end:
        time.sleep(0.002)
    return predicate()


def _released_events(dlm):
    """Collect the client's events; an Event set at each ``released`` one."""
    events: list = []
    released = threading.Event()

    def hook(event):
        events.append(event)
        if event.kind == "released":
            released.set()

    dlm.on_event = hook
    return events, released


def test_the_call_returns_before_any_answer_and_the_key_goes(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls)
    lock = dlm.lock(name, ttl=10)
    assert lock.acquire(blocking=False)
    events, released = _released_events(dlm)
    lock.release(wait=False)
    # Nothing has read an answer yet: the round's outcomes are all still pending.
    assert set(lock._last.outcomes) == {PENDING}
    assert not lock.locked() and lock.token is None
    assert released.wait(5), "the answers were never reported"
    assert [e.ok for e in events if e.kind == "released"] == [True]
    assert _wait_for(lambda: keys_on(masters, name.encode()) == 0)
    assert all(s.releases_not_held == 0 for s in dlm.stats())


def test_the_same_client_takes_the_name_again_at_once(make_client, masters, name, keys_on):
    """200 cycles on one handle and 200 on fresh handles, no retry allowed: each acquisition is
    written behind the release before it, so it never finds its own key still there."""
    dlm = make_client(masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=10)
    for _ in range(200):
        assert lock.acquire(blocking=False)
        lock.release(wait=False)
    for _ in range(200):
        fresh = dlm.lock(name, ttl=10)
        assert fresh.acquire(blocking=False)
        fresh.release(wait=False)
    dlm.close()
    assert keys_on(masters, name.encode()) == 0


@pytest.mark.parametrize("how", ["deleted", "taken"])
def test_a_release_that_finds_the_lock_gone_reports_it(make_client, masters, name, how):
    """The key expired (deleted here) or another holder has it on 3 of 5 masters: release(wait=False)
    returns quietly, then on_lost runs, the events say released (not confirmed) and lost, and
    stats() counts the three masters' "not held". Another holder's key is left alone."""
    dlm = make_client(masters.urls)
    lost = threading.Event()
    lock = dlm.lock(name, ttl=10, on_lost=lambda handle: lost.set())
    assert lock.acquire(blocking=False)
    events, _ = _released_events(dlm)
    key = name.encode()
    for m in masters[:3]:
        if how == "deleted":
            m.command("DEL", key)
        else:
            m.command("SET", key, b"someone-else", "PX", 10000)
    lock.release(wait=False)  # nothing raised here: the answers are not in
    assert lost.wait(5), "on_lost never ran"
    kinds = [(e.kind, e.ok) for e in events]
    assert ("released", False) in kinds and ("lost", False) in kinds
    assert [s.releases_not_held for s in dlm.stats()] == [1, 1, 1, 0, 0]
    if how == "taken":
        assert [m.command("GET", key) for m in masters[:3]] == [b"someone-else"] * 3
    # The negative control: waited for, the same release raises instead.
    if how == "taken":
        assert lock.acquire(blocking=False) is False  # (the other holder's keys are still there)
        for m in masters[:3]:
            m.command("DEL", key)
    assert lock.acquire(blocking=False)
    for m in masters[:3]:
        m.command("DEL", key)
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_a_lock_known_lost_raises_at_once_and_is_still_released(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls)
    lock = dlm.lock(name, ttl=10)
    assert lock.acquire(blocking=False)
    lock._valid_until = 0.0  # its validity ran out while held
    with pytest.raises(LockLostError):
        lock.release(wait=False)
    assert _wait_for(lambda: keys_on(masters, name.encode()) == 0)


def test_the_client_option_makes_with_blocks_and_release_not_wait(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls, wait_release=False)
    assert dlm.wait_release is False
    with dlm.lock(name, ttl=10) as lock:
        pass
    assert set(lock._last.outcomes) == {PENDING}
    assert lock.acquire(blocking=False)
    lock.release()
    assert set(lock._last.outcomes) == {PENDING}
    assert lock.acquire(blocking=False)
    lock.release(wait=True)  # the call decides
    assert PENDING not in lock._last.outcomes or lock._last.successes >= dlm.quorum
    dlm.wait_release = True
    with dlm.lock(name, ttl=10) as lock:
        pass
    assert lock._last.successes >= dlm.quorum
    with pytest.raises(TypeError):
        dlm.wait_release = 1
    with pytest.raises(TypeError):
        make_client(masters.urls, wait_release="no")
    dlm.close()
    assert keys_on(masters, name.encode()) == 0


def test_close_right_after_delivers_and_reports(make_client, masters, name, keys_on):
    """50 locks released without waiting, then the client closed at once: every release reached
    the masters (no key left) and every one was reported before close() returned."""
    dlm = make_client(masters.urls)
    events, _ = _released_events(dlm)
    names = [f"{name}:{j}" for j in range(50)]
    for n in names:
        lock = dlm.lock(n, ttl=30)
        assert lock.acquire(blocking=False)
        lock.release(wait=False)
    dlm.close()
    assert sum(1 for e in events if e.kind == "released" and e.ok) == 50
    assert sum(keys_on(masters, n.encode()) for n in names) == 0


def test_release_many_without_waiting(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls)
    events, _ = _released_events(dlm)
    locks = dlm.acquire_many([f"{name}:{j}" for j in range(8)], ttl=10)
    assert all(locks)
    assert dlm.release_many(locks, wait=False) is None
    assert all(lock.token is None for lock in locks)
    assert _wait_for(lambda: sum(1 for e in events if e.kind == "released") == 8)
    assert all(e.ok for e in events)
    assert sum(keys_on(masters, f"{name}:{j}".encode()) for j in range(8)) == 0


def test_a_waiter_wakes_on_a_release_not_waited_for(make_client, masters, name):
    holder = make_client(masters.urls).lock(name, ttl=10)
    assert holder.acquire(blocking=False)
    waiter = make_client(masters.urls, retry_delay=2.0, retry_jitter=0.0).lock(name, ttl=10)
    out: list = []
    thread = threading.Thread(target=lambda: out.extend([waiter.acquire(timeout=10), time.monotonic()]))
    thread.start()
    subscribed = lambda: sum(m.command("PUBSUB", "NUMSUB", b"fastredlock-wake:" + name.encode())[1]  # noqa: E731
                             for m in masters) == len(masters)
    assert _wait_for(subscribed)
    released = time.monotonic()
    holder.release(wait=False)
    thread.join(10)
    assert out and out[0] is True
    assert out[1] - released < 1.0, "the waiter slept its backoff: the release woke nobody"
    waiter.release()


def test_a_loop_of_cycles_barely_wakes_the_reaper_and_its_last_release_is_reported(make_client, masters, name):
    """A loop of lock cycles releasing without waiting reads each release's answers in its next
    round: the reaper looks less and less often (every 2 ms before: about 300 looks in this loop's
    0.6 s; now about 30-40). The loop's last release, found not held on 3 masters, is still
    reported once the client goes idle (on_lost), within a bound."""
    dlm = make_client(masters.urls, retry_count=0)
    lost = threading.Event()
    lock = dlm.lock(name, ttl=10, on_lost=lambda handle: lost.set())
    unwaited = dlm.executor.unwaited
    assert lock.acquire(blocking=False)
    lock.release(wait=False)
    assert _wait_for(lambda: not len(unwaited)), "the first release was never reported"
    start, end = unwaited.looks, time.monotonic() + 0.6
    cycles = 0
    while time.monotonic() < end:
        assert lock.acquire(blocking=False)
        lock.release(wait=False)
        cycles += 1
    looks = unwaited.looks - start
    assert looks < 100, f"the reaper looked {looks} times in 0.6 s ({cycles} cycles)"
    assert lock.acquire(blocking=False)
    for m in masters[:3]:
        m.command("DEL", name.encode())
    idle = time.monotonic()
    lock.release(wait=False)
    assert lost.wait(5), "on_lost never ran"
    assert time.monotonic() - idle < 1.0
    assert [s.releases_not_held for s in dlm.stats()] == [1, 1, 1, 0, 0]


@pytest.fixture
def counter():
    """A master the lock clients never use: the holders' INCR/DECR counter."""
    master = LocalMaster().start()
    yield master
    master.stop()


def test_cycles_of_one_name_across_processes_never_overlap(core, masters, name, counter):
    """1,000 cycles of one name (4 processes x 250) releasing without waiting, each hold checked by
    an independent counter: never two holders; no key left."""
    reports = run_contenders(contend_cycles, 4, (masters.urls, core, name, counter.port, 250, False))
    assert sum(r[0] for r in reports) == 1000
    assert sum(r[1] for r in reports) == 0, f"two holders at once: {reports}"
    assert sum(m.command("EXISTS", name) for m in masters) == 0
    assert counter.command("GET", "holders") == b"0"


def test_the_counter_sees_overlaps_without_the_lock(core, masters, name, counter):
    """The negative control of the test above: each process locks a name of its own."""
    reports = run_contenders(contend_cycles, 4, (masters.urls, core, name, counter.port, 250, True))
    assert sum(r[1] for r in reports) > 0
