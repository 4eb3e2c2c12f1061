"""Masters that die, stall or restart: the lock stays correct and every call stays bounded."""
from __future__ import annotations

import time

import pytest

from fastredlock import LockNotOwnedError


def test_one_master_killed_still_acquires_with_four(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0)
    fault_masters[0].kill()
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    outcomes = [o.outcome for o in lock.outcomes]
    assert outcomes[0] == "connection error" and outcomes[1:] == ["ok"] * 4
    assert keys_on(fault_masters, name) == 4
    lock.release()
    assert keys_on(fault_masters, name) == 0


def test_master_killed_after_connecting_counts_as_no(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0)
    with dlm.lock(name + ":warm", ttl=1.0):
        pass  # connections are now open to all five
    fault_masters[1].kill()
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    assert lock.outcomes[1].outcome == "connection error"
    lock.release()


def test_three_masters_down_never_acquires_and_leaves_no_key(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=2, retry_delay=0.01, retry_jitter=0.0)
    for m in fault_masters[:3]:
        m.kill()
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire() is False
    outcomes = [o.outcome for o in lock.outcomes]  # of the last attempt: the dead ones may cool down
    assert all(o in ("connection error", "cooling down") for o in outcomes[:3]) and outcomes[3:] == ["ok"] * 2
    assert keys_on(fault_masters, name) == 0  # the two that said OK were released
    assert not lock.locked()


def test_stalled_master_costs_at_most_io_timeout(make_client, fault_masters, name, keys_on):
    io_timeout = 0.05
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=io_timeout)
    with dlm.lock(name + ":warm", ttl=1.0):
        pass
    fault_masters[2].pause()
    try:
        lock = dlm.lock(name, ttl=5.0)
        t0 = time.monotonic()
        assert lock.acquire()
        took = time.monotonic() - t0
        assert took < io_timeout + 0.03, took
        assert lock.outcomes[2].outcome == "timeout"
        t0 = time.monotonic()
        lock.release()
        assert time.monotonic() - t0 < io_timeout + 0.03 + 0.1  # may include a reconnect attempt
    finally:
        fault_masters[2].resume()
    # The stalled master runs the queued SET and the release when it resumes, in the order they were
    # written on their connections; whatever it ends up holding is our token or nothing, and the
    # client has not read either late reply as the answer to a later request.
    time.sleep(0.1)
    assert fault_masters[2].command("GET", name) in (None, lock.token)


def test_stalled_majority_fails_fast_and_cleans_up(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=0.05)
    with dlm.lock(name + ":warm", ttl=1.0):
        pass
    for m in fault_masters[:3]:
        m.pause()
    try:
        lock = dlm.lock(name, ttl=5.0)
        t0 = time.monotonic()
        assert lock.acquire() is False
        # one acquire round and one cleanup round, each bounded by io_timeout (+ reconnect slack)
        assert time.monotonic() - t0 < 2 * 0.05 + 0.2 + 0.1
        assert [o.outcome for o in lock.outcomes][:3] == ["timeout"] * 3
        assert keys_on([m for m in fault_masters][3:], name) == 0
    finally:
        for m in fault_masters[:3]:
            m.resume()


def test_release_after_master_restart_uses_eval_fallback(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0)
    with dlm.lock(name + ":warm", ttl=1.0):
        pass  # EVALSHA scripts are cached on all five now
    lock = dlm.lock(name, ttl=10.0)
    assert lock.acquire()
    for m in fault_masters[:2]:
        m.restart()  # empty: no keys, no script cache
        m.command("SET", name, lock.token, "PX", 10000)  # as if the key survived (persistence)
    assert fault_masters[0].command("SCRIPT", "EXISTS", "0" * 40) == [0]
    lock.release()  # EVALSHA -> NOSCRIPT -> EVAL on the restarted ones, after a reconnect
    assert [o.outcome for o in lock.outcomes] == ["ok"] * 5
    assert keys_on(fault_masters, name) == 0


def test_reconnects_after_master_comes_back(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0)
    fault_masters[4].kill()
    with dlm.lock(name, ttl=1.0) as lock:
        assert lock.outcomes[4].outcome == "connection error"
    fault_masters[4].start()
    while dlm.stats()[4].cooling_down > 0:  # it refused a connection: skipped for a short while
        time.sleep(0.01)
    with dlm.lock(name, ttl=1.0) as lock:
        assert [o.outcome for o in lock.outcomes] == ["ok"] * 5


def test_extend_with_quorum_lost_raises_and_releases(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=10.0)
    assert lock.acquire()
    for m in fault_masters[:3]:
        m.kill()
    with pytest.raises(LockNotOwnedError) as info:
        lock.extend()
    assert [o.outcome for o in info.value.outcomes][:3] == ["connection error"] * 3
    assert keys_on(fault_masters, name) == 0
    assert not lock.locked()


def test_error_reply_counts_as_no(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0)
    fault_masters[0].command("RPUSH", name, "x")  # the key holds a list: WRONGTYPE for our script
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire() is True  # SET NX on a list key just answers nil there
    assert lock.outcomes[0].outcome == "no"
    lock.release()
    assert fault_masters[0].command("TYPE", name) == b"list"
