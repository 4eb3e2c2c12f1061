"""Sentinel masters from tables: what the sentinels' answers mean, the role check, when to ask again,
and restart-aware voting after a promotion (no sentinel, no server: the rules of protocol/sentinel.py
as the session applies them)."""
from __future__ import annotations

import pytest

from _drive import Drive

SET = 0
OK, NO, TIMEOUT, CONN_ERROR, ERROR_REPLY, PROTOCOL_ERROR, UNTRUSTED, PENDING, SKIPPED, TLS_ERROR, SENTINEL_ERROR = range(11)
URL = "redis+sentinel://127.0.0.1:%d/svc"
INFO = b"# Server\r\nrun_id:abc\r\nuptime_in_seconds:%d\r\n"
REPL = b"# Replication\r\nrole:%s\r\nmaster_replid:x\r\nsecond_repl_offset:%d\r\n"
ADDR = ("127.0.0.1", 6400)


def test_the_sentinel_query_and_its_answers(proto):
    from fastredlock.io.masters import SentinelSpec

    out, replies = proto.sentinel.sentinel_query(SentinelSpec((("h", 1),), "svc", None, "pw"))
    assert replies == 3 and out.startswith(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n")
    assert out.endswith(b"*3\r\n$8\r\nSENTINEL\r\n$6\r\nMASTER\r\n$3\r\nsvc\r\n")
    assert proto.sentinel.master_address([b"10.0.0.1", b"6380"]) == ("10.0.0.1", 6380)
    assert proto.sentinel.master_address(None) is None  # the service is unknown to that sentinel
    here = [b"name", b"svc", b"ip", b"127.0.0.1", b"port", b"6400"]
    assert proto.sentinel.role_age_ms(here + [b"role-reported", b"master", b"role-reported-time", b"1500"], ADDR) == 1500
    assert proto.sentinel.role_age_ms(here + [b"role-reported", b"slave", b"role-reported-time", b"1500"], ADDR) == -1
    # the failover's leader: it names the promoted replica, its SENTINEL MASTER still the old master
    assert proto.sentinel.role_age_ms(here + [b"role-reported-time", b"1500"], ("127.0.0.1", 6401)) == 0
    assert proto.sentinel.role_age_ms(Exception("ERR No such master with that name"), ADDR) == -1
    assert proto.sentinel.asks_again("READONLY You can't write against a read only replica.")
    assert proto.sentinel.asks_again("LOADING Redis is loading the dataset in memory")
    assert not proto.sentinel.asks_again("NOSCRIPT No matching script")


@pytest.mark.parametrize("restart_aware, kinds", [(True, (2, 4)), (False, (3,))])
def test_a_sentinel_masters_handshake_checks_its_role(proto, restart_aware, kinds):
    drive = Drive(proto, n=1, url=URL, restart_aware=restart_aware)
    assert drive.links[0].hello_kinds == kinds
    assert drive.links[0].hello.endswith(b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n")


@pytest.mark.parametrize(
    "age_ms, second, outcome",
    [(2000, 10, UNTRUSTED),     # promoted 2 s ago (the sentinels say): its uptime of an hour does not matter
     (2000, -1, OK),            # never a replica since it started: the sentinel's time is its own (re)start
     (60000, 10, OK),           # promoted a minute ago, longer than the grace
     (-1, 10, UNTRUSTED)],      # promoted, and nobody says when: from now on
    ids=["promoted-recently", "never-a-replica", "promoted-long-ago", "promoted-unknown-when"],
)
def test_a_promoted_replica_counts_as_restarted_at_its_promotion(proto, age_ms, second, outcome):
    drive = Drive(proto, n=1, url=URL, restart_aware=True)
    drive.session.restart_grace_ms = 30000
    drive.begin(SET, now=5000.0)
    drive.session.resolved(0, ADDR, age_ms, 5000.0)
    drive.reply(0, INFO % 3600, 5000.001)
    drive.reply(0, REPL % (b"master", second), 5000.001)
    drive.say(0, "ok", 5000.002)
    (rnd,) = drive.finish(5000.002)
    assert rnd.outcomes == (outcome,)


def test_a_failover_seen_by_this_client_counts_when_the_sentinels_do_not_say(proto):
    clock = proto.voting.MasterClock()
    proto.sentinel.resolved(clock, ADDR, -1, 10.0)
    assert clock.reported_since == -1.0  # the first answer: nothing seen to change
    proto.sentinel.resolved(clock, ("127.0.0.1", 6401), -1, 20.0)
    assert clock.reported_since == 20.0  # another address: a failover since the last connect


def test_a_server_that_is_not_a_master_is_a_sentinel_error(proto):
    drive = Drive(proto, n=3, url=URL)
    drive.begin(SET)
    drive.session.resolved(0, ADDR, 100, 0.0)
    drive.reply(0, REPL % (b"slave", -1), .001)
    for i in (1, 2):
        drive.reply(i, REPL % (b"master", -1), .001)
        drive.say(i, "ok", .002)
    (rnd,) = drive.finish(.002)
    assert list(rnd.outcomes) == [SENTINEL_ERROR, OK, OK]
    assert "127.0.0.1:6400 is not a master (role:slave)" in rnd.details[0]
    assert drive.closed[0] == 1 and drive.session.health.snapshot(.002)[0][3] == 1  # a connect error


def test_no_sentinel_answering_is_a_sentinel_error(proto):
    drive = Drive(proto, n=1, url=URL)
    drive.begin(SET)
    drive.session.sentinel_failed(0, "no sentinel named the master of 'svc'", .001)
    drive.sync()
    (rnd,) = drive.finish(.001)
    assert rnd.outcomes == (SENTINEL_ERROR,) and drive.over()


@pytest.mark.parametrize("url, closed", [(URL, 1), ("redis://127.0.0.1:%d", 0)], ids=["sentinel", "plain"])
def test_readonly_closes_a_sentinel_masters_connection_only(proto, url, closed):
    drive = Drive(proto, n=1, url=url)
    drive.begin(SET)
    if url == URL:
        drive.reply(0, REPL % (b"master", -1), .001)
    drive.error(0, "READONLY You can't write against a read only replica.", .002)
    (rnd,) = drive.finish(.002)
    assert rnd.outcomes == (ERROR_REPLY,) and drive.closed[0] == closed  # closed: the next connect asks again


def test_time_spent_asking_the_sentinels_moves_the_other_masters_deadlines(proto):
    drive = Drive(proto, n=3, url="redis://127.0.0.1:%d")
    drive.begin(SET)
    for i in range(3):
        drive.say(i, "ok", .001)
    drive.finish(.001)
    drive.begin(SET, now=1.0)  # reused connections: deadline 1.05
    drive.session.blocked(0, 0.5)
    assert [link.deadline for link in drive.links] == [1.05, 1.55, 1.55]
    drive.expire(1.1)
    assert not drive.over()  # nobody is late yet
