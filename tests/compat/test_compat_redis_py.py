"""``fastredlock.compat.redis_py``: ``Lock`` and ``AsyncLock``, redis-py's Lock API, keys, values and errors.

Each test is written once and runs on both flavours (``sync``: the shim's ``Lock`` with a
``redis.Redis`` client; ``asyncio``: ``AsyncLock`` with a ``redis.asyncio.Redis`` client, every
call run to its end on one event loop) and both cores, against a real local server. Where the two
must agree (they exclude each other on one name), it checks what redis-py's own Lock of the same
flavour does to the same key.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time

import pytest
import redis
import redis.asyncio
import redis.asyncio.lock
import redis.lock
from redis.exceptions import LockError, LockNotOwnedError

from fastredlock.compat.redis_py import NO_TIMEOUT_TTL, AsyncLock, AsyncRenewedLock, Lock, RenewedLock
from fastredlock.testing import start_masters

from _bounded import BOUND, joined


class Flavour:
    """One flavour of the API: its classes, and ``run(x)`` that finishes a call (awaits it on the
    flavour's loop for asyncio; returns it as it is for sync)."""

    def __init__(self, loop):
        self.loop = loop
        self.Lock = AsyncLock if self.loop else Lock
        self.RenewedLock = AsyncRenewedLock if self.loop else RenewedLock
        self.Original = redis.asyncio.lock.Lock if self.loop else redis.lock.Lock
        self._clients = []

    def client(self, master, **kwargs):
        cls = redis.asyncio.Redis if self.loop else redis.Redis
        r = cls(host="127.0.0.1", port=master.port, socket_timeout=1, **kwargs)
        self._clients.append(r)
        return r

    def run(self, value):
        if self.loop is not None and inspect.isawaitable(value):
            return self.loop.run_until_complete(value)
        return value

    def sleep(self, seconds):
        if self.loop is not None:
            self.loop.run_until_complete(asyncio.sleep(seconds))
        else:
            time.sleep(seconds)

    @contextlib.contextmanager
    def holding(self, lock):
        """``with lock`` / ``async with lock``, as the flavour does it."""
        if self.loop is None:
            with lock as held:
                yield held
            return
        held = self.run(lock.__aenter__())
        try:
            yield held
        except BaseException as exc:
            if not self.run(lock.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self.run(lock.__aexit__(None, None, None))

    def close(self):
        """Close the redis-py clients (the loop, if any, is ended by the ``aloop`` fixture)."""
        for r in self._clients:
            self.run(r.aclose() if self.loop else r.close())


def _flavour(request):
    api = Flavour(request.getfixturevalue("aloop") if request.param == "asyncio" else None)
    yield api
    api.close()


@pytest.fixture(params=["sync", "asyncio"])
def api(request, shim_core):
    yield from _flavour(request)


@pytest.fixture(params=["sync", "asyncio"])
def one_api(request, one_shim_core):
    """``api`` on the active core only: for argument checks."""
    yield from _flavour(request)


@pytest.fixture
def r(api, masters):
    return api.client(masters[0])


def _in_other_thread(fn):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", fn()))
    thread.start()
    joined(thread)
    return box["value"]


def test_lock_class_stores_token_with_ttl_and_releases(api, r, name):
    lock = r.lock(name, timeout=2, lock_class=api.Lock)
    assert isinstance(lock, api.Lock)
    assert api.run(lock.acquire(blocking=False))
    assert api.run(r.get(name)) == lock.local.token
    assert 1900 < api.run(r.pttl(name)) <= 2000
    assert api.run(lock.owned()) and api.run(lock.locked())
    api.run(lock.release())
    assert api.run(r.get(name)) is None and lock.local.token is None
    assert not api.run(lock.locked())


def test_user_token_is_encoded_and_stored(api, r, name):
    lock = api.Lock(r, name, timeout=1, thread_local=False)
    assert api.run(lock.acquire(blocking=False, token="test"))
    assert api.run(r.get(name)) == b"test" and lock.local.token == b"test"
    api.run(lock.release())
    assert api.run(r.get(name)) is None


def test_handle_is_reused_across_acquisitions(api, r, name):
    lock = api.Lock(r, name, timeout=1)
    tokens = set()
    for _ in range(3):
        assert api.run(lock.acquire(blocking=False))
        tokens.add(lock.local.token)
        api.run(lock.release())
    assert len(tokens) == 3  # a fresh token each time, on the one handle
    assert api.run(r.get(name)) is None


@pytest.mark.parametrize("timeout", [None, 0])
def test_no_timeout_lock_has_no_expiry_and_refuses_extend(api, r, name, timeout):
    lock = r.lock(name, timeout=timeout, lock_class=api.Lock)
    assert api.run(lock.acquire(blocking=False))
    assert api.run(r.get(name)) == lock.local.token
    assert api.run(r.ttl(name)) == -1  # as redis-py: no expiry at all
    assert api.run(lock.owned()) and api.run(lock.locked())
    with pytest.raises(LockError, match="Cannot extend a lock with no timeout"):
        lock.extend(1)
    with pytest.raises(LockError, match="Cannot reacquire a lock with no timeout"):
        lock.reacquire()
    other = api.Lock(r, name)
    assert not api.run(other.acquire(blocking=False))
    api.run(lock.release())
    assert api.run(r.get(name)) is None and lock.local.token is None
    assert api.run(other.acquire(blocking=False))  # free again
    api.run(other.release())


def test_no_timeout_lock_is_never_renewed_nor_expires(api, r, name):
    lock = api.Lock(r, name)
    assert api.run(lock.acquire(token="mine"))
    api.sleep(0.3)
    assert api.run(r.get(name)) == b"mine" and api.run(r.ttl(name)) == -1  # nothing touched it
    with api.holding(api.Lock(r, name + ":with")) as held:  # the context manager, too
        assert api.run(r.ttl(name + ":with")) == -1 and api.run(held.owned())
    assert api.run(r.get(name + ":with")) is None
    api.run(lock.release())


def test_no_timeout_lock_deleted_by_someone_else_is_not_owned(api, r, name):
    lock = api.Lock(r, name)
    assert api.run(lock.acquire())
    api.run(r.delete(name))
    api.run(r.set(name, "someone else"))
    assert not api.run(lock.owned())
    with pytest.raises(LockNotOwnedError, match="Cannot release a lock that's no longer owned"):
        api.run(lock.release())
    assert api.run(r.get(name)) == b"someone else"  # never touched another holder's key
    assert lock.local.token is None


def test_no_timeout_lock_excludes_redis_pys_own_lock(api, r, name):
    ours = api.Lock(r, name)
    theirs = api.Original(r, name)
    assert api.run(theirs.acquire(blocking=False))
    assert not api.run(ours.acquire(blocking=False))
    api.run(theirs.release())
    assert api.run(ours.acquire(blocking=False))
    assert api.run(r.ttl(name)) == -1
    assert not api.run(theirs.acquire(blocking=False))
    api.run(ours.release())


def test_no_timeout_lock_with_blocking_timeout_gives_up(api, r, name):
    api.run(r.set(name, "held"))
    lock = api.Lock(r, name, sleep=0.02, blocking_timeout=0.1)
    started = time.monotonic()
    assert not api.run(lock.acquire())
    assert 0.05 < time.monotonic() - started < 1.0
    assert api.run(r.get(name)) == b"held"


def test_no_timeout_lock_cancelled_acquire_leaves_nothing(shim_core, masters, name, aloop):
    async def main():
        r = redis.asyncio.Redis(host="127.0.0.1", port=masters[0].port, socket_timeout=1)
        try:
            for _ in range(20):  # cancelled at once, then a little later each time: never half-held
                lock = AsyncLock(r, name)
                task = asyncio.ensure_future(lock.acquire())
                await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                else:
                    await lock.release()
                await asyncio.sleep(0.02)
                assert await r.get(name) is None
        finally:
            await r.aclose()

    aloop.run_until_complete(main())


def test_renewed_lock_gets_a_ttl_and_refuses_extend(api, r, name):
    lock = r.lock(name, lock_class=api.RenewedLock)
    assert isinstance(lock, api.Lock)
    assert api.run(lock.acquire())
    assert 0 < api.run(r.pttl(name)) <= NO_TIMEOUT_TTL * 1000
    with pytest.raises(LockError, match="Cannot extend a lock with no timeout"):
        lock.extend(1)
    with pytest.raises(LockError, match="Cannot reacquire a lock with no timeout"):
        lock.reacquire()
    api.run(lock.release())
    assert api.run(r.get(name)) is None


def test_renewed_lock_outlives_its_ttl_while_held(api, r, name):
    lock = api.RenewedLock(r, name)
    lock.no_timeout_ttl = 0.3
    assert api.run(lock.acquire(token="mine"))
    api.sleep(0.8)  # well past 0.3 s: the watchdog renewed it
    assert api.run(r.get(name)) == b"mine" and api.run(lock.owned())
    assert 0 < api.run(r.pttl(name)) <= 300
    api.run(lock.release())
    assert api.run(r.get(name)) is None


def test_competing_with_redis_py_on_the_same_name(api, r, name):
    original = api.Original(r, name, timeout=5)
    shim = api.Lock(r, name, timeout=5)
    assert api.run(original.acquire(blocking=False))
    assert not api.run(shim.acquire(blocking=False))
    assert api.run(shim.locked()) and not api.run(shim.owned())
    api.run(original.release())
    assert api.run(shim.acquire(blocking=False))
    assert not api.run(original.acquire(blocking=False))
    api.run(shim.release())
    assert api.run(original.acquire(blocking=False))  # the shim left nothing behind
    api.run(original.release())


def test_blocking_timeout_and_sleep(api, r, name):
    holder = api.Lock(r, name, timeout=0.3)
    other = api.Lock(r, name, timeout=5, sleep=0.05, blocking_timeout=0.1)
    assert api.run(holder.acquire())
    started = time.monotonic()
    assert not api.run(other.acquire())
    assert 0.05 <= time.monotonic() - started < 0.3
    # a sleep longer than the blocking timeout: one attempt, no sleep (as redis-py)
    slow = api.Lock(r, name, timeout=5, sleep=10)
    started = time.monotonic()
    assert not api.run(slow.acquire(blocking_timeout=0.5))
    assert time.monotonic() - started < 0.2
    assert api.run(other.acquire(blocking_timeout=1))  # the holder's 0.3 s ran out
    api.run(other.release())


def test_sync_acquire_takes_sleep_first_as_redis_py(shim_core, masters, name):
    r = redis.Redis(host="127.0.0.1", port=masters[0].port, socket_timeout=1)
    holder = Lock(r, name, timeout=0.3)
    assert holder.acquire()
    started = time.monotonic()
    assert not Lock(r, name, timeout=5, sleep=10).acquire(0.02, True, 0.1)  # sleep, blocking, blocking_timeout
    assert 0.06 <= time.monotonic() - started < 0.3
    r.close()


def test_context_manager_and_its_errors(api, r, name):
    with api.holding(r.lock(name, timeout=1, lock_class=api.Lock)) as lock:
        assert api.run(r.get(name)) == lock.local.token
    assert api.run(r.get(name)) is None
    holder = api.Lock(r, name, timeout=5)
    assert api.run(holder.acquire())
    with pytest.raises(LockError, match="Unable to acquire lock within the time specified"):
        with api.holding(api.Lock(r, name, timeout=1, blocking=False)):
            pass
    api.run(holder.release())
    # the key vanished under the body: raises, unless raise_on_release_error=False
    with pytest.raises(LockNotOwnedError):
        with api.holding(api.Lock(r, name, timeout=1)):
            api.run(r.delete(name))
    with api.holding(api.Lock(r, name, timeout=1, raise_on_release_error=False)):
        api.run(r.delete(name))


def test_release_errors(api, r, name):
    lock = api.Lock(r, name, timeout=1)
    with pytest.raises(LockError, match="Cannot release a lock that's not owned or is already unlocked."):
        api.run(lock.release())
    assert api.run(lock.acquire())
    api.run(r.set(name, "someone else"))
    with pytest.raises(LockNotOwnedError, match="Cannot release a lock that's no longer owned") as caught:
        api.run(lock.release())
    assert caught.value.lock_name == name
    assert api.run(r.get(name)) == b"someone else" and lock.local.token is None


def test_token_set_by_hand_is_released_by_value(api, r, name):
    """redis-py code passes a token between processes by setting ``local.token`` itself."""
    first = api.Lock(r, name, timeout=5)
    assert api.run(first.acquire())
    other = api.Lock(r, name, timeout=5, thread_local=False)
    other.local.token = first.local.token
    api.run(other.release())
    assert api.run(r.get(name)) is None


def test_extend_adds_or_replaces_and_reacquire_resets(api, r, name):
    lock = api.Lock(r, name, timeout=10)
    assert api.run(lock.acquire())
    assert api.run(lock.extend(10)) is True
    assert 16000 < api.run(r.pttl(name)) <= 20000
    assert api.run(lock.extend(5, replace_ttl=True)) is True
    assert 4000 < api.run(r.pttl(name)) <= 5000
    assert api.run(lock.extend(0.5)) is True
    assert 5000 < api.run(r.pttl(name)) <= 5500
    api.run(r.pexpire(name, 1000))
    assert api.run(lock.reacquire()) is True
    assert 9000 < api.run(r.pttl(name)) <= 10000
    api.run(lock.release())


def test_extend_and_reacquire_errors(api, r, name):
    lock = api.Lock(r, name, timeout=10)
    with pytest.raises(LockError, match="Cannot extend an unlocked lock"):
        lock.extend(10)
    with pytest.raises(LockError, match="Cannot reacquire an unlocked lock"):
        lock.reacquire()
    assert api.run(lock.acquire())
    api.run(r.set(name, "someone else"))
    with pytest.raises(LockNotOwnedError, match="Cannot extend a lock that's no longer owned"):
        api.run(lock.extend(10))
    with pytest.raises(LockNotOwnedError, match="Cannot reacquire a lock that's no longer owned"):
        api.run(lock.reacquire())
    assert api.run(r.get(name)) == b"someone else"  # never touched another holder's key


def test_owned_with_decoded_responses_and_thread_local_token(api, masters, name):
    r = api.client(masters[0], decode_responses=True)
    lock = api.Lock(r, name, timeout=2)
    assert not api.run(lock.owned())
    assert api.run(lock.acquire())
    assert api.run(lock.owned())
    assert _in_other_thread(lambda: getattr(lock.local, "token", None)) is None  # not this thread's
    shared = api.Lock(r, name + "2", timeout=2, thread_local=False)
    assert api.run(shared.acquire())
    assert _in_other_thread(lambda: shared.local.token) == shared.local.token
    api.run(lock.release())
    api.run(shared.release())


def test_server_not_answering_raises_redis_error_and_keeps_token(api, name):
    from redis.exceptions import TimeoutError as RedisTimeoutError

    with start_masters(1) as (master,):
        r = api.client(master)
        lock = api.Lock(r, name, timeout=5)
        assert api.run(lock.acquire())
        token = lock.local.token
        master.pause()
        try:
            with pytest.raises(RedisTimeoutError):
                api.run(lock.release())
            assert lock.local.token == token  # kept: the release can be retried
        finally:
            master.resume()
        api.sleep(0.1)  # the server is awake again, and runs the release it had received: a
        # timeout says nothing about whether the command ran (as with redis-py's own Lock; its
        # script was loaded on connect, so it does not fail there with NOSCRIPT either)
        assert api.run(r.get(name)) is None
        with pytest.raises(redis.exceptions.LockNotOwnedError):
            api.run(lock.release())  # the retry finds it gone
        assert api.run(r.get(name)) is None


def test_asyncio_client_per_event_loop(shim_core, masters, name, arun):
    async def on_new_loop():
        r = redis.asyncio.Redis(host="127.0.0.1", port=masters[0].port, socket_timeout=1)
        lock = AsyncLock(r, name, timeout=1)
        assert await lock.acquire()
        await lock.release()
        await r.aclose()

    lock_loops = [arun(on_new_loop()) for _ in range(2)]  # a second loop: no "another event loop" error
    assert lock_loops == [None, None]


def test_bad_arguments(one_api, masters, name):
    client = "redis.asyncio.Redis" if one_api.loop else "redis.Redis"
    with pytest.raises(TypeError, match=client):
        one_api.Lock("redis://127.0.0.1", name)
    r = one_api.client(masters[0])
    with pytest.raises(ValueError, match="timeout"):
        one_api.Lock(r, name, timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        one_api.Lock(r, name, timeout="10")
    with pytest.raises(ValueError, match="sleep"):
        one_api.Lock(r, name, sleep=-1)
    lock = one_api.Lock(r, name, timeout=2.5)
    assert repr(lock) == f"<{one_api.Lock.__name__} name={name!r} timeout=2.5>"


def test_each_thread_has_its_own_token_whoever_made_the_lock(shim_core, masters, name):
    # The first thread to use a lock keeps its state in a plain object, the others in a
    # threading.local: made in one thread, used in others (and after the first one ended),
    # each thread sees only its own token, as with redis-py's threading.local.
    import redis

    from fastredlock.compat.redis_py import Lock

    r = redis.Redis.from_url(masters[0].url)
    lock = _in_other_thread(lambda: Lock(r, name, timeout=2))  # its maker is gone
    assert lock.local.token is None
    assert _in_other_thread(lambda: (lock.acquire(blocking=False), lock.local.token)[1]) is not None
    assert lock.local.token is None  # the other thread's acquisition is not this one's
    with pytest.raises(LockError, match="not owned"):
        lock.release()
    lock.local.token = r.get(name)  # redis-py's way to hand a lock over: set the token
    lock.release()
    assert r.get(name) is None

    made_here = Lock(r, name, timeout=2)
    seen = []
    barrier = threading.Barrier(4, timeout=BOUND)

    def contend():
        barrier.wait()  # their first uses at once: each gets a state of its own
        took = made_here.acquire(blocking=False)
        seen.append((took, made_here.local.token))
        if took:
            made_here.release()

    threads = [threading.Thread(target=contend) for _ in range(4)]
    for t in threads:
        t.start()
    joined(*threads)
    assert made_here.local.token is None and len(seen) == 4
    assert all((token is not None) == took for took, token in seen)
    assert len({token for took, token in seen if took}) == sum(took for took, _ in seen) >= 1


def test_no_expiry_script_digest_matches_the_server(masters):
    from fastredlock.protocol.scripts import ACQUIRE_NO_EXPIRY, ACQUIRE_NO_EXPIRY_SHA

    assert masters[0].command("SCRIPT", "LOAD", ACQUIRE_NO_EXPIRY) == ACQUIRE_NO_EXPIRY_SHA


def test_no_timeout_attempt_the_server_did_not_answer_leaves_no_key(api, name):
    """A key without expiry left by a failed attempt would lock the name for good: an attempt
    whose SET the server has not answered in time is undone behind that SET, on its connection."""
    with start_masters(1) as (master,):
        r = api.client(master)
        lock = api.Lock(r, name)
        assert api.run(lock.acquire(blocking=False))  # connected (and the script known) first
        api.run(lock.release())
        master.pause()
        try:
            assert not api.run(lock.acquire(blocking=False))  # no answer within io_timeout
        finally:
            master.resume()
        api.sleep(0.2)  # the server runs the SET it had received, then the release behind it
        assert api.run(r.get(name)) is None
        assert api.run(lock.acquire(blocking=False))  # and the name is free
        assert api.run(r.ttl(name)) == -1
        api.run(lock.release())
