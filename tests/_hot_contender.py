"""Worker of the threads x processes contention test: T threads share one client in this process.

Every thread takes its own handle on the same name, locks, checks an independent counter (INCR must
answer 1: nobody else holds it), unlocks. The counter lives on a master the lock client never talks
to, over a plain blocking connection per thread (tests/_contender.py's ``_Counter``).
"""
from __future__ import annotations

import threading
import time

from fastredlock import Redlock

from _contender import _Counter


def contend_threads(urls, core, name, counter_port, seconds, threads, result_queue, ready_queue, go,
                    auto_pipeline=True) -> None:
    dlm = Redlock(urls, core=core, retry_delay=0.002, retry_jitter=0.004, restart_aware=False,
                  auto_pipeline=auto_pipeline)
    totals = [[0, 0, 0] for _ in range(threads)]  # held, overlaps, errors per thread
    start = threading.Barrier(threads + 1)

    def body(k: int) -> None:
        counter = _Counter(counter_port)
        start.wait()
        end = time.monotonic() + seconds
        mine = totals[k]
        while time.monotonic() < end:
            lock = dlm.lock(name, ttl=2.0)
            try:
                if not lock.acquire(timeout=0.5):
                    continue
            except Exception:
                mine[2] += 1
                continue
            try:
                if counter.call(b"INCR", b"holders") != 1:
                    mine[1] += 1
                time.sleep(0.0002)
                counter.call(b"DECR", b"holders")
                mine[0] += 1
            finally:
                lock.release()

    workers = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(threads)]
    for t in workers:
        t.start()
    ready_queue.put(1)
    go.wait(60)  # start together: process start-up on a loaded machine takes seconds
    start.wait()
    for t in workers:
        t.join()
    pool = len(dlm._pool)
    carried = dlm._combiner.carried
    dlm.close()
    result_queue.put(([tuple(t) for t in totals], pool, carried))
