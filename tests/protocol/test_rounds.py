"""A round's rules from tables: early decision, validity, owed replies, the EVAL fallback."""
from __future__ import annotations

import pytest

from _drive import Drive

SET, SCRIPT, FENCED, SCRIPT_ACQUIRE, BITS = 0, 1, 2, 3, 4
OK, NO, TIMEOUT, CONN_ERROR, ERROR_REPLY, PROTOCOL_ERROR, UNTRUSTED, PENDING, SKIPPED = range(9)
_ = PENDING


# --- early decision ---------------------------------------------------------------------------------
# (n, kind, early, wait, events, fed when it returns, ok, outcomes)
EARLY = {
    "n1-ok": (1, SET, True, True, [(0, "ok", .001)], 1, True, [OK]),
    "n1-no": (1, SET, True, True, [(0, "no", .001)], 1, False, [NO]),
    "n3-quorum-ok-at-2": (3, SET, True, True, [(0, "ok", .001), (2, "ok", .002), (1, "ok", .003)], 2, True, [OK, _, OK]),
    "n3-split-needs-3": (3, SET, True, True, [(0, "ok", .001), (1, "no", .002), (2, "ok", .003)], 3, True, [OK, NO, OK]),
    "n3-impossible-at-2": (3, SET, True, True, [(0, "no", .001), (1, "no", .002), (2, "ok", .003)], 2, False, [NO, NO, _]),
    "n5-quorum-ok-at-3": (5, SET, True, True, [(i, "ok", .001 * (i + 1)) for i in range(5)], 3, True, [OK, OK, OK, _, _]),
    "n5-impossible-at-3": (5, SET, True, True, [(4, "no", .001), (3, "no", .002), (2, "no", .003), (1, "ok", .004)], 3, False,
                           [_, _, NO, NO, NO]),
    "n5-errors-count-against": (5, SET, True, True, [(0, "err:ERR x", .001), (1, "no", .002), (2, "err:ERR y", .003)], 3,
                                False, [ERROR_REPLY, NO, ERROR_REPLY, _, _]),
    "n5-alternating-needs-5": (5, SET, True, True, [(0, "ok", .001), (1, "no", .002), (2, "ok", .003), (3, "no", .004),
                                                     (4, "ok", .005)], 5, True, [OK, NO, OK, NO, OK]),
    "n5-fenced-at-quorum": (5, FENCED, True, True, [(i, "ok", .001) for i in range(5)], 3, True, [OK, OK, OK, _, _]),
    "n5-lock-all-at-quorum": (5, SCRIPT_ACQUIRE, True, True, [(i, "ok", .001) for i in range(5)], 3, True, [OK, OK, OK, _, _]),
    "n5-early-false-waits-for-all": (5, SET, False, True, [(i, "ok", .001 * (i + 1)) for i in range(5)], 5, True, [OK] * 5),
    "n5-release-waits-for-all": (5, SCRIPT, True, True, [(i, "ok", .001 * (i + 1)) for i in range(5)], 5, True, [OK] * 5),
    "n5-release-no-wait-returns-at-once": (5, SCRIPT, True, False, [(0, "ok", .001)], 0, False, [_] * 5),
    "n5-deadline-ends-the-wait": (5, SET, True, True, [(0, "ok", .001), (1, "ok", .002), (None, "expire", .16)], 3, False,
                                  [OK, OK, TIMEOUT, TIMEOUT, TIMEOUT]),
    "n5-early-false-deadline": (5, SET, False, True, [(i, "ok", .001) for i in range(4)] + [(None, "expire", .16)], 5, True,
                                [OK, OK, OK, OK, TIMEOUT]),
}


@pytest.mark.parametrize("n, kind, early, wait, events, fed, ok, outcomes", list(EARLY.values()), ids=list(EARLY))
def test_acquisition_returns_when_every_key_is_decided(proto, n, kind, early, wait, events, fed, ok, outcomes):
    drive = Drive(proto, n=n, early=early)
    drive.begin(kind, ttl_ms=1000 if kind != SCRIPT else 0, wait=wait)
    (rnd,), got, _t = drive.play(events)
    assert (got, bool(rnd.ok), list(rnd.outcomes)) == (fed, ok, outcomes)
    assert rnd.successes == outcomes.count(OK)


def test_fenced_acquisition_keeps_each_masters_counter(proto):
    drive = Drive(proto, n=3)
    drive.begin(FENCED, ttl_ms=1000)
    drive.reply(0, 7, .001)
    drive.reply(1, 9, .002)
    (rnd,) = drive.finish(.002)
    assert rnd.ok and rnd.values == (7, 9, None)


def test_batch_of_keys_returns_when_each_key_is_decided(proto):
    # one write of 3 SETs per master; key 1 is taken everywhere
    drive = Drive(proto, n=3)
    drive.begin(SET, ttl_ms=1000, rows=3, k=3)
    for i in range(2):
        for word in ("ok", "no", "ok"):
            assert not drive.over()
            drive.say(i, word, .001)
    assert drive.over()
    rounds = drive.finish(.001)
    assert [bool(r.ok) for r in rounds] == [True, False, True]
    assert [list(r.outcomes) for r in rounds] == [[OK, OK, _], [NO, NO, _], [OK, OK, _]]


# --- validity ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ttl_ms, elapsed, drift, expected",
    [(1000, 0.0, 0.01, 988.0), (1000, 0.5, 0.01, 488.0), (10, 0.0, 0.01, 7.9), (100, 0.1, 0.01, -3.0),
     (30000, 0.002, 0.0, 29996.0)],
    ids=["ttl-1s", "half-elapsed", "tiny-ttl", "expired-already", "no-drift"],
)
def test_validity_is_ttl_minus_elapsed_minus_drift(proto, ttl_ms, elapsed, drift, expected):
    assert proto.result.validity_ms(ttl_ms, elapsed, drift) == pytest.approx(expected)


@pytest.mark.parametrize(
    "outcomes, ttl_ms, elapsed, ok",
    [((OK, OK, OK, NO, NO), 1000, 0.01, True),
     ((OK, OK, NO, NO, NO), 1000, 0.01, False),
     ((OK, OK, OK, OK, OK), 13, 0.01, True),   # 13 - 10 - 2.13 > 0
     ((OK, OK, OK, OK, OK), 12, 0.01, False),  # 12 - 10 - 2.12 < 0: a quorum, but no time left
     ((OK, OK, OK, UNTRUSTED, PENDING), 1000, 0.0, True),
     ((OK, OK, UNTRUSTED, UNTRUSTED, PENDING), 1000, 0.0, False),
     ((OK, OK, OK, NO, NO), 0, 5.0, True),     # a release: no validity, a quorum is enough
     ((OK, OK, NO, NO, NO), 0, 0.0, False)],
    ids=["quorum", "no-quorum", "just-valid", "quorum-but-expired", "untrusted-not-counted", "untrusted-breaks-quorum",
         "release-quorum", "release-no-quorum"],
)
def test_decision_needs_a_quorum_and_positive_validity(proto, outcomes, ttl_ms, elapsed, ok):
    rnd = proto.result.decide(outcomes, ttl_ms, elapsed, 100.0, 3, 0.01, None, None)
    assert bool(rnd.ok) is ok
    assert rnd.successes == outcomes.count(OK)
    if ttl_ms:
        assert rnd.validity == pytest.approx(proto.result.validity_ms(ttl_ms, elapsed, 0.01) / 1000.0)
        assert rnd.valid_until == pytest.approx(100.0 + elapsed + rnd.validity)
    else:
        assert rnd.validity == 0.0


@pytest.mark.parametrize("finish_at", [0.010, 0.040], ids=["finish-at-decision", "finish-later"])
def test_validity_is_measured_at_the_deciding_reply(proto, finish_at):
    drive = Drive(proto, n=5)
    drive.begin(SET, ttl_ms=1000, now=100.0)
    for i, t in ((0, 100.002), (1, 100.005), (2, 100.010)):
        drive.say(i, "ok", t)
    assert drive.over()
    (rnd,) = drive.finish(100.0 + finish_at)
    assert rnd.started == 100.0
    assert rnd.elapsed == pytest.approx(0.010)
    assert rnd.validity == pytest.approx((1000 - 10 - 12) / 1000.0)
    assert rnd.valid_until == pytest.approx(100.0 + 0.010 + rnd.validity)


def test_a_round_that_waited_to_its_deadline_is_charged_all_of_it(proto):
    drive = Drive(proto, n=5, early=False)
    drive.begin(SET, ttl_ms=1000, now=0.0)
    for i in range(4):
        drive.say(i, "ok", .001)
    drive.expire(.14)
    assert not drive.over()  # before the deadline nothing is late
    drive.expire(.16)  # a new connection's deadline: io_timeout + connect_timeout
    (rnd,) = drive.finish(.16)
    assert rnd.ok and rnd.elapsed == pytest.approx(.16)
    assert rnd.validity == pytest.approx((1000 - 160 - 12) / 1000.0)


# --- owed replies --------------------------------------------------------------------------------------
def _straggler(proto, kind=SET):
    """A round on 3 masters decided by masters 0 and 1; master 2's reply is owed."""
    drive = Drive(proto, n=3)
    drive.begin(kind, ttl_ms=1000 if kind != SCRIPT else 0)
    drive.say(0, "ok", .001)
    drive.say(1, "ok", .002)
    if kind == SCRIPT:  # a release waits for every master: master 2 missed its deadline (io + connect)
        drive.expire(.16)
    (rnd,) = drive.finish(.16 if kind == SCRIPT else .002)
    return drive, rnd


@pytest.mark.parametrize("word, code, successes", [("ok", OK, 3), ("no", NO, 2)], ids=["late-ok", "late-no"])
def test_straggler_is_pending_then_filled_in_by_its_reply(proto, word, code, successes):
    drive, rnd = _straggler(proto)
    assert rnd.outcomes[2] == PENDING
    assert (drive.session.owed(), drive.session.pending()) == (1, 1)
    assert drive.session.first_owed_deadline() == pytest.approx(.05 + .1)  # io + connect (a new connection)
    drive.say(2, word, .003)
    assert rnd.outcomes[2] == code and rnd.successes == successes
    assert (drive.session.owed(), drive.session.pending()) == (0, 0)


def test_straggler_past_its_deadline_times_out_and_its_reply_counts_late(proto):
    drive, rnd = _straggler(proto)
    drive.tidy(.149)
    assert rnd.outcomes[2] == PENDING
    drive.tidy(.151)
    assert rnd.outcomes[2] == TIMEOUT
    assert (drive.session.owed(), drive.session.pending()) == (1, 0)  # still read, never waited for
    late = proto.outcomes.COUNTERS.index("late_replies")
    assert drive.session.health.snapshot(.2)[2][late] == 0
    drive.say(2, "ok", .2)
    assert rnd.outcomes[2] == TIMEOUT and rnd.successes == 2
    assert drive.session.health.snapshot(.2)[2][late] == 1
    assert drive.session.owed() == 0


def test_a_late_reply_is_matched_with_its_own_request(proto):
    drive, first = _straggler(proto)
    drive.begin(SET, ttl_ms=1000, now=.01)
    assert drive.written[2] == b"<cmd0>" and drive.opened[2] == 1  # behind the owed SET, same connection
    drive.say(2, "no", .011)   # the first round's answer
    assert first.outcomes[2] == NO
    drive.say(2, "ok", .012)   # the second round's
    drive.say(0, "ok", .012)
    (second,) = drive.finish(.012)
    assert list(second.outcomes) == [OK, PENDING, OK]


def test_owed_reply_is_stale_after_stale_after(proto):
    drive, rnd = _straggler(proto)
    deadline = drive.session.first_owed_deadline()
    stale = proto.link.STALE_AFTER
    drive.tidy(deadline + stale - 0.01)
    assert drive.closed[2] == 0 and drive.session.owed() == 1
    drive.tidy(deadline + stale + 0.01)
    assert drive.closed[2] == 1 and drive.session.owed() == 0
    assert rnd.outcomes[2] == TIMEOUT


@pytest.mark.parametrize("owed, stale", [(1, False), ("max", False), ("max+1", True)])
def test_a_connection_owing_more_than_max_owed_is_stale(proto, owed, stale):
    link = proto.link.Link(0, Drive(proto, n=1).links[0].spec, False)
    count = {"max": proto.link.MAX_OWED, "max+1": proto.link.MAX_OWED + 1}.get(owed, owed)
    for _i in range(count):
        link.owe(SET, 10.0, None, False)
    assert link.stale(0.0) is stale


def test_closing_the_session_fails_what_is_owed(proto):
    drive, rnd = _straggler(proto)
    drive.session.close()
    assert rnd.outcomes[2] == CONN_ERROR and drive.session.owed() == 0


def test_release_straggler_timed_out_is_owed_without_a_round(proto):
    drive, rnd = _straggler(proto, SCRIPT)
    assert list(rnd.outcomes) == [OK, OK, TIMEOUT] and rnd.ok
    assert (drive.session.owed(), drive.session.pending()) == (1, 0)


# --- NOSCRIPT -> EVAL ------------------------------------------------------------------------------------
def test_noscript_queues_the_eval_fallback_on_that_link(proto):
    drive = Drive(proto, n=3)
    drive.begin(SCRIPT, ttl_ms=0, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    assert drive.written == [b"<evalsha>"] * 3
    drive.say(0, "ok", .001)
    drive.error(1, "NOSCRIPT No matching script. Please use EVAL.", .001)
    assert drive.written[1] == b"<evalsha><eval>"
    assert drive.session.outcomes[1] == PENDING
    drive.say(2, "ok", .002)
    assert not drive.over()
    drive.say(1, "ok", .003)
    (rnd,) = drive.finish(.003)
    assert list(rnd.outcomes) == [OK, OK, OK]


def test_noscript_twice_for_one_command_is_an_error_reply(proto):
    drive = Drive(proto, n=1)
    drive.begin(SCRIPT, ttl_ms=0, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    drive.error(0, "NOSCRIPT x", .001)
    drive.error(0, "NOSCRIPT y", .002)
    (rnd,) = drive.finish(.002)
    assert list(rnd.outcomes) == [ERROR_REPLY] and rnd.details == ("NOSCRIPT y",)


def test_a_round_nobody_waits_for_sends_eval_at_once(proto):
    drive = Drive(proto, n=2)
    drive.begin(SCRIPT, ttl_ms=0, wait=False, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    assert drive.over() and drive.written == [b"<eval>"] * 2


def test_a_late_noscript_makes_the_next_script_round_send_eval(proto):
    drive = Drive(proto, n=1)
    drive.begin(SCRIPT, ttl_ms=0, wait=False, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    drive.finish(0.0)
    drive.begin(SCRIPT, ttl_ms=0, now=.01, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    assert drive.written == [b"<evalsha>"]
    drive.error(0, "NOSCRIPT owed", .011)  # the answer owed to the first round
    drive.say(0, "ok", .012)
    drive.finish(.012)
    drive.begin(SCRIPT, ttl_ms=0, now=.02, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    assert drive.written == [b"<eval>"]
