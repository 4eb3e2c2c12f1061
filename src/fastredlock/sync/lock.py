# cython: annotation_typing=False
"""``Lock``: one named lock handle for threads — acquire with retries, extend, release, fencing.

What a handle is and decides (its state, checks, errors, and every operation as a plan) is
:class:`fastredlock.handles.lock.LockBase`'s, shared with the asyncio handle. This module is the sync
front-end: each method hands its plan to :func:`drive`, which runs the plan's rounds through the
client's executor (:mod:`fastredlock.engine.executor`, the seam to the engine) and its pauses with
``threading``. Before any plan, :meth:`Lock.acquire` makes a plain lock's first attempt itself, and
:meth:`Lock.release` a plain release: the hot path of a thread alone, one C call into the executor.

No path leaves keys behind: a failed or interrupted acquisition releases on every master that may
hold its token, a release interrupted by a signal (``KeyboardInterrupt``) is sent again before the
exception goes on, and a failed extension releases everywhere and marks the lock lost.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple, Union

from ..handles.lock import SPLIT_RETRY, LockBase, fence_key
from ..engine.executor import ok_of
from ..engine.steps import (
    Acquire, Await, Background, Batch, Done, Job, Op, Release, ReleaseUnwaited, Settle, Sleep, Wait, advance,
)
from ..errors import LockError
from ..protocol.family import SCRIPT

__all__ = ["Lock", "fence_key", "drive", "new_lock", "client_lock", "SPLIT_RETRY"]

log = logging.getLogger("fastredlock")


class Lock(LockBase):
    """A handle on the lock called ``name``; get one from :meth:`Redlock.lock`.

    A handle holds at most one acquisition at a time. It is not meant to be shared between threads
    (share the :class:`Redlock` client instead and take one handle per thread); the client's
    watchdog thread is the one exception, and it coordinates with the handle's owner.
    """

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, *, auto_extend: bool = False,
                 max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None,
                 fencing: bool = False) -> None:
        # (its own __init__: the compiled class is then made by one vectorcall, without a kwargs dict)
        self._setup(client, name, ttl, auto_extend, max_hold, on_lost, fencing)

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
        tok = self._acquire_begin(blocking, timeout, token)
        first = None
        if tok is not None:
            try:
                got = self._executor.acquire_lean(self.key, tok, self._ttl_ms)  # the round, or (carrier, round)
                if type(got) is tuple:
                    carrier, first = got
                else:
                    carrier = None
                    first = got
                if self._took(tok, first, carrier):
                    return True
            except BaseException as exc:  # a signal after the SETs went out: nobody will hold the key
                # (KeyboardInterrupt can also come after the round, before its result got here:
                # then it is released on the chance it was taken; owner-checked, so harmless)
                if self.token is None and ((first is not None and first.ok) or not isinstance(exc, Exception)):
                    _again(self._executor, Release(self.key, tok, None))
                raise
        return drive(self._executor, self._acquire_plan(blocking, self._chosen, first))

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
        drive(self._executor, self._adopt_plan(token, ttl))

    def release(self, token: Union[str, bytes, None] = None, *,
                signal: Optional[Tuple[Union[str, bytes], int]] = None, wait: Optional[bool] = None) -> None:
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

        Interrupted by a signal (``KeyboardInterrupt``) while its round runs, the release is sent
        again on fresh connections before the exception goes on.

        ``wait=False`` (default: the client's ``wait_release``, True unless set) writes the release
        to every master and returns without waiting for their answers: half a lock cycle's round
        trips, for hot paths. The answers are still read (by this client's next round on those
        connections, or in the background) and still count: if they say the lock was not held on
        a quorum (it had expired, or another holder had it), ``on_lost`` runs, the ``lost`` event
        is sent, a warning is logged and ``releases_not_held`` counts it in ``Redlock.stats()``,
        but nothing is raised here. Only :class:`LockLostError` for a lock already known lost is
        raised at once. The release is written behind this client's earlier commands on the
        same connections, so acquiring the name again right away is written behind it.
        ``Redlock.close()`` reads the answers still owed before it closes the connections.
        A release by ``token``, with ``signal``, or of a lock of the family waits in any case.
        """
        if token is not None or signal is not None or self._family_kind:
            drive(self._executor, self._release_plan(token, signal))
            return
        self._release_lean(wait)

    def _release_lean(self, wait: Optional[bool]) -> None:
        """:meth:`release` of a plain lock's own acquisition (the hot path; a C call from
        ``release`` and from the end of a ``with`` block)."""
        held = self.token  # (None: not held, and _release_begin raises)
        executor = self._executor
        try:
            token = self._release_begin()
            waits = executor.release_waits(wait)
            if waits:
                got = executor.release_lean(self.key, token, self._carrier)  # (a C call: typed field)
            else:
                got = executor.release_unwaited(self.key, token, self._carrier, self._unwaited_report,
                                                self._acquired_at, self._was_lost)
        except BaseException:
            # A signal mid-round or mid-write, or once the handle had let go of its token but before
            # the round began (nothing else would send it then): send it again, waited, before the
            # exception goes on. (The token still on the handle: the caller's _abandon sends it.)
            if held is not None and self.token is None:
                _again(executor, Release(self.key, held, None))
            raise
        if not waits:
            self._unwaited_written(got)
            return
        if type(got) is tuple:  # (round, ok) of a round shared with other threads
            rnd, ok = got
        else:
            rnd = got
            ok = ok_of(got)  # (compiled: a C call reading the Round's C field)
        if not ok and self._key_refused(rnd):  # an ACL refused a derived key: the key alone
            rnd, ok = drive(self._executor, self._key_only_plan(token, rnd))
        if not self._release_confirmed(rnd, ok):
            raise self._release_error(rnd, self._executor.outcomes(rnd))  # the stragglers' answers first

    def extend(self, ttl: Optional[float] = None) -> None:
        """Reset the lock's time to live to ``ttl`` seconds (default: the handle's ``ttl``).

        Succeeds only if a quorum still held the token and the recomputed validity is positive.
        Otherwise the lock is lost: it is released on every master, ``on_lost`` runs, and
        :class:`LockNotOwnedError` (a :class:`LockLostError`) is raised.
        """
        drive(self._executor, self._extend_plan(ttl))

    def lose(self) -> None:
        """Mark the lock lost: release it everywhere, stop watching it, run ``on_lost`` once.

        Called when an extension or renewal failed or the validity ran out while held.
        """
        drive(self._executor, self._lose_plan())

    def _unwaited_report(self, entry: Any) -> None:
        """The answers to a release of this handle that was not waited for are in (the reaper's
        call, see :mod:`fastredlock.engine.unwaited`): report them; ``on_lost`` runs here if they say
        the lock was not held on a quorum."""
        if self._unwaited_done(entry):
            drive(self._executor, self._call_on_lost())

    # --- for the watchdog ------------------------------------------------------------------------
    def _extend_round(self, core: Any, token: bytes, ttl_ms: Any) -> Any:
        """The round of one renewal of ``token`` on ``core`` (the watchdog's)."""
        op, args = self._extend_op(token, ttl_ms)
        return getattr(core, op)(*args)

    def _watch(self) -> None:
        self._executor.watch(self)

    def _unwatch(self) -> None:
        if self._executor.watchdog is not None:
            self._executor.unwatch(self)

    # --- context manager --------------------------------------------------------------------
    def __enter__(self) -> "Lock":
        try:
            acquired = self.acquire()
        except BaseException:  # e.g. KeyboardInterrupt once the lock was taken: the block never runs
            self._abandon()
            raise
        if not acquired:
            raise self._not_acquired(self.outcomes)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if type(self) is Lock:  # a plain lock (a subclass may have its own release): one C call
                self._release_lean(None)
            else:
                self.release()
        except LockError as error:
            self._raise_at_exit(error, exc_type)
        except BaseException:  # interrupted before the release began: send it all the same
            self._abandon()
            raise

    def _abandon(self) -> None:
        """The handle's holder was interrupted (a signal) while it held the lock: release it."""
        token = self.token
        if token is not None:
            self._reset()
            _again(self._executor, Release(self.key, token, None))

    @property
    def outcomes(self) -> list:
        """What each master answered in this handle's last round (empty before the first).

        A round may return before its slowest masters answered (early decision at quorum); their
        answers are read first, waiting at most until their deadline ("timeout" if they miss it).
        """
        return self._executor.outcomes(self._last) if self._last is not None else []


def new_lock(client: Any, name: Union[str, bytes], ttl: float, auto_extend: bool = False,
             max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None,
             fencing: bool = False) -> Lock:
    """``Lock(client, name, ttl, ...)`` made in one C call (``Redlock.lock``'s: a compiled subclass
    of a compiled base is otherwise built through ``tp_init`` with a tuple and a dict)."""
    lock = Lock.__new__(Lock)
    lock._setup(client, name, ttl, auto_extend, max_hold, on_lost, fencing)
    return lock


def client_lock(self: Any, name: Union[str, bytes], ttl: float = 10.0, *, auto_extend: bool = False,
                max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None,
                fencing: bool = False) -> Lock:
    """``Redlock.lock``: :meth:`fastredlock.handles.client.RedlockBase.lock`'s compiled twin (the
    sync client's method; ``dlm.lock(name, ttl)`` is then one C call, its keywords parsed in C)."""
    return new_lock(self, name, ttl, auto_extend, max_hold, on_lost, fencing)


# --- the sync driver -------------------------------------------------------------------------------
def drive(executor: Any, plan: Any) -> Any:
    """Run ``plan`` (see :mod:`fastredlock.engine.steps`) to its end with ``executor``; its result.

    An exception from a step (a master's error, ``KeyboardInterrupt``) is thrown into the plan,
    which cleans up (in the background) and lets it go on.
    """
    step = advance(plan, None, None)
    while type(step) is not Done:
        try:
            value = _run(executor, step)
        except BaseException as exc:
            step = advance(plan, None, exc)
        else:
            step = advance(plan, value, None)
    return step.value


def _run(executor: Any, step: Any) -> Any:
    """One step of a plan, with the executor's cores and ``threading`` (see :mod:`fastredlock.engine.steps`)."""
    kind = type(step)
    if kind is Acquire:
        return executor.acquire_one(step.key, step.token, step.ttl_ms)
    if kind is Release:
        return _release_now(executor, step.key, step.token, step.carrier, step.signal)
    if kind is Op:
        if not step.protected:
            return _op(executor, step)
        try:
            return _op(executor, step)
        except BaseException:
            _again(executor, step)
            raise
    if kind is Job:
        return _job(executor, step)
    if kind is Wait:
        event = step.event
        woken = event.wait(step.delay) if step.delay > 0 else event.is_set()
        event.clear()
        return woken
    if kind is Sleep:
        time.sleep(step.delay)
        return None
    if kind is Settle:
        return executor.outcomes(step.rnd)
    if kind is Background:
        try:
            _run(executor, step.step)
        except Exception:
            log.debug("fastredlock: a clean-up step failed", exc_info=True)
        return None
    if kind is Await:
        close = getattr(step.awaitable, "close", None)
        if close is not None:
            close()
        log.warning("fastredlock: on_lost of a sync lock returned an awaitable; it was not awaited")
        return None
    if kind is Batch:
        with executor.core(carrying=step.carrying, acquiring=step.acquiring) as core:
            rounds = _calls(core, step.plan)
        return rounds, executor.carriers(core, rounds)
    if kind is ReleaseUnwaited:
        step.written(executor.release_many_unwaited(step.keys, step.tokens, step.carriers, step.on_done,
                                                    step.acquired_at))
        return None
    raise TypeError(f"not a plan step: {step!r}")  # pragma: no cover - a bug in a plan


def _op(executor: Any, step: Any) -> Tuple[Any, Any]:
    """``(carrier, round)`` of one core operation alone (a family script takes the lean path)."""
    if step.op == SCRIPT:
        return executor.script_one(step.args, step.carrier, step.acquiring)
    with executor.core(carrying=(step.carrier,), acquiring=step.acquiring) as core:
        rnd = getattr(core, step.op)(*step.args)
        return executor.carrier(core, rnd), rnd


def _job(executor: Any, step: Any) -> Tuple[bool, Any, Any]:
    """``(ok, round, carrier)`` of a job: its calls on one core alone."""
    with executor.core(acquiring=step.acquiring) as core:
        ok, rnd = _calls(core, step.plan)
        return ok, rnd, executor.carrier(core, rnd) if ok else None


def _calls(core: Any, plan: Any) -> Any:
    """Run the :class:`Call` steps of ``plan`` on ``core``; what it returns."""
    value = None
    while True:
        try:
            call = plan.send(value)
        except StopIteration as stop:
            return stop.value
        value = getattr(core, call.op)(*call.args)


def _release_now(executor: Any, key: bytes, token: bytes, carrier: Any, signal: Any) -> Tuple[Any, bool]:
    """``(round, ok)`` of one owner-checked release; interrupted (a signal, a bug), it is sent again
    on fresh connections, best effort, before the exception goes on."""
    try:
        if signal is None:
            return executor.release_one(key, token, carrier)
        return executor.release_signal(key, token, carrier, signal[0], signal[1])
    except BaseException:
        _again(executor, Release(key, token, None))
        raise


def _again(executor: Any, step: Any) -> None:
    """Send an interrupted release once more (owner-checked: harmless if the first one landed)."""
    try:
        if type(step) is Release:
            with executor.core() as core:
                core.release(step.key, step.token)
        else:
            _op(executor, Op(step.op, step.args))
    except BaseException:  # a second interruption, a closed client: the key's TTL is the bound
        log.warning("fastredlock: an interrupted release could not be sent again", exc_info=True)
