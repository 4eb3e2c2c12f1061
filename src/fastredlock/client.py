"""``Redlock``: the client that knows the masters, the policy, and hands out :class:`Lock` handles.

One client is meant to be shared by every thread of a process. It keeps a small pool of cores (each
core is one set of N connections): a thread takes a core for one round and gives it back, so threads
never wait behind each other's round trips. After ``fork()`` the child drops the pool it inherited
and opens its own connections.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

from . import _fork
from . import _outcomes as oc
from ._cores import core_class
from ._masters import MasterSpec, parse_masters
from .errors import MasterOutcome
from .lock import Lock

__all__ = ["Redlock"]

#: Longest TTL accepted, in seconds (2**31 - 1 ms, about 24.8 days).
MAX_TTL = (2**31 - 1) / 1000.0
#: Longest lock name accepted, in bytes after the prefix is added.
MAX_NAME_BYTES = 65536


def _check_number(value: Any, name: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < minimum or (strict and value == minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}, got {value:g}")
    return value


class Redlock:
    """A Redlock client over N independent Redis masters.

    :param masters: the masters, as URLs (``redis://[user:pass@]host:port[/db]``,
        ``unix:///path.sock``), dicts, ``(host, port)`` tuples or ``redis.Redis`` clients.
        Quorum is ``N // 2 + 1``.
    :param retry_count: retries after the first attempt when ``acquire`` blocks without a timeout.
    :param retry_delay: base sleep between attempts, seconds.
    :param retry_jitter: up to this many seconds, drawn at random, are added to each sleep.
    :param drift_factor: clock drift allowance as a fraction of the TTL (plus 2 ms).
    :param io_timeout: per-master deadline of one round, seconds; a master slower than this counts
        as "no" for that round. Keep it much smaller than your TTLs.
    :param connect_timeout: extra time allowed when a round has to (re)connect to a master.
    :param prefix: prepended to every lock name to form the key.
    :param core: ``"cython"`` or ``"python"`` to force a core (tests, benchmarks); default: the
        active one (:data:`fastredlock.CORE`).
    """

    def __init__(
        self,
        masters: Iterable[Any],
        *,
        retry_count: int = 3,
        retry_delay: float = 0.2,
        retry_jitter: float = 0.2,
        drift_factor: float = 0.01,
        io_timeout: float = 0.05,
        connect_timeout: float = 0.1,
        prefix: Union[str, bytes] = "",
        core: Optional[str] = None,
    ) -> None:
        if isinstance(retry_count, bool) or not isinstance(retry_count, int):
            raise TypeError(f"retry_count must be an int, not {type(retry_count).__name__}")
        if retry_count < 0:
            raise ValueError(f"retry_count must be >= 0, got {retry_count}")
        self.retry_count = retry_count
        self.retry_delay = _check_number(retry_delay, "retry_delay")
        self.retry_jitter = _check_number(retry_jitter, "retry_jitter")
        self.drift_factor = _check_number(drift_factor, "drift_factor")
        if self.drift_factor >= 1.0:
            raise ValueError(f"drift_factor must be < 1, got {drift_factor}")
        self.io_timeout = _check_number(io_timeout, "io_timeout", strict=True)
        self.connect_timeout = _check_number(connect_timeout, "connect_timeout")
        if isinstance(prefix, str):
            prefix = prefix.encode()
        elif not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        self.prefix: bytes = prefix
        self._core_cls = core_class(core)
        self.core: str = "python" if self._core_cls.__module__.endswith("_core_py") else "cython"
        self._specs: Tuple[MasterSpec, ...] = parse_masters(masters)
        self.quorum = len(self._specs) // 2 + 1
        self._pool: List[Any] = []
        self._pool_lock = threading.Lock()
        self._generation = _fork.generation
        self._closed = False

    # --- public API -------------------------------------------------------------------------
    @property
    def masters(self) -> Tuple[str, ...]:
        """The masters' labels (``host:port[/db]`` or ``unix:///path``), in the order given."""
        return tuple(spec.label for spec in self._specs)

    def lock(self, name: Union[str, bytes], ttl: float = 10.0) -> Lock:
        """Return a handle for the lock called ``name`` held for ``ttl`` seconds; nothing is sent yet."""
        return Lock(self, name, ttl)

    def close(self) -> None:
        """Close every connection. Locks still held stay on the masters until their TTL."""
        with self._pool_lock:
            pool, self._pool = self._pool, []
            self._closed = True
        for core in pool:
            core.close()

    def __enter__(self) -> "Redlock":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Redlock(masters={list(self.masters)!r}, quorum={self.quorum}, core={self.core!r})"

    # --- used by Lock -----------------------------------------------------------------------
    def _key(self, name: Union[str, bytes]) -> bytes:
        if isinstance(name, str):
            raw = name.encode("utf-8", "surrogatepass")
        elif isinstance(name, bytes):
            raw = name
        else:
            raise TypeError(f"name must be str or bytes, not {type(name).__name__}")
        if not raw:
            raise ValueError("name must not be empty")
        key = self.prefix + raw
        if len(key) > MAX_NAME_BYTES:
            raise ValueError(f"name is {len(key)} bytes with the prefix; the limit is {MAX_NAME_BYTES}")
        return key

    def _ttl_ms(self, ttl: Any) -> int:
        value = _check_number(ttl, "ttl", strict=True)
        if value > MAX_TTL:
            raise ValueError(f"ttl must be <= {MAX_TTL:g} seconds, got {value:g}")
        ttl_ms = int(value * 1000.0)
        # Validity is ttl - elapsed - (ttl * drift + 2 ms): a TTL below that margin can never hold.
        if ttl_ms * (1.0 - self.drift_factor) <= 2.0:
            raise ValueError(f"ttl is too small to ever be valid with drift_factor={self.drift_factor}: {value:g}s")
        return ttl_ms

    def _checkout(self) -> Any:
        if self._generation != _fork.generation:
            self._after_fork()
        if self._closed:
            raise RuntimeError("this Redlock client is closed")
        try:
            return self._pool.pop()
        except IndexError:
            return self._core_cls(self._specs, self.io_timeout, self.connect_timeout, self.drift_factor)

    def _checkin(self, core: Any, clean: bool = True) -> None:
        if not clean:
            core.close()  # a round was interrupted: replies may still be in flight
        if self._generation == _fork.generation and not self._closed:
            self._pool.append(core)
        else:
            core.close()

    def _after_fork(self) -> None:
        """In a fork child: forget the parent's connections (closing our copies of the fds only)."""
        # The parent's pool lock may have been held by a thread that does not exist here: replace it.
        self._pool_lock = threading.Lock()
        pool, self._pool = self._pool, []
        self._generation = _fork.generation
        for core in pool:
            core.close()

    def _outcomes(self, rnd: Any) -> List[MasterOutcome]:
        details = rnd.details or (None,) * len(self._specs)
        return [
            MasterOutcome(spec.label, oc.NAMES.get(code, str(code)), detail)
            for spec, code, detail in zip(self._specs, rnd.outcomes, details)
        ]
