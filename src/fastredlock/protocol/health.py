"""Master health: per-master counters, and the cool-down of a master that timed out or refused.

One :class:`Health` is shared by every core of a client, so a master that one thread found down is
skipped by all of them. A master that timed out, or refused (or failed) a connection, starts a
cool-down of ``cooldown`` seconds, doubled at each failure in a row up to ``max_cooldown``; a reply
in time ends it. While a master cools down, acquisitions skip it (outcome ``SKIPPED``, counted as
"no" without waiting) and other rounds do not wait for it; once the cool-down has passed the next
round probes it again. ``cooldown=0`` keeps the counters but never skips a master.
"""
from array import array

from .outcomes import C_REPLIES, C_TIMED, C_TIMEOUTS, COUNTERS

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False

#: Default first cool-down of a master that timed out or refused a connection, seconds.
COOLDOWN = 0.1
#: Default longest cool-down, seconds.
MAX_COOLDOWN = 5.0
#: A master's mode in a round: asked normally; cooling down after a refused or failed connection
#: (releases still try it: a refusal costs no waiting); cooling down after a timeout.
HEALTHY = 0
REFUSED = 1
TIMED_OUT = 2

_NCOUNTERS = len(COUNTERS)
# module-level copies, C ints when compiled (health.pxd)
_C_REPLIES = C_REPLIES
_C_TIMED = C_TIMED
_C_TIMEOUTS = C_TIMEOUTS


class Health:
    """Per-master health and counters; see the module docstring.

    Thread-safe: compiled, every method runs under the GIL without releasing it; interpreted, a
    lock made by ``new_lock`` (the caller's ``threading.Lock``: the protocol imports no thread
    module) guards the read-modify-write updates; without one, a single thread must use it.
    """

    def __init__(self, n, cooldown=0.0, max_cooldown=MAX_COOLDOWN, new_lock=None):
        self.n = n
        self.cooldown = float(cooldown)
        self.max_cooldown = max(float(max_cooldown), self.cooldown)
        #: How many masters have a cool-down set (possibly passed, until a reply ends it).
        self.n_cooling = 0
        self._new_lock = None if _COMPILED else new_lock
        self._lock = None if self._new_lock is None else self._new_lock()
        # flat arrays: compiled, they are C arrays (typed memoryviews, see health.pxd)
        self._until = array("d", [0.0]) * n
        self._strikes = array("q", [0]) * n
        self._timed_out = array("b", [0]) * n
        self._why = [None] * n
        self._last = [None] * n
        self._counts = array("q", [0]) * (n * _NCOUNTERS)
        self._lat_sum = array("d", [0.0]) * n
        self._lat_max = array("d", [0.0]) * n

    def after_fork(self):
        """In a fork child: a lock held by a parent thread at the fork would never be released."""
        if self._new_lock is not None:
            self._lock = self._new_lock()

    def mode(self, i, now):
        """Master ``i``'s mode at ``now``: :data:`HEALTHY`, :data:`REFUSED` or :data:`TIMED_OUT`."""
        if self._until[i] > now:
            return TIMED_OUT if self._timed_out[i] else REFUSED
        return HEALTHY

    def modes(self, now):
        """Every master's mode at ``now``, or None when no master has a cool-down set."""
        if not self.n_cooling:
            return None
        return [self.mode(i, now) for i in range(self.n)]

    def why(self, i):
        """Why master ``i`` is skipped: the detail of its ``SKIPPED`` outcome."""
        return self._why[i] or "cooling down"

    def answered(self, i):
        """Master ``i`` sent a reply in time: count it, and end its cool-down."""
        if self._lock is None:  # (compiled, always: the GIL guards it; a C call, the body inlined)
            self._answered(i)
        else:
            self._locked(i, False, 0.0)

    def _answered(self, i):
        self._counts[i * _NCOUNTERS + _C_REPLIES] += 1
        if self._strikes[i]:
            self._strikes[i] = 0
            self._why[i] = None
            if self._until[i] != 0.0:
                self._until[i] = 0.0
                self.n_cooling -= 1

    def timed(self, i, latency):
        """Master ``i`` answered all of a round's commands ``latency`` seconds after it began."""
        if self._lock is None:  # (compiled, always: see answered)
            self._timed(i, latency)
        else:
            self._locked(i, True, latency)

    def answered_timed(self, i, latency):
        """:meth:`answered`, then :meth:`timed`: master ``i``'s reply to a round's last command came
        ``latency`` seconds after the round began (one call for the reply read last)."""
        if self._lock is None:  # (compiled, always: see answered)
            self._answered(i)
            self._timed(i, latency)
        else:
            self._locked(i, False, 0.0)
            self._locked(i, True, latency)

    def _locked(self, i, timed, latency):
        """:meth:`answered` (or :meth:`timed`, with ``latency``) under the lock (interpreted; kept
        out of the two so that compiled they stay small C functions)."""
        with self._lock:  # (not acquire() then try: a signal between the two would leave it held)
            if timed:
                self._timed(i, latency)
            else:
                self._answered(i)

    def _timed(self, i, latency):
        self._counts[i * _NCOUNTERS + _C_TIMED] += 1
        self._lat_sum[i] += latency
        if latency > self._lat_max[i]:
            self._lat_max[i] = latency

    def count(self, i, counter):
        """Count one event of ``counter`` (an index of :data:`~.outcomes.COUNTERS`)."""
        lock = self._lock
        if lock is None:
            self._count(i, counter)
            return
        with lock:  # (not acquire() then try: a signal between the two would leave it held)
            self._count(i, counter)

    def _count(self, i, counter):
        self._counts[i * _NCOUNTERS + counter] += 1

    def failed(self, i, counter, what, now, strike):
        """Master ``i`` failed (``counter``, described by ``what``); ``strike``: start a cool-down."""
        lock = self._lock
        if lock is None:
            self._failed(i, counter, what, now, strike)
            return
        with lock:  # (not acquire() then try: a signal between the two would leave it held)
            self._failed(i, counter, what, now, strike)

    def _failed(self, i, counter, what, now, strike):
        self._counts[i * _NCOUNTERS + counter] += 1
        self._last[i] = what
        if not strike or self._until[i] > now:
            return  # not a health failure, or already cooling down: one failure per cool-down
        self._strikes[i] += 1
        if self.cooldown <= 0.0:
            return
        strikes = self._strikes[i]
        pause = self.cooldown * 2.0 ** (strikes - 1 if strikes < 63 else 62)
        if pause > self.max_cooldown:
            pause = self.max_cooldown
        if self._until[i] == 0.0:
            self.n_cooling += 1
        self._until[i] = now + pause
        self._timed_out[i] = 1 if counter == _C_TIMEOUTS else 0
        self._why[i] = "cooling down after %d failure%s in a row (last: %s)" % (
            strikes, "s" if strikes > 1 else "", what)

    def snapshot(self, now):
        """Per master: the counters, mean and max latency, cool-down left, failures in a row, last failure."""
        out = []
        for i in range(self.n):
            counts = [self._counts[i * _NCOUNTERS + c] for c in range(_NCOUNTERS)]
            timed = counts[_C_TIMED]
            until = self._until[i]
            out.append(tuple(counts) + (
                self._lat_sum[i] / timed if timed else 0.0,
                self._lat_max[i],
                until - now if until > now else 0.0,
                self._strikes[i],
                self._last[i],
            ))
        return out
