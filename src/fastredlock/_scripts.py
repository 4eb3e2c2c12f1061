"""Lua scripts run on every master, and their SHA1 digests (computed once, at import).

Both are owner-checked: they act only when the key still holds this acquisition's token, so a
client whose lock expired and was taken by another can never delete or prolong the new holder's key.
The cores send ``EVALSHA`` first and fall back to ``EVAL`` on ``NOSCRIPT`` (a restarted master has
an empty script cache).
"""
from __future__ import annotations

import hashlib

# RELEASE
# KEYS[1]  the lock key
# ARGV[1]  the token of this acquisition
# Returns  1 if the key held the token and was deleted, 0 otherwise.
RELEASE = b"""\
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""

# EXTEND
# KEYS[1]  the lock key
# ARGV[1]  the token of this acquisition
# ARGV[2]  the new time to live in milliseconds
# Returns  1 if the key held the token and its expiry was reset, 0 otherwise.
EXTEND = b"""\
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_SHA = hashlib.sha1(RELEASE).hexdigest().encode()
EXTEND_SHA = hashlib.sha1(EXTEND).hexdigest().encode()
