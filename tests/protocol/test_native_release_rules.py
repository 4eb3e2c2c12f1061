"""The native release and links that refuse scripts, from tables (no server).

A native release writes the owner-checked delete and ``EXISTS`` of the wake mark per key and reads
the two replies as one answer; where it deleted and found the mark, the waiters' work
(``WAKE_AFTER``) follows and its answer is the release's; a pair read as owed replies does the
same behind the round. A link whose ``SCRIPT LOAD`` was refused for want of the right sends no
script: a round that needs one, and an acquisition where no native delete exists, are refused
there before anything is written.
"""
from __future__ import annotations

from _drive import Drive

OK, NO, ERROR_REPLY = 0, 1, 4
SCRIPT, SET = 1, 0


def native_link(proto, n=1, probes=(None, 0, 0), script_error="NOSCRIPT No matching script.", load_error=None):
    """A Drive whose links load the scripts and probe; every link answered as ``probes`` says, its
    script probe with ``script_error`` (NOSCRIPT: scripts allowed) and its SCRIPT LOADs with
    ``load_error`` (if given)."""
    hs = proto.handshake
    drive = Drive(proto, n=n)
    for link in drive.links:
        link.probe = hs.PROBE + hs.SCRIPT_PROBE
        link.preload = b"<load>"
    drive.begin(SET, payload=b"<set>")
    for i in range(n):
        # (PRELOADED's count of SCRIPT LOAD answers, then the probes)
        for _ in range(len(hs.PRELOADED)):
            assert drive.reply(i, None if load_error else b"sha", .001, error=load_error)
        for k in range(hs.PROBES):
            assert drive.reply(i, probes[k], .001, error=None if probes[k] is not None or k == 0 else "ERR unknown command")
        assert drive.reply(i, None, .001, error=script_error)
    return drive


def release_forms(proto, key=b"k"):
    return proto.handshake.native_releases((key,), (b"t",))


def test_a_release_without_waiters_is_the_delete_and_a_look_at_the_mark(proto):
    drive = native_link(proto)
    drive.say(0, "ok", .002)
    drive.finish(.002)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=release_forms(proto), now=1.0)
    assert drive.written[0] == release_forms(proto)[0][1]  # DELEX + EXISTS (the first form it runs)
    assert drive.reply(0, 1, 1.001) and not drive.over()  # the delete's :1 alone decides nothing
    assert drive.reply(0, 0, 1.001)  # no mark
    (rnd,) = drive.finish(1.001)
    assert rnd.outcomes == (OK,) and rnd.details is None
    assert drive.written[0] == release_forms(proto)[0][1]  # nothing followed


def test_a_release_that_finds_the_mark_does_the_waiters_work_behind_it(proto):
    hs = proto.handshake
    drive = native_link(proto)
    drive.say(0, "ok", .002)
    drive.finish(.002)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=release_forms(proto), now=1.0)
    drive.reply(0, 1, 1.001)
    drive.reply(0, 1, 1.001)  # the mark is there: someone waits
    assert drive.written[0].endswith(hs.wake_after(b"k", False)) and not drive.over()
    drive.reply(0, 3, 1.002)  # WAKE_AFTER gave the turn
    (rnd,) = drive.finish(1.002)
    assert rnd.outcomes == (OK,) and rnd.details == (proto.replies.TURN,)


def test_a_waiters_work_that_fails_leaves_the_release_done(proto):
    drive = native_link(proto)
    drive.say(0, "ok", .002)
    drive.finish(.002)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=release_forms(proto), now=1.0)
    drive.reply(0, 1, 1.001)
    drive.reply(0, 1, 1.001)
    drive.error(0, "NOSCRIPT No matching script.", 1.002)
    (rnd,) = drive.finish(1.002)
    assert rnd.outcomes == (OK,)  # deleted; nobody woken by it
    assert drive.links[0].use_eval  # the next waiters' work goes as EVAL


def test_not_the_owner_or_a_refused_mark_wakes_nobody(proto):
    drive = native_link(proto)
    drive.say(0, "ok", .002)
    drive.finish(.002)
    for first, second, error, outcome in ((0, 1, None, NO), (1, None, "NOPERM No permissions to access a key", OK)):
        drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=release_forms(proto), now=1.0)
        drive.reply(0, first, 1.001)
        drive.reply(0, second, 1.001, error=error)
        (rnd,) = drive.finish(1.001)
        assert rnd.outcomes == (outcome,) and drive.written[0] == release_forms(proto)[0][1]


def test_an_unwaited_release_does_the_waiters_work_when_its_answers_are_read(proto):
    hs = proto.handshake
    drive = native_link(proto)
    drive.say(0, "ok", .002)
    drive.finish(.002)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=release_forms(proto), wait=False, now=1.0)
    (rnd,) = drive.finish(1.0)
    assert drive.session.pending() == 1
    drive.session.settle_wait(-1.0)
    drive.reply(0, 1, 1.001)
    drive.reply(0, 1, 1.001)  # read while settling: the waiters' work goes at once
    assert drive.written[0].endswith(hs.wake_after(b"k", False))
    assert rnd.outcomes == (proto.outcomes.PENDING,)
    drive.reply(0, 2, 1.002)
    assert rnd.outcomes == (OK,) and rnd.details == (proto.replies.WOKE,)


def test_an_owed_pair_read_in_a_round_writes_the_waiters_work_at_its_end(proto):
    hs = proto.handshake
    drive = native_link(proto)
    drive.say(0, "ok", .002)
    drive.finish(.002)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=release_forms(proto), wait=False, now=1.0)
    (rnd,) = drive.finish(1.0)
    drive.begin(SET, payload=b"<set>", now=1.1)  # the next round reads the owed pair first
    drive.reply(0, 1, 1.101)
    drive.reply(0, 1, 1.101)
    assert not drive.written[0].endswith(hs.wake_after(b"k", False))  # not between the round's commands
    drive.say(0, "ok", 1.102)
    drive.finish(1.102)
    assert drive.written[0].endswith(hs.wake_after(b"k", False))  # behind them
    drive.reply(0, 1, 1.103)
    assert rnd.outcomes == (OK,)


def test_a_master_that_refuses_scripts_gets_native_commands_only(proto):
    refused = "NOPERM User u has no permissions to run the 'evalsha' command"
    drive = native_link(proto, script_error=refused, load_error="NOPERM User u has no permissions to run the 'script|load' command")
    link = drive.links[0]
    assert link.noscripts and "NOPERM" in link.noscripts_why
    assert drive.written[0].endswith(b"<set>")  # it has DELIFEQ: the acquisition goes
    drive.say(0, "ok", .002)
    drive.finish(.002)
    drive.begin(SCRIPT, payload=b"<evalsha fenced>", fallbacks=[b"<eval>"], now=1.0)  # a script, no native form
    (rnd,) = drive.finish(1.0)
    assert drive.written[0] == b"" and rnd.outcomes == (ERROR_REPLY,)
    assert proto.replies.scripts_refused(rnd.details[0]) and "@scripting" in rnd.details[0]


def test_an_acquisition_waits_for_the_probes_and_is_refused_without_a_safe_release(proto):
    drive = native_link(proto, probes=(None, None, None), script_error="ERR unknown command 'EVALSHA'",
                        load_error="ERR unknown command 'SCRIPT'")
    (rnd,) = drive.finish(.002)
    assert not drive.written[0].endswith(b"<set>")  # nothing taken
    assert rnd.outcomes == (ERROR_REPLY,) and rnd.details[0].startswith(proto.replies.NO_SAFE_RELEASE)
    assert proto.plans.refused_for_scripts(rnd, 1)


def test_the_client_option_sends_no_script_loads(proto):
    hs = proto.handshake
    drive = Drive(proto, n=1)
    drive.links[0].probe = hs.PROBE
    drive.session.no_scripts()
    drive.begin(SET, payload=b"<set>")
    assert drive.written[0] == hs.PROBE  # no SCRIPT LOAD, and the SET waits for the probes
    for answer in (None, 0, 0):
        drive.reply(0, answer, .001)
    assert drive.written[0] == hs.PROBE + b"<set>"


def test_an_acl_that_refuses_script_load_alone_keeps_the_scripts(proto):
    drive = native_link(proto, load_error="NOPERM User u has no permissions to run the 'script|load' command")
    assert not drive.links[0].noscripts and drive.links[0].load_failed  # EVAL still goes (NOSCRIPT said so)
