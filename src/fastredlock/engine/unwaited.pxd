# Compiled with Cython for the C build (pure-Python mode: unwaited.py is the source); the pure
# install interprets unwaited.py. A release not waited for then costs its caller one small C
# object and a list append, and its report a C loop under the GIL (no lock).
cimport cython

cdef bint _COMPILED  # whether this module runs compiled (then Unwaited needs no lock); constant
cdef int _PENDING  # the outcome code PENDING (protocol.outcomes) as a C int; constant

@cython.final
@cython.freelist(64)
cdef class Entry:
    cdef public object on_done       # called with the entry once its answers are in
    cdef public object rnd  # the release's round: outcomes PENDING until its replies are read
    cdef public object core  # the core whose connections owe the answers (None: asyncio's one core)
    cdef public double acquired_at  # when the released acquisition was made (monotonic); set once
    cdef public bint was_lost  # the lock was known lost when released (its caller got LockLostError); set once

@cython.locals(entry=Entry)
cpdef Entry new_entry(object on_done, object rnd, object core, double acquired_at, bint was_lost)

@cython.final
cdef class Unwaited:
    cdef public list entries  # releases in flight, oldest first: add() appends, done() takes the front
    cdef object _lock  # None when compiled (the GIL suffices), else a Lock for done()/stuck()
    cdef Py_ssize_t _n  # number of masters (fewer successes: something to report); set once
    cdef object _seen  # the oldest entry when stuck() last looked (None: none)
    cdef public bint moved  # the oldest entry changed between stuck()'s last two looks (the client is busy)
    cdef public Py_ssize_t looks  # how often stuck() was asked (the reaper's looks)

    cpdef bint add(self, Entry entry) except -1
    cpdef list done(self, bint quiet)
    @cython.locals(entry=Entry, out=list, entries=list, taken=Py_ssize_t)
    cdef list _done(self, bint quiet)
    cpdef set stuck(self)
    @cython.locals(entry=Entry, entries=list)
    cdef set _stuck(self)
