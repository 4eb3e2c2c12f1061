"""What the comparison compares: peer install groups, configurations (rows) and scenario names,
and the run's settings (full and ``--quick``)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


#: the C floor: every sequential / batch configuration gets its ratio to it
FLOOR_ID = "ref-c-floor"

#: pip requirement lists, one isolated --target folder each
PEER_GROUPS: Dict[str, List[str]] = {
    "redlock-py": ["redlock-py"],
    "redlock-glasslion": ["redlock"],
    "redlock-ng": ["redlock-ng"],
    "pyredlock": ["pyredlock"],
    "pottery": ["pottery"],
    # aioredis 1.x imports distutils, gone from the standard library in 3.12
    "aioredlock": ["aioredlock"] + (["setuptools"] if sys.version_info >= (3, 12) else []),
    "redis-py": ["redis"],
    "python-redis-lock": ["python-redis-lock==4.0.0"],  # the version the shim follows
}

FULL = ("seq5", "threads", "contend", "turns", "refuse", "stall")
FAST = ("seq5", "seq1", "batch", "threads", "contend", "turns", "refuse", "stall")
#: the round-trip scenario (bench/rtt.py): sequential cycles with every master behind the delay
#: proxy, N=5 and N=1, beside the loopback ones (seq5, seq1)
RTT = ("rtt5", "rtt1")
#: the peers that go through the proxy too: the fastest sequential one on loopback (pyredlock) and
#: the fastest of those that fan out to the masters at once (the others wait for each master in turn)
RTT_PEERS = ("pyredlock", "redlock-ng-async", "aioredlock")


@dataclass
class Config:
    id: str
    label: str
    style: str
    group: Optional[str] = None  # peer install group; None = this environment (fastredlock, refs)
    scenarios: Tuple[str, ...] = FULL
    n1: bool = False  # a single-instance lock: every scenario runs on master 0 only
    reference: bool = False
    fast: bool = False  # one of fastredlock's cores
    native: bool = False  # the C floor: run by the driver itself (floor.py), not by worker.py
    nowait: bool = False  # the C floor's -W: the release is not waited for
    #: another interpreter runs its worker (found on PATH; the configuration is skipped without it)
    interpreter: Optional[str] = None

    @property
    def isolated(self) -> bool:
        return self.group is not None


CONFIGS: List[Config] = [
    Config("fastredlock-cython", "fastredlock (Cython core)",
           "one multiplexed round, C core, EVALSHA", scenarios=FAST + RTT, fast=True),
    Config("fastredlock-cython-nowait", "fastredlock (Cython core), release(wait=False)",
           "the release is written, its replies read by the next round: one round trip per cycle",
           scenarios=("seq5", "seq1") + RTT, fast=True),
    Config("fastredlock-python", "fastredlock (pure core)",
           "one multiplexed round, pure-Python core, EVALSHA", scenarios=FAST, fast=True),
    # PyPy's JIT on the pure core (the one PyPy installs): sequential cycles beside CPython's two cores
    Config("fastredlock-pypy", "fastredlock (pure core) on PyPy",
           "one multiplexed round, pure-Python core under pypy3's JIT, EVALSHA", scenarios=("seq5", "seq1"),
           fast=True, interpreter="pypy3"),
    Config("fastredlock-cython-nowake", "fastredlock (Cython core), wake=False",
           "waiters poll (retry_delay + jitter) instead of being woken by the release", scenarios=("turns",), fast=True),
    Config("fastredlock-cython-n1", "fastredlock (Cython core), N=1",
           "the turns on one master, as python-redis-lock and redis-py's Lock run them: what the hand-over "
           "costs when the masters do not outnumber the CPUs", scenarios=("turns",), n1=True),
    # The lock family (no Python peer has these over a quorum; redis-py and python-redis-lock have no
    # read-write lock or semaphore either): sequential cycles beside the plain lock's, N=5 and 1.
    Config("fastredlock-read", "fastredlock read lock (rwlock.read)",
           "one round, Cython core; the reader share script", scenarios=("seq5", "seq1"), fast=True),
    Config("fastredlock-write", "fastredlock write lock (rwlock.write)",
           "one round, Cython core; the writer script", scenarios=("seq5", "seq1"), fast=True),
    Config("fastredlock-semaphore", "fastredlock semaphore (limit 4)",
           "one round (one permit slot probed), Cython core", scenarios=("seq5", "seq1"), fast=True),
    Config("fastredlock-rlock", "fastredlock reentrant lock (rlock)",
           "one round, Cython core; the reentrant script", scenarios=("seq5", "seq1"), fast=True),
    Config("fastredlock-async", "fastredlock.asyncio (Cython core)",
           "one multiplexed round, C core, default loop; tasks ride together", scenarios=FULL + ("seq1",), fast=True),
    Config("fastredlock-async-uvloop", "fastredlock.asyncio on uvloop",
           "one multiplexed round, C core, uvloop; tasks ride together", scenarios=FULL + ("seq1",), fast=True),
    Config("redlock-py", "redlock-py", "sync, sequential, EVAL", "redlock-py"),
    Config("redlock-glasslion", "redlock (glasslion)", "sync, sequential, EVALSHA", "redlock-glasslion"),
    Config("redlock-ng", "redlock-ng", "sync, sequential, EVAL", "redlock-ng"),
    Config("redlock-ng-async", "redlock-ng async", "asyncio.gather, EVAL", "redlock-ng"),
    Config("pyredlock", "pyredlock", "sync, sequential, EVAL", "pyredlock"),
    Config("pyredlock-async", "pyredlock async", "asyncio, masters awaited one by one, EVAL", "pyredlock"),
    Config("pottery", "pottery Redlock", "ThreadPoolExecutor per call, EVALSHA", "pottery"),
    Config("pottery-aio", "pottery AIORedlock", "asyncio.as_completed, EVALSHA", "pottery"),
    Config("aioredlock", "aioredlock", "asyncio.gather, EVALSHA", "aioredlock"),
    Config("redis-py-lock", "redis-py Lock (N=1)", "single instance redis.lock.Lock", "redis-py",
           scenarios=("seq1", "threads", "contend", "turns"), n1=True),
    Config("redis-py-aio-lock", "redis-py asyncio Lock (N=1)", "single instance redis.asyncio.lock.Lock",
           "redis-py", scenarios=("seq1", "threads", "contend", "stall"), n1=True),
    Config("shim-redis-py-lock", "shim: compat.redis_py.Lock (N=1)",
           "redis-py's Lock API (r.lock(lock_class=...)) on fastredlock, Cython core",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("shim-redis-py-aiolock", "shim: compat.redis_py.AsyncLock (N=1)",
           "redis-py's asyncio Lock API on fastredlock.asyncio, Cython core",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("python-redis-lock", "python-redis-lock (N=1)", "single instance, GET + SET NX EX, BLPOP wake-up, EVALSHA (leftover keys: its "
           "lock-signal lists, which live 1 s after each release)",
           "python-redis-lock", scenarios=("seq1", "threads", "contend", "turns"), n1=True),
    Config("shim-redis-lock", "fastredlock.compat.redis_lock (N=1)",
           "the python-redis-lock shim: SET NX PX, then one EVALSHA that deletes and signals (C core; "
           "leftover keys: lock-signal lists, 1 s)",
           scenarios=("seq1", "threads", "contend"), n1=True),
    Config("ref-redis-py", "ref: redis-py minimal seq", "N x set(nx, px), then N x evalsha",
           "redis-py", scenarios=("seq5",), reference=True),
    Config("ref-raw-mux", "ref: raw socket mux (hiredis)", "write all N, then read N; pure Python",
           scenarios=("seq5", "seq1"), reference=True),
    Config("ref-aio-mux", "ref: raw mux on asyncio", "write all N, readers on the loop; pure Python",
           scenarios=("seq5",), reference=True),
    Config("ref-aio-mux-uvloop", "ref: raw mux on uvloop", "write all N, readers on uvloop; pure Python",
           scenarios=("seq5",), reference=True),
    Config("ref-raw-x64", "ref: raw pipelined x64", "64 SETs per write, then 64 EVALSHAs; pure Python",
           scenarios=("batch",), reference=True),
    Config(FLOOR_ID, "ref: C floor (syscalls only)",
           "C, cc -O2: one send + poll + recv per master per round; RELEASE / RELEASE_MANY",
           scenarios=("seq5", "seq1", "batch") + RTT, reference=True, native=True),
    Config("ref-c-floor-nowait", "ref: C floor, release not waited (-W)",
           "C, cc -O2: the release is sent, its reply read before the next SET's on each connection",
           scenarios=("seq5", "seq1") + RTT, reference=True, native=True, nowait=True),
]
for _c in CONFIGS:
    if _c.id in RTT_PEERS:
        _c.scenarios = _c.scenarios + ("seq1",) + RTT
# TLS rows: sequential lock+unlock, N=5, over rediss:// to the same masters' TLS ports (scenario
# "tls5"), beside redis-benchmark -c 1 -t set with and without --tls on one of them ("tlsref").
TLS = ("tls5",)
CONFIGS += [
    Config("fastredlock-cython-tls", "fastredlock (Cython core), TLS", "one multiplexed round over TLS, C core",
           scenarios=TLS, fast=True),
    Config("fastredlock-python-tls", "fastredlock (pure core), TLS", "one multiplexed round over TLS, pure core",
           scenarios=TLS, fast=True),
    Config("pyredlock-tls", "pyredlock, TLS", "redis-py ssl=True, sync, sequential", "pyredlock", scenarios=TLS),
    Config("redlock-ng-tls", "redlock-ng, TLS", "redis-py ssl=True, sync, sequential", "redlock-ng", scenarios=TLS),
    Config("redlock-py-tls", "redlock-py, TLS", "redis-py ssl=True, sync, sequential", "redlock-py", scenarios=TLS),
    Config("ref-redis-py-tls", "ref: redis-py minimal seq, TLS", "N x set(nx, px), then N x evalsha; ssl=True",
           "redis-py", scenarios=TLS, reference=True),
]
BY_ID = {c.id: c for c in CONFIGS}
SCENARIO_NAMES = ("seq5", "seq1", "batch", "threads", "contend", "turns", "refuse", "stall", "floor", "tls5") + RTT


@dataclass
class Settings:
    rounds: int = 3
    duration: float = 3.0
    contend_duration: float = 4.0
    warmup: int = 200
    threads: int = 4
    tasks: int = 64
    procs: int = 4
    attempts: int = 4
    hang_limit: float = 2.0
    ttl: float = 10.0
    floor_requests: int = 50000
    hold_ms: float = 0.0
    #: the "turns" scenario (bench/turns.py): processes, seconds, hold per turn
    turns_procs: int = 8
    turns_duration: float = 5.0
    turns_hold_ms: float = 1.0
    #: the round-trip scenario: the delay proxy's hold per chunk, each way
    rtt_delay_us: int = 250


QUICK = Settings(rounds=1, duration=0.15, contend_duration=0.25, warmup=10, attempts=1,
                 hang_limit=0.4, ttl=3.0, floor_requests=3000, turns_duration=0.5)
