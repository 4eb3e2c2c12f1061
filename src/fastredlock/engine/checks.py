# cython: annotation_typing=False
"""Argument checks shared by the front-ends: numbers, TTLs, lock names and keys.

Each check returns the value in the form the engine uses (a float, milliseconds, the key as bytes)
or raises ``TypeError``/``ValueError`` with a message naming the argument. No state, no I/O.
"""
from __future__ import annotations

import math
from typing import Any, List, Sequence, Union

from ..protocol.keyspace import reserved_by

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False

__all__ = [
    "MAX_NAME_BYTES", "MAX_TTL", "MAX_WAIT", "check_number", "check_timeout", "key_of", "keys_of", "name_list",
    "ttl_ms_of",
]

#: Longest TTL accepted, in seconds (2**31 - 1 ms, about 24.8 days).
MAX_TTL = (2**31 - 1) / 1000.0
#: Longest lock name accepted, in bytes after the prefix is added.
MAX_NAME_BYTES = 65536
#: Longest io_timeout, connect_timeout and retry sleep accepted, in seconds.
MAX_WAIT = 3600.0


def check_number(
    value: Any, name: str, *, minimum: float = 0.0, strict: bool = False, maximum: float = math.inf
) -> float:
    """Return ``value`` as a float, or raise ``TypeError``/``ValueError`` naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be finite, got an int too large for a float") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < minimum or (strict and value == minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}, got {value:g}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value:g}")
    return value


def check_timeout(timeout: Any) -> float:
    """Return an acquisition's ``timeout`` (seconds, finite, >= 0) as a float."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ValueError(f"timeout must be a number >= 0 or None, got {timeout!r}")
    try:
        timeout = float(timeout)
    except OverflowError:
        raise ValueError("timeout must be finite, got an int too large for a float") from None
    if not 0 <= timeout < float("inf"):
        raise ValueError(f"timeout must be a finite number >= 0 or None, got {timeout!r}")
    return timeout


def ttl_ms_of(ttl: Any, drift_factor: float) -> int:
    """Return ``ttl`` (seconds) in whole milliseconds, checked: positive, at most :data:`MAX_TTL`,
    and long enough to ever be valid with ``drift_factor``."""
    value = check_number(ttl, "ttl", strict=True)
    if value > MAX_TTL:
        raise ValueError(f"ttl must be <= {MAX_TTL:g} seconds, got {value:g}")
    ttl_ms = int(value * 1000.0)
    # Validity is ttl - elapsed - (ttl * drift + 2 ms): a TTL below that margin can never hold.
    if ttl_ms * (1.0 - drift_factor) <= 2.0:
        raise ValueError(f"ttl is too small to ever be valid with drift_factor={drift_factor}: {value:g}s")
    return ttl_ms


def key_of(prefix: bytes, name: Union[str, bytes]) -> bytes:
    """Return the key of lock ``name``: ``prefix`` + the name as bytes (UTF-8 for a str)."""
    if _COMPILED and type(name) is str and type(prefix) is bytes:
        # The key made in C from the str's UTF-8 (checks.pxd's _str_key: one allocation); None
        # for a name it does not take (empty, lone surrogates, too long): the checks below say why.
        fast = _str_key(prefix, name, MAX_NAME_BYTES)  # type: ignore[name-defined]  # noqa: F821 (checks.pxd's)
        if fast is not None:
            key = fast
            if b"{" in key:  # only a key with a brace can be another lock's derived key
                _refuse_reserved(key)
            return key
    if isinstance(name, str):
        try:
            raw = name.encode("utf-8")  # one C call when compiled
        except UnicodeEncodeError:  # lone surrogates: kept, as the name's bytes
            raw = name.encode("utf-8", "surrogatepass")
    elif isinstance(name, bytes):
        raw = name
    else:
        raise TypeError(f"name must be str or bytes, not {type(name).__name__}")
    if not raw:
        raise ValueError("name must not be empty")
    key = prefix + raw
    if len(key) > MAX_NAME_BYTES:
        raise ValueError(f"name is {len(key)} bytes with the prefix; the limit is {MAX_NAME_BYTES}")
    if b"{" in key:  # only a key with a brace can be another lock's derived key
        _refuse_reserved(key)
    return key


def _refuse_reserved(key: bytes) -> None:
    """Raise ``ValueError`` if ``key`` is a key another lock derives (:mod:`fastredlock.protocol.keyspace`):
    two locks would share it, and one's release would free the other."""
    found = reserved_by(key)
    if found is not None:
        base, what = found
        show = key.decode("utf-8", "backslashreplace")
        raise ValueError(f"name {show!r} is reserved: it is the {what} of the lock "
                         f"{base.decode('utf-8', 'backslashreplace')!r} (a lock name must not be a key "
                         "another lock derives; see the security page)")


def token_of(token: Union[str, bytes]) -> bytes:
    """Return a token the caller gave (str as UTF-8, bytes-like as bytes) as stored on the masters."""
    if isinstance(token, str):
        token = token.encode("utf-8", "surrogatepass")
    elif isinstance(token, (bytes, bytearray)):
        token = bytes(token)
    else:
        raise TypeError(f"token must be str or bytes, not {type(token).__name__}")
    if not token:
        raise ValueError("token must not be empty")
    return token


def name_list(names: Sequence[Union[str, bytes]]) -> List[Any]:
    """Return the names of a batch as a non-empty list (a lone name is refused, not iterated)."""
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise TypeError("names must be a list of lock names")
    names = list(names)
    if not names:
        raise ValueError("names must not be empty")
    return names


def keys_of(prefix: bytes, names: List[Any]) -> List[bytes]:
    """Return the keys of a batch's names (see :func:`key_of`), refusing a name given twice."""
    if all(map(str.__instancecheck__, names)) and all(names):  # all non-empty str: the common case
        keys = [prefix + name.encode("utf-8", "surrogatepass") for name in names]
        if max(map(len, keys)) > MAX_NAME_BYTES:
            keys = [key_of(prefix, name) for name in names]  # raises
    else:
        keys = [key_of(prefix, name) for name in names]
    for key in keys:
        if b"{" in key:
            _refuse_reserved(key)
    if len(set(keys)) != len(keys):
        raise ValueError("names must not repeat a name")
    return keys

