"""The jobs of the worker tests (test_rq.py, test_dramatiq.py, test_apscheduler.py), imported by
real RQ workers, Dramatiq workers and APScheduler processes.

Environment: ``JOBS_MASTERS`` (comma-separated lock masters) and ``JOBS_BROKER`` (the Redis URL of
the test's broker, where runs are recorded). Each process makes its own clients (after the fork).
"""
from __future__ import annotations

import os

import redis

from fastredlock import Redlock
from fastredlock.jobs import SKIPPED, single_run

#: The jobs' lock TTL: a killed worker's key is gone at most this long after its last renewal.
TTL = 1.0
#: The lock name of ``hold_*(tag)``.
NAME = "workers-hold"

_clients: dict = {}


def client(core: str) -> Redlock:
    """This process's client on ``core`` (made on first use, in the process that runs jobs)."""
    key = (os.getpid(), core)
    if key not in _clients:
        # io_timeout 0.25 s: a loaded test machine answers slower than production's 50 ms default
        _clients[key] = Redlock(os.environ["JOBS_MASTERS"].split(","), core=core, restart_aware=False,
                                io_timeout=0.25)
    return _clients[key]


def broker() -> "redis.Redis":
    """This process's connection to the test's broker."""
    key = (os.getpid(), "broker")
    if key not in _clients:
        _clients[key] = redis.Redis.from_url(os.environ["JOBS_BROKER"])
    return _clients[key]


def lock_name(tag: str) -> str:
    """The lock name of ``hold_*(tag)`` (the job's name and its key argument)."""
    return f'{NAME}:{{"tag":"{tag}"}}'


def _hold(tag: str) -> str:
    """Record this run (the process id), then hold until the test says go (at most 15 s)."""
    b = broker()
    b.rpush(f"ran:{tag}", os.getpid())
    b.blpop([f"go:{tag}"], timeout=15)
    return "done"


@single_run(lambda: client("cython"), name=NAME, key_args="tag", ttl=TTL)
def hold_cython(tag: str) -> str:
    """The single-run job on the Cython core."""
    return _hold(tag)


@single_run(lambda: client("python"), name=NAME, key_args="tag", ttl=TTL)
def hold_python(tag: str) -> str:
    """The single-run job on the pure core."""
    return _hold(tag)


HOLD = {"cython": hold_cython, "python": hold_python}


def deliver(tag: str, core: str) -> None:
    """Run ``hold_<core>(tag)`` and record what happened (for runners that drop results)."""
    result = HOLD[core](tag)
    broker().rpush(f"outcome:{tag}", "skipped" if result is SKIPPED else result)
