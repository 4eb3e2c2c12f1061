cimport cython
from .resp cimport ReplyGuard
from .voting cimport MasterClock

@cython.final
@cython.freelist(16)
cdef class Owed:
    cdef public int kind
    cdef public double deadline
    cdef public object sink
    cdef public bint retried
    cdef public bint expired

@cython.final
cdef class Link:
    cdef public Py_ssize_t index
    cdef public object spec
    cdef public bytes hello
    cdef public tuple hello_kinds
    cdef public MasterClock clock
    cdef public ReplyGuard guard
    cdef public object owed
    cdef public bint open, connecting, opening, closing, polled
    cdef public bytes out
    cdef public object expect
    cdef public int skip
    cdef public bytes payload
    cdef public double deadline
    cdef public bint reused, retried, got_data
    cdef public Py_ssize_t fallback_sent
    cdef public bint waited, best_effort, use_eval

    cpdef bint unsent(self)
    cpdef bint expecting(self)
    cpdef request_open(self, bytes first)
    cpdef request_close(self)
    cpdef Py_ssize_t pending(self) except -1
    cpdef double first_owed_deadline(self)
    cpdef bint overdue(self, double now)
    cpdef bint expire(self, double now, bint everything)
    cpdef bint stale(self, double now)
    cpdef drop_owed(self, int code, object detail)
    cpdef owe(self, int kind, double deadline, object sink, bint expired)
