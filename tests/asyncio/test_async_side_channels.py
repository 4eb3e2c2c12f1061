"""The asyncio client's wake-on-release connections are guarded like the sync client's: a master
that streams 200 MB on one is cut off at the reply limit (the client's memory stays flat), one that
begins a reply and goes silent is dropped after the reply deadline, and the waiting task goes on
by its backoff. The hostile master is a small real loopback server (tests/_peers.py)."""
from __future__ import annotations

import threading
import time

from fastredlock.engine.wake import MAX_REPLY, reply_within

from _peers import Peer, PeakRss, begin_and_go_silent, stream_after_subscribe


def test_a_200mb_stream_on_the_wake_connection_is_cut(arun, aclient, make_client, masters, name):
    with Peer(stream_after_subscribe) as hostile:
        holder = make_client(masters.urls[:2], connect_timeout=0.2)
        held = holder.lock(name, ttl=5.0)
        memory = PeakRss()

        async def main():
            urls = [f"redis://127.0.0.1:{hostile.port}"] + masters.urls[:2]
            async with aclient(urls, connect_timeout=0.2, retry_count=None, retry_delay=0.1) as dlm:
                async with dlm.lock(name + ":warm", ttl=5.0):
                    pass
                assert held.acquire(timeout=3.0)
                timer = threading.Timer(1.0, held.release)
                with memory:
                    timer.start()
                    try:
                        started = time.monotonic()
                        lock = dlm.lock(name, ttl=5.0)
                        assert await lock.acquire(timeout=5.0)
                        waited = time.monotonic() - started
                        await lock.release()
                    finally:
                        timer.cancel()
                return waited

        waited = arun(main())
        streams = [c for c in hostile.conns if getattr(c, "streamed", False)]
        assert streams, "the notification connection never subscribed on the hostile master"
        assert all(c.closed.wait(5.0) for c in streams)
        growth = memory.growth
        print(f"\nasyncio wake stream: client memory grew {growth / 1e6:.1f} MB (peak); at most "
              f"{max(c.sent for c in streams) / 1e6:.1f} MB sent on one connection; waited {waited:.2f}s")
        assert growth < 10e6, f"client memory grew {growth / 1e6:.1f} MB"
        assert max(c.sent for c in streams) < MAX_REPLY + (16 << 20)
        assert 0.9 < waited < 3.0


def test_a_reply_begun_and_never_finished_drops_the_wake_connection(arun, aclient, make_client, masters, name):
    with Peer(begin_and_go_silent) as hostile:
        holder = make_client(masters.urls[:2], connect_timeout=0.2)

        async def main():
            urls = [f"redis://127.0.0.1:{hostile.port}"] + masters.urls[:2]
            async with aclient(urls, connect_timeout=0.2, retry_count=None, retry_delay=0.1) as dlm:
                with holder.lock(name, ttl=5.0):
                    assert not await dlm.lock(name, ttl=5.0).acquire(timeout=reply_within(0.2) + 1.0)

        arun(main())
        begun = [c for c in hostile.conns if hasattr(c, "began")]
        assert begun
        c = begun[0]
        assert c.closed.wait(3.0)
        assert hasattr(c, "ended") and c.ended - c.began < reply_within(0.2) + 0.8
