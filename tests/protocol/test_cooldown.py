"""Cool-downs from tables: Health's strikes and modes, and what a round does with a cooling master."""
from __future__ import annotations

import pytest

from _drive import Drive

SET, SCRIPT = 0, 1
OK, NO, TIMEOUT, CONN_ERROR, PENDING, SKIPPED = 0, 1, 2, 3, 7, 8
HEALTHY, REFUSED, TIMED_OUT = 0, 1, 2


def counter(proto, name):
    return proto.outcomes.COUNTERS.index(name)


@pytest.mark.parametrize(
    "what, mode", [("timeouts", TIMED_OUT), ("connect_errors", REFUSED), ("connection_errors", REFUSED)],
)
def test_a_strike_starts_a_cooldown_of_its_kind(proto, what, mode):
    health = proto.health.Health(1, cooldown=0.1, max_cooldown=1.0)
    health.failed(0, counter(proto, what), what, 10.0, True)
    assert (health.mode(0, 10.0), health.mode(0, 10.099), health.mode(0, 10.101)) == (mode, mode, HEALTHY)
    assert "1 failure in a row" in health.why(0)


@pytest.mark.parametrize(
    "cooldown, max_cooldown, lengths",
    [(0.1, 0.4, [0.1, 0.2, 0.4, 0.4]), (0.1, 5.0, [0.1, 0.2, 0.4, 0.8, 1.6]), (1.0, 1.0, [1.0, 1.0])],
    ids=["capped", "doubling", "max-equals-first"],
)
def test_each_failure_in_a_row_doubles_the_cooldown_up_to_the_max(proto, cooldown, max_cooldown, lengths):
    health = proto.health.Health(1, cooldown=cooldown, max_cooldown=max_cooldown)
    now = 0.0
    for length in lengths:
        health.failed(0, counter(proto, "timeouts"), "timeout", now, True)
        assert health.snapshot(now)[0][-3] == pytest.approx(length)  # the cool-down left
        now += length + 0.001  # the next probe fails again, once the cool-down has passed
    assert health.snapshot(now)[0][-2] == len(lengths)  # failures in a row


def test_a_failure_during_a_cooldown_is_not_another_strike(proto):
    health = proto.health.Health(1, cooldown=0.1)
    health.failed(0, counter(proto, "timeouts"), "timeout", 0.0, True)
    health.failed(0, counter(proto, "timeouts"), "timeout", 0.05, True)
    assert health.snapshot(0.05)[0][-2] == 1 and health.mode(0, 0.11) == HEALTHY


@pytest.mark.parametrize(
    "cooldown, strike, cooling", [(0.1, True, True), (0.1, False, False), (0.0, True, False)],
    ids=["strike", "no-strike", "cooldown-off"],
)
def test_only_a_strike_with_a_cooldown_set_cools_a_master(proto, cooldown, strike, cooling):
    health = proto.health.Health(2, cooldown=cooldown)
    health.failed(1, counter(proto, "timeouts"), "timeout", 0.0, strike)
    assert (health.modes(0.0) is not None) is cooling
    assert health.snapshot(0.0)[1][counter(proto, "timeouts")] == 1  # counted either way


def test_a_reply_in_time_ends_the_cooldown(proto):
    health = proto.health.Health(2, cooldown=0.1)
    health.failed(0, counter(proto, "timeouts"), "timeout", 0.0, True)
    assert health.modes(0.0) == [TIMED_OUT, HEALTHY]
    health.answered(0)
    assert health.modes(0.0) is None and health.mode(0, 0.0) == HEALTHY
    assert health.snapshot(0.0)[0][-2] == 0


# --- a round and a cooling master ---------------------------------------------------------------------
def _cooling(proto, what, opened_first):
    """Five masters; master 0 cooling down after ``what`` (its connection open if ``opened_first``)."""
    drive = Drive(proto, n=5, health=proto.health.Health(5, cooldown=1.0))
    if opened_first:
        drive.begin(SET, ttl_ms=1000)
        for i in range(5):
            drive.say(i, "ok", .001)
        drive.finish(.001)
    drive.session.health.failed(0, counter(proto, what), what, .002, True)
    return drive


@pytest.mark.parametrize("what", ["timeouts", "connect_errors"])
def test_an_acquisition_skips_a_cooling_master(proto, what):
    drive = _cooling(proto, what, opened_first=True)
    drive.begin(SET, ttl_ms=1000, now=.01)
    assert drive.written[0] == b"" and drive.session.outcomes[0] == SKIPPED
    for i in range(1, 4):
        drive.say(i, "ok", .011)
    (rnd,) = drive.finish(.011)
    assert rnd.outcomes[0] == SKIPPED and "cooling down after 1 failure" in rnd.details[0]
    assert drive.session.health.snapshot(.011)[0][counter(proto, "skipped")] == 1


def test_a_release_still_writes_to_a_refused_master_and_waits_for_it(proto):
    drive = _cooling(proto, "connect_errors", opened_first=False)
    drive.begin(SCRIPT, ttl_ms=0, now=.01)
    assert drive.opened[0] == 1 and drive.written[0] == b"<cmd0>"
    for i in range(1, 5):
        drive.say(i, "ok", .011)
    assert not drive.over()
    drive.say(0, "ok", .012)
    (rnd,) = drive.finish(.012)
    assert list(rnd.outcomes) == [OK] * 5
    assert drive.session.health.mode(0, .012) == HEALTHY  # the reply ended the cool-down


@pytest.mark.parametrize("opened_first, written, outcome", [(True, b"<cmd0>", PENDING), (False, b"", SKIPPED)],
                         ids=["open-best-effort", "closed-skipped"])
def test_a_release_writes_to_a_timed_out_master_only_on_its_open_connection(proto, opened_first, written, outcome):
    drive = _cooling(proto, "timeouts", opened_first)
    drive.begin(SCRIPT, ttl_ms=0, now=.01)
    assert drive.written[0] == written
    for i in range(1, 5):
        drive.say(i, "ok", .011)
    assert drive.over()  # never waited for
    (rnd,) = drive.finish(.011)
    assert rnd.outcomes[0] == outcome and rnd.ok
