"""Hot paths: batches of 64, threads sharing one client, a stalled master (issue 5).

As pytest-benchmark cases (both cores; the raw 64-per-write reference beside the batch)::

    pytest benchmarks/bench_hot_paths.py --benchmark-only --benchmark-group-by=group

As a script that measures the issue's targets in one run, interleaved, and prints medians::

    python benchmarks/bench_hot_paths.py                 # 5 rounds of 3 s per measurement
    python benchmarks/bench_hot_paths.py --rounds 3 --seconds 2

- threads: lock+unlock cycles/s of 4 threads sharing one client vs 1 thread (distinct names), with
  automatic pipelining (the default) and with ``auto_pipeline=False`` (a pool: a core per thread);
- batch: acquire_many + release_many of 64 names, locks/s, vs ``RawMux`` (fastredlock/bench/adapters.py:
  64 ``SET NX PX`` per write, then 64 ``EVALSHA``; pure Python + hiredis) in the same rounds;
- stall: one of 5 masters SIGSTOPped; what the first acquire costs (default early return, and
  ``wait_for_all=True``) and then the acquires while it cools down.

Every number is a median over rounds; the machine is noisy, compare ratios within one run.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
from typing import Callable, Dict, List

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fastredlock.bench.adapters import RawMux  # noqa: E402

import fastredlock  # noqa: E402

BATCH = 64


def _client(urls: List[str], core: str, **kwargs) -> fastredlock.Redlock:
    # The masters a benchmark starts are younger than its TTLs: restart-aware voting would refuse them.
    kwargs.setdefault("restart_aware", False)
    return fastredlock.Redlock(urls, core=core, **kwargs)


def batch_cycle(dlm: fastredlock.Redlock, tag: str) -> Callable[[], int]:
    counter = itertools.count()

    def cycle() -> int:
        i = next(counter)
        locks = dlm.acquire_many([f"{tag}:{i}:{k}" for k in range(BATCH)], ttl=10.0)
        held = [lock for lock in locks if lock is not None]
        dlm.release_many(held)
        return len(held)

    return cycle


def raw_batch_cycle(raw: RawMux, tag: str) -> Callable[[], int]:
    counter = itertools.count()

    def cycle() -> int:
        i = next(counter)
        held = raw.acquire_batch([f"{tag}:{i}:{k}" for k in range(BATCH)])
        raw.release_batch(held)
        return len(held)

    return cycle


def threads_cycles(dlm: fastredlock.Redlock, threads: int, seconds: float, tag: str) -> float:
    """Lock+unlock cycles per second of ``threads`` threads sharing ``dlm`` (distinct names)."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    box: Dict[str, float] = {}

    def body(k: int) -> None:
        start.wait()
        end = box["end"]
        n = 0
        while time.perf_counter() < end:
            lock = dlm.lock(f"{tag}:{k}:{n % 32}", ttl=10.0)
            if not lock.acquire(blocking=False):
                raise AssertionError(f"uncontended acquire failed: {lock.outcomes}")
            lock.release()
            n += 1
        counts[k] = n

    workers = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    began = time.perf_counter()
    box["end"] = began + seconds
    start.wait()
    for t in workers:
        t.join()
    return sum(counts) / (time.perf_counter() - began)


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Locks per second of repeated ``fn()`` (it returns how many locks one call took)."""
    done = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        done += fn()
    return done / (time.perf_counter() - began)


# --- pytest-benchmark cases ------------------------------------------------------------------------
@pytest.fixture
def urls(masters):  # type: ignore[no-untyped-def]
    return masters.urls


def test_batch_64(benchmark, urls, core):  # type: ignore[no-untyped-def]
    """acquire_many + release_many of 64 names (one write per master each)."""
    benchmark.group = "batch of 64 (locks per call)"
    with _client(urls, core) as dlm:
        cycle = batch_cycle(dlm, "bench:x64")
        cycle()
        assert benchmark(cycle) == BATCH


def test_batch_64_raw_reference(benchmark, urls):  # type: ignore[no-untyped-def]
    """The pure-Python floor: 64 SET NX PX per write, then 64 EVALSHA per write."""
    benchmark.group = "batch of 64 (locks per call)"
    raw = RawMux(urls, 10.0)
    cycle = raw_batch_cycle(raw, "bench:raw64")
    cycle()
    assert benchmark(cycle) == BATCH


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("auto_pipeline", [True, False], ids=["pipelined", "pool"])
def test_threads_sharing_one_client(benchmark, urls, core, threads, auto_pipeline):  # type: ignore[no-untyped-def]
    """200 lock+unlock cycles per thread, T threads sharing one client."""
    benchmark.group = "threads sharing one client (200 cycles each)"
    with _client(urls, core, auto_pipeline=auto_pipeline) as dlm:
        def run() -> None:
            workers = [threading.Thread(target=_cycles, args=(dlm, f"bench:t{k}", 200)) for k in range(threads)]
            for t in workers:
                t.start()
            for t in workers:
                t.join()

        run()
        benchmark.pedantic(run, rounds=5, iterations=1)


def _cycles(dlm: fastredlock.Redlock, tag: str, n: int) -> None:
    for i in range(n):
        lock = dlm.lock(f"{tag}:{i % 32}", ttl=10.0)
        if not lock.acquire(blocking=False):
            raise AssertionError("uncontended acquire failed")
        lock.release()


# --- the script -----------------------------------------------------------------------------------
def stall_costs(core: str, wait_for_all: bool, io: float) -> Dict[str, float]:
    """Start 5 masters, SIGSTOP one; return what acquires cost before and during its cool-down."""
    from fastredlock.testing import start_masters

    with start_masters(5) as local, _client(local.urls, core, io_timeout=io, wait_for_all=wait_for_all,
                                            cooldown=2.0, retry_count=0) as dlm:
        for k in range(20):  # warm: connections open, scripts cached
            lock = dlm.lock(f"warm:{k}", ttl=10.0)
            lock.acquire()
            lock.release()
        local[2].pause()
        try:
            costs = []
            for k in range(21):
                lock = dlm.lock(f"stall:{k}", ttl=10.0)
                began = time.perf_counter()
                ok = lock.acquire(blocking=False)
                costs.append(time.perf_counter() - began)
                assert ok, lock.outcomes
                lock.release()
            skipped = dlm.stats()[2].skipped
        finally:
            local[2].resume()
    return {"first": costs[0], "then_median": statistics.median(costs[1:]), "then_max": max(costs[1:]),
            "skipped": skipped}


def main(argv: List[str] = None) -> int:
    from fastredlock.testing import start_masters

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement and round")
    parser.add_argument("--cores", default="cython,python")
    args = parser.parse_args(argv)
    cores = args.cores.split(",")
    results: Dict[str, List[float]] = {}

    def note(key: str, value: float) -> None:
        results.setdefault(key, []).append(value)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} rounds x {args.seconds:g} s", flush=True)
    with start_masters(5) as local:
        urls = local.urls
        raw = RawMux(urls, 10.0)
        clients = {core: _client(urls, core) for core in cores}
        pools = {core: _client(urls, core, auto_pipeline=False) for core in cores}
        for core, dlm in clients.items():  # warm up
            rate(batch_cycle(dlm, f"warm:{core}"), 0.3)
            threads_cycles(dlm, 4, 0.3, f"warm:{core}")
            threads_cycles(pools[core], 4, 0.3, f"warm:{core}")
        rate(raw_batch_cycle(raw, "warm:raw"), 0.3)
        for rnd in range(args.rounds):
            jobs = [("batch raw", lambda: rate(raw_batch_cycle(raw, f"raw{rnd}"), args.seconds))]
            for core, dlm in clients.items():
                jobs.append((f"batch {core}", lambda dlm=dlm, core=core: rate(batch_cycle(dlm, f"{core}{rnd}"), args.seconds)))
                for t in (1, 4):
                    jobs.append((f"threads={t} {core}",
                                 lambda dlm=dlm, t=t, core=core: threads_cycles(dlm, t, args.seconds, f"{core}{rnd}t{t}")))
                    jobs.append((f"threads={t} {core} pool",
                                 lambda t=t, core=core: threads_cycles(pools[core], t, args.seconds, f"{core}{rnd}p{t}")))
            for key, job in jobs:
                note(key, job())
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()), flush=True)
        for dlm in [*clients.values(), *pools.values()]:
            dlm.close()

    med = {k: statistics.median(v) for k, v in results.items()}
    print("\nmedians (locks/s for batches, lock+unlock cycles/s for threads):")
    for key in sorted(med):
        print(f"  {key:27s} {med[key]:>10,.0f}   (rounds: {', '.join(f'{x:,.0f}' for x in results[key])})")
    for core in cores:
        print(f"  {core}: batch / raw reference = {med[f'batch {core}'] / med['batch raw']:.2f}x; "
              f"4 threads / 1 thread = {med[f'threads=4 {core}'] / med[f'threads=1 {core}']:.2f}x "
              f"(pool: {med[f'threads=4 {core} pool'] / med[f'threads=1 {core} pool']:.2f}x)")

    print("\nstalled master (SIGSTOP 1 of 5), io_timeout 50 ms, cooldown 2 s, 21 acquires:")
    for core in cores:
        for wait_for_all in (False, True):
            st = stall_costs(core, wait_for_all, 0.05)
            mode = "wait_for_all=True " if wait_for_all else "early (default)   "
            print(f"  {core:6s} {mode} first {st['first'] * 1e3:6.2f} ms, then median "
                  f"{st['then_median'] * 1e3:5.2f} ms / max {st['then_max'] * 1e3:5.2f} ms "
                  f"({st['skipped']} rounds skipped it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
