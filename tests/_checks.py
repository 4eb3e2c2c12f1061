"""Shared checks of the fault suite: bounded calls, keys that expire, an independent holder counter.

Every scenario asserts the same four things, where they apply: the call returned within its bound
(``io_timeout`` + ε per round, plus ``connect_timeout`` when the round had to reconnect); no key is
left on any master beyond its TTL; no exception escaped while the lock was still held; and an
independent counter (INCR/DECR on a master the client does not use) never saw two holders.
"""
from __future__ import annotations

import logging
import platform
import time
from typing import Iterable

from fastredlock.testing import LocalMaster

#: The clients' io_timeout and connect_timeout in this suite (the library's defaults).
IO = 0.05
CONNECT = 0.1
#: Slack per round for a noisy 2-core machine (load 4+ while other suites run): scheduling, the
#: proxy thread, the Python core's own work. Generous, yet far below a hang or a multi-second stall.
EPS = 0.2


def bound(rounds: int = 1, reconnect: bool = True) -> float:
    """The longest ``rounds`` rounds may take: ``io_timeout`` (+ ``connect_timeout``) + ε each."""
    return rounds * (IO + (CONNECT if reconnect else 0.0) + EPS)


class Timer:
    """``with Timer() as t: ...`` then ``t.elapsed``."""

    def __enter__(self) -> "Timer":
        self.started = time.monotonic()
        self.elapsed = 0.0
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.elapsed = time.monotonic() - self.started


def timed(fn, limit: float, *args, **kwargs):
    """Call ``fn(*args, **kwargs)``, assert it returned within ``limit`` seconds, return its result."""
    with Timer() as t:
        result = fn(*args, **kwargs)
    assert t.elapsed < limit, f"{getattr(fn, '__name__', fn)} took {t.elapsed:.3f}s, bound {limit:.3f}s"
    return result


def assert_expires_within(local: Iterable[LocalMaster], key, ttl: float) -> None:
    """On every running master, ``key`` is absent or expires within ``ttl`` seconds: never left behind."""
    for m in local:
        if not m.running():
            continue
        pttl = m.command("PTTL", key)
        assert pttl == -2 or 0 <= pttl <= ttl * 1000, f"{m}: key {key!r} has PTTL {pttl}"


def gone_within(local: Iterable[LocalMaster], key, seconds: float) -> None:
    """Assert that ``key`` disappears from every running master within ``seconds``.

    A call may return once its outcome is decided, before the last masters confirmed its cleanup
    (their replies are read later): the deletes are on the wire, and land within a round trip.
    """
    deadline = time.monotonic() + seconds
    while True:
        left = [m for m in local if m.running() and m.command("EXISTS", key)]
        if not left:
            return
        assert time.monotonic() < deadline, f"key {key!r} still on {left} after {seconds}s"
        time.sleep(0.005)


def wait_gone(local: Iterable[LocalMaster], key, ttl: float) -> None:
    """Wait out ``ttl`` (and a little) and assert the key exists on no running master."""
    time.sleep(ttl + 0.05)
    left = [m for m in local if m.running() and m.command("EXISTS", key)]
    assert not left, f"key {key!r} still on {left} after its TTL"


class Counter:
    """An independent INCR/DECR holder count on a master the lock client never talks to."""

    def __init__(self, master: LocalMaster, key: str) -> None:
        self.master = master
        self.key = key
        self.peak = 0

    def enter(self) -> int:
        """Count one more holder; return how many hold now (must be 1)."""
        n = self.master.command("INCR", self.key)
        self.peak = max(self.peak, n)
        return n

    def leave(self) -> None:
        self.master.command("DECR", self.key)

    def check(self) -> None:
        """Enter and leave at once: assert nobody else holds right now."""
        assert self.enter() == 1, "two holders at once"
        self.leave()




#: Lock cycles a throwaway client runs on PyPy before a fault test's warm-up (see :func:`warm`).
PYPY_WARMUP = 100


def warm(dlm, name: str) -> None:
    """One lock cycle so every connection is open (the next round reuses them) and has read its
    probes' answers (an acquisition returns at a quorum: a straggler's come with the release).

    On PyPy a throwaway client of the same masters first runs :data:`PYPY_WARMUP` cycles with a
    generous ``io_timeout``: a cold JIT's first rounds (it traces them) can outlast the suite's
    50 ms, and the fault under test, not the JIT's warm-up, must decide the outcome. Its timeouts,
    were there any, would leave ``dlm``'s health (cool-downs) untouched.
    """
    if platform.python_implementation() == "PyPy":
        from fastredlock import Redlock

        jit = Redlock([f"redis://{m}" for m in dlm.masters], core=dlm.core, io_timeout=1.0, connect_timeout=1.0,
                      restart_aware=False)
        try:
            for _ in range(PYPY_WARMUP):
                lock = jit.lock(name + ":jit", ttl=5.0)
                if lock.acquire(blocking=False):
                    lock.release()
        finally:
            jit.close()
    lock = dlm.lock(name + ":warm", ttl=1.0)
    assert lock.acquire(blocking=False)
    lock.release()


def command_calls(master: LocalMaster) -> dict:
    """``{command: calls}`` from a master's ``INFO commandstats`` (a script's own calls included)."""
    calls = {}
    for line in master.command("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            calls[name] = int(rest.split(",", 1)[0].split("=")[1])
    return calls


def library_warnings(caplog) -> list:
    """The WARNING records of the ``fastredlock`` logger that ``caplog`` captured."""
    return [r for r in caplog.records if r.name == "fastredlock" and r.levelno == logging.WARNING]
