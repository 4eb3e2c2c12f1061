"""The result of one round for one key: :class:`Round`, validity computed once, stragglers filled in.

A round may return before every master answered (early decision at quorum); the outcome of a
master that had not answered is ``PENDING`` until its reply is read (by a later round on that
connection, or by ``settle``), when :func:`set_outcome` fills it in.
"""
try:
    import cython  # (compiled: set_outcome fills in an unshared outcomes tuple in place; Round's freelist)
except ImportError:  # pragma: no cover - a pure install without Cython
    from .nocython import cython

from .outcomes import NO, OK, PENDING

# (decide: the codes as objects)
_OK, _NO, _PENDING = OK, NO, PENDING


# (compiled: freed Rounds are kept for reuse, no allocation per round. The decorator is read only
# here: Cython leaves out a freelist declared in result.pxd, and refuses it without ``cclass``.)
@cython.freelist(8)
@cython.cclass
class Round:
    """The result of one operation on one key: the decision, the timing and each master's answer.

    ``ok``: for acquire/extend, a quorum answered OK and validity is still positive; for release,
    a quorum still held the token. ``validity`` is in seconds, measured from ``started`` (the
    monotonic time taken before the first write), already reduced by elapsed time and drift;
    :attr:`valid_until` is when it ends. ``outcomes`` holds one code of
    :mod:`fastredlock.protocol.outcomes` per master; ``details`` is ``None`` or a tuple of
    per-master messages (``None`` where there is nothing to say); ``values`` is ``None`` or, for a
    fenced acquisition, the fence counter each master returned (``None`` where it did not say OK).
    """

    def __init__(self, ok, successes, validity, elapsed, started, outcomes, details=None, values=None):
        self.ok = ok
        self.successes = successes
        self.validity = validity
        self.elapsed = elapsed
        self.started = started
        self.outcomes = tuple(outcomes)
        self.details = details
        self.values = values

    @property
    def valid_until(self):
        """Monotonic time when the validity ends: ``started + elapsed + validity`` (computed here only)."""
        return self.started + self.elapsed + self.validity

    def __repr__(self):
        return "Round(ok=%s, successes=%d, validity=%.4f, elapsed=%.6f, outcomes=%r, details=%r, values=%r)" % (
            bool(self.ok), self.successes, self.validity, self.elapsed, self.outcomes, self.details, self.values)


def validity_ms(ttl_ms, elapsed, drift_factor):
    """What is left of a TTL after a round that took ``elapsed`` seconds: ttl - elapsed - drift.

    The drift allowance is ``ttl * drift_factor + 2 ms`` (DESIGN §1).
    """
    return ttl_ms - elapsed * 1000.0 - (ttl_ms * drift_factor + 2.0)


def decide(outcomes, ttl_ms, elapsed, started, quorum, drift_factor, details, values):
    """The :class:`Round` of one key: quorum and validity (``ttl_ms`` 0: a release, no validity)."""
    successes = 0
    for code in outcomes:
        # (the usual codes are the interpreter's small ints: told apart by identity, compiled
        # without converting each; anything else is compared by value)
        if code is _OK or (code is not _NO and code is not _PENDING and code == OK):
            successes += 1
    rnd = Round.__new__(Round)  # no __init__: every field is set here
    if ttl_ms:
        left = validity_ms(ttl_ms, elapsed, drift_factor)
        rnd.ok = successes >= quorum and left > 0
        rnd.validity = left / 1000.0
    else:
        rnd.ok = successes >= quorum
        rnd.validity = 0.0
    rnd.successes = successes
    rnd.elapsed = elapsed
    rnd.started = started
    rnd.outcomes = outcomes
    rnd.details = details
    rnd.values = values
    return rnd


def set_outcome(rnd, i, code, detail, value):
    """Fill in master ``i``'s PENDING outcome of a round that already returned."""
    outcomes = rnd.outcomes
    if outcomes[i] != PENDING:
        return
    outcomes = None  # (compiled: the Round's reference is then the only one, if nobody else holds it)
    if not (cython.compiled and _put_sole(rnd, i, code)):
        # A tuple someone else may hold (a caller kept ``rnd.outcomes``) is never changed: a new one.
        items = list(rnd.outcomes)
        items[i] = code
        rnd.outcomes = tuple(items)
    if code == OK:
        rnd.successes += 1
    if detail is not None:
        items = list(rnd.details) if rnd.details is not None else [None] * len(rnd.outcomes)
        items[i] = detail
        rnd.details = tuple(items)
    if value is not None and rnd.values is not None:
        items = list(rnd.values)
        items[i] = value
        rnd.values = tuple(items)


def settle_sink(sink, i, code, detail, value):
    """Fill in master ``i``'s outcome of an owed reply's round, or rounds (a batch release's one
    reply answers for a list of rounds); ``None``: nobody waits for it."""
    if sink is None:
        return
    if isinstance(sink, list):
        for rnd in sink:
            set_outcome(rnd, i, code, detail, value)
    else:
        set_outcome(sink, i, code, detail, value)
