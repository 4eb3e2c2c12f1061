"""Drop-in replacement for aioredlock 0.7.3 (``pip install aioredlock``, module ``aioredlock``).

Change ``from aioredlock import ...`` to ``from fastredlock.compat.aioredlock import ...``::

    lock_manager = Aioredlock([{"host": "localhost", "port": 6379}, ("localhost", 6380)])
    try:
        async with await lock_manager.lock("resource_name", lock_timeout=10) as lock:
            assert lock.valid
            assert await lock_manager.is_locked("resource_name")
            await lock_manager.extend(lock)              # or: await lock.extend()
    except LockAcquiringError:
        ...                                              # someone else holds it
    except LockRuntimeError:
        ...                                              # masters failed
    await lock_manager.destroy()

Same as aioredlock 0.7.3: the API (``Aioredlock(redis_connections=[{"host": "localhost", "port":
6379}], retry_count=3, retry_delay_min=0.1, retry_delay_max=0.3, internal_lock_timeout=10.0)`` with
its converters and ``ValueError`` checks; ``lock(resource, lock_timeout=None)`` returning a ``Lock``
(``lock_manager``, ``resource``, ``id``, ``lock_timeout``, ``valid``; ``async with``, ``extend()``,
``release()``, ``is_locked()``); ``extend(lock, lock_timeout=None)`` (``RuntimeError`` for a lock
that is not valid); ``unlock(lock)``; ``is_locked(resource_or_lock)``; ``destroy()``;
``get_active_locks()``; ``get_lock(resource, lock_identifier)``; the errors ``LockError``,
``LockAcquiringError`` (a master holds the key for someone else), ``LockRuntimeError`` (a master
failed); ``Sentinel``), masters given in every form aioredlock took: dicts (``host``, ``port``,
``db``, ``password``, ``ssl``; aioredis pool arguments such as ``minsize``/``maxsize``/``encoding``
are accepted and have no use here), ``redis://`` and ``rediss://`` URIs (``?db=``, ``?password=``,
``?ssl=true``), ``(host, port)`` tuples, Unix socket paths, ``Sentinel`` objects, aioredis 1.x
``Redis`` objects (``await aioredis.create_redis_pool(...)``) and ``ConnectionsPool`` objects (their
address, db, password and ``ssl`` are read, duck-typed: aioredis need not be installed, and the shim
does not talk through them), and ``redis.asyncio.Redis`` clients (address, db, credentials, TLS);
several dbs of one server as masters (``[{"host": h, "port": p, "db": 0}, {"host": h, "port": p,
"db": 1}]``, as aioredlock's own acceptance tests do), with a warning on this module's logger: each
db votes, so mutual exclusion holds on that server, but there is no fault tolerance;
``retry_count`` attempts with a random sleep of ``retry_delay_min``..``retry_delay_max`` seconds
between them; the drift allowance (``ttl * 0.01 + 2 ms``); a lock without ``lock_timeout`` lives
``internal_lock_timeout`` seconds and is renewed by a watchdog until it is unlocked (or lost: then
``valid`` turns ``False``); the key (``resource`` as given), the value (``lock.id``), the owner
check on release and extension (the key must hold ``lock.id``) and ``unlock`` succeeding where the
key has already expired: processes on aioredlock and on the shim exclude each other.

Differences (bugs not kept):

- Each attempt, extension and release is one round to all masters at once, each bounded by
  ``io_timeout`` (50 ms; :func:`fastredlock.compat.configure`); aioredlock used a pool per master
  and no timeout, so one hung master hung ``lock()``. Validity is measured on the monotonic clock
  from before the first write.
- ``lock.id`` is a token of 128 bits from the OS CSPRNG plus a counter (aioredlock: ``str(uuid4())``).
  ``lock(..., lock_identifier=...)`` (choose the value yourself, which also let a second ``lock()``
  with the same identifier take a lock already held) raises ``TypeError``: fastredlock always draws
  the value itself.
- ``extend()`` only prolongs a key that still holds ``lock.id``; aioredlock's extension re-created
  an expired key, so a holder that had lost the lock, and whose resource someone else had held in
  between, could take it back and believe it never lost it. A failed extension makes one round (no
  retries), releases the lock on every master and turns ``valid`` ``False``, as aioredlock's did
  after its retries.
- The watchdog renews a lock about every third of ``internal_lock_timeout`` in one round for all
  the client's locks (aioredlock: one task per lock, at 0.6 of it, keyed by resource, and a failed
  renewal was only logged at debug level until the next one); a lock it cannot renew is released and
  its ``valid`` turns ``False`` at once, with a warning logged.
- Restart-aware voting: a master up for less than the largest TTL used does not count toward the
  quorum. Turn it off with ``fastredlock.compat.configure(restart_aware=False)``.
- One server and db listed twice (under two names) is refused with ``ValueError``: the key would
  vote twice. Masters are checked when ``Aioredlock`` is built (aioredlock found a bad one at the
  first ``lock()``); an argument aioredis would have refused raises ``TypeError`` then.
- An aioredis object given as a master is read, not used: the shim opens its own connections to
  the same server (so ``destroy()`` never closes your aioredis pool, as in aioredlock). A lone
  aioredis ``RedisConnection`` (``create_redis``, not a pool) does not keep its password: give a
  master that needs one as a dict, a URI or a pool. TLS comes from ``ssl=True`` (verified against
  the system's CAs) or an ``ssl.SSLContext``; a ``Sentinel``'s ``ssl_context`` applies to the master,
  the sentinels are asked without TLS.
- ``get_lock()`` returns the smallest TTL (seconds) among a quorum of masters holding ``lock.id``
  (aioredlock required every master's TTL to be equal, so it failed when the masters' clocks of
  whole seconds differed). A lock it rebuilt can be unlocked, and extended (the manager takes it
  over by its id: :meth:`fastredlock.asyncio.Lock.adopt`).
- After ``destroy()`` the manager can be used again (it reconnects); aioredlock's had no masters
  left and failed with ``IndexError``. ``lock_manager.redis`` (aioredlock's internals) is not provided.
- ``is_locked()``, ``get_lock()``, ``Sentinel`` and a failed ``unlock()`` (to tell an expired key
  from another owner's) read the masters through ``redis.asyncio`` (redis-py), with a one-second
  timeout; ``Sentinel.get_master()`` returns a ``redis.asyncio.Redis`` client instead of aioredis's.
- Messages differ and name the masters' answers; errors raised after a round carry them in
  ``outcomes`` (:class:`fastredlock.MasterOutcome`).

A manager belongs to the event loop that first uses it, as its :class:`fastredlock.asyncio.Redlock`.
"""
from __future__ import annotations

import asyncio
import logging
import random
import re
import ssl as _ssl
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ..asyncio import Redlock as _AsyncRedlock
from ..errors import LockNotOwnedError as _NotOwned, MasterOutcome
from ..io.masters import MasterSpec, parse_master, parse_masters, shared_servers
from ..io.redact import redact, redact_settings
from ._common import encode_key, error_outcomes, one_server_message, options, usable_ttl

__all__ = [
    "AioredlockError",
    "Aioredlock",
    "Lock",
    "LockAcquiringError",
    "LockError",
    "LockRuntimeError",
    "Sentinel",
    "SentinelConfigError",
]

log = logging.getLogger(__name__)

#: Arguments of aioredis 1.x ``create_redis_pool`` that only shaped its pool or its replies; a
#: master dict may carry them, and they have no use here.
_POOL_ONLY = frozenset(
    {"minsize", "maxsize", "encoding", "timeout", "create_connection_timeout", "parser", "pool_cls",
     "connection_cls", "name", "loop"}
)
#: Seconds allowed to the reads made through redis-py (``is_locked``, ``get_lock``, ``Sentinel``).
READ_TIMEOUT = 1.0

# KEYS[1]: the lock key; ARGV[1]: the lock identifier.
# Returns the key's TTL in seconds when it holds ARGV[1]; an error reply otherwise.
_TTL_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('TTL', KEYS[1])
end
return redis.error_reply('NOTOWNER the key does not hold this lock identifier')
"""


class AioredlockError(Exception):
    """Base class of the errors of this module.

    ``outcomes``: what each master answered, for an error raised after a round (else empty).
    """

    def __init__(self, *args: Any, outcomes: Sequence[MasterOutcome] = ()) -> None:
        super().__init__(*args)
        self.outcomes: Tuple[MasterOutcome, ...] = tuple(outcomes)

    def __str__(self) -> str:
        text = super().__str__()
        if self.outcomes:
            text += "; masters: " + ", ".join(str(o) for o in self.outcomes)
        return text


class LockError(AioredlockError):
    """The lock could not be acquired, extended or released."""


class LockAcquiringError(LockError):
    """Not enough masters agreed because the key holds another lock's identifier."""


class LockRuntimeError(LockError):
    """Not enough masters agreed, and some failed (timeout, refused connection, error reply)."""


class SentinelConfigError(Exception):
    """A :class:`Sentinel` was given a configuration it cannot use."""


def _redis_asyncio() -> Any:
    try:
        import redis.asyncio as aioredis
    except ImportError as exc:  # pragma: no cover - redis-py is installed with the test extra
        raise ImportError("this operation of fastredlock.compat.aioredlock needs redis-py (pip install redis)") from exc
    return aioredis


def _tls(value: Any) -> Dict[str, Any]:
    """The master dict keys of aioredis's ``ssl`` argument (``True`` or an ``ssl.SSLContext``)."""
    if not value:
        return {}
    if isinstance(value, _ssl.SSLContext):
        return {"ssl": True, "ssl_context": value}
    return {"ssl": True}


# --- masters as aioredlock took them ---------------------------------------------------------------
def _from_dict(entry: Dict[str, Any]) -> MasterSpec:
    kwargs = dict(entry)
    tls = _tls(kwargs.pop("ssl", None))
    for key in _POOL_ONLY:
        kwargs.pop(key, None)
    allowed = {"host", "port", "db", "password", "username", "address"}
    unknown = set(kwargs) - allowed
    if unknown:
        raise TypeError(f"redis_connections: unexpected argument(s) {sorted(unknown)} in a master dict")
    address = kwargs.pop("address", None)
    kwargs.update(tls)
    if address is not None:
        return _from_plain(address, kwargs)
    kwargs.setdefault("host", "localhost")
    kwargs.setdefault("port", 6379)
    return parse_master({k: v for k, v in kwargs.items() if v is not None})


def _from_plain(address: Any, extra: Optional[Dict[str, Any]] = None) -> MasterSpec:
    """A (host, port) pair, a ``redis://`` URI or a Unix socket path, as aioredis read them."""
    extra = {k: v for k, v in (extra or {}).items() if v is not None}
    if isinstance(address, (tuple, list)):
        if len(address) != 2:
            raise ValueError(f"redis_connections: an address must be (host, port), got {address!r}")
        return parse_master({"host": address[0], "port": address[1], **extra})
    if isinstance(address, str):
        if re.match(r"^rediss?://", address):
            return _plain_url(address, extra)
        if "://" in address:
            raise ValueError(f"redis_connections: unsupported URI scheme in {address!r}")
        extra.pop("ssl", None)  # aioredis opened a Unix socket without TLS
        extra.pop("ssl_context", None)
        return parse_master({"path": address, **extra})
    raise TypeError(
        "redis_connections: a master must be a dict, a (host, port) tuple, a redis:// URI, a Unix "
        "socket path, a Sentinel, an aioredis 1.x Redis or ConnectionsPool, or a redis-py client, "
        f"not {type(address).__name__}"
    )


def _plain_url(url: str, extra: Dict[str, Any]) -> MasterSpec:
    """A URI as aioredis 1.x read it: the db in the path or ``?db=``, ``?password=``, TLS for
    ``rediss://`` or ``?ssl=true``; what only shaped its pool (``encoding``, ``timeout``...) is dropped."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    ssl_query = query.pop("ssl", None)
    tls = parts.scheme == "rediss" or (ssl_query is not None and ssl_query.lower() not in ("", "0", "false", "no"))
    db = query.pop("db", None)
    password = query.pop("password", None)
    unknown = set(query) - _POOL_ONLY
    if unknown:
        raise TypeError(f"redis_connections: unexpected URI argument(s) {sorted(unknown)} in {url!r}")
    spec = parse_master(urlunsplit(("redis", parts.netloc, parts.path, "", "")))
    fields: Dict[str, Any] = {"host": spec.host, "port": spec.port, "db": spec.db}
    if spec.username is not None:
        fields["username"] = spec.username
    if spec.password is not None:
        fields["password"] = spec.password
    if db is not None:
        fields["db"] = int(db)
    if password is not None:
        fields["password"] = password
    if tls:
        fields["ssl"] = True
    fields.update(extra)
    return parse_master(fields)


def _is_aioredis(entry: Any) -> bool:
    """Whether ``entry`` looks like an aioredis 1.x ``Redis``, ``ConnectionsPool`` or
    ``RedisConnection`` (read duck-typed: aioredis need not be installed)."""
    return hasattr(entry, "address") and hasattr(entry, "db") and not hasattr(entry, "connection_pool")


def _from_aioredis(entry: Any) -> MasterSpec:
    """The master an aioredis 1.x object talks to: its ``address`` (``(host, port)`` or a socket
    path), ``db``, and the password and ``ssl`` a ``ConnectionsPool`` keeps (a ``Redis`` made by
    ``create_redis_pool`` holds one as ``connection``). A lone ``RedisConnection`` (``create_redis``)
    does not keep its password: give such a master as a dict or URI if it needs one."""
    inner = getattr(entry, "connection", None)
    source = inner if inner is not None and hasattr(inner, "address") else entry
    address = source.address
    if address is None:
        raise ValueError(f"redis_connections: {type(entry).__name__} has no address (is it closed?)")
    extra: Dict[str, Any] = {"db": int(source.db or 0)}
    password = getattr(source, "_password", None)
    if password is not None:
        extra["password"] = password.decode() if isinstance(password, bytes) else password
    extra.update(_tls(getattr(source, "_ssl", None)))
    return _from_plain(tuple(address) if isinstance(address, list) else address, extra)


def _to_spec(entry: Any) -> Any:
    """One entry of ``redis_connections`` as a :class:`MasterSpec`, or the :class:`Sentinel` itself."""
    if isinstance(entry, Sentinel):
        return entry
    if isinstance(entry, dict):
        return _from_dict(entry)
    if hasattr(entry, "connection_pool") and hasattr(entry.connection_pool, "connection_kwargs"):
        return parse_master(entry)  # a redis-py client (sync or asyncio): address, credentials, TLS
    if _is_aioredis(entry):
        return _from_aioredis(entry)
    return _from_plain(entry)


def _reader_tls(spec: MasterSpec) -> Dict[str, Any]:
    """redis-py's TLS arguments for a reader of a TLS master (its settings; a ready
    ``ssl.SSLContext`` cannot be handed to redis-py: the readers then verify with the system's CAs)."""
    tls = spec.tls
    if tls is None:
        return {}
    kwargs: Dict[str, Any] = {"ssl": True, "ssl_cert_reqs": tls.cert_reqs}
    for field in ("ca_certs", "certfile", "keyfile", "check_hostname"):
        value = getattr(tls, field)
        if value is not None:
            kwargs["ssl_" + field] = value
    return kwargs


def _check_masters(specs: Sequence[MasterSpec]) -> Tuple[MasterSpec, ...]:
    """Refuse one server and db listed twice; accept several dbs of one server, with a warning on
    this module's logger (aioredlock's acceptance tests and many CI setups use two dbs of one server)."""
    checked = parse_masters(specs, same_server_ok=True)
    for group in shared_servers(checked):
        log.warning(one_server_message(group))
    return checked


def _clean(connections: Any) -> Any:
    """``redis_connections`` for a repr, passwords hidden (the package's one rule, io.redact)."""
    if isinstance(connections, dict):
        return redact_settings(connections)
    if isinstance(connections, list):
        return [_clean(c) for c in connections]
    if isinstance(connections, str):
        return redact(connections)
    return connections


# --- Sentinel -------------------------------------------------------------------------------------
class Sentinel:
    """A master found through Redis Sentinel, usable as an entry of ``redis_connections``.

    ``connection`` is a dict (``host``, ``port`` (26379), ``password``, ``db``, ``master``), a URI
    (``redis://host:26379/0?master=mymaster``), a ``(host, port)`` tuple or a list of them;
    ``master``, ``password`` (the master's), ``db`` and ``ssl_context`` override what it says. The
    master's address is asked of the sentinels when the manager first connects.
    """

    def __init__(self, connection: Any, master: Optional[str] = None, password: Optional[str] = None,
                 db: Optional[int] = None, ssl_context: Any = None) -> None:
        kwargs: Dict[str, Any] = {}
        if isinstance(connection, dict):
            kwargs.update(connection)
            if "host" not in kwargs:
                raise SentinelConfigError("a sentinel dict needs a 'host'")
            address: List[Tuple[str, int]] = [(kwargs.pop("host"), int(kwargs.pop("port", 26379)))]
        elif isinstance(connection, str) and re.match(r"^rediss?://.*:\d+/\d?\??.*$", connection):
            url = urlsplit(connection)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            address = [(url.hostname or "localhost", url.port or 6379)]
            if url.scheme == "rediss":
                kwargs["ssl"] = True
            dbnum = url.path.strip("/")
            kwargs["db"] = int(dbnum) if dbnum.isdigit() else 0
            kwargs["password"] = url.password
            kwargs.update(query)
        elif isinstance(connection, tuple):
            address = [connection]
        elif isinstance(connection, list):
            address = list(connection)
        else:
            raise SentinelConfigError("Invalid Sentinel Configuration")
        if db is not None:
            kwargs["db"] = db
        if password is not None:
            kwargs["password"] = password
        if ssl_context is not None and ssl_context is not False:
            kwargs["ssl"] = ssl_context
        self.master: Optional[str] = kwargs.pop("master", None)
        if master:
            self.master = master
        if self.master is None:
            raise SentinelConfigError("Master name required for sentinel to be configured")
        #: TLS to the master (the sentinels are asked without it).
        self._tls = _tls(kwargs.pop("ssl", None))
        for key in _POOL_ONLY:
            kwargs.pop(key, None)
        unknown = set(kwargs) - {"db", "password", "username"}
        if unknown:
            raise SentinelConfigError(f"unexpected Sentinel argument(s) {sorted(unknown)}")
        self.connection: List[Tuple[str, int]] = address
        self.redis_kwargs: Dict[str, Any] = {k: v for k, v in kwargs.items() if v is not None}
        if "db" in self.redis_kwargs:
            self.redis_kwargs["db"] = int(self.redis_kwargs["db"])

    def __repr__(self) -> str:
        return redact(f"Sentinel(connection={_clean(self.connection)!r}, master={self.master!r})")

    async def get_sentinel(self) -> Any:
        """A ``redis.asyncio.sentinel.Sentinel`` over these sentinels (aioredlock: aioredis's)."""
        aioredis = _redis_asyncio()
        return aioredis.sentinel.Sentinel(
            self.connection, socket_timeout=READ_TIMEOUT, socket_connect_timeout=READ_TIMEOUT, **self.redis_kwargs
        )

    async def get_master_address(self) -> Tuple[str, int]:
        """The master's ``(host, port)`` as the sentinels report it now."""
        sentinel = await self.get_sentinel()
        try:
            host, port = await sentinel.discover_master(self.master)
        except Exception as exc:
            raise LockRuntimeError(f"no sentinel of {self.connection!r} knows master {self.master!r}") from exc
        finally:
            for node in sentinel.sentinels:
                await _close(node)
        return host, int(port)

    async def get_master(self) -> Any:
        """A ``redis.asyncio.Redis`` client for the master (aioredlock returned an aioredis one)."""
        sentinel = await self.get_sentinel()
        return sentinel.master_for(self.master)

    async def spec(self) -> MasterSpec:
        """The master as fastredlock reads it: the sentinels' address, this object's db and password."""
        host, port = await self.get_master_address()
        return parse_master({"host": host, "port": port, **self.redis_kwargs, **self._tls})


async def _close(client: Any) -> None:
    closer = getattr(client, "aclose", None) or client.close
    await closer()


# --- Lock -----------------------------------------------------------------------------------------
@dataclass
class Lock:
    """A lock taken by :meth:`Aioredlock.lock`: ``resource``, its value ``id``, the ``lock_timeout``
    asked (``None``: renewed by the watchdog) and whether it is still ``valid`` (not unlocked, not lost)."""

    lock_manager: Any
    resource: Any
    id: Any
    lock_timeout: Optional[float] = 10.0
    valid: bool = False

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.lock_manager.unlock(self)

    async def extend(self) -> None:
        """Reset the lock's time to live (see :meth:`Aioredlock.extend`)."""
        await self.lock_manager.extend(self)

    async def release(self) -> None:
        """Release the lock (see :meth:`Aioredlock.unlock`)."""
        await self.lock_manager.unlock(self)

    async def is_locked(self) -> bool:
        """Whether a quorum of masters holds the resource, for anyone (see :meth:`Aioredlock.is_locked`)."""
        return await self.lock_manager.is_locked(self)


# --- the manager ----------------------------------------------------------------------------------
class Aioredlock:
    """A lock manager over the masters in ``redis_connections``; see the module docstring."""

    def __init__(
        self,
        redis_connections: Iterable[Any] = ({"host": "localhost", "port": 6379},),
        retry_count: Any = 3,
        retry_delay_min: Any = 0.1,
        retry_delay_max: Any = 0.3,
        internal_lock_timeout: Any = 10.0,
    ) -> None:
        if isinstance(redis_connections, (str, bytes, dict, Sentinel)):
            raise TypeError("redis_connections: expected a list of masters, not a single one")
        self.redis_connections: List[Any] = list(redis_connections)
        self.retry_count = int(retry_count)
        self.retry_delay_min = float(retry_delay_min)
        self.retry_delay_max = float(retry_delay_max)
        self.internal_lock_timeout = float(internal_lock_timeout)
        if self.retry_count < 1:
            raise ValueError("Retry count must be greater or equal 1.")
        if self.retry_delay_min <= 0 or self.retry_delay_max <= 0:
            raise ValueError("Retry delay must be greater than 0 seconds.")
        if self.internal_lock_timeout <= 0:
            raise ValueError("Internal lock_timeout must be greater than 0 seconds.")
        self._entries = [_to_spec(entry) for entry in self.redis_connections]
        if not self._entries:
            raise ValueError("redis_connections: at least one master is required")
        plain = [e for e in self._entries if isinstance(e, MasterSpec)]
        self._warned = len(plain) == len(self._entries)  # (sentinels' masters are checked when asked)
        if plain:
            _check_masters(plain)
        self.quorum = len(self._entries) // 2 + 1
        self._dlm: Optional[_AsyncRedlock] = None
        self._specs: Tuple[MasterSpec, ...] = ()
        self._readers: Optional[List[Any]] = None
        self._locks: Dict[Any, Lock] = {}

    def __repr__(self) -> str:
        return (
            f"Aioredlock(redis_connections={redact(repr(_clean(self.redis_connections)))}, retry_count={self.retry_count}, "
            f"retry_delay_min={self.retry_delay_min}, retry_delay_max={self.retry_delay_max}, "
            f"internal_lock_timeout={self.internal_lock_timeout})"
        )

    async def _client(self) -> _AsyncRedlock:
        """The fastredlock client, built on first use (after asking any sentinels for their master)."""
        if self._dlm is None:
            specs = [await e.spec() if isinstance(e, Sentinel) else e for e in self._entries]
            if self._dlm is None:  # another task may have built it while the sentinels answered
                if self._warned:
                    self._specs = parse_masters(specs, same_server_ok=True)
                else:
                    self._specs = _check_masters(specs)
                    self._warned = True
                # The shim makes its own attempts (aioredlock's retry rules).
                self._dlm = _AsyncRedlock(self._specs, retry_count=0, retry_delay=0.0, retry_jitter=0.0,
                                          same_server_ok=True, **options())
        return self._dlm

    async def _read_clients(self) -> List[Any]:
        """redis-py asyncio clients for the masters (for reads only; never to lock)."""
        await self._client()
        if self._readers is None:
            aioredis = _redis_asyncio()
            self._readers = [
                aioredis.Redis(
                    host=s.host or "localhost", port=s.port or 6379, unix_socket_path=s.path, db=s.db,
                    username=s.username, password=s.password, socket_timeout=READ_TIMEOUT,
                    socket_connect_timeout=READ_TIMEOUT, **_reader_tls(s),
                )
                for s in self._specs
            ]
        return self._readers

    # --- lock ---------------------------------------------------------------------------------
    async def lock(self, resource: Any, lock_timeout: Optional[float] = None, lock_identifier: Any = None) -> Lock:
        """Acquire ``resource`` for ``lock_timeout`` seconds (``None``: ``internal_lock_timeout``,
        renewed by the watchdog until unlocked); return a valid :class:`Lock`.

        Makes ``retry_count`` attempts; raises :class:`LockAcquiringError` if the key held another
        lock's identifier, :class:`LockRuntimeError` if masters failed, :class:`LockError` otherwise
        (such as a lease too short to be valid). No key is left behind when it raises or is cancelled.
        """
        if lock_identifier is not None:
            raise TypeError(
                "lock_identifier is not supported by fastredlock.compat.aioredlock: the lock's value is "
                "always drawn by fastredlock (read it from lock.id)"
            )
        if lock_timeout is not None and lock_timeout <= 0:
            raise ValueError("Lock timeout must be greater than 0 seconds.")
        key = encode_key(resource)
        lease = float(lock_timeout or self.internal_lock_timeout)
        dlm = await self._client()
        if not usable_ttl(dlm, lease):
            raise LockError("Lock timeout")
        watched = lock_timeout is None
        lock = Lock(self, resource, None, lock_timeout, valid=False)

        def lost(_handle: Any) -> None:
            self._forget(lock)
            log.warning("aioredlock: the watchdog could not renew lock %r; it is lost", resource)

        handle = None
        for attempt in range(self.retry_count):
            if attempt:
                await asyncio.sleep(random.uniform(self.retry_delay_min, self.retry_delay_max))
            handle = dlm.lock(key, lease, auto_extend=watched, on_lost=lost if watched else None)
            if await handle.acquire(blocking=False):
                lock.id = handle.token.decode()
                lock.valid = True
                lock._handle = handle  # type: ignore[attr-defined]
                self._locks[resource] = lock
                return lock
        assert handle is not None  # retry_count >= 1
        raise self._error(f'Can not acquire the lock "{resource}"', await handle.settled_outcomes(), "Lock timeout")

    def _error(self, message: str, outcomes: Sequence[MasterOutcome], quorum_message: Optional[str] = None) -> LockError:
        """The error aioredlock raised for a round without a quorum (see the module docstring)."""
        if error_outcomes(outcomes):
            return LockRuntimeError(message, outcomes=outcomes)
        if any(o.outcome == "no" for o in outcomes):
            return LockAcquiringError(message, outcomes=outcomes)
        if quorum_message is not None and sum(o.outcome == "ok" for o in outcomes) >= self.quorum:
            return LockError(quorum_message, outcomes=outcomes)  # a quorum, but no validity left
        return LockError(message, outcomes=outcomes)

    def _forget(self, lock: Lock) -> None:
        lock.valid = False
        if self._locks.get(lock.resource) is lock:
            del self._locks[lock.resource]

    # --- extend -------------------------------------------------------------------------------
    async def extend(self, lock: Lock, lock_timeout: Optional[float] = None) -> None:
        """Reset ``lock``'s time to live to ``lock_timeout`` seconds (else the one it was taken with,
        else ``internal_lock_timeout``).

        Raises ``RuntimeError`` if the lock is not valid. If a quorum does not confirm, the lock is
        lost: it is released everywhere, ``valid`` turns ``False`` and a :class:`LockError` is raised.
        """
        if not lock.valid:
            raise RuntimeError("Lock is not valid")
        if lock_timeout is not None and lock_timeout <= 0:
            raise ValueError("Lock timeout must be greater than 0 seconds.")
        handle = getattr(lock, "_handle", None)
        new_lease = float(lock_timeout or lock.lock_timeout or self.internal_lock_timeout)
        try:
            if handle is None:  # rebuilt by get_lock(): take it over by its id (one owner-checked round)
                handle = (await self._client()).lock(encode_key(lock.resource), new_lease)
                await handle.adopt(str(lock.id).encode(), new_lease)
                lock._handle = handle  # type: ignore[attr-defined]
            else:
                await handle.extend(new_lease)
        except _NotOwned as exc:
            self._forget(lock)
            raise self._error(f'Can not extend the lock "{lock.resource}"', exc.outcomes) from exc

    # --- unlock -------------------------------------------------------------------------------
    async def unlock(self, lock: Lock) -> None:
        """Release ``lock`` on every master and mark it not valid.

        Succeeds where the key holds ``lock.id`` or has expired, on a quorum; otherwise raises
        :class:`LockAcquiringError` (another lock holds the key) or :class:`LockRuntimeError`.
        """
        self._forget(lock)
        dlm = await self._client()
        handle = getattr(lock, "_handle", None) or dlm.lock(encode_key(lock.resource))
        try:
            await handle.release(token=lock.id)
        except _NotOwned as exc:
            await self._released_or_raise(lock, exc.outcomes)

    async def _released_or_raise(self, lock: Lock, outcomes: Sequence[MasterOutcome]) -> None:
        """After a release without a quorum: count the masters where the key is gone as released
        (aioredlock's release answered OK there), and raise if they are still too few."""
        readers = await self._read_clients()
        key = encode_key(lock.resource)
        no = [i for i, o in enumerate(outcomes) if o.outcome == "no"]
        values = await asyncio.gather(*(readers[i].get(key) for i in no), return_exceptions=True)
        gone = sum(value is None for value in values)
        read_failed = any(isinstance(value, Exception) for value in values)
        if sum(o.outcome == "ok" for o in outcomes) + gone >= self.quorum:
            return
        message = f'Can not release the lock "{lock.resource}"'
        if read_failed and not error_outcomes(outcomes):
            raise LockRuntimeError(message, outcomes=outcomes)
        raise self._error(message, outcomes)

    # --- reads ----------------------------------------------------------------------------------
    async def is_locked(self, resource_or_lock: Any) -> bool:
        """Whether a quorum of masters holds the key (for any lock, taken by any process)."""
        if isinstance(resource_or_lock, Lock):
            resource = resource_or_lock.resource
        elif isinstance(resource_or_lock, str):
            resource = resource_or_lock
        else:
            raise TypeError(
                f"Argument should be either a Lock instance or a string, {type(resource_or_lock).__name__} is given."
            )
        key = encode_key(resource)
        values = await asyncio.gather(*(r.get(key) for r in await self._read_clients()), return_exceptions=True)
        return sum(1 for v in values if v and not isinstance(v, Exception)) >= self.quorum

    async def get_active_locks(self) -> List[Lock]:
        """The locks of this manager that are valid and still held on a quorum (by anyone)."""
        return [lock for lock in list(self._locks.values()) if lock.valid and await lock.is_locked()]

    async def get_lock(self, resource: Any, lock_identifier: Any) -> Lock:
        """Rebuild the :class:`Lock` held with ``lock_identifier`` (by any process) on ``resource``,
        its ``lock_timeout`` the smallest TTL (seconds) a quorum reports; raise :class:`LockError`
        (or a subclass) if a quorum does not hold it. It can be unlocked and extended (taken over by its id)."""
        if lock_identifier is None:
            raise TypeError("lock_identifier is required")
        key = encode_key(resource)
        readers = await self._read_clients()
        ttls = await asyncio.gather(
            *(r.eval(_TTL_IF_OWNER, 1, key, lock_identifier) for r in readers), return_exceptions=True
        )
        held = [t for t in ttls if not isinstance(t, BaseException)]
        if len(held) >= self.quorum:
            return Lock(self, resource, lock_identifier, min(held), valid=True)
        aioredis = _redis_asyncio()
        failed = [t for t in ttls if isinstance(t, BaseException) and not isinstance(t, aioredis.ResponseError)]
        cls = LockRuntimeError if failed else LockAcquiringError
        raise cls(f'Could not fetch the TTL for lock "{resource}" ({len(held)}/{self.quorum} needed)') from (
            failed[0] if failed else None
        )

    # --- destroy --------------------------------------------------------------------------------
    async def destroy(self) -> None:
        """Unlock every valid lock of this manager (errors are logged), stop its watchdog and close
        its connections. The manager reconnects if it is used again."""
        for resource, lock in list(self._locks.items()):
            if lock.valid:
                try:
                    await self.unlock(lock)
                except Exception:
                    log.exception('aioredlock: can not unlock "%s"', resource)
        self._locks.clear()
        dlm, self._dlm = self._dlm, None
        readers, self._readers = self._readers, None
        if dlm is not None:
            await dlm.aclose()
        for reader in readers or ():
            await _close(reader)

