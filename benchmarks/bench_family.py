"""The lock family's speed against the plain lock (indicative: a shared 2-core VM), N=5 masters.

    python benchmarks/bench_family.py                 # all: read lock, semaphore, rlock vs lock; readers 8 vs 1
    python benchmarks/bench_family.py --blocks 10 --seconds 2   # a short run

One thread, uncontended: each kind's acquire+release against the plain lock's, in interleaved blocks
(``ab_overhead.measure``: a drift of the machine hits both sides of a pair alike), as cycles/s and
the ratio to the plain lock. Then readers of one read-write lock: 8 processes at once against one
process alone, reads/s summed. It starts its own masters (``fastredlock.testing.start_masters``).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from typing import Callable, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src"))

import fastredlock  # noqa: E402
from fastredlock.testing import start_masters  # noqa: E402

from ab_overhead import measure  # noqa: E402 (benchmarks/: the interleaved A/B blocks)


def cycle_of(dlm: fastredlock.Redlock, kind: str, name: str) -> Callable[[], None]:
    """One uncontended acquire+release of ``kind`` (a fresh handle each time, as the lock's cycle)."""
    def handle():
        if kind == "lock":
            return dlm.lock(name, ttl=10.0)
        if kind == "read":
            return dlm.rwlock(name, ttl=10.0).read
        if kind == "semaphore":
            return dlm.semaphore(name, 4, ttl=10.0)
        return dlm.rlock(name, ttl=10.0)

    def cycle() -> None:
        lock = handle()
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"an uncontended {kind} was refused")
        lock.release()

    return cycle


def reader(urls: List[str], core: str, name: str, seconds: float, start: float, out, kind: str = "read") -> None:
    """Count ``kind`` cycles on ``name`` until ``seconds`` after ``start``: a reader of one
    read-write lock, or (``kind`` "lock") a plain lock of a name of its own."""
    dlm = fastredlock.Redlock(urls, core=core, restart_aware=False, retry_delay=0.001, retry_jitter=0.001)
    read = dlm.rwlock(name, ttl=10.0).read if kind == "read" else dlm.lock(f"{name}:{os.getpid()}", ttl=10.0)
    while time.time() < start:
        time.sleep(0.001)
    end = time.monotonic() + seconds
    count = 0
    while time.monotonic() < end:
        if read.acquire(timeout=1.0):
            read.release()
            count += 1
    out.put(count)
    dlm.close()


def readers(urls: List[str], core: str, processes: int, seconds: float, kind: str = "read") -> float:
    """Read cycles/s of ``processes`` readers of one name, started together (``kind`` "lock": plain
    lock cycles/s of as many processes, each on a name of its own: nothing shared, the most this
    machine and its masters give ``processes`` clients, the readers' ceiling)."""
    out: "multiprocessing.Queue[int]" = multiprocessing.Queue()
    start = time.time() + 0.5
    procs = [multiprocessing.Process(target=reader, args=(urls, core, "bench:readers", seconds, start, out, kind))
             for _ in range(processes)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--core", choices=("cython", "python"), default="cython")
    p.add_argument("--blocks", type=int, default=30, help="interleaved pairs per kind (default 30)")
    p.add_argument("--block", type=int, default=100, help="cycles per block (default 100)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds of the readers' runs (default 3)")
    p.add_argument("--masters", type=int, default=5, help="how many masters (default 5)")
    p.add_argument("--no-readers", action="store_true", help="only the one-thread ratios")
    args = p.parse_args()
    n = args.masters
    with start_masters(n) as masters:
        urls = [m.url for m in masters]
        dlm = fastredlock.Redlock(urls, core=args.core, retry_count=0, restart_aware=False)
        plain = cycle_of(dlm, "lock", "bench:plain")
        for kind in ("read", "semaphore", "rlock"):
            med, q1, q3, rate = measure(plain, cycle_of(dlm, kind, f"bench:{kind}"), args.blocks, args.block)
            print(f"{kind:9} ({args.core}, N={n}): {rate / (1 + med):8,.0f} cycles/s = {1 / (1 + med):.2f}x the plain "
                  f"lock's {rate:,.0f} (IQR of the overhead {q1 * 100:+.0f}%..{q3 * 100:+.0f}%)")
        dlm.close()
        if args.no_readers:
            return 0
        one = readers(urls, args.core, 1, args.seconds)
        eight = readers(urls, args.core, 8, args.seconds)
        print(f"readers  ({args.core}, N={n}): 1 process {one:,.0f} reads/s; 8 processes {eight:,.0f} reads/s "
              f"= {eight / one:.2f}x ({os.cpu_count()} CPUs shared with the {n} masters)")
        # the ceiling: 8 processes that share nothing (plain locks, a name each) against one
        one_plain = readers(urls, args.core, 1, args.seconds, "lock")
        eight_plain = readers(urls, args.core, 8, args.seconds, "lock")
        print(f"ceiling  ({args.core}, N={n}): plain locks, a name per process: 1 process {one_plain:,.0f}/s; "
              f"8 processes {eight_plain:,.0f}/s = {eight_plain / one_plain:.2f}x; the 8 readers reach "
              f"{eight / eight_plain:.2f} of the 8 unshared plain locks' rate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
