"""What a lock client accepts from a master, from tables: the reply guard, classification, bits."""
from __future__ import annotations

import pytest

from _drive import Drive

SET, SCRIPT, FENCED, SCRIPT_ACQUIRE, BITS = range(5)
OK, NO, PROTOCOL_ERROR = 0, 1, 5
MB = 1 << 20

GUARD = {
    "status": ([b"+OK\r\n"], None),
    "error": ([b"-ERR wrong\r\n"], None),
    "integer": ([b":1\r\n"], None),
    "bulk": ([b"$5\r\nhello\r\n"], None),
    "nil-bulk": ([b"$-1\r\n+OK\r\n"], None),
    "bulk-with-crlf-inside": ([b"$4\r\n\r\n\r\n\r\n:0\r\n"], None),
    "split-everywhere": ([b"$", b"5\r", b"\nhel", b"lo\r", b"\n+O", b"K\r\n"], None),
    "largest-bulk": ([b"$%d\r\n" % MB], None),
    "array": ([b"*1\r\n$2\r\nOK\r\n"], "unexpected reply type b'*'"),
    "resp3-map": ([b"%1\r\n"], "unexpected reply type b'%'"),
    "resp3-null": ([b"_\r\n"], "unexpected reply type b'_'"),
    "resp3-double": ([b",1.5\r\n"], "unexpected reply type b','"),
    "push": ([b">2\r\n"], "unexpected reply type b'>'"),
    "garbage": ([b"HTTP/1.1 400\r\n"], "unexpected reply type b'H'"),
    "array-after-a-bulk": ([b"$5\r\nhello\r\n", b"*"], "unexpected reply type b'*'"),
    "oversized-bulk": ([b"$%d\r\n" % (MB + 1)], "over the %d-byte limit" % MB),
    "oversized-bulk-split-header": ([b"$10", b"48577\r\n"], "over the %d-byte limit" % MB),
    "bad-bulk-length": ([b"$x\r\n"], "bad bulk length"),
    "longest-line": ([b"+" + b"a" * ((1 << 16) - 2) + b"\r\n"], None),
    "long-line": ([b"+" + b"a" * ((1 << 16) + 1)], "reply line longer than"),
    "long-line-in-chunks": ([b"-"] + [b"e" * 4096] * 16 + [b"e"], "reply line longer than"),
}


@pytest.mark.parametrize("chunks, problem", list(GUARD.values()), ids=list(GUARD))
def test_reply_guard(proto, chunks, problem):
    guard = proto.resp.ReplyGuard()
    seen = None
    for chunk in chunks:
        seen = guard.check(chunk, 0, len(chunk))
        if seen is not None:
            break
    if problem is None:
        assert seen is None
    else:
        assert seen is not None and problem in seen


def test_reply_guard_checks_a_slice_and_resets(proto):
    guard = proto.resp.ReplyGuard()
    data = bytearray(b"*junk+OK\r\n*junk")
    assert guard.check(data, 5, 10) is None
    assert guard.check(b"$3\r\nab", 0, 6) is None
    guard.reset()
    assert guard.check(b"*", 0, 1) is not None


def test_the_guard_says_where_the_last_whole_reply_before_a_problem_ends(proto):
    guard = proto.resp.ReplyGuard()
    assert guard.check(b":1\r\n$2\r\nab\r\n_\r\n", 0, 15) is not None
    assert guard.good == 12  # the integer and the bulk reply: the twins hand them on, then refuse
    guard.reset()
    first, second = b"+OK\r\n$3\r\na", b"bc\r\n*1\r\n"
    assert guard.check(first, 0, len(first)) is None
    assert guard.check(second, 0, len(second)) is not None
    assert guard.good == 4  # the bulk reply begun in the read before ends there
    guard.reset()
    assert guard.check(b"$99999999999\r\n", 0, 15) is not None and guard.good == 0


def test_a_refused_reply_fails_the_link_as_a_protocol_error(proto):
    drive = Drive(proto, n=3)
    drive.begin(SET)
    assert drive.received(0, b"*1\r\n", .001) is False
    assert drive.closed[0] == 1
    assert drive.session.outcomes[0] == PROTOCOL_ERROR


@pytest.mark.parametrize(
    "kind, reply, expected",
    [
        (SET, b"OK", (OK, None, None)), (SET, None, (NO, None, None)),
        (SET, 1, (PROTOCOL_ERROR, "unexpected reply 1", None)),
        (SET, b"QUEUED", (PROTOCOL_ERROR, "unexpected reply b'QUEUED'", None)),
        (SCRIPT, 1, (OK, None, None)), (SCRIPT, 0, (NO, None, None)),
        (SCRIPT, 2, (OK, "woke waiters", None)), (SCRIPT, 3, (OK, "gave the turn", None)),
        (SCRIPT, 4, (PROTOCOL_ERROR, "unexpected reply 4", None)),
        (SCRIPT, b"1", (PROTOCOL_ERROR, "unexpected reply b'1'", None)),
        (SCRIPT_ACQUIRE, 1, (OK, None, None)), (SCRIPT_ACQUIRE, 0, (NO, None, None)),
        (SCRIPT_ACQUIRE, 2, (PROTOCOL_ERROR, "unexpected reply 2", None)),
        (SCRIPT_ACQUIRE, 3, (PROTOCOL_ERROR, "unexpected reply 3", None)),
        (FENCED, 0, (OK, None, 0)), (FENCED, 41, (OK, None, 41)), (FENCED, -1, (NO, None, None)),
        (FENCED, -2, (PROTOCOL_ERROR, "unexpected reply -2", None)),
        (FENCED, None, (PROTOCOL_ERROR, "unexpected reply None", None)),
    ],
    ids=["set-ok", "set-nil", "set-int", "set-other-status", "script-1", "script-0", "script-2-woke", "script-3-turn", "script-4",
         "script-bulk",
         "lock-all-1", "lock-all-0", "lock-all-2", "lock-all-3", "fenced-0", "fenced-41", "fenced-taken", "fenced-minus-2", "fenced-nil"],
)
def test_classify(proto, kind, reply, expected):
    assert tuple(proto.replies.classify(kind, reply)) == expected


def test_acquisitions_are_the_kinds_that_take_locks(proto):
    r = proto.replies  # (is_acquisition compares literals: they must stay these kinds)
    takes = {r.KIND_SET, r.KIND_FENCED, r.KIND_SCRIPT_ACQUIRE}
    for kind in (r.KIND_SET, r.KIND_SCRIPT, r.KIND_FENCED, r.KIND_SCRIPT_ACQUIRE, r.KIND_BITS, r.KIND_READ, r.KIND_IFEQ):
        assert r.is_acquisition(kind) is (kind in takes), kind


def test_lean_release_agrees_with_the_queue_keys(proto):
    # The plain release's script builds the wake mark's name in Lua ('{' .. key .. '}:wake' for
    # RELEASE, key .. ':wake' for RELEASE_TAGGED): it must be the waiters' wake_mark, in the key's
    # slot, for every key that can queue; a key that cannot has no lean release (RELEASE_FULL).
    import random

    f, sc = proto.family, proto.scripts
    rng = random.Random(30)
    keys = [b"plain", b"{t}x", b"a}b", b"a{}b", b"{}", b"x{y", b"}", b"{a}b}", b"{{a}}", b"a{b}c}", b"{}x}"]
    keys += [bytes(rng.choice(b"ab{}") for _ in range(rng.randint(1, 7))) for _ in range(3000)]  # (no empty name)
    for key in keys:
        script = f.lean_release(key)
        if not f.queueable(key):
            assert script is None, key
            continue
        mark = b"{" + key + b"}" + sc.WAKE_SUFFIX if script == sc.RELEASE else key + sc.WAKE_SUFFIX
        assert script in (sc.RELEASE, sc.RELEASE_TAGGED) and mark == f.wake_mark(key), key
        assert proto.cluster.key_slot(mark) == proto.cluster.key_slot(key), key


def test_classify_cuts_a_long_reply_short(proto):
    code, detail, _ = proto.replies.classify(SET, b"x" * 1000)
    assert code == PROTOCOL_ERROR and len(detail) <= len("unexpected reply ") + 80


@pytest.mark.parametrize(
    "reply, rows, expected",
    [(b"1101", 4, [OK, OK, NO, OK]), (b"0", 1, [NO]), (b"11", 3, None), (b"1x", 2, None), (11, 2, None),
     (None, 1, None), (b"", 0, [])],
    ids=["mixed", "one", "too-short", "not-bits", "int", "nil", "empty"],
)
def test_bits(proto, reply, rows, expected):
    assert proto.replies.bits(reply, rows) == expected


def test_a_batch_release_reply_settles_every_key(proto):
    drive = Drive(proto, n=3)
    drive.begin(BITS, ttl_ms=0, rows=3)
    drive.reply(0, b"101", .001)
    drive.reply(1, b"111", .001)
    drive.reply(2, b"1", .001)  # the wrong length: out of step
    rounds = drive.finish(.001)
    assert [list(r.outcomes) for r in rounds] == [[OK, OK, PROTOCOL_ERROR], [NO, OK, PROTOCOL_ERROR], [OK, OK, PROTOCOL_ERROR]]
    assert drive.closed[2] == 1


@pytest.mark.parametrize(
    "args, wire",
    [((b"SET", b"k", b"v"), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"),
     ((b"GET", b"a\r\nb"), b"*2\r\n$3\r\nGET\r\n$4\r\na\r\nb\r\n"),
     ((b"PING",), b"*1\r\n$4\r\nPING\r\n"), ((b"SET", b""), b"*2\r\n$3\r\nSET\r\n$0\r\n\r\n")],
    ids=["set", "crlf-in-argument", "one-word", "empty-argument"],
)
def test_encode_command(proto, args, wire):
    assert proto.resp.encode_command(*args) == wire
