# cython: annotation_typing=False
"""The asyncio executor: one core per client, driven by the client's event loop; tasks ride together.

The sync :class:`~fastredlock.engine.executor.Executor` stays the client's bookkeeper (TTL checks and
the restart grace, health, quorum, outcome reports); this executor takes its first core and runs
every round of the client on it, one round at a time, from the loop. There is no pool: the loop
is one thread, and instead of a core per concurrent caller, requests that tasks make while a
round is in flight (or in the same loop iteration) wait in a queue and the next round carries them
all: per master, the releases in one write and the acquisitions behind them, answered in one
read (the asyncio analogue of the threads' automatic pipelining, :mod:`fastredlock.engine.combine`).

Because everything a client does goes out on the same connections in order, a release is always
written behind the SET it undoes. A task cancelled while its request waits withdraws it; once its
round has started, the round runs to its end, and an acquisition nobody will hold any more is
released behind it (cancelled in a release, the release still goes out).
"""
from __future__ import annotations

import asyncio
import logging
from asyncio import get_running_loop  # (a module global: one lookup fewer per round)
from collections import deque
from typing import Any, Awaitable, Callable, Deque, List, Optional, Sequence, Tuple

from ..engine.unwaited import REAP_EVERY, REAP_SLOWEST, Unwaited, new_entry
from ..protocol import outcomes as oc
from ..protocol.plans import left_behind, release_decided
from .loop_io import LoopCore

__all__ = ["AsyncExecutor", "MAX_BATCH"]

log = logging.getLogger("fastredlock")

#: Most single-lock requests one round carries (the rest wait for the next round).
MAX_BATCH = 64


def _ignore_result(fut: asyncio.Future) -> None:
    """Done callback of a future nobody awaits: retrieve its exception (no "never retrieved")."""
    if not fut.cancelled():
        fut.exception()


class _Request:
    """One lock's acquire (``ttl_ms`` > 0) or owner-checked release (``ttl_ms`` 0) waiting for a round."""

    def __init__(self, key: bytes, token: bytes, ttl_ms: int, future: Any, orphan: Any = None) -> None:
        self.key = key
        self.token = token
        self.ttl_ms = ttl_ms
        self.future = future
        self.rnd: Any = None
        self.ok = False
        #: The task that asked was cancelled after its round took the request (or, for a kept
        #: release, before).
        self.abandoned = False
        #: A release kept for a cancelled caller: called with ``(round, ok)`` once it is done.
        self.orphan = orphan
        #: A release nobody waits for: ``(on_done, acquired_at, was_lost)`` of its Entry.
        self.unwaited: Any = None


class _Job:
    """An operation that needs the core alone (an extension, a fenced acquisition, a batch)."""

    def __init__(self, run: Callable[[LoopCore], Awaitable[Any]], future: asyncio.Future,
                 undo: Optional[Callable[[Any], None]] = None, orphan: Any = None) -> None:
        self.run = run
        self.future = future
        #: Undoes the result if the caller is gone (see AsyncExecutor.job).
        self.undo = undo
        #: The caller was cancelled while the job ran (or, for a kept job, before).
        self.abandoned = False
        #: A job kept for a cancelled caller (a release): called with its result once it is done.
        self.orphan = orphan


class AsyncExecutor:
    """Runs one client's rounds on its event loop (see the module docstring).

    :param executor: the client's sync executor: its first core becomes this one's, and its
        bookkeeping (``ttl_ms``, ``health``, ``quorum``, ``outcomes``...) is shared.
    """

    def __init__(self, executor: Any, watchdog: Optional[Callable[[], Any]] = None) -> None:
        self.executor = executor
        self._new_watchdog = watchdog
        #: The watchdog task's owner, once a lock was watched (see watch).
        self.watchdog: Any = None
        #: Tasks the client owns (the rest of a cancelled caller's release, background clean-ups):
        #: aclose() waits for them.
        self._tasks: set = set()
        self.n: int = executor.n
        self.quorum: int = executor.quorum
        self._wait_for_all = bool(executor.wait_for_all)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_core: Optional[LoopCore] = None
        self._queue: Deque[Any] = deque()
        self._runner: Optional[asyncio.Task] = None
        self._busy = False  # a caller's task runs a round of its own (see _submit)
        self._idle_waiters: List[asyncio.Future] = []  # aclose() waits for the work in flight
        self._closed = False
        #: Requests that rode in a round with others (a count, for tests and curiosity).
        self.carried = 0
        #: Releases written without waiting whose answers are not all in (see fastredlock.engine.unwaited):
        #: the loop reads their replies as they come; a timer reports them.
        self.unwaited = Unwaited(self.n)
        self._reap_timer: Optional[asyncio.TimerHandle] = None
        # The then-hooks of the rounds a caller's task runs alone (bound once, not per round).
        self._acquired_then = self._acquired_alone
        self._released_then = self._released_alone
        self._written_then = self._written_alone
        self._reap_pause = REAP_EVERY  # the reap timer's next delay (see _reap)
        self._reap_fresh = True  # the timer's next look is the first since it was set

    # --- the loop this client belongs to -----------------------------------------------------------
    def _bind(self) -> LoopCore:
        loop = get_running_loop()
        if self._loop_core is not None and self._loop is loop:
            return self._loop_core
        if self._closed:
            raise RuntimeError("this Redlock client is closed")
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError(
                "this fastredlock.asyncio.Redlock belongs to another event loop; make one client per loop"
            )
        core = self.executor.checkout()
        self._loop = loop
        self._loop_core = LoopCore(core, loop)
        return self._loop_core

    # --- single-lock requests (ride together) ----------------------------------------------------
    def acquire_one(self, key: bytes, token: bytes, ttl_ms: int) -> Awaitable[Any]:
        """Awaitable: the round of one ``SET NX PX`` on every master (a failed attempt that may
        have landed somewhere is released behind its SETs, not awaited)."""
        loop_core = self._bind()
        if self._busy or self._runner is not None:
            return self._acquire_queued(key, token, ttl_ms)
        # Nothing in flight: a round of one, run by the caller's own task (the shortest path: no
        # request, no hand-off, no coroutine: the caller awaits the round itself). Requests made
        # meanwhile queue up; the runner takes them after.
        self._busy = True
        try:
            self.executor.for_acquiring(loop_core.core)
        except BaseException:
            self._alone_done(loop_core)
            raise
        run = loop_core.prepare("acquire", (key, token, ttl_ms))
        run.then = self._acquired_then
        return run

    def _acquired_alone(self, run: Any, rounds: Optional[List[Any]], exc: Optional[BaseException]) -> Any:
        """``then`` of acquire_one's round (see loop_io._Run): the acquisition's round, once a
        failed attempt that may have landed somewhere was released behind its SETs."""
        rnd = run.held
        if exc is None and rnd is None:  # the acquisition's round is in
            rnd = rounds[0]  # type: ignore[index]
            if left_behind(rnd):  # released behind its SETs, not awaited
                run.held = rnd
                run.chain("release_quiet", run.args[:2])
                return None
        cancelled = self._alone_done(self._loop_core)  # type: ignore[arg-type]
        if exc is not None:
            return None  # raised by the round
        if cancelled is not None:
            if rnd.ok:
                self.release_later(run.args[0], run.args[1])  # nobody will hold it
            raise cancelled
        return rnd

    async def _acquire_queued(self, key: bytes, token: bytes, ttl_ms: int) -> Any:
        return (await self._submit(key, token, ttl_ms)).rnd

    def release_one(self, key: bytes, token: bytes, orphan: Any = None) -> Awaitable[Tuple[Any, bool]]:
        """Awaitable: ``(round, ok)`` of one owner-checked release (``ok``: a quorum still held
        ``token``).

        ``orphan``: the release is kept if its caller is cancelled (it goes out all the same) and
        ``orphan((round, ok))`` is called once it is done; the caller gets its CancelledError at
        once (or, if its own task is running the round, as soon as the round ends)."""
        loop_core = self._bind()
        if self._busy or self._runner is not None:
            return self._release_queued(key, token, orphan)
        self._busy = True  # a round of one, run by the caller's own task (see acquire_one)
        run = loop_core.prepare("release", (key, token))
        run.held = orphan
        run.then = self._released_then
        return run

    def _released_alone(self, run: Any, rounds: Optional[List[Any]], exc: Optional[BaseException]) -> Any:
        """``then`` of release_one's round: ``(round, ok)``."""
        cancelled = self._alone_done(self._loop_core)  # type: ignore[arg-type]
        if exc is not None:
            return None  # raised by the round
        rnd = rounds[0]  # type: ignore[index]
        ok = rnd.successes >= self.quorum
        if cancelled is not None:
            if run.held is not None:
                run.held((rnd, ok))  # the release went out: the rest of its plan goes on
            raise cancelled
        return rnd, ok

    async def _release_queued(self, key: bytes, token: bytes, orphan: Any) -> Tuple[Any, bool]:
        req = await self._submit(key, token, 0, orphan)
        return req.rnd, req.ok

    def release_unwaited(self, key: bytes, token: bytes, on_done: Callable[[Any], object],
                         acquired_at: float, was_lost: bool) -> Awaitable[Any]:
        """Awaitable: write one owner-checked release of ``key`` held with ``token`` without waiting
        for the answers; its round (every outcome PENDING), or None if a round is in flight: the
        release is then queued and goes out first in the next one (ahead of any acquisition queued
        after it). Once the answers are in, ``on_done(entry)`` is called on the loop (see
        :meth:`fastredlock.engine.executor.Executor.release_unwaited`)."""
        loop_core = self._bind()
        if self.unwaited:  # the earlier ones' answers were read meanwhile: report them here
            self._report_done()
        if self._busy or self._runner is not None:
            req = _Request(key, token, 0, self._loop.create_future())  # type: ignore[union-attr]
            req.future.add_done_callback(_ignore_result)
            req.unwaited = (on_done, acquired_at, was_lost)
            self._enqueue(req)
            return _queued()
        self._busy = True  # a round of one, run by the caller's own task (see acquire_one)
        run = loop_core.prepare("release_nowait", (key, token))
        run.held = (on_done, acquired_at, was_lost)
        run.then = self._written_then
        return run

    def _written_alone(self, run: Any, rounds: Optional[List[Any]], exc: Optional[BaseException]) -> Any:
        """``then`` of release_unwaited's round: the round, kept until its answers are in."""
        cancelled = self._alone_done(self._loop_core)  # type: ignore[arg-type]
        if exc is not None:
            return None  # raised by the round
        rnd = rounds[0]  # type: ignore[index]
        on_done, acquired_at, was_lost = run.held
        self._add_unwaited(on_done, rnd, acquired_at, was_lost)
        if cancelled is not None:
            raise cancelled  # (the release went out)
        return rnd

    async def release_many_unwaited(self, keys: List[bytes], tokens: List[bytes],
                                    on_done: Sequence[Callable[[Any], object]], acquired_at: Sequence[float],
                                    written: Callable[[List[Any]], object]) -> None:
        """:meth:`release_unwaited` of several held locks in one round, written in its turn (a job:
        the caller waits for the write, not the answers). ``written(rounds)`` is called once they
        are written (also if the caller was cancelled meanwhile: the releases go out anyway)."""
        def done(rounds: List[Any]) -> None:
            for report, rnd, since in zip(on_done, rounds, acquired_at):
                self._add_unwaited(report, rnd, since, False)
            written(rounds)

        async def run(loop_core: LoopCore) -> List[Any]:
            return await loop_core.run("release_many_nowait", keys, tokens)
        done(await self.job(run, None, done))

    def _alone_done(self, loop_core: LoopCore) -> Optional[BaseException]:
        """A round that the caller's own task ran (nothing was in flight) ended: the queue that
        built up meanwhile goes on; the cancellation the round held back, if any."""
        cancelled = loop_core.take_cancelled()
        self._busy = False
        if self._queue and self._runner is None:
            self._runner = self._loop.create_task(self._run_queue())  # type: ignore[union-attr]
        self._check_idle()
        return cancelled

    def _add_unwaited(self, on_done: Any, rnd: Any, acquired_at: float, was_lost: bool) -> None:
        if self.unwaited.add(new_entry(on_done, rnd, None, acquired_at, was_lost)) and self._reap_timer is None:
            self._reap_pause = REAP_EVERY
            self._reap_fresh = True
            self._reap_timer = self._loop.call_later(REAP_EVERY, self._reap)  # type: ignore[union-attr]

    def _report_done(self) -> None:
        """Report the releases not waited for whose answers are in (see fastredlock.engine.unwaited)."""
        for entry in self.unwaited.done(self.executor.on_event is None):
            try:
                entry.on_done(entry)
            except Exception:
                log.exception("fastredlock: reporting a release not waited for failed (%r)", entry.on_done)

    def _reap(self) -> None:
        """The timer's call: report what is done; look again soon while any release is not.

        The loop reads the answers as they come (a reader stays on every socket); the timer only
        reports them once the client stops releasing. It looks REAP_EVERY seconds after the first
        release, then less and less often (doubling, up to REAP_SLOWEST) while each look finds
        that the client's own releases reported the earlier ones meanwhile (a loop of lock
        cycles: a wake-up of the loop per look would cost it more than the look finds); back to
        REAP_EVERY when a look finds the oldest release still there (the client went idle)."""
        self._reap_timer = None
        self._report_done()
        unwaited = self.unwaited
        if unwaited and not self._closed:
            unwaited.stuck()  # (counts the look; says whether the oldest entry moved since the last)
            if self._reap_fresh or not unwaited.moved:
                self._reap_pause = REAP_EVERY
            elif self._reap_pause < REAP_SLOWEST:
                self._reap_pause = min(2 * self._reap_pause, REAP_SLOWEST)
            self._reap_fresh = False
            self._reap_timer = self._loop.call_later(self._reap_pause, self._reap)  # type: ignore[union-attr]

    async def _submit(self, key: bytes, token: bytes, ttl_ms: int, orphan: Any = None) -> _Request:
        loop_core = self._bind()
        if not self._busy and self._runner is None:
            # Nothing in flight: a round of one, run by the caller's own task (no hand-off).
            # Requests made meanwhile queue up; the runner takes them when this round is done.
            req = _Request(key, token, ttl_ms, None)
            self._busy = True
            try:
                if ttl_ms:
                    self.executor.for_acquiring(loop_core.core)
                    rnd = req.rnd = (await loop_core.run("acquire", key, token, ttl_ms))[0]
                    req.ok = rnd.ok
                    if left_behind(rnd):  # released behind its SETs, not awaited
                        await loop_core.run("release_quiet", key, token)
                else:
                    rnd = req.rnd = (await loop_core.run("release", key, token))[0]
                    req.ok = rnd.successes >= self.quorum
            finally:
                cancelled = self._alone_done(loop_core)
            if cancelled is not None:
                if req.ttl_ms and req.ok:
                    self._undo(req)  # nobody will hold it
                elif orphan is not None:
                    orphan((req.rnd, req.ok))  # the release went out: the rest of its plan goes on
                raise cancelled
            return req
        req = _Request(key, token, ttl_ms, self._loop.create_future(), orphan)  # type: ignore[union-attr]
        self._enqueue(req)
        try:
            await req.future
        except asyncio.CancelledError:
            if not self._closed:
                if req.future.cancelled():
                    if orphan is not None:
                        req.abandoned = True  # kept: it goes out in its turn (see _finish_batch)
                    else:
                        try:
                            self._queue.remove(req)  # no round took it yet: withdrawn
                        except ValueError:
                            req.abandoned = True  # its round undoes it (see _finish_batch)
                elif req.ttl_ms and req.ok:
                    # The round was done, but the task was cancelled before it could take the
                    # result: nobody will hold this acquisition.
                    self._undo(req)
                elif orphan is not None:
                    orphan((req.rnd, req.ok))  # done before the task could take it
            raise
        return req

    # --- operations that need the core alone -----------------------------------------------------
    async def run(self, op: str, *args: Any) -> List[Any]:
        """Run core operation ``op`` alone in its turn; its rounds. Cancelling the caller does not
        interrupt the round (see :meth:`LoopCore.run`)."""
        return await self.job(lambda loop_core: loop_core.run(op, *args))

    async def job(self, run: Callable[[LoopCore], Awaitable[Any]],
                  undo: Optional[Callable[[Any], None]] = None, orphan: Any = None) -> Any:
        """Run ``await run(loop_core)`` with the core alone, in its turn; its result.

        ``undo(result)``: called if the caller is cancelled and the job completes anyway (it had
        started, or had just finished): it undoes what nobody will use (e.g. releases a lock that
        was taken for nobody). ``orphan(result)``: the job is kept if its caller is cancelled
        before it started (a release must go out), and this is called with its result.
        """
        self._bind()
        job = _Job(run, self._loop.create_future(), undo, orphan)  # type: ignore[union-attr]
        self._enqueue(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            if not self._closed:
                if job.future.cancelled():
                    if orphan is not None:
                        job.abandoned = True  # kept: it runs in its turn, then orphan(result)
                    else:
                        try:
                            self._queue.remove(job)  # not started: withdrawn
                        except ValueError:
                            job.abandoned = True  # running: it runs to its end, then is undone
                elif job.future.exception() is None:
                    if undo is not None:
                        undo(job.future.result())  # done, but the caller is gone
                    elif orphan is not None:
                        orphan(job.future.result())
            raise

    async def run_protected(self, op: str, args: tuple, orphan: Any) -> Any:
        """The round of core operation ``op`` that releases something (a family release): kept,
        and ``orphan(round)`` called, if its caller is cancelled (see :meth:`release_one`)."""
        async def run(loop_core: LoopCore) -> Any:
            return (await loop_core.run(op, *args))[0]
        return await self.job(run, None, orphan)

    async def run_acquiring(self, op: str, args: tuple, undo: Callable[[], None]) -> Any:
        """The round of core operation ``op`` that may take a lock; ``undo()`` is called if it did
        (``ok``) but its caller was cancelled meanwhile."""
        async def run(loop_core: LoopCore) -> Any:
            return (await loop_core.run(op, *args))[0]
        return await self.job(run, lambda rnd: undo() if rnd.ok else None)

    async def job_plan(self, plan: Any, undo: Callable[[], None]) -> Tuple[bool, Any]:
        """``(ok, round)`` of a job plan (a generator of :class:`fastredlock.engine.steps.Call` steps,
        see :mod:`fastredlock.engine.steps`) run with the core alone; ``undo()`` is called if it held
        (``ok``) but its caller was cancelled meanwhile."""
        async def run(loop_core: LoopCore) -> Tuple[bool, Any]:
            return await _run_calls(loop_core, plan, True)
        return await self.job(run, lambda result: undo() if result[0] else None)

    async def batch(self, plan: Any, acquiring: Any) -> Tuple[List[Any], List[Any]]:
        """``(rounds, carriers)`` of a batch plan (:class:`fastredlock.engine.steps.Batch`: its
        calls return lists of rounds, one per key) run with the core alone; the carriers are None
        (one core carries everything in order). ``acquiring``: ``(keys, tokens)``; if the caller is
        cancelled and the job completes anyway, the keys whose round held are released in a coming
        round (nobody will hold them)."""
        async def run(loop_core: LoopCore) -> List[Any]:
            return await _run_calls(loop_core, plan, False)

        undo = None
        if acquiring is not None:
            keys, tokens = acquiring

            def undo(rounds: List[Any]) -> None:
                for j, rnd in enumerate(rounds):
                    if rnd.ok:
                        self.release_later(keys[j], tokens[j])
        rounds = await self.job(run, undo)
        return rounds, [None] * len(rounds)

    async def outcomes(self, rnd: Any) -> List[Any]:
        """The per-master outcomes of ``rnd`` once its stragglers answered (or their deadlines passed)."""
        await self.settled(rnd, self.executor.settle_time())
        return self.executor.outcomes(rnd, False)

    def spawn(self, coro: Any) -> "asyncio.Task[Any]":
        """Run ``coro`` in a task the client owns: :meth:`aclose` waits for it; its errors are logged."""
        task = self._loop.create_task(coro)  # type: ignore[union-attr]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: "asyncio.Task[Any]") -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("fastredlock: a task of the client failed", exc_info=task.exception())

    def watch(self, lock: Any) -> None:
        """Hand a freshly acquired lock to the watchdog (made on first use)."""
        if self.watchdog is None:
            self.watchdog = self._new_watchdog()  # type: ignore[misc]
        self.watchdog.watch(lock)

    def unwatch(self, lock: Any) -> None:
        """Stop renewing or watching ``lock`` (a no-op if it was not watched)."""
        if self.watchdog is not None:
            self.watchdog.unwatch(lock)

    def release_later(self, key: bytes, token: bytes) -> None:
        """Release ``key`` (held with ``token``) in a coming round, behind everything written before
        on the same connections; nobody waits for the answer (an acquisition nobody will hold)."""
        fut = self._loop.create_future()  # type: ignore[union-attr]
        fut.add_done_callback(_ignore_result)
        self._enqueue(_Request(key, token, 0, fut))

    async def settled(self, rnd: Any, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until no answer to ``rnd`` is pending any more."""
        loop_core = self._bind()
        deadline = loop_core.core.now() + timeout
        while oc.PENDING in rnd.outcomes and not self._closed and loop_core.core.now() < deadline:
            if loop_core.core.owed_deadline() < 0.0:
                return
            await loop_core.activity()

    # --- the runner ------------------------------------------------------------------------------
    def _enqueue(self, item: Any) -> None:
        self._queue.append(item)
        if self._runner is None and not self._busy:
            self._runner = self._loop.create_task(self._run_queue())  # type: ignore[union-attr]

    async def _run_queue(self) -> None:
        """Serve the queue until it is empty: a job alone, or a batch of the requests at its head."""
        queue = self._queue
        try:
            while queue and not self._closed:
                head = queue[0]
                if isinstance(head, _Job):
                    queue.popleft()
                    if head.future.done() and head.orphan is None:
                        continue  # cancelled before it started: withdrawn (a kept job goes on)
                    try:
                        self.executor.for_acquiring(self._loop_core.core)  # type: ignore[union-attr]
                        try:
                            result = await head.run(self._loop_core)  # type: ignore[arg-type]
                        finally:
                            cancelled = self._loop_core.take_cancelled()  # type: ignore[union-attr]
                        if cancelled is not None:
                            raise cancelled
                    except BaseException as exc:
                        if not head.future.done():
                            head.future.set_exception(exc)
                        if not isinstance(exc, Exception):
                            raise
                    else:
                        if not head.future.done():
                            head.future.set_result(result)
                        elif head.undo is not None:
                            # Its caller was cancelled while it ran (the future is cancelled at
                            # once, before the task runs again to say so): undo what it took.
                            head.undo(result)
                        elif head.orphan is not None:
                            head.orphan(result)  # a kept job: the rest of its caller's plan goes on
                    continue
                batch = self._take_batch()
                try:
                    try:
                        await self._run_batch(batch)
                    finally:
                        cancelled = self._loop_core.take_cancelled()  # type: ignore[union-attr]
                    if cancelled is not None:
                        raise cancelled
                except BaseException as exc:
                    for req in batch:
                        if not req.future.done():
                            req.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                self._finish_batch(batch)
        finally:
            self._runner = None
            if queue and not self._closed:  # a request queued while the runner was ending
                self._runner = self._loop.create_task(self._run_queue())  # type: ignore[union-attr]
            self._check_idle()

    def _check_idle(self) -> None:
        if self._busy or self._runner is not None:
            return
        waiters, self._idle_waiters = self._idle_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _take_batch(self) -> List[_Request]:
        """The requests at the head of the queue that can share a round: up to MAX_BATCH, the
        acquisitions with one TTL (a round has one)."""
        queue = self._queue
        batch: List[_Request] = []
        ttl_ms = 0
        while queue and len(batch) < MAX_BATCH:
            req = queue[0]
            if isinstance(req, _Job):
                break
            if req.ttl_ms and ttl_ms and req.ttl_ms != ttl_ms:
                break
            queue.popleft()
            if req.future.done() and req.orphan is None:
                # Cancelled before its round: withdrawn. (The future is cancelled at once, before
                # the caller's task runs again: a release with an orphan is kept all the same.)
                continue
            ttl_ms = ttl_ms or req.ttl_ms
            batch.append(req)
        self.carried += max(0, len(batch) - 1)
        return batch

    async def _run_batch(self, batch: List[_Request]) -> None:
        """One round trip for ``batch`` (see :meth:`Executor._run_batch`, the threads' version):
        releases first, acquisitions behind them on the same connections, a failed acquisition
        that may hold released behind its SETs; the releases' answers are awaited last."""
        loop_core = self._loop_core
        acqs = [r for r in batch if r.ttl_ms]
        rels = [r for r in batch if not r.ttl_ms]
        unwaited = [r for r in rels if r.unwaited is not None]
        if unwaited:  # first, written without waiting (nobody waits for their answers)
            rels = [r for r in rels if r.unwaited is None]
            if len(unwaited) == 1:
                rounds = await loop_core.run("release_nowait", unwaited[0].key, unwaited[0].token)  # type: ignore[union-attr]
            else:
                rounds = await loop_core.run(  # type: ignore[union-attr]
                    "release_many_nowait", [r.key for r in unwaited], [r.token for r in unwaited])
            for req, rnd in zip(unwaited, rounds):
                req.rnd = rnd
        rel_rounds: List[Any] = []
        if rels:
            if len(rels) == 1 and not acqs:
                rel_rounds = await loop_core.run("release", rels[0].key, rels[0].token)  # type: ignore[union-attr]
            else:
                rel_rounds = await loop_core.run(  # type: ignore[union-attr]
                    "release_many_nowait" if acqs else "release_many", [r.key for r in rels], [r.token for r in rels])
        if acqs:
            self.executor.for_acquiring(loop_core.core)  # type: ignore[union-attr]
            if len(acqs) == 1:
                acq_rounds = await loop_core.run("acquire", acqs[0].key, acqs[0].token, acqs[0].ttl_ms)  # type: ignore[union-attr]
            else:
                acq_rounds = await loop_core.run(  # type: ignore[union-attr]
                    "acquire_many", [r.key for r in acqs], [r.token for r in acqs], acqs[0].ttl_ms)
            for req, rnd in zip(acqs, acq_rounds):
                req.rnd = rnd
                req.ok = rnd.ok
            failed = [r for r in acqs if left_behind(r.rnd)]
            if failed:  # written behind their SETs, not awaited
                await self._release_behind(failed)
            if rels:
                await self._releases_decided(rel_rounds)
        for req, rnd in zip(rels, rel_rounds):
            req.rnd = rnd
            req.ok = rnd.successes >= self.quorum

    async def _release_behind(self, reqs: Sequence[_Request]) -> None:
        if len(reqs) == 1:
            await self._loop_core.run("release_nowait", reqs[0].key, reqs[0].token)  # type: ignore[union-attr]
        else:
            await self._loop_core.run("release_many_nowait", [r.key for r in reqs], [r.token for r in reqs])  # type: ignore[union-attr]

    async def _releases_decided(self, rounds: List[Any]) -> None:
        """Releases written ahead of acquisitions: wait until each is decided (a quorum confirmed
        it or cannot any more; with ``wait_for_all``, until every master answered or is late)."""
        loop_core = self._loop_core
        quorum, n = self.quorum, self.n
        while not self._closed:
            if self._wait_for_all:
                if not any(oc.PENDING in rnd.outcomes for rnd in rounds):
                    return
            elif release_decided(rounds, quorum, n):
                return
            if loop_core.core.owed_deadline() < 0.0:  # type: ignore[union-attr]
                return
            await loop_core.activity()  # type: ignore[union-attr]

    def _finish_batch(self, batch: List[_Request]) -> None:
        """Hand each request its result; undo an acquisition whose task went away meanwhile."""
        undo = []
        for req in batch:
            if req.unwaited is not None:
                self._add_unwaited(req.unwaited[0], req.rnd, req.unwaited[1], req.unwaited[2])
                req.future.set_result(req)
                continue
            if req.abandoned or req.future.done():
                if req.ttl_ms and req.ok:
                    undo.append(req)
                elif not req.ttl_ms and req.orphan is not None:
                    req.orphan((req.rnd, req.ok))  # a kept release: the rest of its plan goes on
                continue
            req.future.set_result(req)
        for req in undo:
            self._undo(req)

    def _undo(self, req: _Request) -> None:
        """Release an acquisition nobody will hold, in the next round, behind its SETs."""
        self.release_later(req.key, req.token)

    async def _deliver_unwaited(self) -> None:
        """Before closing: read the answers still owed to releases not waited for (bounded by their
        deadlines), and report them."""
        loop_core = self._loop_core
        if loop_core is None or not self.unwaited:
            return
        deadline = loop_core.core.now() + self.executor.settle_time()
        while self.unwaited and loop_core.core.now() < deadline:
            self._report_done()
            if not self.unwaited or loop_core.core.owed_deadline() < 0.0:
                break
            await loop_core.activity()
        self._report_done()

    # --- closing ---------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Let the queued work finish, then close the connections; later use raises RuntimeError."""
        if self._closed:
            return
        if self._loop is asyncio.get_running_loop():
            while self._busy or self._runner is not None or self._tasks:  # the round in flight, the
                # queue, and the client's tasks (the rest of cancelled callers' releases)
                if self._tasks:
                    await asyncio.gather(*list(self._tasks), return_exceptions=True)
                    continue
                fut = self._loop.create_future()
                self._idle_waiters.append(fut)
                await fut
            await self._deliver_unwaited()
        if self.watchdog is not None:
            await self.watchdog.stop()
        self._closed = True
        if self._reap_timer is not None:
            self._reap_timer.cancel()
            self._reap_timer = None
        for item in list(self._queue):
            if not item.future.done():
                item.future.set_exception(RuntimeError("this Redlock client is closed"))
        self._queue.clear()
        if self._loop_core is not None:
            self._loop_core.close()
        self.executor.close()


async def _queued() -> None:
    """What awaiting a release queued behind the round in flight returns (not waited for: None)."""
    return None


async def _run_calls(loop_core: LoopCore, plan: Any, unwrap: bool) -> Any:
    """Run the :class:`~fastredlock.engine.steps.Call` steps of ``plan`` on ``loop_core``; what the
    plan returns. ``unwrap``: a call that made one round gets that round, as the sync core returns
    it (a job plan's); else its list of rounds (a batch plan's: one per key)."""
    value = None
    while True:
        try:
            call = plan.send(value)
        except StopIteration as stop:
            return stop.value
        value = await loop_core.run(call.op, *call.args)
        if unwrap and len(value) == 1:
            value = value[0]
