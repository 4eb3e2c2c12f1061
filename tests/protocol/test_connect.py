"""A new connection from tables: the handshake's bytes and answers, and restart-aware voting."""
from __future__ import annotations

import pytest

from _drive import Drive, specs

SET, SCRIPT = 0, 1
OK, NO, TIMEOUT, CONN_ERROR, ERROR_REPLY, PROTOCOL_ERROR, UNTRUSTED, PENDING = range(8)
INFO = b"# Server\r\nredis_version:7.2.4\r\nrun_id:%s\r\nuptime_in_seconds:%d\r\n"


# --- handshake bytes ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, restart_aware, hello, kinds",
    [
        ("redis://127.0.0.1:7000", False, b"", ()),
        ("redis://:pw@127.0.0.1:7000", False, b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n", (0,)),
        ("redis://u:pw@127.0.0.1:7000", False, b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n", (0,)),
        ("redis://127.0.0.1:7000/3", False, b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n", (1,)),
        ("redis://127.0.0.1:7000", True, b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n", (2,)),
        ("redis://:pw@127.0.0.1:7000/12", True,
         b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$2\r\n12\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n", (0, 1, 2)),
    ],
    ids=["none", "auth", "acl-user", "select", "info", "auth-select-info"],
)
def test_handshake_bytes(proto, url, restart_aware, hello, kinds):
    assert proto.handshake.handshake(specs(1, url)[0], restart_aware) == (hello, kinds)


def test_new_connections_load_every_script_before_the_first_commands(proto):
    hs = proto.handshake
    loads = hs.PRELOAD.split(b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n")
    assert loads[0] == b"" and len(loads) == len(hs.PRELOADED) + 1
    for script, load in zip(hs.PRELOADED, loads[1:]):
        assert load == b"$%d\r\n%s\r\n" % (len(script), script)
    for script in (proto.scripts.RELEASE, proto.scripts.ACQUIRE_QUEUED, proto.family.READ_ACQUIRE,
                   proto.family.WRITE_ACQUIRE, proto.family.RLOCK_ACQUIRE):
        assert script in hs.PRELOADED
    n = len(hs.PRELOADED)
    for url, hello in (("redis://127.0.0.1:7000", 0), ("redis://:pw@127.0.0.1:7000", 1)):
        drive = Drive(proto, n=1, url=url)
        drive.session.links[0].preload = hs.PRELOAD  # what the cores ask for (Session(..., preload=True))
        drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"])
        if hello:  # the handshake goes alone; the loads are written with the commands, not gated
            assert b"SCRIPT" not in drive.written[0]
            drive.reply(0, b"OK", .001)
        assert drive.written[0].endswith(hs.PRELOAD + b"<evalsha>")
        for k in range(n):  # their answers are dropped, a refusal too (an ACL without SCRIPT)
            if k == 0:
                assert drive.reply(0, None, .002, error="NOPERM this user has no permissions")
            else:
                assert drive.reply(0, b"0" * 40, .002)
            assert not drive.over()
        drive.say(0, "ok", .003)
        (rnd,) = drive.finish(.003)
        assert rnd.ok and rnd.outcomes == (OK,)


def test_handshake_goes_alone_then_the_commands(proto):
    drive = Drive(proto, n=1, url="redis://:pw@127.0.0.1:7000/2")
    drive.begin(SET)
    assert drive.written[0].startswith(b"*2\r\n$4\r\nAUTH") and b"<cmd0>" not in drive.written[0]
    drive.reply(0, b"OK", .001)
    assert b"<cmd0>" not in drive.written[0]
    drive.reply(0, b"OK", .002)
    assert drive.written[0].endswith(b"<cmd0>")
    drive.say(0, "ok", .003)
    (rnd,) = drive.finish(.003)
    assert rnd.ok


@pytest.mark.parametrize(
    "url, restart_aware, answers, detail",
    [
        ("redis://:pw@127.0.0.1:7000", False, [("err", "WRONGPASS invalid password")], "AUTH failed: WRONGPASS"),
        ("redis://127.0.0.1:7000/2", False, [("err", "ERR DB index is out of range")], "SELECT failed: ERR DB index"),
        ("redis://127.0.0.1:7000", True, [("err", "NOPERM no info")], "pass restart_aware=False where INFO"),
        ("redis://127.0.0.1:7000", True, [("ok", b"# Server\r\nrun_id:abc\r\n")], "no uptime_in_seconds"),
        ("redis://127.0.0.1:7000", True, [("ok", 42)], "INFO server: unexpected reply"),
    ],
    ids=["auth-fails", "select-fails", "info-denied", "info-without-uptime", "info-not-bulk"],
)
def test_a_failing_handshake_fails_the_link_with_an_error_reply(proto, url, restart_aware, answers, detail):
    drive = Drive(proto, n=1, url=url, restart_aware=restart_aware)
    drive.begin(SET)
    for how, value in answers:
        alive = drive.error(0, value, .001) if how == "err" else drive.reply(0, value, .001)
    assert alive is False and drive.closed[0] == 1
    assert b"<cmd0>" not in drive.written[0]  # no command of ours ran unchecked
    (rnd,) = drive.finish(.001)
    assert rnd.outcomes == (ERROR_REPLY,) and detail in rnd.details[0]


@pytest.mark.parametrize(
    "info, expected",
    [(INFO % (b"abc", 42), (b"abc", 42)), (b"uptime_in_seconds:7\r\n", (None, 7)), (b"run_id:x\r\n", (b"x", None)),
     (b"uptime_in_seconds:soon\r\n", (None, None)), (b"", (None, None))],
    ids=["full", "uptime-only", "no-uptime", "bad-uptime", "empty"],
)
def test_parse_info_server(proto, info, expected):
    assert proto.handshake.parse_info_server(info) == expected


# --- restart-aware voting -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "uptime, grace_ms, at, untrusted",
    [(5, 10000, 0.0, True), (5, 4000, 0.0, False), (5, 10000, 5.5, True), (5, 10000, 6.0, False),
     (1, 1000, 0.99, True), (1, 1000, 1.0, False), (0, 1, 0.0, True), (0, 0, 0.0, False)],
    ids=["younger-than-grace", "older-than-grace", "uptime-may-be-a-second-less", "grown-past-grace",
         "one-second-may-be-none", "one-second-then-grace", "just-started", "no-grace"],
)
def test_master_clock_distrusts_a_master_younger_than_the_grace(proto, uptime, grace_ms, at, untrusted):
    clock = proto.voting.MasterClock()
    assert not clock.untrusted(100.0, grace_ms)  # nothing known: trusted
    clock.learned(b"run1", uptime, 100.0)
    assert clock.untrusted(100.0 + at, grace_ms) is untrusted
    code, _detail = clock.acquisition_outcome(OK, None, False, 100.0 + at, grace_ms)
    assert code == (UNTRUSTED if untrusted else OK)


@pytest.mark.parametrize(
    "code, retried, expected", [(NO, True, CONN_ERROR), (NO, False, NO), (OK, True, OK)],
    ids=["resent-no", "plain-no", "resent-ok"],
)
def test_a_resent_commands_no_is_not_a_clear_no(proto, code, retried, expected):
    clock = proto.voting.MasterClock()
    assert clock.acquisition_outcome(code, None, retried, 1.0, 0)[0] == expected


def test_master_clock_counts_restarts_by_run_id(proto):
    clock = proto.voting.MasterClock()
    for run_id, now in ((b"a", 10.0), (b"a", 20.0), (b"b", 30.0), (b"c", 40.0)):
        clock.learned(run_id, 3, now)
    assert clock.state() == (b"c", 38.0, 2)  # uptime 3 may be 2.01 s: started at 38 at the latest


@pytest.mark.parametrize("uptime, outcome", [(1, UNTRUSTED), (3600, OK)], ids=["restarted", "up-long"])
def test_a_round_reads_info_and_votes(proto, uptime, outcome):
    drive = Drive(proto, n=1, restart_aware=True)
    drive.session.restart_grace_ms = 30000
    drive.begin(SET, now=5000.0)  # (monotonic time: the master started uptime seconds before)
    assert drive.written[0] == b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"
    drive.reply(0, INFO % (b"abc", uptime), 5000.001)
    assert drive.written[0].endswith(b"<cmd0>")
    drive.say(0, "ok", 5000.002)
    (rnd,) = drive.finish(5000.002)
    assert rnd.outcomes == (outcome,) and bool(rnd.ok) is (outcome == OK)


def test_a_reused_connection_that_breaks_is_reopened_and_its_resent_no_is_a_conn_error(proto):
    drive = Drive(proto, n=3)
    drive.begin(SET)
    for i in range(3):
        drive.say(i, "ok", .001)
    drive.finish(.001)
    drive.begin(SET, now=.01)
    drive.io_failed(0, .011)  # the idle connection was dead: reopen, send again once
    assert (drive.closed[0], drive.opened[0]) == (1, 2) and drive.written[0] == b"<cmd0><cmd0>"
    drive.say(0, "no", .012)   # our first SET may have run: not a clear "no"
    drive.say(1, "ok", .012)
    drive.say(2, "ok", .012)
    (rnd,) = drive.finish(.012)
    assert list(rnd.outcomes) == [CONN_ERROR, OK, OK] and "resent" in rnd.details[0]


def test_a_second_break_is_a_connection_error(proto):
    drive = Drive(proto, n=1)
    drive.begin(SET)
    drive.say(0, "ok", .001)
    drive.finish(.001)
    drive.begin(SET, now=.01)
    drive.io_failed(0, .011)
    drive.io_failed(0, .012)
    (rnd,) = drive.finish(.012)
    assert rnd.outcomes == (CONN_ERROR,) and drive.closed[0] == 2
