cimport cython
from .resp cimport ReplyGuard
from .voting cimport MasterClock

cdef double _STALE_AFTER
cdef Py_ssize_t _MAX_OWED

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
    cdef public Py_ssize_t master
    cdef public list cmds
    cdef public object spec
    cdef public bytes hello
    cdef public bytes preload
    cdef public Py_ssize_t preloads
    cdef public bytes probe
    cdef public Py_ssize_t probes
    cdef public int caps
    cdef public int kind
    cdef public int native
    cdef public tuple hello_kinds
    cdef public MasterClock clock
    cdef public ReplyGuard guard
    cdef public list owed
    cdef public bint open, connecting, opening, closing, polled
    cdef public bytes out
    cdef public Py_ssize_t head, end
    cdef public list requeued
    cdef public int skip
    cdef public bytes payload
    cdef public double deadline
    cdef public bint reused, retried, got_data
    cdef public Py_ssize_t fallback_sent
    cdef public bint waited, best_effort, use_eval, loaded, load_failed

    cpdef bint unsent(self)
    cpdef bint expecting(self)
    cpdef bint waiting(self)
    cpdef expect(self, Py_ssize_t k)
    cpdef Py_ssize_t next_cmd(self) except -1
    cpdef Py_ssize_t pop_cmd(self) except -1
    cpdef requeue(self, Py_ssize_t j)
    cpdef request_open(self, bytes first)
    cpdef bytes preloaded(self, bytes first)
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
