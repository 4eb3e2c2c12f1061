"""One master's connection as the protocol sees it: what it still owes, what this round expects.

A :class:`Link` holds no socket. The I/O twin owns the socket and obeys the link's requests:
``opening`` (open a new connection, then write ``out``), ``closing`` (close it), ``out`` (bytes to
write as soon as the socket takes them), ``polled`` (wait for it in this round); and it reports
back ``connecting`` (a non-blocking connect is in progress).

**Owed replies.** A connection keeps, in order, the replies it still owes to rounds that already
returned (:class:`Owed`). The next round on that connection writes its commands behind them and
reads them first, so a late reply is always matched with the request it answers, never read as
the answer to a later one; a release is therefore written on the same connection, after the SET it
undoes. A reply still missing after its deadline makes its outcome ``TIMEOUT`` (the reply is read
and dropped when it comes). A connection is closed when it owes more than :data:`MAX_OWED`
replies or its oldest owed reply is :data:`STALE_AFTER` seconds overdue.
"""
try:
    import cython  # (compiled: Owed's freelist)
except ImportError:  # pragma: no cover - a pure install without Cython
    from ._nocython import cython

from .handshake import PRELOAD, PRELOADED, PROBE, PROBES, SCRIPT_PROBE, handshake
from .outcomes import TIMEOUT
from .resp import ReplyGuard
from .result import settle_sink
from .voting import MasterClock

#: A connection whose oldest owed reply is this many seconds past its deadline is closed.
STALE_AFTER = 1.0
#: A connection that owes more replies than this is closed (a master silent under a heavy load).
MAX_OWED = 4096
_STALE_AFTER = STALE_AFTER  # C copies when compiled
_MAX_OWED = MAX_OWED


# (compiled: freed entries are kept for reuse, no allocation per late reply. The decorator is read
# only here: Cython leaves out a freelist declared in link.pxd, and refuses it without ``cclass``.)
@cython.freelist(16)
@cython.cclass
class Owed:
    """A reply a connection still owes to a round that already returned."""

    def __init__(self, kind, deadline, sink, retried, expired):
        #: For a native release (KIND_NATIVE_DEL): its key (the waiters' work may follow); else None.
        self.key = None
        self.kind = kind
        self.deadline = deadline
        #: The Round (or list of Rounds) whose outcome for this master waits for the reply; None:
        #: the outcome is already final.
        self.sink = sink
        #: The command was sent again on a reopened connection (a "no" may be our own SET).
        self.retried = retried
        #: The deadline passed before the reply came: its outcome is TIMEOUT, the reply is dropped.
        self.expired = expired


class Link:
    """One master's connection state without the socket; see the module docstring."""

    def __init__(self, index, spec, restart_aware, preload=False):
        self.index = index
        #: The master whose vote this link casts: ``index``, or for a cluster's node its cluster's.
        self.master = index
        #: A cluster node's commands this round (indices into the round's; -1: an ``ASKING``
        #: whose reply is dropped), in the order they were written; None: every command (a plain
        #: master). ``head``/``end``/``requeued`` then count positions in this list.
        self.cmds = None
        self.spec = spec
        self.hello, self.hello_kinds = handshake(spec, restart_aware)
        #: Written before a new connection's first commands (the scripts it loads), or b"".
        self.preload = PRELOAD if preload else b""
        #: Replies of those ``SCRIPT LOAD`` still to come (dropped unread).
        self.preloads = 0
        #: Every ``SCRIPT LOAD`` of this connection was answered, none refused: its ``EVALSHA``
        #: finds the scripts (unless the master's cache is flushed), so a round nobody waits for
        #: may send them too (see Session._start). ``load_failed``: one was refused.
        self.loaded = False
        self.load_failed = False
        #: Written after them: the probes of the native commands (:mod:`.handshake`), or b"" (not
        #: for a cluster's links: their commands go by slot, always as scripts).
        self.probe = PROBE + SCRIPT_PROBE if preload and spec.cluster is None else b""
        #: Answers to those probes still to come (each may add a capability).
        self.probes = 0
        #: What the master runs natively, for this connection's user (``CAP_*`` bits of
        #: :mod:`.handshake`; 0 until the probes answered, and on every new connection).
        self.caps = 0
        #: The kind this round's replies on this link are read as (:mod:`.replies`): the round's,
        #: or that of the native form it was sent instead.
        self.kind = 0
        #: The capability whose native form this round's commands went in (0: the round's own).
        self.native = 0
        self.clock = MasterClock()
        self.guard = ReplyGuard()
        #: Replies owed to rounds that already returned, in the order they will arrive.
        self.owed = []
        # --- requests to the I/O twin, and what it reports
        self.open = False          # a socket exists (connecting or connected)
        self.connecting = False    # set by the twin while a non-blocking connect is in progress
        self.opening = False       # open a new socket (then write ``out``)
        self.closing = False       # close the socket
        self.polled = False        # the round (or settle) waits on this connection
        self.out = b""             # bytes to write
        # --- this round
        # the commands still unanswered, in reply order: head..end-1, then the requeued ones
        # (a command answered NOSCRIPT goes to the back, as EVAL)
        self.head = 0
        self.end = 0
        self.requeued = None
        self.skip = -1             # index of the next handshake reply, -1 when none is pending
        self.payload = b""         # this round's commands (EVALSHA, or EVAL where NOSCRIPT cannot be handled)
        self.deadline = 0.0
        self.reused = False        # the round's commands went out on a connection opened earlier
        self.retried = False       # ... which broke, and they were sent again on a new one
        self.got_data = False      # part of a reply to this round's commands arrived
        self.fallback_sent = 0     # EVAL fallbacks sent after NOSCRIPT in this round
        self.waited = False        # the round waits for this master's replies
        self.best_effort = False   # cooling down after a timeout: written if it takes it, never waited for
        self.use_eval = False      # an owed reply said NOSCRIPT: the next script round sends EVAL here
        # --- native releases (two replies per command, see Session.reply) and scripts refused
        self.half = False          # the first reply of a native release's pair was read (kept below)
        self.half_reply = None
        self.half_error = None
        self.waking = None         # this round's commands requeued as the waiters' work (WAKE_AFTER), or None
        self.after = None          # waiters' work found by owed replies in a round: (command, Owed), written at its end
        #: The payload waits for the answers of the handshake, the SCRIPT LOADs and the probes (a
        #: new connection that probes): then it is chosen knowing what the master runs.
        self.gated = False
        #: This master refuses scripts to this connection's user (or the client sends none):
        #: ``noscripts_why`` says how (the error reply), for the errors that name the missing right.
        self.noscripts = False
        self.noscripts_why = None
        #: The client sends no scripts at all (``scripts=False``): set once, kept across connections.
        self.scripts_off = False

    def unsent(self):
        """Whether this round's commands are not all written yet (connecting, handshake, partial write)."""
        return bool(self.out) or self.skip >= 0 or self.connecting or self.gated

    def expecting(self):
        """Whether replies are still to be read on this connection (owed, or this round's)."""
        return bool(self.owed) or self.waiting() or self.preloads > 0 or self.probes > 0

    def waiting(self):
        """Whether this round's commands are not all answered yet."""
        return self.head < self.end or self.requeued is not None

    def expect(self, k):
        """This round sends ``k`` commands here (0: none)."""
        self.head = 0
        self.end = k
        self.requeued = None

    def next_cmd(self):
        """The command the next reply of this round answers (:meth:`waiting` must be true)."""
        return self.head if self.head < self.end else self.requeued[0]

    def pop_cmd(self):
        """The command the reply just read answers; it is no longer waited for."""
        if self.head < self.end:
            self.head += 1
            return self.head - 1
        j = self.requeued.pop(0)
        if not self.requeued:
            self.requeued = None
        return j

    def requeue(self, j):
        """Command ``j`` (just popped) is sent again behind the others: its answer comes last."""
        if self.requeued is None:
            self.requeued = [j]
        else:
            self.requeued.append(j)

    def request_open(self, first):
        """Ask the twin for a new connection; ``first`` is written once it is up (after the handshake)."""
        self.open = True
        self.opening = True
        self.connecting = False
        self.guard.reset()
        self.preloads = 0
        self.loaded = self.load_failed = False
        self.probes = 0
        self.caps = 0
        self._forget_pairs()
        self.noscripts = self.scripts_off
        self.noscripts_why = "the client option scripts=False" if self.scripts_off else None
        if self.probe:
            # Gated: the handshake, the SCRIPT LOADs and the probes go first, in one write; the
            # commands follow once all are answered, chosen knowing what the master runs for this
            # user (no acquisition where a lock could not be released; no script where refused).
            self.out = self.hello + self.preloaded(b"")
            self.skip = 0 if self.hello_kinds else -1
            self.gated = True
        elif self.hello_kinds:
            # The handshake goes first, alone: if AUTH, SELECT or INFO fails, no command of ours
            # may have run (on the wrong db, or without the checks restart-aware voting needs).
            self.out = self.hello
            self.skip = 0
        else:
            self.out = self.preloaded(first)
            self.skip = -1

    def preloaded(self, first):
        """``first`` behind the scripts a new connection loads and its probes (their replies are
        then awaited)."""
        if not self.preload and not self.probe:
            return first
        self.preloads = len(PRELOADED) if self.preload else 0
        self.probes = self.probes_written()
        return self.preload + self.probe + first

    def probes_written(self):
        """How many answers :attr:`probe` brings: the native probes, and the script probe behind
        them where it is written (:data:`~.handshake.SCRIPT_PROBE`)."""
        if not self.probe:
            return 0
        return PROBES + 1 if len(self.probe) > len(PROBE) else PROBES

    def ungated(self):
        """Whether a gated link has every answer it waited for (its commands may now go)."""
        return self.gated and self.skip < 0 and self.preloads == 0 and self.probes == 0

    def _forget_pairs(self):
        """A connection opens or closes: no half-read native release, no waiters' work to write."""
        self.half = False
        self.half_reply = None
        self.half_error = None
        self.waking = None
        self.after = None
        self.gated = False

    def request_close(self):
        """Ask the twin to close the socket (close only: a fork sibling may share it)."""
        if self.open:
            self.closing = True
        self.open = False
        self.opening = False
        self.connecting = False
        self.polled = False
        self.out = b""
        self.skip = -1
        self.preloads = 0
        self.loaded = False
        self.probes = 0
        self._forget_pairs()

    def pending(self):
        """How many owed replies would still fill in a PENDING outcome."""
        count = 0
        for entry in self.owed:
            if entry.sink is not None:
                count += 1
        return count

    def first_owed_deadline(self):
        """The earliest deadline of an owed reply that someone waits for, or -1.0."""
        first = -1.0
        for entry in self.owed:
            if entry.sink is not None and (first < 0.0 or entry.deadline < first):
                first = entry.deadline
        return first

    def overdue(self, now):
        """Whether an owed reply's deadline has passed (read what arrived, then :meth:`expire`)."""
        for entry in self.owed:
            if not entry.expired and entry.deadline <= now:
                return True
        return False

    def expire(self, now, everything):
        """Owed replies past their deadline (all of them: ``everything``) get outcome TIMEOUT and
        are dropped when they come; returns whether any was struck."""
        struck = False
        for entry in self.owed:
            if not entry.expired and (everything or entry.deadline <= now):
                entry.expired = True
                struck = True
                if entry.sink is not None:
                    settle_sink(entry.sink, self.master, TIMEOUT, None, None)
                    entry.sink = None
        return struck

    def stale(self, now):
        """Whether the connection must be closed: it owes too much, or for too long."""
        owed = self.owed
        if not owed:
            return False
        entry = owed[0]
        return len(owed) > _MAX_OWED or entry.deadline + _STALE_AFTER < now

    def drop_owed(self, code, detail):
        """Forget the owed replies (the connection is closing): PENDING outcomes become ``code``."""
        for entry in self.owed:
            if entry.sink is not None:
                settle_sink(entry.sink, self.master, code, detail, None)
        del self.owed[:]

    def owe(self, kind, deadline, sink, expired):
        """The reply to a command of this round is owed to a round that returned (or timed out)."""
        entry = Owed.__new__(Owed)  # (no __init__ call: cheaper compiled, the same interpreted)
        entry.key = None
        entry.kind = kind
        entry.deadline = deadline
        entry.sink = sink
        entry.retried = self.retried
        entry.expired = expired
        self.owed.append(entry)

