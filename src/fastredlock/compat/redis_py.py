"""Drop-in replacement for redis-py's asyncio ``Lock`` (``redis.asyncio.lock.Lock``), on fastredlock.

Pass it as the lock class, or build it as you built redis-py's::

    from redis.asyncio import Redis
    from fastredlock.compat.redis_py import AsyncLock

    r = Redis(host="127.0.0.1", port=6379)
    async with r.lock("orders:42", timeout=10, lock_class=AsyncLock) as lock:
        ...
        await lock.extend(5)                 # 5 more seconds
    lock = AsyncLock(r, "orders:42", timeout=10, blocking_timeout=1)

Same as redis-py (5.x to 8.x): the arguments (``timeout``, ``sleep``, ``blocking``,
``blocking_timeout``, ``thread_local``, ``raise_on_release_error``), the methods
(``acquire(blocking=None, blocking_timeout=None, token=None)``, ``release()``,
``extend(additional_time, replace_ttl=False)``, ``reacquire()``, ``owned()``, ``locked()``,
``async with``), the token (``local.token``: thread-local unless ``thread_local=False``; a ``token=``
of your own is encoded by the client's encoder), the errors and their messages
(``redis.exceptions.LockError``, ``LockNotOwnedError``), and what is stored: the key is ``name``
(encoded by the client), its value the token, written with ``SET name token NX PX timeout``, and
released, extended and reacquired only while it still holds that token. A single master: the server
the client points at (its host, port, db and credentials are read; the lock does not go through the
client's connection pool). Old and new processes exclude each other on the same names.

Differences (bugs not kept):

- A lock without ``timeout`` (``None`` or ``0``) is not stored forever: it gets a TTL of
  :data:`NO_TIMEOUT_TTL` seconds that a watchdog task renews while the lock is held and its event
  loop runs, so a process that dies leaves the name locked for seconds rather than for good
  (redis-py: ``TTL name`` is ``-1`` until someone deletes it). ``extend()`` and ``reacquire()``
  still refuse such a lock.
- Each operation is bounded by fastredlock's ``io_timeout`` (50 ms; see
  :func:`fastredlock.compat.configure`) rather than the client's socket timeout, and a lock counts as
  held only while its validity (measured on the monotonic clock, minus the drift allowance) lasts.
- ``extend(t)`` adds ``t`` to the time this lock is known to have left (its validity, a little less
  than the server's ``PTTL``), not to ``PTTL`` itself, so the new expiry is never later than
  redis-py's. An extension that fails loses the lock (it is deleted if it was still ours), and
  ``extend()`` of a lock whose timeout cannot be represented raises ``ValueError``.
- A ``timeout`` too small to ever be valid (2 ms or less) is "not acquired" (redis-py set the key).
- Tokens are 128 bits from the OS CSPRNG plus a counter (redis-py: ``uuid1().hex``, which carries
  the host's MAC address and the time).
- Not for ``redis.asyncio.RedisCluster`` clients: the lock names one server.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace
from typing import Any, Awaitable, Optional, Union

from ..errors import LockError as _LockError
from ._common import Masters, redis_errors, usable_ttl

__all__ = ["NO_TIMEOUT_TTL", "AsyncLock"]

#: Where the shim logs (redis-py logged to ``redis.asyncio.lock``).
logger = logging.getLogger(__name__)

#: Seconds of TTL given to a lock made without ``timeout``, renewed by a watchdog while it is held.
NO_TIMEOUT_TTL = 10.0


def _exceptions() -> Any:
    from redis import exceptions

    return exceptions


def _check_seconds(value: Any, what: str, *, none_ok: bool = False) -> None:
    """Refuse a duration redis-py would have sent the server (or slept) and failed on later."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds{' or None' if none_ok else ''}, not {type(value).__name__}")
    if not value >= 0:
        raise ValueError(f"{what} must be >= 0 seconds, got {value!r}")


class AsyncLock:
    """A lock on the key ``name`` of the server ``redis`` points at; see the module docstring.

    Arguments as :class:`redis.asyncio.lock.Lock`: ``timeout`` (seconds the lock lives; ``None``:
    until released), ``sleep`` (seconds between attempts), ``blocking`` and ``blocking_timeout``
    (defaults of :meth:`acquire`), ``thread_local`` (keep the token per thread),
    ``raise_on_release_error`` (let ``async with`` raise when the lock was gone at its end).
    """

    def __init__(
        self,
        redis: Any,
        name: Union[str, bytes, memoryview],
        timeout: Optional[float] = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: Optional[float] = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
    ) -> None:
        if not hasattr(redis, "connection_pool"):
            raise TypeError(f"redis must be a redis.asyncio.Redis client, not {type(redis).__name__}")
        _check_seconds(timeout, "timeout", none_ok=True)
        _check_seconds(sleep, "sleep")
        _check_seconds(blocking_timeout, "blocking_timeout", none_ok=True)
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.local: Any = threading.local() if self.thread_local else SimpleNamespace()
        self.raise_on_release_error = raise_on_release_error
        self.local.token = None
        self._masters = Masters([redis])  # an unreadable or unsupported client is reported here
        self._key: bytes = self._encode(name)

    # --- helpers --------------------------------------------------------------------------------
    def _encode(self, value: Any) -> bytes:
        """``value`` as the client would send it (its encoding and encoding errors)."""
        encoded = self.redis.connection_pool.get_encoder().encode(value)
        return bytes(encoded)

    def _ttl(self) -> float:
        return float(self.timeout) if self.timeout else NO_TIMEOUT_TTL

    # --- acquire --------------------------------------------------------------------------------
    async def acquire(
        self,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Take the lock; return ``True`` once held, ``False`` if not held by the deadline.

        ``blocking`` (default: the constructor's) ``False`` makes one attempt; else attempts repeat
        every ``sleep`` seconds until ``blocking_timeout`` (default: the constructor's; ``None``:
        forever) would be passed. ``token``: the value to store (encoded by the client), else a
        fresh one.
        """
        if token is not None:
            token = self._encode(token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        loop = asyncio.get_running_loop()
        stop_trying_at = None if blocking_timeout is None else loop.time() + blocking_timeout
        while True:
            if await self._attempt(token):
                return True
            if not blocking:
                return False
            next_try_at = loop.time() + self.sleep
            if stop_trying_at is not None and next_try_at > stop_trying_at:
                return False
            await asyncio.sleep(self.sleep)

    async def _attempt(self, token: Optional[bytes]) -> bool:
        """One ``SET name token NX PX`` round; on success the token and handle are this thread's."""
        dlm = self._masters.aio_client()
        ttl = self._ttl()
        if not usable_ttl(dlm, ttl):
            return False
        handle = dlm.lock(self._key, ttl, auto_extend=not self.timeout)
        if not await handle.acquire(blocking=False, token=token):  # token None: a fresh one
            return False
        self.local.token = handle.token
        self.local.handle = handle
        return True

    # --- state ----------------------------------------------------------------------------------
    async def locked(self) -> bool:
        """Whether anyone holds the lock (the key exists)."""
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        """Whether this lock (this thread's token, unless ``thread_local=False``) holds the key."""
        stored = await self.redis.get(self.name)
        if stored and not isinstance(stored, bytes):
            stored = self._encode(stored)  # decode_responses=True
        return self.local.token is not None and stored == self.local.token

    # --- release, extend, reacquire -------------------------------------------------------------
    async def release(self) -> None:
        """Delete the key if it still holds this lock's token.

        ``LockError`` if this lock holds nothing, ``LockNotOwnedError`` if the key no longer holds
        its token. A release that could not reach the server raises the redis-py error and keeps
        the token, so it can be retried.
        """
        token = self.local.token
        if token is None:
            raise _exceptions().LockError(
                "Cannot release a lock that's not owned or is already unlocked.", lock_name=self.name
            )
        handle = getattr(self.local, "handle", None) or self._masters.aio_client().lock(self._key, self._ttl())
        try:
            await handle.release(token=token)
        except _LockError as error:
            self._raise_failed(error)  # keeps the token for a retry
            self.local.token = None
            raise _exceptions().LockNotOwnedError("Cannot release a lock that's no longer owned") from None
        self.local.token = None

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Awaitable[bool]:
        """Add ``additional_time`` seconds to the lock's time left (``replace_ttl``: set it to that).

        Returns an awaitable of ``True``; raises ``LockError`` now if the lock is not held or has no
        timeout, and the awaitable raises ``LockNotOwnedError`` if the lock was lost.
        """
        if self.local.token is None:
            raise _exceptions().LockError("Cannot extend an unlocked lock")
        if not self.timeout:
            raise _exceptions().LockError("Cannot extend a lock with no timeout")
        return self._do_extend(additional_time, replace_ttl, "extend")

    def reacquire(self) -> Awaitable[bool]:
        """Reset the lock's time left to ``timeout``; an awaitable of ``True`` (errors as :meth:`extend`)."""
        if self.local.token is None:
            raise _exceptions().LockError("Cannot reacquire an unlocked lock")
        if not self.timeout:
            raise _exceptions().LockError("Cannot reacquire a lock with no timeout")
        return self._do_extend(None, True, "reacquire")

    async def _do_extend(self, additional_time: Optional[float], replace_ttl: bool, what: str) -> bool:
        handle = getattr(self.local, "handle", None)
        if handle is None or handle.token != self.local.token:
            raise _exceptions().LockNotOwnedError(f"Cannot {what} a lock that's no longer owned")
        if additional_time is None:
            ttl = float(self.timeout)
        else:
            ttl = float(additional_time) + (0.0 if replace_ttl else handle.validity)
        try:
            await handle.extend(ttl)
        except _LockError as error:
            self._raise_failed(error)
            raise _exceptions().LockNotOwnedError(f"Cannot {what} a lock that's no longer owned") from None
        return True

    def _raise_failed(self, error: _LockError) -> None:
        """Raise a redis-py error if the server did not answer "ok" or "no" (it failed, or its
        answer is unknown): the key may still hold the token, so the caller keeps it."""
        unknown = [o for o in error.outcomes if o.outcome not in ("ok", "no")]
        if unknown:
            failed = redis_errors(unknown) or [_exceptions().ConnectionError(str(unknown[0]))]
            raise failed[0] from error

    # --- context manager ------------------------------------------------------------------------
    async def __aenter__(self) -> "AsyncLock":
        if await self.acquire():
            return self
        raise _exceptions().LockError("Unable to acquire lock within the time specified")

    async def __aexit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        try:
            await self.release()
        except _exceptions().LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} name={self.name!r} timeout={self.timeout!r}>"
