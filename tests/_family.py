"""Helpers shared by the lock family's tests (tests/sync/test_rlock.py, test_rwlock.py,
test_semaphore.py): a holder subprocess to kill, and reads of the masters' keys."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from _bounded import BOUND, joined, read_line

HOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sync", "_family_holder.py")


def start_holder(core: str, kind: str, name: str, ttl: float, urls) -> subprocess.Popen:
    """A subprocess holding ``kind`` of ``name`` (renewing); returns once it says it holds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, HOLDER, core, kind, name, str(ttl), *urls],
                            stdout=subprocess.PIPE, env=env, text=True)
    line = read_line(proc)
    assert line.strip() == "held", line
    return proc


def kill9(proc: subprocess.Popen) -> float:
    """Kill ``proc`` with SIGKILL; the monotonic time it died."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=BOUND)
    return time.monotonic()


def tagged(name: str, suffix: str) -> bytes:
    """A family key of ``name`` as the masters see it (no client prefix)."""
    return b"{" + name.encode() + b"}" + suffix.encode()


def family_keys(masters, name: str) -> int:
    """How many keys under ``name``'s hash tag exist, over all running masters."""
    pattern = "{" + name + "}*"
    return sum(len(m.command("KEYS", pattern)) for m in masters if m.running())


def no_key_without_ttl(masters, name: str) -> bool:
    """Whether every key under ``name``'s hash tag has a TTL, on every running master."""
    pattern = "{" + name + "}*"
    for m in masters:
        if m.running():
            for key in m.command("KEYS", pattern):
                if m.command("PTTL", key) < 0:
                    return False
    return True


def eventually(read, expected, seconds: float = 1.0):
    """``read()`` once it equals ``expected`` (within ``seconds``), else its last value: an
    acquisition returns at quorum, and the slowest master may run its script a moment later."""
    end = time.monotonic() + seconds
    value = read()
    while value != expected and time.monotonic() < end:
        time.sleep(0.01)
        value = read()
    return value


def in_thread(acquire, release):
    """Run ``acquire()`` in a thread (then ``release()`` if it returned True); returns a
    ``join()`` that gives ``(acquire's result, seconds it took)``."""
    import threading

    out = []

    def run() -> None:
        start = time.monotonic()
        ok = acquire()
        out.append((ok, time.monotonic() - start))
        if ok:
            release()

    thread = threading.Thread(target=run)
    thread.start()

    def join():
        joined(thread)
        return out[0]

    join.done = lambda: bool(out)  # type: ignore[attr-defined]
    return join
