"""One side of an interop run: lock a resource with the original library or its shim, for a while.

Run as a script in its own process (the original's folder, or the shim's dependencies and the
fastredlock under test, on ``PYTHONPATH``)::

    python _interop_worker.py LIB SIDE SPEC

LIB is ``redlock-py``, ``redlock``, ``pottery``, ``pottery-aio`` (pottery's ``AIORedlock``, on an
event loop), ``aioredlock``, ``redis-py`` (``redis.lock.Lock``, on the first lock master only),
``redis-py-aio`` (``redis.asyncio.lock.Lock``, likewise) or ``python-redis-lock`` (on the first master
only; with a ``role`` in SPEC, the wake-up run of :func:`wake` instead); SIDE ``original`` or ``shim``;
SPEC a JSON object with ``ports`` (the lock masters), ``counter_port``, ``resource``, ``seconds``,
``ttl_ms``, ``parties`` (how many workers start together) and, for the shim, ``core``; with ``"unprotected": true`` the shim side locks
another resource than the original (the negative control: a shim whose keys differ from the
original's, so the two exclude nobody); with ``"no_timeout": true`` redis-py's locks (and the shim's)
are made without ``timeout``: keys without expiry.
Inside the lock the worker INCRs a counter on a separate master and checks it
reads 1 (nobody else inside), then DECRs it: tests/_contender.py's loop (``contend_loop``), with its
``Counter`` (a plain socket, independent of both libraries; tests/ is on PYTHONPATH for it). It prints
one JSON line: how often it held the lock, how often it was refused, how many overlaps it saw, and
the errors it met.
"""
from __future__ import annotations

import json
import random
import sys
import time

from _contender import Counter, contend_loop, for_seconds  # tests/, on PYTHONPATH (test_compat_interop.py)


def lockers(lib: str, side: str, spec: dict):
    """Return ``(acquire, release)`` callables for ``lib`` on ``side``."""
    ports, resource, ttl_ms = spec["ports"], spec["resource"], spec["ttl_ms"]
    dicts = [{"host": "127.0.0.1", "port": p} for p in ports]
    if side == "shim":
        import fastredlock.compat

        # The masters were just started: restart-aware voting would not trust them yet. A deadline
        # closer to the originals' socket timeouts: this machine may be busy with other tests.
        fastredlock.compat.configure(restart_aware=False, core=spec.get("core"), io_timeout=0.5)
    if lib == "redlock-py":
        if side == "original":
            from redlock import Redlock
        else:
            from fastredlock.compat.redlock_py import Redlock
        dlm = Redlock(dicts, retry_count=1, retry_delay=0.001)
        state = {}

        def acquire():
            state["lock"] = dlm.lock(resource, ttl_ms)
            return bool(state["lock"])

        def release():
            dlm.unlock(state.pop("lock"))

        return acquire, release
    if lib == "redlock":
        if side == "original":
            from redlock import RedLock
        else:
            from fastredlock.compat.redlock import RedLock
        lock = RedLock(resource, connection_details=dicts, retry_times=1, retry_delay=1, ttl=ttl_ms)
        return lock.acquire, lock.release
    if lib == "pottery":
        from redis import Redis

        if side == "original":
            from pottery import Redlock
        else:
            from fastredlock.compat.pottery import Redlock
        masters = [Redis(host="127.0.0.1", port=p, socket_timeout=1) for p in ports]
        lock = Redlock(key=resource, masters=masters, auto_release_time=ttl_ms / 1000)
        return (lambda: lock.acquire(blocking=False)), lock.release
    if lib == "aioredlock":
        import asyncio

        if side == "original":
            from aioredlock import Aioredlock, LockAcquiringError
        else:
            from fastredlock.compat.aioredlock import Aioredlock, LockAcquiringError
        loop = asyncio.new_event_loop()
        manager = Aioredlock(dicts, retry_count=1, retry_delay_min=0.001, retry_delay_max=0.002)
        held = {}

        def acquire():
            try:
                held["lock"] = loop.run_until_complete(manager.lock(resource, ttl_ms / 1000))
            except LockAcquiringError:  # held by the other side; any other error is reported
                return False
            return True

        def release():
            loop.run_until_complete(manager.unlock(held.pop("lock")))

        return acquire, release
    if lib == "pottery-aio":
        import asyncio

        from redis.asyncio import Redis as AIORedis

        if side == "original":
            from pottery import AIORedlock
        else:
            from fastredlock.compat.pottery import AIORedlock
        loop = asyncio.new_event_loop()  # the worker's loop, for its whole run
        masters = [AIORedis(host="127.0.0.1", port=p, socket_timeout=1) for p in ports]
        lock = AIORedlock(key=resource, masters=masters, auto_release_time=ttl_ms / 1000)
        return (lambda: loop.run_until_complete(lock.acquire(blocking=False))), (
            lambda: loop.run_until_complete(lock.release()))
    if lib == "python-redis-lock":  # a single-server lock: the first master only
        conn, redis_lock = _redis_lock(side, spec)
        lock = redis_lock.Lock(conn, resource, expire=max(1, ttl_ms // 1000))
        return (lambda: lock.acquire(blocking=False)), lock.release
    if lib == "redis-py":  # one server: the first of the lock masters
        from redis import Redis

        if side == "original":
            from redis.lock import Lock
        else:
            from fastredlock.compat.redis_py import Lock
        r = Redis(host="127.0.0.1", port=ports[0], socket_timeout=1)
        lock = r.lock(resource, timeout=None if spec.get("no_timeout") else ttl_ms / 1000, lock_class=Lock)
        return (lambda: lock.acquire(blocking=False)), lock.release
    if lib == "redis-py-aio":
        import asyncio

        from redis.asyncio import Redis as AIORedis

        if side == "original":
            from redis.asyncio.lock import Lock as AIOLock
        else:
            from fastredlock.compat.redis_py import AsyncLock as AIOLock
        loop = asyncio.new_event_loop()  # the worker's loop, for its whole run
        r = AIORedis(host="127.0.0.1", port=ports[0], socket_timeout=1)
        lock = r.lock(resource, timeout=None if spec.get("no_timeout") else ttl_ms / 1000, lock_class=AIOLock)
        return (lambda: loop.run_until_complete(lock.acquire(blocking=False))), (
            lambda: loop.run_until_complete(lock.release()))
    raise SystemExit(f"unknown library {lib!r}")


def _redis_lock(side: str, spec: dict):
    """A client of the first master and python-redis-lock's module (the original or the shim)."""
    import logging

    from redis import StrictRedis

    if side == "original":
        import redis_lock
    else:
        import fastredlock.compat
        from fastredlock.compat import redis_lock

        fastredlock.compat.configure(restart_aware=False, core=spec.get("core"), io_timeout=0.5)
    logging.getLogger("redis_lock").setLevel(logging.ERROR)  # each refusal logs a warning
    return StrictRedis(host="127.0.0.1", port=spec["ports"][0], socket_timeout=10), redis_lock


def wake(side: str, spec: dict) -> None:
    """python-redis-lock's wake-up across processes: ``role`` "hold" takes the lock, holds it until
    a client of the server is blocked (the waiter, in its ``BLPOP``; at most ``hold`` seconds) and
    releases it; "wait" waits for the key, then blocks in ``acquire(timeout=)`` until the release's
    signal wakes it. Prints when it released / acquired (wall clock)."""
    conn, redis_lock = _redis_lock(side, spec)
    key = "lock:" + spec["resource"]
    if spec["role"] == "hold":
        lock = redis_lock.Lock(conn, spec["resource"], expire=30)
        assert lock.acquire(blocking=False)
        end = time.monotonic() + spec["hold"]
        while conn.info("clients")["blocked_clients"] == 0 and time.monotonic() < end:
            time.sleep(0.002)
        released_at = time.time()
        lock.release()
        print(json.dumps({"released_at": released_at}))
        return
    while not conn.exists(key):
        time.sleep(0.002)
    lock = redis_lock.Lock(conn, spec["resource"])
    got = lock.acquire(timeout=spec["timeout"])
    print(json.dumps({"got": got, "acquired_at": time.time()}))
    if got:
        lock.release()


def main() -> None:
    lib, side, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if "role" in spec:
        wake(side, spec)
        return
    if side == "shim" and spec.get("unprotected"):
        spec["resource"] += ":elsewhere"
    acquire, release = lockers(lib, side, spec)
    counter = Counter(spec["counter_port"])
    # Start together, once every worker is ready (interpreter started, library imported, clients
    # made): each counts itself in on the counter master, then waits for the others.
    counter.call("INCR", "ready")
    deadline = time.monotonic() + 60
    while counter.call("INCRBY", "ready", "0") < spec["parties"]:
        if time.monotonic() > deadline:
            raise SystemExit("the other workers never became ready")
        time.sleep(0.002)
    tally = contend_loop(acquire, lambda _held: release(), counter, for_seconds(spec["seconds"]), hold=0.001,
                         pause=lambda: time.sleep(random.uniform(0, 0.002)),  # give the other side a chance
                         catch_release=True)
    print(json.dumps({"held": tally.held, "refused": tally.refused, "overlaps": tally.overlaps,
                      "errors": tally.errors[:5]}))


if __name__ == "__main__":
    main()
