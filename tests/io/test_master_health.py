"""Master health on real masters: a stalled or refused master costs one failure, then cools down
(skipped, named, probed again), and ``stats()`` counts what every master answered.

Both cores; the rules themselves are tested from tables in tests/protocol/test_cooldown.py.
"""
from __future__ import annotations

import statistics
import time

import pytest

from fastredlock import LockNotAcquiredError, MasterStats
from fastredlock.protocol import outcomes as oc
from fastredlock.testing import paused

from _rounds import names, timed, wait_not_cooling, warm


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


def test_stats_shape_and_counts(make_client, masters, name, server_caps):
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
        # the batch: 16 SETs, and one script call that released all 16 (where the masters have a
        # native owner-checked delete: 16 native releases, each read as one answer)
        assert s.replies == 2 * cycles + 16 + (16 if server_caps.native_delete else 1), s
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
