"""The lock family over N masters: reentrant locks, read-write locks, counting semaphores.

Every rule of the three kinds lives here, as the scripts each master runs and the plans a front-end
follows; the I/O twins only carry the scripts (``Core.script``: EVALSHA with the EVAL fallback) and
the sync and asyncio handles (:mod:`fastredlock.handles.family`, :mod:`fastredlock.asyncio.family`) only
run what a plan names. A plan step is ``(op, args)``: the name of a core operation and its
arguments, which the sync front-end calls on a core and the asyncio one hands to its loop.

Keys. A name's keys share its hash tag (``{key}`` unless the key already has one, as for the fence
counter), so every script touches one cluster slot. Every key a script writes has a TTL.

Reentrant lock (``dlm.rlock``): one hash per name, ``owner`` (the token) and ``count`` (how many
times the owner entered). The owner's client sends the count it wants (1 at a first acquisition,
its count plus or minus one later): the scripts set it absolutely, so a repeated or rolled-back
round never leaves masters that disagree by more than the round in flight. The key goes, and
waiters are woken, when the count reaches zero. Mutual exclusion is the plain lock's: a first
acquisition needs a quorum of masters where the key did not exist.

Counting semaphore (``dlm.semaphore``): ``limit`` permit slots, each an ordinary Redlock key
(``{key}:permit:<i>``, a plain ``SET NX PX`` value). An attempt first probes one slot (the one
its handle held last, else one at random: alone, a permit costs what a plain lock does); refused,
it sends ``SET NX`` for every slot to every master in one round. A permit is held iff a quorum of
masters gave *the same* slot; the other slots this attempt won anywhere are released behind it. Why it is safe: two holders of slot
``i`` at once would each have a quorum of masters that set ``{key}:permit:<i>`` to its token; two
quorums of N masters share a master, which cannot hold both tokens in one key at once (``NX``,
and owner-checked release and extension). So each slot has at most one holder, and there are
``limit`` slots. (Counting tokens per master instead, "each master admits up to ``limit``", is not
safe for ``limit`` >= 2: different quorums may admit different holders.)

Read-write lock (``dlm.rwlock``): ``{key}:write`` holds the writer's token (an ordinary lock key:
released and extended by the plain scripts); each reader's share is a key of its own,
``{key}:read:<token>`` (``SET PX``: it expires by itself), its token listed in the set
``{key}:readers`` (the set's TTL never shorter than its longest share's; a writer's script takes out
the tokens whose share is gone); ``{key}:writer-waiting`` holds the mark of a writer that found
readers, for a short time that the writer renews at each attempt while it waits. Per master one
script decides: a reader enters iff there is no writer and no waiting writer; a writer enters iff
there is no writer and no live share (else it leaves its mark, if no other writer's mark is there).
Across masters, each side needs a quorum.
Why it is safe: a writer holds a quorum W of masters where no reader share was live when it
entered, and every reader holds a quorum R; W and R share a master, and on that master whichever
entered second was refused while the other was there (its share or key lives until its release or
TTL, the same bound the client's validity respects). Two writers are two plain locks on the write
key. Writers do not starve: while a writer waits, its mark makes the masters refuse new readers,
so the readers that hold drain within their TTL at most; a reader that asks meanwhile is refused
as if a writer held the lock (it waits, and is woken when the writer releases).
"""
from __future__ import annotations

import hashlib
from typing import NamedTuple

from .plans import may_hold
from .scripts import ACQUIRE_QUEUED, MARK, RELEASE, RELEASE_FULL, RELEASE_TAGGED, UNQUEUE, WAKE_SUFFIX
from .replies import KIND_SCRIPT, KIND_SCRIPT_ACQUIRE

#: The plan steps' operations (methods of both I/O twins' ``Core``).
SCRIPT, ACQUIRE_MANY, RELEASE_MANY_NOWAIT = "script", "acquire_many", "release_many_nowait"


def tagged(key, suffix):
    """The key of ``suffix`` beside ``key``, under ``key``'s hash tag (added if it has none)."""
    left = key.find(b"{")
    if left != -1:
        right = key.find(b"}", left + 1)
        if right > left + 1:
            return key + suffix
    return b"{" + key + b"}" + suffix


# --- pieces of Lua the scripts share ---------------------------------------------------------------


def _wake(k):
    """Lua: wake the waiters of ``KEYS[k]`` (PUBLISH on its channel, a pcall as in RELEASE_FULL), then
    return 2 if someone heard it, else 1."""
    return (b"local heard = redis.pcall('publish', 'fastredlock-wake:' .. KEYS[%d], '1')\n"
            b"if type(heard) == 'number' and heard > 0 then\n    return 2\nend\nreturn 1\n" % k)


#: Lua: the readers' set ``KEYS[1]`` lives at least as long as the share just written (``ARGV[2]``
#: ms): its expiry is pushed out when that share ends later, never pulled in (a longer share of
#: another reader may be in it); then return 1. Redis >= 7 (``redis.REDIS_VERSION_NUM`` is set):
#: ``PEXPIRE NX`` sets a new set's expiry in one call, else ``PEXPIRE GT`` pushes it out; older
#: servers compare the ``PTTL``. (Each Lua call costs about as much as a plain lock's ``SET``: the
#: common case, a set made by this share, takes one.)
_OUTLIVE_SHARE = (b"if redis.REDIS_VERSION_NUM then\n"
                  b"    if redis.call('pexpire', KEYS[1], ARGV[2], 'NX') == 0 then\n"
                  b"        redis.call('pexpire', KEYS[1], ARGV[2], 'GT')\n"
                  b"    end\n"
                  b"elseif redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then\n"
                  b"    redis.call('pexpire', KEYS[1], ARGV[2])\n"
                  b"end\nreturn 1\n")

# --- reentrant lock ---------------------------------------------------------------------------------

# RLOCK_ACQUIRE
# KEYS[1]  the lock's hash (fields owner, count)
# ARGV[1]  the owner's token
# ARGV[2]  the time to live in milliseconds
# ARGV[3]  the count the owner will hold (1: a first acquisition, which needs the key absent)
# Returns  1 if the owner now holds the lock with that count, 0 otherwise.
RLOCK_ACQUIRE = b"""\
local owner = redis.call('hget', KEYS[1], 'owner')
if owner == ARGV[1] then
    redis.call('hset', KEYS[1], 'count', ARGV[3])
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
if owner or ARGV[3] ~= '1' or redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('hset', KEYS[1], 'owner', ARGV[1], 'count', '1')
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
"""

# RLOCK_RELEASE
# KEYS[1]  the lock's hash
# ARGV[1]  the owner's token
# ARGV[2]  the count left after this release (0: the key goes, and waiters are woken)
# Returns  1 if the owner held it, 2 if so, the key went and waiters heard it, 0 otherwise.
RLOCK_RELEASE = b"""\
if redis.call('hget', KEYS[1], 'owner') ~= ARGV[1] then
    return 0
end
if tonumber(ARGV[2]) > 0 then
    redis.call('hset', KEYS[1], 'count', ARGV[2])
    return 1
end
redis.call('del', KEYS[1])
""" + _wake(1)

# RLOCK_EXTEND
# KEYS[1]  the lock's hash
# ARGV[1]  the owner's token
# ARGV[2]  the new time to live in milliseconds
# Returns  1 if the owner held it and its expiry was reset, 0 otherwise.
RLOCK_EXTEND = b"""\
if redis.call('hget', KEYS[1], 'owner') == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

# --- counting semaphore -----------------------------------------------------------------------------

# PERMIT_RELEASE (a permit slot is a plain lock key; its release is RELEASE_FULL but for the
# channel: it wakes the semaphore's waiters)
# KEYS[1]  the permit slot
# KEYS[2]  the semaphore's wake key (never written: its channel is the one waiters listen on)
# ARGV[1]  the permit's token
# Returns  1 if the slot held the token and was deleted, 2 if so and waiters heard it, 0 otherwise.
PERMIT_RELEASE = RELEASE_FULL.replace(b"'fastredlock-wake:' .. KEYS[1]", b"'fastredlock-wake:' .. KEYS[2]")

# PERMIT_EXTEND: the plain EXTEND of fastredlock.protocol.scripts on the slot.

# --- read-write lock --------------------------------------------------------------------------------

# A reader's share is a key of its own, ``{key}:read:<token>`` (``SET PX``: it expires by itself,
# no clock is read), listed in the readers' set ``{key}:readers`` (a plain set of tokens, whose TTL
# is never shorter than its longest share's) so a writer can find it. Why not a sorted set scored by
# each share's end (the master's ``TIME``), as before: every Lua ``redis.call`` costs about as much
# as the whole ``SET NX PX`` of a plain lock, and the scores took three more of them per cycle.

# READ_ACQUIRE
# KEYS[1]  the write key    KEYS[2]  the readers' set    KEYS[3]  the writer-waiting mark
# KEYS[4]  the reader's share key ({key}:read:<token>)
# ARGV[1]  the reader's token
# ARGV[2]  the time to live of its share in milliseconds
# Returns  1 if the share was taken (no writer holds, none waits), 0 otherwise.
READ_ACQUIRE = b"""\
if redis.call('exists', KEYS[1], KEYS[3]) > 0 then
    return 0
end
redis.call('set', KEYS[4], '1', 'PX', ARGV[2])
redis.call('sadd', KEYS[2], ARGV[1])
""" + _OUTLIVE_SHARE.replace(b"KEYS[1]", b"KEYS[2]")

# READ_EXTEND
# KEYS[1]  the readers' set    KEYS[2]  the reader's share key
# ARGV[1]  the reader's token
# ARGV[2]  the new time to live of its share in milliseconds
# Returns  1 if the share was live (and listed) and now lasts ARGV[2] more milliseconds, 0 otherwise.
READ_EXTEND = b"""\
if redis.call('sismember', KEYS[1], ARGV[1]) == 0 or redis.call('pexpire', KEYS[2], ARGV[2]) == 0 then
    return 0
end
""" + _OUTLIVE_SHARE

# READ_RELEASE
# KEYS[1]  the readers' set    KEYS[2]  the write key (never written here: its channel is the one
#          waiters listen on)    KEYS[3]  the writer-waiting mark    KEYS[4]  the reader's share key
# ARGV[1]  the reader's token
# Returns  1 if the share was live and was removed, 2 if so, a writer waits, no other reader is
#          listed and waiters heard it, 0 otherwise (its token leaves the set either way). The last
#          reader out wakes the waiters when a writer waits (its mark is there: a writer refused
#          because of readers leaves it, or finds another writer's); with no mark nobody waits for
#          readers, so the common release costs no more calls. A reader killed before its release
#          stays listed until a writer's attempt finds its share gone, and a writer whose mark
#          lapsed is not woken: the writer's backoff covers both.
READ_RELEASE = b"""\
local live = redis.call('del', KEYS[4])
redis.call('srem', KEYS[1], ARGV[1])
if live == 0 then
    return 0
end
if redis.call('exists', KEYS[3]) == 0 or redis.call('exists', KEYS[1]) == 1 then
    return 1
end
""" + _wake(2)

# WRITE_ACQUIRE
# KEYS[1]  the write key    KEYS[2]  the readers' set    KEYS[3]  the writer-waiting mark
# ARGV[1]  the writer's token
# ARGV[2]  the time to live in milliseconds
# ARGV[3]  how long the writer's mark lasts, in milliseconds (it renews it at each attempt)
# ARGV[4]  the writer's mark (one per write handle: it stays the same over the handle's attempts)
# ARGV[5]  the prefix of the readers' share keys ({key}:read:); a listed token whose share key is
#          gone (expired: its reader ended without a release) is taken out of the set
# Returns  1 if the writer now holds the write key (no writer, no live reader), 0 otherwise; a
#          writer refused because of readers leaves its mark (unless another writer's is there).
WRITE_ACQUIRE = b"""\
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
local live = 0
for _, reader in ipairs(redis.call('smembers', KEYS[2])) do
    if redis.call('exists', ARGV[5] .. reader) == 1 then
        live = live + 1
    else
        redis.call('srem', KEYS[2], reader)
    end
end
if live > 0 then
    local mark = redis.call('get', KEYS[3])
    if not mark or mark == ARGV[4] then
        redis.call('set', KEYS[3], ARGV[4], 'PX', ARGV[3])
    end
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('get', KEYS[3]) == ARGV[4] then
    redis.call('del', KEYS[3])
end
return 1
"""

# Writes release and extend with RELEASE_FULL and EXTEND (fastredlock.protocol.scripts) on the
# write key (its waiters, readers and writers, leave no wake mark: the release always wakes them);
# a writer that gives up clears its mark with RELEASE_FULL on the mark.

_SCRIPTS = {}
for _script in (RLOCK_ACQUIRE, RLOCK_RELEASE, RLOCK_EXTEND, PERMIT_RELEASE, READ_ACQUIRE, READ_EXTEND,
                READ_RELEASE, WRITE_ACQUIRE):
    _SCRIPTS[_script] = hashlib.sha1(_script).hexdigest().encode()


#: The lock family's scripts, loaded on every new connection (:mod:`.handshake`).
PRELOADED_FAMILY = (RLOCK_ACQUIRE, RLOCK_RELEASE, RLOCK_EXTEND, PERMIT_RELEASE, READ_ACQUIRE, READ_EXTEND,
                    READ_RELEASE, WRITE_ACQUIRE)


def sha_of(script):
    """The SHA1 digest (hex, as bytes) a master knows ``script`` by."""
    sha = _SCRIPTS.get(script)
    if sha is None:
        sha = _SCRIPTS[script] = hashlib.sha1(script).hexdigest().encode()
    return sha


def script_template(kind, script, keys, own_keys=0):
    """What does not change between the steps of ``script`` on ``keys``: ``(kind, sha, script, the
    arguments' prefix)`` (a handle makes its templates once; :func:`template_step` fills one in).
    ``own_keys``: each step names that many more keys first (a reader's share key), then its
    arguments."""
    # All tuples of bytes: a name's templates, kept by the handles' cache, are left alone by the
    # garbage collector (a list in them had it traverse every cached name, again and again).
    return kind, sha_of(script), script, (b"%d" % (len(keys) + own_keys),) + tuple(keys)


class CoreStep(NamedTuple):
    """One step of a family plan: the core operation ``op`` (:data:`SCRIPT`: one script on every
    master) and its arguments."""

    op: str
    args: tuple


#: Builds a CoreStep from a tuple without the namedtuple's Python-level ``__new__`` (a hot path).
_new_step = tuple.__new__


def template_step(template, argv, ttl_ms=0, wait=True):
    """The plan step of a :func:`script_template` with the arguments ``argv`` (a tuple)."""
    return _new_step(CoreStep, (SCRIPT, (template[0], template[1], template[2], template[3] + argv, ttl_ms, wait)))


def script_step(kind, script, keys, argv, ttl_ms=0, wait=True):
    """The plan step that runs ``script`` on every master: ``(SCRIPT, core arguments)``."""
    return template_step(script_template(kind, script, keys), tuple(argv), ttl_ms, wait)


def acquisition_step(script, keys, argv, ttl_ms):
    """A script that takes a share or a lock (restart-aware voting and early decision apply)."""
    return script_step(KIND_SCRIPT_ACQUIRE, script, keys, argv, ttl_ms)


def queueable(key):
    """Whether ``key``'s waiters can queue (turns): its queue and turn keys (:func:`tagged`) must
    hash to its slot, which they do unless it has a ``}`` and no hash tag (RELEASE_FULL's Lua agrees)."""
    left = key.find(b"{")
    if left != -1:
        right = key.find(b"}", left + 1)
        if right > left + 1:
            return True
    return b"}" not in key


def wake_mark(key):
    """The wake mark of the plain lock ``key``, which can queue: :data:`~.scripts.WAKE_SUFFIX`
    beside it, in its slot (the plain release takes it with the key)."""
    return tagged(key, WAKE_SUFFIX)


def lean_release(key):
    """The script of the plain release of ``key``: :data:`~.scripts.RELEASE` (no hash tag: the
    script's mark is ``{key}:wake``), :data:`~.scripts.RELEASE_TAGGED` (a hash tag: ``key:wake``),
    or None for a key that cannot queue (no mark: its release is RELEASE_FULL, which always looks
    for waiters). The scripts build the mark's name themselves; it is :func:`wake_mark`'s."""
    # (On every release: the common key, without '}', costs one look for it, memchr when compiled.
    # Interpreted, the braces are looked for as ints, which bytes take without first failing to read
    # a bytes argument as an int: an exception raised and dropped per call.)
    if _CLOSE not in key:
        return RELEASE
    left = key.find(_OPEN)
    if left != -1 and key.find(_CLOSE, left + 1) > left + 1:
        return RELEASE_TAGGED
    return None


_OPEN, _CLOSE = ord("{"), ord("}")


def lean_release_of(keys):
    """The lean release script every one of ``keys`` takes (:func:`lean_release`), or None when
    they need ``RELEASE_FULL`` (one cannot queue, or they are of both forms)."""
    scripts = {lean_release(key) for key in keys}
    return scripts.pop() if len(scripts) == 1 else None


def renewal_ms(retry_delay, retry_jitter, io_timeout):
    """How long something a waiter renews at each attempt lasts (a writer's waiting mark, a queued
    waiter's place): two of its longest sleeps plus a round and 100 ms. It outlives the waiter's
    sleeps, and is gone soon after a waiter killed while waiting."""
    return int(1000 * (2 * (retry_delay + retry_jitter) + io_timeout)) + 100


def queued_step(key, token, ttl_ms, member, score, queue_ms):
    """A plain lock's attempt as a queued waiter (:data:`~.scripts.ACQUIRE_QUEUED`: it takes the
    free key on its turn or nobody's, else keeps its place in the queue for ``queue_ms``)."""
    return acquisition_step(ACQUIRE_QUEUED, [key, tagged(key, b":wait"), tagged(key, b":next"),
                                             tagged(key, WAKE_SUFFIX)],
                            [token, ms(ttl_ms), member, score, ms(queue_ms)], ttl_ms)


def mark_step(key, pause):
    """A waiter of the plain lock ``key`` (which can queue) that listens without a place in the
    queue marks the name for its pause of ``pause`` seconds and a margin (:data:`~.scripts.MARK`;
    written, not awaited): else a release that finds no mark wakes nobody."""
    return script_step(KIND_SCRIPT, MARK, [tagged(key, WAKE_SUFFIX)], [ms(int(pause * 1000) + 100)], 0, False)


def unqueue_step(key, member):
    """Take a waiter that got the lock out of the queues of the masters that refused it (written
    behind the attempt, not awaited: else the next release there names it, and nobody comes)."""
    return script_step(KIND_SCRIPT, UNQUEUE, [tagged(key, b":wait")], [member], 0, False)


def owner_step(script, keys, argv, ttl_ms=0, wait=True):
    """An owner-checked script (release or extension: ``:1``/``:2`` done, ``:0`` not ours)."""
    return script_step(KIND_SCRIPT, script, keys, argv, ttl_ms, wait)


def ms(value):
    """An integer of milliseconds as a script argument."""
    return b"%d" % value


# --- the semaphore's decision -----------------------------------------------------------------------
def permit_keys(key, limit):
    """The ``limit`` permit slots of the semaphore ``key``."""
    return [tagged(key, b":permit:%d" % i) for i in range(limit)]


def choose_permit(rounds, start):
    """Which slot an attempt holds: the first slot from ``start`` (wrapping) whose round reached a
    quorum (``Round.ok``: a quorum of masters set that slot to this attempt's token), or -1."""
    n = len(rounds)
    for step in range(n):
        i = (start + step) % n
        if rounds[i].ok:
            return i
    return -1


def permit_leftovers(rounds, held):
    """The slots an attempt must release: every slot but ``held`` that a master may have set."""
    return [i for i in range(len(rounds)) if i != held and may_hold(rounds[i].outcomes)]


# --- inspection (one round of plain reads; nothing is written) --------------------------------------
#: The kinds an inspection knows.
RLOCK, RWLOCK, SEMAPHORE = "rlock", "rwlock", "semaphore"


def inspect_reads(kind, key, limit=0):
    """The read commands of an inspection of the family lock ``key`` of ``kind``, in reply order:
    pairs of rows (the holder's value, its PTTL) for each part that has one holder (the reentrant
    lock's owner; the writer; each permit slot), then the kind's extra rows: the owner's count;
    the number of reader shares (live, or expired and not pruned yet), their set's PTTL, and
    whether a writer's waiting mark is there."""
    if kind == RLOCK:
        k = tagged(key, b":rlock")
        return [(b"HGET", k, b"owner"), (b"PTTL", k), (b"HGET", k, b"count")]
    if kind == RWLOCK:
        write, readers = tagged(key, b":write"), tagged(key, b":readers")
        return [(b"GET", write), (b"PTTL", write), (b"SCARD", readers), (b"PTTL", readers),
                (b"EXISTS", tagged(key, b":writer-waiting"))]
    if kind == SEMAPHORE:
        reads = []
        for slot in permit_keys(key, limit):
            reads.append((b"GET", slot))
            reads.append((b"PTTL", slot))
        return reads
    raise ValueError("kind must be %r, %r or %r, not %r" % (RLOCK, RWLOCK, SEMAPHORE, kind))


def parts_of(kind, limit=0):
    """How many single-holder parts (pairs of rows) an inspection of ``kind`` starts with."""
    return limit if kind == SEMAPHORE else 1


def at_least_on_quorum(values, quorum):
    """The largest number that a quorum of masters report at least (the ints of ``values``; None
    where a master did not answer): 0 when fewer than a quorum answered."""
    known = sorted((v for v in values if v is not None), reverse=True)
    return known[quorum - 1] if len(known) >= quorum else 0
