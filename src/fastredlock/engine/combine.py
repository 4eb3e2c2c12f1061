# cython: annotation_typing=False
"""Automatic pipelining: single-lock requests from threads ride together in one round trip.

Threads sharing a client that acquire or release single locks at the same moment would each pay a
round trip and a send/recv per master, and each master one wake-up per command. Instead, a request
that arrives while a round is in flight waits, and the next round carries every request waiting by
then: per master, the releases in one write (one ``RELEASE_MANY`` script call) and the acquisitions
(``SET NX PX`` each) right behind them, both answered in one read; quorum and validity are decided
per key. Writing releases first means a thread waiting for a name another thread is releasing can
get it in the same round. Fewer syscalls and wake-ups per lock, for the client and the masters, is
what lets threads go faster than one thread on a small machine.

Leader/follower ("flat combining"): a thread that finds no round in flight *leads*: it takes the
requests waiting (up to :data:`MAX_BATCH`; acquisitions with its TTL; releases bound to at most
one core), runs them through the ``run`` callable, wakes each follower with its result, and hands
the lead to the first request that arrived meanwhile, so no thread drives rounds for others after
its own is done. A thread alone never waits: its request is a round of one, run as before.
"""
from __future__ import annotations

from _thread import allocate_lock, get_ident
from typing import Any, Callable, List, Optional

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False

__all__ = ["Combiner", "Request", "MAX_BATCH"]

#: Most requests one round carries (the rest wait for the next round).
MAX_BATCH = 64


class Request:
    """One lock's command waiting for (or carried by) a combined round.

    ``ttl_ms`` > 0: an acquisition (``SET NX PX``); 0: an owner-checked release. ``carrier``: the
    core whose connections may still carry this lock's unanswered SETs (a release must be written
    behind them), else None. The runner fills ``rnd`` (the key's
    :class:`Round`), ``ok`` (its decision) and ``core`` (the core that ran it).
    """

    __slots__ = ("key", "token", "ttl_ms", "carrier", "rnd", "ok", "core", "error", "gate", "lead", "thread")

    def __init__(self, key: bytes, token: bytes, ttl_ms: int, carrier: Any = None) -> None:
        self.key = key
        self.token = token
        self.ttl_ms = ttl_ms
        self.carrier = carrier
        self.rnd: Any = None
        self.ok = False
        self.core: Any = None
        #: The exception that ended the round carrying this request, if any.
        self.error: Optional[BaseException] = None
        #: Held while the request waits; released by the leader when it is done or must lead.
        self.gate: Any = None
        #: Set by the leader that hands this request the lead.
        self.lead = False
        #: The thread that submitted it (a lead handed to the request is that thread's).
        self.thread = 0


class Combiner:
    """Runs requests one round at a time, each round carrying all that are waiting.

    ``run(batch)`` executes a list of requests (acquisitions sharing one TTL, releases, at most
    one carrier among them) as one round trip and fills in their results; it raises only if the
    round itself failed (then every request of the batch fails).
    ``abandon(request)`` undoes a completed request whose thread was interrupted while waiting
    (an acquisition that nobody will hold must be released).
    """

    def __init__(self, run: Callable[[List[Request]], None], abandon: Callable[[Request], None]) -> None:
        self._run = run
        self._abandon = abandon
        #: The lead, as a token: a list holding one item while nobody leads. Taking it is one
        #: ``pop()`` (interpreted, one ``del``: see _take_lead) and giving it up one ``append()``,
        #: each atomic under the GIL (interpreted or compiled), so :meth:`enter` and :meth:`leave`
        #: take no lock: the lean path of a thread alone stays a few C instructions. Handed on
        #: *taken* to a follower (see _pass_lead).
        self._lead_token = [True]
        #: Interpreted: the thread that holds the lead while it is taken (``get_ident()``; stale
        #: once given up), written in the step that takes or hands it on. A signal's handler runs
        #: as a function begins, after a call returns and at a loop's back edge: a thread
        #: interrupted after taking the lead and before the ``try`` that gives it back, or as it
        #: gives it back, finds the lead still its own at its next :meth:`enter` and goes on with
        #: it, instead of waiting for ever for a leader that is gone. (Compiled, a signal's handler
        #: runs at Python-level calls only, and none comes between those steps: not written.)
        self._leader = 0
        #: Guards the queue; a request is queued (under it) only while the lead is held. Whoever
        #: gives up the lead looks at the queue again afterwards, and a request that was queued
        #: retries the lead (see leave/submit), so no request waits unled.
        self._mutex = allocate_lock()
        self._queue: List[Request] = []
        #: Requests that rode in a round another thread led (a count, for tests and curiosity).
        self.carried = 0

    @property
    def _busy(self) -> bool:
        """Whether a round is in flight (its leader has not passed the lead on or given it up)."""
        return not self._lead_token

    def enter(self) -> bool:
        """Take the lead if no round is in flight: the caller then runs its own request as a round
        of one (its lean path) and must call :meth:`leave` after it. False: :meth:`submit` it."""
        return self._take_lead()

    def leave(self) -> None:
        """End a round run after :meth:`enter`: hand the lead to the first request that waited."""
        if self._queue:
            self._pass_lead()
        else:
            # Nobody waited: give the lead up without the mutex, then look again. A follower
            # that queued between the look and the release retries the lead after queuing
            # (see submit), so one of us two always picks it up.
            self._lead_token.append(True)
            if self._queue and self._take_lead():
                self._pass_lead()

    def _take_lead(self) -> bool:
        """Take the lead if nobody holds it, or go on with it if this thread holds it already (it
        was interrupted before it could give it back: interpreted only, see ``_leader``)."""
        if _COMPILED:  # (C: no signal's handler runs between the take and the caller's try)
            try:
                self._lead_token.pop()
            except IndexError:
                return False
            return True
        thread = get_ident()
        try:
            del self._lead_token[0]  # (not pop(): no call, for a signal to land, before the record)
        except IndexError:
            return self._leader == thread
        self._leader = thread
        return True

    def submit(self, req: Request) -> None:
        """Run ``req`` in the next round; return when its result is in (or raise the round's error)."""
        req.thread = get_ident()
        with self._mutex:
            if self._take_lead():
                follow = False
            else:
                req.gate = gate = allocate_lock()
                gate.acquire()
                self._queue.append(req)
                # The leader may have let go after we failed to take the lead and before we
                # queued (leave() does not take the mutex): take it now, or it is taken by a
                # leader that will see us in the queue.
                if self._take_lead():
                    self._queue.remove(req)
                    follow = False
                else:
                    follow = True
        if follow:
            self._wait(req)
            if not req.lead:
                if req.error is not None:
                    raise req.error
                return
        self._lead(req)

    def _lead(self, req: Request) -> None:
        # No waiting for more riders: threads woken by the last round run their own Python code
        # while this round is on the wire, and ride in the next one (a GIL yield here to let them
        # board first made rounds fuller but cost more time between rounds than it saved).
        batch = [req]
        with self._mutex:
            queue = self._queue
            if queue:
                ttl_ms = req.ttl_ms  # acquisitions (ttl_ms > 0) of one round share one TTL
                carrier = req.carrier
                keep = []
                for other in queue:
                    if len(batch) >= MAX_BATCH or (other.ttl_ms and ttl_ms and other.ttl_ms != ttl_ms):
                        keep.append(other)
                    elif other.carrier is None or other.carrier is carrier:
                        batch.append(other)
                        ttl_ms = ttl_ms or other.ttl_ms
                    elif carrier is None:
                        carrier = other.carrier
                        batch.append(other)
                        ttl_ms = ttl_ms or other.ttl_ms
                    else:
                        keep.append(other)
                self._queue = keep
        self.carried += len(batch) - 1
        try:
            self._run(batch)
        except BaseException as exc:
            for other in batch[1:]:
                other.error = _shared_failure(exc)
            raise
        finally:
            for other in batch[1:]:
                other.gate.release()
            self._pass_lead()

    def _pass_lead(self) -> None:
        """Hand the held lead to the first waiting request (it stays held), or give it up."""
        with self._mutex:
            queue = self._queue
            if queue:
                # No call before the gate's release (an interpreted build runs a signal's handler
                # after a call returns): a request taken off the queue is always woken.
                nxt = queue[0]
                del queue[0]
                nxt.lead = True
                self._leader = nxt.thread
                nxt.gate.release()
            else:
                self._lead_token.append(True)

    def _wait(self, req: Request) -> None:
        try:
            req.gate.acquire()
        except BaseException:
            # Interrupted (KeyboardInterrupt in the main thread): withdraw the request if no round
            # took it yet; else let its round finish, undo what it did, and pass on a lead it got.
            with self._mutex:
                try:
                    self._queue.remove(req)
                    queued = True
                except ValueError:
                    queued = False
            if not queued:
                req.gate.acquire()
                if req.lead:
                    self._pass_lead()
                elif req.error is None:
                    self._abandon(req)
            raise


def _shared_failure(exc: BaseException) -> BaseException:
    """The error a follower sees when the round that carried its request failed in the leader:
    the same error, or a :class:`LockError` if the leader was interrupted (KeyboardInterrupt)."""
    if isinstance(exc, Exception):
        return exc
    from ..errors import LockError

    return LockError(f"the round carrying this request was interrupted in another thread: {exc!r}")
