"""The watchdog's decisions: which watched locks are due, and what a renewal round means for each.

Not a thread or timer per lock: every tick, the locks that are due are renewed together, one
pipelined round (``extend_many``) for all of them. A lock is renewed about every third of its TTL,
until it is released or its ``max_hold`` has passed. A renewal that cannot reach a quorum is retried
while the lock still has validity; once a quorum is impossible (the masters said the key is not
ours) or validity has run out, the lock is lost: released everywhere, ``on_lost`` called.
Locks with only ``on_lost`` (no auto-extend) are watched for their validity running out.

Shared by the sync watchdog thread (:mod:`fastredlock.sync.watchdog`) and the asyncio watchdog task
(:mod:`fastredlock.asyncio.watchdog`); each keeps only its own waiting.
"""
from __future__ import annotations

import logging
from time import monotonic
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Tuple

from ..protocol.plans import LOST, RENEWED, RETRY, renewal_verdict  # noqa: F401 (LOST, RETRY: the verdicts)

if TYPE_CHECKING:  # type names only
    from .lock import LockBase as Lock  # either front-end's handle

log = logging.getLogger("fastredlock")

#: Renew when this fraction of the TTL has passed since the last successful renewal.
RENEW_FRACTION = 1.0 / 3.0
#: How long the thread waits with nothing to watch before it exits.
IDLE_EXIT = 5.0


class Watched:
    """One watched lock: the watchdogs keep one per lock (by ``id(lock)``); see :func:`entry_of`."""

    __slots__ = ("lock", "due", "stop")

    def __init__(self, lock: "Lock", due: float, stop: float) -> None:
        #: The handle.
        self.lock = lock
        #: When to look at it next (monotonic): its next renewal, or when its validity ends.
        self.due = due
        #: When renewal stops (``max_hold`` after its acquisition; infinity without one).
        self.stop = stop


class Renewal(NamedTuple):
    """One lock to renew in a tick (see :func:`triage`): its entry and what the round sends."""

    entry: Watched
    token: bytes
    ttl_ms: int
    #: The executor's carrier of the acquisition (the round goes through it while it carries).
    carrier: Any


# --- the decisions, shared with the asyncio watchdog (each side keeps only its own waiting) -------
def entry_of(lock: "Lock") -> Watched:
    """A freshly acquired lock's watch entry."""
    _token, valid_until, acquired_at, _ttl_ms, _carrier = lock.watch_info()
    due = monotonic() + lock.ttl * RENEW_FRACTION if lock.auto_extend else valid_until
    stop = acquired_at + lock.max_hold if lock.max_hold is not None else float("inf")
    return Watched(lock, due, stop)


def triage(due: List[Watched], locks: Dict[int, Watched]) -> Tuple[List[Renewal], List["Lock"]]:
    """Sort the due entries: ``(to renew, lost)``. To renew: the auto-extended locks within their
    ``max_hold``; lost: validity ran out before a renewal. Entries of released locks leave
    ``locks``; watch-only ones wake next when validity ends."""
    now = monotonic()
    renew: List[Renewal] = []
    lost: List["Lock"] = []
    for entry in due:
        lock = entry.lock
        token, valid_until, _acquired_at, ttl_ms, carrier = lock.watch_info()
        if token is None:
            locks.pop(id(lock), None)
        elif now >= valid_until:
            lost.append(lock)  # validity ran out before it could be renewed
        else:
            renewing = lock.auto_extend and now < entry.stop
            if renewing and _owner_gone(lock):
                # A reentrant lock whose owner ended holding it: nobody can release it any more,
                # so it is not renewed either (it expires; on_lost when its validity ends).
                log.warning("fastredlock: %r: its owner ended without releasing it; no longer renewed", lock)
                entry.stop = now
                renewing = False
            if renewing:
                renew.append(Renewal(entry, token, ttl_ms, carrier))
            else:
                entry.due = valid_until  # watch only: wake when validity ends
    return renew, lost


def _owner_gone(lock: "Lock") -> bool:
    """Whether ``lock`` is a reentrant hold whose owner ended (see ``RLock``'s ``owner_gone``)."""
    gone = getattr(lock, "owner_gone", None)
    return gone is not None and gone()


def renewal_args(items: List[Renewal]) -> Tuple[List[bytes], List[bytes], List[int]]:
    """The keys, tokens and TTLs of one ``extend_many`` round for :func:`triage`'s renewals."""
    return [item.entry.lock.key for item in items], [item.token for item in items], [item.ttl_ms for item in items]


def after_renewal(items: List[Renewal], rounds: List[Any], locks: Dict[int, Watched], quorum: int,
                  retry_delay: float) -> List["Lock"]:
    """Take the rounds of a renewal: each lock's next look (renewed: a third of its TTL after the
    round began; retry: soon, within validity); return the locks that are now lost. Entries
    released (or acquired again) while the round was in flight are left alone."""
    lost = []
    for item, rnd in zip(items, rounds):
        entry = item.entry
        token = item.token
        lock = entry.lock
        if locks.get(id(lock)) is not entry:
            continue  # released while the round was in flight
        valid_until = lock.renewed(token, rnd)
        if valid_until is None:
            continue  # released (and maybe acquired again) while the round was in flight
        now = monotonic()
        verdict = renewal_verdict(rnd, quorum, valid_until, now)
        if verdict == RENEWED:
            entry.due = rnd.started + lock.ttl * RENEW_FRACTION
        elif verdict == RETRY:
            entry.due = min(now + retry_delay, valid_until)
        else:
            lost.append(lock)
    return lost
