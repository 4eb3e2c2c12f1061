"""Old home of the outcome codes: they live in :mod:`fastredlock.protocol.outcomes` now."""
from .protocol.outcomes import *  # noqa: F401,F403
from .protocol.outcomes import COUNTERS, DOWN, NAMES  # noqa: F401
