"""A subprocess of threads that take readers, writers and semaphore permits of one name at random,
and report each entry and exit to a separate check server (the independent counters).

Usage: python _family_mixer.py <core> <name> <seconds> <threads> <limit> <check_url> <url>...
Prints "done <acquisitions>" at the end. FAMILY_MIX_UNLOCKED=1 (the negative control) enters without
taking anything: the counters must then see violations. The check server counts violations: a writer that entered
while anyone else was inside, a reader that entered with a writer inside, or more than <limit>
permits inside at once.
"""
from __future__ import annotations

import os
import random
import sys
import threading
import time

import redis

import fastredlock

# KEYS: readers, writers, permits, violations. ARGV[1]: what enters ("r", "w", "p"), ARGV[2]: limit.
ENTER = """
local r = tonumber(redis.call('get', KEYS[1]) or '0')
local w = tonumber(redis.call('get', KEYS[2]) or '0')
local p = tonumber(redis.call('get', KEYS[3]) or '0')
local bad = false
if ARGV[1] == 'r' then
    bad = w > 0
    redis.call('incr', KEYS[1])
elseif ARGV[1] == 'w' then
    bad = w > 0 or r > 0
    redis.call('incr', KEYS[2])
else
    bad = p >= tonumber(ARGV[2])
    redis.call('incr', KEYS[3])
end
if bad then
    redis.call('incr', KEYS[4])
end
return 0
"""
COUNTERS = ("mix:readers", "mix:writers", "mix:permits", "mix:violations")
EXIT_KEY = {"r": "mix:readers", "w": "mix:writers", "p": "mix:permits"}


def worker(dlm, name, end, limit, check, enter, done):
    rw = dlm.rwlock(name, ttl=2.0)
    permit = dlm.semaphore(name + ":s", limit, ttl=2.0)
    unlocked = bool(os.environ.get("FAMILY_MIX_UNLOCKED"))
    count = 0
    while time.monotonic() < end:
        kind = random.choice("rrwpp")
        lock = rw.read if kind == "r" else rw.write if kind == "w" else permit
        try:
            if not unlocked and not lock.acquire(timeout=1.0):
                continue
        except fastredlock.LockError:
            continue
        enter(keys=COUNTERS, args=[kind, limit], client=check)
        time.sleep(random.uniform(0.001, 0.004))
        check.decr(EXIT_KEY[kind])  # out before the release starts
        count += 1
        if unlocked:
            continue
        try:
            lock.release()
        except fastredlock.LockError:
            pass  # a master killed or stalled meanwhile: the share expires on its TTL
    done.append(count)


def main() -> None:
    core, name, seconds, threads, limit, check_url, *urls = sys.argv[1:]
    dlm = fastredlock.Redlock(urls, core=core, restart_aware=False, retry_delay=0.02, retry_jitter=0.03)
    check = redis.Redis.from_url(check_url)
    enter = check.register_script(ENTER)
    end = time.monotonic() + float(seconds)
    done = []
    workers = [threading.Thread(target=worker, args=(dlm, name, end, int(limit), check, enter, done))
               for _ in range(int(threads))]
    for t in workers:
        t.start()
    for t in workers:  # bounded: the test reads "done" within its own limit, or fails
        t.join(float(seconds) + 60.0)
    assert not any(t.is_alive() for t in workers), "a worker thread did not end"
    print("done", sum(done), flush=True)
    dlm.close()


if __name__ == "__main__":
    main()
