"""The pure-Python RESP reader (PyPy's, where hiredis does not install) against hiredis, from tables.

Every case runs on the pure reader; where hiredis is installed (CPython) it also checks that hiredis
reads the same bytes the same way, chunk by chunk, so the twin cannot drift from the original.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastredlock.io import reader_py

try:
    import hiredis
except ImportError:  # PyPy: the pure reader alone
    hiredis = None

READERS = ["python"] + (["hiredis"] if hiredis is not None else [])
E = "error"  # an error reply, returned as a value

CASES = {
    "status": ([b"+OK\r\n"], [b"OK"]),
    "error": ([b"-NOSCRIPT No matching script\r\n"], [(E, "NOSCRIPT No matching script")]),
    "integer": ([b":1\r\n:-12\r\n"], [1, -12]),
    "bulk": ([b"$5\r\nhello\r\n"], [b"hello"]),
    "empty-bulk": ([b"$0\r\n\r\n"], [b""]),
    "nil-bulk": ([b"$-1\r\n"], [None]),
    "bulk-with-crlf-inside": ([b"$4\r\n\r\n\r\n\r\n"], [b"\r\n\r\n"]),
    "split-everywhere": ([b"$", b"5\r", b"\nhel", b"lo\r", b"\n+O", b"K\r\n"], [b"hello", b"OK"]),
    "array": ([b"*3\r\n$7\r\nmessage\r\n:1\r\n-ERR x\r\n"], [[b"message", 1, (E, "ERR x")]]),
    "nested-array": ([b"*2\r\n*1\r\n:1\r\n*0\r\n"], [[[1], []]]),
    "nil-array": ([b"*-1\r\n"], [None]),
    "array-in-pieces": ([b"*2\r\n$1\r\na", b"\r\n", b"$1\r\nb\r\n"], [[b"a", b"b"]]),
    "resp3-null": ([b"_\r\n"], [None]),
    "resp3-bool": ([b"#t\r\n"], [True]),  # (#f reads as False, which gets() also means "no reply yet")
    "resp3-double": ([b",1.5\r\n"], [1.5]),
    "resp3-map": ([b"%1\r\n+a\r\n:1\r\n"], [{b"a": 1}]),
    "resp3-push": ([b">2\r\n+x\r\n:1\r\n"], [[b"x", 1]]),
    "resp3-verbatim": ([b"=8\r\ntxt:abcd\r\n"], [b"abcd"]),
    "resp3-big-number": ([b"(123\r\n"], [b"123"]),
    "resp3-set": ([b"~1\r\n:1\r\n"], [[1]]),
    "incomplete": ([b"$5\r\nhel"], []),
}


def _reader(kind):
    return reader_py.Reader() if kind == "python" else hiredis.Reader()


def _plain(reply, kind):
    errors = reader_py.ReplyError if kind == "python" else hiredis.ReplyError
    if isinstance(reply, errors):
        return (E, str(reply))
    if isinstance(reply, list):
        return [_plain(r, kind) for r in reply]
    return reply


def _read_all(kind, chunks):
    reader, replies = _reader(kind), []
    for chunk in chunks:
        reader.feed(chunk)
        while True:
            reply = reader.gets()
            if reply is False:
                break
            replies.append(_plain(reply, kind))
    return replies, reader.has_data()


@pytest.mark.parametrize("kind", READERS)
@pytest.mark.parametrize("chunks, expected", list(CASES.values()), ids=list(CASES))
def test_reader_reads_the_table(kind, chunks, expected):
    replies, leftover = _read_all(kind, chunks)
    assert replies == expected
    assert leftover == (not expected)


@pytest.mark.parametrize("kind", READERS)
@pytest.mark.parametrize("data", [b"HTTP/1.1 400\r\n", b"$x\r\n", b":1x\r\n", b"$-2\r\n", b"*-2\r\n",
                                  b"!3\r\nerr\r\n", b"*2\r\n:1\r\n?x\r\n"],
                         ids=["type-byte", "bulk-length", "integer", "negative-bulk", "negative-array",
                              "resp3-blob-error", "inside-an-array"])
def test_reader_refuses_what_is_not_resp(kind, data):
    reader = _reader(kind)
    reader.feed(data)
    errors = reader_py.ProtocolError if kind == "python" else hiredis.ProtocolError
    with pytest.raises(errors):
        reader.gets()


def test_reader_feeds_a_slice_like_hiredis():
    reader = reader_py.Reader()
    reader.feed(b"xx+OK\r\nyy", 2, 5)
    assert reader.gets() == b"OK" and reader.gets() is False and not reader.has_data()


def test_reader_stays_broken_after_a_protocol_error():
    reader = reader_py.Reader()
    reader.feed(b"?\r\n")
    for _ in range(2):
        with pytest.raises(reader_py.ProtocolError, match='got "\\?" as reply type byte'):
            reader.gets()


_VALUE = st.recursive(
    st.one_of(st.binary(max_size=20).map(lambda b: b"$%d\r\n%s\r\n" % (len(b), b)),
              st.integers(-2**63, 2**63 - 1).map(lambda i: b":%d\r\n" % i),
              st.sampled_from([b"+OK\r\n", b"-ERR no\r\n", b"$-1\r\n", b"*-1\r\n"])),
    lambda inner: st.lists(inner, max_size=4).map(lambda items: b"*%d\r\n" % len(items) + b"".join(items)),
    max_leaves=10)


@pytest.mark.skipif(hiredis is None, reason="hiredis is not installed (the differential needs it)")
@settings(max_examples=200, deadline=None)
@given(stream=st.lists(_VALUE, min_size=1, max_size=5).map(b"".join), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_reader_matches_hiredis_on_any_split(stream, cuts):
    bounds = sorted({0, len(stream), *[c % (len(stream) + 1) for c in cuts]})
    chunks = [stream[a:b] for a, b in zip(bounds, bounds[1:])]
    assert _read_all("python", chunks) == _read_all("hiredis", chunks)
