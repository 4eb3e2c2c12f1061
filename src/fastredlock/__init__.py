"""fastredlock: a fast, safe Redlock client.

One multiplexed round trip per lock operation to all N masters at once, a C core (Cython) with a
pure-Python twin, conservative validity on the monotonic clock. The guarantees: the documentation's
"Guarantees and failure scenarios" page (docs/concepts/guarantees.md).
"""
from .io.cores import CORE
from .sync.client import MasterStats, Redlock
from .sync.family import RLock, ReadLock, Semaphore, WriteLock
from .handles.family import RWLock
from .errors import (
    LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError, MasterOutcome, QuorumUnreachableError,
    ScriptsRefusedError,
)
from .engine.tokens import holder_of
from .sync.lock import Lock
from .handles.lockinfo import FamilyInfo, LockInfo, MasterView

__version__ = "0.1.0.dev0"

__all__ = [
    "CORE",
    "FamilyInfo",
    "Lock",
    "LockError",
    "LockInfo",
    "LockLostError",
    "LockNotAcquiredError",
    "LockNotOwnedError",
    "MasterOutcome",
    "MasterStats",
    "MasterView",
    "QuorumUnreachableError",
    "RLock",
    "RWLock",
    "ReadLock",
    "Redlock",
    "ScriptsRefusedError",
    "Semaphore",
    "WriteLock",
    "__version__",
    "holder_of",
]
