"""``dlm.inspect_family``: holders, counts, readers and permits of the lock family, one round of reads."""
from __future__ import annotations


import pytest

import fastredlock

from _family import eventually


def test_inspect_rlock_rwlock_semaphore(dlm, masters, name):
    free = dlm.inspect_family(name, "rlock")
    assert not free.held and free.count == 0 and free.parts[0].state == "free"
    lock = dlm.rlock(name, ttl=5)
    assert lock.acquire() and lock.acquire()
    info = eventually(lambda: dlm.inspect_family(name, "rlock").count, 2)
    assert info == 2
    info = dlm.inspect_family(name, "rlock")
    assert info.held and info.parts[0].holders >= 3 and 4.0 < info.parts[0].validity <= 5.0
    assert info.holders == [fastredlock.holder_of(lock._hold().token)]
    assert lock._hold().token.decode("latin-1") not in repr(info.to_dict())  # never the token
    lock.release()
    lock.release()

    rw = [dlm.rwlock(name, ttl=5) for _ in range(3)]
    assert rw[0].read.acquire() and rw[1].read.acquire()
    assert eventually(lambda: dlm.inspect_family(name, "rwlock").readers, 2) == 2
    info = dlm.inspect_family(name, "rwlock")
    assert info.held and info.holders == [] and info.writer_waiting == 0
    rw[0].read.release()
    rw[1].read.release()
    assert rw[2].write.acquire()
    info = dlm.inspect_family(name, "rwlock")
    assert info.parts[0].held and info.readers == 0 and info.holders == [fastredlock.holder_of(rw[2].write.token)]
    rw[2].write.release()

    permits = [dlm.semaphore(name, 3, ttl=5) for _ in range(2)]
    assert all(p.acquire() for p in permits)
    info = dlm.inspect_family(name, "semaphore", limit=3)
    assert len(info.parts) == 3 and len(info.holders) == 2
    assert sorted(j for j, part in enumerate(info.parts) if part.held) == sorted(p.slot for p in permits)
    for p in permits:
        p.release()
    with pytest.raises(ValueError):
        dlm.inspect_family(name, "semaphore")  # the limit is needed
    with pytest.raises(ValueError):
        dlm.inspect_family(name, "mutex")
