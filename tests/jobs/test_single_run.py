"""``fastredlock.jobs.single_run`` with a sync client on real masters, both cores: skip, wait and
raise when the key is held; the key from the job's arguments; renewal through a job longer than
its TTL; a lock lost mid-job; no key left after a return, an exception or KeyboardInterrupt; and
the errors for bad input."""
from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import threading
import time

import pytest

from fastredlock import LockLostError, LockNotAcquiredError, Redlock, jobs
from fastredlock.asyncio import Redlock as AsyncRedlock


@pytest.fixture
def dlm(jobs_client):
    return jobs_client()


def test_runs_returns_and_releases(dlm, name, keys_left):
    @jobs.single_run(dlm, name=name, ttl=5)
    def job(x, y=2):
        run = jobs.current()
        assert run.name == name and run.lock.locked() and keys_left(name) == 5
        return x + y

    assert jobs.current() is None
    assert job(1) == 3
    assert job.__name__ == "job" and job.single_run.ttl == 5
    assert keys_left(name) == 0 and jobs.current() is None


def test_skip_when_held_does_not_run_and_reports(dlm, name, caplog):
    ran = []

    @jobs.single_run(dlm, name=name, ttl=5)
    def job():
        ran.append(1)

    holder = dlm.lock(name, ttl=5)
    assert holder.acquire()
    with caplog.at_level(logging.INFO, logger="fastredlock.jobs"):
        assert job() is jobs.SKIPPED
    holder.release()
    assert ran == [] and not jobs.SKIPPED
    assert any("skipped" in r.getMessage() and name in r.getMessage() for r in caplog.records)
    assert pickle.loads(pickle.dumps(jobs.SKIPPED)) is jobs.SKIPPED  # a result backend keeps it


def test_raise_when_held(dlm, name):
    @jobs.single_run(dlm, name=name, on_held="raise", ttl=5)
    def job():
        pytest.fail("ran while held")

    holder = dlm.lock(name, ttl=5)
    assert holder.acquire()
    with pytest.raises(jobs.JobHeldError) as info:
        job()
    holder.release()
    assert info.value.name == name and isinstance(info.value, LockNotAcquiredError)
    assert any(o.outcome == "no" for o in info.value.outcomes)


def test_wait_runs_once_the_holder_releases(dlm, name, keys_left):
    @jobs.single_run(dlm, name=name, on_held="wait", wait=5, ttl=5)
    def job():
        return "ran"

    holder = dlm.lock(name, ttl=5)
    assert holder.acquire()
    timer = threading.Timer(0.2, holder.release)
    timer.start()
    started = time.monotonic()
    assert job() == "ran"
    assert 0.15 < time.monotonic() - started < 3
    timer.join(5)
    assert keys_left(name) == 0


def test_wait_that_runs_out_raises(dlm, name):
    @jobs.single_run(dlm, name=name, on_held="wait", wait=0.3, ttl=5)
    def job():
        pytest.fail("ran while held")

    holder = dlm.lock(name, ttl=5)
    assert holder.acquire()
    started = time.monotonic()
    with pytest.raises(jobs.JobHeldError, match="after waiting 0.3 s"):
        job()
    assert 0.25 < time.monotonic() - started < 2
    holder.release()


def test_key_from_chosen_arguments(dlm, name):
    runs = []

    @jobs.single_run(dlm, name=name, key_args=["tenant", "day"], ttl=5)
    def job(tenant, day="today", *, verbose=False):
        runs.append(jobs.current().name)
        if len(runs) == 1:
            assert job(tenant, day, verbose=True) is jobs.SKIPPED  # other arguments: not part of the key
            assert job(day=day, tenant=tenant) is jobs.SKIPPED  # keywords or positions: the same key
            assert job(tenant, "tomorrow") is None  # another day: another key, runs meanwhile
            assert job(tenant) is jobs.SKIPPED  # the default value counts
        return None

    job(7)
    assert runs == [f'{name}:{{"day":"today","tenant":7}}', f'{name}:{{"day":"tomorrow","tenant":7}}']
    assert jobs.job_key("j", {"b": b"\x01", "a": [1, 2.5, None]}) == 'j:{"a":[1,2.5,null],"b":{"bytes":"01"}}'
    long = jobs.job_key("j", {"a": "x" * 300})
    assert long.startswith("j:sha256:") and len(long) == len("j:sha256:") + 64

    @jobs.single_run(dlm, name=name, key_args=lambda order, **_: f"order-{order}", ttl=5)
    def by_callable(order, note=""):
        return jobs.current().name

    assert by_callable(42, note="x") == f"{name}:order-42"


def test_default_name_is_module_and_qualname(dlm):
    @jobs.single_run(dlm, ttl=5)
    def nightly():
        return jobs.current().name

    assert nightly() == f"{__name__}.test_default_name_is_module_and_qualname.<locals>.nightly"


def test_renewal_keeps_a_job_longer_than_its_ttl(dlm, jobs_client, name, keys_left):
    rival = jobs_client(retry_count=0)
    checks = []

    @jobs.single_run(dlm, name=name, ttl=0.6)
    def long_job():
        deadline = time.monotonic() + 1.3  # over two TTLs: without renewal the rival gets it
        while time.monotonic() < deadline:
            checks.append(rival.lock(name, ttl=5).acquire(blocking=False))
            jobs.current().check()
            time.sleep(0.05)
        return "done"

    assert long_job() == "done"
    assert len(checks) >= 10 and not any(checks)
    assert keys_left(name) == 0


def test_lost_lock_raises_after_the_job_with_its_result(dlm, name, drop_key, until, caplog):
    @jobs.single_run(dlm, name=name, ttl=0.3)
    def job():
        drop_key(name)  # behind the holder's back: the next renewal finds it gone
        until(lambda: jobs.current().lost, 3, "the watchdog to find the lock lost")
        with pytest.raises(LockLostError):
            jobs.current().check()
        return 41

    with caplog.at_level(logging.WARNING, logger="fastredlock.jobs"):
        with pytest.raises(jobs.JobLockLostError) as info:
            job()
    assert info.value.result == 41 and info.value.finished and info.value.name == name
    assert any("lost its lock" in r.getMessage() for r in caplog.records)


def test_lost_lock_reported_returns_the_result(dlm, name, drop_key, until):
    @jobs.single_run(dlm, name=name, ttl=0.3, on_lost="report")
    def job():
        drop_key(name)
        until(lambda: jobs.current().lost, 3, "the watchdog to find the lock lost")
        return 42

    assert job() == 42


@pytest.mark.parametrize("exc", [ValueError("boom"), KeyboardInterrupt()])
def test_an_exception_in_the_job_releases(dlm, name, keys_left, exc):
    @jobs.single_run(dlm, name=name, ttl=5)
    def job():
        assert keys_left(name) == 5
        raise exc

    with pytest.raises(type(exc)):
        job()
    assert keys_left(name) == 0
    assert job.__wrapped__ is not None and jobs.current() is None


def test_with_block(dlm, name, keys_left, drop_key, until):
    with jobs.single_run(dlm, name, ttl=5) as run:
        assert run.lock.locked() and keys_left(name) == 5 and jobs.current() is run
        with pytest.raises(jobs.JobHeldError):  # a with block cannot be skipped
            with jobs.single_run(dlm, name):
                pytest.fail("entered while held")
    assert keys_left(name) == 0 and jobs.current() is None
    with pytest.raises(RuntimeError, match="boom"):
        with jobs.single_run(dlm, name, ttl=5):
            raise RuntimeError("boom")
    assert keys_left(name) == 0
    with pytest.raises(jobs.JobLockLostError):
        with jobs.single_run(dlm, name, ttl=0.3) as run:
            drop_key(name)
            until(lambda: run.lost, 3, "the watchdog to find the lock lost")
    guard = jobs.single_run(dlm, name, ttl=5)
    with guard:
        with pytest.raises(RuntimeError, match="already entered"):
            guard.__enter__()
    assert keys_left(name) == 0


def test_masters_unreachable_is_not_a_held_name(make_client):
    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    dead = make_client([f"redis://127.0.0.1:{p}" for p in ports], retry_count=0)

    @jobs.single_run(dead, name="unreachable", ttl=5)
    def job():
        pytest.fail("ran without a quorum")

    with pytest.raises(LockNotAcquiredError, match="no quorum") as info:
        job()
    assert not isinstance(info.value, jobs.JobHeldError)


def test_a_client_factory_is_called_at_each_run(dlm, name):
    calls = []

    def factory():
        calls.append(1)
        return dlm

    @jobs.single_run(factory, name=name, ttl=5)
    def job():
        return "ok"

    assert job() == "ok" and job() == "ok" and len(calls) == 2


def test_bad_input_errors(one_dlm, masters):
    def job(a):
        pass

    async def ajob(a):
        pass

    def gen():
        yield 1

    bad = [
        (TypeError, "dlm must be", dict(dlm=object())),
        (TypeError, "name must be", dict(name="")),
        (ValueError, "on_held must be one of", dict(on_held="later")),
        (ValueError, "needs wait=", dict(on_held="wait")),
        (ValueError, "applies to on_held='wait' only", dict(wait=3)),
        (ValueError, "finite number", dict(on_held="wait", wait=float("inf"))),
        (TypeError, "wait must be a number", dict(on_held="wait", wait="3")),
        (ValueError, "ttl must be", dict(ttl=0)),
        (TypeError, "ttl must be", dict(ttl=True)),
        (ValueError, "max_hold must be", dict(max_hold=-1)),
        (ValueError, "on_lost must be one of", dict(on_lost="ignore")),
        (ValueError, "on_lost='cancel' needs", dict(on_lost="cancel")),
        (TypeError, "key_args must", dict(key_args=3)),
        (TypeError, "key_args must", dict(key_args=["a", ""])),
    ]
    for exc, message, kwargs in bad:
        args = {"dlm": one_dlm, **kwargs}
        with pytest.raises(exc, match=message):
            jobs.single_run(args.pop("dlm"), **args)
    with pytest.raises(ValueError, match=r"does not take"):
        jobs.single_run(one_dlm, key_args=["b"])(job)
    with pytest.raises(TypeError, match="async def job .or async with. needs a fastredlock.asyncio.Redlock"):
        jobs.single_run(one_dlm)(ajob)

    async def enter():
        async with jobs.single_run(one_dlm, "n"):
            pass

    with pytest.raises(TypeError, match="needs a fastredlock.asyncio.Redlock"):
        asyncio.run(enter())
    with pytest.raises(TypeError, match="generator function"):
        jobs.single_run(one_dlm)(gen)
    with pytest.raises(TypeError, match="decorates a function"):
        jobs.single_run(one_dlm)(42)
    with pytest.raises(ValueError, match="needs name="):
        with jobs.single_run(one_dlm):
            pass
    with pytest.raises(ValueError, match="key_args applies to decorated jobs"):
        with jobs.single_run(one_dlm, "n", key_args="a"):
            pass
    with pytest.raises(TypeError, match="key arguments must be str"):
        jobs.single_run(one_dlm, key_args="a", ttl=5)(job)(object())
    with pytest.raises(ValueError, match="finite number"):
        jobs.single_run(one_dlm, key_args="a", ttl=5)(job)(float("nan"))
    with pytest.raises(TypeError, match="callable must return a str or an int"):
        jobs.single_run(one_dlm, key_args=lambda a: [a], ttl=5)(job)(1)
    with pytest.raises(TypeError, match="returned a int"):
        jobs.single_run(lambda: 3, ttl=5)(job)(1)
    adlm = AsyncRedlock(masters.urls)
    with pytest.raises(TypeError, match="runs async def jobs"):
        jobs.single_run(adlm)(job)
    with pytest.raises(TypeError, match="runs async def jobs"):
        jobs.single_run(lambda: adlm, ttl=5)(job)(1)
    assert isinstance(one_dlm, Redlock)
