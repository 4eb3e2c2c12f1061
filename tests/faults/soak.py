"""Soak: many processes and threads contend for a few locks while masters are killed and restarted.

    python tests/faults/soak.py                      # 60 s, 8 processes x 4 threads, delayed restarts
    python tests/faults/soak.py --seconds 600 --mode voting --core cython
    python tests/faults/soak.py --seconds 5 --mode unsafe          # the negative control: doubles within seconds
    python tests/faults/soak.py --seconds 5 --mode voting --burst 3 --hold 0.9   # the same fault, voting on

Every worker process shares one ``Redlock`` client between its threads; each thread loops: acquire
(with a timeout), enter a holder register on a master the lock client never uses (with its
validity deadline on the machine-wide monotonic clock), hold briefly, leave, release. Entering while
another holder's validity has not ended is a double holder; entering after it ended while that
holder still runs (descheduled past its TTL on a loaded machine) only counts as "overran".
Meanwhile the masters are killed (SIGKILL), paused (SIGSTOP) and restarted, ``--burst`` of them at
once (default 1) and never more than ``--max-down`` (at least ``--burst``) down at a time, in one of
four modes:

- ``delayed``: no persistence; a killed master comes back only after ``ttl + margin`` (the delayed
  restart operators are told to use); restart-aware voting off, so the delay alone must keep it safe;
- ``voting``: no persistence, immediate restarts; the client's restart-aware voting (grace = TTL)
  must keep it safe;
- ``persistent``: ``appendfsync always``, immediate restarts; the AOF must keep it safe;
- ``unsafe``: no persistence, immediate restarts, no voting: the negative control. Redlock is not
  safe there, and the counter must catch double holders (it shows the detector is not blind). Its
  defaults recreate the seed's scenario: a burst of 3 of 5 masters (a majority of the ones that hold
  a live lock: every holder holds all five) is killed and restarted empty at once, while holders hold
  for up to 90% of a TTL, so the next contender finds three forgetful masters, a quorum, and enters
  beside the holder. (A restart of one master at a time leaves every holder four of its five: no
  second quorum can form, and the counter stays at 0 even without any protection.)

``--burst 3`` with ``--hold 0.9`` in the other modes is the same fault with the protection on: the
counter must stay at 0 (tests/faults/test_soak.py runs both sides).

The report (one JSON object, and a summary on stderr): acquisitions, double holders (must be 0;
more than 0 in the unsafe mode), holders that overran their validity, releases that found the lock
lost, unexpected errors (must be 0), keys left once the TTL has passed (must be 0),
kills/pauses/restarts, and peak RSS. With ``plant_leak=True`` (``--plant-leak``) a planted fault
checks the leaked-key count: once the run is over a holder takes a lock, removes its TTL on every
master and never releases it, and the count must see it.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import sys
import threading
import time
from typing import Any, Dict, List, Optional

if __name__ == "__main__":  # run by hand (``python tests/faults/soak.py``): no pytest pythonpath for tests/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _contender import Counter  # noqa: E402  (tests/_contender.py: the counter connection)
from _bounded import BOUND, joined  # noqa: E402

NAMES = 2  # lock names contended for (all threads of all processes share them)
MODES = ("delayed", "voting", "persistent", "unsafe")
#: The unsafe mode's fault: a majority of the five masters restarted at once.
MAJORITY = 3


# The holder register on the counter master. A holder enters with its validity deadline on the
# machine-wide monotonic clock (all soak processes share one machine, so CLOCK_MONOTONIC is common).
# Entering while the previous holder's validity has not yet ended is a double holder: the property
# Redlock promises. Entering after it ended, while that holder still runs (it overran, e.g. it was
# descheduled for longer than its TTL on a loaded machine), is not a violation; it counts as "overran".
# KEYS[1] register key; ARGV[1] now (µs); ARGV[2] my deadline (µs); ARGV[3] my id. Returns 1 on overlap.
_ENTER = b"""\
local cur = redis.call('get', KEYS[1])
local double = 0
if cur then
    local sep = string.find(cur, ':', 1, true)
    if tonumber(string.sub(cur, 1, sep - 1)) > tonumber(ARGV[1]) then double = 1 end
end
redis.call('set', KEYS[1], ARGV[2] .. ':' .. ARGV[3])
return double
"""
# KEYS[1] register key; ARGV[1] the value this holder wrote. Leaves a newer holder's entry alone.
_EXIT = b"""\
if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
return 0
"""


def _thread_loop(dlm, counter_port: int, end: float, ttl: float, hold: float, stats: Dict[str, int],
                 lock: threading.Lock) -> None:
    from fastredlock import LockError, LockNotOwnedError

    counter = Counter(counter_port, timeout=5.0)
    mine = dict.fromkeys(("acquired", "not_acquired", "double", "overran", "lost", "errors"), 0)
    rng = random.Random()
    while time.monotonic() < end:
        name = f"soak:{rng.randrange(NAMES)}"
        handle = dlm.lock(name, ttl=ttl)
        try:
            if not handle.acquire(timeout=ttl):
                mine["not_acquired"] += 1
                continue
        except Exception:
            mine["errors"] += 1
            continue
        try:
            now = time.monotonic()
            validity = handle.validity
            if validity > 0:
                mine["acquired"] += 1
                register = b"holders:" + name.encode()
                entry = b"%d:%s" % (int((now + validity) * 1e6), handle.token)
                if counter.call(b"EVAL", _ENTER, b"1", register, b"%d" % int(now * 1e6), *entry.split(b":", 1)) != 0:
                    mine["double"] += 1
                time.sleep(rng.uniform(0.25, 1.0) * hold)
                counter.call(b"EVAL", _EXIT, b"1", register, entry)
                if not handle.locked():
                    mine["overran"] += 1  # validity ended inside the section: an overlap is then not a violation
        finally:
            try:
                handle.release()
            except LockNotOwnedError:
                mine["lost"] += 1  # e.g. a quorum of its masters died: reported, never silent
            except LockError:
                mine["errors"] += 1
            except Exception:
                mine["errors"] += 1
    with lock:
        for k, v in mine.items():
            stats[k] = stats.get(k, 0) + v


def worker(urls: List[str], core: str, mode: str, counter_port: int, seconds: float, ttl: float, hold: float,
           threads: int, results: Any, ready: Any, go: Any) -> None:
    """One soak process: ``threads`` threads sharing one client; puts its stats on ``results``.

    It says ``ready`` once started and runs when ``go`` is set: the chaos starts with the workers,
    not seconds before them (spawning interpreters on a loaded machine takes seconds).
    """
    import fastredlock

    voting = mode == "voting"
    dlm = fastredlock.Redlock(urls, core=core, retry_delay=0.01, retry_jitter=0.02,
                              restart_aware=voting, restart_grace=ttl if voting else None)
    ready.put(1)
    go.wait(60)
    stats: Dict[str, Any] = {}
    lock = threading.Lock()
    end = time.monotonic() + seconds
    pool = [threading.Thread(target=_thread_loop, args=(dlm, counter_port, end, ttl, hold, stats, lock))
            for _ in range(threads)]
    for t in pool:
        t.start()
    joined(*pool, timeout=seconds + BOUND)
    dlm.close()
    stats["core"] = dlm.core
    stats["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    results.put(stats)


def _chaos(masters, end: float, ttl: float, mode: str, burst: int, max_down: int, rng: random.Random,
           log: Dict[str, int]) -> None:
    """Kill, pause and restart masters until ``end``: ``burst`` at once, at most ``max_down`` down."""
    from fastredlock.testing import paused, restart

    delay = ttl + 0.3 if mode == "delayed" else 0.0
    down: Dict[int, threading.Thread] = {}
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.2, 0.6))
        for i, thread in list(down.items()):
            if not thread.is_alive():
                del down[i]
                log["restarts"] += 1
        up = [i for i in range(len(masters)) if i not in down]
        if len(down) + burst <= max_down and rng.random() < 0.6:
            for i in rng.sample(up, burst):  # killed within a millisecond of each other
                down[i] = restart(masters[i], delay=delay, background=True)
                log["kills"] += 1
        else:
            with paused(masters[rng.choice(up)]):
                time.sleep(rng.uniform(0.02, 0.3))
            log["pauses"] += 1
    for thread in down.values():
        thread.join(30)
        log["restarts"] += 1


def _plant_leak(urls: List[str], name: str, ttl: float) -> None:
    """The planted fault: take ``name`` with a real client, remove its TTL everywhere, never release."""
    import fastredlock

    dlm = fastredlock.Redlock(urls, core="python", restart_aware=False)
    assert dlm.lock(name, ttl=ttl).acquire(timeout=ttl + 1.0), "the planted holder could not take the lock"
    for url in urls:  # the expiry a buggy client would lose, and the release it would skip
        master = Counter(int(url.rsplit(":", 1)[1]), timeout=5.0)  # a lock master this time
        master.call(b"PERSIST", name.encode())
        master.close()
    dlm.close()


def run_soak(seconds: float = 60.0, processes: int = 8, threads: int = 4, ttl: float = 1.0,
             hold: Optional[float] = None, core: str = "mixed", mode: str = "delayed", max_down: int = 2,
             seed: int = 0, burst: Optional[int] = None, plant_leak: bool = False) -> Dict[str, Any]:
    """Run one soak and return its report (see the module docstring).

    ``burst`` (masters killed at once) defaults to a majority in the unsafe mode, else 1; ``hold``
    (the longest hold, seconds) to 90% of the TTL in the unsafe mode, else 3 ms.
    """
    from fastredlock.testing import LocalMaster, start_masters

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    unsafe = mode == "unsafe"
    burst = burst or (MAJORITY if unsafe else 1)
    hold = (0.9 * ttl if unsafe else 0.003) if hold is None else hold
    max_down = max(max_down, burst)
    from fastredlock.io.cores import core_class

    for name in (["cython", "python"] if core == "mixed" else [core]):
        core_class(name)  # a missing Cython build fails here, not as 8 dead workers
    rng = random.Random(seed or None)
    log = {"kills": 0, "pauses": 0, "restarts": 0}
    counter = LocalMaster().start()
    local = start_masters(5, persistent=mode == "persistent")
    try:
        if mode == "voting":
            time.sleep(ttl + 1.0)  # fresh masters are "restarted recently" until the grace has passed
        # Forks of a server that imported fastredlock and this module once (each starts in
        # milliseconds), where there is one; they share nothing with this process.
        if "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["fastredlock", "soak"])
        else:
            ctx = multiprocessing.get_context("spawn")
        results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        cores = ["cython", "python"] if core == "mixed" else [core]
        procs = [
            ctx.Process(target=worker, args=(local.urls, cores[n % len(cores)], mode, counter.port, seconds, ttl,
                                             hold, threads, results, ready, go))
            for n in range(processes)
        ]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=60)
        started = time.monotonic()
        go.set()
        _chaos(local.masters, started + seconds, ttl, mode, burst, max_down, rng, log)
        per_process = [results.get(timeout=seconds + 60) for _ in procs]
        for p in procs:
            p.join(30)
        elapsed = time.monotonic() - started
        names = [f"soak:{n}" for n in range(NAMES)]
        if plant_leak:
            _plant_leak(local.urls, names[0], ttl)
        left_now = sum(m.command("EXISTS", *names) for m in local if m.running())
        time.sleep(ttl + 0.2)
        leaked = sum(m.command("EXISTS", *names) for m in local if m.running())
    finally:
        local.stop()
        counter.stop()
    report: Dict[str, Any] = {
        "mode": mode, "seconds": round(elapsed, 1), "processes": processes, "threads": threads, "ttl": ttl,
        "hold": hold, "burst": burst, "planted_leak": plant_leak,
        "cores": sorted({s["core"] for s in per_process}),
    }
    for key in ("acquired", "not_acquired", "double", "overran", "lost", "errors"):
        report[key] = sum(s.get(key, 0) for s in per_process)
    report["acquired_min_per_process"] = min(s.get("acquired", 0) for s in per_process)
    report["exit_codes"] = [p.exitcode for p in procs]
    report["keys_at_end"] = left_now
    report["leaked_keys"] = leaked
    report.update(log)
    report["peak_rss_mb"] = round(max(s["peak_rss_mb"] for s in per_process), 1)
    report["parent_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    return report


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--hold", type=float, default=None,
                        help="longest time a holder holds (seconds; default 3 ms, unsafe: 90%% of the TTL)")
    parser.add_argument("--core", choices=["mixed", "cython", "python"], default="mixed",
                        help="mixed: alternate processes between the two cores (default)")
    parser.add_argument("--mode", choices=MODES, default="delayed")
    parser.add_argument("--max-down", type=int, default=2, help="masters down at once (2 of 5 keeps a quorum)")
    parser.add_argument("--burst", type=int, default=None,
                        help="masters killed at once (default 1, unsafe: 3 of 5, a majority)")
    parser.add_argument("--plant-leak", action="store_true",
                        help="plant a fault at the end: a lock whose TTL was removed (leaked keys must see it)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = run_soak(args.seconds, args.processes, args.threads, args.ttl, args.hold, args.core, args.mode,
                      args.max_down, args.seed, args.burst, args.plant_leak)
    print(json.dumps(report))
    # The controls pass when their detector fired: the unsafe mode must see a double holder, a
    # planted leak must be counted.
    doubles_ok = report["double"] > 0 if args.mode == "unsafe" else report["double"] == 0
    leaks_ok = report["leaked_keys"] > 0 if args.plant_leak else report["leaked_keys"] == 0
    ok = doubles_ok and leaks_ok and report["errors"] == 0
    print(
        f"{'OK' if ok else 'FAILED'}: {report['acquired']} acquisitions in {report['seconds']} s "
        f"({report['mode']}, cores {report['cores']}), double holders {report['double']}, "
        f"overran {report['overran']}, lost at release {report['lost']}, errors {report['errors']}, "
        f"leaked keys {report['leaked_keys']}; kills {report['kills']}, pauses {report['pauses']}, "
        f"restarts {report['restarts']}; peak RSS {report['peak_rss_mb']} MB per worker",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
