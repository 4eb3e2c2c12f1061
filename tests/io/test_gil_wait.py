"""The C core's wait for replies and the GIL: a short ``poll`` keeps the GIL where the process has
no other thread (dropping and retaking it costs more than the whole wait), and every wait lets it
go where another thread may want it (see ``_alone`` in io/core_c.pyx).

The rounds run in fresh interpreters: the suite's own process has threads (pytest-xdist's, the
servers' and the proxies'), where the first case never happens.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

import fastredlock
from fastredlock.testing import FaultProxy

pytestmark = pytest.mark.skipif(fastredlock.CORE != "cython", reason="the C core's wait (the pure core polls in Python)")

ALONE = r"""
import threading
from fastredlock.io import core_c
seen = [core_c._alone_now()]
ev = threading.Event()
t = threading.Thread(target=ev.wait, args=(30,))
t.start()
seen.append(core_c._alone_now())
ev.set()
t.join(30)
seen.append(core_c._alone_now())
print(seen)
"""

#: A client alone in its process, on masters whose replies are delayed (argv: latency, urls):
#: rounds that wait longer than the GIL is kept; then rounds while another thread runs.
ROUNDS = r"""
import sys, threading, time
import fastredlock
from fastredlock.io import core_c
latency, urls = float(sys.argv[1]), sys.argv[2:]
dlm = fastredlock.Redlock(urls, core="cython", restart_aware=False, retry_count=0, io_timeout=2.0)
assert core_c._alone_now()
for k in range(3):
    lock = dlm.lock(f"gil-wait:{k}", ttl=5.0)
    start = time.monotonic()
    assert lock.acquire(blocking=False)
    took = time.monotonic() - start
    assert took >= latency, took
    assert [o.outcome for o in lock.outcomes] == ["ok"] * len(urls)
    lock.release()
assert core_c._alone_now()
# Another thread notes the longest time it could not run (its loop needs the GIL each turn).
state = {"last": 0.0, "gap": 0.0}
stop = threading.Event()
def watch():
    while not stop.is_set():
        now = time.monotonic()
        if now - state["last"] > state["gap"]:
            state["gap"] = now - state["last"]
        state["last"] = now
t = threading.Thread(target=watch)
t.start()
gaps = []
try:
    assert not core_c._alone_now()
    for k in range(3):
        lock = dlm.lock(f"gil-wait:threads:{k}", ttl=5.0)
        state["last"], state["gap"] = time.monotonic(), 0.0
        assert lock.acquire(blocking=False)  # waits ~latency
        gaps.append(max(state["gap"], time.monotonic() - state["last"]))  # (if it never ran since)
        lock.release()
finally:
    stop.set()
    t.join(30)
dlm.close()
print("ok", min(gaps))
"""


def test_a_wait_keeps_the_gil_only_while_the_thread_is_alone():
    out = subprocess.run([sys.executable, "-c", ALONE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True, False, True]"


def test_rounds_wait_past_the_kept_gil_and_let_other_threads_run(masters, name):
    proxies = [FaultProxy(url).start() for url in masters.urls[:3]]
    try:
        for proxy in proxies:
            proxy.latency(0.2, "down")  # far past HOLD_MS (5 ms): the rest of the wait without the GIL
        out = subprocess.run([sys.executable, "-c", ROUNDS, "0.2", *[p.url for p in proxies]],
                             capture_output=True, text=True, timeout=60)
    finally:
        for proxy in proxies:
            proxy.stop()
    assert out.returncode == 0, out.stderr
    word, gap = out.stdout.split()
    assert word == "ok"
    # The rounds' 0.2 s waits let the GIL go: the other thread ran throughout (had a wait kept it,
    # that thread would have stopped for 0.2 s in every round; the best of 3 rounds is taken, as a
    # loaded machine may stop any thread for a while)
    assert float(gap) < 0.1, gap
