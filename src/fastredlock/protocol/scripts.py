"""Lua scripts run on every master, and their SHA1 digests (computed once, at import).

The release and extend scripts are owner-checked: they act only where the key still holds this
acquisition's token, so a client whose lock expired and was taken by another can never delete or
prolong the new holder's key.
The cores send ``EVALSHA`` first and fall back to ``EVAL`` on ``NOSCRIPT`` (a restarted master has
an empty script cache). Where a master runs an owner-checked command natively, the cores send that
instead (see :mod:`.handshake`): an extension, the cleanup of a failed attempt, and the plain
release, whose waiters' work alone (``WAKE_AFTER``) then runs as a script, where someone waits.

What a script costs a master, measured (``benchmarks/master_cpu.py``, Redis 7.0): a Lua call is
far dearer than a command (a script that only returns costs about two ``SET``s), each
``redis.call`` about one more, and each extra key or argument and each string built (``..``,
``string.find``) a little. So the common case of each script makes as few calls as it can, and
what only contention needs (queues, turns, messages) waits behind a check that costs nothing more.
"""
from __future__ import annotations

import hashlib

#: The pub/sub channel of a lock is this prefix plus its key: a release that deletes the key
#: publishes there, and waiters of the key listen there (see fastredlock.engine.wake).
WAKE_PREFIX = b"fastredlock-wake:"
#: A client's turn channel is this prefix plus its id: a release that gives the turn to one of its
#: queued waiters names the waiter there (see fastredlock.engine.wake, "Turns").
TURN_PREFIX = b"fastredlock-turn:"

# Turns (see fastredlock.engine.wake, "Turns"): the waiters of a plain lock queue on each master in a
# sorted set beside the key, ``<key>:wait`` under the key's hash tag (``{<key>}:wait`` if it has
# none), scored by when each began to wait (the client's clock: every master orders them alike); a
# member is ``<waiter id>|<deadline, ms since the epoch; 0: none>``. A release that finds waiters
# pops the first whose deadline has not passed, gives it the turn (``<key>:next``, for TURN_MS)
# and names it in its message: that one waiter wakes and takes the lock, the others sleep on. A
# queued attempt (ACQUIRE_QUEUED) takes a free key only when the turn is nobody's or its own, and
# marks the name (WAKE_SUFFIX): the plain RELEASE looks at the queue only where the mark is. A
# key with a '}' and no hash tag has no queue (``{<key>}`` would hash elsewhere; see queueable in
# fastredlock.protocol.family): its waiters are woken all at once, as without turns.
_TAGGED = b"""\
local function tagged(key, suffix)
    local left = string.find(key, '{', 1, true)
    if left then
        local right = string.find(key, '}', left + 1, true)
        if right and right > left + 1 then
            return key .. suffix
        end
    end
    if string.find(key, '}', 1, true) then
        return nil
    end
    return '{' .. key .. '}' .. suffix
end
"""

#: RELEASE_FULL's second argument for the cleanup of a failed attempt (``Core.release_quiet``):
#: the key goes, but no turn is given and nobody is woken. (Given there, the turn would go to the
#: next waiter on the few masters the failed attempt took, while the real release gives it
#: elsewhere: masters that disagree on whose turn it is, and hand-overs that wait for the turn to
#: lapse.)
QUIET = b"q"

#: How long the turn a release gives a queued waiter waits for it, in milliseconds (a waiter
#: killed while queued costs the others this, then their backoff).
TURN_MS = 50

#: The wake mark of a lock key is this suffix beside it, under its hash tag (``{<key>}:wake``; see
#: :func:`fastredlock.protocol.family.wake_mark`): a waiter that needs the next release to do
#: more than delete the key sets it (a queued attempt, for as long as its place in the queue lasts;
#: a waiter that listens without a place, for its pause). A release that finds no mark only deletes.
WAKE_SUFFIX = b":wake"
#: How long a release that woke someone (or left waiters in the queue) keeps the mark, in
#: milliseconds, at least: the releaser's own courtesy pause and the waiters it did not wake
#: (another of the same client; the rest of the queue, for as long as the queue lasts) still want
#: the next release to look for them.
REMARK_MS = 1000

# RELEASE_FULL (the release that always looks for waiters: the lock family's write keys, keys
# that cannot queue, the cleanup of a failed attempt with QUIET, and every release of clients
# before the wake mark)
# KEYS[1]  the lock key
# ARGV[1]  the token of this acquisition
# ARGV[2]  optional: QUIET ('q'), the cleanup of a failed attempt: delete, give no turn, wake nobody
# Returns  1 if the key held the token and was deleted, 3 if so and it gave the turn to a queued
#          waiter whose client heard it, 2 if so and the lock's channel had a subscriber (maybe
#          the releasing client itself), 0 otherwise.
# Where it deleted, it wakes the key's waiters: with queued waiters, the one whose turn it is, by
# a message naming it on its client's channel (TURN_PREFIX .. client id: nobody else is woken);
# else (or if that client did not hear it) all of them, by '1' on the key's (WAKE_PREFIX .. key).
# A PUBLISH is a pcall: an ACL user without channel permissions (Redis 7's default for new users)
# still releases, its waiters just are not woken. The queue and turn keys are derived here, in the
# key's hash slot. Its text never changes (clients of every version share its SHA1).
RELEASE_FULL = _TAGGED + b"""\
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    if ARGV[2] == 'QUIET' then
        return 1
    end
    local queue = tagged(KEYS[1], ':wait')
    if queue and redis.call('exists', queue) == 1 then
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        while true do
            local head = redis.call('zpopmin', queue)
            if #head == 0 then
                break
            end
            local last = tonumber(string.match(head[1], '|(%d+)$') or '0')
            if last == 0 or last > now then
                local turn = tagged(KEYS[1], ':next')
                redis.call('set', turn, head[1], 'PX', TURN_MS)
                local told = redis.pcall('publish', 'fastredlock-turn:' .. string.match(head[1], '^[^.]*'), head[1])
                if type(told) == 'number' and told > 0 then
                    return 3
                end
                redis.call('del', turn)
                break
            end
        end
    end
    local heard = redis.pcall('publish', 'fastredlock-wake:' .. KEYS[1], '1')
    if type(heard) == 'number' and heard > 0 then
        return 2
    end
    return 1
end
return 0
""".replace(b"TURN_MS", b"%d" % TURN_MS).replace(b"QUIET", QUIET)

# The waiters' work after a delete, shared by the lean release and WAKE_AFTER (one text, so the two
# cannot drift): with ``mark`` (the name's wake mark), ``base`` (the mark's name without ':wake')
# and ``queue`` (base .. ':wait') set, give the turn to the first live queued waiter whose client
# hears it (woke = 3), else publish the wake-up message (woke = 2 if someone listened), and open
# the re-mark test: "if woke > 1 or the queue stays then" mark again; each script closes that if.
_WAKE_WAITERS = b"""\
local woke = 1
if redis.call('exists', queue) == 1 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    while true do
        local head = redis.call('zpopmin', queue)
        if #head == 0 then
            break
        end
        local last = tonumber(string.match(head[1], '|(%d+)$') or '0')
        if last == 0 or last > now then
            local turn = base .. ':next'
            redis.call('set', turn, head[1], 'PX', TURN_MS)
            local told = redis.pcall('publish', 'fastredlock-turn:' .. string.match(head[1], '^[^.]*'), head[1])
            if type(told) == 'number' and told > 0 then
                woke = 3
            else
                redis.call('del', turn)
            end
            break
        end
    end
end
if woke == 1 then
    local heard = redis.pcall('publish', 'fastredlock-wake:' .. KEYS[1], '1')
    if type(heard) == 'number' and heard > 0 then
        woke = 2
    end
end
if woke > 1 or redis.call('exists', queue) == 1 then
    redis.call('set', mark, '1', 'PX', math.max(redis.call('pttl', queue), REMARK_MS))
"""

# RELEASE and RELEASE_TAGGED (the plain lock's release, of a key that can queue: RELEASE for a key
# without a hash tag, whose mark is '{' .. key .. '}:wake'; RELEASE_TAGGED for a key with one,
# whose mark is key .. ':wake'; see fastredlock.protocol.family.lean_release)
# KEYS[1]  the lock key
# ARGV[1]  the token of this acquisition
# Returns  as RELEASE_FULL: 1 deleted, 3 deleted and the turn given to a queued waiter whose
#          client heard it, 2 deleted and the lock's channel had a subscriber, 0 not the owner.
# The common case, nobody waits, costs two calls: GET, then one DEL of the key and its wake mark,
# whose count says whether a waiter marked the name (the mark goes with it). Only then does the
# release do RELEASE_FULL's work (the queue and turn keys: the mark's name with ':wait' and ':next'
# for ':wake'), and marks the name again if it woke someone or left waiters queued (for REMARK_MS,
# or as long as the queue lasts if longer): the rest of the queue sleeps on, and an unqueued
# waiter marks again itself before its next pause. The mark's name is built here, by one concat
# per form of key, rather than sent as KEYS[2] or found by string.find: measured on Redis 7.0, an
# extra key argument costs the master more than the concat, and the whole release costs about what
# a script of GET and DEL alone does.
_RELEASE_LEAN = (b"""\
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local mark = MARK
if redis.call('del', KEYS[1], mark) == 1 then
    return 1
end
local base = string.sub(mark, 1, -SUFFIX_LEN)
local queue = base .. ':wait'
""" + _WAKE_WAITERS + b"""\
end
return woke
""").replace(b"TURN_MS", b"%d" % TURN_MS).replace(b"REMARK_MS", b"%d" % REMARK_MS).replace(
    b"SUFFIX_LEN", b"%d" % (len(WAKE_SUFFIX) + 1))
RELEASE = _RELEASE_LEAN.replace(b"MARK", b"'{' .. KEYS[1] .. '}%s'" % WAKE_SUFFIX)
RELEASE_TAGGED = _RELEASE_LEAN.replace(b"MARK", b"KEYS[1] .. '%s'" % WAKE_SUFFIX)

# RELEASE_CLUSTER (the plain lock's release of a key that can queue, on a Redis Cluster node)
# KEYS[1], ARGV[1], returns: as RELEASE.
# RELEASE's work, the mark's name built by tagged() (either form of key: it hashes to the key's
# slot), and the key and its mark deleted by two DELs: a node whose slot is migrating answers a
# command that names a key it has and one it lacks (the mark, in the common case) with -ASK or
# -TRYAGAIN, which a script raises as an error (on the importing node, behind ASKING; on the
# migrating one), so RELEASE's one DEL of both would fail there before deleting. Each key alone,
# it does what RELEASE_FULL does there: the key goes; a mark the migrating node lacks is an error
# after the delete, as RELEASE_FULL's look at the queue is. No PUBLISH where nobody marked the
# name: about half of RELEASE_FULL's cost to the node.
RELEASE_CLUSTER = _TAGGED + _RELEASE_LEAN.replace(
    b"if redis.call('del', KEYS[1], mark) == 1 then",
    b"redis.call('del', KEYS[1])\nif redis.call('del', mark) == 0 then").replace(
    b"MARK", b"tagged(KEYS[1], '%s')" % WAKE_SUFFIX)
assert RELEASE_CLUSTER.count(b"redis.call('del', mark) == 0") == 1

# WAKE_AFTER (the waiters' work of a native release: see fastredlock.protocol.handshake,
# native_releases. The release went out as DELIFEQ/DELEX IFEQ with EXISTS of the wake mark in the
# same write; this follows, in a write of its own, only where that delete deleted and the mark was there)
# KEYS[1]  the lock key (its mark, queue and turn are derived as the lean release derives them)
# Returns  1 nothing done (or nobody heard), 3 the turn given to a queued waiter whose client heard
#          it, 2 the lock's channel had a subscriber: as RELEASE does where it deleted.
# No owner check is needed (the delete had it), but between the two a new holder may have taken
# the key, or another release may have done this work. So: a key held again is left alone (the
# mark stays: the new holder's release finds it and does the work); a mark gone means another
# release did it; a turn still given means a waiter is being woken already (a second turn would
# take the first one's). Otherwise it does what the lean release does after its DEL (a turn or a
# wake-up message), and marks the name again where it woke someone or waiters stay queued, else
# deletes the mark (the lean release deleted it with the key).
WAKE_AFTER = (_TAGGED + b"""\
local mark = tagged(KEYS[1], ':wake')
if not mark or redis.call('exists', KEYS[1]) == 1 then
    return 1
end
local base = string.sub(mark, 1, -6)
local queue = base .. ':wait'
if redis.call('exists', mark) == 0 or redis.call('exists', base .. ':next') == 1 then
    return 1
end
""" + _WAKE_WAITERS + b"""\
else
    redis.call('del', mark)
end
return woke
""").replace(b"TURN_MS", b"%d" % TURN_MS).replace(b"REMARK_MS", b"%d" % REMARK_MS)

# MARK (a waiter that listens for the next release without a place in the queue: a fenced lock's,
# or a plain lock's before its first queued attempt)
# KEYS[1]  the wake mark
# ARGV[1]  how long it lasts, in milliseconds (the waiter's pause, and a margin)
# Returns  1
MARK = b"""\
redis.call('set', KEYS[1], '1', 'PX', ARGV[1])
return 1
"""

# ACQUIRE_QUEUED (an attempt of a waiter of a plain lock; see "Turns" above)
# KEYS[1]  the lock key
# KEYS[2]  its queue (``:wait``)
# KEYS[3]  its turn (``:next``)
# KEYS[4]  its wake mark (``:wake``: set for as long as the queue lasts, where the waiter queues)
# ARGV[1]  the token of this acquisition
# ARGV[2]  the time to live in milliseconds
# ARGV[3]  the waiter's member (``<id>|<deadline ms>``)
# ARGV[4]  the waiter's score (when it began to wait, microseconds since the epoch)
# ARGV[5]  how long the queue (and the mark) outlive this attempt, in milliseconds
# Returns  1 if the key was free and the turn nobody's or this waiter's (the key is now set and
#          the waiter out of the queue), else 0 (the waiter is in the queue, in its place, and the
#          name is marked: the next release looks for it).
# UNQUEUE (a queued waiter that got the lock leaves the queues of the masters that refused it)
# KEYS[1]  the queue
# ARGV[1]  the waiter's member
# Returns  1
UNQUEUE = b"""\
redis.call('zrem', KEYS[1], ARGV[1])
return 1
"""

ACQUIRE_QUEUED = b"""\
if redis.call('exists', KEYS[1]) == 0 then
    local turn = redis.call('get', KEYS[3])
    if not turn or turn == ARGV[3] then
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
        redis.call('zrem', KEYS[2], ARGV[3])
        if turn then
            redis.call('del', KEYS[3])
        end
        return 1
    end
end
redis.call('zadd', KEYS[2], ARGV[4], ARGV[3])
redis.call('pexpire', KEYS[2], ARGV[5])
redis.call('set', KEYS[4], '1', 'PX', ARGV[5])
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

# RELEASE_SIGNAL (a release that wakes the waiters sleeping in BLPOP on a signal list, as
# python-redis-lock's waiters do; its shim, fastredlock.compat.redis_lock, uses it)
# KEYS[1]  the lock key
# KEYS[2]  the signal list
# ARGV[1]  the token of this acquisition
# ARGV[2]  how long the signal lasts, in milliseconds
# Returns  1 if the key held the token: it was deleted, and the list now holds one element, else 0.
RELEASE_SIGNAL = b"""\
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    redis.call('del', KEYS[2])
    redis.call('lpush', KEYS[2], 1)
    redis.call('pexpire', KEYS[2], ARGV[2])
    return 1
end
return 0
"""

# ACQUIRE_NO_EXPIRY (a lock without expiry, as redis-py's Lock without ``timeout`` stores it; its
# shim, fastredlock.compat.redis_py, uses it: the key stays until it is released or deleted)
# KEYS[1]  the lock key
# ARGV[1]  the token of this acquisition
# Returns  1 if the key was free and now holds the token (no TTL), 0 if it is taken.
ACQUIRE_NO_EXPIRY = b"""\
if redis.call('set', KEYS[1], ARGV[1], 'NX') then
    return 1
end
return 0
"""

RELEASE_SHA = hashlib.sha1(RELEASE).hexdigest().encode()
RELEASE_FULL_SHA = hashlib.sha1(RELEASE_FULL).hexdigest().encode()
RELEASE_TAGGED_SHA = hashlib.sha1(RELEASE_TAGGED).hexdigest().encode()
RELEASE_CLUSTER_SHA = hashlib.sha1(RELEASE_CLUSTER).hexdigest().encode()
MARK_SHA = hashlib.sha1(MARK).hexdigest().encode()
WAKE_AFTER_SHA = hashlib.sha1(WAKE_AFTER).hexdigest().encode()
ACQUIRE_NO_EXPIRY_SHA = hashlib.sha1(ACQUIRE_NO_EXPIRY).hexdigest().encode()
ACQUIRE_QUEUED_SHA = hashlib.sha1(ACQUIRE_QUEUED).hexdigest().encode()
EXTEND_SHA = hashlib.sha1(EXTEND).hexdigest().encode()
RELEASE_SIGNAL_SHA = hashlib.sha1(RELEASE_SIGNAL).hexdigest().encode()

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
# Each deleted key's waiters are woken, as by RELEASE.
# Two redis.call per thousand keys (MGET, then one DEL of the keys that were ours), not two per key.
# The usual case, every key still ours, deletes KEYS as given and builds no tables: for 64 keys that
# is about a fifth of the script's cost on the master (the per-key table writes and the concat).
# Chunks of 1000 keep unpack() within Lua's C stack limit.
RELEASE_MANY = b"""\
local n = #KEYS
local values = {}
for first = 1, n, 1000 do
    local last = math.min(first + 999, n)
    if first == 1 and last == n then
        values = redis.call('mget', unpack(KEYS))
    else
        local part = redis.call('mget', unpack(KEYS, first, last))
        for i = first, last do
            values[i] = part[i - first + 1]
        end
    end
end
local i = 1
while i <= n and values[i] == ARGV[i] do
    i = i + 1
end
if i > n then
    for first = 1, n, 1000 do
        redis.call('del', unpack(KEYS, first, math.min(first + 999, n)))
    end
    for j = 1, n do
        redis.pcall('publish', 'fastredlock-wake:' .. KEYS[j], '1')
    end
    return string.rep('1', n)
end
local done, mine = {}, {}
for j = 1, n do
    if values[j] == ARGV[j] then
        mine[#mine + 1] = KEYS[j]
        done[j] = '1'
    else
        done[j] = '0'
    end
end
for first = 1, #mine, 1000 do
    redis.call('del', unpack(mine, first, math.min(first + 999, #mine)))
end
for j = 1, #mine do
    redis.pcall('publish', 'fastredlock-wake:' .. mine[j], '1')
end
return table.concat(done)
"""

RELEASE_MANY_SHA = hashlib.sha1(RELEASE_MANY).hexdigest().encode()


#: The scripts above that a client may send, loaded on every new connection (:mod:`.handshake`).
PRELOADED_PLAIN = (RELEASE, RELEASE_TAGGED, RELEASE_CLUSTER, RELEASE_FULL, WAKE_AFTER, MARK, UNQUEUE, ACQUIRE_QUEUED, EXTEND, RELEASE_SIGNAL, FENCED_ACQUIRE, FENCE_WRITE,
                   ACQUIRE_ALL, RELEASE_MANY)
