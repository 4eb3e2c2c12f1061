"""Drop-in replacement for redlock-py (SPSCommerce, ``pip install redlock-py``, module ``redlock``).

Change ``from redlock import Redlock`` to ``from fastredlock.compat.redlock_py import Redlock``::

    dlm = Redlock([{"host": "localhost", "port": 6379, "db": 0}], retry_count=3, retry_delay=0.2)
    my_lock = dlm.lock("my_resource_name", 1000)    # ttl in ms (an int); a Lock or False
    if my_lock:
        ...                                          # my_lock.validity: ms you can rely on
        dlm.unlock(my_lock)

Same as redlock-py 1.0.8: the API (``Redlock(connection_list, retry_count=None,
retry_delay=None)``; entries are dicts of ``redis.StrictRedis`` arguments, URLs or redis-py clients;
``lock(resource, ttl)`` returns ``Lock(validity, resource, key)`` or ``False``; ``unlock(lock)``;
``MultipleRedlockException``, ``CannotObtainLock``; bad connection arguments raise ``Warning``, a
non-int ttl ``ValueError``), ``retry_count`` attempts ``retry_delay`` seconds apart, the drift
allowance (``ttl * 0.01 + 2`` ms), the key (``resource`` as given), the value (``lock.key``, which
``unlock`` accepts from any process), ``SET resource key NX PX ttl`` and the release script
(``GET == key`` then ``DEL``): old and new processes exclude each other.

Differences (bugs not kept):

- ``lock()`` never raises ``MultipleRedlockException`` while holding the lock. redlock-py raised it
  when a quorum said yes but some master failed, and the caller, left without the ``Lock``, could
  not release it until its TTL ran out. The shim returns the ``Lock`` and logs the failed masters.
- Validity is measured on the monotonic clock, from before the first write (redlock-py used
  ``time.time()``, which an NTP step can move), and the ``SET`` goes to all masters at once, each
  bounded by a per-master deadline (``io_timeout``, 50 ms; see :func:`fastredlock.compat.configure`)
  instead of redis-py's socket timeout (none by default: one hung master hung ``lock()``).
- ``lock.key`` is a token of 128 bits from the OS CSPRNG plus a counter, as ``bytes`` (redlock-py drew
  22 characters from ``random``, a predictable generator whose state a forked child shares).
- Restart-aware voting: a master up for less than the largest TTL used does not count toward the
  quorum (it may have forgotten locks it held before a restart). Turn it off with
  ``fastredlock.compat.configure(restart_aware=False)`` (services that hide ``INFO``, fresh test servers).
- One server listed twice (under two names, or as two dbs) is refused (``Warning``, as for any bad
  connection argument): its votes would fake a quorum.
- No sleep after the last failed attempt; a ttl too small to ever be valid (2 ms or less) returns
  ``False`` at once instead of after ``retry_count`` attempts.
- ``unlock()`` releases on all masters at once. As in redlock-py's code, it raises neither when the
  lock had expired nor when a master fails (those are logged); its README promised a
  ``MultipleRedlockException`` that the code never raised.
- ``servers`` is a list of redis-py clients for the same masters, built on first access, for your
  own use; the shim never locks through them. The helper methods ``lock_instance``,
  ``unlock_instance`` and ``get_unique_id`` are not provided.
"""
from __future__ import annotations

import logging
import math
import time
from collections import namedtuple
from typing import Any, Iterable, List, Union

from ._common import Masters, encode_key, error_outcomes, release_token, usable_ttl

__all__ = ["CannotObtainLock", "Lock", "MultipleRedlockException", "Redlock"]

log = logging.getLogger(__name__)

#: What :meth:`Redlock.lock` returns: ``validity`` (ms, an int), ``resource`` (as given), ``key``
#: (the value stored under ``resource``, bytes).
Lock = namedtuple("Lock", ("validity", "resource", "key"))


class CannotObtainLock(Exception):
    """Raised by redlock-py when fewer masters than a quorum could be set up (kept for imports)."""


class MultipleRedlockException(Exception):
    """Several errors from the masters, in ``errors``; its text joins theirs with `` :: ``."""

    def __init__(self, errors: Iterable[BaseException], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.errors = list(errors)

    def __str__(self) -> str:
        return " :: ".join(str(error) for error in self.errors)

    __repr__ = __str__


class Redlock:
    """A lock manager over the masters in ``connection_list`` (dicts, URLs or redis-py clients)."""

    default_retry_count = 3
    default_retry_delay = 0.2
    clock_drift_factor = 0.01

    def __init__(self, connection_list: Iterable[Any], retry_count: Any = None, retry_delay: Any = None) -> None:
        try:
            self._masters = Masters(connection_list)
        except Exception as exc:
            raise Warning(str(exc)) from exc
        self.quorum = self._masters.quorum
        self.retry_count = retry_count or self.default_retry_count
        self.retry_delay = retry_delay or self.default_retry_delay

    @property
    def servers(self) -> List[Any]:
        """redis-py clients for the masters (built on first access; not used for locking)."""
        return self._masters.redis_clients()

    def lock(self, resource: Any, ttl: int) -> Union[Lock, bool]:
        """Acquire ``resource`` for ``ttl`` milliseconds; return a :data:`Lock`, or ``False``."""
        if not isinstance(ttl, int):
            raise ValueError(f"ttl {ttl} is not an integer")
        key = encode_key(resource)
        client = self._masters.client
        if not usable_ttl(client, ttl / 1000.0):
            return False
        attempts = max(0, math.ceil(self.retry_count))  # redlock-py: while retry < retry_count
        for attempt in range(attempts):
            handle = client.lock(key, ttl=ttl / 1000.0)
            acquired = handle.acquire(blocking=False)
            failed = error_outcomes(handle.outcomes)
            if failed:
                log.warning("redlock: masters failed while locking %r: %s", resource, ", ".join(map(str, failed)))
            if acquired:
                return Lock(int(handle.validity * 1000), resource, handle.token)
            if attempt + 1 < attempts:
                time.sleep(self.retry_delay)
        return False

    def unlock(self, lock: Lock) -> None:
        """Release ``lock`` (any ``Lock(validity, resource, key)``) on every master; never raises
        because the lock had expired or a master failed."""
        _released, outcomes = release_token(self._masters.client, encode_key(lock.resource), lock.key)
        failed = error_outcomes(outcomes)
        if failed:
            log.error("redlock: masters failed while unlocking %r: %s", lock.resource, ", ".join(map(str, failed)))
