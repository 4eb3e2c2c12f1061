"""Arguments: refused with ValueError/TypeError naming the argument, or sent exactly as given.

Checks that refuse an argument raise before any I/O, so the core cannot matter: they run once, on
the active core (``one_core``, ``one_dlm``, ``one_fake_client``). Everything that reaches a master
runs on both cores. A :class:`~fastredlock.testing.FakeMaster` records every command it receives, parsed as RESP: a name
with CRLF, NUL or spaces must arrive as one argument, byte for byte, never as extra arguments or
extra commands; a refused argument must send nothing at all.
"""
from __future__ import annotations

import math

import pytest

import fastredlock
from fastredlock import Redlock
from fastredlock.protocol.handshake import PROBE_KEY
from fastredlock.protocol.scripts import RELEASE_SHA
from fastredlock.sync.client import MAX_NAME_BYTES, MAX_TTL
from fastredlock.testing import FakeMaster

from _checks import bound, gone_within


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


@pytest.fixture
def one_fake_client(make_one_client, fake):
    """``fake_client`` on the active core only (arguments refused before anything is sent)."""
    return make_one_client([fake.url], retry_count=0)


def lock_commands(fake):
    """The lock's commands the fake received (not a new connection's probes of native commands and
    of scripts: the script probe is an EVALSHA of a digest no script has)."""
    return [c for c in fake.commands if c[0] in (b"SET", b"EVALSHA", b"EVAL") and c[1] != PROBE_KEY
            and c[1] != b"0" * 40]


# --- sent exactly as given, or refused without sending (both cores: these reach a master) ----------------
@pytest.mark.parametrize(
    "lock_name",
    ["with space", "crlf\r\ninjected\r\n*3\r\n$3\r\nDEL\r\n", "ünïcødé:🔒", b"\x00\xffbinary\r\n", "a" * 10000],
)
def test_odd_names_round_trip(dlm, masters, lock_name):
    key = lock_name.encode() if isinstance(lock_name, str) else lock_name
    with dlm.lock(lock_name, ttl=5.0) as lock:
        assert lock.key == key
        for m in masters:
            assert m.command("GET", key) == lock.token
            assert m.command("DBSIZE") >= 1
    assert all(m.command("EXISTS", key) == 0 for m in masters)


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


def test_bad_extend_ttl_raises_and_keeps_lock(dlm, name):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(-1)
    assert lock.locked()
    lock.release()


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


# --- names, TTLs, timeouts and tokens refused before any I/O (the active core only) ---------------------
@pytest.mark.parametrize("ttl", [0, -1, 0.0, float("nan"), float("inf"), -0.5, 0.001, 10**9])
def test_bad_ttl_raises_value_error(one_dlm, ttl):
    with pytest.raises(ValueError, match="ttl"):
        one_dlm.lock("x", ttl=ttl)


@pytest.mark.parametrize("ttl", ["10", None, True, [1]])
def test_non_number_ttl_raises_type_error(one_dlm, ttl):
    with pytest.raises(TypeError, match="ttl"):
        one_dlm.lock("x", ttl=ttl)


def test_empty_name_raises_value_error(one_dlm):
    with pytest.raises(ValueError, match="name"):
        one_dlm.lock("", ttl=1.0)
    with pytest.raises(ValueError, match="name"):
        one_dlm.lock(b"", ttl=1.0)


@pytest.mark.parametrize("bad", [None, 42, 1.5, ["a"], object()])
def test_non_str_name_raises_type_error(one_dlm, bad):
    with pytest.raises(TypeError, match="name"):
        one_dlm.lock(bad, ttl=1.0)


def test_too_long_name_raises_value_error(one_dlm):
    with pytest.raises(ValueError, match="name"):
        one_dlm.lock("x" * (1 << 20), ttl=1.0)


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
def test_wrong_types_raise_type_error(one_fake_client, fake, bad, exc):
    kwargs = {"name": "job", "ttl": 5.0, **bad}
    with pytest.raises(exc, match=next(iter(bad))):
        one_fake_client.lock(kwargs["name"], ttl=kwargs["ttl"])
    assert fake.connections == 0


@pytest.mark.parametrize("timeout", [-1, float("nan"), "1", True])
def test_bad_acquire_timeout_raises_value_error(one_dlm, name, timeout):
    with pytest.raises(ValueError, match="timeout"):
        one_dlm.lock(name, ttl=1.0).acquire(timeout=timeout)


def test_timeout_with_non_blocking_raises(one_dlm, name):
    with pytest.raises(ValueError, match="timeout"):
        one_dlm.lock(name, ttl=1.0).acquire(blocking=False, timeout=1.0)


@pytest.mark.parametrize("timeout", [math.nan, -1, -math.inf, "1", b"1", True, [1]])
def test_bad_acquire_timeout_raises_before_sending(one_fake_client, fake, timeout):
    with pytest.raises((ValueError, TypeError), match="timeout"):
        one_fake_client.lock("job", ttl=5.0).acquire(timeout=timeout)
    assert fake.connections == 0


@pytest.mark.parametrize("token", [42, 1.5, b"", ""])
def test_bad_release_token_raises_before_sending(one_fake_client, fake, token):
    with pytest.raises((TypeError, ValueError), match="token"):
        one_fake_client.lock("job", ttl=5.0).release(token=token)
    assert fake.connections == 0


# --- client options and masters refused when the client is built (the active core only) -----------------
@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:6379", "redis://127.0.0.1:notaport", "redis://:6379", "127.0.0.1:6379",
     "redis://127.0.0.1:99999", "redis://127.0.0.1:6379/notadb", "unix://", ""],
)
def test_malformed_url_raises_value_error(one_core, url):
    with pytest.raises(ValueError, match="masters"):
        Redlock([url], core=one_core)


def test_empty_masters_raises_value_error(one_core):
    with pytest.raises(ValueError, match="masters"):
        Redlock([], core=one_core)


@pytest.mark.parametrize("masters", ["redis://127.0.0.1:6379", None, 42, [42], [None]])
def test_masters_wrong_type_raises_type_error(one_core, masters):
    with pytest.raises(TypeError, match="masters"):
        Redlock(masters, core=one_core)


@pytest.mark.parametrize(
    "kwargs, exc, word",
    [
        ({"retry_count": -1}, ValueError, "retry_count"),
        ({"retry_count": 1.5}, TypeError, "retry_count"),
        ({"retry_delay": -0.1}, ValueError, "retry_delay"),
        ({"retry_jitter": float("nan")}, ValueError, "retry_jitter"),
        ({"drift_factor": 1.0}, ValueError, "drift_factor"),
        ({"io_timeout": 0}, ValueError, "io_timeout"),
        ({"io_timeout": "fast"}, TypeError, "io_timeout"),
        ({"connect_timeout": -1}, ValueError, "connect_timeout"),
        ({"prefix": 3}, TypeError, "prefix"),
        ({"core": "rust"}, ValueError, "core"),
    ],
)
def test_bad_client_options_raise(one_core, kwargs, exc, word):
    kwargs.setdefault("core", one_core)
    with pytest.raises(exc, match=word):
        Redlock(["redis://127.0.0.1:7001"], **kwargs)


def test_absurd_io_timeout_raises_value_error(one_core):
    with pytest.raises(ValueError, match="io_timeout"):
        Redlock(["redis://127.0.0.1:7001"], core=one_core, io_timeout=1e9)


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
def test_duplicate_masters_raise_value_error(one_core, masters):
    with pytest.raises(ValueError, match="masters"):
        Redlock(masters, core=one_core)


def test_same_master_under_two_host_names_raises(one_core, masters):
    port = masters[0].port
    with pytest.raises(ValueError, match="masters"):
        Redlock([f"redis://localhost:{port}", f"redis://127.0.0.1:{port}", masters.urls[1]], core=one_core)


def test_same_server_two_dbs_raises(one_core, masters):
    port = masters[0].port
    with pytest.raises(ValueError, match="masters"):
        Redlock([f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1", masters.urls[1]], core=one_core)


def test_same_server_ok_accepts_dbs_of_one_server_but_not_one_db_twice(one_core, masters):
    port = masters[0].port
    dbs = [f"redis://127.0.0.1:{port}/{db}" for db in (1, 2, 3)]
    with pytest.raises(ValueError, match="same_server_ok=True"):
        Redlock(dbs, core=one_core)
    with pytest.raises(TypeError, match="same_server_ok"):
        Redlock(dbs, core=one_core, same_server_ok=1)
    client = Redlock(dbs, core=one_core, same_server_ok=True)
    assert client.quorum == 2 and client.masters == tuple(f"127.0.0.1:{port}/{db}" for db in (1, 2, 3))
    client.close()
    with pytest.raises(ValueError, match="same server and db"):
        Redlock([dbs[0], f"redis://localhost:{port}/1"], core=one_core, same_server_ok=True)


def test_several_dbs_of_one_server_vote_separately(make_client, masters, name):
    """Each db holds its own key: the quorum is a majority of the dbs, and it still excludes."""
    port = masters[0].port
    dbs = [f"redis://127.0.0.1:{port}/{db}" for db in (1, 2, 3)]
    first = make_client(dbs, same_server_ok=True, retry_count=0)
    second = make_client(dbs, same_server_ok=True, retry_count=0)
    lock = first.lock(name, ttl=5)
    assert lock.acquire()
    import redis

    assert [redis.Redis(port=port, db=db).exists(name) for db in (1, 2, 3)] == [1, 1, 1]
    assert not second.lock(name, ttl=5).acquire(blocking=False)
    lock.release()
    assert second.lock(name, ttl=5).acquire(blocking=False)


def test_public_names_are_documented():
    for public in fastredlock.__all__:
        obj = getattr(fastredlock, public)
        if callable(obj) and not isinstance(obj, str):
            assert obj.__doc__, f"{public} has no docstring"
    for method in ("acquire", "release", "extend", "locked"):
        assert getattr(fastredlock.Lock, method).__doc__
    assert fastredlock.Lock.validity.__doc__
    assert fastredlock.Redlock.lock.__doc__


def test_the_compiled_lock_method_keeps_the_base_signature():
    """``Redlock.lock`` is ``sync.lock.client_lock`` (compiled in the C build), which repeats
    ``RedlockBase.lock``'s parameters: names, kinds, defaults and annotations stay alike."""
    import inspect

    from fastredlock.handles.client import RedlockBase
    from fastredlock.sync.lock import client_lock

    assert Redlock.lock is client_lock
    base = list(inspect.signature(RedlockBase.lock).parameters.values())
    mine = list(inspect.signature(client_lock).parameters.values())
    assert [p.name for p in mine] == [p.name for p in base]
    assert mine[1:] == base[1:]  # (``self`` is annotated in the module function only)
    assert client_lock.__doc__ == RedlockBase.lock.__doc__
