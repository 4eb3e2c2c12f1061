"""``fastredlock.compat.redis_lock``: python-redis-lock's API, keys, signal list, errors and logs.

Each behavioural test runs on both cores against a real local server (the session's first master);
the original's own suite runs in test_compat_suites.py, and original and shim processes contend
and wake each other in test_compat_interop.py.
"""
from __future__ import annotations

import gc
import logging
import threading
import time

import pytest
import redis

from fastredlock import Redlock
from fastredlock.compat import redis_lock
from fastredlock.compat.redis_lock import (
    AlreadyAcquired, InvalidTimeout, Lock, NotAcquired, NotExpirable, TimeoutNotUsable, TimeoutTooLarge, reset_all,
)

from _bounded import joined


def _conn(masters, **kwargs):
    return redis.StrictRedis(host="127.0.0.1", port=masters[0].port, socket_timeout=5, **kwargs)


@pytest.fixture
def conn(masters):
    client = _conn(masters)
    yield client
    client.close()


@pytest.fixture
def text_conn(masters):
    """A client with ``decode_responses=True`` (the original's suite runs with both kinds)."""
    client = _conn(masters, decode_responses=True)
    yield client
    client.close()


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decode_responses"])
def test_key_holds_the_id_with_the_expiry_and_release_signals(shim_core, conn, text_conn, name, decoded):
    conn = text_conn if decoded else conn
    lock = Lock(conn, name, expire=5)
    assert lock.acquire(blocking=False)
    assert _text(conn.get(f"lock:{name}")) == lock.id == lock.get_owner_id()
    assert 4 <= conn.ttl(f"lock:{name}") <= 5
    assert lock.locked() and Lock(conn, name).locked()
    lock.release()
    assert conn.get(f"lock:{name}") is None and not lock.locked()
    assert conn.llen(f"lock-signal:{name}") == 1 and 0 < conn.pttl(f"lock-signal:{name}") <= 1000
    with pytest.raises(NotAcquired):
        lock.release()  # nothing held: no second signal
    assert conn.llen(f"lock-signal:{name}") == 1


def test_ids_as_the_original_makes_them(one_shim_core, conn, name):
    ids = {Lock(conn, name).id for _ in range(100)}
    assert len(ids) == 100 and all(isinstance(i, str) and len(i) >= 32 and i.isascii() for i in ids)
    assert Lock(conn, name, id=b"abc").id == "abc"
    assert Lock(conn, name, id=b"\xff").id == "/w=="  # not ASCII: base64
    with pytest.raises(TypeError):
        Lock(conn, name, id=object())


def test_argument_checks_as_the_original(one_shim_core, conn, name):
    with pytest.raises(ValueError, match="StrictRedis"):
        Lock(object(), name)
    Lock(object(), name, strict=False)  # no I/O until used
    with pytest.raises(ValueError):
        Lock(conn, name, auto_renewal=True)
    for bad in (-1, "-1"):
        with pytest.raises(ValueError):
            Lock(conn, name, expire=bad)
    assert Lock(conn, name, expire="7")._expire == 7 and Lock(conn, name, expire=0)._expire is None
    lock = Lock(conn, name, expire=1)
    with pytest.raises(TimeoutNotUsable):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(InvalidTimeout):
        lock.acquire(timeout=-1)
    with pytest.raises(ValueError):
        lock.acquire(timeout="soon")
    with pytest.raises(TimeoutTooLarge):
        lock.acquire(timeout=2)
    with pytest.raises(ValueError):
        lock.extend(-1)


def test_already_acquired_by_this_object_or_this_id(shim_core, conn, name):
    lock = Lock(conn, name, expire=5)
    with lock:
        with pytest.raises(AlreadyAcquired):
            lock.acquire()
        twin = Lock(conn, name, id=lock.id)
        with pytest.raises(AlreadyAcquired):
            twin.acquire()  # blocking, yet it does not wait for itself
        assert Lock(conn, name).acquire(blocking=False) is False


def test_another_instance_with_the_id_extends_and_releases(shim_core, conn, name):
    lock = Lock(conn, name, expire=100)
    assert lock.acquire()
    stranger = Lock(conn, name)
    with pytest.raises(NotAcquired):
        stranger.extend(1000)
    assert conn.ttl(f"lock:{name}") <= 100
    twin = Lock(conn, name, id=lock.id)
    twin.extend(1000)
    assert conn.ttl(f"lock:{name}") > 100
    twin.release()
    assert conn.get(f"lock:{name}") is None and conn.llen(f"lock-signal:{name}") == 1
    with pytest.raises(NotAcquired):
        lock.release()


def test_extend_resets_the_expiry_of_the_holder(shim_core, conn, name):
    with Lock(conn, name, expire=100) as lock:
        lock.extend(expire=1000)
        assert 990 < conn.ttl(f"lock:{name}") <= 1000
        lock.extend()  # the constructor's expire
        assert 90 < conn.ttl(f"lock:{name}") <= 100
    with Lock(conn, name) as lock:
        with pytest.raises(NotExpirable):
            lock.extend(expire=10)
        with pytest.raises(TypeError):
            lock.extend()


def test_extend_of_a_lock_that_expired_raises_not_acquired(shim_core, conn, name):
    lock = Lock(conn, name, expire=1)
    assert lock.acquire()
    conn.delete(f"lock:{name}")  # as if it expired
    with pytest.raises(NotAcquired):
        lock.extend(5)
    with pytest.raises(NotAcquired):
        lock.release()


def test_a_lock_without_expire_has_a_renewed_ttl(shim_core, conn, name, monkeypatch):
    monkeypatch.setattr(redis_lock, "NO_EXPIRE_TTL", 0.3)
    lock = Lock(conn, name)
    assert lock.acquire()
    assert 0 < conn.pttl(f"lock:{name}") <= 300  # the original: no TTL (-1), stored for good
    time.sleep(0.8)
    assert _text(conn.get(f"lock:{name}")) == lock.id, "the watchdog did not renew it"
    lock.release()
    assert conn.get(f"lock:{name}") is None


@pytest.mark.slow
def test_auto_renewal_keeps_it_and_stops_when_the_lock_is_collected(shim_core, conn, name):
    lock = Lock(conn, name, expire=1, auto_renewal=True)
    assert lock._lock_renewal_interval == pytest.approx(2 / 3)
    assert lock.acquire()
    time.sleep(1.5)
    assert _text(conn.get(f"lock:{name}")) == lock.id, "key expired but it should have been renewed"
    del lock
    gc.collect()
    time.sleep(1.5)
    assert conn.get(f"lock:{name}") is None, "still renewed after the Lock was garbage collected"


def test_blocking_timeout_gives_up(shim_core, conn, name):
    with Lock(conn, name, expire=5):
        started = time.monotonic()
        assert Lock(conn, name).acquire(timeout=1) is False
        assert 0.9 < time.monotonic() - started < 1.5


@pytest.mark.slow
def test_waiter_takes_the_lock_when_it_expires(shim_core, conn, name):
    assert Lock(conn, name, expire=1).acquire()
    started = time.monotonic()
    assert Lock(conn, name).acquire(timeout=2)  # no signal: it tries again after its timeout
    assert time.monotonic() - started < 2.5


def _wait_in_thread(conn, name, timeout, results):
    def wait():
        started = time.monotonic()
        results["got"] = Lock(conn, name).acquire(timeout=timeout)
        results["waited"] = time.monotonic() - started

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 5
    while conn.info("clients")["blocked_clients"] == 0:  # until the waiter is in BLPOP
        assert time.monotonic() < deadline and thread.is_alive(), results
        time.sleep(0.002)
    return thread


@pytest.mark.parametrize("signal", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["signal", "no-signal-detector"])
def test_release_wakes_a_waiter(shim_core, conn, name, signal, monkeypatch):
    """The waiter is woken by the release's signal, not by its timeout; without the signal (the
    detector's run) it wakes only at its timeout."""
    if not signal:
        monkeypatch.setattr(Lock, "_wake_signal", lambda self: None)  # a plain release
    holder = Lock(conn, name, expire=5)
    assert holder.acquire()
    results = {}
    thread = _wait_in_thread(conn, name, 3, results)  # returns once the waiter is in BLPOP
    holder.release()
    thread.join(5)
    assert results["got"]
    if signal:
        assert results["waited"] < 1.0, results
    else:
        assert results["waited"] >= 2.9, results


@pytest.mark.parametrize("how", ["reset", "reset_all"])
def test_reset_deletes_and_wakes_waiters(shim_core, conn, name, how):
    holder = Lock(conn, name, expire=5)
    assert holder.acquire()
    results = {}
    thread = _wait_in_thread(conn, name, 3, results)
    if how == "reset":
        Lock(conn, name).reset()
    else:
        reset_all(conn)
    thread.join(5)
    assert results["got"] and results["waited"] < 1.0, results
    with pytest.raises(NotAcquired):
        holder.release()


def test_a_server_that_fails_raises_the_redis_error(shim_core, dead_port, name):
    conn = redis.StrictRedis(host="127.0.0.1", port=dead_port)
    with pytest.raises(redis.ConnectionError):
        Lock(conn, name, expire=1).acquire(blocking=False)
    with pytest.raises(redis.ConnectionError):
        Lock(conn, name, id="x").release()


def test_logs_to_the_originals_loggers(shim_core, conn, name, caplog):
    with caplog.at_level(logging.DEBUG, logger="redis_lock"):
        with Lock(conn, name, expire=5):
            assert Lock(conn, name).acquire(blocking=False) is False
    key = f"lock:{name}"
    seen = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("redis_lock")]
    assert seen == [
        ("redis_lock.acquire", "DEBUG", f"Acquiring Lock({key!r}) ..."),
        ("redis_lock.acquire", "INFO", f"Acquired Lock({key!r})."),
        ("redis_lock.acquire", "DEBUG", f"Acquiring Lock({key!r}) ..."),
        ("redis_lock.acquire", "WARNING", f"Failed to acquire Lock({key!r})."),
        ("redis_lock.release", "DEBUG", f"Releasing Lock({key!r})."),
    ]


def test_locks_through_one_shared_engine_client(shim_core, conn, name):
    first, second = Lock(conn, name, expire=5), Lock(conn, name + ":2", expire=5)
    assert first.acquire() and second.acquire()
    client = first._handle._client
    assert isinstance(client, Redlock) and client.core == shim_core and client is second._handle._client
    assert client.masters == (f"127.0.0.1:{conn.connection_pool.connection_kwargs['port']}",)
    first.release()
    second.release()


@pytest.fixture
def paused_later():
    """A server of its own, and ``pause_for(seconds)``: SIGSTOP it now, SIGCONT it that much later."""
    from fastredlock.testing import LocalMaster

    master = LocalMaster().start()
    timers = []

    def pause_for(seconds):
        master.pause()
        timer = threading.Timer(seconds, master.resume)
        timers.append(timer)
        timer.start()

    yield master, pause_for
    joined(*timers)
    master.stop()


def test_a_slow_server_is_waited_for_by_a_blocking_acquire(shim_core, paused_later, name):
    """The original waited for a slow server's answer; the shim tries again instead of raising
    (io_timeout is 50 ms), and a non-blocking attempt raises redis-py's TimeoutError."""
    master, pause_for = paused_later
    conn = redis.StrictRedis(host="127.0.0.1", port=master.port, socket_timeout=5)
    pause_for(0.4)
    with pytest.raises(redis.TimeoutError):
        Lock(conn, name, expire=5).acquire(blocking=False)
    conn.ping()  # the first pause is over (else its timer would end the second one early)
    pause_for(0.4)
    started = time.monotonic()
    lock = Lock(conn, name, expire=5)
    assert lock.acquire(timeout=3)
    assert 0.3 < time.monotonic() - started < 2.0
    assert _text(conn.get(f"lock:{name}")) == lock.id
    lock.release()
    conn.close()


def test_with_uses_the_constructors_blocking(shim_core, conn, name):
    assert redis_lock.Lock(conn, name).blocking is True
    holder = redis_lock.Lock(conn, name, expire=5)
    assert holder.acquire()
    started = time.monotonic()
    with pytest.raises(NotAcquired, match="is not acquired"):
        with redis_lock.Lock(conn, name, blocking=False):
            pass  # pragma: no cover - never entered
    assert time.monotonic() - started < 0.5  # one attempt, no wait
    assert conn.get("lock:" + name) == holder.id.encode()  # the holder's key untouched
    holder.release()
    with redis_lock.Lock(conn, name, blocking=False) as lock:  # free: taken, and released at the end
        assert lock.blocking is False and conn.get("lock:" + name) == lock.id.encode()
    assert conn.get("lock:" + name) is None


def test_with_blocking_waits_for_the_release(shim_core, conn, name):
    holder = redis_lock.Lock(conn, name, expire=5)
    assert holder.acquire()
    timer = threading.Timer(0.2, holder.release)
    timer.start()
    try:
        started = time.monotonic()
        with redis_lock.Lock(conn, name, blocking=True) as lock:
            assert 0.1 < time.monotonic() - started < 2.0  # woken by the release's signal
            assert conn.get("lock:" + name) == lock.id.encode()
    finally:
        joined(timer)
