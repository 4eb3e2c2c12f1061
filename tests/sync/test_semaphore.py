"""``dlm.semaphore``: at most ``limit`` permits, each its own Redlock key; wake on release."""
from __future__ import annotations

import threading
import time

import pytest

from _bounded import joined
from _family import eventually, family_keys, in_thread, no_key_without_ttl, tagged


def test_limit_permits_then_refused_then_freed(dlm, masters, name):
    permits = [dlm.semaphore(name, 3, ttl=5) for _ in range(4)]
    assert all(p.acquire(blocking=False) for p in permits[:3])
    assert sorted(p.slot for p in permits[:3]) == [0, 1, 2]
    assert not permits[3].acquire(blocking=False)
    for p in permits[:3]:  # each held slot is a plain key holding its own token, with a TTL
        slot = tagged(name, ":permit:%d" % p.slot)
        assert eventually(lambda: [m.command("GET", slot) for m in masters], [p.token] * 5) == [p.token] * 5
    assert len({p.token for p in permits[:3]}) == 3
    assert no_key_without_ttl(masters, name)
    permits[1].release()
    assert permits[3].acquire(blocking=False) and permits[3].slot == permits[1].slot
    for p in (permits[0], permits[2], permits[3]):
        p.release()
    assert eventually(lambda: family_keys(masters, name), 0) == 0


def test_a_refused_probe_tries_every_slot_keeps_one_and_releases_the_others(dlm, masters, name):
    first = dlm.semaphore(name, 3, ttl=5)
    assert first.acquire(blocking=False)
    assert eventually(lambda: family_keys(masters, name), 5) == 5  # alone: one slot probed and taken
    second = dlm.semaphore(name, 3, ttl=5)
    second.slot = first.slot  # its probe is refused: the same attempt sets every slot
    assert second.acquire(blocking=False) and second.slot != first.slot
    # it won both free slots; the leftover's release is written behind the round, not awaited
    assert eventually(lambda: family_keys(masters, name), 10) == 10
    first.release()
    second.release()


def test_arguments_are_checked(one_dlm, name):
    with pytest.raises(ValueError):
        one_dlm.semaphore(name, 0)
    with pytest.raises(TypeError):
        one_dlm.semaphore(name, "2")


def test_never_above_limit_with_threads(make_client, masters, name):
    dlm = make_client(masters.urls, retry_delay=0.02, retry_jitter=0.02)
    limit, inside, most, taken = 2, [0], [0], []
    guard = threading.Lock()
    end = time.monotonic() + 1.5

    def worker() -> None:
        permit = dlm.semaphore(name, limit, ttl=5)
        count = 0
        while time.monotonic() < end:
            if not permit.acquire(timeout=1):
                continue
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.005)
            with guard:
                inside[0] -= 1
            permit.release()
            count += 1
        taken.append(count)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        joined(t)
    assert most[0] == limit  # reached, never passed
    assert sum(taken) > 10
    assert eventually(lambda: family_keys(masters, name), 0) == 0


def test_release_wakes_a_waiter(make_client, masters, name):
    dlm = make_client(masters.urls, retry_delay=2.0, retry_jitter=0.0)
    holder = dlm.semaphore(name, 1, ttl=5)
    assert holder.acquire()
    permit = dlm.semaphore(name, 1, ttl=5)
    join = in_thread(lambda: permit.acquire(timeout=5), permit.release)
    time.sleep(0.3)
    holder.release()
    ok, waited = join()
    assert ok and waited < 1.0
