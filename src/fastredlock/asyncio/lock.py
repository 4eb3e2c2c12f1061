# cython: annotation_typing=False
"""``Lock`` for asyncio: the sync handle's state and checks, with awaitable operations.

A subclass of :class:`fastredlock.Lock`: construction, the checks of its arguments, ``validity``,
``locked()``, ``lost``, ``check()``, ``token``, ``fence`` and its repr are the sync handle's. What
talks to the masters is awaitable and runs on the client's event loop (see
:mod:`fastredlock.asyncio._executor`): ``acquire``, ``release``, ``extend``, ``lose``, and
``async with``. The Redlock plans (:mod:`fastredlock.protocol.plans`) decide as they do for the
sync handle.
"""
from __future__ import annotations

import asyncio
import logging
import random
from time import monotonic
from typing import TYPE_CHECKING, Any, List, Optional, Union

from ..errors import LockError, MasterOutcome
from ..lock import SPLIT_RETRY, Lock as _SyncLock, fence_key
from ..protocol.family import owner_step, queueable, unqueue_step
from ..protocol.plans import fence_of, fenced_held, may_hold
from ..protocol.scripts import RELEASE
from .._checks import check_timeout, token_of
from .._tokens import new_token
from ..events import ACQUIRED, LOST, REFUSED, RELEASED

if TYPE_CHECKING:  # type names only
    from .client import Redlock

__all__ = ["Lock"]

log = logging.getLogger("fastredlock")


class Lock(_SyncLock):
    """A handle on the lock called ``name``; get one from :meth:`fastredlock.asyncio.Redlock.lock`.

    Use it from the event loop its client belongs to. A handle holds at most one acquisition at a
    time; take one handle per task.
    """

    # --- acquire ----------------------------------------------------------------------------
    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None, *,  # type: ignore[override]
                      token: Union[str, bytes, None] = None) -> bool:
        """Try to acquire the lock; return whether it is now held (see :meth:`fastredlock.Lock.acquire`).

        Between attempts the task sleeps (``asyncio.sleep``) ``retry_delay`` plus a random jitter,
        less if a release of the name is heard (the client's ``wake``).
        Cancelled while a round runs for it, the round ends and the acquisition is released behind
        its SETs: no key is left behind. ``token``: a value the caller chooses, unique to this
        acquisition (as for the sync handle).
        """
        if self.token is not None and not self._lost:
            raise LockError("this handle already holds the lock; release it first", self.name)
        chosen = None if token is None else token_of(token)
        deadline = None
        if timeout is not None:
            if not blocking:
                raise ValueError("timeout cannot be used with blocking=False")
            deadline = monotonic() + check_timeout(timeout)
        self._reset()
        aexec = self._client._aexec
        started = monotonic() if self._executor.on_event is not None else 0.0
        notifier = self._executor.notifier
        waiter = None
        plain = blocking and notifier is not None and not self._planned and not self.fencing
        queued = False
        try:
            if blocking and self._executor.owed:
                pause = notifier.pause_before(self.key)  # courtesy: the woken waiters go first
                if pause > 0:
                    waiter = notifier.join(self.key, deadline)
                    queued = plain and queueable(self.key)  # (its place is taken now: see fastredlock.Lock._courtesy)
                    if deadline is not None:
                        pause = min(pause, deadline - monotonic())
                    if await _wait(waiter[1], pause) and not queued:
                        spread = notifier.spread(waiter[2], deadline)  # the newest waiter: among the last
                        if spread > 0:
                            await asyncio.sleep(spread)
            if (plain and waiter is None and self._executor.contended and self.key in self._executor.contended
                    and queueable(self.key)):
                waiter = notifier.join(self.key, deadline)  # queued from the first attempt
                queued = True
            attempts = 0
            while True:
                attempts += 1
                token = new_token() if chosen is None else chosen
                if self.fencing:
                    ok = await self._attempt_fenced(token)
                elif self._planned:
                    ok = await self._attempt_planned(token)
                elif queued:
                    ok = await self._attempt_queued(token, waiter)
                else:
                    rnd = await aexec.acquire_one(self.key, token, self._ttl_ms)
                    self._last = rnd
                    ok = rnd.ok
                    if ok:
                        self._valid_until = rnd.valid_until
                if ok:
                    self.token = token
                    self._acquired_at = monotonic()
                    if self.auto_extend or self.on_lost is not None:
                        self._client._watchdog().watch(self)
                    if self._executor.on_event is not None:
                        self._event(ACQUIRED, started, attempts, True)
                    return True
                delay = self._next_delay(attempts, deadline) if blocking else -1.0
                if delay < 0:
                    if queued:  # gave up: out of the queues (a no-wait round)
                        await _unqueue(aexec, self.key, waiter[3])
                    if self._executor.on_event is not None:
                        self._event(REFUSED, started, attempts, False)
                    return False
                if notifier is not None and waiter is None:
                    waiter = notifier.join(self.key, deadline)  # a release heard during the sleep ends it
                    queued = plain and queueable(self.key)
                    if queued and self._client.retry_count is None:
                        # That attempt at once: it takes this waiter's place in the queues (see
                        # fastredlock.Lock.acquire).
                        continue
                elif (queued and self._last is not None and self._last.successes > 0
                      and self._client.retry_count is None):
                    # a split round, released quietly on both sides: retry soon (see fastredlock.Lock.acquire)
                    delay = min(delay, random.uniform(0.0, SPLIT_RETRY))
                await self._pause_async(delay, deadline, waiter, queued)
        finally:
            if waiter is not None:
                notifier.leave(waiter[0], waiter[1], waiter[3])

    async def _attempt_queued(self, token: bytes, waiter: Any) -> bool:  # type: ignore[override]
        """One attempt as a queued waiter (see :meth:`fastredlock.Lock._attempt_queued`)."""
        aexec = self._client._aexec
        executor = self._executor
        key = self.key
        step = self._queued_step(token, waiter)

        async def plan(lc: Any) -> Any:
            executor.for_acquiring(lc.core)
            rnd = (await lc.run(step[0], *step[1]))[0]
            if rnd.ok and rnd.successes < executor.n:
                unqueue = unqueue_step(key, waiter[3])
                await lc.run(unqueue[0], *unqueue[1])
            elif not rnd.ok and may_hold(rnd.outcomes):
                await lc.run("release", key, token, False, True)  # quiet: it never held the lock
            return rnd

        def undo(rnd: Any) -> None:  # cancelled: the lock taken for nobody goes
            if rnd.ok:
                release = owner_step(RELEASE, [key], [token])
                asyncio.ensure_future(aexec.run(release[0], *release[1]))

        rnd = await aexec.job(plan, undo=undo)
        if rnd.ok:
            self._valid_until = rnd.valid_until
        self._last = rnd
        return bool(rnd.ok)

    async def _pause_async(self, delay: float, deadline: Optional[float], waiter: Any = None,
                           queued: bool = False) -> None:
        """Sleep (on the loop) ``delay`` seconds before the next attempt, or less if ``waiter``'s
        event says the lock was released meanwhile. A ``queued`` waiter woken by a release goes at
        once (see :meth:`fastredlock.Lock._pause`)."""
        if waiter is not None:
            if await _wait(waiter[1], delay) and not queued:
                # Woken by a release: spread the retries (see fastredlock.Lock._pause).
                spread = self._executor.notifier.spread(waiter[2], deadline)
                if spread > 0:
                    await asyncio.sleep(spread)
        elif delay > 0:
            await asyncio.sleep(delay)

    async def _attempt_fenced(self, token: bytes) -> bool:  # type: ignore[override]
        """Two rounds with the core alone: SET NX + read counters, then max+1 to a quorum."""
        key, ttl_ms = self.key, self._ttl_ms
        retention_ms = int(self._client.fence_retention * 1000)

        async def plan(lc: Any) -> bool:
            fkey = fence_key(key)
            first = (await lc.run("acquire_fenced", key, fkey, token, ttl_ms))[0]
            self._last = first
            if first.ok:
                fence = fence_of(first.values)
                second = (await lc.run("write_fence", key, fkey, token, fence, retention_ms))[0]
                valid_until = first.valid_until  # validity runs from before the first round
                if fenced_held(second.ok, valid_until, monotonic()):
                    self.fence = fence
                    self._valid_until = valid_until
                    return True
                self._last = second
            if may_hold(first.outcomes):
                await lc.run("release", key, token, False, True)  # quiet: it never held the lock
            return False

        aexec = self._client._aexec
        # cancelled while the rounds ran: the lock taken for nobody is released behind them
        return await aexec.job(plan, undo=lambda held: held and aexec.release_later(key, token))

    # --- adopt ----------------------------------------------------------------------------------
    async def adopt(self, token: Union[str, bytes], ttl: Optional[float] = None) -> None:  # type: ignore[override]
        """Take over the acquisition of this name made with ``token`` (see :meth:`fastredlock.Lock.adopt`)."""
        token, ttl_ms = self._adoption_args(token, ttl)
        rnd = (await self._client._aexec.run("extend", self.key, token, ttl_ms))[0]
        if not self._adopted(rnd, token, ttl, ttl_ms):
            raise self._token_not_held(rnd, await self._outcomes_of(rnd), "; it was not taken over")
        if self.auto_extend or self.on_lost is not None:
            self._client._watchdog().watch(self)

    # --- release and extend -------------------------------------------------------------------
    async def release(self, token: Union[str, bytes, None] = None) -> None:  # type: ignore[override]
        """Release the lock on every master (see :meth:`fastredlock.Lock.release`).

        Cancelled while its round runs, the release still goes out (and the handle holds nothing).
        """
        if token is not None:
            await self._release_token_async(token)
            return
        token = self._require_token()
        client = self._client
        client._unwatch(self)
        was_lost = self.lost
        try:
            if self._planned:
                rnd, ok = await self._release_planned(token, None)
            else:
                rnd, ok = await client._aexec.release_one(self.key, token)
        finally:
            self.token = None
            self.fence = None
            self._carrier = None
            self._valid_until = 0.0
        if rnd.details is not None and self._executor.notifier is not None:
            self._executor.notifier.released(self.key, rnd.details)  # waiters heard it: they go first
        self._last = rnd
        if self._executor.on_event is not None:
            self._event(RELEASED, self._acquired_at, 0, ok and not was_lost)
        if was_lost:
            self._lost = False
            raise self._lost_before_release(await self._outcomes_of(rnd))
        if not ok:
            raise self._release_unconfirmed(rnd, await self._outcomes_of(rnd))

    async def _release_token_async(self, token: Union[str, bytes]) -> None:
        token = token_of(token)
        own = token == self.token
        if own:
            self._client._unwatch(self)
        try:
            if self._planned:
                rnd, ok = await self._release_planned(token, None)
            else:
                rnd, ok = await self._client._aexec.release_one(self.key, token)
        finally:
            if own:
                self._reset()
        self._last = rnd
        if self._executor.on_event is not None:
            self._event(RELEASED, self._acquired_at if own else monotonic(), 0, ok)
        if not ok:
            raise self._token_not_held(rnd, await self._outcomes_of(rnd))

    async def extend(self, ttl: Optional[float] = None) -> None:  # type: ignore[override]
        """Reset the time to live to ``ttl`` seconds (see :meth:`fastredlock.Lock.extend`); if a
        quorum did not confirm it, the lock is lost: released, ``on_lost`` called, and
        :class:`LockLostError` raised."""
        token, ttl_ms = self._extension_args(ttl)
        rnd = await self._extend_async(token, ttl_ms)
        if self._extended(rnd, ttl, ttl_ms):
            return
        await self.lose()
        raise self._extension_failed(rnd, await self._outcomes_of(rnd))

    async def _extend_async(self, token: bytes, ttl_ms: Any) -> Any:
        """The round of one extension of ``token`` (the watchdog's renewal too)."""
        if self._planned:
            op, args = self._extend_step(token, ttl_ms)
            return (await self._client._aexec.run(op, *args))[0]
        return (await self._client._aexec.run("extend", self.key, token, ttl_ms))[0]

    async def lose(self) -> None:  # type: ignore[override]
        """Mark the lock lost: release it everywhere, stop watching it, run ``on_lost`` once
        (awaited if it is a coroutine function). Called by the watchdog and by :meth:`extend`."""
        if self._lost:
            return
        self._lost = True
        self._valid_until = 0.0
        self._client._unwatch(self)
        if self._executor.on_event is not None:
            self._event(LOST, self._acquired_at, 0, False)
        token = self.token
        if token is not None:
            try:
                if self._planned:
                    await self._release_planned(token, None)
                else:
                    await self._client._aexec.release_one(self.key, token)
            except Exception:  # pragma: no cover - a failed cleanup still leaves the TTL as a bound
                log.warning("fastredlock: could not release lost lock %r", self.name, exc_info=True)
        if self.on_lost is not None:
            try:
                result = self.on_lost(self)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("fastredlock: on_lost callback of lock %r raised", self.name)

    # --- outcomes ------------------------------------------------------------------------------
    @property
    def outcomes(self) -> List[MasterOutcome]:
        """What each master answered in this handle's last round, as known now: a master whose
        answer is still on its way says ``pending`` (see :meth:`settled_outcomes`)."""
        return self._executor.outcomes(self._last, False) if self._last is not None else []

    async def settled_outcomes(self) -> List[MasterOutcome]:
        """:attr:`outcomes` once the stragglers' answers are in (or their deadlines passed)."""
        return await self._outcomes_of(self._last) if self._last is not None else []

    async def _outcomes_of(self, rnd: Any) -> List[MasterOutcome]:
        client = self._client
        await client._aexec.settled(rnd, client.io_timeout + client.connect_timeout + 1.0)
        return self._executor.outcomes(rnd, False)

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


async def _unqueue(aexec: Any, key: bytes, member: bytes) -> None:
    """Take a queued waiter that gave up out of the masters' queues (best effort: see
    :meth:`fastredlock.Lock._unqueue`). A cancelled waiter does not: its entry goes with the
    queue's expiry, or costs one turn if a release names it first."""
    step = unqueue_step(key, member)
    try:
        await aexec.run(step[0], *step[1])
    except Exception:  # the masters' queues expire anyway (a closed client, a lost master)
        log.debug("fastredlock: could not leave the queues of %r", key, exc_info=True)


async def _wait(event: asyncio.Event, delay: float) -> bool:
    """Wait until ``event`` is set or ``delay`` seconds passed, then clear it; whether it was set."""
    if not event.is_set() and delay > 0:
        try:
            await asyncio.wait_for(event.wait(), delay)
        except asyncio.TimeoutError:
            pass
    woken = event.is_set()
    event.clear()
    return woken
