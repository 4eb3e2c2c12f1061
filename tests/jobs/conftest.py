"""Fixtures of the jobs tests: the event loops (default and uvloop) and asyncio clients, as in
tests/asyncio; a wait-until helper bounded by a deadline; raw key counts on the masters."""
from __future__ import annotations

import os
import sys
import time

import pytest

from fastredlock.asyncio import Redlock as AsyncRedlock

from _loops import arun, loop_kind  # noqa: F401 (fixtures offered to the tests below)

#: The jobs tests' per-master deadline: what they check is not the I/O timing, and a shared test
#: machine under load answers slower than the 50 ms default (a missed quorum would fail them).
IO_TIMEOUT = 0.25


@pytest.fixture
def aclient(core):
    """``aclient(urls, **kwargs)``: an asyncio ``Redlock`` on the core under test (close it with
    ``aclose``); restart-aware voting off (young masters); 0.25 s per master (:data:`IO_TIMEOUT`)."""

    def make(urls, **kwargs):
        kwargs.setdefault("core", core)
        kwargs.setdefault("restart_aware", False)
        kwargs.setdefault("io_timeout", IO_TIMEOUT)
        return AsyncRedlock(urls, **kwargs)

    return make


def wait_until(predicate, timeout: float, what: str, interval: float = 0.01):
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def jobs_client(make_client, masters):
    """``jobs_client(**kwargs)``: a sync client on the session masters and the core under test,
    with :data:`IO_TIMEOUT` and short retries."""

    def make(**kwargs):
        kwargs.setdefault("io_timeout", IO_TIMEOUT)
        kwargs.setdefault("retry_delay", 0.02)
        kwargs.setdefault("retry_jitter", 0.01)
        return make_client(masters.urls, **kwargs)

    return make


@pytest.fixture
def keys_left(masters):
    """``keys_left(name)``: on how many masters the key ``name`` exists (a raw read)."""
    return lambda key: sum(m.command("EXISTS", key) for m in masters)


@pytest.fixture
def drop_key(masters):
    """``drop_key(name)``: delete the key on every master behind its holder's back (a lost lock)."""
    return lambda key: [m.command("DEL", key) for m in masters]


@pytest.fixture(scope="session")
def until():
    """:func:`wait_until`: ``until(predicate, timeout, what)``."""
    return wait_until


HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def job_broker():
    """A local master started for one worker test module: the job queue's broker and the place
    where jobs record their runs (tests/jobs/_jobs.py)."""
    from fastredlock.testing import start_masters

    with start_masters(1) as broker:
        yield broker[0]


@pytest.fixture(scope="module")
def job_env(masters, job_broker):
    """The environment of worker processes: the lock masters, the broker, tests/jobs importable."""
    return dict(os.environ, JOBS_MASTERS=",".join(masters.urls), JOBS_BROKER=job_broker.url,
                PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))


def stop_processes(procs, timeout: float = 10.0) -> None:
    """Terminate the processes still running, then wait for each (SIGKILL after ``timeout``)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout)
        except Exception:  # subprocess.TimeoutExpired  # pragma: no cover
            proc.kill()
            proc.wait(5)


def ran_pids(broker, tag):
    """The process ids that ran ``hold_*(tag)``, in order."""
    return [int(pid) for pid in broker.command("LRANGE", f"ran:{tag}", 0, -1)]


def free_after_kill(pid, key_count, ttl, until):
    """SIGKILL ``pid`` (the process running the job, holding its key), then wait until its key is
    gone from every master; return how long that took (seconds)."""
    import signal

    assert key_count() >= 3, "the job's key must be held right before the kill"
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    until(lambda: key_count() == 0, 4 * ttl, "the killed worker's key to expire")
    return time.monotonic() - killed


@pytest.fixture(scope="session")
def job_helpers():
    """``(ran_pids, free_after_kill, stop_processes)`` for the worker tests."""
    return ran_pids, free_after_kill, stop_processes
