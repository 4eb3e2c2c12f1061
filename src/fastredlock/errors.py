"""Exceptions raised by fastredlock.

Errors that come from a round carry the per-master outcomes, so an operator can see *why* a quorum
was missed: which master timed out, which refused, which answered an error, which was skipped while
cooling down. When a quorum was impossible because too many masters were down, the message says so
and names them.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "LockError",
    "LockLostError",
    "LockNotAcquiredError",
    "LockNotOwnedError",
    "MasterOutcome",
    "QuorumUnreachableError",
    "ScriptsRefusedError",
]


class MasterOutcome(NamedTuple):
    """What one master answered in one round."""

    #: The master as configured, e.g. ``"127.0.0.1:7001"`` or ``"unix:///tmp/r.sock"``.
    master: str
    #: One of ``"ok"``, ``"no"``, ``"timeout"``, ``"connection error"``, ``"tls error"`` (the TLS
    #: handshake failed: certificate, host name, protocol version; the detail is OpenSSL's reason),
    #: ``"sentinel error"`` (a Sentinel master: no sentinel answered, none knows the service, or
    #: the server named is not a master), ``"error reply"``,
    #: ``"protocol error"``, ``"restarted recently"``, ``"cooling down"`` (not asked: the master
    #: timed out or refused a connection recently, see ``Redlock(cooldown=...)``; counts as "no"),
    #: ``"pending"`` (had not answered when the round returned and its answer could not be read
    #: in time; rare: the outcomes are completed before they are shown).
    outcome: str
    #: The server's error message or the OS error, when there was one.
    detail: Optional[str] = None

    def __str__(self) -> str:
        if self.detail:
            return f"{self.master}: {self.outcome} ({self.detail})"
        return f"{self.master}: {self.outcome}"


class LockError(Exception):
    """Base class of every error about a lock.

    ``name`` is the lock's name; ``outcomes`` the per-master outcomes of the round that failed
    (an empty tuple when the error did not come from the masters).
    """

    def __init__(
        self,
        message: str,
        name: Optional[str | bytes] = None,
        outcomes: Sequence[MasterOutcome] = (),
    ) -> None:
        self.name = name
        self.outcomes: Tuple[MasterOutcome, ...] = tuple(outcomes)
        if self.outcomes:
            message = f"{message}; masters: " + ", ".join(str(o) for o in self.outcomes)
        super().__init__(message)


class LockNotAcquiredError(LockError):
    """The lock could not be acquired (a quorum said no, or it timed out) where the caller required it."""


class QuorumUnreachableError(LockNotAcquiredError):
    """A waiting acquisition gave up because too many masters could not be reached for a quorum.

    Raised by a blocking ``acquire()`` (and a ``with`` block) when, for ``unreachable_timeout``
    seconds in a row (a :class:`fastredlock.Redlock` option, default 5), every attempt found so
    many masters down (connection refused or broken, a TLS or Sentinel failure, no answer in time,
    cooling down) that no quorum was possible: down is not held, so it does not wait for ever.
    ``unreachable`` names those masters (the message too): answers of the last attempt still due
    when it was decided are waited for first, up to their deadlines, so each master that failed is
    named; a master that answered, whatever it said, is not. A lock held by someone else never
    raises it: the acquisition waits for it as ``threading.Lock`` does.
    """

    def __init__(
        self,
        message: str,
        name: Optional[str | bytes] = None,
        outcomes: Sequence[MasterOutcome] = (),
        unreachable: Sequence[str] = (),
    ) -> None:
        #: The masters that could not be reached in the last attempt, as configured (its answers
        #: still due when it was decided were waited for, up to their deadlines).
        self.unreachable: Tuple[str, ...] = tuple(unreachable)
        super().__init__(message, name, outcomes)


class ScriptsRefusedError(LockError):
    """The masters refuse scripts to this client's user (an ACL without ``@scripting``, a server
    without Lua, or the client's ``scripts=False``) and the operation needs one: a fenced lock,
    the lock family (RLock, RWLock, semaphores), a ``signal=`` release; or a master has neither
    scripts nor a native owner-checked delete (``DELIFEQ``, ``DELEX ... IFEQ``), so the client
    does not acquire there (it could not release safely). Raised at once, before anything is
    taken; the message names the missing right."""


class LockNotOwnedError(LockError):
    """The lock is no longer held by this handle: it expired, was lost, or was taken by another client."""


class LockLostError(LockNotOwnedError):
    """The holder can no longer prove it holds the lock: a renewal failed or its validity ran out.

    Raised by :meth:`Lock.check` and at the exit of a ``with`` block whose lock was lost while the
    body ran (Chubby's "jeopardy"): the body's work may have overlapped with another holder.
    """
