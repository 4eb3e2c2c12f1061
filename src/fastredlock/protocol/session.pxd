cimport cython
from .health cimport Health
from .link cimport Link

@cython.final
cdef class Session:
    cdef public list links
    cdef public Py_ssize_t n
    cdef public Py_ssize_t quorum
    cdef public double io_timeout
    cdef public double connect_timeout
    cdef public double drift_factor
    cdef public bint restart_aware
    cdef public double restart_grace_ms
    cdef public Health health
    cdef public bint early
    cdef public bint in_round
    # the round in progress
    cdef public int kind
    cdef public Py_ssize_t k
    cdef public Py_ssize_t rows
    cdef public bint wait
    cdef public bint acquisition
    cdef public bint early_now
    cdef public bint decided
    cdef public double decided_at
    cdef public double started
    cdef public double io_deadline
    cdef public bytes payload
    cdef public object fallbacks
    cdef public object make_fallbacks
    cdef public object ttls_ms
    cdef public list outcomes
    cdef public object details
    cdef public object values
    cdef public list oks
    cdef public list bad
    cdef public Py_ssize_t undecided
    cdef public object modes

    cdef _reset_round(self, int kind, Py_ssize_t k, Py_ssize_t rows, bint wait)
    cpdef begin(self, int kind, Py_ssize_t k, Py_ssize_t rows, bytes payload, bint script, object make_fallbacks,
                object ttls_ms, bint wait, double now)
    cdef object _fallback_payload(self)
    cdef _start(self, Link link, double deadline)
    cdef _record(self, Py_ssize_t j, Py_ssize_t i, int code, object detail, object value)
    cdef _record_cmd(self, Py_ssize_t j, Py_ssize_t i, int code, object detail)
    cdef _stamp(self, double now)
    cpdef double next_deadline(self)
    cpdef expire_due(self, double now)
    cpdef list finish(self, double now)
    cpdef connect_failed(self, Py_ssize_t i, object detail, double now)
    cpdef io_failed(self, Py_ssize_t i, object detail, bint stale, double now)
    cpdef bint received(self, Py_ssize_t i, object data, Py_ssize_t end, double now) except -1
    cpdef parse_failed(self, Py_ssize_t i, object detail, double now)
    cpdef int next_kind(self, Py_ssize_t i) except -2
    cpdef partial(self, Py_ssize_t i)
    cpdef drained(self, Py_ssize_t i, bint leftover, double now)
    cpdef bint reply(self, Py_ssize_t i, object reply, object error, double now) except -1
    cpdef bint answer(self, Py_ssize_t i, int code, object detail, object value, double now) except -1
    cdef bint _settle_cmd(self, Link link, int code, object detail, object value, double now) except -1
    cdef bint _owed_reply(self, Link link, object reply, object error, double now) except -1
    cdef bint _owed_answer(self, Link link, int code, object detail, object value, double now) except -1
    cdef _fail(self, Link link, int code, object detail, int counter, bint strike, double now)
    cdef _timeout(self, Link link, double now)
    cpdef tidy(self, Py_ssize_t i, double now)
    cpdef close(self)
    cpdef Py_ssize_t owed(self) except -1
    cpdef Py_ssize_t pending(self) except -1
    cpdef double first_owed_deadline(self)
    cpdef list master_states(self)
