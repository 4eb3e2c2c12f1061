"""Drop-in replacement for python-redis-lock (``import redis_lock``), on fastredlock.

Change ``import redis_lock`` to ``from fastredlock.compat import redis_lock``::

    from redis import StrictRedis
    from fastredlock.compat import redis_lock

    conn = StrictRedis(host="127.0.0.1", port=6379)
    with redis_lock.Lock(conn, "orders:42", expire=60, auto_renewal=True):
        ...
    lock = redis_lock.Lock(conn, "orders:42", expire=10)
    if lock.acquire(blocking=True, timeout=5):
        lock.extend(20)
        lock.release()

Same as python-redis-lock 4.0.1: ``Lock(redis_client, name, expire=None, id=None,
auto_renewal=False, strict=True, signal_expire=1000, blocking=True)``, ``acquire(blocking=True,
timeout=None)``, ``release()``, ``extend(expire=None)``, ``locked()``, ``get_owner_id()``, ``reset()``,
``id``, the context manager (``with`` acquires with the constructor's ``blocking``: with
``blocking=False`` a lock held by someone else raises ``NotAcquired`` at once), :func:`reset_all`, the exceptions (``AlreadyAcquired``, ``NotAcquired``,
``AlreadyStarted``, ``TimeoutNotUsable``, ``InvalidTimeout``, ``TimeoutTooLarge``,
``NotExpirable``, all ``RuntimeError``) and the argument checks and conversions (``int(expire)``,
``int(timeout)``, ids as ``str``); the keys: ``lock:NAME`` holds the id (``SET NX`` with the expiry),
``lock-signal:NAME`` is a list that a release pushes to (``DEL``, ``LPUSH 1``, ``PEXPIRE
signal_expire``) and that waiters ``BLPOP`` on; the log records (``redis_lock.acquire``,
``redis_lock.release``). Processes on the original and on the shim exclude each other and wake each
other. It locks the one server ``redis_client`` points at (its address, db and credentials are read)
through fastredlock's engine (:class:`fastredlock.Redlock` with that one master, shared per process,
see :func:`fastredlock.compat.configure`); blocking waits (``BLPOP``), ``locked()``,
``get_owner_id()``, ``reset()``, :func:`reset_all` and ``extend()`` by an instance that does not
hold the lock itself go through ``redis_client``.

The signal: the release is fastredlock's owner-checked release with ``signal=`` (see
:meth:`fastredlock.Lock.release`): one script that deletes the key only if it holds this id and, in
the same script, replaces ``lock-signal:NAME`` by a list of one element lasting ``signal_expire``
ms, as the original's release script did. A waiter that found the key taken either finds that
element or is woken by it; a release that is not confirmed (``NotAcquired``) pushes nothing.

Differences (bugs not kept):

- A lock without ``expire`` is not stored forever: it gets a TTL of :data:`NO_EXPIRE_TTL` seconds
  that fastredlock's watchdog renews while it is held (the original: no TTL at all, so a process
  that died left the name locked for good). ``extend()`` of such a lock by the instance that holds
  it still raises ``NotExpirable``; an instance of another id-sharing process cannot tell it has
  a TTL and extends it (until the holder's watchdog resets it). In a mixed fleet, if a shim process
  holding such a lock dies, its key expires without a signal: the shim's waiters try again within
  :data:`NO_EXPIRE_TTL` seconds, the original's waiters without ``timeout`` or ``expire`` wait for
  the next release's signal (they blocked for good on the original's own dead holders).
- ``auto_renewal``: fastredlock's watchdog (one thread per process for all locks, renewing every
  third of ``expire``) instead of a thread per lock every two thirds of it. ``_lock_renewal_thread``
  stays ``None`` and the renewal logs nothing; ``_lock_renewal_interval`` is kept for reading. A
  lock that is garbage collected while held stops being renewed, as in the original, and its key
  expires. ``AlreadyStarted`` is never raised (there is no thread per lock to start twice).
- ``acquire(timeout=t)`` gives up ``t`` seconds after it started (the original restarted its wait
  of ``t`` seconds after every wake-up that did not get it the lock).
- ``acquire()`` checks "already acquired" (the key holds this id) only after ``SET NX`` failed,
  instead of a ``GET`` before every attempt: one round trip instead of two when the lock is free.
- Each ``SET`` and owner-checked delete is bounded by fastredlock's ``io_timeout`` (50 ms) rather
  than the client's socket timeout; a server that fails there raises the redis-py error
  (``ConnectionError``, ``TimeoutError``) the original would have raised, except in a blocking
  ``acquire``, which tries again when the server was only slow (it waited in the original).
- Default ids are fastredlock's tokens (128 random bits drawn once per process from the OS CSPRNG,
  plus a counter, in hex) instead of 18 random bytes in base64 per lock: as unique, without a
  system call per lock.
- ``strict=False`` still needs a redis-py client (or one with its ``connection_pool``) once the lock
  is used: fastredlock reads where the server is from it.
"""
from __future__ import annotations

import logging
import time
import weakref
from base64 import b64encode
from time import monotonic
from typing import Any, Optional, Union

from redis import StrictRedis

from ..engine.tokens import new_token
from ..errors import LockError
from ._common import Masters, encode_key, error_outcomes, pool_state, redis_errors, release_token

__all__ = [
    "NO_EXPIRE_TTL",
    "AlreadyAcquired",
    "AlreadyStarted",
    "InvalidTimeout",
    "Lock",
    "NotAcquired",
    "NotExpirable",
    "TimeoutNotUsable",
    "TimeoutTooLarge",
    "reset_all",
]

#: Seconds of TTL given to a lock made without ``expire``, renewed by the watchdog while it is held.
NO_EXPIRE_TTL = 10.0

# The original's loggers, so handlers and levels set for them still apply.
logger_for_acquire = logging.getLogger("redis_lock.acquire")
logger_for_release = logging.getLogger("redis_lock.release")

# EXTEND_BY_ID: prolong a lock held with an id, by an instance that does not hold it itself.
# KEYS[1]  the lock key; ARGV[1] the id; ARGV[2] the new TTL in seconds
# Returns  0 if extended, 1 if the key does not hold the id, 2 if it has no TTL.
_EXTEND_BY_ID = """\
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 1
elseif redis.call('ttl', KEYS[1]) < 0 then
    return 2
end
redis.call('expire', KEYS[1], ARGV[2])
return 0
"""

# RESET: delete a lock whoever holds it, and wake its waiters.
# KEYS[1]  the lock key; KEYS[2] the signal list; ARGV[1] the signal's lifetime in ms
# Returns  the number of keys deleted (0 or 1).
_RESET = """\
redis.call('del', KEYS[2])
redis.call('lpush', KEYS[2], 1)
redis.call('pexpire', KEYS[2], ARGV[1])
return redis.call('del', KEYS[1])
"""

# RESET_ALL: delete every lock:* key and wake each one's waiters (signal for 1 s, as the original).
# Returns  the number of locks deleted.
_RESET_ALL = """\
local locks = redis.call('keys', 'lock:*')
for _, key in ipairs(locks) do
    local signal = 'lock-signal:' .. string.sub(key, 6)
    redis.call('del', signal)
    redis.call('lpush', signal, 1)
    redis.call('expire', signal, 1)
    redis.call('del', key)
end
return #locks
"""


class AlreadyAcquired(RuntimeError):
    """``acquire()`` while the key already holds this lock's id."""


class NotAcquired(RuntimeError):
    """``release()`` or ``extend()`` of a lock whose key does not hold this id (expired, or never taken)."""


class AlreadyStarted(RuntimeError):
    """Kept for ``except`` clauses: the original raised it when a renewal thread was started twice."""


class TimeoutNotUsable(RuntimeError):
    """``acquire(blocking=False, timeout=...)``."""


class InvalidTimeout(RuntimeError):
    """``acquire(timeout=...)`` with a negative timeout."""


class TimeoutTooLarge(RuntimeError):
    """``acquire(timeout=...)`` longer than the lock's ``expire`` (without ``auto_renewal``)."""


class NotExpirable(RuntimeError):
    """``extend()`` of a lock that has no expiry."""


def _masters(redis_client: Any) -> Masters:
    """The masters of ``redis_client`` (a lock is made per use: read once per connection pool)."""
    try:
        return pool_state(redis_client).masters
    except AttributeError:  # not a redis-py client (strict=False): read each time
        return Masters([redis_client])


def _check_expire(expire: Any) -> Optional[int]:
    """``expire`` as the original read it: whole seconds, ``None`` for none (``0``, ``None``)."""
    if not expire:
        return None
    expire = int(expire)
    if expire < 0:
        raise ValueError("A negative expire is not acceptable.")
    return expire


def _raise_if_failed(outcomes: Any) -> None:
    """Raise the redis-py error of a server that failed (no answer, or an error reply)."""
    failed = redis_errors(error_outcomes(outcomes))
    if failed:
        raise failed[0]


def _slow_server_pause(dlm: Any, outcomes: Any) -> Optional[float]:
    """Seconds to wait before trying again if the server was only slow (it did not answer within
    ``io_timeout``, or it cools down after that), else None (it answered, or refused to connect).

    A blocking ``acquire`` of the original waited for a slow server's answer (redis-py's default
    socket timeout is none); the shim tries again instead of raising ``TimeoutError``.
    """
    outcome = outcomes[0].outcome if outcomes else None
    if outcome == "timeout":
        return 0.0
    if outcome == "cooling down":
        (stats,) = dlm.stats()
        if (stats.last_failure or "").startswith("timeout"):
            return stats.cooling_down
    return None


def _stop_renewing(dlm: Any, handle: Any) -> None:
    """The lock object was garbage collected while held: stop renewing it (its key expires)."""
    dlm.executor.unwatch(handle)


class Lock:
    """A lock on ``lock:NAME`` of the server ``redis_client`` points at; see the module docstring.

    :param redis_client: a ``redis.StrictRedis`` (``redis.Redis``) client; ``strict=False``
        accepts another object until the lock is used.
    :param name: the lock's name (the key is ``lock:`` + name).
    :param expire: seconds the lock lives (whole seconds); ``None``: until released.
    :param id: the value stored (``str``, or ``bytes`` decoded as ASCII, else base64); default: a
        fresh fastredlock token (see the module docstring). An instance given the id of a holder may extend and release it.
    :param auto_renewal: keep renewing the lock while it is held (needs ``expire``).
    :param signal_expire: milliseconds the release's wake-up signal lasts.
    :param blocking: whether ``with`` waits for the lock (default) or makes one attempt and raises
        ``NotAcquired`` if it is taken.
    """

    #: Whether ``with`` waits for the lock (the constructor's ``blocking``).
    blocking: bool = True

    def __init__(
        self,
        redis_client: Any,
        name: str,
        expire: Optional[Union[int, float, str]] = None,
        id: Optional[Union[str, bytes]] = None,
        auto_renewal: bool = False,
        strict: bool = True,
        signal_expire: int = 1000,
        blocking: bool = True,
    ) -> None:
        if strict and not isinstance(redis_client, StrictRedis):
            raise ValueError(
                "redis_client must be instance of StrictRedis. Use strict=False if you know what you're doing."
            )
        if auto_renewal and expire is None:
            raise ValueError("Expire may not be None when auto_renewal is set")
        self._client = redis_client
        self._expire = _check_expire(expire)
        self._signal_expire = signal_expire
        if id is None:
            self._id = new_token().decode("ascii")
        elif isinstance(id, bytes):
            try:
                self._id = id.decode("ascii")
            except UnicodeDecodeError:
                self._id = b64encode(id).decode("ascii")
        elif isinstance(id, str):
            self._id = id
        else:
            raise TypeError(f"Incorrect type for `id`. Must be bytes/str not {type(id)}.")
        self._name = "lock:" + name
        self._signal = "lock-signal:" + name
        #: Seconds between renewals in the original (two thirds of ``expire``); informational here.
        self._lock_renewal_interval: Optional[float] = (
            float(self._expire) * 2 / 3 if auto_renewal and self._expire is not None else None)
        #: Always ``None``: fastredlock's watchdog thread renews (see the module docstring).
        self._lock_renewal_thread = None
        self._key = encode_key(self._name)
        self._handle: Any = None  # the fastredlock handle of this object's current acquisition
        self._renewal: Optional[weakref.finalize] = None  # stops the renewal if this object is collected
        self.blocking = blocking

    # --- state ----------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        """The value this lock stores in its key."""
        return self._id

    @property
    def _held(self) -> bool:
        return self.id == self.get_owner_id()

    def get_owner_id(self) -> Optional[str]:
        """The id stored in the lock's key (whoever holds it), or ``None``."""
        owner_id = self._client.get(self._name)
        if isinstance(owner_id, bytes):
            owner_id = owner_id.decode("ascii", "replace")
        return owner_id

    def locked(self) -> bool:
        """Whether anyone holds the lock (the key exists, whatever its id)."""
        return self._client.exists(self._name) == 1

    # --- acquire --------------------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: Optional[Union[int, float, str]] = None) -> bool:
        """Take the lock; return whether it is held.

        ``blocking=False``: one attempt. Else wait until it is released (woken by its release's
        signal, or at the end of each wait of ``timeout``/``expire`` seconds), for at most
        ``timeout`` whole seconds when given (``0``/``None``: no limit).
        """
        logger_for_acquire.debug("Acquiring Lock(%r) ...", self._name)
        if not blocking and timeout is not None:
            raise TimeoutNotUsable("Timeout cannot be used if blocking=False")
        if timeout:
            timeout = int(timeout)
            if timeout < 0:
                raise InvalidTimeout(f"Timeout ({timeout}) cannot be less than or equal to 0")
            if self._expire and self._lock_renewal_interval is None and timeout > self._expire:
                raise TimeoutTooLarge(f"Timeout ({timeout}) cannot be greater than expire ({self._expire})")
        handle = self._handle
        if handle is not None and handle.locked():
            raise AlreadyAcquired("Already acquired from this Lock instance.")
        dlm = _masters(self._client).client
        expire = self._expire
        handle = dlm.lock(self._key, expire or NO_EXPIRE_TTL,
                          auto_extend=expire is None or self._lock_renewal_interval is not None)
        deadline = monotonic() + timeout if timeout else None
        checked = False
        while not handle.acquire(False, None, self._id):
            outcomes = handle.outcomes
            if blocking and (deadline is None or monotonic() < deadline):
                pause = _slow_server_pause(dlm, outcomes)
                if pause is not None:  # no answer in time (its SET, if it lands, is released)
                    time.sleep(pause)
                    continue
            _raise_if_failed(outcomes)
            if not checked:
                checked = True
                if self._held:
                    raise AlreadyAcquired("Already acquired from this Lock instance.")
            if not blocking:
                logger_for_acquire.warning("Failed to acquire Lock(%r).", self._name)
                return False
            wait = float(expire or NO_EXPIRE_TTL)
            if deadline is not None:
                left = deadline - monotonic()
                if left <= 0:
                    return False
                wait = min(wait, left)
            self._client.blpop(self._signal, max(wait, 0.001))
        self._handle = handle
        if handle.auto_extend:
            self._renewal = weakref.finalize(self, _stop_renewing, dlm, handle)
        logger_for_acquire.info("Acquired Lock(%r).", self._name)
        return True

    # --- release, extend, reset -----------------------------------------------------------------
    def release(self) -> None:
        """Delete the key if it holds this lock's id, and wake the waiters.

        ``NotAcquired`` if it does not (never taken, expired, reset, or taken by another id).
        """
        logger_for_release.debug("Releasing Lock(%r).", self._name)
        handle, self._handle = self._handle, None
        if self._renewal is not None:
            self._renewal.detach()
            self._renewal = None
        signal = self._wake_signal()
        if handle is not None and handle.token is not None:
            try:
                handle.release(signal=signal)
                released = True
            except LockError as error:
                _raise_if_failed(error.outcomes)
                # held past its validity (LockLostError), the key may still have been ours
                released = any(o.outcome == "ok" for o in error.outcomes)
        else:  # an id given to this instance, or nothing held: released by the id, if it holds
            released, outcomes = release_token(_masters(self._client).client, self._key, self._id, signal)
            if not released:
                _raise_if_failed(outcomes)
        if not released:
            raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")

    def _wake_signal(self) -> Any:
        """What a release pushes, where it deletes: ``(lock-signal:NAME, signal_expire ms)``."""
        return self._signal, int(self._signal_expire)

    def extend(self, expire: Optional[Union[int, float, str]] = None) -> None:
        """Reset the lock's expiry to ``expire`` seconds (default: the constructor's).

        ``NotAcquired`` if the key does not hold this id, ``NotExpirable`` if the lock has no
        expiry, ``TypeError`` if neither ``expire`` nor the constructor's is given.
        """
        if expire:
            expire = int(expire)
            if expire < 0:
                raise ValueError("A negative expire is not acceptable.")
        elif self._expire is not None:
            expire = self._expire
        else:
            raise TypeError(
                "To extend a lock 'expire' must be provided as an argument to extend() method or at initialization time."
            )
        handle = self._handle
        if handle is not None and handle.token is not None:
            if self._expire is None:
                raise NotExpirable(f"Lock {self._name} has no assigned expiration time")
            try:
                handle.extend(float(expire))
            except LockError as error:
                self._handle = None
                _raise_if_failed(error.outcomes)
                raise NotAcquired(f"Lock {self._name} is not acquired or it already expired.") from None
            return
        answer = self._client.eval(_EXTEND_BY_ID, 1, self._name, self._id, expire)
        if answer == 1:
            raise NotAcquired(f"Lock {self._name} is not acquired or it already expired.")
        if answer == 2:
            raise NotExpirable(f"Lock {self._name} has no assigned expiration time")

    def reset(self) -> None:
        """Delete the lock whoever holds it, and wake its waiters. Use with care."""
        self._client.eval(_RESET, 2, self._name, self._signal, self._signal_expire)

    # --- context manager ------------------------------------------------------------------------
    def __enter__(self) -> "Lock":
        if not self.acquire(blocking=self.blocking):
            if self.blocking:
                raise AssertionError(f"Lock({self._name}) wasn't acquired, but blocking=True was used!")
            raise NotAcquired(f"Lock({self._name}) is not acquired or it already expired.")
        return self

    def __exit__(self, exc_type: object = None, exc_value: object = None, traceback: object = None) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self._name!r} id={self._id!r} expire={self._expire!r}>"


def reset_all(redis_client: Any) -> None:
    """Delete every ``lock:*`` key of the server ``redis_client`` points at, and wake their waiters.
    Use with care (after a crash)."""
    redis_client.eval(_RESET_ALL, 0)
