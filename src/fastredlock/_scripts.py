"""Old home of the Lua scripts: they live in :mod:`fastredlock.protocol.scripts` now."""
from .protocol.scripts import *  # noqa: F401,F403
