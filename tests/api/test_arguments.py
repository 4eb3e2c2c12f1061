"""Bad input is refused with an error naming the argument; odd but valid names round-trip exactly."""
from __future__ import annotations

import pytest

import fastredlock
from fastredlock import Redlock


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


@pytest.mark.parametrize("ttl", [0, -1, 0.0, float("nan"), float("inf"), -0.5, 0.001, 10**9])
def test_bad_ttl_raises_value_error(dlm, ttl):
    with pytest.raises(ValueError, match="ttl"):
        dlm.lock("x", ttl=ttl)


@pytest.mark.parametrize("ttl", ["10", None, True, [1]])
def test_non_number_ttl_raises_type_error(dlm, ttl):
    with pytest.raises(TypeError, match="ttl"):
        dlm.lock("x", ttl=ttl)


def test_bad_extend_ttl_raises_and_keeps_lock(dlm, name):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire()
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(-1)
    assert lock.locked()
    lock.release()


def test_empty_name_raises_value_error(dlm):
    with pytest.raises(ValueError, match="name"):
        dlm.lock("", ttl=1.0)
    with pytest.raises(ValueError, match="name"):
        dlm.lock(b"", ttl=1.0)


@pytest.mark.parametrize("bad", [None, 42, 1.5, ["a"], object()])
def test_non_str_name_raises_type_error(dlm, bad):
    with pytest.raises(TypeError, match="name"):
        dlm.lock(bad, ttl=1.0)


def test_too_long_name_raises_value_error(dlm):
    with pytest.raises(ValueError, match="name"):
        dlm.lock("x" * (1 << 20), ttl=1.0)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:6379", "redis://127.0.0.1:notaport", "redis://:6379", "127.0.0.1:6379",
     "redis://127.0.0.1:99999", "redis://127.0.0.1:6379/notadb", "unix://", ""],
)
def test_malformed_url_raises_value_error(core, url):
    with pytest.raises(ValueError, match="masters"):
        Redlock([url], core=core)


def test_empty_masters_raises_value_error(core):
    with pytest.raises(ValueError, match="masters"):
        Redlock([], core=core)


@pytest.mark.parametrize("masters", ["redis://127.0.0.1:6379", None, 42, [42], [None]])
def test_masters_wrong_type_raises_type_error(core, masters):
    with pytest.raises(TypeError, match="masters"):
        Redlock(masters, core=core)


def test_duplicate_masters_raise_value_error(core):
    with pytest.raises(ValueError, match="masters"):
        Redlock(["redis://127.0.0.1:7001", ("127.0.0.1", 7001)], core=core)


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
def test_bad_client_options_raise(core, kwargs, exc, word):
    kwargs.setdefault("core", core)
    with pytest.raises(exc, match=word):
        Redlock(["redis://127.0.0.1:7001"], **kwargs)


@pytest.mark.parametrize("timeout", [-1, float("nan"), "1", True])
def test_bad_acquire_timeout_raises_value_error(dlm, name, timeout):
    with pytest.raises(ValueError, match="timeout"):
        dlm.lock(name, ttl=1.0).acquire(timeout=timeout)


def test_timeout_with_non_blocking_raises(dlm, name):
    with pytest.raises(ValueError, match="timeout"):
        dlm.lock(name, ttl=1.0).acquire(blocking=False, timeout=1.0)


def test_public_names_are_documented():
    for public in fastredlock.__all__:
        obj = getattr(fastredlock, public)
        if callable(obj) and not isinstance(obj, str):
            assert obj.__doc__, f"{public} has no docstring"
    for method in ("acquire", "release", "extend", "locked"):
        assert getattr(fastredlock.Lock, method).__doc__
    assert fastredlock.Lock.validity.__doc__
    assert fastredlock.Redlock.lock.__doc__
