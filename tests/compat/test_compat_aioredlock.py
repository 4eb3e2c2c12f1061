"""fastredlock.compat.aioredlock keeps aioredlock 0.7.3's documented behaviour, on real masters.

aioredlock's sdist ships no test suite, so these tests check what its README and docstrings
promise (and the differences the shim's docstring lists); test_compat_interop.py runs the original
against the shim on the same keys. Behaviour tests run on both cores (``shim_core``), each on a
fresh event loop; argument checks once (``one_shim_core``).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
from _ports import dead_ports, free_block

from fastredlock.compat.aioredlock import (
    Aioredlock, Lock, LockAcquiringError, LockError, LockRuntimeError, Sentinel, SentinelConfigError,
)


def run(coro):
    """Run ``coro`` on a new loop; fail if it left tasks behind (a watchdog that outlived destroy)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()
        assert not left, f"tasks left running: {left}"


def manager(masters, **kwargs):
    kwargs.setdefault("retry_count", 2)
    kwargs.setdefault("retry_delay_min", 0.01)
    kwargs.setdefault("retry_delay_max", 0.02)
    return Aioredlock([("127.0.0.1", m.port) for m in masters], **kwargs)


def values_on(masters, key):
    return [m.command("GET", key) for m in masters]


# --- lock, unlock, is_locked ---------------------------------------------------------------------
def test_lock_sets_resource_to_lock_id_and_unlock_deletes_it(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters)
        lock = await dlm.lock(name, lock_timeout=5)
        assert lock.valid and lock.resource == name and lock.lock_timeout == 5 and lock.lock_manager is dlm
        assert isinstance(lock.id, str)
        assert values_on(masters, name) == [lock.id.encode()] * 5
        assert 4000 < masters[0].command("PTTL", name) <= 5000
        assert await dlm.is_locked(name) and await dlm.is_locked(lock) and await lock.is_locked()
        assert await dlm.get_active_locks() == [lock]
        await dlm.unlock(lock)
        assert not lock.valid
        assert keys_on(masters, name) == 0
        assert not await dlm.is_locked(name)
        assert await dlm.get_active_locks() == []
        await dlm.destroy()

    run(main())


def test_lock_held_elsewhere_raises_acquiring_error_after_retries(shim_core, masters, name, keys_on):
    async def main():
        holder, other = manager(masters), manager(masters, retry_count=3, retry_delay_min=0.05, retry_delay_max=0.06)
        lock = await holder.lock(name, 5)
        started = time.monotonic()
        with pytest.raises(LockAcquiringError) as info:
            await other.lock(name, 5)
        assert time.monotonic() - started >= 0.1  # two sleeps between three attempts
        assert [o.outcome for o in info.value.outcomes] == ["no"] * 5
        assert values_on(masters, name) == [lock.id.encode()] * 5
        await holder.unlock(lock)
        taken = await other.lock(name, 5)  # free again
        await other.unlock(taken)
        assert keys_on(masters, name) == 0
        await holder.destroy()
        await other.destroy()

    run(main())


def test_lock_without_quorum_of_live_masters_raises_runtime_error(shim_core, masters, name, keys_on):
    async def main():
        with dead_ports(3) as dead:  # (held: no server started meanwhile takes one)
            entries = [("127.0.0.1", masters[0].port), ("127.0.0.1", masters[1].port)]
            entries += [("127.0.0.1", port) for port in dead]
            dlm = Aioredlock(entries, retry_count=2, retry_delay_min=0.01, retry_delay_max=0.02)
            with pytest.raises(LockRuntimeError) as info:
                await dlm.lock(name, 5)
        assert [o.outcome for o in info.value.outcomes][:2] == ["ok", "ok"]
        await asyncio.sleep(0.05)  # the release behind the failed attempt
        assert keys_on(masters, name) == 0
        await dlm.destroy()

    run(main())


def test_lock_timeout_too_short_to_be_valid_raises_lock_error(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters)
        with pytest.raises(LockError, match="Lock timeout") as info:
            await dlm.lock(name, 0.001)
        assert type(info.value) is LockError
        assert keys_on(masters, name) == 0
        await dlm.destroy()

    run(main())


def test_context_manager_unlocks(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters)
        async with await dlm.lock(name, 5) as lock:
            assert keys_on(masters, name) == 5
        assert not lock.valid and keys_on(masters, name) == 0
        with pytest.raises(ZeroDivisionError):
            async with await dlm.lock(name, 5):
                1 / 0
        assert keys_on(masters, name) == 0
        await dlm.destroy()

    run(main())


def test_unlock_after_expiry_succeeds(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters)
        lock = await dlm.lock(name, 0.1)
        await asyncio.sleep(0.2)
        assert keys_on(masters, name) == 0
        await lock.release()  # aioredlock: an expired key counts as released
        assert not lock.valid
        await dlm.destroy()

    run(main())


def test_unlock_of_a_key_held_by_another_lock_raises_and_keeps_it(shim_core, masters, name):
    async def main():
        dlm = manager(masters)
        lock = await dlm.lock(name, 5)
        stranger = Lock(dlm, name, "someone-else", 5, valid=True)
        with pytest.raises(LockAcquiringError):
            await dlm.unlock(stranger)
        assert values_on(masters, name) == [lock.id.encode()] * 5
        await dlm.unlock(lock)
        await dlm.destroy()

    run(main())


def test_unlock_with_masters_down_raises_runtime_error(shim_core, fault_masters, name):
    async def main():
        dlm = manager(fault_masters)
        lock = await dlm.lock(name, 5)
        for m in fault_masters[:3]:
            m.kill()
        with pytest.raises(LockRuntimeError):
            await dlm.unlock(lock)
        assert not lock.valid
        assert [m.command("EXISTS", name) for m in fault_masters[3:]] == [0, 0]  # released where it could be
        await dlm.destroy()

    run(main())


# --- extend ---------------------------------------------------------------------------------------
def test_extend_resets_the_time_to_live(shim_core, masters, name):
    async def main():
        dlm = manager(masters)
        lock = await dlm.lock(name, 1)
        await asyncio.sleep(0.3)
        await dlm.extend(lock)  # the lock's own lock_timeout
        assert all(800 < m.command("PTTL", name) <= 1000 for m in masters)
        await lock.extend()
        await dlm.extend(lock, lock_timeout=4)
        assert all(3000 < m.command("PTTL", name) <= 4000 for m in masters)
        assert lock.valid
        with pytest.raises(ValueError):
            await dlm.extend(lock, lock_timeout=0)
        await dlm.unlock(lock)
        with pytest.raises(RuntimeError, match="Lock is not valid"):
            await dlm.extend(lock)
        await dlm.destroy()

    run(main())


def test_extend_after_someone_else_took_it_fails_and_invalidates(shim_core, masters, name):
    async def main():
        dlm, other = manager(masters), manager(masters)
        lock = await dlm.lock(name, 0.1)
        await asyncio.sleep(0.2)
        theirs = await other.lock(name, 5)
        with pytest.raises(LockAcquiringError):
            await dlm.extend(lock)
        assert not lock.valid
        assert values_on(masters, name) == [theirs.id.encode()] * 5  # theirs untouched
        await other.unlock(theirs)
        await dlm.destroy()
        await other.destroy()

    run(main())


def test_extend_does_not_recreate_an_expired_key(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters)
        lock = await dlm.lock(name, 0.1)
        await asyncio.sleep(0.2)
        with pytest.raises(LockError):
            await lock.extend()
        assert not lock.valid and keys_on(masters, name) == 0
        await dlm.destroy()

    run(main())


# --- the watchdog ---------------------------------------------------------------------------------
def test_watchdog_keeps_a_lock_without_timeout_until_unlocked(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters, internal_lock_timeout=0.4)
        lock = await dlm.lock(name)
        assert lock.lock_timeout is None
        await asyncio.sleep(1.0)  # 2.5 times its time to live
        assert lock.valid and keys_on(masters, name) == 5
        assert all(m.command("PTTL", name) > 0 for m in masters)
        await dlm.unlock(lock)
        assert keys_on(masters, name) == 0
        await asyncio.sleep(0.5)  # a renewal now must not bring it back
        assert keys_on(masters, name) == 0
        await dlm.destroy()

    run(main())


def test_watchdog_invalidates_a_lock_it_cannot_renew(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters, internal_lock_timeout=0.4)
        lock = await dlm.lock(name)
        for m in masters:
            m.command("SET", name, "usurper")
        for _ in range(40):
            if not lock.valid:
                break
            await asyncio.sleep(0.025)
        assert not lock.valid
        assert values_on(masters, name) == [b"usurper"] * 5
        assert await dlm.get_active_locks() == []
        with pytest.raises(RuntimeError):
            await dlm.extend(lock)
        with pytest.raises(LockAcquiringError):
            await dlm.unlock(lock)  # as aioredlock: the key is someone else's
        for m in masters:
            m.command("DEL", name)
        await dlm.destroy()

    run(main())


# --- get_lock, destroy, cancellation --------------------------------------------------------------
def test_get_lock_rebuilds_a_lock_that_can_be_extended_and_unlocked(shim_core, masters, name, keys_on):
    async def main():
        dlm, other = manager(masters), manager(masters)
        lock = await dlm.lock(name, 30)
        rebuilt = await other.get_lock(name, lock.id)
        assert rebuilt.valid and rebuilt.id == lock.id and 28 <= rebuilt.lock_timeout <= 30
        with pytest.raises(LockAcquiringError):
            await other.get_lock(name, "not-its-id")
        await other.extend(rebuilt, 60)  # taken over by its id
        assert rebuilt.valid and min(m.command("PTTL", name) for m in masters) > 55000
        await other.extend(rebuilt, 40)
        assert max(m.command("PTTL", name) for m in masters) <= 40000
        with pytest.raises(LockError):
            await dlm.get_lock(name, "not-its-id")
        await other.unlock(rebuilt)
        assert keys_on(masters, name) == 0
        gone = await dlm.lock(name, 30)
        stale = await other.get_lock(name, gone.id)
        await dlm.unlock(gone)
        with pytest.raises(LockError):
            await other.extend(stale)  # no longer held: not taken over
        assert not stale.valid and keys_on(masters, name) == 0
        await dlm.destroy()
        await other.destroy()

    run(main())


def test_destroy_unlocks_everything_and_the_manager_can_be_used_again(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters, internal_lock_timeout=0.5)
        timed = await dlm.lock(name + ":a", 5)
        watched = await dlm.lock(name + ":b")
        await dlm.destroy()
        assert not timed.valid and not watched.valid
        assert keys_on(masters, name + ":a") == 0 and keys_on(masters, name + ":b") == 0
        again = await dlm.lock(name, 5)
        await dlm.unlock(again)
        await dlm.destroy()

    run(main())


def test_cancelled_lock_leaves_no_key(shim_core, masters, name, keys_on):
    async def main():
        dlm = manager(masters)
        for delay in (0, 0.0002, 0.0005, 0.001, 0.002, 0.005):
            task = asyncio.ensure_future(dlm.lock(name, 5))
            await asyncio.sleep(delay)
            task.cancel()
            try:
                lock = await task
            except asyncio.CancelledError:
                pass
            else:
                await dlm.unlock(lock)  # it finished before the cancel
            await asyncio.sleep(0.05)  # the release behind a cancelled round
            assert keys_on(masters, name) == 0, delay
        await dlm.destroy()

    run(main())


# --- masters as aioredlock took them --------------------------------------------------------------
def test_masters_as_dicts_uris_tuples_and_unix_paths(shim_core, name, keys_on):
    import redis

    from fastredlock.testing import start_masters

    with start_masters(3, unix_socket=True) as local:
        entries = [
            {"host": "127.0.0.1", "port": local[0].port, "db": 1, "minsize": 1, "maxsize": 5, "encoding": "utf-8"},
            f"redis://127.0.0.1:{local[1].port}/0?encoding=utf-8",
            local[2].unix_path,
        ]

        async def main():
            dlm = Aioredlock(entries)
            lock = await dlm.lock(name, 5)
            assert [m.command("EXISTS", name) for m in local] == [0, 1, 1]  # the first is on db 1
            assert redis.Redis(host="127.0.0.1", port=local[0].port, db=1).get(name) == lock.id.encode()
            await dlm.unlock(lock)
            await dlm.destroy()

        run(main())


@pytest.fixture
def sentinel(masters):
    """A Redis Sentinel (``redis-server --sentinel``) that monitors ``masters[0]`` as ``mymaster``."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not on PATH (sentinel mode needs the binary itself)")
    port = free_block(1)
    folder = tempfile.mkdtemp(prefix="fastredlock-sentinel-")
    conf = os.path.join(folder, "sentinel.conf")
    with open(conf, "w") as f:
        f.write(f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor mymaster 127.0.0.1 {masters[0].port} 1\n")
    proc = subprocess.Popen([binary, conf, "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the sentinel did not start")
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def test_sentinel_entry_locks_on_the_master_it_names(shim_core, masters, sentinel, name):
    async def main():
        entries = [Sentinel(("127.0.0.1", sentinel), master="mymaster"),
                   ("127.0.0.1", masters[1].port), ("127.0.0.1", masters[2].port)]
        dlm = Aioredlock(entries)
        lock = await dlm.lock(name, 5)
        assert [m.command("GET", name) for m in masters[:3]] == [lock.id.encode()] * 3
        await dlm.unlock(lock)
        assert [m.command("EXISTS", name) for m in masters[:3]] == [0, 0, 0]
        with pytest.raises(LockRuntimeError):
            await Sentinel(("127.0.0.1", sentinel), master="nosuchmaster").get_master_address()
        await dlm.destroy()

    run(main())


# --- arguments (refused before any I/O) -----------------------------------------------------------
def test_manager_arguments_are_converted_and_checked(one_shim_core):
    dlm = Aioredlock([("127.0.0.1", 7001)], retry_count="5", retry_delay_min="0.5", internal_lock_timeout=3)
    assert (dlm.retry_count, dlm.retry_delay_min, dlm.retry_delay_max, dlm.internal_lock_timeout) == (5, 0.5, 0.3, 3.0)
    with pytest.raises(ValueError, match="Retry count"):
        Aioredlock(retry_count=0)
    with pytest.raises(ValueError, match="Retry delay"):
        Aioredlock(retry_delay_min=0)
    with pytest.raises(ValueError, match="Retry delay"):
        Aioredlock(retry_delay_max=-1)
    with pytest.raises(ValueError, match="Internal lock_timeout"):
        Aioredlock(internal_lock_timeout=0)
    assert "'password': '***'" in repr(Aioredlock([{"host": "127.0.0.1", "port": 7001, "password": "secret"}]))
    assert "secret" not in repr(Aioredlock(["redis://:secret@127.0.0.1:7001/0"]))


def test_bad_masters_are_refused(one_shim_core):
    # (several dbs of one server, TLS and aioredis objects: test_compat_aioredlock_acceptance.py)
    with pytest.raises(ValueError, match="same server and db"):
        Aioredlock([("127.0.0.1", 7001), {"host": "127.0.0.1", "port": 7001, "db": 0}])
    with pytest.raises(TypeError, match="unexpected"):
        Aioredlock([{"host": "127.0.0.1", "port": 7001, "sockettimeout": 1}])
    with pytest.raises(TypeError, match="not a single one"):
        Aioredlock({"host": "127.0.0.1", "port": 7001})
    with pytest.raises(TypeError):
        Aioredlock([object()])
    with pytest.raises(ValueError, match="at least one"):
        Aioredlock([])


def test_lock_and_is_locked_arguments_are_checked(one_shim_core):
    async def main():
        dlm = Aioredlock([("127.0.0.1", 7001)])
        with pytest.raises(ValueError, match="Lock timeout"):
            await dlm.lock("r", lock_timeout=0)
        with pytest.raises(TypeError, match="lock_identifier"):
            await dlm.lock("r", 5, lock_identifier="mine")
        with pytest.raises(TypeError, match="Lock instance or a string"):
            await dlm.is_locked(42)
        await dlm.destroy()

    run(main())


def test_sentinel_configurations(one_shim_core):
    s = Sentinel({"host": "127.0.0.1", "port": 26380, "master": "m", "password": "pw", "db": 2, "minsize": 2})
    assert (s.connection, s.master, s.redis_kwargs) == ([("127.0.0.1", 26380)], "m", {"password": "pw", "db": 2})
    s = Sentinel("redis://127.0.0.1:26381/3?master=mm&encoding=utf-8", password="over")
    assert (s.connection, s.master, s.redis_kwargs) == ([("127.0.0.1", 26381)], "mm", {"db": 3, "password": "over"})
    assert Sentinel([("a", 1), ("b", 2)], master="x").connection == [("a", 1), ("b", 2)]
    with pytest.raises(SentinelConfigError, match="Master name required"):
        Sentinel(("127.0.0.1", 26379))
    with pytest.raises(SentinelConfigError, match="Invalid"):
        Sentinel(42, master="m")
    assert Sentinel(("127.0.0.1", 26379), master="m", ssl_context=True)._tls == {"ssl": True}
