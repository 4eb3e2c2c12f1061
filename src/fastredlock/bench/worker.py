"""One benchmark measurement in its own process: ``python [-S] worker.py '<job as JSON>'``.

The comparison driver (``driver.py``) starts a fresh interpreter running this file for every
configuration x scenario x round. It talks JSON lines on stdout (``{"event": "ready"}``,
``{"event": "result", ...}``, ``{"event": "error", ...}``) and waits for a ``go`` line on stdin
where a scenario needs the driver to act first (contention start, fault injection).

This file imports only the standard library at the top: peers run with ``python -S`` and a
``PYTHONPATH`` holding nothing but their own ``pip install --target`` folder, so each one sees
exactly the redis-py (and the rest) that it pinned. Adapters import their library lazily.

Every adapter exposes the library's *default* way to take and give back a lock:
``acquire(name) -> handle or None`` (blocking with the library's own retry policy) and
``release(handle)``; ``key(name)`` says which Redis key the library writes for ``name``.
The code here only *calls* each peer's public API; none of their code is copied.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from time import perf_counter, perf_counter_ns
from typing import Any, Callable, Dict, List, Optional, Tuple

# --------------------------------------------------------------------------------------------
# output


def emit(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def wait_go() -> None:
    line = sys.stdin.readline()
    if not line.strip().startswith("go"):
        raise SystemExit("driver went away")


def pct(sorted_ns: List[int], q: float) -> Optional[float]:
    """Nearest-rank percentile of sorted nanoseconds, in microseconds."""
    if not sorted_ns:
        return None
    i = min(len(sorted_ns) - 1, max(0, int(round(q / 100.0 * len(sorted_ns) + 0.5)) - 1))
    return sorted_ns[i] / 1000.0


def cpu_times() -> Tuple[float, float]:
    """(user, system) CPU seconds of this process, all threads: getrusage, finer than os.times()."""
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime, ru.ru_stime
    except ImportError:  # pragma: no cover - not POSIX
        t = os.times()
        return t[0], t[1]


def err_name(exc: BaseException) -> str:
    return f"{type(exc).__module__.split('.')[0]}.{type(exc).__name__}"


# --------------------------------------------------------------------------------------------
# a tiny blocking RESP client (stdlib only) for checks that must not go through the code under test


def host_port(url: str) -> Tuple[str, int]:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    return host, int(port)


def encode(*parts: Any) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        if not isinstance(p, bytes):
            p = str(p).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


class Ctl:
    """A control connection: INCR/DECR of the double-holder counter, EXISTS checks."""

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.sock = socket.create_connection(host_port(url), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def cmd(self, *args: Any) -> Any:
        self.sock.sendall(encode(*args))
        return self._read()

    def _read(self) -> Any:
        line = self.f.readline()
        if not line:
            raise ConnectionError("control connection closed")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body
        if kind == b"-":
            return RuntimeError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            n = int(body)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(body)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ValueError(f"bad RESP line {line!r}")

    def close(self) -> None:
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass


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

    def __init__(self, urls: List[str], ttl: float) -> None:
        super().__init__(urls, ttl)
        import fastredlock

        self.dlm = fastredlock.Redlock(urls, core=self.core)
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


class RawMuxAsync(Adapter):
    """Reference for asyncio clients: the raw mux on an event loop. ``SET k tok NX PX`` written to
    all N non-blocking sockets, the replies read by ``loop.add_reader`` callbacks (hiredis.Reader),
    one future per round; the same for the EVALSHA release. No retries, no validity maths, no early
    return: what any asyncio client pays for the loop itself."""

    is_async = True
    thread_safe = False
    dists = ("hiredis",)
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
    dists = ("fastredlock", "hiredis")
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
        if getattr(cls, "is_async", False):
            self.loop = getattr(cls, "new_loop", asyncio.new_event_loop)()
            asyncio.set_event_loop(self.loop)
            self.ad = cls(urls, ttl)
            self.loop.run_until_complete(self.ad.setup())  # type: ignore[attr-defined]
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


# --------------------------------------------------------------------------------------------
# scenarios


class Stats:
    """Latencies and outcomes of one loop (one thread or task)."""

    def __init__(self) -> None:
        self.acq: List[int] = []
        self.rel: List[int] = []
        self.fails = 0
        self.errors: Dict[str, int] = {}

    def error(self, exc: BaseException) -> None:
        k = err_name(exc)
        self.errors[k] = self.errors.get(k, 0) + 1


def summarize(parts: List[Stats], wall: float, t0: Any, t1: Any, unit: int = 1) -> Dict[str, Any]:
    acq = sorted(x for p in parts for x in p.acq)
    rel = sorted(x for p in parts for x in p.rel)
    cycles = sum(len(p.rel) for p in parts) * unit
    errors: Dict[str, int] = {}
    for p in parts:
        for k, v in p.errors.items():
            errors[k] = errors.get(k, 0) + v
    user = t1[0] - t0[0]
    system = t1[1] - t0[1]
    per = 1000.0 / cycles if cycles else 0.0
    return {
        "cycles": cycles,
        "wall_s": wall,
        "rate": cycles / wall if wall > 0 else 0.0,
        "acq_p50_us": pct(acq, 50),
        "acq_p99_us": pct(acq, 99),
        "rel_p50_us": pct(rel, 50),
        "rel_p99_us": pct(rel, 99),
        "user_ms_per_1000": user * 1000.0 * per,
        "sys_ms_per_1000": system * 1000.0 * per,
        "cpu_util": (user + system) / wall if wall > 0 else 0.0,
        "fails": sum(p.fails for p in parts) * unit,
        "errors": errors,
    }


def loop_sync(ad: Any, prefix: str, end_ns: int, st: Stats) -> None:
    i = 0
    acq_append, rel_append = st.acq.append, st.rel.append
    while True:
        i += 1
        name = f"{prefix}{i}"
        a = perf_counter_ns()
        try:
            h = ad.acquire(name)
        except Exception as exc:
            st.error(exc)
            h = None
        b = perf_counter_ns()
        acq_append(b - a)
        c = b
        if h is None:
            st.fails += 1
        else:
            try:
                ad.release(h)
            except Exception as exc:
                st.error(exc)
            c = perf_counter_ns()
            rel_append(c - b)
        if c >= end_ns:
            return


async def loop_async(ad: Any, prefix: str, end_ns: int, st: Stats) -> None:
    i = 0
    while True:
        i += 1
        name = f"{prefix}{i}"
        a = perf_counter_ns()
        try:
            h = await ad.acquire(name)
        except Exception as exc:
            st.error(exc)
            h = None
        b = perf_counter_ns()
        st.acq.append(b - a)
        c = b
        if h is None:
            st.fails += 1
        else:
            try:
                await ad.release(h)
            except Exception as exc:
                st.error(exc)
            c = perf_counter_ns()
            st.rel.append(c - b)
        if c >= end_ns:
            return


def warmup(run: Runner, tag: str, n: int) -> None:
    for i in range(n):
        h = run.acquire(f"warm:{tag}:{i}")
        if h is not None:
            run.release(h)


def scenario_seq(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    warmup(run, job["tag"], job["warmup"])
    st = Stats()
    t0 = cpu_times()
    w0 = perf_counter()
    end_ns = perf_counter_ns() + int(job["duration"] * 1e9)
    if run.loop is not None:
        run.loop.run_until_complete(loop_async(run.ad, f"seq:{job['tag']}:", end_ns, st))
    else:
        loop_sync(run.ad, f"seq:{job['tag']}:", end_ns, st)
    wall = perf_counter() - w0
    t1 = cpu_times()
    return summarize([st], wall, t0, t1)


def scenario_threads(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """T threads (async clients: ``tasks`` tasks on one loop) sharing one client, distinct names."""
    n = job.get("tasks", job["threads"]) if run.loop is not None else job["threads"]
    warmup(run, job["tag"], job["warmup"])
    parts = [Stats() for _ in range(n)]
    if run.loop is not None:
        async def main() -> None:
            end_ns = perf_counter_ns() + int(job["duration"] * 1e9)
            await asyncio.gather(*(loop_async(run.ad, f"thr:{job['tag']}:{k}:", end_ns, parts[k])
                                   for k in range(n)))

        t0 = cpu_times()
        w0 = perf_counter()
        run.loop.run_until_complete(main())
    else:
        barrier = threading.Barrier(n + 1)
        box: Dict[str, int] = {}

        def body(k: int) -> None:
            barrier.wait()
            loop_sync(run.ad, f"thr:{job['tag']}:{k}:", box["end"], parts[k])

        threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(n)]
        for t in threads:
            t.start()
        t0 = cpu_times()
        w0 = perf_counter()
        box["end"] = perf_counter_ns() + int(job["duration"] * 1e9)
        barrier.wait()
        for t in threads:
            t.join()
    wall = perf_counter() - w0
    t1 = cpu_times()
    out = summarize(parts, wall, t0, t1)
    out["per_thread"] = [len(p.rel) for p in parts]
    return out


def scenario_x64(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """64 locks per call (one write per master); cycles count locks, latencies are per batch."""
    ad = run.ad
    batch = job.get("batch", 64)
    for i in range(max(1, job["warmup"] // batch)):
        ad.release_batch(ad.acquire_batch([f"warm:{job['tag']}:{i}:{k}" for k in range(batch)]))
    st = Stats()
    t0 = cpu_times()
    w0 = perf_counter()
    end_ns = perf_counter_ns() + int(job["duration"] * 1e9)
    i = 0
    while True:
        i += 1
        names = [f"x64:{job['tag']}:{i}:{k}" for k in range(batch)]
        a = perf_counter_ns()
        held = ad.acquire_batch(names)
        b = perf_counter_ns()
        st.acq.append(b - a)
        st.fails += (batch - len(held)) / batch
        ad.release_batch(held)
        c = perf_counter_ns()
        st.rel.append(c - b)
        if c >= end_ns:
            break
    wall = perf_counter() - w0
    t1 = cpu_times()
    out = summarize([st], wall, t0, t1, unit=batch)
    out["fails"] = int(round(out["fails"]))
    out["batch"] = batch
    return out


def scenario_contend(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """One of P processes hammering one name with the library's default acquire; an independent
    counter on a separate master (INCR on entry, DECR on exit) catches two holders at once."""
    ctl = Ctl(job["counter_url"])
    ckey = job["counter_key"]
    name = job["name"]
    hold = job.get("hold_ms", 0) / 1000.0
    acquired = failed = doubles = 0
    st = Stats()
    waits: List[int] = []
    emit({"event": "ready"})
    wait_go()
    t0 = cpu_times()
    w0 = perf_counter()
    end = w0 + job["duration"]
    while perf_counter() < end:
        a = perf_counter_ns()
        try:
            h = run.acquire(name)
        except Exception as exc:
            st.error(exc)
            h = None
        waits.append(perf_counter_ns() - a)
        if h is None:
            failed += 1
            continue
        if ctl.cmd("INCR", ckey) != 1:
            doubles += 1
        if hold:
            time.sleep(hold)
        ctl.cmd("DECR", ckey)
        acquired += 1
        try:
            run.release(h)
        except Exception as exc:
            st.error(exc)
    wall = perf_counter() - w0
    t1 = cpu_times()
    waits.sort()
    return {
        "acquired": acquired,
        "failed": failed,
        "doubles": doubles,
        "wall_s": wall,
        "wait_p50_us": pct(waits, 50),
        "wait_p99_us": pct(waits, 99),
        "cpu_s": (t1[0] - t0[0]) + (t1[1] - t0[1]),
        "errors": st.errors,
    }


class Hung(BaseException):
    """Raised by the watchdog alarm: a BaseException, so a library's ``except Exception`` cannot
    swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hung()


def bounded(run: Runner, fn: str, arg: Any, limit: float) -> Any:
    """Call ``run.<fn>(arg)``; raise Hung if it has not answered within ``limit`` seconds."""
    if run.loop is not None:
        coro = getattr(run.ad, fn)(arg)
        try:
            return run.loop.run_until_complete(asyncio.wait_for(coro, limit))
        except asyncio.TimeoutError:
            raise Hung() from None
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return getattr(run, fn)(arg)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def scenario_fault(run: Runner, job: Dict[str, Any]) -> Dict[str, Any]:
    """Warm up on healthy masters, let the driver break one master, then time each acquire and
    record what the library did: answered, hung, raised (and whether it left its key on a quorum)."""
    warmup(run, job["tag"], 3)
    emit({"event": "ready"})
    wait_go()
    bad = job["bad_index"]
    quorum = len(job["urls"]) // 2 + 1
    limit = job["hang_limit"]
    rows = []
    for k in range(job["attempts"]):
        name = f"fault:{job['tag']}:{k}"
        row: Dict[str, Any] = {"acquired": False, "hung": False, "acq_exc": None, "rel_exc": None}
        a = perf_counter()
        try:
            h = bounded(run, "acquire", name, limit)
            row["acquired"] = h is not None
        except Hung:
            h = None
            row["hung"] = True
        except Exception as exc:
            h = None
            row["acq_exc"] = f"{err_name(exc)}: {str(exc)[:120]}"
        row["answer_ms"] = (perf_counter() - a) * 1000.0
        if h is not None:
            b = perf_counter()
            try:
                bounded(run, "release", h, limit)
            except Hung:
                row["rel_hung"] = True
            except Exception as exc:
                row["rel_exc"] = f"{err_name(exc)}: {str(exc)[:120]}"
            row["release_ms"] = (perf_counter() - b) * 1000.0
        # who still holds this name's key on the healthy masters right now
        key = run.ad.key(name)
        holding = 0
        for i, u in enumerate(job["urls"]):
            if i == bad:
                continue
            try:
                c = Ctl(u, timeout=1.0)
                holding += int(c.cmd("EXISTS", key) == 1)
                c.close()
            except OSError:
                pass
        row["holding_after"] = holding
        row["exc_while_holding"] = bool(
            (row["acq_exc"] and holding >= quorum) or row["rel_exc"] or row.get("rel_hung")
        )
        rows.append(row)
    return {"attempts": rows}


SCENARIOS = {
    "seq": scenario_seq,
    "threads": scenario_threads,
    "x64": scenario_x64,
    "contend": scenario_contend,
    "fault": scenario_fault,
}


def main() -> None:
    job = json.loads(sys.argv[1])
    cls = ADAPTERS[job["config"]]
    try:
        run = Runner(cls, job["urls"], job["ttl"])
        mod = sys.modules.get(getattr(cls, "module", ""))
        info = {
            "versions": versions(cls),
            "module_file": getattr(mod, "__file__", None),
            "python": sys.version.split()[0],
        }
        if job["scenario"] == "probe":
            h = run.acquire(f"probe:{job['tag']}")
            if h is None:
                raise RuntimeError("could not take an uncontended lock on healthy masters")
            run.release(h)
            emit({"event": "result", "info": info, "result": {}})
        else:
            result = SCENARIOS[job["scenario"]](run, job)
            emit({"event": "result", "info": info, "result": result})
        run.close()
    except BaseException as exc:  # report, never hang the driver
        import traceback

        emit({"event": "error", "error": f"{err_name(exc)}: {exc}",
              "traceback": traceback.format_exc()[-2000:]})
    finally:
        sys.stdout.flush()
        os._exit(0)  # leave stuck library threads (and their executors) behind


if __name__ == "__main__":
    main()
