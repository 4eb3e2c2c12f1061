"""What the shims share: reading masters the way the originals did, one client per master set, errors.

The originals took masters as redis-py clients, URLs, or dicts of ``redis.Redis`` keyword arguments.
fastredlock reads the same things itself; a dict with keyword arguments fastredlock has no use for
(``socket_connect_timeout``, ``decode_responses``, ...) is handed to ``redis.Redis`` first, so a
misspelt argument still fails as it did with the original, and then only its address and
credentials are read. redis-py is imported only where one of these needs it.
"""
from __future__ import annotations

import asyncio
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..sync.client import MAX_TTL, Redlock
from ..errors import LockError, LockNotOwnedError, MasterOutcome
from ..io.masters import MasterSpec, parse_masters, shared_servers

if TYPE_CHECKING:  # type names only: the asyncio client is imported by the asyncio shims
    from ..asyncio import Redlock as AsyncRedlock

__all__ = [
    "Masters",
    "PoolState",
    "aclose_clients",
    "arelease_token",
    "configure",
    "encode_key",
    "error_outcomes",
    "one_server_message",
    "options",
    "pool_state",
    "redis_errors",
    "release_token",
    "usable_ttl",
]

_DEFAULT_OPTIONS: Dict[str, Any] = {
    "core": None,
    "io_timeout": 0.05,
    "connect_timeout": 0.1,
    "restart_aware": True,
    "restart_grace": None,
}
_options: Dict[str, Any] = dict(_DEFAULT_OPTIONS)
#: Bumped whenever the options change or the clients are closed: a client a Masters object
#: remembers is reused only while this has not changed.
_generation = 0
#: ``_options`` as part of a client's key (kept in step by configure(): a lock per call looks it up).
_options_key: Tuple[Any, ...] = tuple(sorted(_options.items()))
_clients: Dict[Tuple[Any, ...], Redlock] = {}
_clients_lock = threading.Lock()
#: The asyncio clients: one per event loop (a fastredlock.asyncio client belongs to one loop), per
#: master set and options. A loop that is garbage collected takes its entry with it.
_aio_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[Tuple[Any, ...], AsyncRedlock]]" = (
    weakref.WeakKeyDictionary()
)

#: The fastredlock dict keys a master dict may use without redis-py.
_PLAIN_KEYS = frozenset({"host", "port", "db", "username", "password", "path", "unix_socket_path"})

#: Outcomes that mean "the master failed" (the originals saw these as redis-py exceptions), as
#: opposed to "ok", "no" and "restarted recently", which are answers. "cooling down" is a master that
#: failed recently and was not asked again yet (the originals would have hit its error again).
_ERROR_OUTCOMES = frozenset({"timeout", "connection error", "error reply", "protocol error", "cooling down",
                             "tls error", "sentinel error"})


def configure(**changes: Any) -> Dict[str, Any]:
    """Set the options of the :class:`fastredlock.Redlock` clients the shims build; return them all.

    ``core`` (``"cython"``/``"python"``/``None``), ``io_timeout`` and ``connect_timeout`` (seconds),
    ``restart_aware`` (default ``True``: a master up for less than ``restart_grace`` — by default
    the largest TTL used — does not count toward a quorum) and ``restart_grace``. Call it before
    the first lock; shim objects made earlier keep the client they already use. ``configure()``
    with no argument restores the defaults.
    """
    unknown = set(changes) - set(_DEFAULT_OPTIONS)
    if unknown:
        raise TypeError(f"configure() got unknown option(s) {sorted(unknown)}; known: {sorted(_DEFAULT_OPTIONS)}")
    new = dict(_DEFAULT_OPTIONS) if not changes else {**_options, **changes}
    global _options_key
    Redlock([("127.0.0.1", 6379)], **new)  # validates every option; connects nowhere
    global _generation
    _options.clear()
    _options.update(new)
    _generation += 1
    _options_key = tuple(sorted(_options.items()))
    return dict(_options)


def options() -> Dict[str, Any]:
    """The options the next client built by a shim will get."""
    return dict(_options)


def close_clients() -> None:
    """Close every client the shims built (tests; a process about to exit).

    The asyncio clients of loops that are no longer running have their connections closed here;
    those of a running loop are closed with :func:`aclose_clients`, on that loop.
    """
    global _generation
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
        _generation += 1
        stale: list = []
        for loop in list(_aio_clients):
            if not loop.is_running():
                stale.extend(_aio_clients.pop(loop).values())
    for client in clients:
        client.close()
    for aio in stale:
        aio.executor.close()


async def aclose_clients() -> None:
    """Close the asyncio clients the shims built for the running event loop (call it on that loop
    before closing it; locks still held stay until their TTL)."""
    with _clients_lock:
        clients = list(_aio_clients.pop(asyncio.get_running_loop(), {}).values())
    for client in clients:
        await client.aclose()


def _aio_client_for(specs: Tuple[MasterSpec, ...], same_server_ok: bool = False) -> "AsyncRedlock":
    from ..asyncio import Redlock as AsyncRedlock

    loop = asyncio.get_running_loop()  # RuntimeError outside a coroutine, as the client would raise
    key = (specs, same_server_ok, _options_key)
    stale: List["AsyncRedlock"] = []
    with _clients_lock:
        per_loop = _aio_clients.get(loop)
        if per_loop is None:
            # A client refers to its loop, so a loop closed without aclose_clients() (asyncio.run()
            # after asyncio.run()) would never leave the weak dict: its sockets are closed here.
            for old in [other for other in _aio_clients if other.is_closed()]:
                stale.extend(_aio_clients.pop(old).values())
            per_loop = _aio_clients[loop] = {}
        client = per_loop.get(key)
        if client is None:
            client = AsyncRedlock(specs, retry_count=0, retry_delay=0.0, retry_jitter=0.0,
                                  same_server_ok=same_server_ok, **_options)
            per_loop[key] = client
    for aio in stale:
        aio.executor.close()
    return client


def _client_for(specs: Tuple[MasterSpec, ...], same_server_ok: bool = False) -> Redlock:
    key = (specs, same_server_ok, _options_key)
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                # The shims make their own attempts (each original had its own retry rules).
                client = Redlock(specs, retry_count=0, retry_delay=0.0, retry_jitter=0.0,
                                 same_server_ok=same_server_ok, **_options)
                _clients[key] = client
    return client


def _redis():
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - every original depended on redis-py
        raise ImportError("this form of master needs redis-py (pip install redis)") from exc
    return redis


def _redis_client(entry: Any) -> Any:
    """The redis-py client the original library would have built for ``entry``."""
    if hasattr(entry, "connection_pool"):
        return entry
    redis = _redis()
    if isinstance(entry, str):
        return redis.StrictRedis.from_url(entry)
    if isinstance(entry, dict):
        kwargs = dict(entry)  # never mutate the caller's dict (glasslion's RedLock did)
        url = kwargs.pop("url", None)
        if url is not None:
            return redis.StrictRedis.from_url(url, **kwargs)
        return redis.StrictRedis(**kwargs)
    raise TypeError(
        f"a master must be a URL, a dict of redis connection arguments or a redis.Redis client, "
        f"not {type(entry).__name__}"
    )


def _to_master(entry: Any) -> Any:
    """Turn one master as the originals took it into something :func:`parse_masters` reads."""
    if isinstance(entry, dict):
        if "url" in entry:
            if len(entry) == 1:
                return _to_master(entry["url"])
            return _redis_client(entry)
        if set(entry) <= _PLAIN_KEYS:
            return entry
        return _redis_client(entry)  # raises TypeError on an argument redis.Redis does not take
    if isinstance(entry, str):
        try:
            parse_masters([entry])
            return entry
        except ValueError:
            return _redis_client(entry)  # a URL form only redis-py knows; it says if it is bad
    return entry


class Masters:
    """The masters of one shim object: as the user gave them, and the client shared for them.

    ``same_server_ok``: accept several dbs of one server (see :func:`parse_masters`); the groups
    of masters that are one server are then in :attr:`shared`, for the shim to warn about.
    """

    __slots__ = ("entries", "specs", "same_server_ok", "shared", "_redis_clients", "_client")

    def __init__(self, entries: Iterable[Any], *, same_server_ok: bool = False) -> None:
        if isinstance(entries, (str, bytes, dict)):
            raise TypeError("expected a list of masters, not a single one")
        self.entries: List[Any] = list(entries)
        self.specs: Tuple[MasterSpec, ...] = parse_masters([_to_master(e) for e in self.entries],
                                                           same_server_ok=same_server_ok)
        self.same_server_ok = same_server_ok
        #: The groups (two or more) of these masters that are dbs of one server.
        self.shared: List[Tuple[MasterSpec, ...]] = shared_servers(self.specs) if same_server_ok else []
        self._redis_clients: Optional[List[Any]] = None
        self._client: Optional[Tuple[int, Redlock]] = None  # (_generation, the client then)

    @property
    def client(self) -> Redlock:
        """The fastredlock client for these masters (one per master set and options, per process)."""
        known = self._client
        if known is not None and known[0] == _generation:
            return known[1]
        generation = _generation
        client = _client_for(self.specs, self.same_server_ok)
        self._client = (generation, client)
        return client

    def aio_client(self) -> "AsyncRedlock":
        """The :mod:`fastredlock.asyncio` client for these masters on the running event loop (one
        per loop, master set and options, per process)."""
        return _aio_client_for(self.specs, self.same_server_ok)

    @property
    def quorum(self) -> int:
        return len(self.specs) // 2 + 1

    def redis_clients(self) -> List[Any]:
        """redis-py clients for these masters (built on first use; the shims never lock through them)."""
        if self._redis_clients is None:
            self._redis_clients = [_redis_client(e) for e in self.entries]
        return self._redis_clients


class PoolState:
    """What the shims read from a redis-py client's connection pool: its master (reading a client
    resolves its host name) and its encoder. redis-py's idiom makes a lock per call
    (``r.lock(name)``, ``redis_lock.Lock(conn, name)``), which must not pay for either each time:
    :func:`pool_state` keeps this on the pool object itself."""

    __slots__ = ("masters", "encoder", "encoding", "errors")

    def __init__(self, redis: Any, pool: Any) -> None:
        self.masters = Masters([redis])  # an unreadable or unsupported client is reported here
        self.encoder = pool.get_encoder() if hasattr(pool, "get_encoder") else None
        self.encoding: str = getattr(self.encoder, "encoding", "utf-8")
        self.errors: str = getattr(self.encoder, "encoding_errors", "strict")


#: The attribute of a connection pool that holds its :class:`PoolState`.
_POOL_STATE = "_fastredlock_shim_state"


def pool_state(redis: Any) -> PoolState:
    """The :class:`PoolState` of ``redis``'s connection pool, read once per pool.

    It is kept as an attribute of the pool (one attribute lookup per lock made, and it goes with
    the pool: no registry to clean up); a pool that takes no attributes is read each time.
    ``AttributeError`` if ``redis`` has no ``connection_pool``.
    """
    pool = redis.connection_pool
    state = getattr(pool, _POOL_STATE, None)
    if state is None:
        state = PoolState(redis, pool)
        try:
            setattr(pool, _POOL_STATE, state)
        except (AttributeError, TypeError):
            pass
    return state


def one_server_message(group: Sequence[MasterSpec]) -> str:
    """What is lost when the masters of ``group`` are dbs of one server (the shims that accept
    them warn with this)."""
    labels = ", ".join(spec.label for spec in group)
    return (
        f"masters {labels} are dbs of one server: accepted, but without fault tolerance (that server "
        "is a single point of failure: while it is down no lock can be taken, and a restart without "
        "persistence forgets the lock in every db at once); mutual exclusion still holds on that server"
    )


def encode_key(value: Any) -> bytes:
    """A key as redis-py would have sent it (str as UTF-8, numbers as their repr)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        raise TypeError("a lock name must be str, bytes or a number, not bool")
    if isinstance(value, (int, float)):
        return repr(value).encode()
    raise TypeError(f"a lock name must be str, bytes or a number, not {type(value).__name__}")


def usable_ttl(client: Any, seconds: float) -> bool:
    """Whether a lock of ``seconds`` can ever be valid; the originals answered "not acquired" to one
    that cannot (fastredlock raises ``ValueError``). A TTL past fastredlock's limit still raises."""
    if seconds > MAX_TTL:
        raise ValueError(f"ttl must be <= {MAX_TTL:g} seconds, got {seconds:g}")
    try:
        client.executor.ttl_ms(seconds)
    except ValueError:
        return False
    return True


def error_outcomes(outcomes: Sequence[MasterOutcome]) -> List[MasterOutcome]:
    """The masters that failed (timeout, connection error, error reply, protocol error)."""
    return [o for o in outcomes if o.outcome in _ERROR_OUTCOMES]


def redis_errors(outcomes: Sequence[MasterOutcome]) -> List[Exception]:
    """The failed masters as the redis-py exceptions the originals collected, one per master."""
    failed = error_outcomes(outcomes)
    if not failed:
        return []
    try:
        from redis import exceptions as rex
    except ImportError:  # pragma: no cover
        return [LockError(str(o)) for o in failed]
    kinds = {
        "timeout": rex.TimeoutError,
        "connection error": rex.ConnectionError,
        "tls error": rex.ConnectionError,
        "sentinel error": rex.ConnectionError,
        "cooling down": rex.ConnectionError,
        "error reply": rex.ResponseError,
    }
    return [kinds.get(o.outcome, rex.RedisError)(str(o)) for o in failed]


def release_token(client: Redlock, key: bytes, token: Any, signal: Any = None) -> Tuple[bool, List[MasterOutcome]]:
    """Owner-checked release of ``key`` held with ``token`` on every master (``signal``: as
    :meth:`fastredlock.Lock.release`'s, pushed where it deleted).

    Returns whether a quorum still held it (and deleted it), and what each master answered.
    """
    handle = client.lock(key)
    try:
        handle.release(token=token, signal=signal)
        released = True
    except LockNotOwnedError:
        released = False
    return released, handle.outcomes


async def arelease_token(client: "AsyncRedlock", key: bytes, token: Any) -> Tuple[bool, List[MasterOutcome]]:
    """:func:`release_token` with an asyncio client: whether a quorum still held ``key`` with
    ``token`` (and deleted it), and what each master answered (the stragglers' answers awaited)."""
    handle = client.lock(key)
    try:
        await handle.release(token=token)
    except LockNotOwnedError as error:
        return False, list(error.outcomes)
    return True, handle.outcomes
