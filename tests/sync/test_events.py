"""``on_event``: every acquisition, refusal, extension, release and loss reaches the hook, with the
right kind, name, durations, attempts and ok flag; a raising hook never breaks a lock; no hook
(the default) sees nothing. Real masters, both cores; the asyncio client's events in
tests/asyncio/test_async_events.py."""
from __future__ import annotations

import logging
import time

import pytest

from fastredlock.events import ACQUIRED, EXTENDED, LOST, REFUSED, RELEASED, LockEvent


def test_a_lock_life_in_events(make_client, masters, name):
    seen = []
    dlm = make_client(masters.urls, on_event=seen.append, retry_count=1, retry_delay=0.05, retry_jitter=0.0)
    lock = dlm.lock(name, ttl=5)
    assert lock.acquire()
    time.sleep(0.05)
    lock.extend()
    rival = dlm.lock(name, ttl=5)
    assert not rival.acquire()
    lock.release()
    kinds = [e.kind for e in seen]
    assert kinds == [ACQUIRED, EXTENDED, REFUSED, RELEASED], seen
    acquired, extended, refused, released = seen
    assert all(isinstance(e, LockEvent) and e.name == name for e in seen)
    assert acquired.attempts == 1 and acquired.ok and 0 < acquired.seconds < 1
    assert extended.ok and extended.seconds >= 0.05
    assert refused.attempts == 2 and not refused.ok and refused.seconds >= 0.05  # one retry delay
    assert released.ok and released.seconds >= 0.05


def test_an_unconfirmed_release_and_a_lost_lock(make_client, fault_masters, name):
    seen = []
    dlm = make_client(fault_masters.urls, on_event=seen.append, restart_aware=False)
    lock = dlm.lock(name, ttl=5)
    assert lock.acquire()
    for m in fault_masters:
        m.command("DEL", name)  # the key vanishes under the holder
    with pytest.raises(Exception):
        lock.release()
    assert seen[-1].kind == RELEASED and not seen[-1].ok

    lost = dlm.lock(name, ttl=0.6, auto_extend=True)
    assert lost.acquire()
    for m in fault_masters:
        m.command("DEL", name)  # the watchdog's next renewal is refused: lost
    deadline = time.monotonic() + 5
    while not any(e.kind == LOST for e in seen):
        assert time.monotonic() < deadline, seen
        time.sleep(0.02)
    event = [e for e in seen if e.kind == LOST][0]
    assert not event.ok and event.name == name and event.seconds > 0


def test_renewals_are_extensions(make_client, masters, name):
    seen = []
    dlm = make_client(masters.urls, on_event=seen.append)
    with dlm.lock(name, ttl=0.3, auto_extend=True):
        time.sleep(0.5)
    kinds = [e.kind for e in seen]
    assert kinds[0] == ACQUIRED and kinds[-1] == RELEASED and kinds.count(EXTENDED) >= 2, kinds


def test_batches(make_client, masters, name):
    seen = []
    dlm = make_client(masters.urls, on_event=seen.append)
    names = [f"{name}:{i}" for i in range(3)]
    other = dlm.lock(names[1], ttl=5)
    assert other.acquire()
    got = dlm.acquire_many(names, ttl=5)
    assert [e.kind for e in seen[1:]] == [ACQUIRED, REFUSED, ACQUIRED]
    assert [e.name for e in seen[1:]] == names and all(e.attempts == 1 for e in seen[1:])
    seen.clear()
    assert dlm.release_many([lock for lock in got if lock]) == [True, True]
    other.release()
    assert [(e.kind, e.ok) for e in seen] == [(RELEASED, True)] * 3
    seen.clear()
    together = dlm.lock_all(names, ttl=5)
    assert [e.kind for e in seen] == [ACQUIRED] * 3
    dlm.release_many(together)


def test_a_raising_hook_is_logged_and_the_lock_still_works(make_client, masters, name, caplog, keys_on):
    def hook(event):
        raise RuntimeError("boom")

    dlm = make_client(masters.urls, on_event=hook)
    with caplog.at_level(logging.ERROR, logger="fastredlock"):
        with dlm.lock(name, ttl=5) as lock:
            assert lock.locked()
    assert keys_on(masters, name) == 0
    assert sum("on_event hook raised" in r.getMessage() for r in caplog.records) == 2


def test_set_later_and_removed(make_client, masters, name):
    dlm = make_client(masters.urls)
    assert dlm.on_event is None
    seen = []
    dlm.on_event = seen.append
    with dlm.lock(name, ttl=5):
        pass
    dlm.on_event = None
    with dlm.lock(name, ttl=5):
        pass
    assert [e.kind for e in seen] == [ACQUIRED, RELEASED]
    with pytest.raises(TypeError, match="on_event must be callable"):
        dlm.on_event = 3
