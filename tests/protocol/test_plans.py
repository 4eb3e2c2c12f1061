"""The Redlock algorithm above one round (protocol.plans), from tables: cleanup, fencing, renewal,
decided releases. Rounds are stand-ins with the fields the rules read."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fastredlock.protocol.outcomes import (
    CONN_ERROR, ERROR_REPLY, NO, OK, PENDING, SKIPPED, TIMEOUT, UNTRUSTED,
)


def rnd(outcomes, ok=False):
    return SimpleNamespace(ok=ok, outcomes=tuple(outcomes), successes=sum(1 for c in outcomes if c == OK))


@pytest.mark.parametrize("outcomes, expected", [
    ([NO] * 5, False),
    ([NO, NO, SKIPPED, NO, SKIPPED], False),
    ([OK, NO, NO, NO, NO], True),            # an OK outside a quorum
    ([UNTRUSTED, NO, NO, NO, NO], True),     # an OK that did not count
    ([PENDING, NO, NO, NO, NO], True),       # a SET not answered yet
    ([TIMEOUT, NO, NO, NO, NO], True),       # a SET answered after its timeout, maybe
    ([CONN_ERROR, NO, NO, NO, NO], True),
], ids=["all-no", "no-and-skipped", "ok-minority", "untrusted", "pending", "timeout", "conn-error"])
def test_a_failed_acquisition_is_cleaned_up_where_it_may_hold(proto, outcomes, expected):
    assert proto.plans.may_hold(tuple(outcomes)) is expected


@pytest.mark.parametrize("values, fence", [((3, None, 7, 7, None), 8), ((0,), 1), ((None, 41, None), 42)])
def test_the_fence_is_one_more_than_the_largest_counter(proto, values, fence):
    assert proto.plans.fence_of(values) == fence


@pytest.mark.parametrize("second_ok, now, held", [(True, 9.0, True), (True, 10.0, False), (False, 9.0, False)],
                         ids=["written-in-time", "validity-ran-out", "write-missed-quorum"])
def test_a_fenced_acquisition_holds_only_if_written_within_validity(proto, second_ok, now, held):
    assert proto.plans.fenced_held(second_ok, 10.0, now) is held


@pytest.mark.parametrize("outcomes, ok, now, verdict", [
    ([OK] * 5, True, 1.0, "renewed"),
    ([OK, OK, TIMEOUT, TIMEOUT, NO], False, 1.0, "retry"),     # 2 OK + 2 maybe >= 3
    ([OK, OK, TIMEOUT, TIMEOUT, NO], False, 10.0, "lost"),     # ... but validity ran out
    ([OK, NO, NO, TIMEOUT, NO], False, 1.0, "lost"),           # 1 + 1 < 3: the masters said no
    ([PENDING, SKIPPED, ERROR_REPLY, NO, NO], False, 1.0, "retry"),
], ids=["renewed", "retry-while-valid", "lost-when-expired", "lost-by-no", "transient-outcomes"])
def test_renewal_verdict(proto, outcomes, ok, now, verdict):
    assert proto.plans.renewal_verdict(rnd(outcomes, ok), 3, 5.0, now) == verdict


@pytest.mark.parametrize("rounds, decided", [
    ([[OK, OK, OK, PENDING, PENDING]], True),          # a quorum confirmed
    ([[NO, NO, NO, PENDING, PENDING]], True),          # a quorum is impossible
    ([[OK, OK, NO, PENDING, PENDING]], False),         # still open
    ([[OK, OK, OK, NO, NO], [OK, PENDING, PENDING, PENDING, PENDING]], False),
], ids=["confirmed", "impossible", "open", "one-of-two-open"])
def test_releases_written_without_waiting_are_read_until_decided(proto, rounds, decided):
    assert proto.plans.release_decided([rnd(o) for o in rounds], 3, 5) is decided


@pytest.mark.parametrize("outcomes, late, split", [
    ([OK, NO, NO, NO, NO], None, True),                    # took one master: a split round
    ([NO] * 5, None, False),                               # refused everywhere: somebody holds it
    ([NO, NO, NO, PENDING, PENDING], OK, True),            # decided at three refusals; its OKs came last
    ([NO, NO, NO, PENDING, PENDING], NO, False),           # ... or its stragglers said no as well
], ids=["ok-minority", "all-no", "decided-early-then-ok", "decided-early-then-no"])
def test_a_split_round_is_told_from_a_refusal_once_its_stragglers_answered(outcomes, late, split):
    # A queued waiter retries at once after a split round (nobody holds the key: no release will
    # wake anyone), else it sleeps its backoff. A round decided early has its stragglers read
    # first (a Settle step): counted while PENDING, a split would pass for a refusal.
    from fastredlock.handles.lock import _took_some
    from fastredlock.engine.steps import Settle

    round_ = rnd(outcomes)
    plan = _took_some(round_)
    try:
        step = next(plan)
    except StopIteration as stop:
        assert late is None and stop.value is split
        return
    assert late is not None and type(step) is Settle and step.rnd is round_
    round_.outcomes = tuple(late if code == PENDING else code for code in outcomes)  # what Settle reads
    round_.successes = sum(1 for code in round_.outcomes if code == OK)
    with pytest.raises(StopIteration) as stop:
        plan.send([])
    assert stop.value.value is split
