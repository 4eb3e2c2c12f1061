"""Native owner-checked commands from tables: the probes a new connection writes, what their
answers teach a link, and a round that sends a native form where a master runs it.

A new connection writes three probes behind its script loads (``SET ... IFEQ ... PX``, ``DELIFEQ``,
``DELEX ... IFEQ`` on a key that never exists), and its first commands only once they are
answered; only the documented answers (nil, ``:0``, ``:0``) give the link a capability. A round with native forms sends, per link, the
first one its master runs, and reads its replies as that form's kind; an answer that says the
command is not there after all sends the EVAL form instead and the link forgets its capabilities.
"""
from __future__ import annotations

import pytest

from _drive import Drive, specs

OK, NO = 0, 1
SCRIPT = 1
NATIVE_SET = b"<set-ifeq>"
NATIVE_DEL = b"<delex>"


def capable(proto, n=1, caps=None):
    """A Drive whose links probe; link 0 answered every probe as a server that has the commands."""
    hs = proto.handshake
    drive = Drive(proto, n=n)
    for link in drive.links:
        link.probe = hs.PROBE
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"])
    assert drive.written[0] == hs.PROBE  # the first round waits for the probes' answers
    answers = [None, 0, 0] if caps is None else caps
    for i in range(n):
        for k in range(hs.PROBES):
            assert drive.reply(i, answers[k] if i == 0 else None, .001,
                               error=None if i == 0 else "ERR unknown command")
        drive.sync()
        assert drive.written[i] == hs.PROBE + b"<evalsha>"  # then its commands (a script: no native form)
        drive.say(i, "ok", .002)
    (rnd,) = drive.finish(.002)
    assert rnd.ok
    return drive


def extend_forms(proto):
    return ((proto.handshake.CAP_SET_IFEQ, NATIVE_SET, proto.replies.KIND_IFEQ, None),)


def test_the_documented_answers_give_every_capability(proto):
    hs = proto.handshake
    drive = capable(proto)
    assert drive.links[0].caps == hs.CAP_SET_IFEQ | hs.CAP_DELIFEQ | hs.CAP_DELEX
    assert drive.session.caps_seen


@pytest.mark.parametrize("probe, reply, error", [
    (0, None, "ERR syntax error"),  # SET without IFEQ (Redis 7.0)
    (0, b"OK", None),  # a fake that answers anything
    (1, None, "ERR unknown command 'DELIFEQ', with args beginning with: "),
    (1, None, "NOPERM User u has no permissions to run the 'delifeq' command"),
    (1, 1, None),
    (2, b"0", None),  # a bulk "0", not the integer
    (2, None, "ERR unknown command 'DELEX'"),
], ids=["set-syntax", "set-ok", "delifeq-unknown", "delifeq-acl", "delifeq-1", "delex-bulk", "delex-unknown"])
def test_any_other_answer_leaves_the_link_on_the_scripts(proto, probe, reply, error):
    hs = proto.handshake
    assert hs.probe_answer(probe, reply, error) == 0
    assert hs.probe_answer(probe, [None, 0, 0][probe], None) == [hs.CAP_SET_IFEQ, hs.CAP_DELIFEQ, hs.CAP_DELEX][probe]


def test_a_link_whose_master_has_the_command_gets_the_native_form(proto):
    drive = capable(proto, n=2)  # master 0 has the commands, master 1 answered every probe with an error
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), now=1.0)
    assert drive.written == [NATIVE_SET, b"<evalsha>"]
    drive.reply(0, b"OK", 1.001)  # +OK: extended
    drive.say(1, "ok", 1.001)
    (rnd,) = drive.finish(1.001)
    assert rnd.outcomes == (OK, OK)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), now=2.0)
    drive.reply(0, None, 2.001)  # nil: not the owner
    drive.say(1, "no", 2.001)
    (rnd,) = drive.finish(2.001)
    assert rnd.outcomes == (NO, NO)


def test_the_first_form_the_master_runs_is_sent(proto):
    hs = proto.handshake
    drive = capable(proto, caps=[None, 0, b"no DELEX here"])  # SET IFEQ and DELIFEQ, no DELEX
    forms = ((hs.CAP_DELEX, NATIVE_DEL, SCRIPT, None), (hs.CAP_DELIFEQ, b"<delifeq>", SCRIPT, None))
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=forms, wait=False, now=1.0)
    assert drive.written[0] == b"<delifeq>"  # not EVAL, though nobody waits: no NOSCRIPT can come


def test_a_native_reply_is_read_with_its_kind_when_it_comes_late(proto):
    drive = capable(proto)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), wait=False, now=1.0)
    (rnd,) = drive.finish(1.0)
    assert drive.session.pending() == 1
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], now=1.001)  # the owed +OK is read first
    assert drive.reply(0, b"OK", 1.002)
    drive.say(0, "ok", 1.002)
    drive.finish(1.002)
    assert rnd.outcomes == (OK,)


def test_a_command_not_there_after_all_goes_again_as_eval(proto):
    drive = capable(proto)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), now=1.0)
    assert drive.written[0] == NATIVE_SET
    assert drive.error(0, "NOPERM this user has no permissions to run the 'set' command", 1.001)
    assert drive.written[0] == NATIVE_SET + b"<eval>" and not drive.over()
    assert drive.links[0].caps == 0
    drive.say(0, "ok", 1.002)  # the script's :1
    (rnd,) = drive.finish(1.002)
    assert rnd.outcomes == (OK,)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), now=2.0)
    assert drive.written[0] == b"<evalsha>"  # and the link stays on the scripts


def test_another_error_to_a_native_form_is_that_masters_answer(proto):
    drive = capable(proto)
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), now=1.0)
    drive.error(0, "WRONGTYPE Operation against a key holding the wrong kind of value", 1.001)
    (rnd,) = drive.finish(1.001)
    assert rnd.outcomes == (4,) and drive.links[0].caps  # ERROR_REPLY, the capability kept


def test_a_new_connection_sends_its_commands_once_its_probes_answer(proto):
    drive = capable(proto)
    drive.io_failed(0, 1.0)  # (between rounds: the connection is dropped)
    drive.links[0].request_close()
    drive.sync()
    drive.begin(SCRIPT, payload=b"<evalsha>", fallbacks=[b"<eval>"], native=extend_forms(proto), now=2.0)
    assert drive.written[0] == proto.handshake.PROBE
    assert drive.links[0].caps == 0 and not drive.over()
    for answer in (None, 0, 0):
        assert drive.reply(0, answer, 2.001)
    drive.sync()
    assert drive.written[0] == proto.handshake.PROBE + NATIVE_SET  # chosen knowing what it runs


def test_a_clusters_links_do_not_probe(proto):
    link = proto.link.Link(0, specs(1, "redis+cluster://127.0.0.1:%d")[0], False, True)
    assert link.probe == b"" and link.preload
    plain = proto.link.Link(0, specs(1)[0], False, True)
    assert plain.probe == proto.handshake.PROBE + proto.handshake.SCRIPT_PROBE


def test_the_native_forms_are_the_documented_commands(proto):
    hs, resp = proto.handshake, proto.resp
    deletes = hs.native_deletes([b"k"], [b"t"])
    assert deletes == ((hs.CAP_DELEX, resp.encode_command(b"DELEX", b"k", b"IFEQ", b"t"), SCRIPT, None),
                       (hs.CAP_DELIFEQ, resp.encode_command(b"DELIFEQ", b"k", b"t"), SCRIPT, None))
    (extend,) = hs.native_extends([b"k", b"j"], [b"t", b"u"], [5000, 7000])
    assert extend == (hs.CAP_SET_IFEQ, resp.encode_command(b"SET", b"k", b"t", b"IFEQ", b"t", b"PX", b"5000")
                      + resp.encode_command(b"SET", b"j", b"u", b"IFEQ", b"u", b"PX", b"7000"),
                      proto.replies.KIND_IFEQ, None)
    assert not proto.replies.is_acquisition(proto.replies.KIND_IFEQ)


@pytest.mark.parametrize("key", [b"orders:42", b"{orders}:42", b"a{b}c"])
def test_the_one_key_native_release_is_the_general_form(proto, key):
    hs, resp = proto.handshake, proto.resp
    tagged = proto.family.lean_release(key) is proto.scripts.RELEASE_TAGGED
    assert hs.native_release(key, b"tok", tagged) == hs.native_releases((key,), (b"tok",))
    (delex, delifeq) = hs.native_releases((key,), (b"tok",))
    mark = proto.family.wake_mark(key)
    assert delifeq[1] == resp.encode_command(b"DELIFEQ", key, b"tok") + resp.encode_command(b"EXISTS", mark)
    assert delex[1] == resp.encode_command(b"DELEX", key, b"IFEQ", b"tok") + resp.encode_command(b"EXISTS", mark)
    assert delifeq[2] == proto.replies.KIND_NATIVE_DEL and delifeq[3] == (key,)
