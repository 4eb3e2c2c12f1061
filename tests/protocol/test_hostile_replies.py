"""Hostile reply *content*, from tables: what a master's bytes make of its outcome, without a socket.

``faults/test_hostile_masters.py`` runs a :class:`~fastredlock.testing.FakeMaster` for what only a
socket can show (a close, a reset, a reply cut short, silence). Everything else a hostile master can
do is a stream of bytes, fed here as the I/O twins feed it: the reply guard first
(``Session.received``), then the reader (hiredis, or the pure one), then ``Session.reply`` /
``parse_failed`` / ``drained`` -- on both builds of the protocol and with every reader installed.
"""
from __future__ import annotations

import pytest

from fastredlock.io import reader, reader_py
from fastredlock.testing import HOSTILE_REPLIES, Stream

from _drive import Drive

OK, NO, TIMEOUT, CONN_ERROR, ERROR_REPLY, PROTOCOL_ERROR, PENDING = 0, 1, 2, 3, 4, 5, 7
NAMES = {OK: "ok", NO: "no", TIMEOUT: "timeout", CONN_ERROR: "connection error", ERROR_REPLY: "error reply",
         PROTOCOL_ERROR: "protocol error"}
#: What each hostile reply must be reported as (the same table as faults/test_hostile_masters.py).
EXPECTED = {
    "garbage": {"protocol error"},
    "unknown type byte": {"protocol error"},
    "bad integer": {"protocol error"},
    "negative bulk length": {"protocol error"},
    "error": {"error reply"},
    "wrong type": {"protocol error"},
    "wrong type array": {"protocol error"},
    "wrong type map": {"protocol error"},
    "resp3 double": {"protocol error"},
    "huge bulk header": {"timeout", "protocol error"},
    "huge bulk streamed": {"timeout", "protocol error"},
    "huge array header": {"protocol error"},
    "never-ending array": {"timeout", "protocol error"},
    "never-ending nesting": {"protocol error"},
    "never-ending line": {"timeout", "protocol error"},
    "two replies": {"ok", "protocol error"},
}
#: Behaviours only a socket can show: faults/test_hostile_masters.py keeps them.
SOCKET_CASES = {"truncated", "half then close", "half then reset", "close", "silent"}
assert set(EXPECTED) | SOCKET_CASES == set(HOSTILE_REPLIES)
CASES = [pytest.param(case, id=case.replace(" ", "-")) for case in EXPECTED]
READERS = [pytest.param(reader_py, id="pure-reader")] + (
    [pytest.param(reader, id="hiredis")] if reader.PARSER == "hiredis" else [])
#: Most bytes a streaming case may push before the guard (or the round) stops it: a reply to a
#: lock command is a few bytes, so a master streaming megabytes is cut off, not buffered.
STREAM_LIMIT = 4 << 20


def _chunks(behaviour):
    if isinstance(behaviour, Stream):
        yield behaviour.head
        sent = len(behaviour.head)
        while sent < STREAM_LIMIT:
            yield behaviour.chunk
            sent += len(behaviour.chunk)
    else:
        yield behaviour


def _feed(drive, reader_module, i, behaviour, now):
    """Master ``i``'s bytes, as the I/O twin reads them; returns how many bytes the reader got."""
    session, link, reader, parsed = drive.session, drive.links[i], reader_module.Reader(), 0
    for data in _chunks(behaviour):
        if not data:
            continue
        good = session.received(i, data, 0, len(data), now)
        refused = good < len(data)  # the guard cuts the connection off after the replies before
        data = data[:good]
        reader.feed(data)
        parsed += len(data)
        failed = False
        while link.expecting():
            try:
                reply = reader.gets()
            except Exception as exc:  # ProtocolError, or MemoryError on absurd headers
                session.parse_failed(i, f"{type(exc).__name__}: {exc}", now)
                failed = True
                break
            if reply is False:
                break
            if isinstance(reply, reader_module.ReplyError):
                alive = session.reply(i, None, str(reply), now)
            else:
                alive = session.reply(i, reply, None, now)
            if not alive:
                failed = True
                break
        if failed:
            break
        if refused:
            session.refused(i, now)
            break
        session.drained(i, reader.has_data(), now)
        if not link.expecting():
            break
    drive.sync()
    return parsed


def _round(proto, reader_module, case, n):
    drive = Drive(proto, n=n)
    drive.begin(kind=0, now=0.0)
    hostile = n - 1
    parsed = _feed(drive, reader_module, hostile, HOSTILE_REPLIES[case], 0.001)
    for i in range(hostile):
        drive.say(i, "ok", 0.002)
    if not drive.over():
        drive.expire(1.0)  # past io_timeout + connect_timeout
    (rnd,) = drive.finish(1.0)
    if rnd.outcomes[hostile] == PENDING:  # decided at quorum before it: settled by its deadline
        drive.tidy(2.0)
    return drive, rnd, parsed


@pytest.mark.parametrize("reader_module", READERS)
@pytest.mark.parametrize("case", CASES)
def test_hostile_reply_counts_as_no_beside_four_good_masters(proto, reader_module, case):
    drive, rnd, parsed = _round(proto, reader_module, case, 5)
    assert rnd.ok and list(rnd.outcomes[:4]) == [OK] * 4
    outcome = NAMES[rnd.outcomes[4]]
    assert outcome in EXPECTED[case], (outcome, rnd)
    if outcome in ("protocol error", "error reply"):
        assert rnd.details is not None and rnd.details[4], rnd  # a clear reason for the operator
    if case == "error":
        assert "the fake master refuses" in rnd.details[4]
    assert parsed <= (1 << 20) + (64 << 10), parsed  # cut off at the guard's bulk limit, never buffered
    if outcome != "ok":
        assert drive.closed[4] or drive.links[4].closing or not drive.links[4].expecting()


@pytest.mark.parametrize("reader_module", READERS)
@pytest.mark.parametrize("case", CASES)
def test_hostile_single_master_is_not_acquired(proto, reader_module, case):
    _, rnd, _ = _round(proto, reader_module, case, 1)
    if case == "two replies":  # +OK to the SET; the extra reply only breaks the connection after it
        assert NAMES[rnd.outcomes[0]] in EXPECTED[case]
        return
    assert not rnd.ok and NAMES[rnd.outcomes[0]] in EXPECTED[case], rnd
