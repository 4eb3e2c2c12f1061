"""Batches: K locks in one round (acquire_many / release_many) and all-or-nothing lock_all."""
from __future__ import annotations

import pytest


def test_acquire_many_some_taken(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls)
    names = [f"{name}:{i}" for i in range(64)]
    taken = make_client(masters.urls).acquire_many(names[::4], ttl=5.0)
    assert all(taken)
    got = dlm.acquire_many(names, ttl=5.0)
    for i, lock in enumerate(got):
        if i % 4 == 0:
            assert lock is None
            assert all(m.command("GET", names[i]) == taken[i // 4].token for m in masters)
        else:
            assert lock is not None and lock.locked() and lock.name == names[i]
            assert 4.8 < lock.validity <= 5.0
    held = [lk for lk in got if lk is not None]
    assert len({lk.token for lk in held}) == len(held)
    assert dlm.release_many(held) == [True] * len(held)
    assert all(not lk.locked() for lk in held)
    assert sum(keys_on(masters, n) for n in names) == 16 * 5
    assert make_client(masters.urls).release_many(taken) == [True] * 16
    assert sum(keys_on(masters, n) for n in names) == 0


def test_acquire_many_with_quorum_lost_leaves_nothing(make_client, fault_masters, name, keys_on):
    dlm = make_client(fault_masters.urls)
    for m in fault_masters[:3]:
        m.kill()
    names = [f"{name}:{i}" for i in range(10)]
    assert dlm.acquire_many(names, ttl=5.0) == [None] * 10
    assert sum(keys_on(fault_masters, n) for n in names) == 0


def test_release_many_reports_not_owned(make_client, masters, name):
    dlm = make_client(masters.urls)
    a, b = dlm.acquire_many([f"{name}:a", f"{name}:b"], ttl=5.0)
    for m in masters:
        m.command("DEL", f"{name}:b")
    assert dlm.release_many([a, b]) == [True, False]


def test_lock_all_is_all_or_nothing(make_client, masters, name, keys_on):
    dlm = make_client(masters.urls)
    names = [f"{name}:{i}" for i in range(5)]
    blocker = dlm.lock(names[3], ttl=5.0)
    assert blocker.acquire()
    assert dlm.lock_all(names, ttl=5.0) is None
    assert sum(keys_on(masters, n) for n in names) == 5  # only the blocker's key
    blocker.release()
    group = dlm.lock_all(names, ttl=5.0)
    assert group is not None and all(lk.locked() for lk in group)
    assert len({lk.token for lk in group}) == 1
    assert sum(keys_on(masters, n) for n in names) == 25
    assert dlm.release_many(group) == [True] * 5
    assert sum(keys_on(masters, n) for n in names) == 0


def test_batch_arguments_are_checked(make_one_client, masters, name):
    dlm = make_one_client(masters.urls)
    with pytest.raises(ValueError, match="names"):
        dlm.acquire_many([], ttl=1.0)
    with pytest.raises(ValueError, match="names"):
        dlm.lock_all([name, name], ttl=1.0)
    with pytest.raises(TypeError, match="names"):
        dlm.acquire_many(name, ttl=1.0)
    with pytest.raises(ValueError, match="ttl"):
        dlm.acquire_many([name], ttl=-1)
    with pytest.raises(TypeError, match="locks"):
        dlm.release_many([name])


_UNSET = object()


def test_batch_handles_match_single_handles(make_client, masters, name):
    # acquire_many builds its handles without Lock.__init__: every slot must be set as there
    dlm = make_client(masters.urls)
    single = dlm.lock(f"{name}:single", ttl=5.0)
    assert single.acquire(blocking=False)
    (batch,) = dlm.acquire_many([f"{name}:batch"], ttl=5.0)
    per_acquisition = {"name", "key", "token", "_valid_until", "_last", "_acquired_at", "_carrier", "__weakref__"}
    for slot in type(single).__slots__:
        if slot not in per_acquisition:
            # (unset on both is equal too: the interpreted lock.py leaves slots unset that the
            # compiled one starts as None, e.g. _family_kind)
            assert getattr(batch, slot, _UNSET) == getattr(single, slot, _UNSET), slot
    assert batch.key == dlm.lock(f"{name}:batch").key and batch.ttl == 5.0
    assert abs(batch._acquired_at - single._acquired_at) < 1.0
    assert dlm.release_many([batch, single]) == [True, True]
    assert batch.token is None and single.token is None and not batch.locked()


def test_batch_tokens_are_distinct_from_single_tokens():
    from fastredlock.engine import tokens as _tokens

    singles = {_tokens.new_token() for _ in range(2000)}
    batches = [_tokens.new_tokens(k) for k in (1, 2, 64, 1024, 1025, 3000)]
    every = [t for batch in batches for t in batch]
    assert len(set(every)) == len(every)
    assert not singles & set(every)
    assert all(t.split(b":")[0] == next(iter(singles)).split(b":")[0] for t in every)
