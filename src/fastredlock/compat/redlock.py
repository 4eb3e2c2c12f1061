"""Drop-in replacement for ``redlock`` by glasslion (``pip install redlock``, module ``redlock``).

Change ``from redlock import RedLock`` to ``from fastredlock.compat.redlock import RedLock``::

    with RedLock("distributed_lock", connection_details=[{"host": "localhost", "port": 6379}]):
        do_something()

    lock = RedLock("distributed_lock", ttl=1000)     # ttl in ms; default 100 000
    if lock.acquire():
        ...
        lock.release()

    factory = RedLockFactory(connection_details=[{"host": "localhost"}])
    with factory.create_lock("distributed_lock"):
        ...

Same as redlock 1.2.0: the API (``RedLock(resource, connection_details=None, retry_times=3,
retry_delay=200, ttl=100000)`` with ``acquire()``, ``release()`` and the context manager;
``ReentrantRedLock``; ``RedLockFactory(connection_details).create_lock(resource, **kwargs)``;
``RedLockError``; connection details as dicts of ``redis.StrictRedis`` arguments, dicts with a
``url`` (plus more arguments), or redis-py clients; ``localhost:6379/0`` when none are given),
``retry_times`` attempts with a random sleep of up to ``retry_delay`` ms between them, the drift
allowance (``ttl * 0.01 + 2`` ms), the key (``resource`` as given), ``SET resource value NX PX
ttl`` and the release script (``GET == value`` then ``DEL``): old and new processes exclude each
other.

Differences (bugs not kept):

- A master that fails (connection refused, timeout, error reply) counts as "not acquired"; redlock
  let the redis-py exception escape from ``acquire()``, after which its ``SET``\\ s on the other
  masters were never released. Every failed attempt is released on all masters at once.
- Validity is measured on the monotonic clock from before the first write (redlock used
  ``datetime.utcnow()``), and each attempt writes to all masters at once, each bounded by a
  per-master deadline (``io_timeout``, 50 ms; :func:`fastredlock.compat.configure`) instead of
  redis-py's socket timeout (none by default).
- ``lock_key`` is a token of 128 bits from the OS CSPRNG plus a counter (redlock: ``uuid4().hex``).
- Restart-aware voting: a master up for less than the largest TTL used does not count toward the
  quorum. Turn it off with ``fastredlock.compat.configure(restart_aware=False)``.
- One server listed twice (under two names, or as two dbs) is refused with ``ValueError``: its
  votes would fake a quorum.
- ``release()`` before any ``acquire()`` does nothing (redlock raised ``AttributeError``); an
  ``acquire()`` that fails on a ``RedLock`` that holds the lock keeps that hold, so ``release()``
  still frees it (redlock forgot it, leaving the key until its TTL ran out).
- ``with RedLock(...) as lock`` binds the lock (redlock bound ``None``).
- No sleep after the last failed attempt.
- The dict holding a ``url`` is not emptied of it (redlock's ``conn.pop('url')`` broke a second use).
- ``redis_nodes`` is a list of redis-py clients for the same masters, built on first access, for
  your own use; the shim never locks through them (so they carry no ``_release_script``).
  ``acquire_node``/``release_node`` are not provided.
"""
from __future__ import annotations

import random
import time
from typing import Any, Iterable, List, Optional, Tuple

from ..sync.client import Redlock
from ..sync.lock import Lock as _Handle
from ._common import Masters, encode_key, release_token, usable_ttl

__all__ = ["RedLock", "RedLockError", "RedLockFactory", "ReentrantRedLock"]

DEFAULT_RETRY_TIMES = 3
DEFAULT_RETRY_DELAY = 200
DEFAULT_TTL = 100000
CLOCK_DRIFT_FACTOR = 0.01

_DEFAULT_CONNECTION = {"host": "localhost", "port": 6379, "db": 0}


class RedLockError(Exception):
    """Raised when a ``with`` block cannot acquire its lock."""


class RedLockFactory:
    """Builds :class:`RedLock`\\ s that share this factory's masters (and connections)."""

    def __init__(self, connection_details: Iterable[Any]) -> None:
        self._masters = Masters(connection_details)
        self.quorum = self._masters.quorum

    @property
    def redis_nodes(self) -> List[Any]:
        """redis-py clients for the masters (built on first access; not used for locking)."""
        return self._masters.redis_clients()

    def create_lock(self, resource: Any, **kwargs: Any) -> "RedLock":
        """A :class:`RedLock` on ``resource``; ``kwargs`` go to its constructor (``ttl``, ...)."""
        lock = RedLock(resource=resource, created_by_factory=True, **kwargs)
        lock._masters = self._masters
        lock.quorum = self.quorum
        lock.factory = self
        return lock


class RedLock:
    """A distributed lock on ``resource`` with the interface of :class:`threading.Lock`."""

    def __init__(
        self,
        resource: Any,
        connection_details: Optional[Iterable[Any]] = None,
        retry_times: int = DEFAULT_RETRY_TIMES,
        retry_delay: int = DEFAULT_RETRY_DELAY,
        ttl: int = DEFAULT_TTL,
        created_by_factory: bool = False,
    ) -> None:
        self.resource = resource
        self.retry_times = retry_times
        self.retry_delay = retry_delay
        self.ttl = ttl
        self._held: Optional[Tuple[Redlock, _Handle]] = None
        #: The value stored under ``resource`` by the last successful :meth:`acquire`.
        self.lock_key: Optional[str] = None
        if created_by_factory:
            self.factory: Optional[RedLockFactory] = None
            self._masters: Optional[Masters] = None  # the factory sets its own
            return
        if connection_details is None:
            connection_details = [dict(_DEFAULT_CONNECTION)]
        self._masters = Masters(connection_details)
        self.quorum = self._masters.quorum

    @property
    def redis_nodes(self) -> List[Any]:
        """redis-py clients for the masters (built on first access; not used for locking)."""
        return self._require_masters().redis_clients()

    @redis_nodes.setter
    def redis_nodes(self, nodes: Iterable[Any]) -> None:
        self._masters = Masters(nodes)
        self.quorum = self._masters.quorum

    def _require_masters(self) -> Masters:
        if self._masters is None:
            raise RedLockError("this RedLock has no masters: create it with RedLockFactory.create_lock()")
        return self._masters

    def acquire(self) -> bool:
        """Try up to ``retry_times`` times to acquire the lock for ``ttl`` ms; return whether it is held."""
        client = self._require_masters().client
        key = encode_key(self.resource)
        if not usable_ttl(client, self.ttl / 1000.0):
            return False  # redlock tried, and no attempt could ever be valid
        attempts = int(self.retry_times)
        for attempt in range(attempts):
            handle = client.lock(key, ttl=self.ttl / 1000.0)
            if handle.acquire(blocking=False):
                self._held = (client, handle)
                self.lock_key = handle.token.decode()
                return True
            if attempt + 1 < attempts:
                time.sleep(random.randint(0, self.retry_delay) / 1000.0)
        return False

    def release(self) -> None:
        """Release the lock if this object still holds it; silent if it expired or was never taken."""
        held, self._held = self._held, None
        if held is None:
            return
        client, handle = held
        release_token(client, handle.key, handle.token)

    def __enter__(self) -> "RedLock":
        if not self.acquire():
            raise RedLockError("failed to acquire lock")
        return self

    def __exit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        self.release()


class ReentrantRedLock(RedLock):
    """A :class:`RedLock` that the same object may acquire again; released by as many ``release()``\\ s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._acquired = 0

    def acquire(self) -> bool:
        """Take the lock, or count one more hold if this object has it already; return whether it is held."""
        if self._acquired:
            self._acquired += 1
            return True
        acquired = super().acquire()
        if acquired:
            self._acquired = 1
        return acquired

    def release(self) -> Any:
        """Drop one hold; release the lock on the masters when the last hold goes (``False`` if none was held)."""
        if not self._acquired:
            return False
        self._acquired -= 1
        if self._acquired:
            return True
        return super().release()
