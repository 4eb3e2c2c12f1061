"""Wall-time A/B of two builds of fastredlock (two checkouts), interleaved on the same masters.

Two worker processes, one importing fastredlock from each ``src/`` folder (each built in place),
run alternating blocks of ``--block`` sequential lock+unlock cycles (sync, or asyncio with
``--asyncio``) on the same masters, for ``--blocks`` pairs; a drift of the machine hits both sides
of a pair alike. Reported: the median over pairs of B's cycles/s ÷ A's, with its interquartile
range, and each side's median cycles/s.

    python benchmarks/ab_commits.py --a /tmp/old/src --b src --masters 5
    python benchmarks/ab_commits.py --a /tmp/old/src --b src --masters 1 --asyncio

Build the other checkout first (e.g. ``git worktree add /tmp/old REV`` and
``python setup.py build_ext --inplace`` there, or copy its built modules). Each worker checks that
it imported the package from its folder.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import List

WORKER = r"""
import asyncio, os, sys, time
path = sys.argv[1]
sys.path.insert(0, path)
import fastredlock, fastredlock.asyncio
if not fastredlock.__file__.startswith(os.path.abspath(path)):
    raise SystemExit(f"imported {fastredlock.__file__}, not the package under {path}")
urls, use_asyncio, tag = sys.argv[2].split(","), sys.argv[3] == "1", sys.argv[4]
name = f"ab:{tag}:{os.getpid()}"
if use_asyncio:
    loop = asyncio.new_event_loop()
    dlm = fastredlock.asyncio.Redlock(urls, restart_aware=False, retry_count=0)
    async def block(k):
        t = time.perf_counter()
        for _ in range(k):
            lock = dlm.lock(name, ttl=10.0)
            if not await lock.acquire(blocking=False):
                raise SystemExit("not acquired")
            await lock.release()
        return time.perf_counter() - t
    run = lambda k: loop.run_until_complete(block(k))
else:
    dlm = fastredlock.Redlock(urls, restart_aware=False, retry_count=0)
    def run(k):
        t = time.perf_counter()
        for _ in range(k):
            lock = dlm.lock(name, ttl=10.0)
            if not lock.acquire(blocking=False):
                raise SystemExit("not acquired")
            lock.release()
        return time.perf_counter() - t
print("ready", fastredlock.CORE, flush=True)
for line in sys.stdin:
    print(run(int(line)), flush=True)
"""


def _worker(path: str, urls: List[str], use_asyncio: bool, tag: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WORKER, path, ",".join(urls), "1" if use_asyncio else "0", tag],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = proc.stdout.readline().split()  # type: ignore[union-attr]
    if not ready or ready[0] != "ready":
        raise SystemExit(f"worker for {path} did not start")
    return proc


def _block(proc: subprocess.Popen, cycles: int) -> float:
    proc.stdin.write(f"{cycles}\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    return cycles / float(proc.stdout.readline())  # type: ignore[union-attr]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="src/ folder of build A (the baseline)")
    p.add_argument("--b", required=True, help="src/ folder of build B")
    p.add_argument("--masters", type=int, default=5)
    p.add_argument("--asyncio", action="store_true", help="the asyncio client's cycles")
    p.add_argument("--blocks", type=int, default=30, help="interleaved pairs (default 30)")
    p.add_argument("--block", type=int, default=300, help="cycles per block (default 300)")
    args = p.parse_args()
    sys.path.insert(0, os.path.abspath(args.b))
    from fastredlock.testing import start_masters

    with start_masters(args.masters) as masters:
        a = _worker(os.path.abspath(args.a), masters.urls, args.asyncio, "a")
        b = _worker(os.path.abspath(args.b), masters.urls, args.asyncio, "b")
        try:
            _block(a, args.block)  # warm-up
            _block(b, args.block)
            ratios, rates_a, rates_b = [], [], []
            for i in range(args.blocks):
                first, second = (a, b) if i % 2 == 0 else (b, a)  # alternate who goes first
                r1, r2 = _block(first, args.block), _block(second, args.block)
                ra, rb = (r1, r2) if first is a else (r2, r1)
                rates_a.append(ra)
                rates_b.append(rb)
                ratios.append(rb / ra)
        finally:
            for proc in (a, b):
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait(timeout=10)
    # A block's rate can depend on its place in the pair (the process that just woke, the master's
    # state): two consecutive pairs, one with each order, are combined (geometric mean) so that
    # such an effect cancels.
    balanced = [(ratios[i] * ratios[i + 1]) ** 0.5 for i in range(0, len(ratios) - 1, 2)]
    q = statistics.quantiles(balanced, n=4)
    kind = "asyncio" if args.asyncio else "sync"
    print(f"N={args.masters} {kind}: B/A median {statistics.median(balanced):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}, "
          f"order-balanced); A {statistics.median(rates_a):,.0f}/s, B {statistics.median(rates_b):,.0f}/s "
          f"({args.blocks} pairs of {args.block} cycles)")


if __name__ == "__main__":
    main()
