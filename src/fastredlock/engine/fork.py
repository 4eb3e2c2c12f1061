# cython: annotation_typing=False
"""A counter bumped in every fork child, so clients can tell that their sockets are the parent's."""
from __future__ import annotations

import os

_generation = 0


def fork_generation() -> int:
    """How many forks separate this process from the one that imported fastredlock (0 there).

    A function, not a module attribute, so compiled callers read it with one C call.
    """
    return _generation


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
