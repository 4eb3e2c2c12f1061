"""Differential tests: the Cython core and the pure-Python core, driven through the same scripted
scenarios, must give the same outcomes (hypothesis draws the scripts).

Each core gets its own three masters, so both start from the same state and see the same commands;
tokens differ, everything observable (ok flags, per-master outcomes, keys left) must not.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastredlock
from fastredlock.io.cores import NO_EXTENSIONS
from fastredlock.errors import LockError
from fastredlock.testing import start_masters

pytestmark = pytest.mark.skipif(NO_EXTENSIONS, reason="FASTREDLOCK_NO_EXTENSIONS: one core only")

NAMES = ["a", "b", "c d", "\u00e9\r\n"]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release", "extend", "rival", "delete", "flush_scripts", "many", "fenced",
                         "inspect"]),
        st.sampled_from(NAMES),
    ),
    min_size=1,
    max_size=12,
)


@pytest.fixture(scope="module")
def pairs():
    import fastredlock.io.core_c  # noqa: F401 - the Cython core must be built here

    with start_masters(3) as cy_masters, start_masters(3) as py_masters:
        yield {"cython": cy_masters, "python": py_masters}


def _run(core, local, ops, prefix):
    """Apply ``ops`` with a client on ``core``; return what an observer could see after each step."""
    dlm = fastredlock.Redlock(local.urls, core=core, retry_count=0, restart_aware=False, prefix=prefix)
    rival = fastredlock.Redlock(local.urls, core=core, retry_count=0, restart_aware=False, prefix=prefix)
    held = {}
    seen = []
    try:
        for op, name in ops:
            lock = held.get(name)
            try:
                if op == "acquire":
                    lock = lock or dlm.lock(name, ttl=30.0)
                    result = lock.acquire(blocking=False) if not lock.locked() else "held"
                    if result is True:
                        held[name] = lock
                elif op == "fenced":
                    fresh = dlm.lock(name, ttl=30.0, fencing=True)
                    result = fresh.acquire(blocking=False)
                    if result:
                        fresh.release()
                elif op == "release" and lock is not None:
                    del held[name]
                    lock.release()
                    result = "released"
                elif op == "extend" and lock is not None:
                    lock.extend(20.0)
                    result = "extended"
                elif op == "rival":
                    other = rival.lock(name, ttl=30.0)
                    result = other.acquire(blocking=False)
                    if result:
                        other.release()
                elif op == "delete":
                    for m in local:
                        m.command("DEL", prefix + name)
                    result = "deleted"
                elif op == "flush_scripts":
                    for m in local:
                        m.command("SCRIPT", "FLUSH")
                    result = "flushed"
                elif op == "inspect":
                    info = rival.inspect(name)
                    result = (info.state, info.holders, [m.outcome for m in info.masters], info.fence)
                elif op == "many":
                    got = dlm.acquire_many([name, name + "+"], ttl=30.0)
                    result = [g is not None for g in got]
                    dlm.release_many([g for g in got if g is not None])
                else:
                    result = "noop"
                outcomes = [o.outcome for o in lock.outcomes] if lock is not None else None
            except LockError as exc:
                result, outcomes = type(exc).__name__, [o.outcome for o in exc.outcomes]
            keys = sorted(
                k.decode("utf-8", "surrogateescape") for m in local for k in m.command("KEYS", prefix + "*")
            )
            seen.append((op, name, result, outcomes, keys))
    finally:
        for lock in held.values():
            try:
                lock.release()
            except LockError:
                pass
        dlm.close()
        rival.close()
    return seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, run=st.integers(0, 10**9))
def test_cores_agree_on_scripted_scenarios(pairs, ops, run):
    prefix = f"diff{run}:"
    cy = _run("cython", pairs["cython"], ops, prefix)
    py = _run("python", pairs["python"], ops, prefix)
    assert cy == py
