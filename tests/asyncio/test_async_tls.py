"""The asyncio client over TLS masters: the event loop's readiness callbacks drive the same TLS
links (handshake, encrypted writes, every read decrypted in full before the loop is asked again)."""
from __future__ import annotations

import asyncio

from fastredlock.testing import paused, start_master

TTL = 5.0


def tls(url, certs, ca=None):
    return f"{url}?ssl_ca_certs={ca or certs.ca}"


def test_lock_extend_release_over_tls(arun, aclient, tls_masters, masters, certs, name, keys_on):
    urls = [tls(u, certs) for u in tls_masters.tls_urls]

    async def main():
        async with aclient(urls, connect_timeout=1.0) as dlm:
            for _ in range(10):
                lock = dlm.lock(name, ttl=TTL)
                assert await lock.acquire()
                assert [o.outcome for o in await lock.settled_outcomes()] == ["ok"] * 5
                assert keys_on(tls_masters, name) == 5
                await lock.extend()
                await lock.release()
                assert keys_on(tls_masters, name) == 0
        # a batch whose replies span several TLS records: all of them decrypted and read
        async with aclient(urls, connect_timeout=1.0, io_timeout=5.0) as dlm:
            locks = await dlm.acquire_many([f"{name}:{j}" for j in range(5000)], ttl=TTL)
            assert all(lock is not None for lock in locks)
            assert await dlm.release_many(locks) == [True] * len(locks)
            # 16 tasks at once ride the same TLS connections
            async def one(j):
                async with dlm.lock(f"{name}:t{j}", ttl=TTL):
                    await asyncio.sleep(0)
            await asyncio.gather(*(one(j) for j in range(16)))
        async with aclient(urls[:3] + masters.urls[:2], connect_timeout=1.0) as mixed:
            async with mixed.lock(name, ttl=TTL) as lock:
                assert [o.outcome for o in await lock.settled_outcomes()] == ["ok"] * 5

    arun(main())


def test_tls_failures_are_outcomes(arun, aclient, tls_masters, certs, tls_binary, name):
    stalled = start_master(tls=certs.server_tls(), binary=tls_binary)
    urls = [tls(tls_masters[0].tls_url, certs, certs.wrong_ca), tls(stalled.tls_url, certs)]
    urls += [tls(u, certs) for u in tls_masters.tls_urls[1:4]]

    async def main():
        async with aclient(urls, cooldown=0, wait_for_all=True, io_timeout=0.2) as dlm:
            lock = dlm.lock(name, ttl=TTL)
            assert await lock.acquire()
            first = (await lock.settled_outcomes())[0]
            assert first.outcome == "tls error" and "CERTIFICATE_VERIFY_FAILED" in first.detail
            await lock.release()
            with paused(stalled):
                loop = asyncio.get_running_loop()
                started = loop.time()
                lock = dlm.lock(name, ttl=TTL)
                assert await lock.acquire()
                assert loop.time() - started < 0.2 + 0.2  # io_timeout + slack: no hang
                assert [o.outcome for o in await lock.settled_outcomes()][1:] == ["timeout", "ok", "ok", "ok"]
                await lock.release()

    try:
        arun(main())
    finally:
        stalled.stop()
