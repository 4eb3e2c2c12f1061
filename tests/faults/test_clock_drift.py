"""The seeds' clock-drift scenario: masters whose clocks run fast expire a held lock early (both cores).

Redis expires keys by its own clock. Two of three masters run under libfaketime at twice real time
(``start_master(clock_rate=2.0)``), so a 1 s lock key is gone from them after 0.5 s of real time,
while the holder's validity (measured on its own monotonic clock) says it has about half a second
left. A second client then wins a quorum on those two: two holders at once. No client can detect
this; ``fastredlock audit`` reports those masters' clock rate as a failed check, which is the remedy
(fix the masters' time keeping).
"""
from __future__ import annotations

import time

import pytest

from fastredlock.cli.audit import FAIL, PASS, audit
from fastredlock.testing import start_master

TTL = 1.0
RATE = 2.0


@pytest.fixture(scope="module")
def drifting():
    """Three masters: two with a clock at twice real time, one sane (listed first)."""
    started = []
    try:
        started.append(start_master())
        for _ in range(2):
            started.append(start_master(clock_rate=RATE))
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    finally:
        if len(started) < 3:
            for m in started:
                m.stop()
    yield started
    for m in started:
        m.stop()


def test_fast_clocks_let_two_clients_hold_one_lock(make_client, drifting, name):
    urls = [m.url for m in drifting]
    alice = make_client(urls, retry_count=0).lock(name, ttl=TTL)
    bob = make_client(urls, retry_count=0).lock(name, ttl=TTL)
    assert alice.acquire(), alice.outcomes
    assert not bob.acquire(), bob.outcomes  # while the keys are there, the lock excludes
    time.sleep(TTL / RATE + 0.05)  # the fast masters think more than a TTL has passed
    assert bob.acquire(), bob.outcomes  # bob gets the lock: the keys expired early...
    assert alice.validity > 0  # ...while alice, rightly by her clock, still holds it: two holders
    assert [o.outcome for o in bob.outcomes] == ["no", "ok", "ok"]
    bob.release()


def test_audit_fails_the_fast_clocks(drifting):
    clock = {v.master: v for v in audit([m.url for m in drifting], clock_seconds=0.5, samples=5)
             if v.check == "clock"}
    assert [clock[f"{m.host}:{m.port}"].verdict for m in drifting] == [PASS, FAIL, FAIL]
    assert f"runs at {RATE:.1f}" in clock[f"{drifting[1].host}:{drifting[1].port}"].found
