# cython: annotation_typing=False
"""``LockBase``: what a lock handle is and decides, for both front-ends; every operation as a plan.

The sync :class:`fastredlock.Lock` and the asyncio :class:`fastredlock.asyncio.Lock` are both
subclasses of :class:`LockBase`, and neither of the other. The base holds the handle's state
(token, validity, fence, lost), its checks and errors, and each lock operation written once as a
*plan* (a generator of :mod:`fastredlock.engine.steps`): the acquire policy with its deadline, retries,
courtesy pause, turns and split-round retry; the queued, fenced and family attempts; release,
release by token, extend, adopt and lose. A front-end's methods validate nothing and decide
nothing: they hand a plan to their driver, which runs its rounds and pauses (the sync one with the
executor and ``threading``, the asyncio one on the loop) and owns cancellation and signals.

A lock is *lost* (Chubby's "jeopardy") when the holder can no longer prove it holds it: an
extension or renewal failed, or its validity ran out while held. Then :attr:`LockBase.lost` is
true, ``on_lost`` has run (or runs when the watchdog notices), :meth:`LockBase.check` raises
:class:`LockLostError`, and a ``with`` block raises :class:`LockLostError` at its exit.

The client and its watchdog change a handle's state only through the methods of the section
"for the client and its watchdog".
"""
from __future__ import annotations

import logging
import random
from time import monotonic
from typing import Any, Callable, Generator, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from ..engine.checks import check_number, check_timeout, key_of, token_of
from ..engine.fork import fork_generation
from ..engine.steps import Acquire, Await, Background, Call, Job, Op, Release, Settle, Sleep, Wait
from ..engine.tokens import new_token
from ..engine.unwaited import count_not_held, found_lost
from ..errors import (
    LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError, MasterOutcome, QuorumUnreachableError,
    ScriptsRefusedError,
)
from ..events import ACQUIRED, EXTENDED, LOST, REFUSED, RELEASED, LockEvent
from ..protocol import outcomes as oc
from ..protocol.family import mark_step, queueable, queued_step, renewal_ms, unqueue_step
from ..protocol.plans import answer_summary, fence_of, fenced_held, left_behind, may_hold, refused_for_scripts
from ..protocol.replies import refused_a_key, scripts_refused
from ..protocol.result import Round

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False
    from ..protocol.nocython import cython  # (LockBase's class decorators, as no-ops)

__all__ = ["LockBase", "fence_key", "SPLIT_RETRY"]

#: Longest pause, seconds, before a queued waiter retries after a split round (see the acquire plan).
SPLIT_RETRY = 0.002

log = logging.getLogger("fastredlock")

#: Builds a LockEvent from a tuple without the namedtuple's Python-level ``__new__`` (a hook's cost).
_new_event = tuple.__new__

#: Suffix of the fence counter key; the counter shares the lock key's hash tag (one cluster slot).
FENCE_SUFFIX = b":fastredlock-fence"

Plan = Generator[Any, Any, Any]
_Handle = TypeVar("_Handle", bound="LockBase")


#: ``(prefix, name, key)`` of the last handle made: a handle of the same name object with the same
#: prefix (a name that is a constant at the call site) takes that key, made and checked once. One
#: tuple, replaced whole: a thread reads all three or none. (str and bytes names are immutable.)
_last_key: Tuple[Any, Any, bytes] = (None, None, b"")


def _key(prefix: bytes, name: Union[str, bytes]) -> bytes:
    """:func:`key_of` ``(prefix, name)``, remembered for the last name (see ``_last_key``)."""
    global _last_key
    last = _last_key
    if last[1] is name and last[0] is prefix:
        return last[2]
    key = key_of(prefix, name)
    _last_key = (prefix, name, key)
    return key


def fence_key(key: bytes) -> bytes:
    """Return the key of the fence counter that belongs to lock ``key`` (same hash slot)."""
    left = key.find(b"{")
    if left != -1:
        right = key.find(b"}", left + 1)
        if right > left + 1:
            return key + FENCE_SUFFIX  # the key already has a hash tag: keep it
    return b"{" + key + b"}" + FENCE_SUFFIX


# (compiled: freed handles of LockBase's size, a sync or an asyncio Lock, are kept for reuse: a
# handle made costs no allocation. Declared here: Cython leaves out a freelist in lock.pxd.)
@cython.freelist(16)
@cython.cclass
class LockBase:
    """The state and the plans of a handle on the lock called ``name`` (see the module docstring).

    A handle holds at most one acquisition at a time. It is not meant to be shared between threads
    or tasks (share the client instead and take one handle each); the client's watchdog is the one
    exception, and it coordinates with the handle's owner.
    """

    __slots__ = (
        "_client", "_executor", "name", "key", "ttl", "_ttl_ms", "token", "_valid_until", "_last", "fence",
        "fencing", "auto_extend", "max_hold", "on_lost", "_lost", "_acquired_at", "_generation", "_carrier",
        "_family_kind", "_deadline", "_started", "_was_lost", "_chosen", "__weakref__",
    )

    def __init__(
        self,
        client: Any,
        name: Union[str, bytes],
        ttl: float,
        *,
        auto_extend: bool = False,
        max_hold: Optional[float] = None,
        on_lost: Optional[Callable[[Any], object]] = None,
        fencing: bool = False,
    ) -> None:
        self._setup(client, name, ttl, auto_extend, max_hold, on_lost, fencing)

    def _setup(self, client: Any, name: Union[str, bytes], ttl: float, auto_extend: bool, max_hold: Optional[float],
               on_lost: Optional[Callable[[Any], object]], fencing: bool) -> None:
        """``__init__``'s work (a C call from a front-end's own ``__init__`` in the compiled build)."""
        self._client = client
        executor = self._executor = client.executor
        #: The name as given.
        self.name = name
        #: The key written on the masters (the client's prefix + the name, as bytes).
        self.key: bytes = _key(executor.prefix, name)  # (the client's prefix)
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
        #: Called with this lock when the lock is lost while held (from the watchdog, or when a
        #: release that its caller stopped waiting for finds it was not held).
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
        #: release and extend go through it (see fastredlock.engine.executor).
        self._carrier = None
        #: True for the kinds of the lock family (:mod:`fastredlock.handles.family`): their attempts,
        #: releases and extensions are the rounds their plan names, not the plain lock's.
        self._family_kind = False
        #: The acquisition under way: its deadline (monotonic, or None) and start (for events).
        self._deadline: Optional[float] = None
        self._started = 0.0
        #: The release under way found the lock lost already (see _release_begin).
        self._was_lost = False
        #: The token the caller chose for the acquisition under way (see _acquire_lean), or None.
        self._chosen: Optional[bytes] = None

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

    # --- the front-end's part (each front-end defines these) -----------------------------------
    def _watch(self) -> None:
        """Hand this freshly acquired lock to the client's watchdog."""
        raise NotImplementedError

    def _unwatch(self) -> None:
        """Stop renewing or watching this lock."""
        raise NotImplementedError

    # --- acquire ----------------------------------------------------------------------------
    def _acquire_begin(self, blocking: bool, timeout: Optional[float], token: Any) -> Optional[bytes]:
        """Check an acquisition's arguments and start it. Its chosen token (or None), deadline (or
        None) and start are kept on the handle for the plan (``_chosen``, ``_deadline``,
        ``_started``). Returns the token of a lean first attempt if the first attempt is one (the
        hot path, made by the front-end before any plan: a plain lock's unqueued ``SET NX PX``; no
        fencing, not a family kind, and, when blocking, no courtesy owed and the name not contended
        here), else None (the plan makes every attempt)."""
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
        self._deadline = deadline
        self._started = monotonic() if executor.on_event is not None else 0.0
        self._chosen = chosen
        if self._family_kind or self.fencing:
            return None
        if blocking and (executor.owed or (executor.contended and self.key in executor.contended)):
            return None
        return new_token() if chosen is None else chosen

    def _took(self, token: bytes, rnd: Any, carrier: Any) -> bool:
        """Take a lean first attempt's round: True if the handle now holds the lock (set up)."""
        self._last = rnd
        if type(rnd) is Round:  # (compiled: its fields read as C fields; a pure core's round is another class)
            r = rnd
            if not r.ok:
                return False
            self._valid_until = r.started + r.elapsed + r.validity  # r.valid_until, inline
        else:
            if not rnd.ok:
                return False
            self._valid_until = rnd.valid_until
        self._carrier = carrier
        # _acquired(token, 1), inline (the hot path)
        self.token = token
        # (compiled: lock.pxd's _c_now, time.monotonic's clock read in C)
        self._acquired_at = _c_now() if _COMPILED else monotonic()  # type: ignore[name-defined]  # noqa: F821
        if self.auto_extend or self.on_lost is not None:
            self._watch()
        if self._executor.on_event is not None:
            self._event(ACQUIRED, self._started, 1, True)
        return True

    def _acquired(self, token: bytes, attempts: int) -> None:
        """An attempt succeeded: the handle holds ``token`` (watched if asked; the event told)."""
        self.token = token
        self._acquired_at = monotonic()
        if self.auto_extend or self.on_lost is not None:
            self._watch()
        if self._executor.on_event is not None:
            self._event(ACQUIRED, self._started, attempts, True)

    def _acquiring(self, blocking: bool = True, timeout: Optional[float] = None, token: Any = None) -> Plan:
        """The whole acquisition as one plan (:meth:`_acquire_begin`, then :meth:`_acquire_plan`)."""
        self._acquire_begin(blocking, timeout, token)
        return (yield from self._acquire_plan(blocking, self._chosen, None))

    def _acquire_plan(self, blocking: bool, chosen: Optional[bytes], first: Any) -> Plan:
        """The acquire policy: attempts until one holds, the deadline passes or ``retry_count``
        runs out. Returns whether the lock is held.

        ``first``: the round of a lean first attempt the front-end already made (it failed), or
        None. Between attempts the plan pauses ``retry_delay`` plus jitter (or the client's
        ``backoff``), never past the deadline, and less when a release of the name is heard (the
        client's ``wake``). A plain lock that met contention queues its attempts on the masters
        (turns, see :mod:`fastredlock.engine.wake`). Every failed attempt was released on the masters
        that may hold it before the pause; a waiter that gives up leaves the queues; one that is
        interrupted leaves them in the background.
        """
        executor = self._executor
        notifier = executor.notifier
        key = self.key
        deadline = self._deadline
        started = self._started
        waiter = None
        # A plain lock whose name met contention here lately: every attempt is a queued one, the
        # first too, so that a releaser asking again at once does not take the woken waiter's turn.
        plain = blocking and notifier is not None and not self._family_kind and not self.fencing
        queued = False
        # The name's wake mark stands for this waiter (see below): a queued attempt sets it.
        marked = False
        # Whether the masters may queue this waiter (off once they refused the scripts turns need).
        turns = True
        ok = False
        attempts = 0
        # Down is not held: since when every attempt found a quorum of masters unreachable (-1.0:
        # the last one did not), and whether this acquisition said so / named a restart refusal.
        down_since = -1.0
        told_down = False
        told_restart = False
        unreachable = self._client.unreachable_timeout
        try:
            if first is None:
                if blocking and executor.owed:
                    pause = notifier.pause_before(key)
                    if pause > 0:
                        # This client's release of the name woke a waiter: let it go first (its
                        # round would only meet ours). A plain lock's waiter is queued from here
                        # (its place is taken when it joins), and a message it hears now is a
                        # release that found nobody queued: it goes at once.
                        queued = plain and turns and queueable(key)
                        waiter = notifier.join(key, deadline)
                        if deadline is not None:
                            pause = min(pause, deadline - monotonic())
                        if (yield Wait(waiter.event, pause)) and not queued:
                            spread = notifier.spread(waiter.since, deadline)  # the newest: among the last
                            if spread > 0:
                                yield Sleep(spread)
                if (plain and turns and waiter is None and executor.contended and key in executor.contended
                        and queueable(key)):
                    waiter = notifier.join(key, deadline)
                    queued = True
            while True:
                attempts += 1
                if first is not None:
                    first = None  # the front-end's lean attempt: it failed (released behind its SETs)
                else:
                    token = new_token() if chosen is None else chosen
                    if self.fencing:
                        ok = yield from self._attempt_fenced(token)
                    elif self._family_kind:
                        ok = yield from self._attempt_family(token)
                    elif queued:
                        ok = yield from self._attempt_queued(token, waiter)
                        marked = True
                    else:
                        # Rides with other callers' acquisitions if a round is in flight.
                        carrier, rnd = yield Acquire(key, token, self._ttl_ms)
                        self._last = rnd
                        ok = bool(rnd.ok)
                        if ok:
                            self._valid_until = rnd.valid_until
                            self._carrier = carrier
                    if ok:
                        self._acquired(token, attempts)
                        return True
                if self._last is not None and refused_for_scripts(self._last, executor.quorum):
                    if not queued:  # (took nothing: refused before anything was sent)
                        raise self._scripts_refused(self._last)
                    turns = queued = False  # the masters run no scripts: no turns, plain attempts
                rnd = self._last
                if rnd is not None:
                    if not told_restart and _restart_refused(rnd, executor.quorum):
                        told_restart = True
                        log.warning("fastredlock: %s", self._restart_note(executor.outcomes(rnd, False)))
                    if blocking and _quorum_unreachable(rnd, executor.n, executor.quorum):
                        if down_since < 0.0:
                            down_since = monotonic()
                        if not told_down:
                            told_down = True
                            self._tell_down(executor.outcomes(rnd, False), unreachable, deadline)
                    else:
                        down_since = -1.0
                delay = self._next_delay(attempts, deadline) if blocking else -1.0
                if delay < 0:
                    yield from self._gave_up(waiter if queued else None)
                    if executor.on_event is not None:
                        self._event(REFUSED, started, attempts, False)
                    return False
                if down_since >= 0.0 and unreachable is not None:
                    left = down_since + unreachable - monotonic()
                    if left <= 0.0:
                        # Down for unreachable_timeout: raise rather than wait for ever (a held
                        # lock is waited for; masters that cannot be reached hold nothing).
                        yield from self._gave_up(waiter if queued else None)
                        queued = False  # out of the queues already
                        if executor.on_event is not None:
                            self._event(REFUSED, started, attempts, False)
                        raise self._unreachable_error(rnd, (yield Settle(rnd)), monotonic() - down_since)
                    if delay > left:
                        delay = left
                if notifier is not None and waiter is None:
                    # Another attempt follows: listen for releases from now on (a release during
                    # the pause ends it); a plain lock's next attempts queue on the masters.
                    waiter = notifier.join(key, deadline)
                    queued = plain and turns and queueable(key)
                    if queued and self._client.retry_count is None:
                        # That attempt at once: it takes this waiter's place in the queues. (Not
                        # with a retry_count: those attempts are counted, and each pauses before.)
                        continue
                elif (queued and self._last is not None and self._client.retry_count is None
                      and (yield from _took_some(self._last))):
                    # A queued attempt that took the key somewhere and still failed: a split
                    # round (another attempt took the rest), released quietly on both sides, so
                    # no release will wake anyone. Try again after a short random pause rather
                    # than the backoff (it breaks the tie). Not with a retry_count: those attempts
                    # each pause retry_delay.
                    delay = min(delay, random.uniform(0.0, SPLIT_RETRY))
                if waiter is not None and not marked and turns and not self._family_kind and queueable(key):
                    # A waiter without a place in the queue (a fenced lock's; a plain lock's before
                    # its first queued attempt) marks the name for its pause: a plain release
                    # that finds no mark wakes nobody (fastredlock.protocol.scripts, RELEASE).
                    yield Op(*mark_step(key, delay))
                if waiter is None:
                    if delay > 0:
                        yield Sleep(delay)
                elif (yield Wait(waiter.event, delay)) and not queued:
                    # Woken by a release: every waiter heard it. Spread the retries (the longest
                    # waiting go first) rather than split the masters' votes among them. A queued
                    # waiter was woken alone (its turn): it goes at once.
                    spread = notifier.spread(waiter.since, deadline)
                    if spread > 0:
                        yield Sleep(spread)
        except GeneratorExit:
            raise
        except BaseException:
            if queued and not ok and waiter is not None:  # interrupted: out of the queues, not awaited
                yield Background(Op(*unqueue_step(key, waiter.member)))
            raise
        finally:
            if waiter is not None:
                notifier.leave(waiter)

    def _gave_up(self, waiter: Any) -> Plan:
        """An acquisition that gave up: a queued ``waiter`` leaves the masters' queues (best
        effort: else a release could name it and nobody would come for its turn)."""
        if waiter is not None:
            try:
                yield Op(*unqueue_step(self.key, waiter.member))
            except Exception:  # the masters' queues expire anyway (a closed client, a lost master)
                log.debug("fastredlock: could not leave the queues of %r", self.name, exc_info=True)

    def _attempt_queued(self, token: bytes, waiter: Any) -> Plan:
        """One attempt as a queued waiter: the free key is taken on this waiter's turn or nobody's,
        else it stays in the queue. A failure that may have landed somewhere is released behind
        it, not awaited."""
        key = self.key
        ok, rnd, carrier = yield Job(self._queued_job(token, waiter), ((key,), (token,)), Release(key, token, None))
        self._last = rnd
        if ok:
            self._valid_until = rnd.valid_until
            self._carrier = carrier
        return ok

    def _queued_job(self, token: bytes, waiter: Any) -> Plan:
        """The rounds of a queued attempt, on one core: ``(held, its round)``."""
        key = self.key
        client = self._client
        op, args = queued_step(key, token, self._ttl_ms, waiter.member, waiter.score,
                               renewal_ms(client.retry_delay, client.retry_jitter, client.io_timeout))
        rnd = yield Call(op, *args)
        if rnd.ok:
            if rnd.successes < self._executor.n:  # its place stays where the key was not taken
                op, args = unqueue_step(key, waiter.member)
                yield Call(op, *args)
        elif left_behind(rnd):
            yield Call("release_quiet", key, token)  # it never held the lock
        return bool(rnd.ok), rnd

    def _attempt_fenced(self, token: bytes) -> Plan:
        """Two rounds with a core alone: SET NX + read counters, then max+1 to a quorum (DESIGN §1)."""
        key = self.key
        ok, rnd, carrier = yield Job(self._fenced_job(token), ((key,), (token,)), Release(key, token, None))
        if ok:
            self._valid_until = rnd.valid_until  # validity runs from before the first round
            self._carrier = carrier
        return ok

    def _fenced_job(self, token: bytes) -> Plan:
        """The rounds of a fenced attempt, on one core: ``(held, the first round)``."""
        key = self.key
        fkey = fence_key(key)
        first = yield Call("acquire_fenced", key, fkey, token, self._ttl_ms)
        self._last = first
        if first.ok:
            fence = fence_of(first.values)
            second = yield Call("write_fence", key, fkey, token, fence, int(self._client.fence_retention * 1000))
            # validity still runs from before the first round: the second round only uses it up
            if fenced_held(second.ok, first.valid_until, monotonic()):
                self.fence = fence
                return True, first
            self._last = second
        if may_hold(first.outcomes):
            yield Call("release_quiet", key, token)  # it never held the lock
        return False, first

    def _attempt_family(self, token: bytes) -> Plan:
        """One attempt of a kind of the lock family (see :mod:`fastredlock.handles.family`)."""
        raise NotImplementedError
        yield  # pragma: no cover - a generator

    def _next_delay(self, attempts: int, deadline: Optional[float]) -> float:
        """Seconds to wait before attempt ``attempts + 1`` (the client's retry policy, never past
        ``deadline``), or -1.0: no attempt is left."""
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

    # --- adopt: a lock acquired elsewhere --------------------------------------------------------
    def _adopt_plan(self, token: Union[str, bytes], ttl: Optional[float]) -> Plan:
        """Take over the acquisition of this name made with ``token`` (see ``adopt``)."""
        if self._family_kind:  # a share or a count is not handed over by token
            raise LockError(f"{type(self).__name__} handles cannot adopt a token", self.name)
        if self.token is not None and not self._lost:
            raise LockError("this handle already holds the lock; release it first", self.name)
        token = token_of(token)
        ttl_ms = self._ttl_ms if ttl is None else self._executor.ttl_ms(ttl)
        self._reset()
        _carrier, rnd = yield Op("extend", (self.key, token, ttl_ms))
        self._last = rnd
        if not rnd.ok:
            raise self._token_not_held(rnd, (yield Settle(rnd)), "; it was not taken over")
        self.token = token
        self._acquired_at = monotonic()
        self._valid_until = rnd.valid_until
        if ttl is not None:
            self.ttl, self._ttl_ms = float(ttl), ttl_ms
        if self.auto_extend or self.on_lost is not None:
            self._watch()

    # --- release ----------------------------------------------------------------------------
    def _release_begin(self) -> bytes:
        """Start releasing the held acquisition: its token. The handle holds nothing from here on
        (the release goes out even if its caller is interrupted); its carrier (the release goes
        through it) and whether it had been lost stay until :meth:`_release_confirmed`."""
        token = self.token
        if token is None or self._generation != fork_generation():
            token = self._require_token()  # raises
        if self.auto_extend or self.on_lost is not None:  # (only those are ever watched)
            self._unwatch()
        now = _c_now() if _COMPILED else monotonic()  # type: ignore[name-defined]  # noqa: F821
        self._was_lost = self._lost or now >= self._valid_until  # self.lost, inline
        self.token = None
        self.fence = None
        self._valid_until = 0.0
        return token

    def _release_confirmed(self, rnd: Any, ok: bool) -> bool:
        """Take a release's round; True if it was confirmed (a quorum still held the token, and
        the lock had not been lost before); False: the caller raises :meth:`_release_error`."""
        executor = self._executor
        self._carrier = None
        if executor.notifier is not None:
            if type(rnd) is Round:  # (compiled: a C field, see _took)
                r = rnd
                details = r.details
            else:
                details = rnd.details
            if details is not None:
                executor.notifier.released(self.key, details)  # waiters heard it: let them go first
        self._last = rnd
        was_lost = self._was_lost
        if executor.on_event is not None:
            self._event(RELEASED, self._acquired_at, 0, ok and not was_lost)
        if was_lost:
            self._lost = False
            return False
        return ok

    # --- a release nobody waits for (see fastredlock.engine.unwaited) -----------------------------------
    def _unwaited_written(self, rnd: Any) -> None:
        """A release not waited for was written (``rnd``: its round, answers still to come; None
        if it was queued behind a round in flight): the handle forgets its carrier. Raises
        :class:`LockLostError` if the lock was known lost already (the release went out anyway)."""
        self._carrier = None
        if rnd is not None:
            self._last = rnd
        if self._was_lost:
            self._lost = False
            raise LockLostError(f"lock {self.name!r} had been lost before it was released", self.name)

    def _unwaited_done(self, entry: Any) -> bool:
        """The answers to a release not waited for are in (``entry``, see :mod:`fastredlock.engine.unwaited`;
        the handle may hold another acquisition by now, so only the entry's values are used): the
        waiters' wake-up bookkeeping, ``releases_not_held`` and the ``released`` event, as a
        waited release has them. Returns True if the answers say the lock was not held on a
        quorum (it had expired, or another holder had it): then it is logged and the ``lost``
        event sent here, and the front-end runs ``on_lost``."""
        executor = self._executor
        rnd = entry.rnd
        if rnd.details is not None and executor.notifier is not None:
            executor.notifier.released(self.key, rnd.details)
        count_not_held(executor.health, rnd.outcomes)
        lost = not entry.was_lost and found_lost(rnd.outcomes, executor.n, executor.quorum)
        if lost:
            log.warning("fastredlock: lock %r was not held on a quorum when its release (not waited for) "
                        "reached the masters (%d/%d confirmed): it had expired or another holder had it%s",
                        self.name, rnd.successes, executor.quorum,
                        executor.down_note(executor.outcomes(rnd, False)))
        if executor.on_event is not None:
            self._event(RELEASED, entry.acquired_at, 0, rnd.successes >= executor.quorum and not entry.was_lost)
            if lost:
                self._event(LOST, entry.acquired_at, 0, False)
        return lost

    def _release_error(self, rnd: Any, outcomes: List[MasterOutcome]) -> LockError:
        if self._was_lost:
            return LockLostError(f"lock {self.name!r} had been lost before it was released", self.name, outcomes)
        return self._release_unconfirmed(rnd, outcomes)

    def _release_plan(self, token: Any = None, signal: Any = None) -> Plan:
        """Release the held acquisition (or, with ``token``, the one made with that token)."""
        if signal is not None:
            if not self._executor.scripts:
                raise ScriptsRefusedError(f"lock {self.name!r}: a signal= release runs a script, and this client "
                                          "sends none (scripts=False; it needs @scripting)", self.name)
            signal = _signal_of(signal)
        if token is not None:
            return (yield from self._release_token_plan(token, signal))
        token = self._release_begin()
        rnd, ok = yield from self._release_round(token, self._carrier, signal)
        if not self._release_confirmed(rnd, ok):
            raise self._release_error(rnd, (yield Settle(rnd)))

    def _release_round(self, token: bytes, carrier: Any, signal: Any = None) -> Plan:
        """``(round, ok)`` of one owner-checked release of ``token`` (protected: it goes out even
        if its caller is interrupted)."""
        if self._family_kind:
            op, args = self._release_step(token)
            _carrier, rnd = yield Op(op, args, carrier, True)
            return rnd, bool(rnd.ok)
        rnd, ok = yield Release(self.key, token, carrier, signal)
        if not ok and signal is None and self._key_refused(rnd):
            return (yield from self._key_only_plan(token, rnd))
        return rnd, ok

    @staticmethod
    def _key_refused(rnd: Any) -> bool:
        """Whether a release's round was refused a key by an ACL somewhere (see :meth:`_key_only_plan`)."""
        return rnd.details is not None and any(refused_a_key(d) for d in rnd.details)

    def _key_only_plan(self, token: bytes, rnd: Any) -> Plan:
        """``(round, ok)`` after release ``rnd`` met an ACL whose key patterns cover the lock key
        but not the keys its release derives (``~app:*``, and the wake mark ``{app:x}:wake``):
        the key alone again, by a command or script that touches nothing else (waking degrades
        for such a user: its waiters sleep their backoff). ``ok``: a quorum deleted it in one
        round or the other."""
        _carrier, again = yield Op("release_plain", (self.key, token), None, True)
        if rnd.successes + again.successes >= self._executor.quorum:
            return again, True
        return rnd, False

    def _release_token_plan(self, token: Union[str, bytes], signal: Any) -> Plan:
        token = token_of(token)
        own = token == self.token
        carrier = None
        if own:
            carrier = self._carrier
            self._unwatch()
            self._reset()
        rnd, ok = yield from self._release_round(token, carrier, signal)
        self._last = rnd
        if self._executor.on_event is not None:
            self._event(RELEASED, self._acquired_at if own else monotonic(), 0, ok)
        if not ok:
            raise self._token_not_held(rnd, (yield Settle(rnd)))

    def _release_step(self, token: bytes) -> Tuple[str, tuple]:
        """The plan step of a release of a kind of the lock family (see :mod:`fastredlock.handles.family`)."""
        raise NotImplementedError

    # --- extend and lose ----------------------------------------------------------------------
    def _extend_plan(self, ttl: Optional[float]) -> Plan:
        """Reset the TTL; if a quorum did not confirm it, lose the lock and raise."""
        token = self._require_token()
        if self._lost:
            raise LockLostError(f"lock {self.name!r} was lost; acquire it again", self.name)
        ttl_ms = self._ttl_ms if ttl is None else self._executor.ttl_ms(ttl)
        op, args = self._extend_op(token, ttl_ms)
        _carrier, rnd = yield Op(op, args, self._carrier)
        if self._extended(rnd, ttl, ttl_ms):
            return
        yield from self._lose_plan()
        raise self._extension_failed(rnd, (yield Settle(rnd)))

    def _extend_op(self, token: bytes, ttl_ms: Any) -> Tuple[str, tuple]:
        """``(core operation, args)`` of one extension of ``token`` (the watchdog's renewal too)."""
        if self._family_kind:
            return self._extend_step(token, ttl_ms)
        return "extend", (self.key, token, ttl_ms)

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Tuple[str, tuple]:
        """The plan step of an extension of a kind of the lock family (see :mod:`fastredlock.handles.family`)."""
        raise NotImplementedError

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

    def _lose_plan(self) -> Plan:
        """Mark the lock lost: release it everywhere, stop watching it, run ``on_lost`` once."""
        if self._lost:
            return
        self._lost = True
        self._valid_until = 0.0
        self._unwatch()
        if self._executor.on_event is not None:
            self._event(LOST, self._acquired_at, 0, False)
        token = self.token
        if token is not None:
            try:
                yield from self._release_round(token, self._carrier)
            except Exception:  # a failed cleanup still leaves the TTL as a bound
                log.warning("fastredlock: could not release lost lock %r", self.name, exc_info=True)
        yield from self._call_on_lost()

    def _call_on_lost(self) -> Plan:
        """Run ``on_lost`` (awaited on the asyncio side if it returns an awaitable); log its errors."""
        if self.on_lost is None:
            return
        try:
            result = self.on_lost(self)
            if result is not None and hasattr(result, "__await__"):
                yield Await(result)  # an async callable's: the asyncio driver awaits it
        except Exception:
            log.exception("fastredlock: on_lost callback of lock %r raised", self.name)

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
        cls: Type[_Handle], client: Any, names: Sequence[Any], keys: Sequence[bytes], ttl: float, ttl_ms: int,
        tokens: Sequence[bytes], rounds: Sequence[Any], carriers: Sequence[Any],
    ) -> List[Optional[_Handle]]:
        """The result of a batch round (``acquire_many``, ``lock_all``): per name, a held handle
        (its round granted it; ``carriers``: the executor's), or None.

        The client checked the names, keys and TTL once for the whole batch, so the handles are
        built here directly in the held state (the plain options of ``Redlock.lock``), without
        the per-handle checks of ``__init__``: a batch of 64 spends far less time in Python.
        """
        return held_locks(cls, client, list(names), list(keys), ttl, ttl_ms, list(tokens), list(rounds),
                           list(carriers))

    @staticmethod
    def release_args_of(locks: Sequence["LockBase"]) -> Tuple[List["LockBase"], List[bytes], List[bytes], List[Any]]:
        """``(handles, keys, tokens, carriers)`` of the acquisitions a batch release is about to
        undo; raises :class:`TypeError` for an object that is not a lock handle, and
        :class:`LockError` for a handle that does not hold its lock (or whose parent process does)."""
        return _release_args_of(locks)

    @staticmethod
    def released_all(handles: Sequence["LockBase"], rounds: Optional[Sequence[Any]], report: bool = True) -> None:
        """A batch release ended: the handles hold nothing; ``rounds``: theirs (None if it failed).
        ``report``: the ``released`` events are sent now (not for releases not waited for: their
        reports come with their answers)."""
        _released_all(list(handles), None if rounds is None else list(rounds), report)

    @staticmethod
    def took_rounds(handles: Sequence["LockBase"], rounds: Sequence[Any]) -> None:
        """Each handle's last round is its ``rounds[j]`` (a batch release not waited for, written)."""
        for lock, rnd in zip(handles, rounds):
            lock._last = rnd

    @staticmethod
    def unwaited_args_of(handles: Sequence["LockBase"]) -> Tuple[List[Any], List[float]]:
        """``(on_done, acquired_at)`` of a batch release not waited for (see
        :meth:`fastredlock.engine.executor.Executor.release_many_unwaited`): per handle, its report
        once the answers are in and when it was acquired."""
        return [lock._unwaited_report for lock in handles], [lock._acquired_at for lock in handles]

    def _unwaited_report(self, entry: Any) -> None:
        """The answers to a release of this handle that was not waited for are in (the executor's
        ``on_done``; each front-end defines it, see :meth:`_unwaited_done`)."""
        raise NotImplementedError

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

    # --- the decisions and errors both front-ends share --------------------------------------
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

    def _extension_failed(self, rnd: Any, outcomes: List[MasterOutcome]) -> LockLostError:
        return LockLostError(
            f"lock {self.name!r} could not be extended on a quorum ({rnd.successes}/{self._executor.quorum} "
            f"needed); it is lost and was released{self._executor.down_note(outcomes)}",
            self.name,
            outcomes,
        )

    def _scripts_refused(self, rnd: Any) -> ScriptsRefusedError:
        """The error of an acquisition the masters refused for want of scripts (see
        :func:`fastredlock.protocol.plans.refused_for_scripts`): it names the missing right."""
        detail = next(d for d in rnd.details if scripts_refused(d))
        what = ("a fenced lock" if self.fencing else f"a {type(self).__name__}" if self._family_kind
                else "a plain lock")
        return ScriptsRefusedError(f"lock {self.name!r} ({what}) not acquired: {detail}", self.name,
                                   self._executor.outcomes(rnd, False))

    def _release_unconfirmed(self, rnd: Any, outcomes: List[MasterOutcome]) -> LockNotOwnedError:
        tail = answer_summary(rnd.outcomes, rnd.details)
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
        lead = ""
        if _restart_caused(outcomes, self._executor.quorum):
            lead = self._restart_note(outcomes, False) + ": "
        return LockNotAcquiredError(
            f"{lead}could not acquire lock {self.name!r}{self._executor.down_note(outcomes)}", self.name, outcomes
        )

    def _restart_note(self, outcomes: List[MasterOutcome], detailed: bool = True) -> str:
        """What a refusal caused by restart-aware voting says: which masters, for how long yet
        (``detailed``: each one's detail; an error lists them after its message anyway)."""
        restarted = [o for o in outcomes if o.outcome == _RESTARTED]
        return (f"lock {self.name!r} refused by restart-aware voting: "
                + ", ".join(f"{o.master} ({o.detail})" if o.detail and detailed else o.master for o in restarted)
                + (" restarted recently" if not detailed else "")
                + "; a master up for less than the restart grace may have forgotten locks it held before "
                  "a restart, so its OK does not count yet")

    def _tell_down(self, outcomes: List[MasterOutcome], unreachable: Optional[float], deadline: Optional[float]) -> None:
        """Log, once per acquisition, that no quorum of masters can be reached, and what comes next."""
        bound = unreachable
        if deadline is not None and (bound is None or deadline - monotonic() < bound):
            then = "its timeout ends in %.1fs" % max(0.0, deadline - monotonic())
        elif bound is None:
            then = "waiting for them (unreachable_timeout=None)"
        else:
            then = "raising QuorumUnreachableError in %gs unless they come back (unreachable_timeout)" % bound
        down = [str(o) for o in outcomes if o.outcome in _DOWN_NAMES]
        log.warning("fastredlock: lock %r: no quorum of masters is reachable (%d of %d down, %d needed: %s); %s",
                    self.name, len(down), self._executor.n, self._executor.quorum, ", ".join(down), then)

    def _unreachable_error(self, rnd: Any, outcomes: List[MasterOutcome], down_for: float) -> LockNotAcquiredError:
        down = [o.master for o in outcomes if o.outcome in _DOWN_NAMES]
        return QuorumUnreachableError(
            f"could not acquire lock {self.name!r}: no quorum of masters was reachable for {down_for:.1f}s "
            f"({len(down)} of {self._executor.n} masters unreachable: {', '.join(down)}; "
            f"{self._executor.quorum} needed)",
            self.name, outcomes, down,
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


_RESTARTED = oc.NAMES[oc.UNTRUSTED]
_DOWN_NAMES = frozenset(oc.NAMES[code] for code in oc.DOWN)


def _quorum_unreachable(rnd: Any, n: int, quorum: int) -> bool:
    """Whether the masters that could not be reached in ``rnd`` alone make a quorum impossible."""
    down = 0
    for code in rnd.outcomes:
        if code in oc.DOWN:
            down += 1
    return down > n - quorum


def _restart_refused(rnd: Any, quorum: int) -> bool:
    """Whether a failed round would have had its quorum if restart-aware voting had counted the
    OKs of the masters that restarted recently (then the refusal is voting's, and is said so)."""
    untrusted = 0
    for code in rnd.outcomes:
        if code == oc.UNTRUSTED:
            untrusted += 1
    return untrusted > 0 and rnd.successes + untrusted >= quorum


def _restart_caused(outcomes: List[MasterOutcome], quorum: int) -> bool:
    """:func:`_restart_refused` on outcomes already made readable."""
    untrusted = sum(1 for o in outcomes if o.outcome == _RESTARTED)
    ok = sum(1 for o in outcomes if o.outcome == "ok")
    return untrusted > 0 and ok + untrusted >= quorum


def _took_some(rnd: Any) -> Plan:
    """Whether a failed attempt's round took its key on some master. A round decided early (three
    refusals of five made a quorum impossible) may have its OKs still on the way: those stragglers
    are read first, else a split round whose OKs came last looks like a plain refusal, and every
    waiter sleeps its backoff (nobody holds the key, so no release comes to wake them)."""
    if rnd.successes == 0 and oc.PENDING in rnd.outcomes:
        yield Settle(rnd)
    return rnd.successes > 0


def _signal_of(signal: Any) -> Tuple[bytes, int]:
    """The ``signal=`` of a release checked: ``(list key as bytes, lifetime in ms > 0)``."""
    if not isinstance(signal, tuple) or len(signal) != 2:
        raise TypeError(f"signal must be a (list key, milliseconds) tuple, not {signal!r}")
    key = token_of(signal[0])  # str as UTF-8, bytes as they are; not empty
    ms = signal[1]
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        raise ValueError(f"signal: the list's lifetime must be an int > 0 (ms), got {ms!r}")
    return key, ms


def held_locks(cls, client, names, keys, ttl, ttl_ms, tokens, rounds, carriers):
    """:meth:`LockBase.held`, one loop (compiled: the handles' fields are set as C struct fields)."""
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
        lock._family_kind = False
        lock._deadline = None
        lock._started = 0.0
        lock._was_lost = False
        lock._chosen = None
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
    """:meth:`LockBase.release_args_of`, one loop."""
    handles, keys, tokens, carriers = [], [], [], []
    for obj in locks:
        if not isinstance(obj, LockBase):
            raise TypeError(f"locks must hold Lock objects, not {type(obj).__name__}")
        lock = obj
        token = lock._require_token()
        handles.append(lock)
        keys.append(lock.key)
        tokens.append(token)
        carriers.append(lock._carrier)
    return handles, keys, tokens, carriers


def _released_all(handles, rounds, report):
    """:meth:`LockBase.released_all`, one loop."""
    for j in range(len(handles)):
        lock = handles[j]
        lock._reset()
        if rounds is not None:
            lock._last = rounds[j]
            if report and lock._executor.on_event is not None:
                lock._event(RELEASED, lock._acquired_at, 0, bool(rounds[j].ok))
