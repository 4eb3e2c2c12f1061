"""Peer adapters: one class per configuration of the comparison, and :class:`Runner` to drive them.

Every adapter exposes the library's *default* way to take and give back a lock:
``acquire(name) -> handle or None`` (blocking with the library's own retry policy) and
``release(handle)``; ``key(name)`` says which Redis key the library writes for ``name``.
Adapters import their library lazily (peers run with ``python -S`` and only their own folder on
``PYTHONPATH``). The code here only *calls* each peer's public API; none of their code is copied.
"""
from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Callable, Dict, List, Optional, Tuple

if __package__:
    from .control import encode, host_port
else:  # a worker process: this folder is sys.path[0] (see worker.py)
    from control import encode, host_port  # type: ignore[no-redef]

# --------------------------------------------------------------------------------------------
# adapters: one per configuration


class Adapter:
    is_async = False
    thread_safe = True
    #: distributions whose versions go into the report header
    dists: Tuple[str, ...] = ()
    #: module whose file location proves the isolation worked
    module = ""

    def __init__(self, urls: List[str], ttl: float) -> None:
        self.urls = urls
        self.ttl = ttl
        self.ttl_ms = int(ttl * 1000)

    def key(self, name: str) -> bytes:
        return name.encode()

    def close(self) -> None:
        pass


class FastredlockAdapter(Adapter):
    dists = ("fastredlock", "hiredis")
    module = "fastredlock"
    core = "python"
    #: more Redlock options of the configuration
    options: Dict[str, Any] = {}

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import fastredlock

        self.dlm = fastredlock.Redlock(urls, core=self.core, **self.options)
        if self.dlm.core != self.core:
            raise RuntimeError(f"asked for core {self.core!r}, got {self.dlm.core!r}")

    def acquire(self, name: str) -> Any:
        lock = self.dlm.lock(name, ttl=self.ttl)
        return lock if lock.acquire() else None

    def release(self, lock: Any) -> None:
        lock.release()

    # batches: K locks in one round (Redlock.acquire_many / release_many)
    def acquire_batch(self, names: List[str]) -> List[Any]:
        return [lk for lk in self.dlm.acquire_many(names, ttl=self.ttl) if lk is not None]

    def release_batch(self, locks: List[Any]) -> None:
        if locks:
            self.dlm.release_many(locks)

    def close(self) -> None:
        self.dlm.close()


class FastredlockCython(FastredlockAdapter):
    core = "cython"


class FastredlockPython(FastredlockAdapter):
    core = "python"


class FastredlockCythonNoWake(FastredlockAdapter):
    core = "cython"
    options = {"wake": False}


class FastredlockCythonNoWait(FastredlockAdapter):
    """``lock.release(wait=False)``: the release is written and not waited for, its replies are
    read by the next round on each connection (one round trip per lock+unlock cycle)."""

    core = "cython"

    def __init__(self, urls: List[str], ttl: float) -> None:
        import inspect

        from fastredlock import Lock

        if "wait" not in inspect.signature(Lock.release).parameters:
            raise RuntimeError("this fastredlock's Lock.release has no wait parameter: the not-waiting "
                               "release (issue 30) is not in it yet")
        super().__init__(urls, ttl)

    def release(self, lock: Any) -> None:
        lock.release(wait=False)


class FastredlockFamily(FastredlockAdapter):
    """The lock family (``dlm.rwlock(...).read`` / ``.write``, ``dlm.semaphore``, ``dlm.rlock``)
    on the Cython core: the same lock+unlock cycles as the plain lock's rows, through ``handle``."""

    core = "cython"

    def handle(self, name: str) -> Any:
        raise NotImplementedError

    def acquire(self, name: str) -> Any:
        lock = self.handle(name)
        return lock if lock.acquire() else None

    def acquire_batch(self, names: List[str]) -> List[Any]:
        raise NotImplementedError("the lock family has no batches")


class FastredlockReadLock(FastredlockFamily):
    def handle(self, name: str) -> Any:
        return self.dlm.rwlock(name, ttl=self.ttl).read


class FastredlockWriteLock(FastredlockFamily):
    def handle(self, name: str) -> Any:
        return self.dlm.rwlock(name, ttl=self.ttl).write


class FastredlockSemaphore(FastredlockFamily):
    def handle(self, name: str) -> Any:
        return self.dlm.semaphore(name, 4, ttl=self.ttl)


class FastredlockRLock(FastredlockFamily):
    def handle(self, name: str) -> Any:
        return self.dlm.rlock(name, ttl=self.ttl)


class RawMuxAsync(Adapter):
    """Reference for asyncio clients: the raw mux on an event loop. ``SET k tok NX PX`` written to
    all N non-blocking sockets, the replies read by ``loop.add_reader`` callbacks (hiredis.Reader),
    one future per round; the same for the EVALSHA release. No retries, no validity maths, no early
    return: what any asyncio client pays for the loop itself."""

    is_async = True
    thread_safe = False
    dists: Tuple[str, ...] = ("hiredis",)
    module = "hiredis"

    async def setup(self) -> None:
        import hashlib

        import hiredis

        loop = asyncio.get_running_loop()
        self.loop = loop
        self.socks, self.readers = [], []
        for u in self.urls:
            s = socket.create_connection(host_port(u), timeout=5.0)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
            self.socks.append(s)
            self.readers.append(hiredis.Reader())
        self.sha = hashlib.sha1(RELEASE_SCRIPT.encode()).hexdigest().encode()
        self.quorum = len(self.urls) // 2 + 1
        self.ttl_b = str(self.ttl_ms).encode()
        self.prefix = os.urandom(8).hex().encode()
        self.n = 0
        self.fut: Any = None
        self.replies: List[Any] = []
        for i, s in enumerate(self.socks):
            loop.add_reader(s.fileno(), self._on_read, i)
        await self._round(encode(b"SCRIPT", b"LOAD", RELEASE_SCRIPT.encode()))

    def _on_read(self, i: int) -> None:
        data = self.socks[i].recv(65536)
        r = self.readers[i]
        r.feed(data)
        reply = r.gets()
        while reply is not False:
            self.replies.append(reply)
            reply = r.gets()
        if len(self.replies) >= len(self.socks) and self.fut is not None and not self.fut.done():
            self.fut.set_result(None)

    async def _round(self, request: bytes) -> List[Any]:
        self.replies = []
        self.fut = self.loop.create_future()
        for s in self.socks:
            s.send(request)
        await self.fut
        return self.replies

    async def acquire(self, name: str) -> Any:
        self.n += 1
        key = name.encode()
        token = b"%s%d" % (self.prefix, self.n)
        replies = await self._round(encode(b"SET", key, token, b"NX", b"PX", self.ttl_b))
        if sum(1 for r in replies if r == b"OK") >= self.quorum:
            return key, token
        await self.release((key, token))
        return None

    async def release(self, handle: Any) -> None:
        await self._round(encode(b"EVALSHA", self.sha, b"1", handle[0], handle[1]))


class RawMuxAsyncUvloop(RawMuxAsync):
    """:class:`RawMuxAsync` on uvloop."""

    dists = ("hiredis", "uvloop")

    @staticmethod
    def new_loop() -> asyncio.AbstractEventLoop:
        import uvloop

        return uvloop.new_event_loop()


class FastredlockAsync(Adapter):
    """fastredlock.asyncio: ``await Redlock(urls).lock(name, ttl).acquire()`` on the Cython core,
    the default event loop."""

    is_async = True
    dists: Tuple[str, ...] = ("fastredlock", "hiredis")
    module = "fastredlock"

    async def setup(self) -> None:
        from fastredlock.asyncio import Redlock

        self.dlm = Redlock(self.urls, core="cython")

    async def acquire(self, name: str) -> Any:
        lock = self.dlm.lock(name, ttl=self.ttl)
        return lock if await lock.acquire() else None

    async def release(self, lock: Any) -> None:
        await lock.release()

    async def aclose(self) -> None:
        await self.dlm.aclose()


class FastredlockAsyncUvloop(FastredlockAsync):
    """:class:`FastredlockAsync` on uvloop."""

    dists = ("fastredlock", "hiredis", "uvloop")

    @staticmethod
    def new_loop() -> asyncio.AbstractEventLoop:
        import uvloop

        return uvloop.new_event_loop()


class RedlockPy(Adapter):
    """redlock-py: ``Redlock([urls]).lock(resource, ttl_ms) -> Lock | False``, ``unlock(lock)``."""

    dists = ("redlock-py", "redis", "hiredis")
    module = "redlock"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import redlock

        self.dlm = redlock.Redlock(list(urls))

    def acquire(self, name: str) -> Any:
        return self.dlm.lock(name, self.ttl_ms) or None

    def release(self, lock: Any) -> None:
        self.dlm.unlock(lock)


class RedlockGlasslion(Adapter):
    """redlock (glasslion): ``RedLockFactory([{'url': u}]).create_lock(name, ttl=ms).acquire()``."""

    dists = ("redlock", "redis", "hiredis")
    module = "redlock"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import redlock

        self.factory = redlock.RedLockFactory([{"url": u} for u in urls])

    def acquire(self, name: str) -> Any:
        lock = self.factory.create_lock(name, ttl=self.ttl_ms)
        return lock if lock.acquire() else None

    def release(self, lock: Any) -> None:
        lock.release()


class RedlockNg(Adapter):
    """redlock-ng sync: ``Redlock([urls]).acquire(resource, ttl_ms) -> Lock | None``, ``release``."""

    dists = ("redlock-ng", "redis", "hiredis")
    module = "redlock"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import redlock

        self.dlm = redlock.Redlock(list(urls))

    def acquire(self, name: str) -> Any:
        return self.dlm.acquire(name, self.ttl_ms)

    def release(self, lock: Any) -> None:
        self.dlm.release(lock)


class RedlockNgAsync(Adapter):
    is_async = True
    dists = RedlockNg.dists
    module = "redlock"

    async def setup(self) -> None:
        import redlock

        self.dlm = redlock.AsyncRedlock(list(self.urls))

    async def acquire(self, name: str) -> Any:
        return await self.dlm.acquire(name, self.ttl_ms)

    async def release(self, lock: Any) -> None:
        await self.dlm.release(lock)


class PyRedlock(Adapter):
    """pyredlock sync: ``Redlock([redis.Redis], async_mode=False).lock(res, ttl_ms) -> (ok, Lock)``."""

    dists = ("pyredlock", "redis", "hiredis")
    module = "pyredlock"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import redis
        from pyredlock import Redlock

        self.dlm = Redlock([redis.Redis.from_url(u) for u in urls], async_mode=False)

    def acquire(self, name: str) -> Any:
        ok, lock = self.dlm.lock(name, self.ttl_ms)
        return lock if ok else None

    def release(self, lock: Any) -> None:
        self.dlm.unlock(lock)


class PyRedlockAsync(Adapter):
    is_async = True
    dists = PyRedlock.dists
    module = "pyredlock"

    async def setup(self) -> None:
        import redis.asyncio
        from pyredlock import Redlock

        self.dlm = Redlock([redis.asyncio.Redis.from_url(u) for u in self.urls], async_mode=True)

    async def acquire(self, name: str) -> Any:
        ok, lock = await self.dlm.alock(name, self.ttl_ms)
        return lock if ok else None

    async def release(self, lock: Any) -> None:
        await self.dlm.aunlock(lock)


class Pottery(Adapter):
    """pottery: ``Redlock(key=..., masters={redis.Redis}, auto_release_time=s).acquire()``."""

    dists = ("pottery", "redis", "hiredis")
    module = "pottery"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import logging

        import redis
        from pottery import Redlock

        logging.getLogger("pottery").setLevel(logging.ERROR)
        self.cls = Redlock
        self.masters = frozenset(redis.Redis.from_url(u) for u in urls)

    def key(self, name: str) -> bytes:
        return b"redlock:" + name.encode()

    def acquire(self, name: str) -> Any:
        lock = self.cls(key=name, masters=self.masters, auto_release_time=self.ttl)
        return lock if lock.acquire() else None

    def release(self, lock: Any) -> None:
        lock.release()


class PotteryAio(Adapter):
    is_async = True
    dists = Pottery.dists
    module = "pottery"

    async def setup(self) -> None:
        import logging

        import redis.asyncio
        from pottery import AIORedlock

        logging.getLogger("pottery").setLevel(logging.ERROR)
        self.cls = AIORedlock
        self.masters = frozenset(redis.asyncio.Redis.from_url(u) for u in self.urls)

    def key(self, name: str) -> bytes:
        return b"redlock:" + name.encode()

    async def acquire(self, name: str) -> Any:
        lock = self.cls(key=name, masters=self.masters, auto_release_time=self.ttl)
        return lock if await lock.acquire() else None

    async def release(self, lock: Any) -> None:
        await lock.release()


class AioRedlock(Adapter):
    """aioredlock: ``await Aioredlock([urls]).lock(resource, lock_timeout=s)`` (raises LockError)."""

    is_async = True
    dists = ("aioredlock", "aioredis", "hiredis")
    module = "aioredlock"

    async def setup(self) -> None:
        import logging

        import aioredlock

        logging.getLogger("aioredlock").setLevel(logging.CRITICAL)
        self.lock_error = aioredlock.LockError
        self.dlm = aioredlock.Aioredlock(list(self.urls))

    async def acquire(self, name: str) -> Any:
        try:
            return await self.dlm.lock(name, lock_timeout=self.ttl)
        except self.lock_error as exc:
            if "Can not acquire lock" in str(exc) or type(exc).__name__ == "LockAcquiringError":
                return None
            raise

    async def release(self, lock: Any) -> None:
        await self.dlm.unlock(lock)

    async def aclose(self) -> None:
        await self.dlm.destroy()


class RedisPyLock(Adapter):
    """redis-py's single-instance ``redis.lock.Lock`` (N=1): ``r.lock(name, timeout=s).acquire()``."""

    dists = ("redis", "hiredis")
    module = "redis"
    lock_class: Any = None  # r.lock()'s lock_class: None is redis-py's own

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import redis

        self.r = redis.Redis.from_url(urls[0])

    def acquire(self, name: str) -> Any:
        lock = self.r.lock(name, timeout=self.ttl, lock_class=self.lock_class)
        return lock if lock.acquire() else None

    def release(self, lock: Any) -> None:
        lock.release()


class PythonRedisLock(Adapter):
    """python-redis-lock (N=1): ``redis_lock.Lock(conn, name, expire=s).acquire()`` (blocking: a
    waiter sleeps in ``BLPOP`` on the lock's signal list until a release pushes to it)."""

    dists = ("python-redis-lock", "redis", "hiredis")
    module = "redis_lock"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import logging

        import redis

        self.redis_lock = self._module()
        logging.getLogger("redis_lock").setLevel(logging.ERROR)  # a refused attempt logs a warning
        self.r = redis.StrictRedis.from_url(urls[0])
        self.expire = max(1, int(ttl))  # whole seconds, as the library takes them

    @staticmethod
    def _module() -> Any:
        import redis_lock

        return redis_lock

    def key(self, name: str) -> bytes:
        return b"lock:" + name.encode()

    def acquire(self, name: str) -> Any:
        lock = self.redis_lock.Lock(self.r, name, expire=self.expire)
        return lock if lock.acquire() else None

    def release(self, lock: Any) -> None:
        lock.release()


class ShimRedisLock(PythonRedisLock):
    """fastredlock's drop-in for python-redis-lock (``fastredlock.compat.redis_lock``), on the C core."""

    dists = ("fastredlock", "redis", "hiredis")
    module = "fastredlock"

    @staticmethod
    def _module() -> Any:
        import fastredlock.compat
        from fastredlock.compat import redis_lock

        fastredlock.compat.configure(core="cython")
        return redis_lock
class RedisPyAioLock(Adapter):
    """redis-py's single-instance asyncio ``Lock`` (N=1): ``await r.lock(name, timeout=s).acquire()``."""

    is_async = True
    dists = RedisPyLock.dists
    module = "redis"
    lock_class: Any = None

    async def setup(self) -> None:
        import redis.asyncio

        self.r = redis.asyncio.Redis.from_url(self.urls[0])

    async def acquire(self, name: str) -> Any:
        lock = self.r.lock(name, timeout=self.ttl, lock_class=self.lock_class)
        return lock if await lock.acquire() else None

    async def release(self, lock: Any) -> None:
        await lock.release()

    async def aclose(self) -> None:
        await self.r.aclose()


def _shim(cls: Any, class_name: str) -> Any:
    """``cls`` with fastredlock.compat.redis_py's ``class_name`` as its lock class (Cython core)."""

    class Shim(cls):  # type: ignore[misc, valid-type]
        dists = ("fastredlock", "redis", "hiredis")
        module = "fastredlock"

        def __init__(self, urls: List[str], ttl: float) -> None:
            import fastredlock.compat
            from fastredlock.compat import redis_py

            fastredlock.compat.configure(core="cython")
            self.lock_class = getattr(redis_py, class_name)
            super().__init__(urls, ttl)

    Shim.__name__ = Shim.__qualname__ = f"Shim{class_name}"
    return Shim


ShimRedisPyLock = _shim(RedisPyLock, "Lock")
ShimRedisPyAioLock = _shim(RedisPyAioLock, "AsyncLock")


class RefRedisPy(Adapter):
    """Reference: the least redis-py can do — N x ``SET NX PX``, then N x ``EVALSHA`` release."""

    dists = ("redis", "hiredis")
    module = "redis"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import redis

        self.conns = [redis.Redis.from_url(u) for u in urls]
        self.sha = self.conns[0].script_load(RELEASE_SCRIPT)
        for c in self.conns[1:]:
            c.script_load(RELEASE_SCRIPT)
        self.quorum = len(urls) // 2 + 1
        self.prefix = os.urandom(8).hex()
        self.n = 0

    def acquire(self, name: str) -> Any:
        self.n += 1
        token = f"{self.prefix}{self.n}"
        ok = sum(1 for c in self.conns if c.set(name, token, nx=True, px=self.ttl_ms))
        if ok >= self.quorum:
            return name, token
        self.release((name, token))
        return None

    def release(self, handle: Any) -> None:
        for c in self.conns:
            c.evalsha(self.sha, 1, handle[0], handle[1])


RELEASE_SCRIPT = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


class RawMux(Adapter):
    """Reference: write ``SET k tok NX PX`` to all N sockets, then read N replies (hiredis.Reader);
    the same for the EVALSHA release. No retries, no validity maths: the pure-Python floor."""

    thread_safe = False
    dists = ("hiredis",)
    module = "hiredis"

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import hashlib

        import hiredis

        self.socks = []
        self.readers = []
        for u in urls:
            s = socket.create_connection(host_port(u), timeout=5.0)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append(s)
            self.readers.append(hiredis.Reader())
        self.sha = hashlib.sha1(RELEASE_SCRIPT.encode()).hexdigest().encode()
        for s, r in zip(self.socks, self.readers):
            s.sendall(encode(b"SCRIPT", b"LOAD", RELEASE_SCRIPT.encode()))
            self._read(s, r)
        self.quorum = len(urls) // 2 + 1
        self.ttl_b = str(self.ttl_ms).encode()
        self.prefix = os.urandom(8).hex().encode()
        self.n = 0

    @staticmethod
    def _read(s: socket.socket, r: Any) -> Any:
        reply = r.gets()
        while reply is False:
            data = s.recv(65536)
            if not data:
                raise ConnectionError("closed")
            r.feed(data)
            reply = r.gets()
        return reply

    def _round(self, request: bytes) -> List[Any]:
        for s in self.socks:
            s.sendall(request)
        return [self._read(s, r) for s, r in zip(self.socks, self.readers)]

    def acquire(self, name: str) -> Any:
        self.n += 1
        key = name.encode()
        token = b"%s%d" % (self.prefix, self.n)
        replies = self._round(encode(b"SET", key, token, b"NX", b"PX", self.ttl_b))
        if sum(1 for r in replies if r == b"OK") >= self.quorum:
            return key, token
        self.release((key, token))
        return None

    def release(self, handle: Any) -> None:
        self._round(encode(b"EVALSHA", self.sha, b"1", handle[0], handle[1]))

    # 64 locks per write: one request carrying 64 SETs on distinct keys, to every master
    def acquire_batch(self, names: List[str]) -> List[Any]:
        tokens = []
        parts = []
        for name in names:
            self.n += 1
            key = name.encode()
            token = b"%s%d" % (self.prefix, self.n)
            tokens.append((key, token))
            parts.append(encode(b"SET", key, token, b"NX", b"PX", self.ttl_b))
        request = b"".join(parts)
        counts = [0] * len(names)
        for s in self.socks:
            s.sendall(request)
        for s, r in zip(self.socks, self.readers):
            for i in range(len(names)):
                if self._read(s, r) == b"OK":
                    counts[i] += 1
        held = [h for h, c in zip(tokens, counts) if c >= self.quorum]
        lost = [h for h, c in zip(tokens, counts) if c < self.quorum]
        if lost:
            self.release_batch(lost)
        return held

    def release_batch(self, handles: List[Any]) -> None:
        request = b"".join(encode(b"EVALSHA", self.sha, b"1", k, t) for k, t in handles)
        for s in self.socks:
            s.sendall(request)
        for s, r in zip(self.socks, self.readers):
            for _ in handles:
                self._read(s, r)


ADAPTERS: Dict[str, Callable[..., Adapter]] = {
    "fastredlock-cython": FastredlockCython,
    "fastredlock-python": FastredlockPython,
    "fastredlock-pypy": FastredlockPython,  # the same adapter, its worker run by pypy3
    "fastredlock-cython-nowake": FastredlockCythonNoWake,
    "fastredlock-cython-nowait": FastredlockCythonNoWait,
    "fastredlock-cython-n1": FastredlockCython,
    "fastredlock-read": FastredlockReadLock,
    "fastredlock-write": FastredlockWriteLock,
    "fastredlock-semaphore": FastredlockSemaphore,
    "fastredlock-rlock": FastredlockRLock,
    "fastredlock-async": FastredlockAsync,
    "fastredlock-async-uvloop": FastredlockAsyncUvloop,
    "redlock-py": RedlockPy,
    "redlock-glasslion": RedlockGlasslion,
    "redlock-ng": RedlockNg,
    "redlock-ng-async": RedlockNgAsync,
    "pyredlock": PyRedlock,
    "pyredlock-async": PyRedlockAsync,
    "pottery": Pottery,
    "pottery-aio": PotteryAio,
    "aioredlock": AioRedlock,
    "redis-py-lock": RedisPyLock,
    "python-redis-lock": PythonRedisLock,
    "shim-redis-lock": ShimRedisLock,
    "redis-py-aio-lock": RedisPyAioLock,
    "shim-redis-py-lock": ShimRedisPyLock,
    "shim-redis-py-aiolock": ShimRedisPyAioLock,
    "ref-redis-py": RefRedisPy,
    "ref-raw-mux": RawMux,
    "ref-raw-x64": RawMux,
    "ref-aio-mux": RawMuxAsync,
    "ref-aio-mux-uvloop": RawMuxAsyncUvloop,
}
# The TLS rows (compare.py's "tls5" scenario): the same adapters, given rediss:// URLs.
for _cid in ("fastredlock-cython", "fastredlock-python", "pyredlock", "redlock-ng", "redlock-py", "ref-redis-py"):
    ADAPTERS[_cid + "-tls"] = ADAPTERS[_cid]


# --------------------------------------------------------------------------------------------
# running sync and async adapters the same way


class Runner:
    """Owns the adapter (and the event loop for async ones) and offers blocking calls."""

    def __init__(self, cls: Callable[..., Adapter], urls: List[str], ttl: float) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        #: the adapter: its acquire/release (and acquire_batch...) are its own, not Adapter's
        self.ad: Any
        if getattr(cls, "is_async", False):
            self.loop = getattr(cls, "new_loop", asyncio.new_event_loop)()
            asyncio.set_event_loop(self.loop)
            self.ad = cls(urls, ttl)
            self.loop.run_until_complete(self.ad.setup())
        else:
            self.ad = cls(urls, ttl)

    @property
    def is_async(self) -> bool:
        return self.loop is not None

    def acquire(self, name: str) -> Any:
        if self.loop is not None:
            return self.loop.run_until_complete(self.ad.acquire(name))
        return self.ad.acquire(name)

    def release(self, handle: Any) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.ad.release(handle))
        else:
            self.ad.release(handle)

    def close(self) -> None:
        try:
            if self.loop is not None:
                aclose = getattr(self.ad, "aclose", None)
                if aclose is not None:
                    self.loop.run_until_complete(asyncio.wait_for(aclose(), 2.0))
            else:
                self.ad.close()
        except BaseException:
            pass


def versions(cls: Any) -> Dict[str, Optional[str]]:
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    out: Dict[str, Optional[str]] = {}
    for dist in getattr(cls, "dists", ()):
        try:
            out[dist] = metadata.version(dist)
        except Exception:
            out[dist] = None
    return out
