"""The quiet cleanup of a failed acquisition, written once (protocol.plans.left_behind and
left_behind_of): every driver and plan asks these, compiled and interpreted alike."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fastredlock.protocol.outcomes import NO, OK, PENDING, SKIPPED, TIMEOUT


def rnd(outcomes, ok=False):
    return SimpleNamespace(ok=ok, outcomes=tuple(outcomes), successes=sum(1 for c in outcomes if c == OK))


@pytest.mark.parametrize("round_, expected", [
    (rnd([OK, OK, OK, NO, NO], ok=True), False),     # held: nothing to clean up
    (rnd([NO] * 5), False),                          # refused everywhere: nothing was set
    (rnd([NO, NO, SKIPPED, NO, SKIPPED]), False),    # skipped masters set nothing
    (rnd([OK, NO, NO, NO, NO]), True),               # an OK outside a quorum
    (rnd([PENDING, NO, NO, NO, NO]), True),          # a SET not answered yet
    (rnd([TIMEOUT, NO, NO, NO, NO]), True),          # answered after its timeout, maybe
], ids=["held", "all-no", "skipped", "ok-minority", "pending", "timeout"])
def test_a_failed_round_that_may_hold_is_left_behind(proto, round_, expected):
    assert proto.plans.left_behind(round_) is expected


def test_a_batch_names_the_rounds_left_behind(proto):
    rounds = [rnd([OK] * 3, ok=True), rnd([NO] * 3), rnd([OK, NO, NO]), rnd([PENDING, NO, NO])]
    assert proto.plans.left_behind_of(rounds) == [2, 3]
    assert proto.plans.left_behind_of([]) == []
