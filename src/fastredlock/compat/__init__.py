"""Drop-in compatibility shims: change one import line, keep your code, get fastredlock underneath.

============================  ==========================================================
Library replaced              Change
============================  ==========================================================
redlock-py (SPSCommerce)      ``from fastredlock.compat.redlock_py import Redlock``
redlock (glasslion)           ``from fastredlock.compat.redlock import RedLock``
pottery (``Redlock``)        ``from fastredlock.compat.pottery import Redlock``
pottery (``AIORedlock``)     ``from fastredlock.compat.pottery import AIORedlock``
redis-py ``Lock``             ``from fastredlock.compat.redis_py import Lock``
redis-py asyncio ``Lock``     ``from fastredlock.compat.redis_py import AsyncLock``
aioredlock (asyncio)          ``from fastredlock.compat.aioredlock import Aioredlock``
python-redis-lock             ``from fastredlock.compat import redis_lock``
celery-once                   ``from fastredlock.compat.celery_once import QueueOnce``
celery-singleton              ``from fastredlock.compat.celery_singleton import Singleton``
============================  ==========================================================

Each shim writes the same keys as the library it replaces (pottery's ``redlock:`` prefix included),
(python-redis-lock's ``lock:`` key and ``lock-signal:`` wake-up list too),
with ``SET key value NX PX ttl`` (redis-py's ``Lock`` without ``timeout``: ``SET key value NX``, no
expiry, as redis-py stores it), and releases with the same owner check (``GET == value`` then
``DEL``), so processes still on the old library and processes on the shim exclude each other during
a rolling migration. (The Celery drop-ins write their originals' keys too, with the task id as
the value; see :mod:`fastredlock.compat.celery_once`.) What differs from each original (the bugs that were not kept) is listed in
each shim's module docstring (its migration notes: the import to change, every remaining
difference and why), and on the documentation's Migrating pages (``docs/migrating/<library>.md``).

All synchronous shims of a process share one :class:`fastredlock.Redlock` client per set of masters
(one connection per master, reused), built with the options of :func:`configure`; each
``aioredlock.Aioredlock`` has its own :class:`fastredlock.asyncio.Redlock` (one client per event
loop), built with the same options.
"""
from __future__ import annotations

from ._common import configure, options

__all__ = ["configure", "options"]
