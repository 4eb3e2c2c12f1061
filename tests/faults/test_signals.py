"""Signals never leave a lock held: a process doing ``with dlm.lock(...)`` cycles is interrupted by
SIGINT at random moments, 20 times, then exits; no key of its is left on any master.

Both builds: the installed one (the C core and the compiled front-end) and the pure one, every
module interpreted (a copy of the package's sources without its extensions, with
``FASTREDLOCK_NO_EXTENSIONS=1``), where a signal can land between any two bytecodes.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

import fastredlock

from _bounded import BOUND, read_line

SIGNALS = 20

# The child hears SIGINT whatever it inherited: a shell starts a background job (``pytest &``) with
# SIGINT ignored, and a Python started with SIG_IGN installs no KeyboardInterrupt handler.
CHILD = r"""
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import sys
import fastredlock
urls, prefix, signals = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
dlm = fastredlock.Redlock(urls, restart_aware=False, retry_count=0)
assert fastredlock.CORE == sys.argv[4], fastredlock.CORE
heard = cycle = 0
print("ready", flush=True)
while heard < signals:
    try:
        while True:
            cycle += 1
            with dlm.lock(f"{prefix}{cycle}", ttl=30):
                pass
    except KeyboardInterrupt:
        heard += 1
        print("heard", heard, flush=True)
dlm.close()
"""


@pytest.fixture(scope="module")
def pure_tree(tmp_path_factory):
    """A copy of the package's sources without any compiled module: the pure build."""
    src = os.path.dirname(os.path.abspath(fastredlock.__file__))
    dest = tmp_path_factory.mktemp("pure") / "fastredlock"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.so", "*.c", "*.html", "__pycache__"))
    return str(dest.parent)


@pytest.mark.parametrize("build", ["installed", "pure"])
def test_sigint_at_random_moments_leaves_no_key(masters, build, pure_tree):
    if build == "installed" and fastredlock.CORE != "cython":  # pragma: no cover - a pure install
        pytest.skip("the installed build is the pure one here")
    env = dict(os.environ)
    expected = "cython"
    if build == "pure":
        env["PYTHONPATH"] = pure_tree + os.pathsep + env.get("PYTHONPATH", "")
        env["FASTREDLOCK_NO_EXTENSIONS"] = "1"
        expected = "python"
    prefix = f"sigint:{uuid.uuid4().hex}:"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, ",".join(masters.urls), prefix, str(SIGNALS), expected],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def stderr() -> str:  # the child's error output, once it has ended (killed if need be)
        child.kill()
        return child.communicate(timeout=BOUND)[1][-2000:]

    try:
        line = read_line(child)
        assert line.strip() == "ready", f"{line!r}: {stderr()}"
        for n in range(1, SIGNALS + 1):
            time.sleep(random.uniform(0.005, 0.04))  # a random moment of its cycles
            child.send_signal(signal.SIGINT)
            line = read_line(child).strip()  # it heard this one before the next is sent
            assert line == f"heard {n}", f"{line!r}: {stderr()}"
        assert child.wait(timeout=30) == 0, stderr()
    finally:
        if child.poll() is None:  # pragma: no cover - a failed test
            child.kill()
            child.wait(timeout=BOUND)
    left = {m.url: m.command("KEYS", prefix + "*") for m in masters}
    assert not any(left.values()), f"keys left after {SIGNALS} interrupts: {left}"
