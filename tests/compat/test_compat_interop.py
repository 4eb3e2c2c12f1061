"""Mixed fleets: the original library in one process, its shim in another, on the same resource.

For each original (installed in its own folder: redlock-py and glasslion's redlock are both the
module ``redlock``), two processes run the original and two run the shim for a few seconds, all
locking one resource on the five session masters. An independent counter on a sixth master never
sees two holders, both sides make progress, and both sides are refused at times (so they really
contended on the same key). redis-py's Lock and its asyncio Lock (``redis-py``, ``redis-py-aio``)
lock on one server, the first of the five, as their shims do.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import fastredlock
from fastredlock.testing import LocalMaster

import _originals

WORKER = os.path.join(os.path.dirname(__file__), "_interop_worker.py")
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/: _contender, for the worker
SECONDS = 1.5  # each side still makes hundreds of attempts (both sides' progress and refusals are asserted)
TTL_MS = 2000  # the workers' lock TTL


def _env(path, *, shim):
    """The worker's environment: the original's folder (or the shim's pinned dependencies) on
    PYTHONPATH and, for the shim, the fastredlock under test after them (not whichever one the
    interpreter would find on its own, such as another checkout's editable install); last, tests/
    for the worker's one import from the suite (``_contender``: the contention loop and counter)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    paths = [str(path)] if path is not None else []
    if shim:
        paths.append(os.path.dirname(os.path.dirname(fastredlock.__file__)))
    paths.append(TESTS)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@pytest.fixture
def counter():
    master = LocalMaster().start()
    yield master
    master.stop()


def _run_sides(lib, core, masters, counter, name, seconds, unprotected=False, no_timeout=False):
    """Run two originals and two shims of ``lib`` on ``name`` at once; return their reports by side."""
    try:
        original_path = _originals.install(lib)
        shim_path = _originals.shim_deps(lib)
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot install the original {lib}: {exc}")
    spec = {
        "ports": [m.port for m in masters],
        "counter_port": counter.port,
        "resource": name,
        "seconds": seconds,
        "ttl_ms": TTL_MS,
        "core": core,
        "parties": 4,  # they start together, once all four are ready
        "unprotected": unprotected,
        "no_timeout": no_timeout,
    }
    sides = ["original", "shim", "original", "shim"]
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, lib, side, json.dumps(spec)],
            env=_env(original_path if side == "original" else shim_path, shim=side == "shim"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for side in sides
    ]
    results = {"original": [], "shim": []}
    for side, proc in zip(sides, procs):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{side} worker failed:\n{err[-3000:]}"
        results[side].append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("lib", list(_originals.ORIGINALS))
def test_original_and_shim_exclude_each_other(lib, core, masters, counter, name, keys_on):
    results = _run_sides(lib, core, masters, counter, name, SECONDS)
    summary = json.dumps(results)
    for side, runs in results.items():
        for run in runs:
            assert run["overlaps"] == 0, f"two holders at once: {summary}"
            assert run["errors"] == [], summary
        assert sum(r["held"] for r in runs) >= 10, f"the {side} side made no progress: {summary}"
        assert sum(r["refused"] for r in runs) > 0, f"the {side} side never met the other: {summary}"
    assert counter.command("GET", "holders") == b"0"
    # A SET that arrived after its release (a late reply on a busy machine; pottery also returns at
    # quorum with SETs still in flight) may linger, but only until its TTL: nothing is left for good.
    key = {"pottery": f"redlock:{name}", "pottery-aio": f"redlock:{name}", "python-redis-lock": f"lock:{name}"}.get(lib, name)
    deadline = time.monotonic() + TTL_MS / 1000 + 0.2
    while keys_on(masters, key) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert keys_on(masters, key) == 0, "a lock was left behind past its TTL"


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["redis-py", pytest.param("redis-py-aio", marks=pytest.mark.skipif(
    not os.environ.get("FASTREDLOCK_LONG_SUITES"), reason="the asyncio twin of the redis-py run: runs with "
    "FASTREDLOCK_LONG_SUITES=1 (the default run stays short)"))])
def test_redis_py_locks_without_timeout_exclude_each_other(lib, core, masters, counter, name, keys_on):
    # redis-py's Lock without timeout stores its key without expiry, and so does the shim's: both
    # sides set and delete the same key, and nothing is left behind (no TTL would ever clear it).
    results = _run_sides(lib, core, masters, counter, name, SECONDS, no_timeout=True)
    summary = json.dumps(results)
    for side, runs in results.items():
        for run in runs:
            assert run["overlaps"] == 0 and run["errors"] == [], summary
        assert sum(r["held"] for r in runs) >= 10, f"the {side} side made no progress: {summary}"
        assert sum(r["refused"] for r in runs) > 0, f"the {side} side never met the other: {summary}"
    assert counter.command("GET", "holders") == b"0"
    assert keys_on(masters[:1], name) == 0, "a lock without expiry was left behind"


@pytest.mark.slow
def test_original_and_shim_on_different_keys_overlap(core, masters, counter, name):
    # The negative control of the overlap check above: the shim side locks another resource (as a
    # shim whose keys differed from the original's would), so the two sides exclude nobody, and
    # the counter must see it. One library (the cheapest to install) shows the check can fire.
    results = _run_sides("redlock-py", core, masters, counter, name, 1.0, unprotected=True)
    assert sum(run["overlaps"] for runs in results.values() for run in runs) > 0, results
def _install(lib):
    try:
        return _originals.install(lib), _originals.shim_deps(lib)
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot install the original {lib}: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("holder, waiter", [("original", "shim"), ("shim", "original")])
def test_redis_lock_release_wakes_a_waiter_on_the_other_side(holder, waiter, core, masters, name):
    """python-redis-lock's waiters sleep in BLPOP on ``lock-signal:NAME``: a release by either side
    wakes a waiter of the other, long before its timeout (5 s) would have. The holder releases once
    the waiter is blocked (the server counts it), or after ``hold`` seconds."""
    paths = dict(zip(("original", "shim"), _install("python-redis-lock")))
    spec = {"ports": [masters[0].port], "resource": name, "core": core, "hold": 10.0, "timeout": 5}

    def start(side, role):
        env = _env(paths[side], shim=side == "shim")
        return subprocess.Popen([sys.executable, WORKER, "python-redis-lock", side, json.dumps({**spec, "role": role})],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    hold = start(holder, "hold")
    wait = start(waiter, "wait")
    outs = {}
    for role, proc in (("hold", hold), ("wait", wait)):
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"{role} worker failed:\n{err[-3000:]}"
        outs[role] = json.loads(out.strip().splitlines()[-1])
    assert outs["wait"]["got"], outs
    latency = outs["wait"]["acquired_at"] - outs["hold"]["released_at"]
    print(f"{holder} released, {waiter} woke {latency * 1000:.1f} ms later (its timeout: {spec['timeout']} s)")
    assert 0 <= latency < 0.5, f"woken {latency:.3f} s after the release (timeout {spec['timeout']} s): {outs}"
