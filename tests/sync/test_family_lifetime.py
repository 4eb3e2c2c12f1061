"""The lock family's lifetimes: the watchdog renews every kind (``auto_extend``), ``extend`` resets a
permit's TTL, and a holder killed with ``kill -9`` (a reentrant owner, a reader, a writer, a permit
holder: subprocesses started together) frees its share within its TTL."""
from __future__ import annotations

import time

from _family import kill9, start_holder, tagged

TTL = 1.0


def test_auto_extend_keeps_every_kind(dlm, masters, name):
    rlock = dlm.rlock(name + ":r", ttl=0.3, auto_extend=True)
    reader = dlm.rwlock(name + ":rw", ttl=0.3, auto_extend=True).read
    permit = dlm.semaphore(name + ":s", 2, ttl=0.3, auto_extend=True)
    assert rlock.acquire() and rlock.acquire() and reader.acquire() and permit.acquire()
    time.sleep(0.8)  # well past the TTL: renewed about every 0.1 s
    assert rlock.locked() and reader.locked() and permit.locked()
    assert not dlm.rwlock(name + ":rw", ttl=5).write.acquire(blocking=False)
    rlock.extend()
    other = dlm.semaphore(name + ":s", 2, ttl=0.3)  # not renewed: its TTL is what extend sets
    assert other.acquire()
    other.extend(5)
    slot = tagged(name + ":s", ":permit:%d" % other.slot)
    assert sorted(m.command("PTTL", slot) for m in masters)[2] > 4000  # on a quorum at least
    for lock in (rlock, rlock, reader, permit, other):
        lock.release()


def test_killed_holders_free_their_shares_within_ttl(core, dlm, masters, name):
    kinds = {"rlock": name + ":r", "read": name + ":rw1", "write": name + ":rw2", "permit": name + ":s"}
    procs = {kind: start_holder(core, kind, n, TTL, masters.urls) for kind, n in kinds.items()}
    permit_holder = start_holder(core, "permit", kinds["permit"], TTL, masters.urls)  # the semaphore is full
    takers = {
        "rlock": dlm.rlock(kinds["rlock"], ttl=5),
        "read": dlm.rwlock(kinds["read"], ttl=5).write,     # a killed reader blocks writers
        "write": dlm.rwlock(kinds["write"], ttl=5).read,    # a killed writer blocks readers
        "permit": dlm.semaphore(kinds["permit"], 2, ttl=5),
    }
    assert not any(lock.acquire(blocking=False) for lock in takers.values())
    died = min(kill9(proc) for proc in procs.values())
    for kind, lock in takers.items():
        assert lock.acquire(timeout=3), kind
        assert time.monotonic() - died < TTL + 0.6, kind
        lock.release()
    kill9(permit_holder)


def test_restart_aware_voting_applies_to_every_kind(make_client, masters, name):
    """Masters younger than the restart grace may have forgotten shares: their OKs do not count."""
    strict = make_client(masters.urls, restart_aware=True, restart_grace=3600.0, retry_count=0)
    handles = [strict.rlock(name + ":r"), strict.rwlock(name + ":rw").read, strict.rwlock(name + ":w").write,
               strict.semaphore(name + ":s", 2)]
    for lock in handles:
        assert not lock.acquire(blocking=False)
        assert "restarted recently" in {o.outcome for o in lock.outcomes}
    relaxed = make_client(masters.urls, retry_count=0)  # the control: the same masters, voting off
    for lock in [relaxed.rlock(name + ":r"), relaxed.rwlock(name + ":rw").read, relaxed.semaphore(name + ":s", 2)]:
        assert lock.acquire(blocking=False)
        lock.release()
