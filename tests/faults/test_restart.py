"""Masters that restart: reconnection, NOSCRIPT, and what a restart without persistence costs.

The seed scenario (Redlock's known hazard): a master restarts *without persistence* while a lock is
held, comes back at once with no keys, and a second client wins a quorum that includes it. Without
restart-aware voting that second client CAN get the lock — two holders at once. The remedies are a
delayed restart (keep it out for longer than the largest TTL), persistence (``appendfsync always``),
or the client's restart-aware voting, on by default (the same scenario is refused there:
``tests/faults/test_restart_voting.py``).
"""
from __future__ import annotations

import time

import pytest

from fastredlock import LockNotOwnedError
from fastredlock.testing import paused, restart, start_masters

from _checks import bound, gone_within, timed, wait_gone


def outcomes(lock):
    return [o.outcome for o in lock.outcomes]


def test_master_that_comes_back_is_reconnected_and_scripts_reloaded(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0)
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    lock.release()  # connections open, both scripts cached... until the restart below
    lock.acquire()
    fault_masters[2].kill()
    timed(lock.extend, bound(1))
    assert outcomes(lock)[2] == "connection error"
    fault_masters[2].start()  # empty: no key, no script cache
    timed(lock.extend, bound(1))  # reconnects; EVALSHA -> NOSCRIPT -> EVAL, which answers 0 there
    assert outcomes(lock) == ["ok", "ok", "no", "ok", "ok"]
    timed(lock.release, bound(1))
    assert outcomes(lock) == ["ok", "ok", "no", "ok", "ok"]
    with dlm.lock(name, ttl=5.0) as again:
        assert outcomes(again) == ["ok"] * 5  # back in the quorum
    gone_within(fault_masters, name, bound(1))


def test_restart_without_persistence_lets_second_client_in_without_voting(make_client, fault_masters, name, counter):
    """Today's raw Redlock behaviour, stated: the second client CAN get the lock (two holders)."""
    first = make_client(fault_masters.urls, retry_count=0, restart_aware=False).lock(name, ttl=10.0)
    assert first.acquire()
    assert counter.enter() == 1
    for m in fault_masters[:3]:
        restart(m)  # kill -9 and back at once, empty
    second = make_client(fault_masters.urls, retry_count=0, restart_aware=False).lock(name, ttl=10.0)
    assert second.acquire() is True  # the hazard: 3 forgetful masters + nothing else = a quorum
    assert outcomes(second) == ["ok"] * 3 + ["no"] * 2
    assert first.locked() and second.locked()
    assert counter.enter() == 2  # the independent counter sees two holders at once
    counter.leave()
    counter.leave()
    second.release()
    with pytest.raises(LockNotOwnedError):
        first.release()  # it still had only its two surviving masters: below quorum, and said so


def test_restart_with_persistence_keeps_the_lock(make_client, name, counter):
    # wait_for_all: the claim is about writes the masters acknowledged, so the first client must have
    # seen all five OKs before the kills (by default it returns at a quorum, and a master that had
    # not yet written the SET when killed rightly forgets it: next test). io_timeout: an fsync per
    # write is slow on a loaded machine, and a master whose OK came late would not count.
    with start_masters(5, persistent=True) as local:
        first = make_client(local.urls, retry_count=0, restart_aware=False, wait_for_all=True,
                            io_timeout=1.0).lock(name, ttl=10.0)
        assert first.acquire()
        assert outcomes(first) == ["ok"] * 5
        assert counter.enter() == 1
        for m in local[:3]:
            restart(m)  # kill -9: the AOF (fsynced before each OK was sent) brings the key back
        token = first.token.encode() if isinstance(first.token, str) else first.token
        assert [m.command("GET", name) for m in local[:3]] == [token] * 3
        second = make_client(local.urls, retry_count=0, restart_aware=False, io_timeout=1.0).lock(name, ttl=10.0)
        assert second.acquire() is False
        assert outcomes(second) == ["no"] * 5
        counter.leave()
        first.release()
        assert outcomes(first) == ["ok"] * 5  # reconnected; the scripts were reloaded by EVAL
        gone_within(local, name, bound(1))


def test_restart_with_persistence_forgets_only_what_it_had_not_acknowledged(make_client, name):
    """Why the test above once failed (a restarted master answered OK to the second client): the
    first client returned at a quorum while master 0 had not yet handled its SET, and the kill -9
    came first. That master never said OK, so the lock's quorum is intact and the second is refused."""
    with start_masters(5, persistent=True) as local:
        first = make_client(local.urls, retry_count=0, restart_aware=False).lock(name, ttl=10.0)
        with paused(local[0]):  # its SET waits unread in the socket
            assert first.acquire()
            assert outcomes(first)[1:] == ["ok"] * 4
            restart(local[0])  # kill -9 before it ever ran the SET, then back from its AOF
        second = make_client(local.urls, retry_count=0, restart_aware=False).lock(name, ttl=10.0)
        assert second.acquire() is False
        assert outcomes(second) == ["ok"] + ["no"] * 4  # it forgot only the SET it never acknowledged
        first.release()


def test_delayed_restart_keeps_exclusion(make_client, fault_masters, name, counter):
    ttl = 0.5
    first = make_client(fault_masters.urls, retry_count=0, restart_aware=False).lock(name, ttl=ttl)
    assert first.acquire()
    assert counter.enter() == 1
    threads = [restart(m, delay=ttl + 0.2, background=True) for m in fault_masters[:3]]
    second = make_client(fault_masters.urls, retry_count=0, restart_aware=False).lock(name, ttl=ttl)
    assert timed(second.acquire, bound(2), blocking=False) is False  # 3 down, 2 still hold the first's key
    time.sleep(max(0.0, first.validity))
    counter.leave()  # the first holder stops acting when its validity ends
    for t in threads:
        t.join(10)
    assert second.acquire(timeout=2.0)  # only after the first's TTL, with all five back
    assert counter.enter() == 1
    counter.leave()
    second.release()
    wait_gone(fault_masters, name, 0.0)


# --- back after a kill: reconnected, scripts reloaded by EVAL ---------------------------------------------
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
