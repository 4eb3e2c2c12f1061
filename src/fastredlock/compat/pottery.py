"""Drop-in replacement for pottery's ``Redlock``, ``AIORedlock`` and ``synchronize`` (``pip install pottery``).

Change ``from pottery import Redlock`` to ``from fastredlock.compat.pottery import Redlock``
(likewise ``AIORedlock``, ``synchronize``, ``ContextTimer`` and the exceptions below)::

    from redis import Redis
    redis = Redis.from_url("redis://localhost:6379/1")
    printer_lock = Redlock(key="printer", masters={redis}, auto_release_time=10)
    if printer_lock.acquire(timeout=1):
        try:
            print_stuff()
            printer_lock.extend()          # at most num_extensions times
        finally:
            printer_lock.release()

    from redis.asyncio import Redis as AIORedis
    shower = AIORedlock(key="shower", masters={AIORedis.from_url("redis://localhost:6379/1")})
    async with shower:                     # or: if await shower.acquire(timeout=1): ...
        await shower.extend()

Same as pottery 3.0.1 (``Redlock`` and ``AIORedlock``; not pottery's containers): the API
(``Redlock(*, key, masters=frozenset(), raise_on_redis_errors=False, auto_release_time=10,
num_extensions=3, context_manager_blocking=True, context_manager_timeout=-1)``; ``acquire(*, blocking=True, timeout=-1)``, ``locked()`` (seconds
left, ``0`` when not held), ``extend()``, ``release()``, the context manager, ``synchronize``;
``raise_on_redis_errors=`` on each of them; the exceptions ``QuorumNotAchieved``,
``TooManyExtensions``, ``ExtendUnlockedLock``, ``ReleaseUnlockedLock``, ``QuorumIsImpossible`` as
dataclasses of ``key``, ``masters``, ``redis_errors``; masters default to ``$REDIS_URL`` or
``redis://localhost:6379/0``), the key (``redlock:`` + ``key``), ``SET key value NX PX ttl`` and the
owner-checked release and extension (``GET == value`` then ``DEL`` / ``PEXPIRE``), random sleeps of
up to 0.2 s between attempts, the drift allowance (``auto_release_time * 0.01 + 2 ms``): old and new
processes exclude each other. A blocking ``acquire`` that had to wait logs the same
``source=pottery sample#redlock.enqueued...`` line (``sample#aioredlock...`` for ``AIORedlock``;
to this module's logger, ``logger``).

``AIORedlock(*, key, masters, ...)`` takes ``Redlock``'s arguments with ``redis.asyncio.Redis``
clients as masters; ``await acquire(...)``, ``await locked()``, ``await extend()``,
``await release()`` (each with ``raise_on_redis_errors=``) and ``async with`` behave as
``Redlock``'s and raise the same exceptions. It locks through :mod:`fastredlock.asyncio`, one client
per event loop (``await fastredlock.compat._common.aclose_clients()`` closes the running loop's;
a closed loop's are closed when the next loop builds its own); ``locked()`` asks the masters through
your ``redis.asyncio`` clients.

Differences (bugs not kept):

- Each attempt, extension and release is one round to all masters at once (pottery used a thread
  per master), each master bounded by ``io_timeout`` (50 ms; :func:`fastredlock.compat.configure`)
  rather than the socket timeout of your redis-py clients, whose address and credentials are read
  but which the shim does not lock through. ``locked()`` does query them (it is not a hot path).
- Validity is measured on the monotonic clock from before the first write; ``locked()`` never
  reports more than what the acquisition (or last extension) guaranteed.
- Values are tokens of 128 bits from the OS CSPRNG plus a counter (pottery: ``str(uuid4())``).
- Restart-aware voting: a master up for less than the largest TTL used does not count toward the
  quorum. Turn it off with ``fastredlock.compat.configure(restart_aware=False)``.
- An extension that fails loses the lock: it is released on every master (pottery left the key to
  its TTL) and later ``extend()`` calls raise ``ExtendUnlockedLock``. A ``release()`` that failed
  because masters failed can still be retried, as with pottery.
- An ``acquire()`` that fails on a ``Redlock`` that holds the lock keeps that hold, so
  ``release()`` still frees it (pottery forgot it, leaving the key until ``auto_release_time``).
- ``acquire(timeout=0)`` makes one attempt (pottery made none and returned ``False``).
- Several dbs of one server as masters (``redis://host:port/0``, ``/1``, ... — a common CI setup)
  are accepted, as by pottery, with a ``RuntimeWarning`` and a log record saying what is lost: each
  db holds its own key and votes, so mutual exclusion holds as on that one server, but there is no
  fault tolerance (the server is a single point of failure). The same db of one server twice is
  refused with ``ValueError`` (its second vote could never be won).
- An ``auto_release_time`` too small to ever be valid (2 ms or less) is "not acquired" without a
  round (pottery set and deleted the key).
- ``AIORedlock`` without masters raises ``ValueError`` (pottery's raised ``StopIteration`` from its
  constructor), and one given a blocking ``redis.Redis`` client raises ``TypeError`` (pottery failed
  at the first ``await``). Its ``locked()`` answers once a quorum confirmed and cancels the questions
  still out (pottery waited for every master); a blocking ``acquire(timeout=...)`` does not sleep
  past its timeout (pottery could overrun it by up to 0.2 s).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import inspect
import logging
import math
import os
import random
import time
import timeit
import warnings
from time import monotonic
from typing import Any, Callable, ClassVar, FrozenSet, Iterable, List, Literal, NoReturn, Optional, TypeVar, cast

from ..errors import LockError
from ._common import (
    Masters, arelease_token, encode_key, error_outcomes, one_server_message, redis_errors, release_token, usable_ttl,
)

__all__ = [
    "AIORedlock",
    "ContextTimer",
    "ExtendUnlockedLock",
    "PrimitiveError",
    "QuorumIsImpossible",
    "QuorumNotAchieved",
    "Redlock",
    "ReleaseUnlockedLock",
    "TooManyExtensions",
    "logger",
    "synchronize",
]

#: Where the shim logs: pottery's logger, ``pottery``, so handlers and levels set for it still apply.
logger = logging.getLogger("pottery")

F = TypeVar("F", bound=Callable[..., Any])

# The remaining time to live of KEYS[1] in ms if it still holds ARGV[1], else 0.
_PTTL_IF_OWNER = """\
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local left = redis.call('pttl', KEYS[1])
if left < 0 then
    return 0
end
return left
"""


# --- exceptions -------------------------------------------------------------------------------
@dataclasses.dataclass
class PrimitiveError(Exception):
    """Base of the lock's exceptions: the ``key``, its ``masters``, and the ``redis_errors`` seen."""

    key: str
    masters: Iterable[Any]
    redis_errors: Iterable[Any] = tuple()


class QuorumNotAchieved(PrimitiveError, RuntimeError):
    """A ``with`` block could not acquire its lock."""


class TooManyExtensions(PrimitiveError, RuntimeError):
    """The lock was already extended ``num_extensions`` times."""


class ExtendUnlockedLock(PrimitiveError, RuntimeError):
    """``extend()`` on a lock that is not held (any more)."""


class ReleaseUnlockedLock(PrimitiveError, RuntimeError):
    """``release()`` on a lock that is not held (any more)."""


class QuorumIsImpossible(PrimitiveError, RuntimeError):
    """So many masters failed that no quorum was possible (with ``raise_on_redis_errors``)."""


# --- ContextTimer -----------------------------------------------------------------------------
class ContextTimer:
    """Wall-clock stopwatch in whole milliseconds, usable as a context manager (as pottery's)."""

    __slots__ = ("_started", "_stopped")

    def __init__(self) -> None:
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> None:
        """Start the timer; a timer starts once (``RuntimeError`` otherwise), as pottery's."""
        if self._stopped:
            raise RuntimeError("timer has already been stopped")
        if self._started:
            raise RuntimeError("timer has already been started")
        self._started = timeit.default_timer()

    def stop(self) -> None:
        """Stop the started timer; ``elapsed()`` then stays fixed (``RuntimeError`` if not running)."""
        if self._stopped:
            raise RuntimeError("timer has already been stopped")
        if not self._started:
            raise RuntimeError("timer hasn't yet been started")
        self._stopped = timeit.default_timer()

    def elapsed(self) -> int:
        """Milliseconds from :meth:`start` to :meth:`stop` (or to now, while running)."""
        if not self._started:
            raise RuntimeError("timer hasn't yet been started")
        end = self._stopped or timeit.default_timer()
        return round((end - self._started) * 1000)

    def __enter__(self) -> "ContextTimer":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> "Literal[False]":
        self.stop()
        return False


# --- what Redlock and AIORedlock share ----------------------------------------------------------
_default_masters: Optional[FrozenSet[Any]] = None


def _defaults() -> FrozenSet[Any]:
    """pottery's default master: ``$REDIS_URL`` or ``redis://localhost:6379/0``, 1 s socket timeout."""
    global _default_masters
    if _default_masters is None:
        from redis import Redis

        url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
        _default_masters = frozenset({Redis.from_url(url, socket_timeout=1)})
    return _default_masters


class _Wait:
    """The schedule of one ``acquire()``: random pauses of up to ``_RETRY_DELAY`` between attempts
    while ``blocking``, until ``timeout`` (``-1``: no end); logs pottery's line if it had to wait."""

    __slots__ = ("_lock", "_blocking", "_timeout", "_start", "_waited")

    def __init__(self, lock: "_PotteryLock", blocking: bool, timeout: float) -> None:
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        self._lock = lock
        self._blocking = blocking
        self._timeout = timeout
        self._start = monotonic()
        self._waited = False

    def pause(self) -> Optional[float]:
        """Seconds to sleep before the next attempt; ``None``: no attempt is left."""
        if not self._blocking:
            return None
        self._waited = True
        delay = random.uniform(0, self._lock._RETRY_DELAY)
        if self._timeout != -1:
            remaining = self._timeout - (monotonic() - self._start)
            if remaining <= 0:
                return None
            delay = min(delay, remaining)
        return delay

    def done(self, acquired: bool) -> bool:
        """Log how long a blocking acquire waited (if it did), as pottery; return ``acquired``."""
        if self._waited:
            name = self._lock.key.split(":", 1)[1]
            waited = math.ceil((monotonic() - self._start) * 1000)
            sample = self._lock._SAMPLE
            logger.info(
                "source=pottery sample#%s.enqueued.%s=%dms sample#%s.acquired.%s=%d",
                sample, name, waited, sample, name, acquired,
            )
        return acquired


def _warn_one_server(group: Any) -> None:
    """Say what is lost when masters are dbs of one server (a warning and a log record)."""
    message = one_server_message(group)
    warnings.warn(message, RuntimeWarning, stacklevel=4)
    logger.warning(message)


class _Answers:
    """The masters' answers to one ``locked()`` question, taken as they come."""

    __slots__ = ("_lock", "_quorum", "_start", "_left", "_errors")

    def __init__(self, lock: "_PotteryLock", masters: int) -> None:
        self._lock = lock
        self._quorum = masters // 2 + 1
        self._start = monotonic()
        self._left: List[float] = []  # seconds left, from the masters that still hold our value
        self._errors: List[Any] = []

    def take(self, answer: Callable[[], Any]) -> Optional[float]:
        """Take one master's answer (``answer()`` returns its ms left, or raises its error); once a
        quorum holds our value, return the seconds ``locked()`` answers (never more than the
        acquisition guaranteed), else ``None``."""
        lock = self._lock
        try:
            ms = answer()
        except Exception as error:  # redis-py's RedisError, and OSError below it
            self._errors.append(error)
            logger.error("%s.locked() caught %s", type(lock).__qualname__, type(error).__qualname__, exc_info=error)
            return None
        if ms:
            self._left.append(int(ms) / 1000.0)
        if len(self._left) < self._quorum:
            return None
        validity = min(self._left) - lock._drift() - (monotonic() - self._start)
        if lock._held is not None:
            validity = min(validity, lock._held.validity)
        return validity if validity > 0 else 0

    def none(self, raise_on_redis_errors: Optional[bool]) -> int:
        """Every master answered without a quorum: ``0``, or ``QuorumIsImpossible`` if asked."""
        self._lock._check_enough_masters_up(raise_on_redis_errors, self._errors)
        return 0


class _PotteryLock:
    """The state and rules :class:`Redlock` and :class:`AIORedlock` share, their constructor
    included; each adds the I/O (blocking calls, or awaitable ones on :mod:`fastredlock.asyncio`)
    and what it takes as masters (:meth:`_masters_given`)."""

    __slots__ = (
        "_key",
        "masters",
        "raise_on_redis_errors",
        "auto_release_time",
        "num_extensions",
        "context_manager_blocking",
        "context_manager_timeout",
        "_extension_num",
        "_seen_masters",
        "_masters_obj",
        "_held",
        "_token",
    )

    _KEY_PREFIX: ClassVar[str] = "redlock"
    _AUTO_RELEASE_TIME: ClassVar[float] = 10
    _CLOCK_DRIFT_FACTOR: ClassVar[float] = 0.01
    _RETRY_DELAY: ClassVar[float] = 0.2
    _NUM_EXTENSIONS: ClassVar[int] = 3
    #: The name in the "enqueued" log line (pottery: ``redlock`` / ``aioredlock``).
    _SAMPLE: ClassVar[str] = "redlock"

    def __init__(
        self,
        *,
        key: str,
        masters: Iterable[Any] = frozenset(),
        raise_on_redis_errors: bool = False,
        auto_release_time: float = _AUTO_RELEASE_TIME,
        num_extensions: int = _NUM_EXTENSIONS,
        context_manager_blocking: bool = True,
        context_manager_timeout: float = -1,
    ) -> None:
        if not context_manager_blocking and context_manager_timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        self.key = key
        self.masters = self._masters_given(masters)
        self.raise_on_redis_errors = raise_on_redis_errors
        self.auto_release_time = auto_release_time
        self.num_extensions = num_extensions
        self.context_manager_blocking = context_manager_blocking
        self.context_manager_timeout = context_manager_timeout
        self._extension_num = 0
        self._seen_masters: Optional[FrozenSet[Any]] = None
        self._masters_obj: Optional[Masters] = None
        self._held: Any = None  # the fastredlock handle of the current acquisition
        self._token: Optional[bytes] = None  # its token, kept until a release went through
        self._masters()  # a malformed or duplicated master is reported here, not at the first acquire

    # --- key and masters ----------------------------------------------------------------------
    @property
    def key(self) -> str:
        """The Redis key: ``redlock:`` + the ``key`` given (assigning a new key prefixes it too)."""
        return self._key

    @key.setter
    def key(self, value: str) -> None:
        self._key = f"{self._KEY_PREFIX}:{value}"

    @staticmethod
    def _masters_given(masters: Iterable[Any]) -> FrozenSet[Any]:
        """The ``masters`` argument as the lock keeps it (a frozenset), checked."""
        raise NotImplementedError

    def _masters(self) -> Masters:
        if self._seen_masters is not self.masters:
            masters = Masters(self.masters, same_server_ok=True)
            for group in masters.shared:
                _warn_one_server(group)
            self._masters_obj = masters
            self._seen_masters = self.masters
        return cast(Masters, self._masters_obj)

    def _drift(self) -> float:
        return self.auto_release_time * self._CLOCK_DRIFT_FACTOR + 0.002

    def _check_enough_masters_up(self, raise_on_redis_errors: Optional[bool], errors: List[Any]) -> None:
        if raise_on_redis_errors is None:
            raise_on_redis_errors = self.raise_on_redis_errors
        if raise_on_redis_errors and len(errors) > len(self.masters) // 2:
            raise QuorumIsImpossible(self.key, self.masters, redis_errors=errors)

    def _failures(self, outcomes: Any, what: str) -> List[Any]:
        """The failed masters' redis-py errors, each logged as pottery logged it (one ERROR record
        per master, ``Redlock.extend() caught TimeoutError``, with the error attached)."""
        errors = redis_errors(error_outcomes(outcomes))
        for error in errors:
            logger.error("%s.%s() caught %s", type(self).__qualname__, what, type(error).__qualname__,
                         exc_info=error)
        return errors

    # --- the steps around each round ----------------------------------------------------------
    def _new_handle(self, client: Any) -> Any:
        """A handle for one attempt with ``client``; ``None`` if the TTL can never be valid."""
        if not usable_ttl(client, self.auto_release_time):
            return None
        return client.lock(encode_key(self.key), ttl=self.auto_release_time)

    def _took(self, handle: Any) -> bool:
        self._held, self._token = handle, handle.token
        self._extension_num = 0
        return True

    def _not_taken(self, outcomes: Any, raise_on_redis_errors: Optional[bool]) -> bool:
        self._check_enough_masters_up(raise_on_redis_errors, self._failures(outcomes, "__acquire_masters"))
        return False

    def _to_extend(self) -> Any:
        """The handle to extend; ``TooManyExtensions`` / ``ExtendUnlockedLock`` if there is none."""
        if self._extension_num >= self.num_extensions:
            raise TooManyExtensions(self.key, self.masters)
        handle = self._held
        if handle is None or handle.token is None:
            raise ExtendUnlockedLock(self.key, self.masters, redis_errors=[])
        return handle

    def _not_extended(self, outcomes: Any, raise_on_redis_errors: Optional[bool]) -> NoReturn:
        # fastredlock released it everywhere: the lock is lost, not half-held
        self._held = None
        errors = self._failures(outcomes, "extend")
        self._check_enough_masters_up(raise_on_redis_errors, errors)
        raise ExtendUnlockedLock(self.key, self.masters, redis_errors=errors)

    def _to_release(self) -> bytes:
        """The token to release; ``ReleaseUnlockedLock`` if nothing is held."""
        token = self._token
        if token is None:
            raise ReleaseUnlockedLock(self.key, self.masters, redis_errors=[])
        self._held = None
        return token

    def _released(self, released: bool, outcomes: Any, raise_on_redis_errors: Optional[bool]) -> None:
        if released:
            self._token = None
            return
        errors = self._failures(outcomes, "release")
        if not errors:
            self._token = None  # every master answered: it is gone, nothing to retry
        self._check_enough_masters_up(raise_on_redis_errors, errors)
        raise ReleaseUnlockedLock(self.key, self.masters, redis_errors=errors)

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} key={self.key}>"


# --- Redlock ----------------------------------------------------------------------------------
class Redlock(_PotteryLock):
    """A distributed lock on ``redlock:<key>`` over ``masters`` (redis-py clients); see the module."""

    __slots__ = ()

    @staticmethod
    def _masters_given(masters: Iterable[Any]) -> FrozenSet[Any]:
        return frozenset(masters) or _defaults()

    # --- acquire ------------------------------------------------------------------------------
    def _acquire_masters(self, *, raise_on_redis_errors: Optional[bool] = None) -> bool:
        """One attempt on all masters; ``True`` if a quorum said yes with validity left."""
        handle = self._new_handle(self._masters().client)
        if handle is None:
            return False
        if handle.acquire(blocking=False):
            return self._took(handle)
        return self._not_taken(handle.outcomes, raise_on_redis_errors)

    def acquire(
        self,
        *,
        blocking: bool = True,
        timeout: float = -1,
        raise_on_redis_errors: Optional[bool] = None,
    ) -> bool:
        """Lock the lock; return whether it is held.

        ``blocking`` with ``timeout=-1`` waits as long as it takes; with a timeout, up to that many
        seconds. ``blocking=False`` makes one attempt (and takes no timeout).
        """
        wait = _Wait(self, blocking, timeout)
        while not self._acquire_masters(raise_on_redis_errors=raise_on_redis_errors):
            delay = wait.pause()
            if delay is None:
                return wait.done(False)
            time.sleep(delay)
        return wait.done(True)

    # --- state --------------------------------------------------------------------------------
    def locked(self, *, raise_on_redis_errors: Optional[bool] = None) -> float:
        """Seconds this object will still hold the lock (unless extended or released), else ``0``.

        Asks every master whether the key still holds this acquisition's value, and for how long.
        """
        token = self._token
        if token is None:
            return 0
        clients = self._masters().redis_clients()
        answers = _Answers(self, len(clients))
        # One thread per master, as pottery did: a slow or dead master does not delay the answer.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(clients))
        try:
            futures = [pool.submit(master.eval, _PTTL_IF_OWNER, 1, self.key, token) for master in clients]
            for future in concurrent.futures.as_completed(futures):
                seconds = answers.take(future.result)
                if seconds is not None:
                    return seconds
        finally:
            pool.shutdown(wait=False)
        return answers.none(raise_on_redis_errors)

    # --- extend and release -------------------------------------------------------------------
    def extend(self, *, raise_on_redis_errors: Optional[bool] = None) -> None:
        """Reset the lock's time to live to ``auto_release_time``, at most ``num_extensions`` times."""
        handle = self._to_extend()
        try:
            handle.extend(ttl=self.auto_release_time)
        except (LockError, ValueError):
            self._not_extended(handle.outcomes, raise_on_redis_errors)
        self._extension_num += 1

    def release(self, *, raise_on_redis_errors: Optional[bool] = None) -> None:
        """Unlock the lock; ``ReleaseUnlockedLock`` if it was not held (any more)."""
        token = self._to_release()
        released, outcomes = release_token(self._masters().client, encode_key(self.key), token)
        self._released(released, outcomes, raise_on_redis_errors)

    # --- context manager ----------------------------------------------------------------------
    def __enter__(self) -> "Redlock":
        if self.acquire(blocking=self.context_manager_blocking, timeout=self.context_manager_timeout):
            return self
        raise QuorumNotAchieved(self.key, self.masters)

    def __exit__(self, exc_type: object, exc_value: object, traceback: object) -> "Literal[False]":
        self.release()
        return False


# --- AIORedlock -------------------------------------------------------------------------------
def _aio_masters(masters: Iterable[Any]) -> FrozenSet[Any]:
    """``masters`` as a frozenset, each a ``redis.asyncio`` client (pottery awaited their methods)."""
    if isinstance(masters, (str, bytes, dict)):
        raise TypeError("masters must be an iterable of redis.asyncio.Redis clients, not a single one")
    found = frozenset(masters)
    if not found:
        raise ValueError("AIORedlock needs masters: a set of redis.asyncio.Redis clients")
    for master in found:
        if not inspect.iscoroutinefunction(getattr(master, "execute_command", None)):
            raise TypeError(f"AIORedlock's masters must be redis.asyncio.Redis clients, not {type(master).__name__}")
    return found


class AIORedlock(_PotteryLock):
    """pottery's ``AIORedlock``: :class:`Redlock` for asyncio, on :mod:`fastredlock.asyncio`.

    ``masters`` are ``redis.asyncio.Redis`` clients (required); the other arguments are
    :class:`Redlock`'s. ``acquire``, ``locked``, ``extend`` and ``release`` are coroutines with
    :class:`Redlock`'s keyword arguments and answers; ``async with`` acquires (as
    ``context_manager_blocking`` / ``context_manager_timeout`` say) and releases. Use an object
    from one event loop at a time; the client it locks through is the one of the running loop.
    """

    __slots__ = ()

    _SAMPLE: ClassVar[str] = "aioredlock"

    @staticmethod
    def _masters_given(masters: Iterable[Any]) -> FrozenSet[Any]:
        return _aio_masters(masters)

    # --- acquire ------------------------------------------------------------------------------
    async def _acquire_masters(self, *, raise_on_redis_errors: Optional[bool] = None) -> bool:
        """One attempt on all masters; ``True`` if a quorum said yes with validity left."""
        handle = self._new_handle(self._masters().aio_client())
        if handle is None:
            return False
        if await handle.acquire(blocking=False):
            return self._took(handle)
        return self._not_taken(await handle.settled_outcomes(), raise_on_redis_errors)

    async def acquire(
        self,
        *,
        blocking: bool = True,
        timeout: float = -1,
        raise_on_redis_errors: Optional[bool] = None,
    ) -> bool:
        """Lock the lock; return whether it is held (see :meth:`Redlock.acquire`).

        Between attempts the task sleeps; cancelled during an attempt, the attempt's keys are
        released behind it (fastredlock.asyncio's rule), so nothing is left locked.
        """
        wait = _Wait(self, blocking, timeout)
        while not await self._acquire_masters(raise_on_redis_errors=raise_on_redis_errors):
            delay = wait.pause()
            if delay is None:
                return wait.done(False)
            await asyncio.sleep(delay)
        return wait.done(True)

    # --- state --------------------------------------------------------------------------------
    async def locked(self, *, raise_on_redis_errors: Optional[bool] = None) -> float:
        """Seconds this object will still hold the lock (unless extended or released), else ``0``.

        Asks every master (through its redis.asyncio client) at once; answers as soon as a quorum
        confirmed, cancelling the questions still out.
        """
        token = self._token
        if token is None:
            return 0
        clients = self._masters().redis_clients()
        answers = _Answers(self, len(clients))
        pending = {asyncio.ensure_future(master.eval(_PTTL_IF_OWNER, 1, self.key, token)) for master in clients}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for ask in done:
                    seconds = answers.take(ask.result)
                    if seconds is not None:
                        return seconds
        finally:
            for ask in pending:
                ask.cancel()
            if pending:
                await asyncio.wait(pending)
        return answers.none(raise_on_redis_errors)

    # --- extend and release -------------------------------------------------------------------
    async def extend(self, *, raise_on_redis_errors: Optional[bool] = None) -> None:
        """Reset the lock's time to live to ``auto_release_time``, at most ``num_extensions`` times."""
        handle = self._to_extend()
        try:
            await handle.extend(ttl=self.auto_release_time)
        except (LockError, ValueError):
            self._not_extended(await handle.settled_outcomes(), raise_on_redis_errors)
        self._extension_num += 1

    async def release(self, *, raise_on_redis_errors: Optional[bool] = None) -> None:
        """Unlock the lock; ``ReleaseUnlockedLock`` if it was not held (any more). Cancelled while
        its round runs, the release still goes out."""
        token = self._to_release()
        released, outcomes = await arelease_token(self._masters().aio_client(), encode_key(self.key), token)
        self._released(released, outcomes, raise_on_redis_errors)

    # --- context manager ----------------------------------------------------------------------
    async def __aenter__(self) -> "AIORedlock":
        if await self.acquire(blocking=self.context_manager_blocking, timeout=self.context_manager_timeout):
            return self
        raise QuorumNotAchieved(self.key, self.masters)

    async def __aexit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        await self.release()


def synchronize(
    *,
    key: str,
    masters: Iterable[Any] = frozenset(),
    raise_on_redis_errors: bool = False,
    auto_release_time: float = _PotteryLock._AUTO_RELEASE_TIME,
    blocking: bool = True,
    timeout: float = -1,
) -> Callable[[F], F]:
    """Decorator: one caller at a time, across threads, processes and machines, runs the function."""

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            lock = Redlock(
                key=key,
                masters=masters,
                raise_on_redis_errors=raise_on_redis_errors,
                auto_release_time=auto_release_time,
                context_manager_blocking=blocking,
                context_manager_timeout=timeout,
            )
            asked = monotonic()
            held_since: Optional[float] = None
            try:
                with lock:
                    held_since = monotonic()
                    return func(*args, **kwargs)
            finally:
                now = monotonic()
                if held_since is None:
                    logger.info(
                        "%s() waited for %s for %d ms; never acquired lock",
                        func.__qualname__, lock.key, (now - asked) * 1000,
                    )
                else:
                    logger.info(
                        "%s() waited for %s for %d ms; held for %d ms",
                        func.__qualname__, lock.key, (held_since - asked) * 1000, (now - held_since) * 1000,
                    )

        return cast(F, wrapper)

    return decorator
