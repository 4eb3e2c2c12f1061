"""Sentinel-managed masters on both cores: real ``redis-server --sentinel`` processes.

A module's group (a master, its replica, three sentinels) serves the tests that do not fail it
over; the failover tests start groups of their own (the sentinels need a few seconds to find each
other first) and are marked ``slow``. Each failure (unknown service, every sentinel down, a server
that is not a master) must give the master the ``sentinel error`` outcome within the timeouts
while the quorum of the others decides.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from fastredlock import LockError
from fastredlock.testing import blackhole_address, find_servers, server_version, start_sentinels

from _checks import timed

TTL = 5.0
CONNECT = 0.5  # the sentinels and the master are asked within it (loopback: far less)


def outcomes(lock):
    return [o.outcome for o in lock.outcomes]


@pytest.fixture(scope="module")
def group():
    """One service shared by the module's tests, which must not fail it over."""
    with start_sentinels("shared", failover_ready=False) as g:
        yield g


def lock_cycle(dlm, name, expect):
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire(), lock.outcomes
    assert outcomes(lock) == expect
    lock.extend()
    lock.release()
    assert outcomes(lock) == expect
    return lock


# --- it works -------------------------------------------------------------------------------------
def test_lock_extend_release_through_sentinels(make_client, group, name):
    dlm = make_client([group.url], connect_timeout=CONNECT)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    assert outcomes(lock) == ["ok"] and lock.outcomes[0].master == "sentinel:shared"
    assert group.master.command("EXISTS", name) == 1  # on the master the sentinels named
    assert group.replicas[0].command("ROLE")[0] == b"slave"
    lock.extend()
    assert 3000 < group.master.command("PTTL", name) <= TTL * 1000
    lock.release()
    assert group.master.command("EXISTS", name) == 0  # (the replica follows asynchronously)
    for _ in range(20):  # the connection stays up: the sentinels are asked once
        lock_cycle(dlm, name, ["ok"])
    assert [(s.connect_errors, s.connection_errors, s.error_replies) for s in dlm.stats()] == [(0, 0, 0)]


def test_mixed_with_plain_masters(make_client, group, masters, name, keys_on):
    dlm = make_client([group.url] + masters.urls[:2], connect_timeout=CONNECT)
    lock_cycle(dlm, name, ["ok"] * 3)
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    assert group.master.command("EXISTS", name) == 1 and keys_on(masters[:2], name) == 2
    lock.release()


def test_dict_url_and_redis_sentinel_forms(make_client, group, name):
    from redis.sentinel import Sentinel

    sentinel = Sentinel(group.addresses, socket_timeout=1.0)
    forms = [
        {"sentinels": group.addresses, "service": "shared", "db": 1},
        group.url + "/2",
        (sentinel, "shared"),
        sentinel.master_for("shared", db=4),
    ]
    # four dbs of one server: accepted only with same_server_ok (no fault tolerance, see parse_masters)
    dlm = make_client(forms, connect_timeout=CONNECT, same_server_ok=True)
    assert [o.master for o in lock_cycle(dlm, name, ["ok"] * 4).outcomes] == [
        "sentinel:shared/1", "sentinel:shared/2", "sentinel:shared", "sentinel:shared/4"]


def test_the_same_service_twice_is_refused(one_core, group):
    import fastredlock

    with pytest.raises(ValueError, match="same server and db"):
        fastredlock.Redlock([group.url, {"sentinels": group.addresses[1:], "service": "shared"}])


# --- what fails -------------------------------------------------------------------------------------
def test_unknown_service_is_a_sentinel_error(make_client, group, masters, name):
    url = group.url.rsplit("/", 1)[0] + "/nosuchservice"
    dlm = make_client([url] + masters.urls[:2], connect_timeout=CONNECT)
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, CONNECT + 0.5)  # the two plain masters are a quorum of three
    first = lock.outcomes[0]
    assert first.outcome == "sentinel error" and "unknown service 'nosuchservice'" in first.detail
    assert dlm.stats()[0].connect_errors == 1
    lock.release()
    alone = make_client([url], connect_timeout=CONNECT, retry_count=1)
    with pytest.raises(LockError) as info:
        with alone.lock(name, ttl=TTL):
            pass
    assert [o.outcome for o in info.value.outcomes] == ["sentinel error"]


def test_every_sentinel_down_is_a_sentinel_error_within_connect_timeout(make_client, masters, dead_port, name):
    with blackhole_address() as (host, port):  # a sentinel whose connect never completes
        dlm = make_client([{"sentinels": [("127.0.0.1", dead_port), (host, port)], "service": "x"}]
                          + masters.urls[:2], connect_timeout=CONNECT, cooldown=0)
        lock = dlm.lock(name, ttl=TTL)
        assert timed(lock.acquire, CONNECT + 0.05 + 0.3)  # connect_timeout + io_timeout + slack
        first = lock.outcomes[0]
        assert first.outcome == "sentinel error"
        assert f"127.0.0.1:{dead_port}: Connection refused" in first.detail and "timed out" in first.detail
        lock.release()


def test_a_server_that_is_not_a_master_is_refused_and_readonly_asks_again(make_client, name):
    with start_sentinels("demoted", failover_ready=False) as g:
        dlm = make_client([g.url], connect_timeout=CONNECT, cooldown=0)
        lock_cycle(dlm, name, ["ok"])
        master, replica = g.master, g.replicas[0]
        # Demote the master by hand, behind the sentinels' back: it now answers writes -READONLY.
        assert master.command("REPLICAOF", replica.host, replica.port) == b"OK"
        lock = dlm.lock(name, ttl=TTL)
        assert not lock.acquire(blocking=False)
        assert outcomes(lock) == ["error reply"] and lock.outcomes[0].detail.startswith("READONLY")
        # The connection was closed: the next connect asks the sentinels, which still name the
        # old address, and the role check refuses it.
        assert not lock.acquire(blocking=False)
        assert outcomes(lock) == ["sentinel error"]
        assert "is not a master (role:slave)" in lock.outcomes[0].detail
        assert master.command("EXISTS", name) == 0 and replica.command("EXISTS", name) == 0


# --- failovers --------------------------------------------------------------------------------------
#: The slowest failover tests (a group of their own each, a master killed) run on request:
#: FASTREDLOCK_FAILOVER_TESTS=1. The forced failovers share one group and always run.
failover_opt_in = pytest.mark.skipif(not os.environ.get("FASTREDLOCK_FAILOVER_TESTS"),
                                     reason="a killed master's failover: FASTREDLOCK_FAILOVER_TESTS=1 runs it")
GRACE = 2.0


@pytest.fixture(scope="module")
def failover_group():
    """A service with two replicas, failed over once by each core's run of the forced-failover test."""
    with start_sentinels("forced", replicas=2) as g:
        yield g


def wait_acquired(dlm, name, limit):
    """Try until the lock is acquired (returns it and the outcomes seen before) or ``limit`` passed."""
    seen = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        lock = dlm.lock(name, ttl=TTL)
        if lock.acquire(blocking=False):
            return lock, seen
        seen.append(outcomes(lock)[0])
        time.sleep(0.1)
    raise AssertionError(f"not acquired within {limit}s: {seen[-5:]}")


def _uptime(server):
    return int(server.command("INFO", "server").split(b"uptime_in_seconds:")[1].split(b"\r\n")[0])


def _old_enough(servers, grace):
    """Wait until every server has been up for longer than ``grace``: their uptime alone would not
    make restart-aware voting distrust them."""
    wait = max(grace + 1 - _uptime(s) for s in servers)
    if wait > 0:
        time.sleep(wait)


def test_forced_failover_a_client_new_to_the_service_waits_restart_grace(make_client, failover_group, name):
    g = failover_group
    _old_enough(g.replicas, GRACE)
    new = g.failover(demoted=False)
    promoted_at = time.monotonic()
    # the control: without restart-aware voting the promoted replica votes at once
    blind = make_client([g.url], connect_timeout=CONNECT, restart_aware=False)
    lock_cycle(blind, name + ":blind", ["ok"])
    # a client that connects for the first time after the failover: the sentinels say when
    dlm = make_client([g.url], connect_timeout=CONNECT, restart_aware=True, restart_grace=GRACE)
    lock = dlm.lock(name, ttl=TTL)
    assert not lock.acquire(blocking=False)
    assert outcomes(lock) == ["restarted recently"]
    assert "less than the restart grace" in lock.outcomes[0].detail
    lock, seen = wait_acquired(dlm, name, GRACE + 5.0)
    assert time.monotonic() - promoted_at > GRACE - 0.5 and set(seen) == {"restarted recently"}
    assert new.command("GET", name) == lock.token  # on the promoted replica
    lock.release()


@pytest.mark.slow
@failover_opt_in
def test_master_killed_then_the_promoted_replica_votes_after_restart_grace(make_client, name):
    with start_sentinels("killed") as g:
        dlm = make_client([g.url], connect_timeout=CONNECT, restart_aware=True, restart_grace=GRACE, cooldown=0)
        _old_enough(g.replicas, GRACE)
        lock_cycle(dlm, name, ["ok"])  # connected to the first master
        new = g.kill_master()
        promoted_at = time.monotonic()
        lock = dlm.lock(name, ttl=TTL)
        assert not lock.acquire(blocking=False)
        assert outcomes(lock) == ["restarted recently"], lock.outcomes  # asked again, promoted: no vote
        assert new.command("EXISTS", name) == 0  # its untrusted SET was released
        lock, seen = wait_acquired(dlm, name, GRACE + 5.0)
        assert time.monotonic() - promoted_at > GRACE - 1.0 and set(seen) <= {"restarted recently"}
        assert new.command("GET", name) == lock.token
        lock.release()
        # once the old master is back it is demoted, and this client keeps the new one
        g.servers[0].start()
        g.wait_master(g.servers[0])
        lock_cycle(dlm, name, ["ok"])


# --- every server binary ---------------------------------------------------------------------------
@pytest.fixture(scope="module", params=find_servers(), ids=lambda b: server_version(b).replace(" ", "-"))
def versioned_group(request):
    """A service on each server binary the suite knows (Debian's Redis 7.0, the ``server`` extra's
    Valkey 8.1 and Redis 6.2): each runs as a sentinel too (``--sentinel``)."""
    with start_sentinels("versioned", binary=request.param, failover_ready=False) as g:
        yield g


def test_sentinel_mode_on_each_server_binary(make_client, versioned_group, name):
    dlm = make_client([versioned_group.url], connect_timeout=CONNECT, restart_aware=True, restart_grace=0)
    lock_cycle(dlm, name, ["ok"])
    info = versioned_group.sentinels[0].master_info()
    assert info["role-reported"] == "master" and int(info["role-reported-time"]) >= 0  # what voting reads


def test_a_waiter_on_a_sentinel_master_is_woken(make_client, group, name):
    # The notification connection of a Sentinel master goes where the sentinels say the master
    # is (it went to the spec's empty address, and waiters only polled): with a 2 s backoff, the
    # waiter gets the lock well before it.
    holder = make_client([group.url], connect_timeout=CONNECT).lock(name, ttl=5.0)
    assert holder.acquire(blocking=False)
    out = []
    waiter = make_client([group.url], connect_timeout=CONNECT, retry_delay=2.0, retry_jitter=0.0).lock(name, ttl=5.0)
    thread = threading.Thread(target=lambda: out.append((waiter.acquire(timeout=5.0), time.monotonic())))
    thread.start()
    channel = b"fastredlock-wake:" + name.encode()
    deadline = time.monotonic() + 3.0
    while group.master.command("PUBSUB", "NUMSUB", channel)[1] != 1:  # subscribed on the master
        assert time.monotonic() < deadline, "the waiter did not subscribe on the master"
        time.sleep(0.01)
    released = time.monotonic()
    holder.release()
    thread.join(5.0)
    assert out and out[0][0] is True
    assert out[0][1] - released < 1.0, "the waiter was not woken: it slept its backoff"
    waiter.release()
