# cython: annotation_typing=False
"""Tokens that identify one acquisition across all clients.

A token is ``<process id>:<secret>``: a per-process random id of 128 bits (the same for every token
of the process, drawn again in a fork child) and 128 bits of its own from the OS CSPRNG. Tokens
reveal nothing about each other: knowing one (from a log, a ``MONITOR``, a key's value) lets its
holder release or extend that one acquisition, never another (before, a counter followed a secret
prefix, and one token gave away every past and future token of its process). The random parts are
drawn 256 at a time (one ``getrandom`` per 4 KiB) and handed out from a deque (``popleft`` is
atomic): a token costs about what formatting a counter did. A fork child drops its parent's
unspent ones. The tokens of one batch share one token and add their index after a dot
(``id:secret.index``; one batch is one acquisition: its tokens release each other's keys).

What may be shown of a token is :func:`holder_of` it: a short digest of the process id, the same for
every token of one process (and different in a fork child).
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import struct
from binascii import hexlify
from typing import Any, List, Union

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False

_prefix = b""
_pool: Any = collections.deque()
_take: Any = _pool.popleft
#: Compiled: the random bytes of the tokens to come (16 each, from ``_spent`` on), instead of ``_pool``.
_random = b""
_spent = 0

#: How many random parts one refill draws (16 bytes each).
_BATCH = 256
#: Cuts the hex digits of one refill into the tokens' random parts (32 hex digits each).
_SPLIT = struct.Struct("32s" * _BATCH).unpack


def _reseed() -> None:
    global _prefix, _pool, _take, _random, _spent
    _prefix = os.urandom(16).hex().encode("ascii") + b":"
    _pool = collections.deque()
    _take = _pool.popleft
    _random = b""
    _spent = 0


def _refill() -> None:
    # (C loops only: one getrandom, one hex, 256 slices by a Struct, 256 concatenations by map)
    _pool.extend(map(_prefix.__add__, _SPLIT(hexlify(os.urandom(16 * _BATCH)))))


def new_token() -> bytes:
    """Return a token never returned before by any process (with overwhelming probability)."""
    global _random, _spent
    if _COMPILED:
        # One bytes object made and filled in C (tokens.pxd's _hex_token): the prefix, then 16
        # random bytes as 32 hex digits. Taking a slot (reading _spent, moving it on) calls nothing
        # in between, so under the GIL no two threads take the same one; a refill draws a new block.
        while True:
            spent = _spent
            random = _random
            if spent + 16 <= len(random):
                _spent = spent + 16
                return _hex_token(_prefix, random, spent)  # type: ignore[name-defined]  # noqa: F821 (tokens.pxd's)
            _random, _spent = os.urandom(16 * _BATCH), 0
    while True:
        try:
            return _take()  # atomic under the GIL: no two threads get the same one
        except IndexError:  # spent (another thread may refill too: both add fresh ones)
            _refill()


def new_tokens(count: int) -> List[bytes]:
    """Return ``count`` distinct tokens for one batch, none ever returned before (see the docstring)."""
    base = new_token() + b"."
    if count <= len(_INDEX):
        return [base + index for index in _INDEX[:count]]
    return [base + b"%x" % i for i in range(count)]


#: What :func:`holder_of` says of a value that is not a fastredlock token (another library's, a
#: shim's, a token chosen by the caller).
FOREIGN = "foreign"
_OURS = re.compile(rb"([0-9a-f]{32}):[0-9a-f]+(?:\.[0-9a-f]+)?")


def holder_of(token: Union[bytes, str]) -> str:
    """Who holds a lock, as far as it may be shown: for a fastredlock token, 12 hex digits of a
    SHA-256 of its process id (the same for every lock of one process; never the random part);
    :data:`FOREIGN` for any other value."""
    if isinstance(token, str):
        token = token.encode("utf-8", "surrogateescape")
    found = _OURS.fullmatch(token)
    if found is None:
        return FOREIGN
    return hashlib.sha256(b"fastredlock holder " + found.group(1)).hexdigest()[:12]


# hex suffixes of batch indexes, made once
_INDEX = [b"%x" % i for i in range(1024)]


_reseed()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)
