"""A subprocess that holds a lock, for tests that kill or pause the holder.

Usage: python _holder.py <core> <name> <ttl> <mode> <url>...
mode "renew": hold with auto_extend until killed. mode "fenced-write": take a fenced lock, print
the fence, then (after being paused and resumed by the test) try a fenced write to the resource
master given as the first URL and print whether it was accepted.
"""
from __future__ import annotations

import sys
import time

import fastredlock


def main() -> None:
    core, name, ttl, mode, *urls = sys.argv[1:]
    if mode == "renew":
        dlm = fastredlock.Redlock(urls, core=core, restart_aware=False)
        lock = dlm.lock(name, ttl=float(ttl), auto_extend=True)
        assert lock.acquire(timeout=5)
        print("held", flush=True)
        time.sleep(3600)
    elif mode == "fenced-write":
        import redis

        resource_url, lock_urls = urls[0], urls[1:]
        dlm = fastredlock.Redlock(lock_urls, core=core, restart_aware=False)
        lock = dlm.lock(name, ttl=float(ttl), fencing=True)
        assert lock.acquire(timeout=5)
        print(f"fence {lock.fence}", flush=True)
        sys.stdin.readline()  # the test pauses us before this returns, and resumes us after TTL
        from fastredlock.fencing import fenced_set

        accepted = fenced_set(redis.Redis.from_url(resource_url), "resource", "stale", lock.fence)
        print(f"accepted {accepted} locked {lock.locked()}", flush=True)


if __name__ == "__main__":
    main()
