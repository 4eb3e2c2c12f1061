"""Masters killed mid-round, stalled, slow or cut off mid-reply: every call stays bounded and safe.

The kill is placed with a :class:`~fastredlock.testing.FaultProxy`: replies are held back, and the
master is killed by the proxy the moment its answer arrives. The master has then executed the
command (the SET landed, or the key was deleted) but the client never hears so: the worst moment.
"""
from __future__ import annotations

import time

import pytest

from fastredlock import LockNotOwnedError
from fastredlock.testing import FaultProxy, blackhole_address, paused

from _checks import (
    IO, Timer, assert_expires_within, bound, gone_within, timed, wait_gone, warm,
)

TTL = 2.0


def kill_on_reply(proxy, master) -> None:
    """Arm: the master dies right after executing the next command, before its answer gets out."""
    proxy.stall("down")
    proxy.on_reply(master.kill)


def outcomes(lock):
    return [o.outcome for o in lock.outcomes]


# --- killed mid-round -----------------------------------------------------------------------------
def test_master_killed_mid_acquire_counts_as_no(fault_client, fault_proxies, fault_masters, name, counter):
    dlm = fault_client()
    warm(dlm, name)
    kill_on_reply(fault_proxies[0], fault_masters[0])
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(1))
    assert outcomes(lock) == ["connection error"] + ["ok"] * 4
    assert not fault_masters[0].running()
    counter.check()
    timed(lock.release, bound(1))
    gone_within(fault_masters, name, bound(1))


def test_majority_killed_mid_acquire_fails_fast_and_cleans_up(fault_client, fault_proxies, fault_masters, name):
    dlm = fault_client()
    warm(dlm, name)
    for proxy, master in zip(fault_proxies[:3], fault_masters[:3]):
        kill_on_reply(proxy, master)
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(2)) is False  # the acquire round and the cleanup round
    assert outcomes(lock) == ["connection error"] * 3 + ["ok"] * 2
    assert not lock.locked() and lock.validity == 0.0
    gone_within(fault_masters, name, bound(1))  # the two survivors that said OK were released
    for m in fault_masters[:3]:
        m.start()  # back empty: nothing of ours survives anywhere
    gone_within(fault_masters, name, bound(1))


def test_master_killed_mid_release_still_releases(fault_client, fault_proxies, fault_masters, name, counter):
    dlm = fault_client()
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    counter.check()
    kill_on_reply(fault_proxies[4], fault_masters[4])
    with Timer() as t:
        lock.release()  # 4 of 5 confirm: no exception
    assert t.elapsed < bound(1), t.elapsed
    assert outcomes(lock) == ["ok"] * 4 + ["connection error"]
    gone_within(fault_masters, name, bound(1))


def test_majority_killed_mid_release_raises_not_owned_and_leaves_no_key(
    fault_client, fault_proxies, fault_masters, name
):
    dlm = fault_client()
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    for proxy, master in zip(fault_proxies[2:], fault_masters[2:]):
        kill_on_reply(proxy, master)
    with Timer() as t:
        # Only 2 of 5 could confirm: the client says so rather than report a clean release. The
        # lock is nonetheless gone: deleted on the survivors, forgotten by the dead.
        with pytest.raises(LockNotOwnedError) as info:
            lock.release()
    assert t.elapsed < bound(1), t.elapsed
    assert [o.outcome for o in info.value.outcomes] == ["ok"] * 2 + ["connection error"] * 3
    assert lock.token is None and not lock.locked()
    gone_within(fault_masters, name, bound(1))


def test_master_killed_mid_extend_keeps_lock_on_four(fault_client, fault_proxies, fault_masters, name):
    dlm = fault_client()
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    kill_on_reply(fault_proxies[1], fault_masters[1])
    timed(lock.extend, bound(1), 5.0)
    assert outcomes(lock) == ["ok", "connection error", "ok", "ok", "ok"]
    assert lock.locked() and TTL < lock.validity <= 5.0
    assert_expires_within(fault_masters, name, 5.0)
    lock.release()
    gone_within(fault_masters, name, bound(1))


def test_majority_killed_mid_extend_loses_lock_and_releases(fault_client, fault_proxies, fault_masters, name):
    dlm = fault_client()
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    for proxy, master in zip(fault_proxies[:3], fault_masters[:3]):
        kill_on_reply(proxy, master)
    with Timer() as t:
        with pytest.raises(LockNotOwnedError):
            lock.extend()
    assert t.elapsed < bound(2), t.elapsed  # the extend round and the release of the lost lock
    assert not lock.locked() and lock.validity == 0.0
    gone_within(fault_masters, name, bound(1))


# --- stalled masters (SIGSTOP) ----------------------------------------------------------------------
def test_stalled_master_every_call_bounded(make_client, fault_masters, name, counter):
    dlm = make_client(fault_masters.urls, retry_count=0)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=TTL)
    with paused(fault_masters[3]):
        assert timed(lock.acquire, bound(1, reconnect=False))
        assert outcomes(lock)[3] == "timeout"
        assert counter.enter() == 1
        timed(lock.extend, bound(1))  # reconnects to the stalled master: connect succeeds, no answer
        counter.leave()
        timed(lock.release, bound(1))
        assert outcomes(lock)[3] == "timeout"
    time.sleep(0.05)  # the resumed master runs what was queued: our SET, then our releases
    assert_expires_within(fault_masters, name, TTL)


def test_stalled_majority_fails_fast_and_late_keys_expire(make_client, fault_masters, name):
    ttl = 1.0
    dlm = make_client(fault_masters.urls, retry_count=0)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=ttl)
    with paused(*fault_masters[:3]):
        assert timed(lock.acquire, bound(2)) is False
        gone_within(fault_masters[3:], name, bound(1))
    # The late SETs may land after the cleanup (README, "known limit"): they carry our TTL.
    time.sleep(0.05)
    assert_expires_within(fault_masters, name, ttl)
    wait_gone(fault_masters, name, ttl)


def test_connect_that_never_completes_costs_connect_timeout(make_client, masters, name):
    with blackhole_address() as (host, port):
        dlm = make_client(masters.urls[:4] + [f"redis://{host}:{port}"], retry_count=0)
        lock = dlm.lock(name, ttl=TTL)
        assert timed(lock.acquire, bound(1))
        assert outcomes(lock) == ["ok"] * 4 + ["timeout"]
        timed(lock.release, bound(1))
    gone_within(masters, name, bound(1))


# --- latency ------------------------------------------------------------------------------------
def test_latency_above_io_timeout_on_one_master(proxied_client, proxies, masters, name, counter):
    dlm = proxied_client()
    warm(dlm, name)
    proxies[2].latency(4 * IO, "down")
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(1, reconnect=False))
    assert outcomes(lock) == ["ok", "ok", "timeout", "ok", "ok"]
    counter.check()
    timed(lock.release, bound(1))
    gone_within(masters, name, bound(1))  # requests are not delayed: the SET came before the release
    proxies[2].heal()
    time.sleep(4 * IO)  # the late replies have arrived by now
    with dlm.lock(name, ttl=TTL) as again:
        seen = outcomes(again)
        assert seen[:2] + seen[3:] == ["ok"] * 4
        # The slow master may sit out a cool-down after its timeouts; if it was asked, it holds
        # this acquisition's token (nothing of the earlier, released one).
        if seen[2] == "ok":
            assert masters[2].command("GET", name) == again.token


def test_latency_above_io_timeout_on_majority_fails_and_cleans_up(proxied_client, proxies, masters, name):
    dlm = proxied_client()
    warm(dlm, name)
    for proxy in proxies[:3]:
        proxy.latency(4 * IO, "both")
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(2)) is False
    assert not lock.locked()
    gone_within(masters[3:], name, IO)
    # the delayed SETs, then the delayed releases, reach the slow masters
    gone_within(masters, name, 4 * IO + bound(1))


def test_latency_below_io_timeout_is_charged_to_validity(proxied_client, proxies, name):
    dlm = proxied_client()
    warm(dlm, name)
    for proxy in proxies:
        proxy.latency(IO / 5, "both")
    lock = dlm.lock(name, ttl=TTL)
    with Timer() as t:
        assert lock.acquire()
    assert outcomes(lock) == ["ok"] * 5
    assert t.elapsed >= 2 * IO / 5
    # validity runs from before the round: the round trip and the drift are already taken off
    assert lock.validity <= TTL - 2 * IO / 5 - (TTL * 0.01 + 0.002)
    lock.release()


# --- connections cut -------------------------------------------------------------------------------
def test_connection_reset_mid_reply_counts_as_no(proxied_client, proxies, masters, name, counter):
    dlm = proxied_client()
    warm(dlm, name)
    proxies[1].reset_mid_reply()
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(1, reconnect=False))
    assert outcomes(lock) == ["ok", "connection error", "ok", "ok", "ok"]
    counter.check()
    lock.release()
    assert outcomes(lock) == ["ok"] * 5  # a new connection; the SET had landed, the release found it
    gone_within(masters, name, bound(1))


def test_connection_reset_mid_reply_on_majority_release_is_reported(proxied_client, proxies, masters, name):
    dlm = proxied_client()
    warm(dlm, name)  # the release script is cached: the cut reply is the script's answer, not NOSCRIPT
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    for proxy in proxies[:3]:
        proxy.reset_mid_reply(reset=True)
    with Timer() as t:
        # The three masters did delete the key, but their answers were cut: the client cannot
        # prove a quorum released it, and says so instead of reporting success.
        with pytest.raises(LockNotOwnedError):
            lock.release()
    assert t.elapsed < bound(1, reconnect=False), t.elapsed
    gone_within(masters, name, bound(1))


def test_dropped_idle_connections_are_reopened_transparently(proxied_client, proxies, name, masters):
    dlm = proxied_client()
    warm(dlm, name)
    for proxy in proxies:
        proxy.drop(reset=True)  # e.g. a load balancer's idle timeout, or the master's `timeout`
    time.sleep(0.02)
    lock = dlm.lock(name, ttl=TTL)
    assert timed(lock.acquire, bound(1))
    assert outcomes(lock) == ["ok"] * 5
    lock.release()
    gone_within(masters, name, bound(1))


def test_refusing_master_never_raises_while_holding(proxied_client, proxies, masters, name, keys_on):
    # The baseline fault that made redlock-py raise while it held 4 of 5 (its keys then leaked).
    dlm = proxied_client()
    proxies[0].refuse()
    lock = dlm.lock(name, ttl=TTL)
    assert lock.acquire()
    assert outcomes(lock) == ["connection error"] + ["ok"] * 4
    assert keys_on(masters, name) == 4
    lock.release()
    gone_within(masters, name, bound(1))


def test_connection_lost_after_command_ran_leaves_no_key(make_client, masters, name):
    """The master ran SET NX, then the connection broke before the answer (a middlebox reset).

    The client cannot know whether its SET landed, so a failed attempt must release it.
    """
    with FaultProxy(masters[0]) as proxy:
        dlm = make_client([proxy.url], retry_count=0)
        warm(dlm, name)

        def cut() -> None:
            proxy.drop()  # the held answer is lost with the connection
            proxy.heal()

        proxy.stall("down")
        proxy.on_reply(cut)
        lock = dlm.lock(name, ttl=TTL)
        acquired = lock.acquire()
        if acquired:
            lock.release()
        gone_within(masters, name, bound(1))


# --- killed before the round (the connection is refused, or breaks when reused) --------------------------
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
