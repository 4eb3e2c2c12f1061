"""aioredlock 0.7.3's acceptance tests, as behaviours of the shim, in every connection form it took.

aioredlock's sdist ships no tests. Its repository's ``tests/acceptance/test_aioredlock.py`` (tag
v0.7.3; 8 tests, all passing against aioredlock here) checks, on one master given as a dict, as an
aioredis pool, and on two dbs of one server given as two dicts: a simple lock (``is_locked``
before, ``lock``, ``extend``, ``unlock``, ``is_locked`` after, ``destroy``), two locks on two
resources, two locks on one resource (the second raises ``LockError``), and an acquisition whose
first attempt is refused on one master and whose second succeeds (the refusing key is deleted
during the retry's ``asyncio.sleep``, which the test patches). These tests check the same, written
from reading them (their code is not copied here), on every connection form aioredlock 0.7.3 took:
dicts, URIs, ``(host, port)`` tuples, aioredis 1.x ``Redis``/``ConnectionsPool`` objects (stand-ins
with aioredis 1.3.1's attributes; the real aioredis runs in ``test_real_aioredis_pool_is_a_master``
when the interop install of aioredlock can be had) and ``redis.asyncio`` clients, one server or
two dbs of one server (accepted, with a warning on the shim's logger).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import subprocess
import sys
import textwrap
import unittest.mock
import uuid

import pytest
import redis.asyncio

import fastredlock
from fastredlock.compat.aioredlock import Aioredlock, LockError

import _originals


class FakeConnectionsPool:
    """What fastredlock reads of an aioredis 1.3.1 ``ConnectionsPool``: ``address`` (``(host,
    port)`` or a socket path), ``db``, and the ``_password`` and ``_ssl`` it keeps for new connections."""

    def __init__(self, address, db=None, password=None, ssl=None, encoding=None):
        self._address = address
        self._db = db or 0
        self._password = password
        self._ssl = ssl
        self._encoding = encoding

    @property
    def address(self):
        return self._address

    @property
    def db(self):
        return self._db or 0

    @property
    def encoding(self):
        return self._encoding


class FakeAioredis:
    """What ``await aioredis.create_redis_pool(...)`` returns in aioredis 1.3.1: a ``Redis`` whose
    ``connection`` is the pool, and which answers ``address`` and ``db`` from it."""

    def __init__(self, pool):
        self._pool_or_conn = pool

    @property
    def connection(self):
        return self._pool_or_conn

    @property
    def address(self):
        return self._pool_or_conn.address

    @property
    def db(self):
        return self._pool_or_conn.db


def _redis_asyncio(host, port, dbs):
    """redis-py's asyncio clients, built here outside a running loop as users of aioredlock build
    theirs: on Python < 3.10 that needs a current event loop (redis-py makes an asyncio.Lock at
    once), which an earlier test's ``asyncio.run`` leaves unset, so the form is left to 3.10+."""
    if sys.version_info < (3, 10):
        pytest.skip("redis-py's asyncio client built outside a loop needs Python 3.10")
    return [redis.asyncio.Redis(host=host, port=port, db=db) for db in dbs]


def _one(master, form):
    host, port = "127.0.0.1", master.port
    forms = {  # (each built only when asked for)
        "dict": lambda: [{"host": host, "port": port, "db": 0}],
        "uri": lambda: [f"redis://{host}:{port}/0?encoding=utf-8"],
        "tuple": lambda: [(host, port)],
        "aioredis-pool": lambda: [FakeAioredis(FakeConnectionsPool((host, port), 0, encoding="utf-8"))],
        "connections-pool": lambda: [FakeConnectionsPool((host, port))],
        "redis-asyncio": lambda: _redis_asyncio(host, port, (0,)),
    }
    return forms[form]()


def _two_dbs(master, form):
    """Two dbs of one server, as aioredlock's acceptance tests (and many CI setups) use them."""
    host, port = "127.0.0.1", master.port
    forms = {  # (each built only when asked for)
        "dict": lambda: [{"host": host, "port": port, "db": 0}, {"host": host, "port": port, "db": 1}],
        "uri": lambda: [f"redis://{host}:{port}/1", f"redis://{host}:{port}"],
        "uri-query": lambda: [f"redis://{host}:{port}?db=2", f"redis://{host}:{port}/0"],
        "aioredis-pool": lambda: [FakeAioredis(FakeConnectionsPool((host, port), db)) for db in (0, 1)],
        "redis-asyncio": lambda: _redis_asyncio(host, port, (0, 1)),
    }
    return forms[form]()


async def check_simple_lock(manager):
    resource = str(uuid.uuid4())
    assert await manager.is_locked(resource) is False
    lock = await manager.lock(resource)
    assert lock.valid is True
    assert await manager.is_locked(resource) is True
    await manager.extend(lock)
    assert lock.valid is True
    assert await manager.is_locked(resource) is True
    await manager.unlock(lock)
    assert lock.valid is False
    assert await manager.is_locked(resource) is False
    await manager.destroy()


async def check_two_resources(manager):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    assert not await manager.is_locked(first) and not await manager.is_locked(second)
    lock1 = await manager.lock(first)
    assert lock1.valid and await manager.is_locked(first) and not await manager.is_locked(second)
    lock2 = await manager.lock(second)
    assert lock2.valid and await manager.is_locked(first) and await manager.is_locked(second)
    await manager.unlock(lock1)
    assert not lock1.valid and not await manager.is_locked(first) and await manager.is_locked(second)
    await manager.unlock(lock2)
    assert not lock2.valid and not await manager.is_locked(second)
    await manager.destroy()


async def check_one_resource_twice(manager):
    resource = str(uuid.uuid4())
    lock1 = await manager.lock(resource)
    assert lock1.valid and await manager.is_locked(resource)
    with pytest.raises(LockError):
        await manager.lock(resource)  # every retry refused: the first holds it
    assert await manager.is_locked(resource)
    await manager.unlock(lock1)
    assert not lock1.valid and not await manager.is_locked(resource)
    await manager.destroy()


def manager_of(masters):
    """A manager with aioredlock's defaults but short pauses between its three attempts (the
    acceptance tests' second lock of a held resource makes all three)."""
    return Aioredlock(masters, retry_delay_min=0.01, retry_delay_max=0.03)


CHECKS = {"simple": check_simple_lock, "two-resources": check_two_resources, "same-resource": check_one_resource_twice}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("form", ["dict", "uri", "tuple", "aioredis-pool", "connections-pool", "redis-asyncio"])
def test_acceptance_on_one_master(shim_core, masters, arun, form, check):
    arun(CHECKS[check](manager_of(_one(masters[0], form))))


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("form", ["dict", "uri", "uri-query", "aioredis-pool", "redis-asyncio"])
def test_acceptance_on_two_dbs_of_one_server(shim_core, masters, arun, form, check, caplog):
    with caplog.at_level(logging.WARNING, logger="fastredlock.compat.aioredlock"):
        manager = manager_of(_two_dbs(masters[0], form))
    warned = [r for r in caplog.records if r.name == "fastredlock.compat.aioredlock"]
    assert len(warned) == 1 and "dbs of one server" in warned[0].getMessage(), caplog.records
    arun(CHECKS[check](manager))


def test_two_dbs_each_hold_the_key(shim_core, masters, arun):
    async def main():
        manager = Aioredlock(_two_dbs(masters[0], "dict"))
        resource = str(uuid.uuid4())
        lock = await manager.lock(resource, lock_timeout=5)
        readers = [redis.asyncio.Redis(host="127.0.0.1", port=masters[0].port, db=db) for db in (0, 1)]
        try:
            assert [await r.get(resource) for r in readers] == [lock.id.encode()] * 2
            await manager.unlock(lock)
            assert [await r.get(resource) for r in readers] == [None, None]
        finally:
            for r in readers:
                await r.aclose()
            await manager.destroy()

    arun(main())


def test_first_attempt_refused_then_acquired_on_two_dbs(shim_core, masters, arun):
    """A key left on db 0 makes the first attempt fail (1 of 2); it is deleted during the pause
    before the second attempt (``asyncio.sleep`` patched, as in aioredlock's test), which succeeds."""

    async def main():
        manager = Aioredlock(_two_dbs(masters[0], "dict"))
        resource = str(uuid.uuid4())
        first = redis.asyncio.Redis(host="127.0.0.1", port=masters[0].port, db=0)
        await first.set(resource, "garbage")
        real_sleep = asyncio.sleep
        cleaned = []

        async def sleep_and_clean(delay, *args, **kwargs):
            if not cleaned:
                cleaned.append(await first.delete(resource))
            await real_sleep(delay, *args, **kwargs)

        try:
            with unittest.mock.patch("asyncio.sleep", sleep_and_clean):
                lock = await manager.lock(resource)
            assert lock.valid is True and cleaned == [1]
            await manager.unlock(lock)
            assert lock.valid is False
        finally:
            await first.aclose()
            await manager.destroy()

    arun(main())


def test_same_db_of_one_server_twice_is_refused(one_shim_core):
    with pytest.raises(ValueError, match="same server and db"):
        Aioredlock([("127.0.0.1", 7001), {"host": "localhost", "port": 7001}])
    with pytest.raises(ValueError, match="same server and db"):
        Aioredlock([FakeConnectionsPool(("127.0.0.1", 7001), 3), "redis://127.0.0.1:7001/3"])


def test_aioredis_objects_are_read_duck_typed(one_shim_core):
    context = ssl.create_default_context()
    manager = Aioredlock([
        FakeAioredis(FakeConnectionsPool(("127.0.0.1", 7001), 2, password="pw", ssl=context)),
        FakeConnectionsPool("/tmp/redis.sock", 1, password=b"pw2"),
        FakeAioredis(FakeConnectionsPool(("127.0.0.1", 7002), ssl=True)),
    ])
    first, second, third = manager._entries
    assert (first.host, first.port, first.db, first.password, first.tls.context) == ("127.0.0.1", 7001, 2, "pw", context)
    assert (second.path, second.db, second.password, second.tls) == ("/tmp/redis.sock", 1, "pw2", None)
    assert (third.port, third.db, third.tls is not None, third.tls.context) == (7002, 0, True, None)
    with pytest.raises(ValueError, match="no address"):
        Aioredlock([FakeConnectionsPool(None)])


def test_tls_forms_are_accepted(one_shim_core):
    manager = Aioredlock([
        {"host": "127.0.0.1", "port": 7001, "ssl": True},
        "rediss://127.0.0.1:7002/0",
        "redis://127.0.0.1:7003/0?ssl=true",
        "redis://127.0.0.1:7004/0",
    ])
    assert [s.tls is not None for s in manager._entries] == [True, True, True, False]


def test_aioredis_pool_over_tls_is_a_master(shim_core, tls_masters, certs, arun):
    """An aioredis pool made with ``ssl=<SSLContext>`` on TLS masters: the shim locks over TLS."""
    context = ssl.create_default_context(cafile=certs.ca)

    async def main():
        manager = Aioredlock([FakeAioredis(FakeConnectionsPool(("127.0.0.1", m.tls_port), 0, ssl=context))
                              for m in list(tls_masters)[:3]])
        lock = await manager.lock(str(uuid.uuid4()), lock_timeout=5)
        assert lock.valid
        await manager.unlock(lock)
        await manager.destroy()

    arun(main())


_REAL_AIOREDIS = textwrap.dedent('''\
    import asyncio, json, sys, uuid
    import aioredis
    import fastredlock.compat
    from fastredlock.compat.aioredlock import Aioredlock, LockError

    spec = json.loads(sys.argv[1])
    fastredlock.compat.configure(restart_aware=False, core=spec["core"])

    async def main():
        one = await aioredis.create_redis_pool("redis://127.0.0.1:%d/0" % spec["port"], encoding="utf-8")
        two = [await aioredis.create_redis_pool(("127.0.0.1", spec["port"]), db=db) for db in (0, 1)]
        plain = await aioredis.create_redis(("127.0.0.1", spec["port"]), db=3)
        for masters in ([one], two, [two[0].connection, two[1].connection], [plain]):
            manager = Aioredlock(masters)
            resource = str(uuid.uuid4())
            assert await manager.is_locked(resource) is False
            lock = await manager.lock(resource)
            assert lock.valid and await manager.is_locked(resource)
            try:
                await manager.lock(resource)
                raise AssertionError("a second lock of a held resource")
            except LockError:
                pass
            await manager.extend(lock)
            await manager.unlock(lock)
            assert not lock.valid and await manager.is_locked(resource) is False
            await manager.destroy()
        assert await one.set("still-open", "yes")  # the shim never closed the user's pools
        for pool in [one, *two, plain]:
            pool.close()
            await pool.wait_closed()
        print(json.dumps({"ok": True}))

    asyncio.run(main())
''')


@pytest.mark.slow
def test_real_aioredis_pool_is_a_master(core, masters, tmp_path):
    """aioredlock's own form, with the real aioredis 1.3.1 (the interop install of aioredlock):
    ``create_redis_pool`` objects, their ``ConnectionsPool`` and a ``create_redis`` connection, on
    one server and on two dbs of one server. Skipped when that install cannot be had."""
    try:
        folder = _originals.shim_deps("aioredlock")
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot install aioredis 1.3.1: {exc}")
    script = tmp_path / "real_aioredis.py"
    script.write_text(_REAL_AIOREDIS)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), os.path.dirname(os.path.dirname(fastredlock.__file__))])
    proc = subprocess.run([sys.executable, str(script), json.dumps({"port": masters[0].port, "core": core})],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"ok": True}
