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

from _thread import allocate_lock
from typing import Any, Callable, List, Optional

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

    __slots__ = ("key", "token", "ttl_ms", "carrier", "rnd", "ok", "core", "error", "gate", "lead")

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
        #: ``pop()`` and giving it up one ``append()``, each atomic under the GIL (interpreted or
        #: compiled), so :meth:`enter` and :meth:`leave` take no lock: the lean path of a thread
        #: alone stays a few C instructions. Handed on *taken* to a follower (see _pass_lead).
        self._lead_token = [True]
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
        """Take the lead if nobody holds it (one atomic ``pop``)."""
        try:
            self._lead_token.pop()
        except IndexError:
            return False
        return True

    def submit(self, req: Request) -> None:
        """Run ``req`` in the next round; return when its result is in (or raise the round's error)."""
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
            if self._queue:
                nxt = self._queue.pop(0)
                nxt.lead = True
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
