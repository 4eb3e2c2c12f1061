"""Restart-aware voting: the seed's delayed restart, enforced by the client (both cores).

The scenario of the Redlock analysis: A holds a lock on masters {0, 1} of 3; master 1 restarts
without persistence and forgets it; master 2 was down and comes back empty. B asks all three: 0 says
no, 1 and 2 say OK — a quorum of 2, while A still holds the lock. With restart-aware voting, 1 and 2
have been up for less than the restart grace, so their OKs do not count.
"""
from __future__ import annotations

import time

import pytest

from fastredlock.testing import LocalMaster, start_masters

GRACE = 2.0  # >= the TTL every client below uses, as the docs require


@pytest.fixture
def three():
    with start_masters(3) as local:
        time.sleep(GRACE + 1.0)  # old enough to be trusted
        yield local


def _seed_scenario(make_client, three, name, restart_aware):
    a = make_client(three.urls, retry_count=0, restart_aware=True, restart_grace=GRACE).lock(name, ttl=GRACE)
    three[2].kill()
    assert a.acquire(), a.outcomes
    three[1].restart()  # no persistence: forgets A's key
    three[2].start()
    b = make_client(three.urls, retry_count=0, restart_aware=restart_aware, restart_grace=GRACE).lock(name, ttl=GRACE)
    return a, b


@pytest.mark.slow
def test_restarted_masters_do_not_count_with_restart_aware_voting(make_client, three, name, keys_on):
    a, b = _seed_scenario(make_client, three, name, restart_aware=True)
    assert b.acquire(blocking=False) is False
    assert [o.outcome for o in b.outcomes] == ["no", "restarted recently", "restarted recently"]
    assert "restart grace" in b.outcomes[1].detail
    assert a.locked()
    assert keys_on(three, name) == 1  # B's untrusted OKs were released; only A's key on master 0
    # once the grace (>= A's TTL) has passed, A's lock has expired anyway and B may have it
    time.sleep(GRACE)
    assert b.acquire(blocking=False)
    b.release()


@pytest.mark.slow
def test_without_restart_aware_voting_two_clients_hold_the_lock(make_client, three, name):
    a, b = _seed_scenario(make_client, three, name, restart_aware=False)
    assert b.acquire(blocking=False) is True  # the failure the seed describes
    assert a.locked() and b.locked()
    b.release()


def test_grace_defaults_to_largest_ttl_used(make_client, name):
    with start_masters(3) as local:
        dlm = make_client(local.urls, retry_count=0, restart_aware=True)
        lock = dlm.lock(name, ttl=30.0)
        assert not lock.acquire(blocking=False)  # masters up < 30 s
        assert all(o.outcome == "restarted recently" for o in lock.outcomes)
        assert all(m.command("EXISTS", name) == 0 for m in local)


def test_info_denied_counts_as_error_with_hint(make_client, name):
    with start_masters(3) as local:
        for m in local:
            m.command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info")
        urls = [f"redis://noinfo:pw@127.0.0.1:{m.port}" for m in local]
        lock = make_client(urls, retry_count=0, restart_aware=True, restart_grace=0).lock(name, ttl=1.0)
        assert not lock.acquire(blocking=False)
        assert "restart_aware=False" in lock.outcomes[0].detail
        ok = make_client(urls, retry_count=0, restart_aware=False).lock(name, ttl=1.0)
        assert ok.acquire(blocking=False)
        ok.release()


def _start_just_before_a_second(master, attempts: int = 5) -> float:
    """Start ``master`` late in a wall-clock second and return when (monotonic, before the spawn),
    once it reports ``uptime_in_seconds:1`` while up for less than half a second: the rounding
    of the server's uptime (whole wall-clock seconds) that a client must not take at its word."""
    for _ in range(attempts):
        while not 0.80 <= time.time() % 1.0 < 0.85:
            time.sleep(0.005)
        spawned = time.monotonic()
        master.start()
        while time.time() % 1.0 >= 0.5 and time.monotonic() - spawned < 1.0:
            time.sleep(0.005)  # past the next whole second
        info = master.command("INFO", "server")
        if b"\r\nuptime_in_seconds:1\r\n" in info and time.monotonic() - spawned < 0.5:
            return spawned
        master.stop()
    pytest.skip("could not start a master late in a second (a loaded machine)")


def test_an_uptime_of_one_second_may_be_a_fraction_of_one(make_client, name):
    # Redis's uptime_in_seconds is a difference of whole wall-clock seconds: a master started at
    # x.82 says 1 at (x+1).1 after 0.3 s. Taken at its word, the client would trust it 0.7 s early
    # with a grace of 1 s: the double holder of a majority restarted empty (tests/faults/soak.py).
    master = LocalMaster()
    try:
        spawned = _start_just_before_a_second(master)
        lock = make_client([master.url], retry_count=0, restart_aware=True, restart_grace=1.0).lock(name, ttl=1.0)
        assert not lock.acquire(blocking=False), "trusted a master up for %.2fs" % (time.monotonic() - spawned)
        assert lock.outcomes[0].outcome == "restarted recently"
        assert master.command("EXISTS", name) == 0  # the untrusted OK was released
        time.sleep(max(0.0, spawned + 1.6 - time.monotonic()))  # its grace ends, counted from when it was seen
        assert lock.acquire(blocking=False), lock.outcomes
        lock.release()
    finally:
        master.stop()
