"""The Redlock algorithm above one round (DESIGN §1): what a client decides once a round is over.

A round (:mod:`.session`) tells what each master answered and whether a quorum did so in time
(``Round.ok``, ``Round.valid_until``). The front-ends then follow these rules, and only these:

- **acquire**: one round of ``SET NX PX`` on every master. Held iff ``Round.ok``. Otherwise the key
  may have landed on masters that answered anything but a clear "no" (:func:`may_hold`): release
  there, behind the SET on the same connection, before sleeping and trying again: quietly (no turn
  given, nobody woken: it never held the lock) and not awaited. :func:`left_behind` (one round)
  and :func:`left_behind_of` (a batch's) say when; every driver and plan asks them.
- **fenced acquire**: the first round sets the key and reads each master's counter; the fence is one
  more than the largest (:func:`fence_of`); the second round writes it back owner-checked. Held
  iff both rounds reached a quorum and the first round's validity has not run out
  (:func:`fenced_held`); else clean up as for an acquire.
- **extend**: held on iff the round is ok; otherwise the lock is *lost*: release everywhere.
- **renewal** (the watchdog): renewed; or retried while a quorum may still hold the key and the
  validity lasts; or lost (:func:`renewal_verdict`).
- **releases written without waiting** (riding ahead of acquisitions in a shared round): read their
  answers until each is decided, a quorum confirmed it or can no longer (:func:`release_decided`).
- **inspect**: one round of three reads per master, ``GET key``, ``PTTL key``, ``GET fence_key``
  (:func:`inspect_args`, written back to back: the master runs them one after the other). Each
  master's answer is read by :func:`read_view` and :func:`fence_value`; the lock's state, holder
  and how long it stays held by :func:`inspect_summary`. Nothing is written, nothing is taken.
"""
from .outcomes import (
    CONN_ERROR, ERROR_REPLY, NO, OK, PENDING, PROTOCOL_ERROR, SENTINEL_ERROR, SKIPPED, TIMEOUT, TLS_ERROR,
)
from .replies import refused_by_acl, scripts_refused
from .result import validity_ms

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


def left_behind(rnd):
    """Whether an acquisition's round failed but may have left its key on some master
    (:func:`may_hold`): it is then released quietly behind its SETs (the rule "acquire" above)."""
    return not rnd.ok and may_hold(rnd.outcomes)


def left_behind_of(rounds):
    """The indices of a batch's acquisition rounds that :func:`left_behind` says to release."""
    return [j for j in range(len(rounds)) if left_behind(rounds[j])]


def refused_for_scripts(rnd, quorum):
    """Whether round ``rnd`` missed its quorum because masters refuse scripts (or would not take
    a lock they could not release: :data:`~.replies.NO_SAFE_RELEASE`): so many said so that no
    quorum could have answered otherwise. Nothing was sent to them."""
    details = rnd.details
    if details is None:
        return False
    count = 0
    for detail in details:
        if scripts_refused(detail):
            count += 1
    return count > len(rnd.outcomes) - quorum


def answer_summary(outcomes, details):
    """How the masters that did not confirm a release answered, for its error: ``""`` when each
    answered yes or no; else how many did not answer, and how many answered with an error (those
    refused by the ACL said apart: a key pattern or a command the user lacks)."""
    silent = acl = errors = 0
    for idx in range(len(outcomes)):
        code = outcomes[idx]
        if code == OK or code == NO:
            continue
        if code == ERROR_REPLY:
            detail = details[idx] if details is not None else None
            if refused_by_acl(detail):
                acl += 1
            else:
                errors += 1
        else:
            silent += 1
    parts = []
    if acl:
        parts.append("%d master(s) refused it by the ACL (grant the user the keys and commands a release "
                     "touches: see the guide's ACL rules)" % acl)
    if errors:
        parts.append("%d master(s) answered with an error" % errors)
    if silent:
        parts.append("%d master(s) did not answer" % silent)
    if not parts:
        return ""
    return "; " + ", ".join(parts) + ", where the key may stay until its TTL"


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


#: How many commands (and result rows) an inspection sends per name.
INSPECT_ROWS = 3


def inspect_args(keys, fence_keys):
    """The commands of an inspection of ``keys`` (argument tuples, :data:`INSPECT_ROWS` per key,
    in reply order): ``GET key``, ``PTTL key``, ``GET fence_key``."""
    args = []
    for key, fkey in zip(keys, fence_keys):
        args.append((b"GET", key))
        args.append((b"PTTL", key))
        args.append((b"GET", fkey))
    return args


#: The states of a lock, as :func:`inspect_summary` tells them.
FREE, HELD, PARTIAL, UNKNOWN = "free", "held", "partial", "unknown"


def read_view(get_code, value, pttl_code, pttl):
    """One master's answer to an inspection's ``GET`` and ``PTTL`` of the lock key:
    ``(code, value, pttl_ms)``. ``OK``: the key holds ``value`` for ``pttl_ms`` more milliseconds
    (-1: it has no expiry); ``NO``: there is no such key (it may have expired between the two
    reads); any other code: the master's failure (the first of the two), and nothing is known."""
    if get_code != OK:
        return get_code, None, -2
    if pttl_code != OK:
        return pttl_code, None, -2
    if pttl < -1:  # PTTL -2: gone since the GET
        return NO, None, -2
    return OK, value, pttl


def fence_value(code, value):
    """The fence counter one master holds for the name (an int), or None (none, or no answer)."""
    if code != OK:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def inspect_summary(codes, values, pttls, quorum, elapsed, drift_factor):
    """What one inspection says of a lock, from each master's :func:`read_view`:
    ``(state, value, holders, validity_ms, remaining_ms)``.

    ``value`` is held on the most masters (``holders`` of them; None and 0 when no master holds
    the key). ``state``: :data:`HELD` when that is a quorum; else :data:`UNKNOWN` when the
    masters that did not answer could make it one; else :data:`PARTIAL` when some master holds
    the key; else :data:`FREE`.

    Held: a quorum keeps ``value`` (unless it is released or extended meanwhile) for at least
    ``validity_ms`` and at most ``remaining_ms`` after the round's end, as an acquisition's
    validity is computed: the quorum-th longest PTTL of those masters, less the round's duration
    and the drift allowance for the first, plus the drift allowance for the second; -1.0 for
    both when a quorum holds it without expiry. Not held: 0.0 for both.
    """
    n = len(codes)
    best = None
    holders = 0
    silent = 0
    some = False
    for i in range(n):
        code = codes[i]
        if code == OK:
            some = True
            count = 0
            for j in range(n):
                if codes[j] == OK and values[j] == values[i]:
                    count += 1
            if count > holders:
                best, holders = values[i], count
        elif code != NO:
            silent += 1
    if holders < quorum:
        state = UNKNOWN if holders + silent >= quorum else PARTIAL if some else FREE
        return state, best, holders, 0.0, 0.0
    forever = 0  # masters that hold it without expiry: they outlast every other
    finite = []
    for i in range(n):
        if codes[i] == OK and values[i] == best:
            if pttls[i] < 0:
                forever += 1
            else:
                finite.append(pttls[i])
    if forever >= quorum:
        return HELD, best, holders, -1.0, -1.0
    finite.sort(reverse=True)
    ttl = finite[quorum - 1 - forever]
    low = validity_ms(ttl, elapsed, drift_factor)
    drift = ttl - validity_ms(ttl, 0.0, drift_factor)
    return HELD, best, holders, (low if low > 0.0 else 0.0), ttl + drift
