"""Signals never leave a lock held: a process doing ``with dlm.lock(...)`` cycles is interrupted by
SIGINT at random moments, 20 times, then exits; no key of its is left on any master.

Both builds: the installed one (the C core and the compiled front-end) and the pure one, every
module interpreted (a copy of the package's sources without its extensions, with
``FASTREDLOCK_NO_EXTENSIONS=1``), where a signal can land between any two bytecodes.

Random moments hit a window now and then; in the pure build, the front-end and engine's points
where a signal can land are also walked one by one (see :data:`SWEEP_CHILD`).
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


# Where CPython runs a signal's handler (so where KeyboardInterrupt is raised): as a function
# begins, just after a call returns, and at a loop's back edge (its "eval breaker"; 3.10 on),
# never between two other bytecodes. A trace function with opcode events raises KeyboardInterrupt at the k-th of
# those points met in the front-end's and engine's code (sync/, handles/, engine/; with
# FASTREDLOCK_SWEEP_ALL=1, every module's: ~700 points a phase, some seconds each) once a ``with``
# block's entry (or its exit) began, as a signal landing there would, one interruption per cycle,
# for every k. (Line events would over-report: in 3.11 a trace function raising at a ``try:`` line
# skips the enclosing handlers, and at a ``with`` line before ``__exit__`` is called; no signal
# lands there.) Each cycle is bounded: one stuck for 20 s (a lead or a lock left taken by an
# earlier cycle) ends the child with every thread's stack.
SWEEP_CHILD = r"""
import dis, faulthandler, os, sys
import fastredlock
urls, prefix, phase, auto_pipeline = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
assert fastredlock.CORE == "python", fastredlock.CORE
package = os.path.dirname(fastredlock.__file__) + os.sep
swept = (package,) if sys.argv[5] == "all" else tuple(package + part + os.sep for part in ("sync", "handles", "engine"))
dlm = fastredlock.Redlock(urls, restart_aware=False, retry_count=0, auto_pipeline=auto_pipeline)
state = {"armed": False, "count": 0, "at": -1, "struck": None}
breakers = {}
CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_METHOD", "CALL_FUNCTION_EX")  # 3.9-3.13
BACK_EDGES = ("JUMP_BACKWARD", "JUMP_ABSOLUTE")  # (3.9 and 3.10: JUMP_ABSOLUTE, also a forward jump)

def after_calls(code):  # the offsets just after a call, and the back edges, of a code object
    points = breakers.get(code)
    if points is None:
        ins = list(dis.get_instructions(code))
        points = {b.offset for a, b in zip(ins, ins[1:]) if a.opname in CALLS}
        points.update(i.offset for i in ins if i.opname in BACK_EDGES)
        breakers[code] = points
    return points

def strike(frame, what):
    state["count"] += 1
    if state["count"] == state["at"]:
        state["armed"] = False
        state["struck"] = f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}, {what})"
        if phase == "exit" and state["count"] == 1:
            # The handle's __exit__ as it begins: nothing of ours has run, the key stays until its
            # TTL. No Python code can guard its own first instruction (compiled, it is a C call).
            assert frame.f_code.co_name == "__exit__", state["struck"]
            return
        raise KeyboardInterrupt

def opcode(frame, event, arg):
    if event == "opcode" and state["armed"] and frame.f_lasti in after_calls(frame.f_code):
        strike(frame, "after a call")
    return opcode

def call(frame, event, arg):
    if not frame.f_code.co_filename.startswith(swept):
        return None
    frame.f_trace_opcodes = True
    if state["armed"]:
        strike(frame, "as it begins")
    return opcode

class Phase:  # arms the tracer around __enter__ or __exit__ of the lock's with block
    def __init__(self, lock):
        self.lock = lock
    def __enter__(self):
        state["armed"] = phase == "enter"
        try:
            return self.lock.__enter__()
        finally:
            state["armed"] = False
    def __exit__(self, *exc):
        state["armed"] = phase == "exit"
        try:
            return self.lock.__exit__(*exc)
        finally:
            state["armed"] = False

def cycle(name, at):
    state.update(count=0, at=at, struck=None)
    faulthandler.dump_traceback_later(20, exit=True)
    sys.settrace(call)
    try:
        with Phase(dlm.lock(name, ttl=30)):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
        faulthandler.cancel_dump_traceback_later()
    return state["struck"]

cycle(prefix + "clean", -1)  # warm: connections open, scripts loaded
k = 0
while True:  # until a cycle ends before its k-th point (their number varies a little)
    k += 1
    where = cycle(f"{prefix}{k}", k)
    if where is None:
        break
    print(k, where, flush=True)
cycle(prefix + "after", -1)  # usable after all that
assert not dlm.executor.combiner._busy
dlm.close()
print("points", k - 1, flush=True)
"""


@pytest.mark.parametrize("auto_pipeline", [True, False], ids=["auto_pipeline", "no_pipeline"])
@pytest.mark.parametrize("phase", ["enter", "exit"])
def test_a_signal_at_any_point_of_a_with_block_leaves_no_key_and_no_lead(masters, pure_tree, phase,
                                                                          auto_pipeline):
    env = dict(os.environ, PYTHONPATH=pure_tree + os.pathsep + os.environ.get("PYTHONPATH", ""),
               FASTREDLOCK_NO_EXTENSIONS="1")
    prefix = f"sweep:{uuid.uuid4().hex}:"
    child = subprocess.run(
        [sys.executable, "-c", SWEEP_CHILD, ",".join(masters.urls), prefix, phase, str(int(auto_pipeline)),
         "all" if os.environ.get("FASTREDLOCK_SWEEP_ALL") == "1" else "front"],
        capture_output=True, text=True, env=env, timeout=4 * BOUND)
    lines = child.stdout.splitlines()
    # A stuck cycle: a point struck in an earlier one (the last printed, or one before) left a lead
    # or a lock taken; its stack says where it waits.
    assert child.returncode == 0, f"stuck after {lines[-3:]}: {child.stderr[-3000:]}"
    points = int(lines[-1].split()[1])
    assert points > 20, lines[-1]
    where = dict(line.split(" ", 1) for line in lines[:-1])
    left = {m.url: m.command("KEYS", prefix + "*") for m in masters}
    struck = sorted({where.get(key.decode().rsplit(":", 1)[1]) for keys in left.values() for key in keys})
    assert not any(left.values()), f"keys left by a signal at {struck}"
