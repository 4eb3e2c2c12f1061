"""Hot paths: early return at quorum, owed replies and stragglers, master health, threads x processes.

Every test runs on both cores, against real servers. Timing bounds are measured with
``time.monotonic`` but kept generous (a 2-core machine shared with other suites): each one still
separates "waited for the slow master" from "did not", because the slow master's deadline is set
far above the bound.
"""
from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import threading
import time

import pytest

from fastredlock import LockNotAcquiredError
from fastredlock.protocol import outcomes as oc
from fastredlock import MasterStats
from fastredlock.testing import FaultProxy, LocalMaster, paused

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the shared helpers
from _contender import contend_threads, run_contenders  # noqa: E402

#: A per-master deadline far above what an early return may take on a busy machine.
SLOW_IO = 0.4
#: What "returned without waiting for the slow master" may take at most.
EARLY = SLOW_IO / 3


def warm(dlm, name: str) -> None:
    """One lock cycle, so that every connection is open."""
    lock = dlm.lock(name + ":warm", ttl=1.0)
    assert lock.acquire(blocking=False)
    lock.release()


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def names(lock):
    return [o.outcome for o in lock.outcomes]


def wait_not_cooling(dlm, i: int, limit: float = 10.0) -> None:
    end = time.monotonic() + limit
    while dlm.stats()[i].cooling_down > 0:
        assert time.monotonic() < end, dlm.stats()[i]
        time.sleep(0.005)


# --- early return at quorum -------------------------------------------------------------------------
def test_acquire_returns_at_quorum_while_a_master_is_stalled(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=SLOW_IO)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=5.0)
    with paused(fault_masters[2]):
        acquired, took = timed(lock.acquire)
        assert acquired
        assert took < EARLY, f"acquire waited for the stalled master: {took:.3f}s"
        assert lock._last.outcomes[2] == oc.PENDING  # decided without it
        # validity was measured at the decision, not at the stalled master's deadline
        assert lock.validity > 5.0 - EARLY - (5.0 * 0.01 + 0.002)
        # the outcomes shown wait for the straggler, at most until its deadline
        shown, took = timed(names, lock)
        assert shown == ["ok", "ok", "timeout", "ok", "ok"]
        assert took < SLOW_IO + 0.2
        lock.release()  # queued on the stalled master's connection, behind the SET
    time.sleep(0.1)  # the resumed master runs the SET, then the release: in the order written
    assert keys_on(fault_masters, name) == 0


def test_late_reply_is_read_before_the_next_command(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=SLOW_IO)
    warm(dlm, name)
    first = dlm.lock(name + ":a", ttl=5.0)
    fault_masters[2].pause()
    try:
        assert first.acquire()
        assert first._last.outcomes[2] == oc.PENDING
    finally:
        fault_masters[2].resume()
    # A new connection is served after the data already waiting on an old one: once this answers,
    # master 2 has run the SET and its late reply waits in our socket.
    assert fault_masters[2].command("EXISTS", first.key) == 1
    assert first._last.outcomes[2] == oc.PENDING  # nothing read it yet
    second = dlm.lock(name + ":b", ttl=5.0)
    assert second.acquire()
    # The round of `second` read the late reply first (it was there before anything else) and
    # gave it to `first`'s round, and `second` got its own answer from master 2, not the late one.
    assert first._last.outcomes[2] == oc.OK
    assert names(first) == ["ok"] * 5 and names(second) == ["ok"] * 5
    assert fault_masters[2].command("GET", first.key) == first.token
    assert fault_masters[2].command("GET", second.key) == second.token
    first.release()
    second.release()
    assert keys_on(fault_masters, first.key) == 0 and keys_on(fault_masters, second.key) == 0


def test_failed_acquire_leaves_no_stale_key_on_a_stalled_master(make_client, fault_masters, name, keys_on):
    """The cleanup of a failed attempt is queued behind its SET on the stalled master's connection."""
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=SLOW_IO)
    warm(dlm, name)
    for m in (fault_masters[0], fault_masters[1], fault_masters[3]):
        m.command("SET", name, "someone-else", "PX", 60000)
    lock = dlm.lock(name, ttl=30.0)
    with paused(fault_masters[2]):
        acquired, took = timed(lock.acquire)
        assert acquired is False
        assert took < EARLY, f"a quorum was impossible after three answers, yet it waited {took:.3f}s"
    time.sleep(0.1)
    # Master 2 ran our SET (it was free there), then our owner-checked release: nothing of ours
    # stays for the 30 s TTL.
    assert fault_masters[2].command("GET", name) is None
    assert fault_masters[4].command("GET", name) is None


def test_release_goes_through_the_core_that_carries_its_set(make_client, fault_masters, name, keys_on):
    """While its SET is unanswered somewhere, a lock is released through the core that sent it: on
    another core's connection the release could overtake the SET."""
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=SLOW_IO)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=5.0)
    with paused(fault_masters[2]):
        assert lock.acquire()
        core = lock._carrier[0]
        assert dlm.executor.checkout(core) is core  # as if another thread were using it right now
        done = threading.Event()
        releaser = threading.Thread(target=lambda: (lock.release(), done.set()))
        releaser.start()
        assert not done.wait(0.2)  # it waits for that core rather than take another
        dlm.executor.checkin(core)
        assert done.wait(10)
        releaser.join()
    time.sleep(0.1)  # the resumed master runs the SET, then the release behind it
    assert keys_on(fault_masters, name) == 0


def test_a_thread_gets_back_the_core_it_used(make_client, masters):
    dlm = make_client(masters.urls)
    got = {}
    step = threading.Barrier(2)

    def body(k: int) -> None:
        first = dlm.executor.checkout()
        step.wait()  # both hold one: two cores
        dlm.executor.checkin(first)
        step.wait()  # both back in the pool
        again = dlm.executor.checkout()
        dlm.executor.checkin(again)
        got[k] = (first, again)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[0][0] is not got[1][0]
    assert all(first is again for first, again in got.values())


def test_wait_for_all_waits_for_the_stalled_master(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=0.15, wait_for_all=True, cooldown=0)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=5.0)
    with paused(fault_masters[2]):
        acquired, took = timed(lock.acquire)
        assert acquired and took >= 0.15
        assert names(lock) == ["ok", "ok", "timeout", "ok", "ok"]
        lock.release()
    time.sleep(0.1)
    assert keys_on(fault_masters, name) == 0


def test_stragglers_are_matched_to_their_own_requests(make_client, masters, name, keys_on):
    """Two masters answer 30 ms late, below the deadline: every round returns without them, and
    their replies, read by later rounds, always fill in the round they belong to."""
    proxies = [FaultProxy(m).start() for m in masters]
    try:
        urls = [p.url for p in proxies]
        dlm = make_client(urls, retry_count=0, io_timeout=SLOW_IO)
        warm(dlm, name)
        for p in proxies[3:]:
            p.latency(0.03, "down")
        locks = []
        for k in range(6):
            lock = dlm.lock(f"{name}:{k}", ttl=5.0)
            acquired, took = timed(lock.acquire)
            assert acquired and took < 0.03 + EARLY
            locks.append(lock)
        batch, took = timed(dlm.acquire_many, [f"{name}:b{k}" for k in range(8)], 5.0)
        assert all(batch)
        assert set(batch[0]._last.outcomes[3:]) <= {oc.PENDING, oc.OK}
        for lock in locks + batch:
            assert names(lock) == ["ok"] * 5, lock  # the late OKs were filled in where they belong
        for k, lock in enumerate(locks):
            assert masters[4].command("GET", lock.key) == lock.token
        # A late answer can be "no" too: the straggler's master had the key taken by someone else.
        taken = dlm.lock(f"{name}:taken", ttl=5.0)
        masters[4].command("SET", taken.key, "someone-else", "PX", 5000)
        assert taken.acquire()
        assert names(taken) == ["ok"] * 4 + ["no"]
        for lock in locks + [taken]:
            lock.release()
        assert dlm.release_many(batch) == [True] * len(batch)
        for p in proxies:
            p.heal()
        time.sleep(0.05)
        everything = [lk.key for lk in locks + batch]
        assert sum(keys_on(masters, key) for key in everything) == 0
        assert keys_on(masters, taken.key) == 1  # only the other holder's key on master 4
        masters[4].command("DEL", taken.key)
    finally:
        for p in proxies:
            p.stop()


# --- master health ------------------------------------------------------------------------------------
def test_stalled_master_costs_one_timeout_then_cools_down(make_client, fault_masters, name):
    io = 0.2
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=io, wait_for_all=True, cooldown=0.6,
                      max_cooldown=5.0)
    warm(dlm, name)
    with paused(fault_masters[2]):
        first = dlm.lock(name + ":0", ttl=5.0)
        acquired, took = timed(first.acquire)
        assert acquired and io <= took < io + 0.15, took  # waited for it once (wait_for_all)
        first.release()  # master 2 cools down: written behind the SET, not waited for
        costs = []
        for k in range(8):
            lock = dlm.lock(f"{name}:{k + 1}", ttl=5.0)
            acquired, took = timed(lock.acquire)
            assert acquired
            costs.append(took)
            assert lock.outcomes[2].outcome == "cooling down"
            assert "1 failure" in lock.outcomes[2].detail and "timeout" in lock.outcomes[2].detail
            lock.release()
        assert max(costs) < io / 2, costs
        assert statistics.median(costs) < io / 8, costs  # near zero: nobody waits for master 2
        stats = dlm.stats()[2]
        assert stats.skipped >= 8 and stats.timeouts >= 1 and stats.failures_in_a_row == 1
        assert 0 < stats.cooling_down <= 0.6
        wait_not_cooling(dlm, 2)
        probe = dlm.lock(name + ":probe", ttl=5.0)
        acquired, took = timed(probe.acquire)  # probed again: still stalled, a longer cool-down
        assert acquired and took >= io
        assert dlm.stats()[2].failures_in_a_row == 2 and dlm.stats()[2].cooling_down > 0.6
        probe.release()
    wait_not_cooling(dlm, 2)
    back = dlm.lock(name + ":back", ttl=5.0)
    assert back.acquire()
    assert names(back) == ["ok"] * 5  # probed again after the cool-down: back in the quorum
    assert dlm.stats()[2].failures_in_a_row == 0 and dlm.stats()[2].last_failure == "timeout"
    back.release()


def test_refused_master_cools_down_and_is_named_when_quorum_is_impossible(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls, retry_count=0)
    for m in fault_masters[:3]:
        m.kill()
    with pytest.raises(LockNotAcquiredError) as info:
        with dlm.lock(name, ttl=5.0):
            pass
    message = str(info.value)
    assert "a quorum was impossible: 3 of 5 masters down" in message
    for m in fault_masters[:3]:
        assert f"127.0.0.1:{m.port}" in message.split("; masters:")[0]
    # the next attempt does not even try the dead masters
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire() is False
    assert names(lock)[:3] == ["cooling down"] * 3 and names(lock)[3:] == ["ok"] * 2
    assert "connection error" in lock.outcomes[0].detail
    stats = dlm.stats()
    assert all(s.connect_errors >= 1 and s.skipped >= 1 and s.cooling_down > 0 for s in stats[:3])
    assert all(s.connect_errors == 0 and s.skipped == 0 and s.failures_in_a_row == 0 for s in stats[3:])
    time.sleep(0.05)
    assert keys_on(fault_masters, name) == 0


def test_health_is_shared_by_the_cores_of_a_client(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=0.1, wait_for_all=True)
    warm(dlm, name)
    one, two = dlm.executor.checkout(), dlm.executor.checkout()  # what two threads would hold at the same time
    try:
        assert one.health is two.health is dlm.executor.health
        with paused(fault_masters[1]):
            rnd = one.acquire(b"%s:1" % name.encode(), b"token-1", 5000)
            assert rnd.outcomes[1] == oc.TIMEOUT
            rnd = two.acquire(b"%s:2" % name.encode(), b"token-2", 5000)  # this core never met it
            assert rnd.outcomes[1] == oc.SKIPPED and rnd.elapsed < 0.05
            one.release(b"%s:1" % name.encode(), b"token-1")
            two.release(b"%s:2" % name.encode(), b"token-2")
    finally:
        dlm.executor.checkin(one)
        dlm.executor.checkin(two)


def test_stats_shape_and_counts(make_client, masters, name):
    dlm = make_client(masters.urls, retry_count=0)
    stats = dlm.stats()
    assert [s.master for s in stats] == list(dlm.masters)
    assert all(isinstance(s, MasterStats) for s in stats)
    assert MasterStats._fields[1:1 + len(oc.COUNTERS)] == oc.COUNTERS
    assert all(s.replies == 0 and s.latency_avg == 0.0 and s.last_failure is None for s in stats)
    cycles = 20
    for k in range(cycles):
        lock = dlm.lock(f"{name}:{k}", ttl=5.0)
        assert lock.acquire()
        lock.release()
    batch = dlm.acquire_many([f"{name}:b{k}" for k in range(16)], ttl=5.0)
    assert dlm.release_many(batch) == [True] * 16
    for s in dlm.stats():
        # every acquire and release got a reply from every master (a straggler's is read later);
        # the batch: 16 SETs, and one script call that released all 16
        assert s.replies == 2 * cycles + 16 + 1, s
        assert cycles <= s.rounds_timed <= 2 * cycles + 2
        assert 0 < s.latency_avg <= s.latency_max < 1.0
        assert s.timeouts == s.connect_errors == s.connection_errors == 0
        assert s.error_replies == s.protocol_errors == s.skipped == s.late_replies == s.releases_not_held == 0
        assert s.cooling_down == 0.0 and s.failures_in_a_row == 0
        assert isinstance(s.latency_avg, float) and isinstance(s.replies, int)


def test_cooldown_arguments_are_checked(make_one_client, masters):
    with pytest.raises(ValueError, match="max_cooldown"):
        make_one_client(masters.urls, cooldown=2.0, max_cooldown=1.0)
    with pytest.raises(ValueError, match="cooldown"):
        make_one_client(masters.urls, cooldown=-1)
    with pytest.raises(TypeError, match="wait_for_all"):
        make_one_client(masters.urls, wait_for_all="yes")


# --- threads x processes ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("auto_pipeline", [True, False], ids=["pipelined", "pool"])
def test_threads_times_processes_never_overlap(core, masters, name, keys_on, auto_pipeline):
    counter = LocalMaster().start()
    try:
        reports = run_contenders(
            contend_threads, 3, (masters.urls, core, name, counter.port, 3.0, 4), (auto_pipeline,)
        )
        per_thread = [t for threads, _pool, _carried in reports for t in threads]
        assert sum(t[1] for t in per_thread) == 0, f"two holders at once: {per_thread}"
        assert sum(t[2] for t in per_thread) == 0, per_thread
        assert sum(t[0] for t in per_thread) > 50, per_thread
        assert sum(1 for t in per_thread if t[0] > 0) >= 6  # threads of several processes got it
        if auto_pipeline:
            # requests of one process's threads rode together (acquires of one name, and releases
            # written before the acquires of the same name in one round)
            assert sum(carried for _threads, _pool, carried in reports) > 0, reports
        else:
            assert all(pool >= 2 for _threads, pool, _carried in reports)  # the threads did not share one core
        assert keys_on(masters, name) == 0
        assert counter.command("GET", "holders") == b"0"
    finally:
        counter.stop()



@pytest.mark.slow
def test_threads_times_processes_overlap_when_the_lock_excludes_nobody(core, masters, name):
    # The negative control of the counter above: every thread locking a name of its own.
    counter = LocalMaster().start()
    try:
        reports = run_contenders(
            contend_threads, 2, (masters.urls, core, name, counter.port, 1.0, 4), (True, True)
        )
        per_thread = [t for threads, _pool, _carried in reports for t in threads]
        assert sum(t[0] for t in per_thread) > 10, per_thread  # they did hold, through the real client
        assert sum(t[1] for t in per_thread) > 0, f"the counter saw no overlap without exclusion: {per_thread}"
    finally:
        counter.stop()

# --- a client thread that could not run until past its deadline ----------------------------------
def _proxies_elsewhere(urls, latency, out, stop) -> None:
    """Run delaying proxies in another process: they must not need this process's GIL."""
    proxies = [FaultProxy(u).start() for u in urls]
    for p in proxies:
        p.latency(latency, "down")
    out.put([p.url for p in proxies])
    stop.wait(120)
    for p in proxies:
        p.stop()


def test_replies_that_arrived_before_a_late_wakeup_are_not_called_late(make_client, masters, name, keys_on):
    """The client thread cannot run (another thread holds the GIL) from its first poll wake-up
    until after its deadline; the replies that arrived meanwhile are read, not called timeouts.

    The pure core sends with the GIL released, so the hog may also catch it between two sends
    (then those commands really go out after the deadline and are rightly late): the scenario is
    tried up to 5 times and must succeed once. Without reading first it fails every time.
    """
    ctx = multiprocessing.get_context("spawn")
    out, stop_proxies = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_proxies_elsewhere, args=(masters.urls[1:], 0.003, out, stop_proxies))
    proc.start()
    old = sys.getswitchinterval()

    def hog(stop):  # holds the GIL 250 ms at a time, letting go for a moment in between
        while not stop.is_set():
            time.sleep(0.0002)
            end = time.perf_counter() + 0.25
            while time.perf_counter() < end:
                pass

    def attempt(dlm, k):
        stop = threading.Event()
        sys.setswitchinterval(5.0)  # no forced hand-over: the hog keeps the GIL while it spins
        t = threading.Thread(target=hog, args=(stop,), daemon=True)
        t.start()
        try:
            lock = dlm.lock(f"{name}:{k}", ttl=10.0)
            acquired, took = timed(lock.acquire)
        finally:
            stop.set()
            t.join(5)
            sys.setswitchinterval(old)
        assert took > 0.1  # it did wake up past its deadline
        outcomes = [o.outcome for o in lock.outcomes]
        if acquired:
            assert lock.validity < 10.0 - took + 0.01  # validity counts the time it could not run
            lock.release()
        assert keys_on(masters, f"{name}:{k}") == 0
        return acquired, outcomes

    try:
        # master 0 answers first (3 ms before the others): the first poll wakes for it alone
        urls = [masters.urls[0]] + out.get(timeout=60)
        dlm = make_client(urls, io_timeout=0.1, retry_count=0, wait_for_all=True)
        warm(dlm, name)
        tries = []
        for k in range(5):
            acquired, outcomes = attempt(dlm, k)
            tries.append(outcomes)
            # (on a loaded machine a proxy may really be late for one master: four of five
            # suffice; fewer is a try that proves nothing either way, so it is tried again)
            if acquired and outcomes.count("ok") >= 4:
                break
        assert acquired and outcomes.count("ok") >= 4, tries
    finally:
        sys.setswitchinterval(old)
        stop_proxies.set()
        proc.join(10)
