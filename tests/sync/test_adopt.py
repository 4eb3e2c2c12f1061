"""``Lock.adopt(token)``: a handle takes over an acquisition made elsewhere — by another client, or
another process that passed the token on — and can extend and release it; a wrong token is
refused and touches nothing. Real masters, both cores (and the asyncio handle)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fastredlock import LockError, LockNotOwnedError

ADOPT_AND_RELEASE = """
import sys
from fastredlock import Redlock
urls, core, name, token = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
with Redlock(urls, core=core, restart_aware=False) as dlm:
    lock = dlm.lock(name, ttl=5)
    lock.adopt(token)
    lock.extend(20)
    print(round(lock.validity))
    lock.release()
"""


def _pttls(masters, name):
    return [m.command("PTTL", name) for m in masters]


def test_adopt_extend_release(make_client, masters, name, keys_on):
    first, second = make_client(masters.urls), make_client(masters.urls)
    held = first.lock(name, ttl=5)
    assert held.acquire()
    taker = second.lock(name, ttl=30)
    taker.adopt(held.token.decode())
    assert taker.locked() and taker.token == held.token and taker.fence is None
    assert 25 < taker.validity <= 30 and min(_pttls(masters, name)) > 25000  # the TTL became the taker's
    taker.extend(40)
    assert min(_pttls(masters, name)) > 35000
    taker.release()
    assert keys_on(masters, name) == 0
    with pytest.raises(LockNotOwnedError):
        held.release()  # the first handle's lock was released by the taker


def test_a_wrong_token_is_refused_and_touches_nothing(make_client, masters, name):
    dlm = make_client(masters.urls)
    held = dlm.lock(name, ttl=5)
    assert held.acquire()
    before = _pttls(masters, name)
    taker = dlm.lock(name, ttl=60)
    with pytest.raises(LockNotOwnedError, match="not taken over"):
        taker.adopt(b"not-the-token")
    assert taker.token is None and not taker.locked()
    assert all(after <= b for after, b in zip(_pttls(masters, name), before))  # not extended
    held.release()
    with pytest.raises(LockError, match="already holds"):
        again = dlm.lock(name, ttl=5)
        assert again.acquire()
        again.adopt(b"x")


def test_adopt_from_another_process(make_client, masters, name, core, keys_on):
    dlm = make_client(masters.urls)
    held = dlm.lock(name, ttl=5)
    assert held.acquire()
    done = subprocess.run(
        [sys.executable, "-c", ADOPT_AND_RELEASE, ",".join(masters.urls), core, name, held.token.decode()],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert 15 <= int(done.stdout) <= 20
    assert keys_on(masters, name) == 0


def test_an_adopted_lock_is_renewed(make_client, masters, name):
    dlm = make_client(masters.urls)
    held = dlm.lock(name, ttl=0.3)
    assert held.acquire()
    taker = dlm.lock(name, ttl=0.3, auto_extend=True)
    taker.adopt(held.token)
    time.sleep(0.8)  # well past the TTL: only renewals keep it
    assert taker.locked()
    taker.release()


def test_asyncio_adopt(masters, name, core, keys_on):
    import asyncio

    from fastredlock.asyncio import Redlock as AsyncRedlock

    async def main():
        async with AsyncRedlock(masters.urls, core=core, restart_aware=False) as dlm:
            held = dlm.lock(name, ttl=5)
            assert await held.acquire()
            taker = dlm.lock(name, ttl=30)
            with pytest.raises(LockNotOwnedError):
                await taker.adopt(b"wrong")
            await taker.adopt(held.token)
            assert taker.validity > 25
            await taker.release()

    asyncio.run(main())
    assert keys_on(masters, name) == 0
