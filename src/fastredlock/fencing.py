"""How a protected resource checks a fencing token (helpers and examples, not used by the client).

A Redlock cannot stop a holder that was paused past its TTL (a GC pause, SIGSTOP, a slow disk) from
waking up and writing. Fencing moves the check to the resource: every write carries the writer's
:attr:`Lock.fence`, and the resource refuses any write whose fence is not larger than (or equal to)
the largest it has accepted. A lock taken with ``fencing=True`` gives every later holder of the name
a strictly larger fence, so a stale holder's writes are refused.

What fencing assumes: the fence counters on the masters are durable. A master that restarts without
persistence forgets its counters; restart-aware voting (on by default) keeps such a master out of
quorums for the restart grace, and ``appendonly yes`` + ``appendfsync always`` keeps the counters.
Counters expire ``fence_retention`` (default 30 days) after their last use; a resource that keeps
fences longer than that must compare on more than the fence (for example, reject a fence smaller
than its own and restart counting only after the same retention).

SQL, for a row guarded by a fence column::

    UPDATE accounts SET balance = :balance, fence = :fence
     WHERE id = :id AND fence < :fence;     -- 0 rows updated: a newer holder wrote first

A Redis resource: :data:`FENCED_SET` and :func:`fenced_set`.
"""
from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["FENCED_SET", "FENCED_SET_SHA", "fenced_set"]

# FENCED_SET
# KEYS[1]  the resource's key
# KEYS[2]  the key where the resource remembers the largest fence it accepted
# ARGV[1]  the writer's fence (Lock.fence)
# ARGV[2]  the value to write
# Returns  1 if the write was accepted, 0 if a writer with a larger or equal fence came first.
FENCED_SET = b"""\
local fence = tonumber(ARGV[1])
if fence <= tonumber(redis.call('get', KEYS[2]) or '-1') then
    return 0
end
redis.call('set', KEYS[2], ARGV[1])
redis.call('set', KEYS[1], ARGV[2])
return 1
"""
FENCED_SET_SHA = hashlib.sha1(FENCED_SET).hexdigest()


def fenced_set(client: Any, key: str, value: Any, fence: int) -> bool:
    """Write ``value`` to ``key`` on a Redis resource only if ``fence`` is newer than any accepted.

    ``client`` is a ``redis.Redis`` client of the *resource* (not one of the lock masters). The
    accepted fence is kept under ``key + ":fence"``. Returns whether the write was accepted.
    """
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise TypeError(f"fence must be an int, not {type(fence).__name__}")
    return bool(client.eval(FENCED_SET, 2, key, f"{key}:fence", fence, value))
