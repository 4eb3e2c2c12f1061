"""Client instructions per lock+unlock cycle, counted by callgrind: a measure the machine's noise can't move.

On a small shared VM, cycles/s and CPU time move ±30% between runs (more under CPU steal), so a
10% change in the client's own cost is invisible in them. ``valgrind --tool=callgrind`` counts the
instructions the client process executes in user space: the same for the same code and inputs,
whatever else the machine is doing. Each measurement runs the loop twice, for ``--cycles A,B``
cycles, and reports ``(Ir(B) - Ir(A)) / (B - A)``, so start-up and imports cancel out. Kernel time
(the syscalls) is not counted; ``strace -c`` tells whether their number changed.

    python benchmarks/instructions.py                      # N=1 and N=5, Cython core
    python benchmarks/instructions.py --masters 1 --core python
    python benchmarks/instructions.py --path /tmp/old/src  # another checkout (built in place)
    python benchmarks/instructions.py --masters 5 --on-event noop   # the cost of an on_event hook
    python benchmarks/instructions.py --masters 1 --api shim  # redis-py's Lock API through the shim
    python benchmarks/instructions.py --masters 1 --api redis-lock-shim  # python-redis-lock's, likewise
    python benchmarks/instructions.py --masters 5 --api read  # a read lock of dlm.rwlock (or write, semaphore, rlock)
    python benchmarks/instructions.py --op inspect         # one dlm.inspect(name) of a held lock instead
    python benchmarks/instructions.py --op cycle-nowait    # each release(wait=False) (reaper thread counted)
    python benchmarks/instructions.py --api asyncio        # one task of fastredlock.asyncio (default loop)
    python benchmarks/instructions.py --api asyncio --loop uvloop   # the same task under uvloop

Needs ``valgrind`` (Debian: ``apt-get install valgrind``). Under valgrind the loop runs ~50x slower,
so each measurement takes tens of seconds.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from typing import List, Optional

LOOP = r"""
import os, sys
path = sys.argv[1]
if path:
    sys.path.insert(0, path)
import fastredlock
if path and not fastredlock.__file__.startswith(path):
    raise SystemExit(f"imported {fastredlock.__file__}, not the package under {path}")
name = f"instructions:{os.getpid()}"
api = sys.argv[5]
# valgrind slows the loop ~50x: a deadline that a busy machine cannot miss (it costs no instructions)
if api == "asyncio":  # one task of fastredlock.asyncio, on the default loop or uvloop
    import asyncio
    import fastredlock.asyncio as fa

    async def cycles():
        dlm = fa.Redlock(sys.argv[4].split(","), core=sys.argv[2], retry_count=0, io_timeout=1.0,
                         connect_timeout=1.0)
        release_kwargs = {"wait": False} if sys.argv[7] == "cycle-nowait" else {}
        for _ in range(int(sys.argv[3])):
            lock = dlm.lock(name, ttl=10.0)
            if not await lock.acquire(blocking=False):
                raise SystemExit("not acquired: is another client using these masters?")
            await lock.release(**release_kwargs)
        await dlm.aclose()

    if sys.argv[8] == "uvloop":
        import uvloop
        uvloop.run(cycles())
    else:
        asyncio.run(cycles())
    raise SystemExit(0)
if api in ("fastredlock", "read", "write", "semaphore", "rlock"):  # the API over all masters
    dlm = fastredlock.Redlock(sys.argv[4].split(","), core=sys.argv[2], retry_count=0, io_timeout=1.0,
                              connect_timeout=1.0)
    if sys.argv[6] == "noop":
        dlm.on_event = lambda event: None
    elif sys.argv[6] == "prometheus":
        import prometheus_client
        from fastredlock import metrics
        metrics.instrument_prometheus(dlm, prometheus_client.CollectorRegistry())
    new_lock = {
        "fastredlock": lambda: dlm.lock(name, ttl=10.0),
        "read": lambda: dlm.rwlock(name, ttl=10.0).read,
        "write": lambda: dlm.rwlock(name, ttl=10.0).write,
        "semaphore": lambda: dlm.semaphore(name, 3, ttl=10.0),
        "rlock": lambda: dlm.rlock(name, ttl=10.0),
    }[api]
else:  # one master: redis-py's Lock API (its own class, or the shim's), or python-redis-lock's shim
    import redis
    import fastredlock.compat
    from fastredlock.compat.redis_py import Lock

    fastredlock.compat.configure(core=sys.argv[2], io_timeout=1.0, connect_timeout=1.0)
    r = redis.Redis.from_url(sys.argv[4].split(",")[0])
    if api == "redis-lock-shim":
        from fastredlock.compat import redis_lock
        new_lock = lambda: redis_lock.Lock(r, name, expire=10)
    else:
        lock_class = Lock if api == "shim" else None
        new_lock = lambda: r.lock(name, timeout=10.0, lock_class=lock_class)
if sys.argv[7] == "inspect":  # one inspection (a read round) of a lock held all along
    held = new_lock()
    if not held.acquire(blocking=False):
        raise SystemExit("not acquired: is another client using these masters?")
    for _ in range(int(sys.argv[3])):
        if not dlm.inspect(name).held:
            raise SystemExit("the inspection did not see the lock held")
    held.release()
    raise SystemExit(0)
release_kwargs = {"wait": False} if sys.argv[7] == "cycle-nowait" else {}
for _ in range(int(sys.argv[3])):
    lock = new_lock()
    if not lock.acquire(blocking=False):
        raise SystemExit("not acquired: is another client using these masters?")
    lock.release(**release_kwargs)
"""


#: The ``--api`` choices that run over every master (fastredlock's own API).
FAMILY = ("fastredlock", "read", "write", "semaphore", "rlock", "asyncio")


def count(core: str, cycles: int, urls: List[str], path: str, api: str = "fastredlock", hook: str = "none",
          op: str = "cycle", loop: str = "asyncio") -> int:
    """Instructions (user space) of one run of the loop with ``cycles`` cycles of ``op``."""
    cmd = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, "-c", LOOP, path, core, str(cycles), ",".join(urls), api, hook, op, loop,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"the loop failed under valgrind:\n{proc.stderr[-2000:]}")
    return int(found.group(1))


def per_cycle(core: str, small: int, large: int, urls: List[str], path: str, api: str = "fastredlock",
              hook: str = "none", op: str = "cycle", loop: str = "asyncio") -> float:
    return (count(core, large, urls, path, api, hook, op, loop)
            - count(core, small, urls, path, api, hook, op, loop)) / (large - small)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--masters", default="1,5", help="comma-separated master counts (default 1,5)")
    parser.add_argument("--core", default="cython", choices=("cython", "python"))
    parser.add_argument("--cycles", default="500,2500", help="the two loop lengths A,B (default 500,2500)")
    parser.add_argument("--path", default="", help="import fastredlock from this folder (a checkout's src/)")
    parser.add_argument("--on-event", default="none", choices=("none", "noop", "prometheus"),
                        help="the core API client's on_event hook: none (default), a no-op, or "
                             "fastredlock.metrics' Prometheus recorder")
    parser.add_argument("--api", default="fastredlock",
                        choices=("fastredlock", "read", "write", "semaphore", "rlock", "shim", "redis-py",
                                 "redis-lock-shim", "asyncio"),
                        help="the loop: fastredlock's API (default), a kind of the lock family (a read or write "
                             "lock of dlm.rwlock, a permit of a 3-permit dlm.semaphore, a dlm.rlock), redis-py's "
                             "Lock API through the shim fastredlock.compat.redis_py.Lock, redis-py's own Lock, or "
                             "python-redis-lock's API through fastredlock.compat.redis_lock (those three: "
                             "first master only), or one task of fastredlock.asyncio (see --loop)")
    parser.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"),
                        help="--api asyncio: the event loop (asyncio's default, or uvloop)")
    parser.add_argument("--op", default="cycle", choices=("cycle", "cycle-nowait", "inspect"),
                        help="what one cycle is: acquire+release (default), acquire+release(wait=False) (the "
                             "answers read by the next acquisition or the reaper thread, both counted), or one "
                             "dlm.inspect(name) of a held lock (one read round: GET, PTTL, GET per master; "
                             "fastredlock's API only)")
    args = parser.parse_args(argv)
    if args.op == "inspect" and args.api != "fastredlock":
        raise SystemExit("--op inspect measures fastredlock's API (--api fastredlock)")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    small, large = (int(x) for x in args.cycles.split(","))
    if not 0 < small < large:
        raise SystemExit("--cycles must be two increasing positive counts, e.g. 500,2500")
    from fastredlock.testing import start_masters

    for n in (int(x) for x in args.masters.split(",")):
        with start_masters(n) as masters:
            # restart-aware voting (the default) refuses masters younger than the TTL: wait that
            # out rather than measure a client configured unlike the users' default
            time.sleep(10.5)
            ir = per_cycle(args.core, small, large, masters.urls, os.path.abspath(args.path) if args.path else "",
                           args.api, args.on_event, args.op, args.loop)
        hook = "" if args.on_event == "none" else f" on_event={args.on_event}"
        what = {"cycle": "lock+unlock cycle", "cycle-nowait": "lock+unlock cycle, release not waited for",
                "inspect": "inspect (one round)"}[args.op]
        loop = f" loop={args.loop}" if args.api == "asyncio" else ""
        print(f"N={n if args.api in FAMILY else 1} core={args.core} api={args.api}{loop}{hook}: {ir:,.0f} instructions "
              f"per {what} (client, user space)")


if __name__ == "__main__":
    main()
