"""Negative controls of the shared checks: each one fires when given the fault it exists to see.

The fault suite asserts "never happened" through a few shared helpers (``tests/_checks.py`` and the
``keys_on`` fixture): an independent holder counter, and the leaked-key checks. A check that cannot
fail proves nothing, so each is shown here to fail on a planted fault: a second holder inside, a key
left without a TTL (a cleanup skipped), a key whose TTL outlives the lock's. No client is involved
(the faults are written by a raw connection), so these run once, not per core.
"""
from __future__ import annotations


import pytest

from _checks import assert_expires_within, gone_within, wait_gone


def test_counter_check_fires_when_another_holder_is_inside(counter):
    assert counter.enter() == 1  # a holder inside ...
    with pytest.raises(AssertionError, match="two holders at once"):
        counter.check()  # ... and a second one walks in
    assert counter.peak == 2
    counter.leave()
    counter.leave()


@pytest.fixture
def planted(masters, name):
    """Plant a leaked lock key on master 2 (the others are clean); remove it afterwards."""

    def plant(*set_args) -> None:
        assert masters[2].command("SET", name, "leaked", *set_args) == b"OK"

    yield plant
    masters[2].command("DEL", name)


def test_leak_checks_fire_on_a_key_left_without_ttl(masters, name, keys_on, planted):
    planted()  # the release skipped, and no expiry to save it
    assert keys_on(masters, name) == 1
    with pytest.raises(AssertionError, match="still on"):
        gone_within(masters, name, 0.05)
    with pytest.raises(AssertionError, match="still on"):
        wait_gone(masters, name, 0.0)
    with pytest.raises(AssertionError, match="PTTL -1"):
        assert_expires_within(masters, name, 1.0)


def test_expiry_check_fires_on_a_ttl_longer_than_the_locks(masters, name, planted):
    planted("PX", "60000")  # e.g. a TTL written in the wrong unit
    with pytest.raises(AssertionError, match="PTTL"):
        assert_expires_within(masters, name, 1.0)
    assert_expires_within(masters, name, 60.0)  # and passes when the TTL is within the bound
