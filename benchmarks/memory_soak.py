"""Resident memory over many lock+unlock cycles: it must stay flat (issue 5: < 5 MB over 1M cycles).

    python benchmarks/memory_soak.py                       # 1M cycles on each core, 5 local masters
    python benchmarks/memory_soak.py --cycles 200000 --cores cython
    python benchmarks/memory_soak.py --minutes 10          # stop each core's run after 10 minutes
    python benchmarks/memory_soak.py --straggle 2          # 2 of 5 masters answer 2 ms late
    python benchmarks/memory_soak.py --threads 4           # 4 threads share the client (pipelined)
    python benchmarks/memory_soak.py --tasks 64            # fastredlock.asyncio: 64 tasks, one client

Each core runs in a fresh process: a warm-up of ``--warmup`` cycles (connections, caches, the
allocator's arenas), then the measured cycles; RSS (``VmRSS``) is sampled every 10% and the growth
from the first sample after warm-up is reported, with the peak (``VmHWM``). Every cycle is
``dlm.lock(name).acquire(blocking=False)`` then ``release()`` on one of 64 names, through the
client's public API (handles, tokens, rounds, owed replies, stats: everything a cycle touches).
With ``--straggle MS`` two of the five masters sit behind a :class:`~fastredlock.testing.FaultProxy`
that delays their replies: every acquisition returns before they answer, so every cycle leaves
owed replies for the next round to read (the early-return machinery under load). With ``--threads
T`` the cycles are shared by T threads on one client, whose requests ride together in shared rounds
(the automatic pipelining path: requests, gates, lead hand-offs). With ``--tasks T`` the client
is :mod:`fastredlock.asyncio`'s and T tasks on one event loop share it (their requests ride
together: queue, runner, futures, the loop's callbacks).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List


def _status(field: str) -> float:
    """``VmRSS``/``VmHWM`` of this process, in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def run(core: str, urls: List[str], cycles: int, warmup: int, minutes: float, threads: int = 1) -> Dict[str, object]:
    import fastredlock

    dlm = fastredlock.Redlock(urls, core=core, restart_aware=False)
    names = [f"soak:{core}:{k}" for k in range(64 * threads)]

    def one(i: int, t: int) -> None:
        lock = dlm.lock(names[(i & 63) + 64 * t], ttl=10.0)  # each thread its own 64 names
        if not lock.acquire(blocking=False):
            raise AssertionError(f"uncontended acquire failed: {lock.outcomes}")
        lock.release()

    def cycle(i: int) -> None:
        """One cycle per thread (``threads`` cycles in all), the threads running at once."""
        if threads == 1:
            one(i, 0)
            return
        errors: List[BaseException] = []

        def body(t: int) -> None:
            try:
                for j in range(i, i + 50):
                    one(j, t)
            except BaseException as exc:  # noqa: B902 - reported below
                errors.append(exc)

        workers = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise errors[0]

    if threads > 1:  # a "cycle" above is 50 per thread: count in those units
        cycles = max(1, cycles // (50 * threads))
        warmup = max(1, warmup // (50 * threads))
    for i in range(warmup):
        cycle(i)
    before = dlm.stats()
    began = time.monotonic()
    end = began + minutes * 60.0
    samples = [(0, _status("VmRSS"))]
    step = max(1, cycles // 10)
    done = 0
    for i in range(cycles):
        cycle(i)
        done = i + 1
        if done % step == 0:
            samples.append((done, _status("VmRSS")))
            if time.monotonic() > end:
                break
    took = time.monotonic() - began
    after = dlm.stats()
    if threads > 1:
        done *= 50 * threads
        samples = [(c * 50 * threads, mb) for c, mb in samples]
    # rounds where a master was not waited for (it answered after the round returned)
    early = [
        (a.replies - b.replies) - (a.rounds_timed - b.rounds_timed) for a, b in zip(after, before)
    ]
    dlm.close()
    rss = [mb for _, mb in samples]
    return {
        "core": core, "cycles": done, "seconds": round(took, 1), "cycles_per_s": round(done / took),
        "rss_start_mb": round(rss[0], 2), "rss_end_mb": round(rss[-1], 2),
        "growth_mb": round(rss[-1] - rss[0], 2), "max_growth_mb": round(max(rss) - rss[0], 2),
        "peak_mb": round(_status("VmHWM"), 2), "samples": samples, "not_waited_for": early,
    }


def run_async(core: str, urls: List[str], cycles: int, warmup: int, minutes: float, tasks: int) -> Dict[str, object]:
    """:func:`run` for the asyncio client: ``tasks`` tasks, each cycling through 64 names of its own."""
    import asyncio

    from fastredlock.asyncio import Redlock

    async def main() -> Dict[str, object]:
        dlm = Redlock(urls, core=core, restart_aware=False)
        names = [f"soak:{core}:{k}" for k in range(64 * tasks)]

        async def body(i: int, t: int) -> None:
            for j in range(i, i + 50):
                lock = dlm.lock(names[(j & 63) + 64 * t], ttl=10.0)
                if not await lock.acquire(blocking=False):
                    raise AssertionError(f"uncontended acquire failed: {lock.outcomes}")
                await lock.release()

        async def cycle(i: int) -> None:  # 50 cycles per task, the tasks at once
            await asyncio.gather(*(body(i, t) for t in range(tasks)))

        units, warm = max(1, cycles // (50 * tasks)), max(1, warmup // (50 * tasks))
        for i in range(warm):
            await cycle(i)
        began = time.monotonic()
        end = began + minutes * 60.0
        samples = [(0, _status("VmRSS"))]
        step = max(1, units // 10)
        done = 0
        for i in range(units):
            await cycle(i)
            done = i + 1
            if done % step == 0:
                samples.append((done * 50 * tasks, _status("VmRSS")))
                if time.monotonic() > end:
                    break
        took = time.monotonic() - began
        await dlm.aclose()
        rss = [mb for _, mb in samples]
        total = done * 50 * tasks
        return {
            "core": core, "cycles": total, "seconds": round(took, 1), "cycles_per_s": round(total / took),
            "rss_start_mb": round(rss[0], 2), "rss_end_mb": round(rss[-1], 2),
            "growth_mb": round(rss[-1] - rss[0], 2), "max_growth_mb": round(max(rss) - rss[0], 2),
            "peak_mb": round(_status("VmHWM"), 2), "samples": samples, "not_waited_for": "-",
        }

    return asyncio.run(main())


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--cores", default="cython,python")
    parser.add_argument("--minutes", type=float, default=60.0, help="stop a core's run after this long")
    parser.add_argument("--straggle", type=float, default=0.0, help="ms of reply latency on 2 of 5 masters")
    parser.add_argument("--threads", type=int, default=1, help="threads sharing the client")
    parser.add_argument("--tasks", type=int, default=0, help="asyncio tasks sharing an asyncio client")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one core, in its own process
        job = json.loads(args.child)
        if args.tasks:
            print(json.dumps(run_async(job["core"], job["urls"], args.cycles, args.warmup, args.minutes, args.tasks)))
            return 0
        print(json.dumps(run(job["core"], job["urls"], args.cycles, args.warmup, args.minutes, args.threads)))
        return 0

    from fastredlock.testing import FaultProxy, start_masters

    failed = False
    with start_masters(5) as local:
        urls = local.urls
        proxies = []
        if args.straggle > 0:
            proxies = [FaultProxy(m).start() for m in local[3:]]
            for proxy in proxies:
                proxy.latency(args.straggle / 1000.0, "down")
            urls = urls[:3] + [proxy.url for proxy in proxies]
        for core in args.cores.split(","):
            job = json.dumps({"core": core, "urls": urls})
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", job, "--cycles", str(args.cycles),
                 "--warmup", str(args.warmup), "--minutes", str(args.minutes), "--threads", str(args.threads),
                 "--tasks", str(args.tasks)],
                capture_output=True, text=True,
            )
            if out.returncode:
                print(f"{core}: failed\n{out.stderr[-2000:]}")
                failed = True
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            verdict = "flat" if res["max_growth_mb"] < 5.0 else "GREW"
            print(f"{core}: {res['cycles']:,} cycles in {res['seconds']} s ({res['cycles_per_s']:,}/s); RSS "
                  f"{res['rss_start_mb']} -> {res['rss_end_mb']} MB (growth {res['growth_mb']} MB, at most "
                  f"{res['max_growth_mb']} MB; peak {res['peak_mb']} MB): {verdict}")
            print("   samples (cycles, MB): " + ", ".join(f"({c:,}, {mb:.1f})" for c, mb in res["samples"]))
            print(f"   replies read after their round returned, per master: {res['not_waited_for']}")
        for proxy in proxies:
            proxy.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
