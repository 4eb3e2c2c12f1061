"""The Redlock algorithm above one round (DESIGN §1): what a client decides once a round is over.

A round (:mod:`.session`) tells what each master answered and whether a quorum did so in time
(``Round.ok``, ``Round.valid_until``). The front-ends then follow these rules, and only these:

- **acquire**: one round of ``SET NX PX`` on every master. Held iff ``Round.ok``. Otherwise the key
  may have landed on masters that answered anything but a clear "no" (:func:`may_hold`): release
  there, behind the SET on the same connection, before sleeping and trying again.
- **fenced acquire**: the first round sets the key and reads each master's counter; the fence is one
  more than the largest (:func:`fence_of`); the second round writes it back owner-checked. Held
  iff both rounds reached a quorum and the first round's validity has not run out
  (:func:`fenced_held`); else clean up as for an acquire.
- **extend**: held on iff the round is ok; otherwise the lock is *lost*: release everywhere.
- **renewal** (the watchdog): renewed; or retried while a quorum may still hold the key and the
  validity lasts; or lost (:func:`renewal_verdict`).
- **releases written without waiting** (riding ahead of acquisitions in a shared round): read their
  answers until each is decided, a quorum confirmed it or can no longer (:func:`release_decided`).
"""
from .outcomes import (
    CONN_ERROR, ERROR_REPLY, NO, PENDING, PROTOCOL_ERROR, SENTINEL_ERROR, SKIPPED, TIMEOUT, TLS_ERROR,
)

#: The verdicts of :func:`renewal_verdict`.
RENEWED, RETRY, LOST = "renewed", "retry", "lost"
#: Outcomes after which a failed renewal is worth retrying (the master may still hold the key).
TRANSIENT = frozenset({TIMEOUT, CONN_ERROR, ERROR_REPLY, PROTOCOL_ERROR, PENDING, SKIPPED, TLS_ERROR,
                       SENTINEL_ERROR})


def may_hold(outcomes):
    """Whether a failed acquisition may have left its key somewhere: any master that answered
    anything but a clear "no", or was not skipped (an OK outside a quorum, an untrusted OK, a SET
    not answered yet or after its timeout)."""
    for code in outcomes:
        if code != NO and code != SKIPPED:
            return True
    return False


def fence_of(values):
    """The fence of a fenced acquisition: one more than the largest counter a master returned."""
    return max([v for v in values if v is not None]) + 1


def fenced_held(second_ok, valid_until, now):
    """Whether a fenced acquisition holds: the fence write reached a quorum and the validity that
    runs from before the first round has not run out."""
    return bool(second_ok) and now < valid_until


def renewal_verdict(rnd, quorum, valid_until, now):
    """What a renewal round means for its lock: :data:`RENEWED`; :data:`RETRY` (some masters did
    not answer, so a quorum may still hold the key, and the validity has not run out: try again
    soon); else :data:`LOST`."""
    if rnd.ok:
        return RENEWED
    maybe = rnd.successes
    for code in rnd.outcomes:
        if code in TRANSIENT:
            maybe += 1
    if maybe >= quorum and now < valid_until:
        return RETRY
    return LOST


def release_decided(rounds, quorum, n):
    """Whether every release round is decided: a quorum confirmed it, or so many masters answered
    otherwise that a quorum is impossible (the early decision of an acquisition, for releases)."""
    limit = n - quorum + 1
    for rnd in rounds:
        if rnd.successes < quorum:
            if n - rnd.outcomes.count(PENDING) - rnd.successes < limit:
                return False
    return True
