"""The executor's pool of cores (fastredlock.engine.executor): a release goes through the core that
carries its SET, a thread gets back the core it used, and the cores of a client share one health.

Both cores, real masters.
"""
from __future__ import annotations

import threading
import time

from fastredlock.protocol import outcomes as oc
from fastredlock.testing import paused

from _bounded import BOUND, joined
from _rounds import SLOW_IO, warm


def test_release_goes_through_the_core_that_carries_its_set(make_client, fault_masters, name, keys_on):
    """While its SET is unanswered somewhere, a lock is released through the core that sent it: on
    another core's connection the release could overtake the SET."""
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=SLOW_IO)
    warm(dlm, name)
    lock = dlm.lock(name, ttl=5.0)
    with paused(fault_masters[2]):
        assert lock.acquire()
        core = lock._carrier[0]
        assert dlm.executor.checkout(core) is core  # as if another thread were using it right now
        done = threading.Event()
        releaser = threading.Thread(target=lambda: (lock.release(), done.set()))
        releaser.start()
        assert not done.wait(0.2)  # it waits for that core rather than take another
        dlm.executor.checkin(core)
        assert done.wait(10)
        joined(releaser)
    time.sleep(0.1)  # the resumed master runs the SET, then the release behind it
    assert keys_on(fault_masters, name) == 0


def test_a_thread_gets_back_the_core_it_used(make_client, masters):
    dlm = make_client(masters.urls)
    got = {}
    step = threading.Barrier(2, timeout=BOUND)

    def body(k: int) -> None:
        first = dlm.executor.checkout()
        step.wait()  # both hold one: two cores
        dlm.executor.checkin(first)
        step.wait()  # both back in the pool
        again = dlm.executor.checkout()
        dlm.executor.checkin(again)
        got[k] = (first, again)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    joined(*threads)
    assert got[0][0] is not got[1][0]
    assert all(first is again for first, again in got.values())


def test_health_is_shared_by_the_cores_of_a_client(make_client, fault_masters, name):
    dlm = make_client(fault_masters.urls, retry_count=0, io_timeout=0.1, wait_for_all=True)
    warm(dlm, name)
    one, two = dlm.executor.checkout(), dlm.executor.checkout()  # what two threads would hold at the same time
    try:
        assert one.health is two.health is dlm.executor.health
        with paused(fault_masters[1]):
            rnd = one.acquire(b"%s:1" % name.encode(), b"token-1", 5000)
            assert rnd.outcomes[1] == oc.TIMEOUT
            rnd = two.acquire(b"%s:2" % name.encode(), b"token-2", 5000)  # this core never met it
            assert rnd.outcomes[1] == oc.SKIPPED and rnd.elapsed < 0.05
            one.release(b"%s:1" % name.encode(), b"token-1")
            two.release(b"%s:2" % name.encode(), b"token-2")
    finally:
        dlm.executor.checkin(one)
        dlm.executor.checkin(two)
