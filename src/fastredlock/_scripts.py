"""Lua scripts run on every master, and their SHA1 digests (computed once, at import).

The release and extend scripts are owner-checked: they act only where the key still holds this
acquisition's token, so a client whose lock expired and was taken by another can never delete or
prolong the new holder's key.
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

# FENCED_ACQUIRE (round 1 of a fenced acquisition)
# KEYS[1]  the lock key
# KEYS[2]  the fence counter key (same hash tag as the lock key)
# ARGV[1]  the token of this acquisition
# ARGV[2]  the time to live in milliseconds
# Returns  the counter's current value (0 if absent) if the lock key was set, -1 if it is taken.
FENCED_ACQUIRE = b"""\
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return tonumber(redis.call('get', KEYS[2]) or '0')
end
return -1
"""

# FENCE_WRITE (round 2 of a fenced acquisition)
# KEYS[1]  the lock key
# KEYS[2]  the fence counter key
# ARGV[1]  the token of this acquisition
# ARGV[2]  the fence chosen by the client (max of round 1's values + 1)
# ARGV[3]  how long the counter outlives its last use, in milliseconds
# Returns  1 if the key still held the token and the counter is now >= the fence, 0 otherwise.
# The counter only ever grows (counter = max(counter, fence)), so a late or repeated write is harmless.
FENCE_WRITE = b"""\
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local fence = tonumber(ARGV[2])
if tonumber(redis.call('get', KEYS[2]) or '0') < fence then
    redis.call('set', KEYS[2], ARGV[2])
end
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
"""

FENCED_ACQUIRE_SHA = hashlib.sha1(FENCED_ACQUIRE).hexdigest().encode()
FENCE_WRITE_SHA = hashlib.sha1(FENCE_WRITE).hexdigest().encode()

# ACQUIRE_ALL (lock_all: several names held together, all or none)
# KEYS     the lock keys
# ARGV[1]  the token of this acquisition (shared by all its keys)
# ARGV[2]  the time to live in milliseconds
# Returns  1 if every key was free and is now set, 0 if any was taken (then none is set).
ACQUIRE_ALL = b"""\
for i = 1, #KEYS do
    if redis.call('exists', KEYS[i]) == 1 then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
"""

ACQUIRE_ALL_SHA = hashlib.sha1(ACQUIRE_ALL).hexdigest().encode()

# RELEASE_MANY (release_many of two or more locks: one call per master instead of one per lock)
# KEYS     the lock keys
# ARGV     the tokens of their acquisitions, in the same order (ARGV[i] belongs to KEYS[i])
# Returns  a string of one character per key: '1' if it held its token and was deleted, '0' if not.
# Two redis.call per thousand keys (MGET, then one DEL of the keys that were ours), not two per key:
# a master spends a few microseconds on a batch of 64 instead of one script call per key.
RELEASE_MANY = b"""\
local done, mine = {}, {}
for first = 1, #KEYS, 1000 do
    local last = math.min(first + 999, #KEYS)
    local values = redis.call('mget', unpack(KEYS, first, last))
    for i = first, last do
        if values[i - first + 1] == ARGV[i] then
            mine[#mine + 1] = KEYS[i]
            done[i] = '1'
        else
            done[i] = '0'
        end
    end
end
for first = 1, #mine, 1000 do
    redis.call('del', unpack(mine, first, math.min(first + 999, #mine)))
end
return table.concat(done)
"""

RELEASE_MANY_SHA = hashlib.sha1(RELEASE_MANY).hexdigest().encode()
