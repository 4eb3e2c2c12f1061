"""A subprocess that holds one kind of the lock family until it is killed (kill -9 tests).

Usage: python _family_holder.py <core> <kind> <name> <ttl> <url>...
kind: "rlock" (entered twice), "read", "write" or "permit" (of a 2-permit semaphore). The holder
renews (auto_extend) and prints "held" once it holds.
"""
from __future__ import annotations

import sys
import time

import fastredlock


def main() -> None:
    core, kind, name, ttl, *urls = sys.argv[1:]
    dlm = fastredlock.Redlock(urls, core=core, restart_aware=False)
    if kind == "rlock":
        lock = dlm.rlock(name, ttl=float(ttl), auto_extend=True)
        assert lock.acquire(timeout=5) and lock.acquire(timeout=5)
    elif kind == "permit":
        lock = dlm.semaphore(name, 2, ttl=float(ttl), auto_extend=True)
        assert lock.acquire(timeout=5)
    else:
        lock = getattr(dlm.rwlock(name, ttl=float(ttl), auto_extend=True), kind)
        assert lock.acquire(timeout=5)
    print("held", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
