"""Tasks on one asyncio client: they ride together, exclude each other, and cancelling one at any
await point leaves no key (and no task) behind."""
from __future__ import annotations

import asyncio
import contextvars

import pytest

from fastredlock.asyncio import Redlock


async def _tasks_on_one_name(dlm, name, exclusive=True):
    """16 tasks x 30: lock a name of their own, then the shared ``name`` for a read-yield-write of
    an in-process counter. Return ``(overlaps, counter)``: how often a holder found another inside,
    and the counter (16 * 30 unless an update was lost). ``exclusive=False`` is the negative
    control: the "shared" name is a name of each task's own, so the lock excludes nobody."""
    inside = 0
    overlaps = 0
    counter = 0

    async def worker(k):
        nonlocal inside, overlaps, counter
        for i in range(30):
            # a name of its own (these ride with the others' requests) ...
            own = dlm.lock(f"{name}:{k}", ttl=5.0)
            assert await own.acquire(blocking=False)
            await own.release()
            # ... and one shared name: an independent count of holders at once
            async with dlm.lock(name if exclusive else f"{name}:unshared:{k}", ttl=5.0):
                inside += 1
                overlaps += inside != 1
                value = counter
                await asyncio.sleep(0)  # a holder yields; nobody else may get in
                counter = value + 1
                inside -= 1

    await asyncio.gather(*(worker(k) for k in range(16)))
    return overlaps, counter


def test_tasks_ride_together_and_never_hold_one_name_twice(arun, aclient, masters, name, keys_on):
    async def main():
        # io_timeout: a round of 16 riders may wait past 50 ms on a loaded machine (xdist workers), and
        # an own name's acquire(blocking=False) must then not fail for it: exclusion is under test here
        async with aclient(masters.urls, retry_count=1000, retry_delay=0.001, retry_jitter=0.001,
                           io_timeout=0.5) as dlm:
            assert await _tasks_on_one_name(dlm, name) == (0, 16 * 30)
            assert dlm._async_executor.carried > 0  # requests rode in rounds other tasks started
            assert keys_on(masters, name) == 0

    arun(main())


def test_tasks_overlap_and_lose_updates_when_the_lock_excludes_nobody(arun, aclient, masters, name):
    # The negative control of both detectors above (the holder count and the lost-update counter).
    async def main():
        async with aclient(masters.urls, retry_count=1000, retry_delay=0.001, retry_jitter=0.001) as dlm:
            overlaps, counter = await _tasks_on_one_name(dlm, name, exclusive=False)
            assert overlaps > 0 and counter < 16 * 30, (overlaps, counter)

    arun(main())


def _cancel_after(iterations):
    """Let the loop run ``iterations`` times, then cancel ``task``."""

    async def cancel(task):
        for _ in range(iterations):
            await asyncio.sleep(0)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    return cancel


async def _no_keys_soon(masters, key, keys_on):
    """Wait (bounded) for what a cancelled task wrote behind its SETs to reach the masters."""
    for _ in range(100):
        if keys_on(masters, key) == 0:
            return 0
        await asyncio.sleep(0.01)
    return keys_on(masters, key)


@pytest.mark.parametrize("iterations", [0, 1, 2, 3, 4, 6, 10])
def test_cancelled_acquire_leaves_no_key(arun, aclient, masters, name, keys_on, iterations):
    async def main():
        async with aclient(masters.urls) as dlm:
            lock = dlm.lock(name, ttl=10.0)
            result = await _cancel_after(iterations)(asyncio.ensure_future(lock.acquire()))
            if result is True:  # it finished before the cancellation came: an ordinary holder
                await lock.release()
            assert await _no_keys_soon(masters, name, keys_on) == 0
            # the client still works, and the name is free
            again = dlm.lock(name, ttl=10.0)
            assert await again.acquire(blocking=False)
            await again.release()

    arun(main())


@pytest.mark.parametrize("iterations", [0, 1, 2, 3, 5])
def test_cancelled_acquire_behind_other_tasks_leaves_no_key(arun, aclient, masters, name, keys_on, iterations):
    # queued behind a round another task runs: cancelled while waiting (withdrawn) or while its
    # shared round runs (undone behind its SETs)
    async def main():
        async with aclient(masters.urls) as dlm:
            others = [asyncio.ensure_future(dlm.lock(f"{name}:o{i}").acquire()) for i in range(3)]
            lock = dlm.lock(name, ttl=10.0)
            result = await _cancel_after(iterations)(asyncio.ensure_future(lock.acquire()))
            if result is True:
                await lock.release()
            held = await asyncio.gather(*others)
            assert held == [True] * 3
            assert await _no_keys_soon(masters, name, keys_on) == 0

    arun(main())


@pytest.mark.parametrize("iterations", [0, 1, 2, 3, 5])
def test_cancelled_release_still_goes_out(arun, aclient, masters, name, keys_on, iterations):
    async def main():
        async with aclient(masters.urls) as dlm:
            lock = dlm.lock(name, ttl=10.0)
            assert await lock.acquire()
            await _cancel_after(iterations)(asyncio.ensure_future(lock.release()))
            if iterations == 0:  # cancelled before its first step: release() never ran
                assert lock.token is not None and keys_on(masters, name) == 5
                await lock.release()
            assert lock.token is None  # once release() ran, the handle holds nothing either way
            assert await _no_keys_soon(masters, name, keys_on) == 0

    arun(main())


def test_asyncio_timeout_around_acquire_on_a_stalled_quorum(arun, aclient, fault_masters, name, keys_on):
    # three of five masters stalled: every round waits io_timeout; wait_for cancels the attempt
    # mid-round, and nothing is left once the masters come back
    async def main():
        async with aclient(fault_masters.urls, io_timeout=0.2, cooldown=0, retry_count=50) as dlm:
            for m in fault_masters[:3]:
                m.pause()
            try:
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(dlm.lock(name, ttl=10.0).acquire(), 0.1)
            finally:
                for m in fault_masters[:3]:
                    m.resume()
            await asyncio.sleep(0.3)  # the stalled masters answer the SETs, then the releases
            assert await _no_keys_soon(fault_masters, name, keys_on) == 0

    arun(main())


def test_one_stalled_master_does_not_stall_the_tasks(arun, aclient, fault_masters, name, keys_on):
    async def main():
        async with aclient(fault_masters.urls, io_timeout=0.1) as dlm:
            fault_masters[4].pause()
            try:
                loop = asyncio.get_running_loop()
                started = loop.time()

                async def one(i):
                    lock = dlm.lock(f"{name}:{i}", ttl=10.0)
                    assert await lock.acquire(blocking=False)
                    await lock.release()

                await asyncio.gather(*(one(i) for i in range(20)))
                assert loop.time() - started < 2.0  # early decision at quorum; no hang
            finally:
                fault_masters[4].resume()
            await asyncio.sleep(0.3)
            assert sum(keys_on(fault_masters, f"{name}:{i}") for i in range(20)) == 0

    arun(main())


def test_quorum_impossible_fails_fast(arun, aclient, fault_masters, name):
    async def main():
        async with aclient(fault_masters.urls, io_timeout=0.2) as dlm:
            for m in fault_masters[:3]:
                m.kill()
            lock = dlm.lock(name, ttl=10.0)
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert not await lock.acquire(blocking=False)
            assert loop.time() - started < 0.5
            outcomes = [o.outcome for o in await lock.settled_outcomes()]
            assert outcomes.count("ok") == 2 or outcomes.count("ok") == 0  # released behind, or refused

    arun(main())


def test_aclose_while_tasks_wait(core, masters, name):
    async def main():
        dlm = Redlock(masters.urls, core=core, restart_aware=False)
        locks = [dlm.lock(f"{name}:{i}", ttl=10.0) for i in range(10)]
        tasks = [asyncio.ensure_future(lock.acquire()) for lock in locks]
        await asyncio.sleep(0)
        await dlm.aclose()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            assert r is True or isinstance(r, RuntimeError), r

    asyncio.run(main())


def _contend_tasks(masters, core, name, counter, processes, seconds, loop_kind, unprotected=False):
    """Run ``_contender.contend_tasks`` (8 tasks a process); return every task's ``(held, overlaps, errors)``."""
    from _contender import contend_tasks, run_contenders

    reports = run_contenders(contend_tasks, processes, (masters.urls, core, name, counter.port, seconds, 8, loop_kind),
                             (unprotected,))
    return [t for totals, _carried in reports for t in totals]


@pytest.mark.slow
def test_tasks_in_several_processes_never_overlap(core, loop_kind, masters, name, keys_on):
    from fastredlock.testing import LocalMaster

    counter = LocalMaster().start()
    try:
        per_task = _contend_tasks(masters, core, name, counter, 3, 2.0, loop_kind)
        assert sum(t[1] for t in per_task) == 0, f"two holders at once: {per_task}"
        assert sum(t[2] for t in per_task) == 0
        assert sum(t[0] for t in per_task) > 30, per_task  # the test really exercised the lock
        assert sum(1 for t in per_task if t[0] > 0) >= 6  # many tasks made progress
        assert keys_on(masters, name) == 0
        assert counter.command("GET", "holders") == b"0"
    finally:
        counter.stop()


@pytest.mark.slow
def test_tasks_in_several_processes_overlap_when_the_lock_excludes_nobody(core, masters, name):
    # The negative control of the counter above: every task locking a name of its own.
    from fastredlock.testing import LocalMaster

    counter = LocalMaster().start()
    try:
        per_task = _contend_tasks(masters, core, name, counter, 2, 1.0, "asyncio", unprotected=True)
        assert sum(t[0] for t in per_task) > 10, per_task  # they did hold, through the real client
        assert sum(t[1] for t in per_task) > 0, f"the counter saw no overlap without exclusion: {per_task}"
    finally:
        counter.stop()


def test_wait_for_cancelling_queued_acquires_leaves_no_key(arun, aclient, masters, keys_on, name):
    # a request queued behind other tasks' round, cancelled by wait_for at random moments, also
    # just after its round finished (the result is in, the task not yet resumed): undone each time
    import random

    async def main():
        async with aclient(masters.urls, retry_delay=0.001, retry_jitter=0.001) as dlm:
            rng = random.Random(7)
            names = []
            for k in range(60):
                n = f"{name}:{k}"
                names.append(n)
                others = [asyncio.ensure_future(dlm.lock(f"{n}:o{i}").acquire()) for i in range(rng.randint(0, 3))]
                lock = dlm.lock(n, ttl=10.0)
                try:
                    if await asyncio.wait_for(lock.acquire(), rng.uniform(0, 0.002)):
                        await lock.release()
                except asyncio.TimeoutError:
                    pass
                assert all(await asyncio.gather(*others))
            for n in names:
                assert await _no_keys_soon(masters, n, keys_on) == 0, n

    arun(main())


def test_a_socket_closed_between_rounds_is_forgotten_by_the_loop(arun, aclient, masters, name, keys_on, dead_port):
    # one master refuses connections: its socket is closed by the core outside a round; another
    # library's socket then gets the same fd number, and the client must neither touch it nor fail
    async def main():
        loop = asyncio.get_running_loop()
        errors = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        async with aclient(masters.urls[:2] + [f"redis://127.0.0.1:{dead_port}"]) as dlm:
            lock = dlm.lock(name, ttl=5.0)
            assert await lock.acquire()
            reader, writer = await asyncio.open_connection("127.0.0.1", masters[0].port)
            writer.write(b"*1\r\n$4\r\nPING\r\n")
            assert await asyncio.wait_for(reader.readline(), 10) == b"+PONG\r\n"
            await lock.extend()
            writer.write(b"*1\r\n$4\r\nPING\r\n")
            assert await asyncio.wait_for(reader.readline(), 10) == b"+PONG\r\n"  # its reader still works
            await lock.release()
            writer.close()
        assert errors == []
        assert keys_on(masters, name) == 0

    arun(main())


def test_a_round_resumes_its_task_in_the_task_s_own_context(arun, aclient, masters, name):
    """The loop callback that ends a round resumes the waiting task at once (not through
    ``call_soon``): the task goes on in its own context, alone or with others riding along. A
    ContextVar each task set is what it reads after every await of the lock (resumed in the
    reader callback's context instead, it would read another task's value or the default)."""
    var: contextvars.ContextVar = contextvars.ContextVar("frl_test_var", default=None)

    async def main():
        async with aclient(masters.urls) as dlm:
            async def one(k):
                var.set(k)
                for i in range(20):
                    lock = dlm.lock(f"{name}:{k}:{i}", ttl=5.0)
                    assert await lock.acquire(blocking=False)
                    assert var.get() == k
                    var.set(k)
                    await lock.release()
                    assert var.get() == k
                return k

            assert await asyncio.create_task(one("alone")) == "alone"  # rounds of one, in its task
            assert await asyncio.gather(*(one(k) for k in range(4))) == [0, 1, 2, 3]  # riding along
            assert var.get() is None

    arun(main())
