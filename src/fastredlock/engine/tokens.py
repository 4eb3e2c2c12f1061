# cython: annotation_typing=False
"""Tokens that identify one acquisition across all clients.

A token is a per-process random prefix of 128 bits from the OS CSPRNG plus a counter. The prefix is
drawn again in a fork child, so a child never mints the tokens its parent (or a sibling) mints.
The tokens of one batch share one counter value and add their index after a dot
(``prefix:count.index``): a single token has no dot, so no two tokens of a process are equal.

The prefix is the secret part: whoever knows it can guess the counter and release or extend the
process's locks. What may be shown of a token is :func:`holder_of` it: a short digest of the
prefix, the same for every token of one process (and different in a fork child), from which
nothing of the prefix can be learnt.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import re
from typing import List, Union

_prefix = ""
_counter = itertools.count(1)


def _reseed() -> None:
    global _prefix, _counter
    _prefix = os.urandom(16).hex() + ":"
    _counter = itertools.count(1)


def new_token() -> bytes:
    """Return a token never returned before by any process (with overwhelming probability)."""
    count = next(_counter)  # atomic under the GIL (``+= 1`` on a global would not be, interpreted)
    return f"{_prefix}{count:x}".encode("ascii")  # compiled: the hex digits are formatted in C


def new_tokens(count: int) -> List[bytes]:
    """Return ``count`` distinct tokens for one batch, none ever returned before (see the docstring)."""
    base = f"{_prefix}{next(_counter):x}.".encode("ascii")
    if count <= len(_INDEX):
        return [base + index for index in _INDEX[:count]]
    return [base + b"%x" % i for i in range(count)]


#: What :func:`holder_of` says of a value that is not a fastredlock token (another library's, a
#: shim's, a token chosen by the caller).
FOREIGN = "foreign"
_OURS = re.compile(rb"([0-9a-f]{32}):[0-9a-f]+(?:\.[0-9a-f]+)?")


def holder_of(token: Union[bytes, str]) -> str:
    """Who holds a lock, as far as it may be shown: for a fastredlock token, 12 hex digits of a
    SHA-256 of its client prefix (the same for every lock of one process, never its secret);
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
