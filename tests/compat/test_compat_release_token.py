"""``Lock.release(token=...)``: release an acquisition known only by its token (the hook the shims use)."""
from __future__ import annotations

import pytest

from fastredlock import LockNotOwnedError


def test_release_by_token_from_another_handle(dlm, masters, name, keys_on):
    owner = dlm.lock(name, ttl=5.0)
    assert owner.acquire(blocking=False)
    other = dlm.lock(name, ttl=5.0)
    other.release(token=owner.token.decode())  # str tokens are encoded as UTF-8
    assert keys_on(masters, name) == 0
    assert owner.token is not None  # the owner's handle is not touched
    assert other.token is None


def test_release_by_own_token_clears_the_handle(dlm, masters, name, keys_on):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(blocking=False)
    lock.release(token=lock.token)
    assert lock.token is None and not lock.locked()
    assert keys_on(masters, name) == 0
    assert lock.acquire(blocking=False)  # the handle can be used again
    lock.release()


def test_release_by_wrong_token_keeps_the_lock(dlm, masters, name, keys_on):
    lock = dlm.lock(name, ttl=5.0)
    assert lock.acquire(blocking=False)
    with pytest.raises(LockNotOwnedError) as info:
        dlm.lock(name).release(token=b"not-the-token")
    assert [o.outcome for o in info.value.outcomes] == ["no"] * len(masters)
    assert keys_on(masters, name) == len(masters)
    lock.release()


@pytest.mark.parametrize("bad, error", [(b"", ValueError), ("", ValueError), (42, TypeError)])
def test_release_token_is_checked(one_dlm, name, bad, error):
    with pytest.raises(error, match="token"):
        one_dlm.lock(name).release(token=bad)
