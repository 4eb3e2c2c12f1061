# cython: annotation_typing=False
"""``Lock``: one named lock handle — acquire with retries, extend, release, fencing, lost-lock signal.

Every public method validates, then makes its rounds through the client's executor
(:mod:`fastredlock._executor`, the seam to the engine). No path leaves keys behind: a failed or
interrupted acquisition releases on every master that may hold its token, and a failed extension
releases everywhere and marks the lock lost.

A lock is *lost* (Chubby's "jeopardy") when the holder can no longer prove it holds it: an extension
or renewal failed, or its validity ran out while held. Then :attr:`Lock.lost` is true, the
``on_lost`` callback has run (or runs when the watchdog notices), :meth:`Lock.check` raises
:class:`LockLostError`, and a ``with`` block raises :class:`LockLostError` at its exit.

The client and its watchdog change a handle's state only through the methods of the section
"for the client and its watchdog" (:meth:`Lock.held`, :meth:`Lock.release_args_of`,
:meth:`Lock.released_all`, :meth:`Lock.watch_info`, :meth:`Lock.renewed`, :meth:`Lock.lose`).
"""
from __future__ import annotations

import logging
import random
import time
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

from ._fork import fork_generation
from .protocol import outcomes as oc
from ._checks import check_number, check_timeout, key_of, token_of
from .protocol.family import queueable, queued_step, renewal_ms, unqueue_step
from .protocol.plans import fence_of, fenced_held, may_hold
from ._tokens import new_token
from .errors import LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError, MasterOutcome
from .events import ACQUIRED, EXTENDED, LOST, REFUSED, RELEASED, LockEvent

if TYPE_CHECKING:  # type names only: nothing is imported upward at run time
    from .client import Redlock

__all__ = ["Lock", "fence_key"]

#: Longest pause, seconds, before a queued waiter retries after a split round (see acquire).
SPLIT_RETRY = 0.002

log = logging.getLogger("fastredlock")

#: Builds a LockEvent from a tuple without the namedtuple's Python-level ``__new__`` (a hook's cost).
_new_event = tuple.__new__

#: Suffix of the fence counter key; the counter shares the lock key's hash tag (one cluster slot).
FENCE_SUFFIX = b":fastredlock-fence"


def fence_key(key: bytes) -> bytes:
    """Return the key of the fence counter that belongs to lock ``key`` (same hash slot)."""
    left = key.find(b"{")
    if left != -1:
        right = key.find(b"}", left + 1)
        if right > left + 1:
            return key + FENCE_SUFFIX  # the key already has a hash tag: keep it
    return b"{" + key + b"}" + FENCE_SUFFIX


class Lock:
    """A handle on the lock called ``name``; get one from :meth:`Redlock.lock`.

    A handle holds at most one acquisition at a time. It is not meant to be shared between threads
    (share the :class:`Redlock` client instead and take one handle per thread); the client's
    watchdog thread is the one exception, and it coordinates with the handle's owner.
    """

    __slots__ = (
        "_client", "_executor", "name", "key", "ttl", "_ttl_ms", "token", "_valid_until", "_last", "fence",
        "fencing", "auto_extend", "max_hold", "on_lost", "_lost", "_acquired_at", "_generation", "_carrier",
        "_planned", "__weakref__",
    )

    def __init__(
        self,
        client: "Redlock",
        name: Union[str, bytes],
        ttl: float,
        *,
        auto_extend: bool = False,
        max_hold: Optional[float] = None,
        on_lost: Optional[Callable[["Lock"], object]] = None,
        fencing: bool = False,
    ) -> None:
        self._client = client
        executor = self._executor = client.executor
        #: The name as given.
        self.name = name
        #: The key written on the masters (the client's prefix + the name, as bytes).
        self.key: bytes = key_of(client.prefix, name)
        self._ttl_ms = executor.ttl_ms(ttl)
        #: Time to live in seconds requested for each acquisition (and default for :meth:`extend`).
        self.ttl = float(ttl)
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        if max_hold is not None:
            max_hold = check_number(max_hold, "max_hold", strict=True)
            if not auto_extend:
                raise ValueError("max_hold only makes sense with auto_extend=True")
        #: Whether the client's watchdog renews this lock while it is held.
        self.auto_extend = bool(auto_extend)
        #: Seconds after acquisition when the watchdog stops renewing (None: no cap).
        self.max_hold = max_hold
        #: Called with this lock, from the watchdog thread, when the lock is lost while held.
        self.on_lost = on_lost
        #: Whether acquisitions take a fencing token (two rounds; see :attr:`fence`).
        self.fencing = bool(fencing)
        #: The token of the current acquisition (bytes), or ``None`` when not held.
        self.token: Optional[bytes] = None
        #: The fencing token of the current acquisition (``fencing=True`` only): an int strictly
        #: larger than that of every earlier holder of this name. ``None`` when not held.
        self.fence: Optional[int] = None
        self._valid_until = 0.0
        self._last = None
        self._lost = False
        self._acquired_at = 0.0
        self._generation = fork_generation()
        #: The executor's carrier of the current acquisition (None once every master answered):
        #: release and extend go through it (see fastredlock._executor).
        self._carrier = None
        #: True for the kinds of the lock family (:mod:`fastredlock.family`): their acquisition,
        #: release and extension are the rounds their plan names (``_attempt_planned``,
        #: ``_release_step``, ``_extend_step``), not the plain lock's.
        self._planned = False

    # --- state ------------------------------------------------------------------------------
    @property
    def validity(self) -> float:
        """Seconds this handle can still rely on holding the lock (0.0 when not held or lost).

        Conservative: measured on the monotonic clock from before the acquiring (or extending)
        round was sent, minus the round's duration and the clock-drift allowance.
        """
        if self.token is None or self._lost:
            return 0.0
        return max(0.0, self._valid_until - monotonic())

    def locked(self) -> bool:
        """Return whether this handle holds the lock with validity left (a local check, no I/O)."""
        return self.token is not None and not self._lost and monotonic() < self._valid_until

    @property
    def lost(self) -> bool:
        """Whether the lock was lost while held: a renewal or extension failed, or validity ran out."""
        if self._lost:
            return True
        return self.token is not None and monotonic() >= self._valid_until

    def check(self) -> None:
        """Raise :class:`LockLostError` unless the lock is held with validity left.

        Call it right before acting on the protected resource.
        """
        if self.token is None:
            raise LockError(f"lock {self.name!r} is not held by this handle", self.name)
        if self.lost:
            raise LockLostError(f"lock {self.name!r} was lost: validity ran out or a renewal failed", self.name)

    @property
    def outcomes(self) -> List[MasterOutcome]:
        """What each master answered in this handle's last round (empty before the first).

        A round may return before its slowest masters answered (early decision at quorum); their
        answers are read first, waiting at most until their deadline ("timeout" if they miss it).
        """
        return self._executor.outcomes(self._last) if self._last is not None else []

    # --- acquire ----------------------------------------------------------------------------
    def acquire(self, blocking: bool = True, timeout: Optional[float] = None,
                token: Union[str, bytes, None] = None) -> bool:
        """Try to acquire the lock; return whether it is now held.

        ``blocking=False`` or ``timeout=0`` makes exactly one attempt. With ``timeout`` (seconds),
        attempts go on until it has passed (the call returns within about ``timeout`` plus one
        round). Without, the call waits until the lock is acquired, unless the client's
        ``retry_count`` was set: then up to ``1 + retry_count`` attempts are made. Between attempts
        the handle sleeps ``retry_delay`` plus a random jitter of up to ``retry_jitter`` (or what the
        client's ``backoff`` callable says), never past the deadline; with the client's ``wake``
        (the default) the sleep ends as soon as a release of the name is heard from any master.
        Every failed attempt has been released on all masters before the sleep.

        ``token``: the value to store (str as UTF-8, or bytes), for a caller that must choose it
        (another library's format, a token passed between processes); by default a fresh token of
        128 random bits plus a counter is drawn for each attempt. A chosen token must be unique to
        this acquisition: the release and extension check it, and a failed attempt is released, by
        its token, on the masters that may have taken it, so reusing the token of a live holder of
        the same name can release that holder. (As :meth:`fastredlock.asyncio.Lock.acquire`.)
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
        executor = self._executor
        started = monotonic() if executor.on_event is not None else 0.0
        notifier = executor.notifier
        waiter = None
        # A plain lock whose name met contention here lately: every attempt is a queued one
        # (turns, see fastredlock._wake), the first too, so that a releaser asking again at once
        # does not take the turn of the waiter its release woke.
        plain = blocking and notifier is not None and not self._planned and not self.fencing
        queued = False
        if blocking and executor.owed:
            # This client's release of the name woke a waiter: let it go first (its round would
            # only meet ours), then queue behind it (see _courtesy).
            queued = plain and queueable(self.key)
            waiter = self._courtesy(notifier, deadline, not queued)
            queued = queued and waiter is not None
        if plain and waiter is None and executor.contended and self.key in executor.contended and queueable(self.key):
            waiter = notifier.join(self.key, deadline)
            queued = True
        ok = False
        attempts = 0
        try:
            while True:
                attempts += 1
                # One attempt: one round (two with fencing); a failure that may have landed
                # somewhere is already released behind its SETs.
                token = new_token() if chosen is None else chosen
                if self.fencing:
                    ok = self._attempt_fenced(token)
                elif self._planned:
                    ok = self._attempt_planned(token)
                elif queued:
                    ok = self._attempt_queued(token, waiter)
                else:
                    # Rides with other threads' acquires if a round is in flight (see _combine).
                    carrier, rnd = executor.acquire_one(self.key, token, self._ttl_ms)
                    self._last = rnd
                    ok = rnd.ok
                    if ok:
                        self._valid_until = rnd.valid_until
                        self._carrier = carrier
                if ok:
                    self.token = token
                    self._acquired_at = monotonic()
                    if self.auto_extend or self.on_lost is not None:
                        executor.watch(self)
                    if executor.on_event is not None:
                        self._event(ACQUIRED, started, attempts, True)
                    return True
                delay = self._next_delay(attempts, deadline) if blocking else -1.0
                if delay < 0:
                    if executor.on_event is not None:
                        self._event(REFUSED, started, attempts, False)
                    return False
                if notifier is not None and waiter is None:
                    # Another attempt follows: listen for releases from now on (a release during
                    # the sleep ends it); a plain lock's next attempts queue on the masters.
                    waiter = notifier.join(self.key, deadline)
                    queued = plain and queueable(self.key)
                    if queued and self._client.retry_count is None:
                        # That attempt at once: it takes this waiter's place in the queues. (Not
                        # with a retry_count: those attempts are counted, and each sleeps before.)
                        continue
                elif (queued and self._last is not None and self._last.successes > 0
                      and self._client.retry_count is None):
                    # A queued attempt that took the key somewhere and still failed: a split
                    # round (another attempt took the rest), released quietly on both sides, so
                    # no release will wake anyone. Try again after a short random pause rather
                    # than sleep out the backoff (it breaks the tie). Not with a retry_count:
                    # those attempts each sleep retry_delay.
                    delay = min(delay, random.uniform(0.0, SPLIT_RETRY))
                self._pause(delay, deadline, waiter, queued)
        finally:
            if waiter is not None:
                notifier.leave(waiter[0], waiter[1], waiter[3])
                if queued and not ok:  # gave up (or raised): out of the queues, not awaited
                    self._unqueue(waiter[3])

    def _attempt_queued(self, token: bytes, waiter: Any) -> bool:
        """One attempt as a queued waiter (``waiter``: its place, from the notifier's ``join``):
        the free key is taken on this waiter's turn or nobody's, else it stays in the queue. A
        failure that may have landed somewhere is released behind it, not awaited."""
        executor = self._executor
        step = self._queued_step(token, waiter)
        with executor.core(acquiring=([self.key], [token])) as core:
            rnd = core.script(*step[1])
            if rnd.ok:
                self._valid_until = rnd.valid_until
                self._carrier = executor.carrier(core, rnd)
                if rnd.successes < executor.n:
                    core.script(*unqueue_step(self.key, waiter[3])[1])
            elif may_hold(rnd.outcomes):
                core.release(self.key, token, False, True)  # quiet: it never held the lock
        self._last = rnd
        return bool(rnd.ok)

    def _queued_step(self, token: bytes, waiter: Any) -> Tuple[str, tuple]:
        """The plan step of a queued attempt of ``waiter`` (its place stays for a renewal: see
        :func:`~.protocol.family.renewal_ms`)."""
        client = self._client
        return queued_step(self.key, token, self._ttl_ms, waiter[3], waiter[4],
                           renewal_ms(client.retry_delay, client.retry_jitter, client.io_timeout))

    def _courtesy(self, notifier: Any, deadline: Optional[float], spread: bool = True) -> Any:
        """This client just released the name while others waited on it: hold the first attempt
        back until a release is heard or the courtesy pause ends (the woken waiters go first).
        Returns the joined waiter (see the notifier's ``join``), or None if no pause is owed.

        A plain lock's waiter is queued: its place is taken when it joins, so it loses nothing by
        waiting here, and a message it hears now is a release that found nobody queued (the lock
        is free): it goes at once (``spread=False``)."""
        pause = notifier.pause_before(self.key)
        if pause <= 0:
            return None
        waiter = notifier.join(self.key, deadline)
        if deadline is not None:
            pause = min(pause, deadline - monotonic())
        if pause > 0 and waiter[1].wait(pause) and spread:
            wait = notifier.spread(waiter[2], deadline)  # the newest waiter: among the last
            if wait > 0:
                time.sleep(wait)
        waiter[1].clear()
        return waiter

    def _unqueue(self, member: bytes) -> None:
        """Take a queued waiter that gave up out of the masters' queues (best effort, not
        awaited): else a release could name it and nobody would come for its turn."""
        try:
            with self._executor.core() as core:
                core.script(*unqueue_step(self.key, member)[1])
        except Exception:  # the masters' queues expire anyway
            log.debug("fastredlock: could not leave the queues of %r", self.name, exc_info=True)

    def _pause(self, delay: float, deadline: Optional[float], waiter: Any = None, queued: bool = False) -> None:
        """Sleep ``delay`` seconds before the next attempt, or less if ``waiter``'s event says the
        lock was released meanwhile. A ``queued`` waiter woken by a release goes at once (it was
        woken alone: its turn)."""
        if waiter is not None:
            event = waiter[1]
            if delay > 0 and event.wait(delay) and not queued:
                # Woken by a release: every waiter heard it. Spread the retries (the longest
                # waiting go first) rather than split the masters' votes among them.
                spread = self._executor.notifier.spread(waiter[2], deadline)
                if spread > 0:
                    time.sleep(spread)
            event.clear()
        elif delay > 0:
            time.sleep(delay)

    def _next_delay(self, attempts: int, deadline: Optional[float]) -> float:
        """Seconds to wait before attempt ``attempts + 1`` (the client's retry policy, never past
        ``deadline``), or -1.0: no attempt is left. The asyncio handle sleeps it with asyncio."""
        client = self._client
        if deadline is None and client.retry_count is not None and attempts > client.retry_count:
            return -1.0
        if client.backoff is not None:
            delay = float(client.backoff(attempts))
        else:
            delay = client.retry_delay + random.uniform(0.0, client.retry_jitter)
        if deadline is not None:
            remaining = deadline - monotonic()
            if remaining <= 0:
                return -1.0
            delay = min(delay, remaining)
        return delay

    def _reset(self) -> None:
        self.token = None
        self.fence = None
        self._carrier = None
        self._lost = False
        self._valid_until = 0.0
        self._generation = fork_generation()

    def _attempt_fenced(self, token: bytes) -> bool:
        """Two rounds: SET NX + read counters, then write max+1 back to a quorum (DESIGN §1)."""
        executor = self._executor
        key = self.key
        with executor.core(acquiring=((key,), (token,))) as core:
            fkey = fence_key(key)
            first = core.acquire_fenced(key, fkey, token, self._ttl_ms)
            self._last = first
            if first.ok:
                fence = fence_of(first.values)
                retention_ms = int(self._client.fence_retention * 1000)
                second = core.write_fence(key, fkey, token, fence, retention_ms)
                # validity still runs from before the first round: the second round only uses it up
                valid_until = first.valid_until
                if fenced_held(second.ok, valid_until, monotonic()):
                    self.fence = fence
                    self._valid_until = valid_until
                    self._carrier = executor.carrier(core, first)
                    return True
                self._last = second
            if may_hold(first.outcomes):
                core.release(key, token, False, True)  # quiet: it never held the lock
        return False

    # --- adopt: a lock acquired elsewhere --------------------------------------------------------
    def adopt(self, token: Union[str, bytes], ttl: Optional[float] = None) -> None:
        """Take over the acquisition of this name made with ``token`` (by another handle, thread or
        process that passed the token on): one owner-checked round resets its TTL to ``ttl``
        (default: the handle's) where the key still holds ``token``; on a quorum the handle then
        holds it, with the validity of that round, and can :meth:`release`, :meth:`extend` and
        :meth:`check` it (``auto_extend`` and ``on_lost`` apply from now). Raises
        :class:`LockNotOwnedError` if fewer than a quorum held ``token`` (the lock is not taken
        over; nothing is released). The fence of the original acquisition is not known here
        (:attr:`fence` stays ``None``): pass it along with the token if the resource needs it.
        """
        token, ttl_ms = self._adoption_args(token, ttl)
        with self._executor.core() as core:
            rnd = core.extend(self.key, token, ttl_ms)
        if not self._adopted(rnd, token, ttl, ttl_ms):
            raise self._token_not_held(rnd, self._executor.outcomes(rnd), "; it was not taken over")
        if self.auto_extend or self.on_lost is not None:
            self._executor.watch(self)

    def _adoption_args(self, token: Union[str, bytes], ttl: Optional[float]) -> Tuple[bytes, Any]:
        """``(token, ttl_ms)`` of an adoption; raises if the handle holds a lock already."""
        if self.token is not None and not self._lost:
            raise LockError("this handle already holds the lock; release it first", self.name)
        token = token_of(token)
        ttl_ms = self._ttl_ms if ttl is None else self._executor.ttl_ms(ttl)
        self._reset()
        return token, ttl_ms

    def _adopted(self, rnd: Any, token: bytes, ttl: Optional[float], ttl_ms: Any) -> bool:
        """Take an adoption's round; True if the handle now holds the lock."""
        self._last = rnd
        if not rnd.ok:
            return False
        self.token = token
        self._acquired_at = monotonic()
        self._valid_until = rnd.valid_until
        if ttl is not None:
            self.ttl, self._ttl_ms = float(ttl), ttl_ms
        return True

    # --- release and extend -------------------------------------------------------------------
    def release(self, token: Union[str, bytes, None] = None, *,
                signal: Optional[Tuple[Union[str, bytes], int]] = None) -> None:
        """Release the lock on every master.

        Raises :class:`LockLostError` if the lock had been lost while held, and
        :class:`LockNotOwnedError` if fewer than a quorum of masters still held this acquisition's
        token (it expired, or another client took it). The handle is released either way.

        With ``token``, release the acquisition of this name that was made with that token instead
        (by another handle, or by another process that passed the token on): one owner-checked
        round, :class:`LockNotOwnedError` if fewer than a quorum still held it. This handle's own
        state changes only if ``token`` is its own.

        With ``signal=(list_key, ms)``, each master that deletes the key also pushes one element to
        the list ``list_key`` (which then lasts ``ms`` milliseconds), in the same script: processes
        waiting in ``BLPOP list_key`` wake (python-redis-lock's wake-up; its shim uses it). Such a
        release is a round of its own (it does not ride with other threads' releases).
        """
        if signal is not None:
            signal = _signal_of(signal)
        if token is not None:
            self._release_token(token, signal)
            return
        token = self._require_token()
        executor = self._executor
        if executor.watchdog is not None:
            executor.unwatch(self)
        was_lost = self._lost or monotonic() >= self._valid_until  # self.lost, inline
        try:
            # Through the carrier while the SETs may be unanswered; may ride with other threads'
            # releases (see _combine).
            if self._planned:
                rnd, ok = self._release_planned(token, self._carrier)
            elif signal is None:
                rnd, ok = executor.release_one(self.key, token, self._carrier)
            else:
                rnd, ok = self._release_signal(token, self._carrier, signal)
        finally:
            self.token = None
            self.fence = None
            self._carrier = None
            self._valid_until = 0.0
        if rnd.details is not None and executor.notifier is not None:
            executor.notifier.released(self.key, rnd.details)  # waiters heard it: let them go first
        self._last = rnd
        if executor.on_event is not None:
            self._event(RELEASED, self._acquired_at, 0, ok and not was_lost)
        if was_lost:
            self._lost = False
            raise self._lost_before_release(executor.outcomes(rnd))
        if not ok:
            raise self._release_unconfirmed(rnd, executor.outcomes(rnd))  # the stragglers' answers first

    def _release_signal(self, token: bytes, carrier: Any, signal: Tuple[Union[str, bytes], int]) -> Tuple[Any, bool]:
        """``(round, ok)`` of one owner-checked release that also pushes to a signal list."""
        return self._executor.release_signal(self.key, token, carrier, signal[0], signal[1])  # checked by _signal_of

    def _release_token(self, token: Union[str, bytes], signal: Optional[Tuple[Union[str, bytes], int]] = None) -> None:
        token = token_of(token)
        executor = self._executor
        own = token == self.token
        carrier = None
        if own:
            carrier = self._carrier
            if executor.watchdog is not None:
                executor.unwatch(self)
        try:
            if self._planned:
                rnd, ok = self._release_planned(token, carrier)
            elif signal is not None:
                rnd, ok = self._release_signal(token, carrier, signal)
            else:
                rnd, ok = executor.release_one(self.key, token, carrier)
        finally:
            if own:
                self._reset()
        self._last = rnd
        if executor.on_event is not None:
            self._event(RELEASED, self._acquired_at if own else monotonic(), 0, ok)
        if not ok:
            raise self._token_not_held(rnd, executor.outcomes(rnd))

    def extend(self, ttl: Optional[float] = None) -> None:
        """Reset the lock's time to live to ``ttl`` seconds (default: the handle's ``ttl``).

        Succeeds only if a quorum still held the token and the recomputed validity is positive.
        Otherwise the lock is lost: it is released on every master, ``on_lost`` runs, and
        :class:`LockNotOwnedError` (a :class:`LockLostError`) is raised.
        """
        token, ttl_ms = self._extension_args(ttl)
        executor = self._executor
        with executor.core(carrying=(self._carrier,)) as core:
            rnd = self._extend_round(core, token, ttl_ms)
        if self._extended(rnd, ttl, ttl_ms):
            return
        self.lose()
        raise self._extension_failed(rnd, executor.outcomes(rnd))

    def _extend_round(self, core: Any, token: bytes, ttl_ms: Any) -> Any:
        """The round of one extension of ``token`` on ``core`` (the watchdog's renewal too)."""
        if self._planned:
            op, args = self._extend_step(token, ttl_ms)
            return getattr(core, op)(*args)
        return core.extend(self.key, token, ttl_ms)

    def _attempt_planned(self, token: bytes) -> bool:
        """One attempt of a kind of the lock family (see :mod:`fastredlock.family`)."""
        raise NotImplementedError

    def _release_planned(self, token: bytes, carrier: Any) -> Tuple[Any, bool]:
        """``(round, ok)`` of a release of a kind of the lock family (see :mod:`fastredlock.family`)."""
        raise NotImplementedError

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Tuple[str, tuple]:
        """The plan step of an extension of a kind of the lock family (see :mod:`fastredlock.family`)."""
        raise NotImplementedError

    def _require_token(self) -> bytes:
        if self.token is None:
            raise LockError(f"lock {self.name!r} is not held by this handle", self.name)
        if self._generation != fork_generation():
            raise LockError(
                f"lock {self.name!r} was acquired by the parent process; a fork child cannot release "
                "or extend it",
                self.name,
            )
        return self.token

    # --- for the client and its watchdog (not for applications) -------------------------------
    @classmethod
    def held(
        cls, client: "Redlock", names: Sequence[Any], keys: Sequence[bytes], ttl: float, ttl_ms: int,
        tokens: Sequence[bytes], rounds: Sequence[Any], carriers: Sequence[Any],
    ) -> List[Optional["Lock"]]:
        """The result of a batch round (``acquire_many``, ``lock_all``): per name, a held handle
        (its round granted it; ``carriers``: the executor's), or None.

        The client checked the names, keys and TTL once for the whole batch, so the handles are
        built here directly in the held state (the plain options of :meth:`Redlock.lock`), without
        the per-handle checks of ``__init__``: a batch of 64 spends far less time in Python.
        """
        return _held_locks(cls, client, list(names), list(keys), ttl, ttl_ms, list(tokens), list(rounds),
                           list(carriers))

    @staticmethod
    def release_args_of(locks: Sequence["Lock"]) -> Tuple[List["Lock"], List[bytes], List[bytes], List[Any]]:
        """``(handles, keys, tokens, carriers)`` of the acquisitions a batch release is about to
        undo; raises :class:`TypeError` for an object that is not a Lock, and :class:`LockError`
        for a handle that does not hold its lock (or whose parent process does)."""
        return _release_args_of(locks)

    @staticmethod
    def released_all(handles: Sequence["Lock"], rounds: Optional[Sequence[Any]]) -> None:
        """A batch release ended: the handles hold nothing; ``rounds``: theirs (None if it failed)."""
        _released_all(list(handles), None if rounds is None else list(rounds))

    def watch_info(self) -> Tuple[Optional[bytes], float, float, int, Any]:
        """``(token, valid_until, acquired_at, ttl_ms, carrier)``: what the watchdog decides on
        and renews with (``token`` None: no longer held)."""
        return self.token, self._valid_until, self._acquired_at, self._ttl_ms, self._carrier

    def renewed(self, token: bytes, rnd: Any) -> Optional[float]:
        """Take the round of a watchdog renewal of ``token``: record it, and on success let the
        validity run from it. Returns when the validity ends, or None if the handle no longer holds
        ``token`` (released or acquired again while the round was in flight: nothing changed)."""
        if self.token != token:
            return None
        self._last = rnd
        if rnd.ok:
            self._valid_until = rnd.valid_until
            if self._executor.on_event is not None:
                self._event(EXTENDED, self._acquired_at, 0, True)
        return self._valid_until

    def lose(self) -> None:
        """Mark the lock lost: release it everywhere, stop watching it, run ``on_lost`` once.

        Called when an extension or renewal failed or the validity ran out while held.
        """
        if self._lost:
            return
        self._lost = True
        self._valid_until = 0.0
        executor = self._executor
        executor.unwatch(self)
        if executor.on_event is not None:
            self._event(LOST, self._acquired_at, 0, False)
        token = self.token
        if token is not None:
            try:
                if self._planned:
                    self._release_planned(token, self._carrier)
                else:
                    with executor.core(carrying=(self._carrier,)) as core:
                        core.release(self.key, token)
            except Exception:  # pragma: no cover - a failed cleanup still leaves the TTL as a bound
                log.warning("fastredlock: could not release lost lock %r", self.name, exc_info=True)
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                log.exception("fastredlock: on_lost callback of lock %r raised", self.name)

    # --- context manager --------------------------------------------------------------------
    def __enter__(self) -> "Lock":
        if not self.acquire():
            raise self._not_acquired(self.outcomes)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.release()
        except LockError as error:
            self._raise_at_exit(error, exc_type)

    # --- the decisions and errors both front-ends share (the asyncio handle awaits its I/O) ----
    def _event(self, kind: str, since: float, attempts: int, ok: bool) -> None:
        """Tell the client's ``on_event`` hook (callers check first that there is one, a C field
        in the compiled build): ``kind`` happened, ``since`` (monotonic) is when it began."""
        hook = self._executor.on_event
        if hook is None:
            return
        try:
            hook(_new_event(LockEvent, (kind, self.name, monotonic() - since, attempts, ok)))
        except Exception:
            log.exception("fastredlock: the on_event hook raised (event %s of lock %r)", kind, self.name)

    def _extension_args(self, ttl: Optional[float]) -> Tuple[bytes, Any]:
        """``(token, ttl_ms)`` of an extension; raises if the handle cannot extend."""
        token = self._require_token()
        if self._lost:
            raise LockLostError(f"lock {self.name!r} was lost; acquire it again", self.name)
        return token, self._ttl_ms if ttl is None else self._executor.ttl_ms(ttl)

    def _extended(self, rnd: Any, ttl: Optional[float], ttl_ms: Any) -> bool:
        """Take an extension's round; True if it held (validity and, if given, the TTL renewed)."""
        self._last = rnd
        if not rnd.ok:
            return False
        self._valid_until = rnd.valid_until
        if ttl is not None:
            self.ttl, self._ttl_ms = float(ttl), ttl_ms
        if self._executor.on_event is not None:
            self._event(EXTENDED, self._acquired_at, 0, True)
        return True

    def _extension_failed(self, rnd: Any, outcomes: List[MasterOutcome]) -> LockLostError:
        return LockLostError(
            f"lock {self.name!r} could not be extended on a quorum ({rnd.successes}/{self._executor.quorum} "
            f"needed); it is lost and was released{self._executor.down_note(outcomes)}",
            self.name,
            outcomes,
        )

    def _lost_before_release(self, outcomes: List[MasterOutcome]) -> LockLostError:
        return LockLostError(f"lock {self.name!r} had been lost before it was released", self.name, outcomes)

    def _release_unconfirmed(self, rnd: Any, outcomes: List[MasterOutcome]) -> LockNotOwnedError:
        silent = sum(1 for code in rnd.outcomes if code not in (oc.OK, oc.NO))
        tail = f"; {silent} master(s) did not answer, where the key may stay until its TTL" if silent else ""
        return LockNotOwnedError(
            f"lock {self.name!r} was not confirmed held on a quorum when released "
            f"({rnd.successes}/{self._executor.quorum} needed){tail}{self._executor.down_note(outcomes)}",
            self.name,
            outcomes,
        )

    def _token_not_held(self, rnd: Any, outcomes: List[MasterOutcome], tail: str = " when released") -> LockNotOwnedError:
        return LockNotOwnedError(
            f"lock {self.name!r} was not held with that token on a quorum "
            f"({rnd.successes}/{self._executor.quorum} needed){tail}{self._executor.down_note(outcomes)}",
            self.name,
            outcomes,
        )

    def _not_acquired(self, outcomes: List[MasterOutcome]) -> LockNotAcquiredError:
        return LockNotAcquiredError(
            f"could not acquire lock {self.name!r}{self._executor.down_note(outcomes)}", self.name, outcomes
        )

    def _raise_at_exit(self, error: LockError, exc_type: object) -> None:
        """A release at the end of a ``with`` block failed with ``error``: the body's own exception
        (or a fork child's sys.exit), if any, is the one to see; a release that was not confirmed
        means the body ran without the lock for part of its time, so say so (LockLostError)."""
        if exc_type is not None:
            return
        if isinstance(error, LockNotOwnedError) and not isinstance(error, LockLostError):
            raise LockLostError(str(error), self.name, error.outcomes) from error
        raise error

    def __repr__(self) -> str:
        if self.token is None:
            state = "not held"
        elif self.lost:
            state = "LOST"
        else:
            state = f"held, validity={self.validity:.3f}s"
        fence = f" fence={self.fence}" if self.fence is not None else ""
        return f"<Lock {self.name!r} ttl={self.ttl:g}s {state}{fence}>"


def _signal_of(signal: Any) -> Tuple[bytes, int]:
    """The ``signal=`` of :meth:`Lock.release` checked: ``(list key as bytes, lifetime in ms > 0)``."""
    if not isinstance(signal, tuple) or len(signal) != 2:
        raise TypeError(f"signal must be a (list key, milliseconds) tuple, not {signal!r}")
    key = token_of(signal[0])  # str as UTF-8, bytes as they are; not empty
    ms = signal[1]
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        raise ValueError(f"signal: the list's lifetime must be an int > 0 (ms), got {ms!r}")
    return key, ms


def _held_locks(cls, client, names, keys, ttl, ttl_ms, tokens, rounds, carriers):
    """:meth:`Lock.held`, one loop (compiled: the handles' fields are set as C struct fields)."""
    executor = client.executor
    generation = fork_generation()
    now = monotonic()
    result = []
    valid_until = 0.0
    have_validity = False
    for j in range(len(keys)):
        rnd = rounds[j]
        if not rnd.ok:
            result.append(None)
            continue
        if not have_validity:  # one timing window and one TTL: the same for every key
            valid_until = rnd.valid_until
            have_validity = True
        lock = cls.__new__(cls)
        lock._client = client
        lock._executor = executor
        lock.name = names[j]
        lock.key = keys[j]
        lock._ttl_ms = ttl_ms
        lock.ttl = ttl
        lock.auto_extend = False
        lock.max_hold = None
        lock.on_lost = None
        lock.fencing = False
        lock.token = tokens[j]
        lock.fence = None
        lock._valid_until = valid_until
        lock._last = rnd
        lock._lost = False
        lock._acquired_at = now
        lock._generation = generation
        lock._carrier = carriers[j]
        result.append(lock)
    if executor.on_event is not None:
        _batch_events(executor.on_event, names, rounds, result)
    return result


def _batch_events(hook, names, rounds, locks):
    """The events of a batch acquisition: per name, acquired or refused (one attempt)."""
    now = monotonic()
    for j in range(len(names)):
        ok = locks[j] is not None
        try:
            hook(_new_event(LockEvent, (ACQUIRED if ok else REFUSED, names[j], now - rounds[j].started, 1, ok)))
        except Exception:
            log.exception("fastredlock: the on_event hook raised (batch event of lock %r)", names[j])


def _release_args_of(locks):
    """:meth:`Lock.release_args_of`, one loop."""
    handles, keys, tokens, carriers = [], [], [], []
    for obj in locks:
        if not isinstance(obj, Lock):
            raise TypeError(f"locks must hold Lock objects, not {type(obj).__name__}")
        lock = obj
        token = lock._require_token()
        handles.append(lock)
        keys.append(lock.key)
        tokens.append(token)
        carriers.append(lock._carrier)
    return handles, keys, tokens, carriers


def _released_all(handles, rounds):
    """:meth:`Lock.released_all`, one loop."""
    for j in range(len(handles)):
        lock = handles[j]
        lock._reset()
        if rounds is not None:
            lock._last = rounds[j]
            if lock._executor.on_event is not None:
                lock._event(RELEASED, lock._acquired_at, 0, bool(rounds[j].ok))
