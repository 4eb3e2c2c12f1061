"""The sync front-end's fast paths of the uncontended cycle (issue 41) keep the general paths' answers.

``checks.key_of`` makes a str name's key in C (compiled), tokens are formatted in C, the executor
remembers the last TTL and the core it gave the restart grace to, and a plain ``Lock``'s
``with`` block releases through one C call: each is checked here against what the general path
says (on both cores where masters are involved).
"""
from __future__ import annotations

import re

import pytest

import fastredlock
from fastredlock.engine import checks, tokens
from fastredlock.errors import LockNotOwnedError


@pytest.mark.parametrize("prefix", [b"", b"app:"])
@pytest.mark.parametrize("name", ["a", "lock:1", "é-ü", "名前", "x" * 300, "emoji \U0001f512", "a{b}c", "{x}"])
def test_key_of_str_is_the_prefix_and_the_utf8(prefix, name):
    assert checks.key_of(prefix, name) == prefix + name.encode("utf-8")
    assert checks.key_of(prefix, name) == checks.key_of(prefix, name.encode("utf-8"))


def test_key_of_keeps_lone_surrogates_and_refuses_what_it_refused():
    assert checks.key_of(b"", "\udc80x") == "\udc80x".encode("utf-8", "surrogatepass")
    with pytest.raises(ValueError, match="must not be empty"):
        checks.key_of(b"", "")
    with pytest.raises(ValueError, match="the limit is"):
        checks.key_of(b"p", "x" * checks.MAX_NAME_BYTES)
    assert len(checks.key_of(b"", "x" * checks.MAX_NAME_BYTES)) == checks.MAX_NAME_BYTES
    with pytest.raises(TypeError):
        checks.key_of(b"", 5)


def test_key_of_str_still_refuses_a_reserved_name():
    """A derived key (here the fence counter of lock ``a``) is refused as a name, str or bytes."""
    from fastredlock.sync.lock import fence_key

    derived = fence_key(b"a")
    with pytest.raises(ValueError, match="reserved"):
        checks.key_of(b"", derived.decode())
    with pytest.raises(ValueError, match="reserved"):
        checks.key_of(b"", derived)


def test_the_last_key_memo_never_answers_for_another_prefix_or_name(make_client, masters):
    """A handle of the name object the last handle had, with the same prefix object, takes its key
    (handles/lock.py's ``_last_key``); another prefix (another client's, or the client's prefix
    changed) or another name makes its own, and a refused name is refused every time."""
    name = "memo:" + "x"  # one str object, used again
    plain = make_client(masters.urls, retry_count=0)
    app = make_client(masters.urls, retry_count=0, prefix="app:")
    assert plain.lock(name).key == b"memo:x"
    assert plain.lock(name).key == b"memo:x"  # the memo's answer
    assert app.lock(name).key == b"app:memo:x"
    assert plain.lock(name).key == b"memo:x"
    app.prefix = b"other:"
    assert app.lock(name).key == b"other:memo:x"
    assert app.lock("memo:y").key == b"other:memo:y"
    assert app.lock(name.encode()).key == b"other:memo:x"
    from fastredlock.sync.lock import fence_key

    derived = fence_key(b"a").decode()
    for _ in range(2):
        with pytest.raises(ValueError, match="reserved"):
            plain.lock(derived)
    for _ in range(2):
        with pytest.raises(ValueError, match="must not be empty"):
            plain.lock("")


def test_a_handle_made_after_one_was_freed_starts_fresh(make_client, masters, name):
    """Compiled, freed handles are kept for reuse (LockBase's freelist): a handle made in the
    place of a freed one holds nothing of it, and weak references to the freed one are dead."""
    import gc
    import weakref

    dlm = make_client(masters.urls, io_timeout=1.0)  # (a loaded machine must not fail an attempt)
    seen = []
    for k in range(20):
        lock = dlm.lock(f"{name}:{k}", ttl=5.0, auto_extend=bool(k % 2), fencing=k == 3)
        assert (lock.token, lock.fence, lock._last, lock._carrier, lock.outcomes) == (None, None, None, None, [])
        assert (lock.auto_extend, lock.fencing, lock.validity, lock.lost) == (bool(k % 2), k == 3, 0.0, False)
        assert lock.acquire(timeout=10.0)
        lock.release()
        seen.append(weakref.ref(lock))
        del lock
        gc.collect()
        assert all(ref() is None for ref in seen)


def test_tokens_have_the_documented_shape_across_refills():
    drawn = [tokens.new_token() for _ in range(3 * 256 + 5)]  # several blocks of random bytes
    assert len(set(drawn)) == len(drawn)
    shape = re.compile(rb"[0-9a-f]{32}:[0-9a-f]{32}")
    assert all(shape.fullmatch(t) for t in drawn)
    assert len({t[:33] for t in drawn}) == 1  # one process id
    assert tokens.holder_of(drawn[0]) != tokens.FOREIGN


def test_the_last_ttl_memo_never_answers_for_another_value(make_client, masters):
    dlm = make_client(masters.urls, restart_aware=False)
    executor = dlm.executor
    assert executor.ttl_ms(10.0) == 10000
    assert executor.ttl_ms(10.0) == 10000  # the memo's answer
    assert executor.ttl_ms(2) == 2000
    for bad in (None, True, "10"):
        with pytest.raises((TypeError, ValueError)):
            executor.ttl_ms(bad)
    assert executor.ttl_ms(2) == 2000


def test_the_restart_grace_follows_the_largest_ttl_on_every_core(make_client, masters, name):
    """The executor sets a core's grace only when it changed since it last set it on that core:
    a larger TTL still reaches the core, and a second core gets it too."""
    dlm = make_client(masters.urls, retry_count=0, restart_aware=True)
    executor = dlm.executor
    executor.ttl_ms(1.0)
    first = executor.checkout()
    executor.for_acquiring(first)
    assert first.restart_grace_ms == 1000
    executor.ttl_ms(30.0)  # a larger TTL: the grace grows
    executor.for_acquiring(first)
    assert first.restart_grace_ms == 30000
    second = executor.checkout()  # a new core: never given a grace
    assert second is not first
    executor.for_acquiring(second)
    assert second.restart_grace_ms == 30000
    executor.for_acquiring(first)
    assert first.restart_grace_ms == 30000
    executor.checkin(second)
    executor.checkin(first)
    for ttl, grace in ((40.0, 40000), (40.0, 40000), (5.0, 40000)):
        dlm.lock(name, ttl=ttl).acquire(blocking=False)  # (refused or not: masters younger than the grace)
        assert first.restart_grace_ms == grace or second.restart_grace_ms == grace
        used = executor.checkout()
        assert used.restart_grace_ms == grace  # the core the round used (this thread's, on top)
        executor.checkin(used)


def test_a_with_block_releases_a_plain_lock_and_a_subclass_through_its_release(make_client, masters, name,
                                                                             keys_on):
    dlm = make_client(masters.urls, retry_count=0, restart_aware=False)
    with dlm.lock(name, ttl=5.0) as lock:
        assert keys_on(masters, name) == len(masters.urls)
    assert lock.token is None and keys_on(masters, name) == 0

    calls = []

    class Counted(fastredlock.Lock):
        def release(self, *args, **kwargs):
            calls.append(args)
            return super().release(*args, **kwargs)

    with Counted(dlm, name, 5.0):
        pass
    assert calls == [()] and keys_on(masters, name) == 0

    lock = dlm.lock(name, ttl=5.0)
    with pytest.raises(LockNotOwnedError):
        with lock:
            dlm.lock(name).release(token=lock.token)  # released behind the block's back: its end says so
    assert lock.token is None


def test_checkout_of_a_carrier_core_takes_that_core_wherever_it_is_in_the_pool(make_client, masters):
    dlm = make_client(masters.urls)
    executor = dlm.executor
    first = executor.checkout()
    second = executor.checkout()  # a new core: the pool was empty
    executor.checkin(first)
    executor.checkin(second)  # the pool: [first, second]
    assert executor.checkout(first) is first  # below the top: the top one goes back
    assert executor._pool == [second]
    executor.checkin(first)
    assert executor.checkout(first) is first  # on top
    assert executor._pool == [second]
    executor.checkin(first)
    assert sorted(map(id, executor._pool)) == sorted(map(id, (first, second)))


def test_the_executor_calls_the_cython_core_in_c_and_its_lean_forms_agree(make_client, masters, core, name, keys_on):
    """With the Cython core (compiled executor), acquire and release are C calls into the core
    (io/core_c.pyx's _C_ENTRIES); the pure core keeps the Python call. ``acquire_lean`` /
    ``release_lean`` (the sync handle's) and the tuple forms give the same rounds."""
    from fastredlock.engine import executor as executor_module

    dlm = make_client(masters.urls)
    executor = dlm.executor
    compiled = not executor_module.__file__.endswith(".py")
    if core == "cython" and compiled:
        from fastredlock.io import core_c

        assert executor._c_core is core_c.Core
    else:
        assert executor._c_core is None
    key = name.encode()
    carrier, rnd = executor.acquire_one(key, b"t1", 5000)
    assert rnd.ok and (carrier is None or carrier[1] is rnd)
    assert keys_on(masters, key) == 5
    got = executor.acquire_lean(key, b"t2", 5000)  # held by t1: refused, the round alone or (carrier, round)
    rnd2 = got[1] if type(got) is tuple else got
    assert not rnd2.ok and rnd2.successes == 0
    got = executor.release_lean(key, b"t2")  # not t2's: nothing deleted
    rnd3, ok = got if type(got) is tuple else (got, got.ok)
    assert not ok and keys_on(masters, key) == 5
    got = executor.release_lean(key, b"t1", carrier)
    rnd4, ok = got if type(got) is tuple else (got, got.ok)
    assert ok and rnd4.successes == 5 and keys_on(masters, key) == 0
    with dlm.lock(name, 5.0) as lock:  # the handle's hot path over the same entries
        assert keys_on(masters, lock.key) == 5
    assert keys_on(masters, key) == 0
