cimport cython
from .resp cimport ReplyGuard
from .voting cimport MasterClock

cdef double _STALE_AFTER      # STALE_AFTER as a C double
cdef Py_ssize_t _MAX_OWED     # MAX_OWED as a C integer

@cython.final  # (its freelist is declared in link.py: Cython leaves one declared here out)
cdef class Owed:
    cdef public int kind          # how the reply is read (a KIND_* of .replies): its command's
    cdef public double deadline   # monotonic seconds; past it, the reply no longer decides (TIMEOUT)
    cdef public object sink       # the Round or list of Rounds its outcome fills in; None: already final
    cdef public bint retried      # the command was sent again on a reopened connection ("no" may be ours)
    cdef public bint expired      # the deadline passed: outcome TIMEOUT, the reply is read and dropped
    cdef public object key        # a native release's key (its waiters' work may follow), else None

@cython.final
cdef class Link:
    cdef public Py_ssize_t index       # its position in Session.links (and the twin's per-link arrays)
    cdef public Py_ssize_t master      # the vote it casts: index, or a cluster node's cluster (< Session.n)
    cdef public list cmds              # a node's commands this round (round indices, -1 ASKING); None: all
    cdef public object spec            # the MasterSpec it connects to (immutable)
    cdef public bytes hello            # the handshake written first on each new connection
    cdef public bytes preload          # the SCRIPT LOADs written after it, or b"" (no preload)
    cdef public Py_ssize_t preloads    # their replies still to come (>= 0; dropped unread)
    cdef public bytes probe            # the native-command probes written after them, or b""
    cdef public Py_ssize_t probes      # their answers still to come (>= 0)
    cdef public int caps               # CAP_* bits the master runs natively (0 on a new connection)
    cdef public int kind               # how this round's replies here are read (the round's, or a native form's)
    cdef public int native             # the capability this round's commands went in as (0: the round's own)
    cdef public tuple hello_kinds      # how each handshake reply is checked, in order
    cdef public MasterClock clock      # the master's run id and uptime (restart-aware voting)
    cdef public ReplyGuard guard       # checks the raw bytes of replies before they are parsed
    cdef public list owed              # Owed replies to rounds that returned, in arrival order
    cdef public bint open              # a socket exists (connecting or connected)
    cdef public bint connecting        # the twin's non-blocking connect (and TLS handshake) is in progress
    cdef public bint opening           # asks the twin to open a new socket (then write out)
    cdef public bint closing           # asks the twin to close the socket
    cdef public bint polled            # the round (or settle) waits on this connection
    cdef public bytes out              # bytes the twin must write as soon as the socket takes them
    cdef public Py_ssize_t head        # this round's next unanswered command (head <= end)
    cdef public Py_ssize_t end         # ... and the end of them: head..end-1, then requeued
    cdef public list requeued          # commands sent again (as EVAL after NOSCRIPT), answered after end; None: none
    cdef public int skip               # the next handshake reply's index in hello_kinds; -1: none pending
    cdef public bytes payload          # this round's commands as written here (EVALSHA, EVAL or native)
    cdef public double deadline        # monotonic seconds by which this round's replies must have come
    cdef public bint reused            # the round's commands went out on a connection opened earlier
    cdef public bint retried           # ... which broke, and they were sent again on a new one
    cdef public bint got_data          # part of a reply to this round's commands arrived
    cdef public Py_ssize_t fallback_sent  # EVAL fallbacks sent this round (<= the round's k)
    cdef public bint waited            # the round waits for this master's replies
    cdef public bint best_effort       # cooling down after a timeout: written if it takes it, never waited for
    cdef public bint use_eval          # an owed reply said NOSCRIPT: the next script round sends EVAL here
    cdef public bint loaded            # every SCRIPT LOAD of this connection answered, none refused
    cdef public bint load_failed       # one was refused (loaded stays False)
    cdef public bint half              # the first reply of a native release's pair was read
    cdef public object half_reply      # ... that reply (or None)
    cdef public object half_error      # ... or its error message (or None)
    cdef public list waking            # this round's commands requeued as the waiters' work; None: none
    cdef public list after             # waiters' work found by owed replies in a round, written at its end
    cdef public bint gated             # the commands wait for the handshake's, SCRIPT LOADs' and probes' answers
    cdef public bint noscripts         # the master refuses scripts to this user (or scripts_off)
    cdef public object noscripts_why   # how it said so (the error reply), or None
    cdef public bint scripts_off       # the client sends no scripts (scripts=False), on every connection

    cpdef bint unsent(self) noexcept     # (none of these three can raise: no error check after each call)
    cpdef bint expecting(self) noexcept
    cpdef bint waiting(self) noexcept
    cpdef expect(self, Py_ssize_t k)
    cpdef Py_ssize_t next_cmd(self) except -1
    cpdef Py_ssize_t pop_cmd(self) except -1
    cpdef requeue(self, Py_ssize_t j)
    cpdef request_open(self, bytes first)
    cpdef bytes preloaded(self, bytes first)
    cpdef bint ungated(self)
    cpdef Py_ssize_t probes_written(self) except -1
    cdef _forget_pairs(self)
    cpdef request_close(self)
    @cython.locals(entry=Owed, count=Py_ssize_t)
    cpdef Py_ssize_t pending(self) except -1
    @cython.locals(entry=Owed, first=double)
    cpdef double first_owed_deadline(self)
    @cython.locals(entry=Owed)
    cpdef bint overdue(self, double now)
    @cython.locals(entry=Owed, struck=bint)
    cpdef bint expire(self, double now, bint everything)
    @cython.locals(owed=list, entry=Owed)
    cpdef bint stale(self, double now)
    @cython.locals(entry=Owed)
    cpdef drop_owed(self, int code, object detail)
    @cython.locals(entry=Owed)
    cpdef owe(self, int kind, double deadline, object sink, bint expired)


cdef inline int _head_kind(Link link) noexcept:
    """The kind of ``link``'s next reply where it is the usual one, which ``Session.answer_head``
    settles: this round's command at the head of the queue (none requeued, no node commands), past
    the handshake, SCRIPT LOADs and probes, nothing owed, not the second reply of a native release's
    pair. Else -1: ``Session._next_kind`` says. (The C core's fast parser only; compiled only.)"""
    if (link.head < link.end and link.cmds is None and link.skip < 0 and link.preloads == 0
            and link.probes == 0 and not link.half and not link.owed):
        return link.kind
    return -1
