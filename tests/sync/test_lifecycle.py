"""Retries, watchdog renewal, the lost-lock signal and fencing tokens (issue 6), on both cores."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from fastredlock import LockLostError, LockNotOwnedError
from fastredlock.testing import LocalMaster

from _bounded import BOUND, read_line

HOLDER = os.path.join(os.path.dirname(__file__), "_holder.py")


def _spawn(core, name, ttl, mode, urls):
    return subprocess.Popen(
        [sys.executable, HOLDER, core, name, str(ttl), mode, *urls],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


# --- retries ---------------------------------------------------------------------------------
def test_backoff_callable_is_used_and_attempts_are_cleaned_before_sleeping(
    make_client, fault_masters, name, keys_on
):
    fault_masters[0].pause()  # a master that times out may hold our SET: cleanup must cover it
    holder = make_client(fault_masters.urls[2:]).lock(name, ttl=10.0)  # holds 3 of 5 ... via 3 masters
    assert holder.acquire()
    seen = []

    def backoff(attempt):
        # between attempts, no key but the holder's may exist on any live master
        seen.append((attempt, [m.command("GET", name) for m in fault_masters[1:]]))
        return 0.01

    try:
        waiter = make_client(fault_masters.urls, retry_count=3, backoff=backoff, io_timeout=0.03).lock(name, ttl=5.0)
        assert waiter.acquire() is False
    finally:
        fault_masters[0].resume()
    assert [a for a, _ in seen] == [1, 2, 3]
    for _, values in seen:
        assert values[0] is None  # master 1 said OK to the waiter each time and was released
        assert values[1:] == [holder.token] * 3
    holder.release()


def test_bad_backoff_rejected(make_one_client, masters):
    with pytest.raises(TypeError, match="backoff"):
        make_one_client(masters.urls, backoff=0.5)


# --- watchdog ----------------------------------------------------------------------------------
def test_auto_extend_keeps_lock_alive_across_five_ttls(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=0.6, auto_extend=True)  # renewed every 0.2 s
    assert lock.acquire()
    rival = make_client(masters.urls, retry_count=0).lock(name, ttl=1.0)
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        assert lock.locked() and not lock.lost
        assert not rival.acquire(blocking=False)
        time.sleep(0.1)
    assert keys_on(masters, name) == 5
    lock.release()
    assert keys_on(masters, name) == 0
    assert rival.acquire(blocking=False)
    rival.release()


def test_one_watchdog_round_renews_many_locks(make_client, masters, name):
    dlm = make_client(masters.urls)
    locks = [dlm.lock(f"{name}:{i}", ttl=0.3, auto_extend=True) for i in range(20)]
    for lock in locks:
        assert lock.acquire()
    time.sleep(1.0)
    assert all(lock.locked() for lock in locks)
    threads = [t for t in threading.enumerate() if t.name == "fastredlock-watchdog"]
    assert len(threads) >= 1 and len([t for t in threads if t.is_alive()]) <= 2  # not one per lock
    for lock in locks:
        lock.release()


def test_max_hold_stops_renewal(make_client, masters, name, keys_on):
    lost = threading.Event()
    dlm = make_client(masters.urls)
    lock = dlm.lock(name, ttl=0.3, auto_extend=True, max_hold=0.4, on_lost=lambda lk: lost.set())
    assert lock.acquire()
    assert lost.wait(2.0), "the lock should expire once renewal stops after max_hold"
    assert lock.lost
    assert keys_on(masters, name) == 0


def test_killed_renewing_client_lets_another_take_it_after_ttl(core, make_client, masters, name):
    proc = _spawn(core, name, 0.5, "renew", masters.urls)
    try:
        assert read_line(proc).strip() == "held"
        rival = make_client(masters.urls, retry_count=0).lock(name, ttl=1.0)
        time.sleep(1.0)  # two TTLs: it is only still held because it is renewed
        assert not rival.acquire(blocking=False)
        proc.kill()
        proc.wait(timeout=BOUND)
        t0 = time.monotonic()
        assert rival.acquire(timeout=2.0)
        # at most one TTL after the kill, plus slack for a loaded machine (process reaping, rounds)
        assert time.monotonic() - t0 <= 0.5 + 0.6
        rival.release()
    finally:
        proc.kill()
        proc.wait(timeout=BOUND)


def test_renewal_that_loses_quorum_fires_on_lost(make_client, fault_masters, name, keys_on):
    lost = []
    dlm = make_client(fault_masters.urls, retry_delay=0.05)
    lock = dlm.lock(name, ttl=0.6, auto_extend=True, on_lost=lost.append)
    assert lock.acquire()
    for m in fault_masters[:3]:
        m.kill()
    deadline = time.monotonic() + 2.0
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lost == [lock]
    assert lock.lost and not lock.locked()
    with pytest.raises(LockLostError):
        lock.check()
    assert keys_on(fault_masters, name) == 0  # released on the two that still answer
    with pytest.raises(LockLostError):
        lock.release()


def test_renewal_finding_key_gone_fires_on_lost_at_once(make_client, masters, name):
    lost = threading.Event()
    dlm = make_client(masters.urls)
    lock = dlm.lock(name, ttl=0.6, auto_extend=True, on_lost=lambda lk: lost.set())
    assert lock.acquire()
    for m in masters:
        m.command("DEL", name)  # an operator, or an expiry we could not see
    assert lost.wait(0.6)
    with pytest.raises(LockLostError):
        lock.check()


def test_with_block_raises_lock_lost_when_lost_during_body(make_client, masters, name):
    dlm = make_client(masters.urls)
    with pytest.raises(LockLostError):
        with dlm.lock(name, ttl=0.6, auto_extend=True) as lock:
            for m in masters:
                m.command("DEL", name)
            time.sleep(0.5)
            assert lock.lost


def test_on_lost_fires_when_validity_runs_out_without_renewal(make_client, masters, name):
    lost = threading.Event()
    lock = make_client(masters.urls).lock(name, ttl=0.2, on_lost=lambda lk: lost.set())
    assert lock.acquire()
    assert lost.wait(1.0)
    assert lock.lost


# --- fencing -----------------------------------------------------------------------------------
def test_fence_increases_across_200_holders_with_masters_failing(make_client, fault_masters, name):
    rng = random.Random(1234)
    # a short connect_timeout: a paused master's listen backlog fills with our reconnects, each then
    # waits it out. A release may miss its quorum on this busy machine; the short TTL bounds that.
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=0.05, connect_timeout=0.02)
    previous = 0
    acquired = 0
    paused = []
    try:
        for i in range(200):
            if i % 10 == 0:
                for m in paused:
                    m.resume()
                paused = rng.sample(list(fault_masters), rng.randint(0, 2))  # a minority fails
                for m in paused:
                    m.pause()
            lock = dlm.lock(name, ttl=1.0, fencing=True)
            if not lock.acquire(blocking=False):
                continue
            acquired += 1
            assert lock.fence > previous, (i, lock.fence, previous)
            previous = lock.fence
            try:
                lock.release()
            except LockNotOwnedError:
                time.sleep(1.0)  # it expires by TTL; fences must still increase afterwards
    finally:
        for m in paused:
            m.resume()
    assert acquired >= 150
    # counters do not leak forever: they carry the retention TTL
    assert all(m.command("PTTL", "{" + name + "}:fastredlock-fence") > 0 for m in fault_masters)


def test_fence_key_shares_hash_tag():
    from fastredlock.sync.lock import fence_key

    assert fence_key(b"orders:42") == b"{orders:42}:fastredlock-fence"
    assert fence_key(b"{user1}:orders") == b"{user1}:orders:fastredlock-fence"
    assert fence_key(b"odd{}key") == b"{odd{}key}:fastredlock-fence"


def test_paused_holder_gets_smaller_fence_and_resource_rejects_it(core, make_client, masters, name):
    redis = pytest.importorskip("redis")
    from fastredlock.fencing import fenced_set

    resource = LocalMaster().start()
    try:
        proc = _spawn(core, name, 0.5, "fenced-write", [resource.url, *masters.urls])
        try:
            first = int(read_line(proc).split()[1])
            os.kill(proc.pid, signal.SIGSTOP)  # the GC pause of the seed
            time.sleep(0.7)  # past its TTL
            lock = make_client(masters.urls).lock(name, ttl=5.0, fencing=True)
            assert lock.acquire(timeout=2.0)
            assert lock.fence > first
            client = redis.Redis(port=resource.port)
            assert fenced_set(client, "resource", "fresh", lock.fence) is True
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert read_line(proc).split() == ["accepted", "False", "locked", "False"]
            assert client.get("resource") == b"fresh"
            lock.release()
        finally:
            proc.kill()
            proc.wait(timeout=BOUND)
    finally:
        resource.stop()


def test_fenced_lock_refused_when_held(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls, retry_count=0)
    a = dlm.lock(name, ttl=5.0, fencing=True)
    assert a.acquire()
    b = dlm.lock(name, ttl=5.0, fencing=True)
    assert not b.acquire(blocking=False) and b.fence is None
    a.release()
    assert keys_on(masters, name) == 0
