"""A counter bumped in every fork child, so clients can tell that their sockets are the parent's."""
from __future__ import annotations

import os

generation = 0


def _after_fork_in_child() -> None:
    global generation
    generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
