"""``fastredlock.jobs.single_run`` with an asyncio client, on both cores and both loops (the
default loop and uvloop): run, skip, raise, wait; cancellation of the job and of its wait release
the key; a lost lock raises, or cancels the job (``on_lost="cancel"``); ``async with``."""
from __future__ import annotations

import asyncio

import pytest

from fastredlock import jobs


def test_async_job_runs_skips_and_releases(arun, aclient, masters, name, keys_left):
    async def main():
        dlm = aclient(masters.urls)
        try:
            @jobs.single_run(dlm, name=name, ttl=5)
            async def job(x):
                assert jobs.current().name == name and keys_left(name) == 5
                assert await job(x) is jobs.SKIPPED
                await asyncio.sleep(0)
                return x * 2

            assert asyncio.iscoroutinefunction(job)
            assert await job(21) == 42
            assert keys_left(name) == 0

            raising = jobs.single_run(dlm, name=name, on_held="raise", ttl=5)(job.__wrapped__)
            holder = dlm.lock(name, ttl=5)
            assert await holder.acquire()
            with pytest.raises(jobs.JobHeldError):
                await raising(1)
            waiting = jobs.single_run(dlm, name=name, on_held="wait", wait=5, ttl=5)

            @waiting
            async def after_wait():
                return "ran"

            loop = asyncio.get_running_loop()
            loop.call_later(0.1, lambda: asyncio.ensure_future(holder.release()))
            assert await after_wait() == "ran"
        finally:
            await dlm.aclose()
        assert keys_left(name) == 0

    arun(main())


def test_cancelling_a_running_job_releases(arun, aclient, masters, name, keys_left):
    async def main():
        dlm = aclient(masters.urls)
        started = asyncio.Event()

        @jobs.single_run(dlm, name=name, ttl=5)
        async def job():
            started.set()
            await asyncio.sleep(30)

        task = asyncio.ensure_future(job())
        await asyncio.wait_for(started.wait(), 5)
        assert keys_left(name) == 5
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await dlm.aclose()
        assert keys_left(name) == 0

    arun(main())


def test_cancelling_a_waiting_job_leaves_no_key(arun, aclient, masters, name, keys_left):
    async def main():
        dlm = aclient(masters.urls, retry_delay=0.01, retry_jitter=0.01)
        holder = dlm.lock(name, ttl=5)
        assert await holder.acquire()

        @jobs.single_run(dlm, name=name, on_held="wait", wait=10, ttl=5)
        async def job():
            pytest.fail("ran while held")

        task = asyncio.ensure_future(job())
        await asyncio.sleep(0.15)  # a few attempts while it is held
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.release()
        await dlm.aclose()
        assert keys_left(name) == 0

    arun(main())


def test_an_exception_releases_and_wins(arun, aclient, masters, name, keys_left):
    async def main():
        dlm = aclient(masters.urls)

        @jobs.single_run(dlm, name=name, ttl=5)
        async def job():
            raise LookupError("boom")

        with pytest.raises(LookupError, match="boom"):
            await job()
        await dlm.aclose()
        assert keys_left(name) == 0

    arun(main())


def test_lost_lock_raises_or_cancels(arun, aclient, masters, name, keys_left, drop_key):
    async def main():
        dlm = aclient(masters.urls)

        @jobs.single_run(dlm, name=name, ttl=0.3)
        async def finishes():
            drop_key(name)
            for _ in range(300):
                if jobs.current().lost:
                    break
                await asyncio.sleep(0.01)
            return "done"

        with pytest.raises(jobs.JobLockLostError) as info:
            await finishes()
        assert info.value.result == "done" and info.value.finished

        reached = []

        @jobs.single_run(dlm, name=name, ttl=0.3, on_lost="cancel")
        async def cancelled():
            drop_key(name)
            await asyncio.sleep(5)  # cancelled when the watchdog finds the lock lost
            reached.append("end")

        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(jobs.JobLockLostError) as info:
            await cancelled()
        assert not info.value.finished and reached == [] and loop.time() - started < 2
        task = asyncio.current_task()
        if hasattr(task, "cancelling"):
            assert task.cancelling() == 0  # our cancellation was taken back
        await asyncio.sleep(0)  # the task is not cancelled any more
        await dlm.aclose()
        assert keys_left(name) == 0

    arun(main())


def test_async_with_block(arun, aclient, masters, name, keys_left, drop_key):
    async def main():
        dlm = aclient(masters.urls)
        async with jobs.single_run(dlm, name, ttl=5) as run:
            assert run.lock.locked() and keys_left(name) == 5 and jobs.current() is run
            with pytest.raises(jobs.JobHeldError):
                async with jobs.single_run(dlm, name):
                    pytest.fail("entered while held")
        assert keys_left(name) == 0
        with pytest.raises(jobs.JobLockLostError):
            async with jobs.single_run(dlm, name, ttl=0.3, on_lost="cancel"):
                drop_key(name)
                await asyncio.sleep(5)
        with pytest.raises(TypeError, match="runs async def jobs"):
            with jobs.single_run(dlm, name):
                pass
        await dlm.aclose()
        assert keys_left(name) == 0

    arun(main())
