"""Threads x processes through one client per process, with the executor pipelining the threads'
requests (``auto_pipeline``, fastredlock.engine.combine) or giving each thread a core of the pool:
never two holders at once, checked by an independent counter (tests/_contender.py).
"""
from __future__ import annotations

import pytest

from fastredlock.testing import LocalMaster

from _contender import contend_threads, run_contenders


@pytest.mark.slow
@pytest.mark.parametrize("auto_pipeline", [True, False], ids=["pipelined", "pool"])
def test_threads_times_processes_never_overlap(core, masters, name, keys_on, auto_pipeline):
    counter = LocalMaster().start()
    try:
        reports = run_contenders(
            contend_threads, 3, (masters.urls, core, name, counter.port, 3.0, 4), (auto_pipeline,)
        )
        per_thread = [t for threads, _pool, _carried in reports for t in threads]
        assert sum(t[1] for t in per_thread) == 0, f"two holders at once: {per_thread}"
        assert sum(t[2] for t in per_thread) == 0, per_thread
        assert sum(t[0] for t in per_thread) > 50, per_thread
        assert sum(1 for t in per_thread if t[0] > 0) >= 6  # threads of several processes got it
        if auto_pipeline:
            # requests of one process's threads rode together (acquires of one name, and releases
            # written before the acquires of the same name in one round)
            assert sum(carried for _threads, _pool, carried in reports) > 0, reports
        else:
            assert all(pool >= 2 for _threads, pool, _carried in reports)  # the threads did not share one core
        assert keys_on(masters, name) == 0
        assert counter.command("GET", "holders") == b"0"
    finally:
        counter.stop()


@pytest.mark.slow
def test_threads_times_processes_overlap_when_the_lock_excludes_nobody(core, masters, name):
    # The negative control of the counter above: every thread locking a name of its own.
    counter = LocalMaster().start()
    try:
        reports = run_contenders(
            contend_threads, 2, (masters.urls, core, name, counter.port, 1.0, 4), (True, True)
        )
        per_thread = [t for threads, _pool, _carried in reports for t in threads]
        assert sum(t[0] for t in per_thread) > 10, per_thread  # they did hold, through the real client
        assert sum(t[1] for t in per_thread) > 0, f"the counter saw no overlap without exclusion: {per_thread}"
    finally:
        counter.stop()
