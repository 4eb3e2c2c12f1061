"""Drop-in replacements for redis-py's ``Lock`` (``redis.lock.Lock``) and its asyncio ``Lock``
(``redis.asyncio.lock.Lock``), on fastredlock.

Pass one as the lock class, or build it as you built redis-py's::

    from redis import Redis
    from fastredlock.compat.redis_py import Lock

    r = Redis(host="127.0.0.1", port=6379)
    with r.lock("orders:42", timeout=10, lock_class=Lock) as lock:
        ...
        lock.extend(5)                       # 5 more seconds
    lock = Lock(r, "orders:42", timeout=10, blocking_timeout=1)

    from redis.asyncio import Redis
    from fastredlock.compat.redis_py import AsyncLock

    r = Redis(host="127.0.0.1", port=6379)
    async with r.lock("orders:42", timeout=10, lock_class=AsyncLock) as lock:
        await lock.extend(5)

Same as redis-py (5.x to 8.x): the arguments (``timeout``, ``sleep``, ``blocking``,
``blocking_timeout``, ``thread_local``, ``raise_on_release_error``), the methods
(``acquire(sleep=None, blocking=None, blocking_timeout=None, token=None)`` for :class:`Lock`,
``acquire(blocking=None, blocking_timeout=None, token=None)`` for :class:`AsyncLock`, as in
redis-py; ``release()``, ``extend(additional_time, replace_ttl=False)``, ``reacquire()``,
``owned()``, ``locked()``, ``with`` / ``async with``), the token (``local.token``: thread-local
unless ``thread_local=False``; a ``token=`` of your own is encoded by the client's encoder), the
errors and their messages (``redis.exceptions.LockError``, ``LockNotOwnedError``), and what is
stored: the key is ``name`` (encoded by the client), its value the token, written with ``SET name
token NX PX timeout`` (``SET name token NX`` without ``timeout``), and released, extended and reacquired only while it still holds that token.
A single master: the server the client points at (its host, port, db and credentials are read; the
lock does not go through the client's connection pool; ``owned()`` and ``locked()`` do, as in
redis-py). Old and new processes exclude each other on the same names.

Migrating: change ``from redis.lock import Lock`` to ``from fastredlock.compat.redis_py import Lock``
(and ``from redis.asyncio.lock import Lock`` to ``from fastredlock.compat.redis_py import AsyncLock``),
or pass the shim's class as ``lock_class=`` to ``r.lock(...)``. Old and new processes may run side by
side during the rollout: they read and write the same key and value.

A lock without ``timeout`` (``None`` or ``0``) is stored as redis-py stores it: ``SET name token NX``
with no expiry (``TTL name`` is ``-1``); it is held until it is released or the key is deleted,
``extend()`` and ``reacquire()`` raise ``LockError`` ("Cannot extend a lock with no timeout"), and a
holder that dies leaves the name locked until someone deletes the key (as with redis-py).
The safer choice, and the shim's behaviour before, is an explicit opt-in: :class:`RenewedLock` /
:class:`AsyncRenewedLock` (``lock_class=RenewedLock``) give such a lock a TTL of
:data:`NO_TIMEOUT_TTL` seconds that a watchdog (a thread for :class:`RenewedLock`, a task on the
event loop for :class:`AsyncRenewedLock`) renews while it is held, so a process that dies leaves
the name locked for seconds rather than for good.

Differences (bugs not kept):

- Each operation is bounded by fastredlock's ``io_timeout`` (50 ms; see
  :func:`fastredlock.compat.configure`) rather than the client's socket timeout, and a lock counts as
  held only while its validity (measured on the monotonic clock, minus the drift allowance) lasts.
- ``extend(t)`` adds ``t`` to the time this lock is known to have left (its validity, a little less
  than the server's ``PTTL``), not to ``PTTL`` itself, so the new expiry is never later than
  redis-py's. An extension that fails loses the lock (it is deleted if it was still ours), and
  ``extend()`` of a lock whose timeout cannot be represented raises ``ValueError``.
- A ``timeout`` too small to ever be valid (2 ms or less) is "not acquired" (redis-py set the key).
- A release that could not reach the server raises the redis-py error and keeps the token, so it
  can be retried (redis-py forgot the token first).
- Tokens are 128 bits from the OS CSPRNG plus a counter (redis-py: ``uuid1().hex``, which carries
  the host's MAC address and the time).
- Not for ``RedisCluster`` clients: the lock names one server.
- The shim sleeps and reads the clock with :mod:`time` of its own: a test that replaces
  redis-py's private ``redis.lock.mod_time`` (a fake clock) does not reach it.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Awaitable, Optional, Tuple, Union, cast

from ..engine.tokens import new_token
from ..errors import LockError as _LockError
from . import _no_expiry
from ._no_expiry import Held as _Held
from ._common import Masters, pool_state, redis_errors, usable_ttl

__all__ = ["NO_TIMEOUT_TTL", "AsyncLock", "AsyncRenewedLock", "Lock", "RenewedLock"]

#: Where the shims log (redis-py logged to ``redis.lock`` / ``redis.asyncio.lock``).
logger = logging.getLogger(__name__)

#: Seconds of TTL that :class:`RenewedLock` and :class:`AsyncRenewedLock` give a lock made without
#: ``timeout``, renewed by a watchdog while it is held.
NO_TIMEOUT_TTL = 10.0

_monotonic = time.monotonic
_NUMBERS = (int, float)


def _exceptions() -> Any:
    from redis import exceptions

    return exceptions


def _check_seconds(value: Any, what: str, none_ok: bool = False) -> None:
    """Refuse a duration redis-py would have sent the server (or slept) and failed on later."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, _NUMBERS):
        raise TypeError(f"{what} must be a number of seconds{' or None' if none_ok else ''}, not {type(value).__name__}")
    if not value >= 0:
        raise ValueError(f"{what} must be >= 0 seconds, got {value!r}")


#: Per thread, one marker object that goes with the thread: the key of a lock's per-thread state.
_marks = threading.local()
#: Serializes making a lock's ``_others`` (a rare path: a second thread's first use).
_claim = threading.Lock()


class _State:
    """One thread's state of a lock (what redis-py keeps in ``threading.local``): ``token``, and
    the fastredlock handle that holds it with the client that handle belongs to (the class holds
    the defaults: making one costs no ``__init__``)."""

    token: Optional[bytes] = None
    handle: Any = None
    client: Any = None


class _Local(threading.local):
    """The state of a lock in the threads other than its first (see :meth:`_RedisPyLock._state`)."""

    token: Optional[bytes] = None
    handle: Any = None
    client: Any = None


class _RedisPyLock:
    """What :class:`Lock` and :class:`AsyncLock` share: the arguments and their checks, the key and
    token as redis-py stores them, and redis-py's errors and messages. The subclasses add the
    operations, blocking or awaitable."""

    #: The client the subclass takes, for the error message of a wrong one.
    _CLIENT = "redis.Redis"
    #: What a lock without ``timeout`` gets: ``None``, no expiry (as redis-py: ``TTL name`` is -1
    #: until it is released or deleted); a number of seconds, a TTL that a watchdog renews while
    #: the lock is held (:class:`RenewedLock`, :class:`AsyncRenewedLock`).
    no_timeout_ttl: Optional[float] = None

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
        try:
            redis.connection_pool  # read by pool_state() below, after the arguments are checked
        except AttributeError:
            raise TypeError(f"redis must be a {self._CLIENT} client, not {type(redis).__name__}") from None
        if not (
            (timeout is None or timeout.__class__ in _NUMBERS and timeout >= 0)
            and sleep.__class__ in _NUMBERS and sleep >= 0
            and (blocking_timeout is None or blocking_timeout.__class__ in _NUMBERS and blocking_timeout >= 0)
        ):  # the common case checked at once; the checks below say what is wrong
            _check_seconds(timeout, "timeout", True)
            _check_seconds(sleep, "sleep")
            _check_seconds(blocking_timeout, "blocking_timeout", True)
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        # The state of the first thread that uses the lock (of all threads, without thread_local)
        # is a plain object; the other threads' states are in a threading.local made when a second
        # thread uses the lock (see _state). A threading.local per lock would cost more than the
        # rest of making the lock, and redis-py's idiom makes a lock per use (``r.lock(name)``).
        self._first = _State()
        known = self._pool = pool_state(redis)
        self._masters: Masters = known.masters
        self._key: bytes = name.encode(known.encoding, known.errors) if name.__class__ is str else self._encode(name)

    #: The marker of the thread whose state is ``_first`` (claimed by its first use; see _state).
    _owner: Optional[object] = None
    #: The other threads' states, made when a second thread uses the lock.
    _others: Optional[_Local] = None

    # --- helpers --------------------------------------------------------------------------------
    def _encode(self, value: Any) -> bytes:
        """``value`` as the client would send it (its encoding and encoding errors)."""
        encoder = self._pool.encoder
        if encoder is None:  # a pool without get_encoder(): redis-py's rules, utf-8
            if isinstance(value, (bytes, bytearray, memoryview)):
                return bytes(value)
            return (value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)).encode(
                self._pool.encoding, self._pool.errors)
        encoded = encoder.encode(value)
        return encoded if encoded.__class__ is bytes else bytes(encoded)

    def _ttl(self) -> float:
        return float(self.timeout) if self.timeout else float(self.no_timeout_ttl or NO_TIMEOUT_TTL)

    @property
    def _no_expiry(self) -> bool:
        """Whether the key is stored without expiry (no ``timeout``, and no renewed TTL asked)."""
        return not self.timeout and self.no_timeout_ttl is None

    @property
    def local(self) -> Any:
        """This thread's state of the lock, as redis-py's ``local``: ``local.token`` is the token
        this thread holds (``None``: none); one state for all threads with ``thread_local=False``."""
        return self._state()

    def _state(self) -> Any:
        """This thread's state (see ``local``)."""
        try:
            mark = _marks.mark
        except AttributeError:  # this thread's first use of a lock
            mark = _marks.mark = object()
        owner = self._owner
        if mark is owner or not self.thread_local:
            return self._first
        if owner is None and self.__dict__.setdefault("_owner", mark) is mark:  # (atomic: one claims)
            return self._first
        others = self._others
        if others is None:
            with _claim:  # two threads' first use at once must not make two
                if self._others is None:
                    self._others = _Local()
            others = self._others
        return others

    def _handle(self, state: Any, dlm: Any) -> Any:
        """This thread's fastredlock handle for the next attempt: the last one while it holds
        nothing, else a new one; ``None`` if the timeout can never be valid ("not acquired")."""
        handle = state.handle
        if handle is None or handle.token is not None or state.client is not dlm:
            ttl = self._ttl()
            try:
                handle = dlm.lock(self._key, ttl, auto_extend=not self.timeout)
            except ValueError:
                if usable_ttl(dlm, ttl):  # (it raises past fastredlock's largest TTL)
                    raise
                return None
            state.handle = handle
            state.client = dlm
        return handle

    @staticmethod
    def _took(state: Any, held: _Held, dlm: Any) -> bool:
        """This thread now holds ``held`` (a key without expiry) through ``dlm``."""
        state.handle = held
        state.client = dlm
        state.token = held.token
        return True

    def _deadline(self, blocking_timeout: Optional[float], now: float) -> Optional[float]:
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        return None if blocking_timeout is None else now + blocking_timeout

    @staticmethod
    def _try_again(blocking: bool, stop_trying_at: Optional[float], sleep: float, now: float) -> bool:
        """Whether to sleep ``sleep`` and try again (redis-py: never to wake past the deadline)."""
        return blocking and (stop_trying_at is None or now + sleep <= stop_trying_at)

    def _owns(self, stored: Any) -> bool:
        """Whether ``stored`` (the key's value, read through the client) is this lock's token."""
        if stored and not isinstance(stored, bytes):
            stored = self._encode(stored)  # decode_responses=True
        token = self._state().token
        return token is not None and stored == token

    def _not_acquired(self) -> Exception:
        return _exceptions().LockError("Unable to acquire lock within the time specified", lock_name=self.name)

    def _exit_failed(self) -> None:
        """A release at the end of ``with`` failed with a LockError: raise it, or log it."""
        if self.raise_on_release_error:
            raise
        logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    # --- release, extend, reacquire: the checks and the errors ------------------------------------
    def _release_start(self) -> Tuple[Any, bytes, Any]:
        """This thread's state, the token to release and the handle to release it with;
        LockError if none is held."""
        state = self._state()
        token = state.token
        if token is None:
            raise _exceptions().LockError(
                "Cannot release a lock that's not owned or is already unlocked.", lock_name=self.name
            )
        handle = state.handle
        if handle is None or handle.token != token:  # a token set by hand: release it by value
            handle = self._masters_client().lock(self._key, self._ttl())
        return state, token, handle

    def _release_failed(self, state: Any, error: _LockError) -> Exception:
        """The error to raise for a release that found the key not ours (the token is forgotten);
        a redis-py error is raised instead if the server's answer is unknown (the token is kept)."""
        self._raise_failed(error)
        state.token = None
        return _exceptions().LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)

    def _extend_check(self, what: str) -> None:
        """``extend``/``reacquire``'s refusals, raised before any I/O (``what``: which one)."""
        if self._state().token is None:
            raise _exceptions().LockError(f"Cannot {what} an unlocked lock", lock_name=self.name)
        if not self.timeout:
            raise _exceptions().LockError(f"Cannot {what} a lock with no timeout", lock_name=self.name)

    def _extend_start(self, additional_time: Optional[float], replace_ttl: bool, what: str) -> Tuple[Any, float]:
        """The handle to extend and its new TTL (``additional_time`` None: reacquire)."""
        state = self._state()
        handle = state.handle
        if handle is None or handle.token != state.token:
            raise self._not_owned(what)
        if additional_time is None:
            return handle, float(self.timeout)  # type: ignore[arg-type]
        return handle, float(additional_time) + (0.0 if replace_ttl else handle.validity)

    def _extend_failed(self, error: _LockError, what: str) -> Exception:
        self._raise_failed(error)
        return self._not_owned(what)

    def _not_owned(self, what: str) -> Exception:
        return _exceptions().LockNotOwnedError(f"Cannot {what} a lock that's no longer owned", lock_name=self.name)

    def _raise_failed(self, error: _LockError) -> None:
        """Raise a redis-py error if the server did not answer "ok" or "no" (it failed, or its
        answer is unknown): the key may still hold the token, so the caller keeps it."""
        unknown = [o for o in error.outcomes if o.outcome not in ("ok", "no")]
        if unknown:
            failed = redis_errors(unknown) or [_exceptions().ConnectionError(str(unknown[0]))]
            raise failed[0] from error

    def _masters_client(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} name={self.name!r} timeout={self.timeout!r}>"


class Lock(_RedisPyLock):
    """A lock on the key ``name`` of the server ``redis`` (a ``redis.Redis``) points at; see the
    module docstring.

    Arguments as :class:`redis.lock.Lock`: ``timeout`` (seconds the lock lives; ``None``: until
    released), ``sleep`` (seconds between attempts), ``blocking`` and ``blocking_timeout`` (defaults
    of :meth:`acquire`), ``thread_local`` (keep the token per thread), ``raise_on_release_error``
    (let ``with`` raise when the lock was gone at its end).
    """

    def _masters_client(self) -> Any:
        return self._masters.client

    def acquire(
        self,
        sleep: Optional[float] = None,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Take the lock; return ``True`` once held, ``False`` if not held by the deadline.

        ``blocking`` (default: the constructor's) ``False`` makes one attempt; else attempts repeat
        every ``sleep`` seconds (default: the constructor's) until ``blocking_timeout`` (default:
        the constructor's; ``None``: forever) would be passed. ``token``: the value to store
        (encoded by the client), else a fresh one.
        """
        started = _monotonic()
        if token is not None:
            token = self._encode(token)
        stop_trying_at = None
        dlm = self._masters.client
        state = self._state()
        no_expiry = self._no_expiry
        while True:
            if no_expiry:
                held = _no_expiry.acquire(dlm, self._key, token or new_token())
                if held.token is not None:
                    return self._took(state, held, dlm)
            else:
                handle = self._handle(state, dlm)
                if handle is not None and handle.acquire(False, None, token):  # token None: a fresh one
                    state.token = handle.token
                    return True
            if stop_trying_at is None:  # the first failure: the rest of redis-py's arguments
                sleep = self.sleep if sleep is None else sleep
                blocking = self.blocking if blocking is None else blocking
                stop_trying_at = self._deadline(blocking_timeout, started)
            pause = float(cast(float, sleep))
            if not self._try_again(bool(blocking), stop_trying_at, pause, _monotonic()):
                return False
            time.sleep(pause)

    def locked(self) -> bool:
        """Whether anyone holds the lock (the key exists)."""
        return self.redis.get(self.name) is not None

    def owned(self) -> bool:
        """Whether this lock (this thread's token, unless ``thread_local=False``) holds the key."""
        return self._owns(self.redis.get(self.name))

    def release(self) -> None:
        """Delete the key if it still holds this lock's token.

        ``LockError`` if this lock holds nothing, ``LockNotOwnedError`` if the key no longer holds
        its token. A release that could not reach the server raises the redis-py error and keeps
        the token, so it can be retried.
        """
        state, token, handle = self._release_start()
        try:
            if handle.__class__ is _no_expiry.Held:
                _no_expiry.release(state.client, handle, token)
            else:
                handle.release(token=token)
        except _LockError as error:
            raise self._release_failed(state, error) from None
        state.token = None

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the lock's time left (``replace_ttl``: set it to that).

        Returns ``True``; ``LockError`` if the lock is not held or has no timeout,
        ``LockNotOwnedError`` if it was lost.
        """
        self._extend_check("extend")
        return self._do_extend(additional_time, replace_ttl, "extend")

    def reacquire(self) -> bool:
        """Reset the lock's time left to ``timeout``; ``True`` (errors as :meth:`extend`)."""
        self._extend_check("reacquire")
        return self._do_extend(None, True, "reacquire")

    def _do_extend(self, additional_time: Optional[float], replace_ttl: bool, what: str) -> bool:
        handle, ttl = self._extend_start(additional_time, replace_ttl, what)
        try:
            handle.extend(ttl)
        except _LockError as error:
            raise self._extend_failed(error, what) from None
        return True

    def __enter__(self) -> "Lock":
        if self.acquire():
            return self
        raise self._not_acquired()

    def __exit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        try:
            self.release()
        except _exceptions().LockError:
            self._exit_failed()


class AsyncLock(_RedisPyLock):
    """A lock on the key ``name`` of the server ``redis`` (a ``redis.asyncio.Redis``) points at;
    see the module docstring. Arguments as :class:`redis.asyncio.lock.Lock` (and :class:`Lock`).
    """

    _CLIENT = "redis.asyncio.Redis"

    def _masters_client(self) -> Any:
        return self._masters.aio_client()

    async def acquire(
        self,
        blocking: Optional[bool] = None,
        blocking_timeout: Optional[float] = None,
        token: Optional[Union[str, bytes]] = None,
    ) -> bool:
        """Take the lock; return ``True`` once held, ``False`` if not held by the deadline.

        As :meth:`Lock.acquire`, without ``sleep`` (redis-py's asyncio lock has none): attempts
        repeat every ``sleep`` seconds of the constructor, sleeping with ``asyncio.sleep``.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        if token is not None:
            token = self._encode(token)
        if blocking is None:
            blocking = self.blocking
        stop_trying_at = self._deadline(blocking_timeout, started)
        dlm = self._masters.aio_client()
        state = self._state()
        no_expiry = self._no_expiry
        while True:
            if no_expiry:
                held = await _no_expiry.aacquire(dlm, self._key, token or new_token())
                if held.token is not None:
                    return self._took(state, held, dlm)
            else:
                handle = self._handle(state, dlm)
                if handle is not None and await handle.acquire(blocking=False, token=token):
                    state.token = handle.token
                    return True
            if not self._try_again(blocking, stop_trying_at, self.sleep, loop.time()):
                return False
            await asyncio.sleep(self.sleep)

    async def locked(self) -> bool:
        """Whether anyone holds the lock (the key exists)."""
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        """Whether this lock (this thread's token, unless ``thread_local=False``) holds the key."""
        return self._owns(await self.redis.get(self.name))

    async def release(self) -> None:
        """Delete the key if it still holds this lock's token (errors as :meth:`Lock.release`)."""
        state, token, handle = self._release_start()
        try:
            if handle.__class__ is _no_expiry.Held:
                await _no_expiry.arelease(state.client, handle, token)
            else:
                await handle.release(token=token)
        except _LockError as error:
            raise self._release_failed(state, error) from None
        state.token = None

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Awaitable[bool]:
        """Add ``additional_time`` seconds to the lock's time left (``replace_ttl``: set it to that).

        Returns an awaitable of ``True``; raises ``LockError`` now if the lock is not held or has no
        timeout, and the awaitable raises ``LockNotOwnedError`` if the lock was lost.
        """
        self._extend_check("extend")
        return self._do_extend(additional_time, replace_ttl, "extend")

    def reacquire(self) -> Awaitable[bool]:
        """Reset the lock's time left to ``timeout``; an awaitable of ``True`` (errors as :meth:`extend`)."""
        self._extend_check("reacquire")
        return self._do_extend(None, True, "reacquire")

    async def _do_extend(self, additional_time: Optional[float], replace_ttl: bool, what: str) -> bool:
        handle, ttl = self._extend_start(additional_time, replace_ttl, what)
        try:
            await handle.extend(ttl)
        except _LockError as error:
            raise self._extend_failed(error, what) from None
        return True

    async def __aenter__(self) -> "AsyncLock":
        if await self.acquire():
            return self
        raise self._not_acquired()

    async def __aexit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        try:
            await self.release()
        except _exceptions().LockError:
            self._exit_failed()


class RenewedLock(Lock):
    """:class:`Lock`, but a lock made without ``timeout`` gets a TTL of :data:`NO_TIMEOUT_TTL`
    seconds that a watchdog thread renews while it is held: the safer choice (a holder that dies
    leaves the name locked for seconds, not until someone deletes the key). Everything else is
    :class:`Lock`'s; ``extend()`` and ``reacquire()`` still refuse a lock without ``timeout``, as
    redis-py's. Pass it as redis-py's ``lock_class`` (``r.lock(name, lock_class=RenewedLock)``);
    set ``no_timeout_ttl`` (on a subclass or an instance) for another TTL."""

    no_timeout_ttl: Optional[float] = NO_TIMEOUT_TTL


class AsyncRenewedLock(AsyncLock):
    """:class:`AsyncLock` with :class:`RenewedLock`'s renewed TTL for a lock without ``timeout``
    (renewed by a task on the event loop while it is held)."""

    no_timeout_ttl: Optional[float] = NO_TIMEOUT_TTL
