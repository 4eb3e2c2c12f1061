"""Where ``select.poll`` does not exist (Windows), the pure core polls with ``select.select``.

Run in a subprocess with ``select.poll`` removed before fastredlock is imported, so the fallback
is what the round really uses.
"""
from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import select, sys
del select.poll
import fastredlock._pure.io.core_py as cp
assert cp._new_poller.__name__ == "_SelectPoller"
import fastredlock
urls = sys.argv[1:]
dlm = fastredlock.Redlock(urls, core="python", restart_aware=False, retry_count=0)
with dlm.lock("select-fallback", ttl=5.0) as lock:
    assert [o.outcome for o in lock.outcomes] == ["ok"] * len(urls)
    assert not fastredlock.Redlock(urls, core="python", restart_aware=False, retry_count=0).lock(
        "select-fallback", ttl=5.0).acquire(blocking=False)
print("ok")
"""


def test_pure_core_works_without_poll(masters):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *masters.urls], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
