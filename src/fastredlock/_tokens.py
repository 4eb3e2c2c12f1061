"""Tokens that identify one acquisition across all clients.

A token is a per-process random prefix of 128 bits from the OS CSPRNG plus a counter. The prefix is
drawn again in a fork child, so a child never mints the tokens its parent (or a sibling) mints.
"""
from __future__ import annotations

import itertools
import os

_prefix = b""
_counter = itertools.count(1)


def _reseed() -> None:
    global _prefix, _counter
    _prefix = os.urandom(16).hex().encode() + b":"
    _counter = itertools.count(1)


def new_token() -> bytes:
    """Return a token never returned before by any process (with overwhelming probability)."""
    return _prefix + b"%x" % next(_counter)


_reseed()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)
