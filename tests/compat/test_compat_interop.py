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

sys.path.insert(0, os.path.dirname(__file__))
import _originals  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "_interop_worker.py")
SECONDS = 3.0


def _env(path, *, shim):
    """The worker's environment: the original's folder (or the shim's pinned dependencies) on
    PYTHONPATH and, for the shim, the fastredlock under test after them (not whichever one the
    interpreter would find on its own, such as another checkout's editable install)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    paths = [str(path)] if path is not None else []
    if shim:
        paths.append(os.path.dirname(os.path.dirname(fastredlock.__file__)))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@pytest.fixture
def counter():
    master = LocalMaster().start()
    yield master
    master.stop()


@pytest.mark.slow
@pytest.mark.parametrize("lib", list(_originals.ORIGINALS))
def test_original_and_shim_exclude_each_other(lib, core, masters, counter, name, keys_on):
    try:
        original_path = _originals.install(lib)
        shim_path = _originals.shim_deps(lib)
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot install the original {lib}: {exc}")
    spec = {
        "ports": [m.port for m in masters],
        "counter_port": counter.port,
        "resource": name,
        "seconds": SECONDS,
        "ttl_ms": 2000,
        "core": core,
        "start_at": time.time() + 1.5,  # after every interpreter has started
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
    key = f"redlock:{name}" if lib.startswith("pottery") else name
    if keys_on(masters, key):
        time.sleep(spec["ttl_ms"] / 1000 + 0.2)
    assert keys_on(masters, key) == 0, "a lock was left behind past its TTL"
