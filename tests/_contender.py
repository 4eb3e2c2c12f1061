"""THE contention helper: lock, check an independent counter, unlock, over and over; and the workers
of the contention tests built on it.

:func:`contend_loop` is the loop every contender runs, whatever takes the lock (a fastredlock handle, a
shim, an original library, a cluster client): acquire; when held, INCR a key on the counter master
(anything but 1 means somebody else held the lock at the same time: an overlap), hold a moment, DECR,
release. :class:`Counter` is that counter: a plain blocking connection to a master the lock clients
never talk to, with its own few lines of RESP (independent of the code under test, and importable
where fastredlock is not: tests/compat/_interop_worker.py runs it beside the original libraries).

The workers: ``contend`` is one process with one thread; ``contend_threads`` is one process whose T
threads share one client (each thread takes its own handle on the same name); ``contend_cycles``,
``contend_woken``, ``contend_no_hold`` and ``contend_tasks`` (asyncio tasks, the one loop written
with ``await``) are variants. :func:`run_contenders` starts them in processes, together.

Every worker takes ``unprotected``: the negative control of that counter. Each holder then locks a
name of its own (``own_name``), so the lock excludes nobody while everything else — the client, the
core, the rounds, the timings, the counter — stays as it is; the counter must then see overlaps.

This module imports no fastredlock at import time (the workers import it when they run).
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import threading
import time
from typing import Any, Callable, List, Optional

from _bounded import BOUND, joined


def _resp(*args: Any) -> bytes:
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in parts)


class Counter:
    """A blocking connection to the counter master: independent of the code under test.

    ``call(*args)`` sends one command (``str`` or ``bytes`` arguments) and returns its reply: an
    ``int``, ``bytes`` (a simple or bulk string) or ``None``; an error reply raises ``RuntimeError``.
    """

    def __init__(self, port: int, timeout: Optional[float] = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                raise ConnectionError("the counter master closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def call(self, *args: Any) -> Any:
        self.sock.sendall(_resp(*args))
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buf) < size + 2:
                data = self.sock.recv(4096)
                if not data:
                    raise ConnectionError("the counter master closed the connection")
                self.buf += data
            value, self.buf = self.buf[:size], self.buf[size + 2:]
            return value
        raise RuntimeError(f"unexpected reply from the counter master: {line!r}")

    def close(self) -> None:
        self.sock.close()


class Tally:
    """What one contender saw: ``held`` (holds), ``overlaps`` (INCRs that did not answer 1),
    ``refused`` (attempts that did not get the lock) and ``errors`` (what the attempts, or the
    releases when they are caught, raised: one ``repr`` each)."""

    def __init__(self) -> None:
        self.held = self.overlaps = self.refused = 0
        self.errors: List[str] = []

    def triple(self) -> tuple:
        """``(held, overlaps, errors)``, as the contention tests read a report."""
        return self.held, self.overlaps, len(self.errors)


def contend_loop(acquire: Callable[[], Any], release: Callable[[Any], Any], counter: Counter,
                 done: Callable[[Tally], bool], hold: float = 0.0, key: Any = b"holders",
                 pause: Optional[Callable[[], Any]] = None, catch_release: bool = False,
                 on_overlap: Optional[Callable[[Any], Any]] = None) -> Tally:
    """Contend until ``done(tally)``: the loop of every contender.

    ``acquire()`` returns what holds the lock (passed to ``release``), or something false when it did
    not get it (a refusal); what it raises is an error, recorded, and the loop goes on. When held:
    INCR ``key`` on ``counter`` (anything but 1 is an overlap, passed to ``on_overlap``), sleep ``hold``
    seconds, DECR, then ``release(held)``, whatever happened inside; what ``release`` raises goes on
    up, or with ``catch_release`` is recorded as an error. ``pause()``, if given, runs after every
    attempt (an error, a refusal or a hold): a contender giving the others a chance to get in.
    """
    tally = Tally()
    while not done(tally):
        try:
            got = acquire()
        except Exception as exc:  # an error is a result to report, not a reason to stop
            tally.errors.append(repr(exc))
            if pause is not None:
                pause()
            continue
        if not got:
            tally.refused += 1
            if pause is not None:
                pause()
            continue
        try:
            if counter.call(b"INCR", key) != 1:
                tally.overlaps += 1
                if on_overlap is not None:
                    on_overlap(got)
            time.sleep(hold)
            counter.call(b"DECR", key)
            tally.held += 1
        finally:
            if catch_release:
                try:
                    release(got)
                except Exception as exc:
                    tally.errors.append(repr(exc))
            else:
                release(got)
        if pause is not None:
            pause()
    return tally


def for_seconds(seconds: float) -> Callable[[Tally], bool]:
    """A ``done`` for :func:`contend_loop`: true once ``seconds`` have passed from now."""
    end = time.monotonic() + seconds
    return lambda tally: time.monotonic() >= end


def own_name(name: str, unprotected: bool, holder: object) -> str:
    """The name a holder locks: the shared ``name``, or with ``unprotected`` one of its own."""
    return f"{name}:own:{holder}" if unprotected else name


def _client(urls, core, **kwargs):
    from fastredlock import Redlock

    return Redlock(urls, core=core, retry_delay=0.002, retry_jitter=0.004, restart_aware=False, **kwargs)


def hold_loop(dlm, name, counter: Counter, seconds: float, pause: float):
    """Lock ``name`` (``acquire(timeout=0.5)``), INCR/sleep ``pause``/DECR the counter, unlock, until
    ``seconds`` passed (:func:`contend_loop` with a fastredlock client).

    Returns ``(held, overlaps, errors)``: acquisitions, INCRs that did not answer 1, and attempts
    that raised.
    """
    def acquire():
        lock = dlm.lock(name, ttl=2.0)
        return lock if lock.acquire(timeout=0.5) else None

    return contend_loop(acquire, lambda lock: lock.release(), counter, for_seconds(seconds), pause).triple()


def contend(urls, core, name, counter_port, seconds, result_queue, ready_queue=None, go=None,
            unprotected=False) -> None:
    """One process, one thread: ``hold_loop`` for ``seconds``; reports ``(held, overlaps, errors)``."""
    name = own_name(name, unprotected, os.getpid())
    counter = Counter(counter_port)
    dlm = _client(urls, core)
    if go is not None:  # start together: process start-up on a loaded machine takes seconds
        ready_queue.put(1)
        go.wait(60)
    result = hold_loop(dlm, name, counter, seconds, 0.0005)
    dlm.close()
    result_queue.put(result)


def contend_cycles(urls, core, name, counter_port, cycles, unprotected, result_queue, ready_queue, go) -> None:
    """One process, one thread, ``cycles`` holds of ``name`` each released without waiting
    (``release(wait=False)``: the next attempt, this process's or another's, may come before the
    answers); reports ``(held, overlaps, errors)``."""
    mine = own_name(name, unprotected, os.getpid())
    counter = Counter(counter_port)
    dlm = _client(urls, core)
    lock = dlm.lock(mine, ttl=2.0)
    ready_queue.put(1)
    go.wait(60)

    def acquire():
        if not lock.acquire(timeout=5.0):
            raise TimeoutError("not acquired within 5 s")  # counted as an error here
        return lock

    tally = contend_loop(acquire, lambda held: held.release(wait=False), counter,
                         lambda t: t.held >= cycles, hold=0.0002)
    dlm.close()
    result_queue.put(tally.triple())


def contend_threads(urls, core, name, counter_port, seconds, threads, result_queue, ready_queue, go,
                    auto_pipeline=True, unprotected=False) -> None:
    """``threads`` threads of this process contend through one shared client; reports per-thread
    ``(held, overlaps, errors)``, the client's pool size and how many requests rode in shared rounds."""
    dlm = _client(urls, core, auto_pipeline=auto_pipeline)
    totals = [(0, 0, 0)] * threads
    start = threading.Barrier(threads + 1, timeout=BOUND)

    def body(k: int) -> None:
        counter = Counter(counter_port)
        start.wait()
        totals[k] = hold_loop(dlm, own_name(name, unprotected, f"{os.getpid()}:{k}"), counter, seconds, 0.0002)

    workers = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(threads)]
    for t in workers:
        t.start()
    ready_queue.put(1)
    go.wait(60)  # start together: process start-up on a loaded machine takes seconds
    start.wait()
    joined(*workers, timeout=seconds + BOUND)
    pool = len(dlm.executor._pool)
    carried = dlm.executor.combiner.carried
    dlm.close()
    result_queue.put((totals, pool, carried))


def contend_woken(urls, core, name, counter_port, seconds, threads, result_queue, ready_queue, go) -> None:
    """``threads`` threads of this process contend through one client with the default wake-up and
    a long backoff (``retry_delay`` 0.2 s: turns come from wake-ups, not polling), each holding
    1 ms; reports per-thread ``(held, overlaps, errors)``."""
    from fastredlock import Redlock

    dlm = Redlock(urls, core=core, restart_aware=False)
    totals = [(0, 0, 0)] * threads
    start = threading.Barrier(threads + 1, timeout=BOUND)

    def body(k: int) -> None:
        counter = Counter(counter_port)
        start.wait()
        totals[k] = hold_loop(dlm, name, counter, seconds, 0.001)

    workers = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(threads)]
    for t in workers:
        t.start()
    ready_queue.put(1)
    go.wait(60)
    start.wait()
    joined(*workers, timeout=seconds + BOUND)
    dlm.close()
    result_queue.put(totals)


def contend_no_hold(urls, core, name, seconds, result_queue, ready_queue, go) -> None:
    """One process takes and drops ``name`` as fast as it can (no hold) with a long backoff
    (``retry_delay`` 1 s, no jitter); reports ``(acquisitions, longest wait in seconds)``."""
    from fastredlock import Redlock

    dlm = Redlock(urls, core=core, restart_aware=False, retry_delay=1.0, retry_jitter=0.0)
    lock = dlm.lock(name, ttl=10)
    ready_queue.put(1)
    go.wait(60)
    held, longest = 0, 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        asked = time.monotonic()
        if lock.acquire(timeout=5.0):
            longest = max(longest, time.monotonic() - asked)
            held += 1
            lock.release()
    dlm.close()
    result_queue.put((held, longest))


def context():
    """The contenders' multiprocessing context: ``forkserver`` where there is one, its server having
    imported fastredlock and these workers once, so that each contender is a fork of it, started in
    milliseconds (eight interpreters importing everything anew take seconds on a loaded machine).
    A fork of that server shares nothing with the test process (no thread, client, socket or
    loop), and draws its tokens and wake id anew (fastredlock's ``os.register_at_fork`` hooks)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["fastredlock", "fastredlock.asyncio", "_contender"])  # before its first use
    return ctx


def run_contenders(target, count: int, args, extra=()):
    """Run ``target(*args, results, ready, go, *extra)`` in ``count`` processes (see :func:`context`).

    Every process starts its work at once (``go``, set when all are ready: start-up on a loaded
    machine takes seconds). Returns their reports, after checking that each exited cleanly.
    """
    ctx = context()
    results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, results, ready, go, *extra)) for _ in range(count)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=60)
    go.set()
    reports = []
    deadline = time.monotonic() + 60
    while len(reports) < count:  # a contender that died fails the test now, not after the 60 s
        try:
            reports.append(results.get(timeout=0.1))
        except queue.Empty:
            died = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not died, f"a contender died (exit codes {died}; its traceback is above)"
            assert time.monotonic() < deadline, "the contenders did not report within 60 s"
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    return reports


def contend_tasks(urls, core, name, counter_port, seconds, tasks, loop_kind, result_queue, ready_queue, go,
                  unprotected=False) -> None:
    """``tasks`` asyncio tasks of this process contend through one shared ``fastredlock.asyncio``
    client, on the default loop or uvloop (``loop_kind``); the counter is read over an asyncio
    connection of each task's own. Reports per-task ``(held, overlaps, errors)`` and how many
    requests rode in rounds other tasks started."""
    import asyncio

    from fastredlock.asyncio import Redlock as AsyncRedlock

    async def call(reader, writer, *args: bytes) -> int:
        writer.write(_resp(*args))
        line = await reader.readline()  # INCR/DECR answer (the parent bounds the whole process) ":<n>\r\n"
        return int(line[1:])

    async def body(dlm, k: int) -> tuple:
        mine = own_name(name, unprotected, f"{os.getpid()}:{k}")
        reader, writer = await asyncio.open_connection("127.0.0.1", counter_port)
        held = overlaps = errors = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            lock = dlm.lock(mine, ttl=2.0)
            try:
                if not await lock.acquire(timeout=0.5):
                    continue
            except Exception:
                errors += 1
                continue
            try:
                if await call(reader, writer, b"INCR", b"holders") != 1:
                    overlaps += 1
                await asyncio.sleep(0.0002)
                await call(reader, writer, b"DECR", b"holders")
                held += 1
            finally:
                await lock.release()
        writer.close()
        return held, overlaps, errors

    async def main() -> tuple:
        async with AsyncRedlock(urls, core=core, retry_delay=0.002, retry_jitter=0.004, restart_aware=False) as dlm:
            totals = await asyncio.gather(*(body(dlm, k) for k in range(tasks)))
            return totals, dlm._async_executor.carried

    ready_queue.put(1)
    go.wait(60)
    if loop_kind == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        result_queue.put(loop.run_until_complete(main()))
    finally:
        loop.close()
