cimport cython
from cpython.object cimport PyObject
from .health cimport Health
from .link cimport Link, Owed
from .cluster cimport ClusterRouting, requeue_asking

# the outcome codes, counters and kinds used here: C ints when compiled (imported from the
# modules that define them)
cdef int C_CONNECT_ERRORS, C_CONNECTION_ERRORS, C_ERROR_REPLIES, C_LATE, C_PROTOCOL_ERRORS, C_SKIPPED
cdef int C_TIMEOUTS, CONN_ERROR, ERROR_REPLY, NO, OK, PENDING, PROTOCOL_ERROR, SKIPPED, TIMEOUT, TLS_ERROR
cdef int SENTINEL_ERROR, HELLO_ROLE
cdef int KIND_BITS, KIND_FENCED, KIND_READ, KIND_SCRIPT, KIND_SET, KIND_NATIVE_DEL, KIND_WAKE
cdef int CAP_DELEX, CAP_DELIFEQ
cdef int HEALTHY, TIMED_OUT

from .handshake cimport hello_reply, probe_answer, wake_after
cdef Py_ssize_t PROBES
cdef bytes PROBE
from .replies cimport bits, classify, is_acquisition, is_noscript, is_unsupported, refuses_scripts, unexpected, what
cdef str NO_SAFE_RELEASE, NO_SCRIPTS
from .result cimport decide, set_outcome, settle_sink

cdef extern from "Python.h":
    PyObject *_list_item "PyList_GET_ITEM"(PyObject *l, Py_ssize_t i)
    void _list_put "PyList_SET_ITEM"(PyObject *l, Py_ssize_t i, PyObject *v)
    PyObject *_tuple_item "PyTuple_GET_ITEM"(PyObject *t, Py_ssize_t i)
    Py_ssize_t _list_size "PyList_GET_SIZE"(PyObject *l)
    void _obj_incref "Py_INCREF"(PyObject *o)
    void _obj_decref "Py_DECREF"(PyObject *o)

cdef tuple _CODES  # the outcome codes' int objects, by code (0 .. len - 1)

cdef inline bint _put_code(list outcomes, Py_ssize_t idx, int code) noexcept:
    """``outcomes[idx] = code`` in place, without a lookup of the int or the list's checks (False:
    not done, out of those bounds; the caller assigns as Python does)."""
    cdef PyObject *new
    cdef PyObject *old
    if outcomes is None or idx < 0 or idx >= _list_size(<PyObject *>outcomes) or code < 0 \
            or code >= len(_CODES):
        return False
    new = _tuple_item(<PyObject *>_CODES, code)
    old = _list_item(<PyObject *>outcomes, idx)
    _obj_incref(new)
    _list_put(<PyObject *>outcomes, idx, new)
    _obj_decref(old)
    return True

cdef inline Py_ssize_t _cmd(Link link, Py_ssize_t p) except? -2
cdef inline bint _waits_for(Link link, bint decided) except -1

@cython.final
cdef class Session:
    cdef public list links              # one Link per master (index i), then cluster nodes' links (appended)
    cdef public Py_ssize_t n            # masters: the votes of a round (len(links) >= n)
    cdef public ClusterRouting routing  # the cluster masters' routing; None: no master is a cluster
    cdef public bint maps_stale         # some cluster's slot map may be due (the twin calls stale_routes)
    cdef public bint redirected         # a command went to another node link since the twin last looked
    cdef public bint preload            # new connections load the scripts and probe native commands first
    cdef public Py_ssize_t quorum       # n // 2 + 1
    cdef public double io_timeout       # seconds a round waits for a master after its first write
    cdef public double connect_timeout  # seconds more for a master whose connection opens in the round
    cdef public double drift_factor     # clock drift allowance, a fraction of the TTL (validity)
    cdef public bint restart_aware      # new connections read the master's run_id and uptime
    cdef public double restart_grace_ms  # an OK from a master up for less than this is UNTRUSTED (0: off)
    cdef public Health health           # the masters' health, shared by the client's sessions (n entries)
    cdef public bint early              # acquisitions return as soon as every key is decided
    cdef public bint in_round           # between begin() and finish()
    cdef public int left                # what the last round left to tidy: 1 owed replies, 2 a link asks for something
    # the round in progress (begin() sets them; between rounds they describe the last one)
    cdef public int kind                # how its replies are read (a KIND_* of .replies)
    cdef public Py_ssize_t k            # its commands (encoded back to back in payload)
    cdef public Py_ssize_t rows         # its keys: outcomes has rows * n entries, row-major by key
    cdef public bint wait               # it waits for answers (False: it only writes)
    cdef public bint acquisition        # kind is an acquisition's (restart-aware voting applies)
    cdef public bint early_now          # wait and early and acquisition: oks/bad/undecided are counted
    cdef public bint decided            # every key is decided (or nothing is waited for): wait no more
    cdef public double decided_at       # when it was decided (monotonic); -1.0: decided, not stamped yet
    cdef public double started          # monotonic time before the first write
    cdef public double io_deadline      # started + io_timeout
    cdef public double swept            # the deadline a read of what had arrived already met (see pace)
    cdef public bytes payload           # the k commands, encoded back to back
    cdef public object fallbacks        # their EVAL forms (a list of k bytes), None until asked for
    cdef public object make_fallbacks   # returns those forms; None: the commands are no scripts
    cdef public object native           # the round's native forms ((cap, payload, kind), ...), or None
    cdef public bint caps_seen          # some link learned a capability (a twin then offers native forms)
    cdef public int caps_any            # the union of the capabilities links learned (only grows)
    cdef public object ttls_ms          # per key, the TTL whose validity it earns (0: none); rows entries
    cdef public list outcomes           # per key and master (j * n + i), an outcome code (PENDING at first)
    cdef public object details          # None, or a list like outcomes of messages (None: nothing to say)
    cdef public object values           # None, or a list like outcomes of values (fence counters, reads)
    cdef int[:] oks                     # per key, OKs so far (early_now only; >= rows entries)
    cdef int[:] bad                     # per key, other outcomes so far (early_now only)
    cdef public Py_ssize_t undecided    # keys neither at quorum OKs nor past n - quorum others (early_now)
    cdef public object modes            # per master, its health mode at begin; None: all HEALTHY

    @cython.locals(n=Py_ssize_t, link=Link, fresh_deadline=double, j=Py_ssize_t, links=list, idx=Py_ssize_t,
                   outcomes=list, pending=object)
    cpdef begin(self, int kind, Py_ssize_t k, Py_ssize_t rows, bytes payload, bint script, object make_fallbacks,
                object ttls_ms, bint wait, double now, object native=*)
    @cython.locals(link=Link)
    cpdef no_scripts(self)
    cdef object _fallback_payload(self)
    cdef _map_failed(self, Py_ssize_t i, double now)
    @cython.locals(unrouted=list, j=Py_ssize_t, i=Py_ssize_t)
    cdef _route(self, double now)
    @cython.locals(mode=int, j=Py_ssize_t, cmds=list, usual=bint)
    cdef _start(self, Link link, double deadline)
    @cython.locals(native=tuple, form=tuple, cap=int)
    cdef bint _first_form(self, Link link) except -1
    @cython.locals(cmds=list, cap=int, form=tuple, native=tuple, f=Py_ssize_t)
    cdef bint _choose(self, Link link) except -1
    @cython.locals(j=Py_ssize_t)
    cdef _refuse(self, Link link, object detail)
    cdef _ungate(self, Link link, double now)
    cdef inline int _kind_next(self, Link link) except -1
    @cython.locals(entry=Owed)
    cdef _write_after(self, Link link)
    @cython.locals(mark=int, pair=tuple)
    cdef tuple _pair(self, Link link, object reply, object error)
    @cython.locals(n=Py_ssize_t, idx=Py_ssize_t)
    cdef inline int _record(self, Py_ssize_t j, Py_ssize_t i, int code, object detail, object value) except -1
    @cython.locals(row=Py_ssize_t)
    cdef _record_cmd(self, Py_ssize_t j, Py_ssize_t i, int code, object detail)
    cdef inline void _stamp(self, double now) noexcept
    @cython.locals(first=double, decided=bint, soonest=double, link=Link, links=list, idx=Py_ssize_t)
    cpdef double next_deadline(self)
    cpdef double pace(self, double first, double now) except? -3.0
    @cython.locals(decided=bint, link=Link, links=list, idx=Py_ssize_t)
    cpdef expire_due(self, double now)
    @cython.locals(elapsed=double, j=Py_ssize_t, rounds=list)
    cpdef list finish(self, double now)
    @cython.locals(elapsed=double)
    cdef object finish_one(self, double now)
    @cython.locals(link=Link, links=list, idx=Py_ssize_t)
    cdef double _end(self, double now) except? -1.0
    @cython.locals(link=Link, j=Py_ssize_t, kind=int, entry=Owed, links=list, idx=Py_ssize_t, left=int)
    cdef _owe_missing(self, list rounds, object one)
    @cython.locals(n=Py_ssize_t, details=object, values=object, drow=object)
    cdef _decide_row(self, Py_ssize_t j, double elapsed)
    cpdef connect_failed(self, Py_ssize_t i, object detail, double now)
    cpdef tls_failed(self, Py_ssize_t i, object detail, double now)
    cpdef sentinel_failed(self, Py_ssize_t i, object detail, double now)
    cpdef resolved(self, Py_ssize_t i, object address, double age_ms, double now)
    @cython.locals(link=Link)
    cpdef blocked(self, Py_ssize_t i, double spent)
    @cython.locals(link=Link)
    cpdef io_failed(self, Py_ssize_t i, object detail, bint stale, double now)
    @cython.locals(link=Link)
    cpdef Py_ssize_t received(self, Py_ssize_t i, object data, Py_ssize_t start, Py_ssize_t end, double now) except -1
    cpdef refused(self, Py_ssize_t i, double now)
    cpdef parse_failed(self, Py_ssize_t i, object detail, double now)
    # (the twins call next_kind / answer / answer_last / drained by index; the C core's fast
    # parser calls their cdef forms with the Link it holds)
    cpdef int next_kind(self, Py_ssize_t i) except -2
    @cython.locals(entry=Owed)
    cdef int _next_kind(self, Link link) except -2
    cpdef partial(self, Py_ssize_t i)
    cdef inline void _partial(self, Link link) noexcept
    cpdef drained(self, Py_ssize_t i, bint leftover, double now)
    cdef inline int _drained(self, Link link, bint leftover, double now) except -1
    cpdef bint answer_last(self, Py_ssize_t i, int code, object value, double now) except -1
    cdef bint _answer_last(self, Link link, int code, object value, double now) except -1
    @cython.locals(link=Link, j=Py_ssize_t, row=Py_ssize_t, codes=list, kind=int, moved=int, cap=int, mark=int,
                   n=Py_ssize_t)
    cpdef bint reply(self, Py_ssize_t i, object reply, object error, double now) except -1
    cpdef bint answer(self, Py_ssize_t i, int code, object detail, object value, double now) except -1
    cdef inline bint _answer(self, Link link, int code, object detail, object value, double now) except -1
    @cython.locals(i=Py_ssize_t, j=Py_ssize_t)
    cpdef int answer_head(self, Link link, int code, object value, bint last, double now) except -1
    cdef inline bint _voting_says(self, Link link, int code, bint retried, double now) except -1
    @cython.locals(i=Py_ssize_t, j=Py_ssize_t)
    cdef inline bint _settle_cmd(self, Link link, int code, object detail, object value, double now) except -1
    @cython.locals(entry=Owed, wake=Owed, rows=Py_ssize_t, row=Py_ssize_t, codes=list, mark=int)
    cdef bint _owed_reply(self, Link link, object reply, object error, double now) except -1
    @cython.locals(entry=Owed, i=Py_ssize_t, owed=list)
    cdef bint _owed_answer(self, Link link, int code, object detail, object value, double now) except -1
    @cython.locals(j=Py_ssize_t)
    cdef _fail(self, Link link, int code, object detail, int counter, bint strike, double now)
    @cython.locals(j=Py_ssize_t, kind=int)
    cdef _timeout(self, Link link, double now)
    cpdef tidy(self, Py_ssize_t i, double now)
    cdef _tidy_link(self, Link link, double now, bint due)
    @cython.locals(link=Link)
    cpdef close(self)
    @cython.locals(link=Link, count=Py_ssize_t)
    cpdef Py_ssize_t owed(self) except -1
    @cython.locals(link=Link, count=Py_ssize_t)
    cpdef Py_ssize_t pending(self) except -1
    @cython.locals(link=Link, first=double, d=double)
    cpdef double first_owed_deadline(self)
    @cython.locals(link=Link, first=double)
    cpdef double settle_wait(self, double end)
    @cython.locals(link=Link)
    cpdef settle_done(self)
    @cython.locals(link=Link, links=list, idx=Py_ssize_t)
    cpdef bint owing(self) except -1
    @cython.locals(link=Link, due=list, overdue=bint, links=list, idx=Py_ssize_t)
    cpdef list tidy_owed(self, double now)
    @cython.locals(link=Link)
    cpdef list master_states(self)
