# cython: annotation_typing=False
"""``Lock`` for asyncio: the shared handle (:class:`fastredlock.handles.lock.LockBase`), awaitable.

Construction, the checks of its arguments, ``validity``, ``locked()``, ``lost``, ``check()``,
``token``, ``fence``, its repr and every operation's plan are the base's, shared with the sync
:class:`fastredlock.Lock` (neither handle subclasses the other). What talks to the masters is
awaitable and runs on the client's event loop: each method hands its plan to :func:`drive`, which
awaits the plan's rounds on the client's asyncio executor (:mod:`fastredlock.asyncio.executor`,
through its public methods only) and its pauses with ``asyncio``.

Cancellation (``task.cancel()``, ``asyncio.wait_for``, ``asyncio.timeout``, a ``TaskGroup``):

* the caller gets its ``CancelledError`` at once, every time (never swallowed);
* once a release was asked for, it reaches the masters anyway: the executor keeps the request
  and the rest of the release's plan (its events, the wake-up of waiters, ``on_lost`` if the lock
  turns out to have been lost) runs in a task the client owns, which ``aclose()`` waits for;
* an acquisition interrupted after a ``SET`` went out is released behind it (in the background);
* a queued waiter interrupted leaves the masters' queues in the background.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, List, Optional, Sequence, Union

from ..handles.lock import LockBase, held_locks
from ..engine.steps import (
    Acquire, Await, Background, Batch, Done, Job, Op, Release, ReleaseUnwaited, Settle, Sleep, Wait, advance,
)
from ..errors import LockError, MasterOutcome
from ..events import LOST

__all__ = ["Lock", "drive", "new_lock"]

log = logging.getLogger("fastredlock")

#: Test-only switch: False makes a cancelled caller's release be withdrawn as before the
#: cancellation contract (the negative control of tests/asyncio/test_cancellation.py).
PROTECT = True


class Lock(LockBase):
    """A handle on the lock called ``name``; get one from :meth:`fastredlock.asyncio.Redlock.lock`.

    Use it from the event loop its client belongs to. A handle holds at most one acquisition at a
    time; take one handle per task.
    """

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)
        self._async_executor = client.async_executor

    @classmethod
    def held(cls, client: Any, names: Sequence[Any], keys: Sequence[bytes], ttl: float, ttl_ms: int,
             tokens: Sequence[bytes], rounds: Sequence[Any], carriers: Sequence[Any]) -> List[Optional["Lock"]]:
        """The handles of a batch round (see :meth:`fastredlock.handles.lock.LockBase.held`), bound to
        the client's loop like any other."""
        locks: List[Optional[Lock]] = held_locks(cls, client, list(names), list(keys), ttl, ttl_ms, list(tokens),
                                                   list(rounds), list(carriers))
        async_executor = client.async_executor
        for lock in locks:
            if lock is not None:
                lock._async_executor = async_executor
        return locks

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None, *,
                      token: Union[str, bytes, None] = None) -> bool:
        """Try to acquire the lock; return whether it is now held (see :meth:`fastredlock.Lock.acquire`).

        Between attempts the task sleeps (``asyncio.sleep``) ``retry_delay`` plus a random jitter,
        less if a release of the name is heard (the client's ``wake``). Cancelled while a round
        runs for it, the acquisition is released behind its SETs: no key is left behind.
        ``token``: a value the caller chooses, unique to this acquisition (as for the sync handle).
        """
        tok = self._acquire_begin(blocking, timeout, token)
        first = None
        if tok is not None:
            first = await self._async_executor.acquire_one(self.key, tok, self._ttl_ms)
            if self._took(tok, first, None):
                return True
        return await drive(self._async_executor, self._acquire_plan(blocking, self._chosen, first))

    async def adopt(self, token: Union[str, bytes], ttl: Optional[float] = None) -> None:
        """Take over the acquisition of this name made with ``token`` (see :meth:`fastredlock.Lock.adopt`)."""
        await drive(self._async_executor, self._adopt_plan(token, ttl))

    async def release(self, token: Union[str, bytes, None] = None, *, wait: Optional[bool] = None) -> None:
        """Release the lock on every master (see :meth:`fastredlock.Lock.release`).

        Cancelled meanwhile, at any await point and however often, the caller gets its
        ``CancelledError`` at once and the release still goes out: the client finishes it (its
        events; ``on_lost`` if the lock was found lost), and ``aclose()`` waits for it.

        ``wait=False`` (default: the client's ``wait_release``): written to every master (or, if
        a round of the client is in flight, queued first for the next one) without waiting for the
        answers, which are reported as for :meth:`fastredlock.Lock.release` with ``wait=False``
        (``on_lost``, awaited if it is a coroutine function; the ``lost`` event; ``stats()``).
        ``aclose()`` reads the answers still owed before it closes the connections.
        """
        if token is not None or self._family_kind:
            await drive(self._async_executor, self._release_plan(token, None), self)
            return
        # A plain release, without a plan (the hot path): the executor keeps the request if this
        # task is cancelled, and _orphaned finishes it.
        token = self._release_begin()
        if not self._executor.release_waits(wait):
            rnd = await self._async_executor.release_unwaited(self.key, token, self._unwaited_report, self._acquired_at,
                                                     self._was_lost)
            self._unwaited_written(rnd)
            return
        rnd, ok = await self._async_executor.release_one(self.key, token, self._orphaned if PROTECT else None)
        if not ok and self._key_refused(rnd):  # an ACL refused a derived key: the key alone
            rnd, ok = await drive(self._async_executor, self._key_only_plan(token, rnd), self)
        if not self._release_confirmed(rnd, ok):
            raise self._release_error(rnd, await self._async_executor.outcomes(rnd))

    def _unwaited_report(self, entry: Any) -> None:
        """The answers to a release of this handle that was not waited for are in (see
        :mod:`fastredlock.engine.unwaited`): report them; ``on_lost`` runs in a task the client owns if
        they say the lock was not held on a quorum."""
        if self._unwaited_done(entry) and self.on_lost is not None:
            self._async_executor.spawn(drive(self._async_executor, self._call_on_lost()))

    def _orphaned(self, result: Any) -> None:
        """The plain release whose caller was cancelled is done: take its round (events, the
        waiters' wake-up) and report a lock it found lost (see :func:`_report`)."""
        rnd, ok = result
        if not self._release_confirmed(rnd, ok):
            self._async_executor.spawn(_report(self, self._release_error(rnd, self._executor.outcomes(rnd, False))))

    async def extend(self, ttl: Optional[float] = None) -> None:
        """Reset the time to live to ``ttl`` seconds (see :meth:`fastredlock.Lock.extend`); if a
        quorum did not confirm it, the lock is lost: released, ``on_lost`` called, and
        :class:`LockLostError` raised."""
        await drive(self._async_executor, self._extend_plan(ttl))

    async def lose(self) -> None:
        """Mark the lock lost: release it everywhere, stop watching it, run ``on_lost`` once
        (awaited if it is a coroutine function). Called by the watchdog and by :meth:`extend`."""
        await drive(self._async_executor, self._lose_plan(), self)

    async def _extend_async(self, token: bytes, ttl_ms: Any) -> Any:
        """The round of one renewal of ``token`` (the watchdog's)."""
        op, args = self._extend_op(token, ttl_ms)
        return (await self._async_executor.run(op, *args))[0]

    def _watch(self) -> None:
        self._async_executor.watch(self)

    def _unwatch(self) -> None:
        self._async_executor.unwatch(self)

    # --- outcomes ------------------------------------------------------------------------------
    @property
    def outcomes(self) -> List[MasterOutcome]:
        """What each master answered in this handle's last round, as known now: a master whose
        answer is still on its way says ``pending`` (see :meth:`settled_outcomes`)."""
        return self._executor.outcomes(self._last, False) if self._last is not None else []

    async def settled_outcomes(self) -> List[MasterOutcome]:
        """:attr:`outcomes` once the stragglers' answers are in (or their deadlines passed)."""
        return await self._async_executor.outcomes(self._last) if self._last is not None else []

    # --- context manager --------------------------------------------------------------------
    async def __aenter__(self) -> "Lock":
        if not await self.acquire():
            raise self._not_acquired(await self.settled_outcomes())
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            await self.release()
        except LockError as error:
            self._raise_at_exit(error, exc_type)

    def __enter__(self) -> "Lock":
        raise TypeError("use 'async with' with a fastredlock.asyncio lock")

    def __exit__(self, *exc_info: object) -> None:  # pragma: no cover - __enter__ raised
        pass


def new_lock(client: Any, name: Union[str, bytes], ttl: float, auto_extend: bool = False,
             max_hold: Optional[float] = None, on_lost: Optional[Any] = None, fencing: bool = False) -> Lock:
    """``Lock(client, name, ...)``, as :meth:`fastredlock.asyncio.Redlock.lock` makes it: in one C
    call of the base's ``_setup`` (in the compiled build a subclass of a compiled base is otherwise
    built through ``tp_init`` with a tuple and a dict of keywords)."""
    lock = Lock.__new__(Lock)
    lock._setup(client, name, ttl, auto_extend, max_hold, on_lost, fencing)
    lock._async_executor = client._async_executor
    return lock


# --- the asyncio driver ----------------------------------------------------------------------------
async def drive(async_executor: Any, plan: Any, owner: Any = None, value: Any = None) -> Any:
    """Run ``plan`` (see :mod:`fastredlock.engine.steps`) to its end on ``async_executor``; its result.

    An exception from a step is thrown into the plan, which cleans up (in the background) and lets
    it go on. A cancellation during a protected step (a release) is not: the step's request stays
    with the executor, the rest of the plan goes on in a task the client owns (see
    :func:`_finish`; ``owner``: the handle whose ``on_lost`` hears of a release that then finds
    the lock lost), and the caller gets its ``CancelledError`` at once. ``value``: what to send a
    plan that is suspended already (the result of the step it waits for); None for a new plan.
    """
    error: Optional[BaseException] = None
    while True:
        step = advance(plan, value, error)
        if type(step) is Done:
            return step.value
        value = error = None
        try:
            value = await _run(async_executor, step, plan, owner)
        except asyncio.CancelledError as exc:
            if PROTECT and (type(step) is Release or (type(step) is Op and step.protected)):
                raise  # the plan goes on in the client's task (see _run): not thrown into it
            error = exc
        except BaseException as exc:
            error = exc


async def _run(async_executor: Any, step: Any, plan: Any, owner: Any = None) -> Any:
    """One step of a plan, on the client's loop (see :mod:`fastredlock.engine.steps`)."""
    kind = type(step)
    if kind is Acquire:
        return None, await async_executor.acquire_one(step.key, step.token, step.ttl_ms)
    if kind is Release:
        orphan = _orphan(async_executor, plan, owner) if PROTECT else None
        return await async_executor.release_one(step.key, step.token, orphan)
    if kind is Op:
        if step.protected:
            orphan = _orphan(async_executor, plan, owner) if PROTECT else None
            rnd = await async_executor.run_protected(step.op, step.args, orphan)
            return None, rnd
        if step.acquiring is not None:
            undo = step.undo
            rnd = await async_executor.run_acquiring(step.op, step.args,
                                                     lambda: _background(async_executor, _step_of(undo)))
            return None, rnd
        return None, (await async_executor.run(step.op, *step.args))[0]
    if kind is Job:
        undo = step.undo
        ok, rnd = await async_executor.job_plan(step.plan, lambda: _background(async_executor, _step_of(undo)))
        return ok, rnd, None
    if kind is Wait:
        event = step.event
        if not event.is_set() and step.delay > 0:
            try:
                await asyncio.wait_for(event.wait(), step.delay)
            except asyncio.TimeoutError:
                pass
        woken = event.is_set()
        event.clear()
        return woken
    if kind is Sleep:
        await asyncio.sleep(step.delay)
        return None
    if kind is Settle:
        return await async_executor.outcomes(step.rnd)
    if kind is Background:
        _background(async_executor, step.step)
        return None
    if kind is Await:
        await step.awaitable
        return None
    if kind is Batch:
        return await async_executor.batch(step.plan, step.acquiring)
    if kind is ReleaseUnwaited:
        await async_executor.release_many_unwaited(step.keys, step.tokens, step.on_done, step.acquired_at,
                                                   step.written)
        return None
    raise TypeError(f"not a plan step: {step!r}")  # pragma: no cover - a bug in a plan


def _step_of(undo: Any) -> Any:
    """An ``undo`` of a step: a step, or a callable that makes it (made only when needed)."""
    return undo() if callable(undo) else undo


def _orphan(async_executor: Any, plan: Any, owner: Any) -> Any:
    """What the executor calls with a protected step's result when its caller was cancelled: the
    rest of ``plan`` runs in a task the client owns."""
    return lambda value: async_executor.spawn(_finish(async_executor, plan, value, owner))


async def _finish(async_executor: Any, plan: Any, value: Any, owner: Any) -> None:
    """Run the rest of a plan whose caller was cancelled during its release (``value``: that
    release's result); a lock found lost then is reported (``on_lost``, the ``lost`` event, the
    log), since nobody is left to raise to."""
    try:
        await drive(async_executor, plan, owner, value)
    except LockError as exc:
        await _report(owner, exc)


async def _report(lock: Any, error: LockError) -> None:
    """A release whose caller was cancelled found the lock lost (or unconfirmed): tell the log,
    the ``lost`` event and ``on_lost`` (the lose plan's own call of it), since no caller is left
    to raise to."""
    log.warning("fastredlock: a release whose caller was cancelled found: %s", error)
    if not isinstance(lock, Lock):  # (an RLock's release has no one handle to tell)
        return
    if lock._executor.on_event is not None:
        lock._event(LOST, lock._acquired_at, 0, False)
    await drive(lock._async_executor, lock._call_on_lost())


def _background(async_executor: Any, step: Any) -> None:
    """Run ``step`` in a task the client owns (a clean-up nobody waits for); errors are logged."""
    if step is None:
        return
    async_executor.spawn(_quietly(async_executor, step))


async def _quietly(async_executor: Any, step: Any) -> None:
    try:
        await _run(async_executor, step, None)
    except Exception:
        log.debug("fastredlock: a clean-up step failed", exc_info=True)
