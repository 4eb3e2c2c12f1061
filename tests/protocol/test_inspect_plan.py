"""Inspecting a lock, from tables: what the read round sends, how a master's GET/PTTL answers read,
the lock's state and how long a quorum keeps it, and how the read round treats cooling masters."""
from __future__ import annotations

import pytest

from _drive import Drive

from fastredlock.protocol.outcomes import CONN_ERROR, ERROR_REPLY, NO, OK, PENDING, SKIPPED, TIMEOUT

READ = 5
T = b"0123456789abcdef0123456789abcdef:1"  # a value some master holds
U = b"other"


def test_the_read_kind_is_not_an_acquisition(proto):
    assert proto.replies.KIND_READ == READ
    assert not proto.replies.is_acquisition(READ)


@pytest.mark.parametrize("reply, expected", [
    (b"tok", (OK, None, b"tok")), (None, (NO, None, None)), (1500, (OK, None, 1500)), (-1, (OK, None, -1)),
    (-2, (OK, None, -2)), (0, (OK, None, 0)),
], ids=["bulk", "nil", "pttl", "no-expiry", "gone", "zero"])
def test_classify_a_read(proto, reply, expected):
    assert tuple(proto.replies.classify(READ, reply)) == expected


def test_the_inspection_reads_value_ttl_and_fence_of_each_key(proto):
    assert proto.plans.inspect_args([b"a", b"b"], [b"{a}f", b"{b}f"]) == [
        (b"GET", b"a"), (b"PTTL", b"a"), (b"GET", b"{a}f"), (b"GET", b"b"), (b"PTTL", b"b"), (b"GET", b"{b}f")]
    assert proto.plans.INSPECT_ROWS == 3


@pytest.mark.parametrize("get, pttl, expected", [
    ((OK, T), (OK, 900), (OK, T, 900)),
    ((OK, T), (OK, -1), (OK, T, -1)),          # held without expiry
    ((OK, T), (OK, -2), (NO, None, -2)),       # expired between the GET and the PTTL
    ((NO, None), (OK, -2), (NO, None, -2)),
    ((TIMEOUT, None), (TIMEOUT, None), (TIMEOUT, None, -2)),
    ((ERROR_REPLY, None), (OK, 5), (ERROR_REPLY, None, -2)),  # WRONGTYPE: not a lock we can read
    ((OK, T), (CONN_ERROR, None), (CONN_ERROR, None, -2)),
], ids=["held", "no-expiry", "expired-between", "free", "timeout", "error-reply", "broke-after-get"])
def test_read_view(proto, get, pttl, expected):
    assert tuple(proto.plans.read_view(get[0], get[1], pttl[0], pttl[1])) == expected


@pytest.mark.parametrize("code, value, fence", [(OK, b"12", 12), (NO, None, None), (OK, b"x", None),
                                                (TIMEOUT, None, None)])
def test_fence_value(proto, code, value, fence):
    assert proto.plans.fence_value(code, value) == fence


def _summary(proto, rows, elapsed=0.002, drift=0.01):
    codes = [r[0] for r in rows]
    values = [r[1] for r in rows]
    ttls = [r[2] for r in rows]
    return tuple(proto.plans.inspect_summary(codes, values, ttls, len(rows) // 2 + 1, elapsed, drift))


HELD_ROW = (OK, T, 1000)
FREE_ROW = (NO, None, -2)
DOWN_ROW = (TIMEOUT, None, -2)


@pytest.mark.parametrize("rows, state, holders", [
    ([HELD_ROW] * 5, "held", 5),
    ([HELD_ROW] * 3 + [FREE_ROW, DOWN_ROW], "held", 3),
    ([HELD_ROW] * 2 + [FREE_ROW] * 3, "partial", 2),
    ([HELD_ROW, (OK, U, 500), (OK, U, 500), FREE_ROW, FREE_ROW], "partial", 2),
    ([FREE_ROW] * 5, "free", 0),
    ([FREE_ROW] * 3 + [DOWN_ROW] * 2, "free", 0),
    ([FREE_ROW] * 2 + [DOWN_ROW] * 3, "unknown", 0),
    ([HELD_ROW] * 2 + [FREE_ROW, DOWN_ROW, (SKIPPED, None, -2)], "unknown", 2),
    ([HELD_ROW, (ERROR_REPLY, None, -2), FREE_ROW], "unknown", 1),
], ids=["held-everywhere", "held-by-quorum", "minority", "split-votes", "free", "free-with-two-down",
        "too-few-answered", "minority-and-down", "error-counts-as-silent"])
def test_the_state_of_a_lock(proto, rows, state, holders):
    got = _summary(proto, rows)
    assert got[0] == state and got[2] == holders
    if state != "held":
        assert got[3:] == (0.0, 0.0)


def test_how_long_a_quorum_keeps_it_is_bounded_both_ways(proto):
    # 5 masters holding the same value with different PTTLs: the quorum (3rd longest) decides
    rows = [(OK, T, 1000), (OK, T, 900), (OK, T, 800), (OK, T, 100), (NO, None, -2)]
    state, value, holders, low, high = _summary(proto, rows, elapsed=0.004, drift=0.01)
    assert (state, value, holders) == ("held", T, 4)
    assert low == pytest.approx(proto.result.validity_ms(800, 0.004, 0.01))  # as an acquisition's validity
    assert low == pytest.approx(800 - 4 - (8 + 2))
    assert high == pytest.approx(800 + 8 + 2)


def test_no_expiry_on_a_quorum_is_held_forever(proto):
    rows = [(OK, T, -1), (OK, T, -1), (OK, T, -1), (OK, T, 300), (NO, None, -2)]
    assert _summary(proto, rows)[3:] == (-1.0, -1.0)
    rows = [(OK, T, -1), (OK, T, -1), (OK, T, 300), (NO, None, -2), (NO, None, -2)]
    assert 290 < _summary(proto, rows)[3] < 300  # two of three without expiry: the third decides
    rows = [(OK, T, -1), (OK, T, 300), (OK, T, 200), (NO, None, -2), (NO, None, -2)]
    low, high = _summary(proto, rows)[3:]  # the one without expiry outlasts the rest: the 3rd is 200
    assert 150 < low < 200 < high < 210


def test_validity_never_goes_below_zero(proto):
    rows = [(OK, T, 1)] * 3
    low, high = _summary(proto, rows, elapsed=0.010)[3:]
    assert low == 0.0 and high > 1


# --- the read round in the session ----------------------------------------------------------------
def test_a_read_round_waits_for_every_master_and_keeps_values(proto):
    drive = Drive(proto, n=3)
    drive.begin(READ, ttl_ms=0, rows=3, k=3)
    for i in range(3):
        drive.reply(i, T if i else None, .001)
        assert not drive.over()
        drive.reply(i, 700 if i else -2, .001)
        drive.reply(i, b"4", .001)
    assert drive.over()
    get, pttl, fence = drive.finish(.002)
    assert list(get.outcomes) == [NO, OK, OK] and list(get.values) == [None, T, T]
    assert list(pttl.values) == [-2, 700, 700] and list(fence.values) == [b"4"] * 3
    assert get.elapsed == pytest.approx(.002)


def test_a_read_skips_a_master_cooling_after_a_timeout_even_with_its_connection_open(proto):
    drive = Drive(proto, n=3, health=proto.health.Health(3, cooldown=1.0))
    drive.begin(0, ttl_ms=1000)  # an acquisition opens every connection
    for i in range(3):
        drive.say(i, "ok", .001)
    drive.finish(.001)
    drive.session.health.failed(0, 2, "timeout", .002, True)  # counter 2: timeouts
    drive.begin(READ, ttl_ms=0, rows=3, k=3, now=.01)
    assert drive.written[0] == b""  # a release would be written there, best effort: a read is not
    for i in (1, 2):
        for reply in (None, -2, None):
            drive.reply(i, reply, .011)
    assert drive.over()
    rounds = drive.finish(.011)
    assert [r.outcomes[0] for r in rounds] == [SKIPPED] * 3 and PENDING not in rounds[0].outcomes


def test_a_read_still_asks_a_master_that_refused_connections(proto):
    drive = Drive(proto, n=3, health=proto.health.Health(3, cooldown=1.0))
    drive.session.health.failed(0, 3, "connection refused", .002, True)  # counter 3: connect errors
    drive.begin(READ, ttl_ms=0, rows=3, k=3, now=.01)
    assert drive.opened[0] == 1 and drive.written[0]
