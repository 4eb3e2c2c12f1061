"""Wall-time overhead of a layer over the core API, measured A/B interleaved in one process.

On a shared 2-core VM the lock rate drifts by ±30% within a minute, so two separate runs cannot
show a 3% difference. Here the two variants run in alternating blocks of ``--block`` lock+unlock
cycles on the same masters, in the same process, for ``--blocks`` pairs; a drift of the machine
hits both sides of a pair alike. The overhead is the median over pairs of (B block time / A block
time) - 1, with its interquartile range.

    python benchmarks/ab_overhead.py --variant hook            # no-op on_event hook vs none, N=5
    python benchmarks/ab_overhead.py --variant prometheus      # fastredlock.metrics' Prometheus hook
    python benchmarks/ab_overhead.py --variant redis-py-shim   # compat.redis_py.Lock vs the core API, N=1
    python benchmarks/ab_overhead.py --variant redis-lock-shim # compat.redis_lock.Lock vs the core API, N=1
    python benchmarks/ab_overhead.py --variant redis-lock-shim --signal  # ... vs the core API doing the same server work

It starts its own masters (``fastredlock.testing.start_masters``). For the client's own cost
without any noise, count instructions instead (``benchmarks/instructions.py``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src"))

import fastredlock  # noqa: E402
from fastredlock.testing import start_masters  # noqa: E402

VARIANTS = ("hook", "prometheus", "redis-py-shim", "redis-lock-shim")


def core_cycle(urls: List[str], core: str, name: str, hook: str = "", signal: bool = False) -> Callable[[], None]:
    """One lock+unlock through the core API (``dlm.lock(name).acquire()/release()``); ``signal``:
    the release also pushes to a signal list (``release(signal=...)``, the server work that
    python-redis-lock's protocol adds to a release)."""
    # restart-aware voting off: the masters were started a moment ago (it costs nothing per cycle)
    dlm = fastredlock.Redlock(urls, core=core, retry_count=0, restart_aware=False)
    if hook == "noop":
        dlm.on_event = lambda event: None
    elif hook == "prometheus":
        import prometheus_client

        from fastredlock import metrics

        metrics.instrument_prometheus(dlm, prometheus_client.CollectorRegistry())

    wake = (f"lock-signal:{name}", 1000) if signal else None

    def cycle() -> None:
        lock = dlm.lock(name, ttl=10.0)
        if not lock.acquire(blocking=False):
            raise RuntimeError("an uncontended lock was refused")
        lock.release(signal=wake)

    return cycle


def shim_cycle(url: str, core: str, name: str, which: str) -> Callable[[], None]:
    """One lock+unlock through a drop-in shim, used the way its original's README shows."""
    import redis

    import fastredlock.compat

    fastredlock.compat.configure(core=core, restart_aware=False)
    conn = redis.Redis.from_url(url)
    if which == "redis-py-shim":
        from fastredlock.compat.redis_py import Lock

        def cycle() -> None:
            lock = conn.lock(name, timeout=10.0, lock_class=Lock)
            if not lock.acquire(blocking=False):
                raise RuntimeError("an uncontended lock was refused")
            lock.release()
    else:
        from fastredlock.compat import redis_lock

        def cycle() -> None:
            lock = redis_lock.Lock(conn, name, expire=10)
            if not lock.acquire(blocking=False):
                raise RuntimeError("an uncontended lock was refused")
            lock.release()

    return cycle


def block_time(cycle: Callable[[], None], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        cycle()
    return time.perf_counter() - t


def measure(a: Callable[[], None], b: Callable[[], None], blocks: int, block: int) -> Tuple[float, float, float, float]:
    """(median overhead, q1, q3, A's cycles/s) over ``blocks`` interleaved pairs (order alternates)."""
    for _ in range(3):  # warm both (connections, scripts loaded)
        block_time(a, block)
        block_time(b, block)
    ratios, a_times = [], []
    for i in range(blocks):
        if i % 2:
            tb = block_time(b, block)
            ta = block_time(a, block)
        else:
            ta = block_time(a, block)
            tb = block_time(b, block)
        ratios.append(tb / ta - 1.0)
        a_times.append(ta)
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q[0], q[2], block / statistics.median(a_times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", choices=VARIANTS, default="hook")
    p.add_argument("--core", choices=("cython", "python"), default="cython")
    p.add_argument("--blocks", type=int, default=60, help="interleaved pairs (default 60)")
    p.add_argument("--block", type=int, default=200, help="lock+unlock cycles per block (default 200)")
    p.add_argument("--signal", action="store_true",
                   help="the core API side releases with a signal list push as well (the server work of "
                        "python-redis-lock's release: compare with --variant redis-lock-shim)")
    args = p.parse_args()
    shim = args.variant.endswith("-shim")
    n = 1 if shim else 5
    with start_masters(n) as masters:
        urls = [m.url for m in masters]
        a = core_cycle(urls, args.core, "ab:a", signal=args.signal)
        if shim:
            b = shim_cycle(urls[0], args.core, "ab:b", args.variant)
        else:
            b = core_cycle(urls, args.core, "ab:b", "noop" if args.variant == "hook" else "prometheus")
        med, q1, q3, rate = measure(a, b, args.blocks, args.block)
    print(f"{args.variant} ({args.core} core{', signal release' if args.signal else ''}, N={n}): overhead {med * 100:+.1f}% "
          f"(IQR {q1 * 100:+.1f}%..{q3 * 100:+.1f}%) over {args.blocks} pairs of {args.block} cycles; "
          f"core API at {rate:,.0f} cycles/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
