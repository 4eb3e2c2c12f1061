"""Hostile arguments: refused with ValueError/TypeError naming the argument, or sent exactly as given.

A :class:`~fastredlock.testing.FakeMaster` records every command it receives, parsed as RESP: a name
with CRLF, NUL or spaces must arrive as one argument, byte for byte, never as extra arguments or
extra commands; a refused argument must send nothing at all.
"""
from __future__ import annotations

import math
import os
import sys

import pytest

from fastredlock import Redlock
from fastredlock._scripts import RELEASE_SHA
from fastredlock.client import MAX_NAME_BYTES, MAX_TTL
from fastredlock.testing import FakeMaster

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the shared helpers
from _checks import bound, gone_within  # noqa: E402

INJECTIONS = [
    b"a b c",
    b"crlf\r\n*1\r\n$8\r\nFLUSHALL\r\n",
    b"\r\n",
    b"nul\x00inside",
    b"\x00",
    b"$-1\r\n",
    b"\xff\xfe not utf-8",
    "lone surrogate \udc80",
    "ünïcødé 🔒",
]


def answers(args):
    """A fake master that grants SET and the release/extend scripts."""
    return b"+OK\r\n" if args[0] == b"SET" else b":1\r\n"


@pytest.fixture
def fake():
    with FakeMaster(answers) as master:
        yield master


@pytest.fixture
def fake_client(make_client, fake):
    return make_client([fake.url], retry_count=0)


def lock_commands(fake):
    return [c for c in fake.commands if c[0] in (b"SET", b"EVALSHA", b"EVAL")]


@pytest.mark.parametrize("lock_name", INJECTIONS, ids=repr)
def test_odd_name_is_one_argument_on_the_wire(fake_client, fake, lock_name):
    key = lock_name if isinstance(lock_name, bytes) else lock_name.encode("utf-8", "surrogatepass")
    lock = fake_client.lock(lock_name, ttl=5.0)
    assert lock.acquire()
    token = lock.token
    lock.release()
    assert lock_commands(fake) == [
        [b"SET", key, token, b"NX", b"PX", b"5000"],
        [b"EVALSHA", RELEASE_SHA, b"1", key, token],
    ]


@pytest.mark.parametrize("token", [t for t in INJECTIONS if isinstance(t, bytes)], ids=repr)
def test_odd_token_given_to_release_is_one_argument(fake_client, fake, token):
    fake_client.lock("job", ttl=5.0).release(token=token)
    assert lock_commands(fake) == [[b"EVALSHA", RELEASE_SHA, b"1", b"job", token]]


def test_odd_prefix_is_part_of_the_one_key_argument(make_client, fake):
    dlm = make_client([fake.url], retry_count=0, prefix="p\r\nDEL x\r\n:")
    with dlm.lock("n", ttl=5.0):
        pass
    (set_cmd, release_cmd) = lock_commands(fake)
    assert set_cmd[1] == release_cmd[3] == b"p\r\nDEL x\r\n:n"


def test_tokens_are_plain_printable_bytes(fake_client):
    lock = fake_client.lock("job", ttl=5.0)
    assert lock.acquire()
    assert all(c in b"0123456789abcdef:" for c in lock.token)
    lock.release()


def test_name_limit_is_exact_and_checked_before_anything_is_sent(make_client, masters, fake, name):
    dlm = make_client(masters.urls, retry_count=0)
    longest = b"n" * MAX_NAME_BYTES
    with dlm.lock(longest, ttl=5.0) as lock:  # the documented limit itself works on real masters
        assert [o.outcome for o in lock.outcomes] == ["ok"] * 5  # (waits for any straggler's reply)
        assert all(m.command("GET", longest) == lock.token for m in masters)
    gone_within(masters, longest, bound(1))
    refuser = make_client([fake.url], retry_count=0, prefix="p:")
    for too_long in (b"n" * (MAX_NAME_BYTES - 1), b"n" * (1 << 20), "é" * (MAX_NAME_BYTES // 2 + 1)):
        with pytest.raises(ValueError, match="name"):
            refuser.lock(too_long, ttl=5.0)
    assert fake.connections == 0


@pytest.mark.parametrize("ttl", [MAX_TTL * 1.000001, 2**63, 1e300, -0.0, -1e-300, math.nan, math.inf, -math.inf])
def test_out_of_range_ttl_raises_value_error_and_sends_nothing(fake_client, fake, ttl):
    with pytest.raises(ValueError, match="ttl"):
        fake_client.lock("job", ttl=ttl)
    lock = fake_client.lock("job", ttl=5.0)
    assert lock.acquire()
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(ttl)
    lock.release()
    assert [c[0] for c in lock_commands(fake)] == [b"SET", b"EVALSHA"]


def test_largest_ttl_is_sent_as_is(fake_client, fake):
    with fake_client.lock("job", ttl=MAX_TTL):
        pass
    assert lock_commands(fake)[0][5] == b"2147483647"


@pytest.mark.parametrize("where", ["ttl", "extend", "acquire timeout", "io_timeout", "retry_delay"])
def test_int_too_large_for_a_float_raises_value_error(make_client, fake, where):
    huge = 10**400
    dlm = make_client([fake.url], retry_count=0)
    with pytest.raises(ValueError):
        if where == "ttl":
            dlm.lock("job", ttl=huge)
        elif where == "extend":
            lock = dlm.lock("job", ttl=5.0)
            assert lock.acquire()
            lock.extend(huge)
        elif where == "acquire timeout":
            dlm.lock("job", ttl=5.0).acquire(timeout=huge)
        else:
            make_client([fake.url], **{where: huge})


def test_absurd_io_timeout_raises_value_error(core):
    with pytest.raises(ValueError, match="io_timeout"):
        Redlock(["redis://127.0.0.1:7001"], core=core, io_timeout=1e9)


@pytest.mark.parametrize("timeout", [math.nan, -1, -math.inf, "1", b"1", True, [1]])
def test_bad_acquire_timeout_raises_before_sending(fake_client, fake, timeout):
    with pytest.raises((ValueError, TypeError), match="timeout"):
        fake_client.lock("job", ttl=5.0).acquire(timeout=timeout)
    assert fake.connections == 0


@pytest.mark.parametrize(
    "masters",
    [
        ["redis://127.0.0.1:7001", "redis://127.0.0.1:7001"],
        ["redis://127.0.0.1:7001", ("127.0.0.1", 7001)],
        ["redis://127.0.0.1:7001", {"host": "127.0.0.1", "port": "7001"}],
        ["redis://127.0.0.1:7001/2", "redis://:pw@127.0.0.1:7001/2"],
        ["unix:///tmp/r.sock", {"path": "/tmp/r.sock"}],
    ],
    ids=["same-url", "url-and-tuple", "url-and-dict", "other-password", "unix"],
)
def test_duplicate_masters_raise_value_error(core, masters):
    with pytest.raises(ValueError, match="masters"):
        Redlock(masters, core=core)


def test_same_master_under_two_host_names_raises(core, masters):
    port = masters[0].port
    with pytest.raises(ValueError, match="masters"):
        Redlock([f"redis://localhost:{port}", f"redis://127.0.0.1:{port}", masters.urls[1]], core=core)


def test_same_server_two_dbs_raises(core, masters):
    port = masters[0].port
    with pytest.raises(ValueError, match="masters"):
        Redlock([f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1", masters.urls[1]], core=core)


@pytest.mark.parametrize(
    "bad, exc",
    [
        ({"name": 42}, TypeError),
        ({"name": bytearray(b"x")}, TypeError),
        ({"name": None}, TypeError),
        ({"ttl": "5"}, TypeError),
        ({"ttl": None}, TypeError),
        ({"ttl": True}, TypeError),
        ({"ttl": 1 + 2j}, TypeError),
    ],
)
def test_wrong_types_raise_type_error(fake_client, fake, bad, exc):
    kwargs = {"name": "job", "ttl": 5.0, **bad}
    with pytest.raises(exc, match=next(iter(bad))):
        fake_client.lock(kwargs["name"], ttl=kwargs["ttl"])
    assert fake.connections == 0


@pytest.mark.parametrize("token", [42, 1.5, b"", ""])
def test_bad_release_token_raises_before_sending(fake_client, fake, token):
    with pytest.raises((TypeError, ValueError), match="token"):
        fake_client.lock("job", ttl=5.0).release(token=token)
    assert fake.connections == 0
