# Compiled with Cython for the C build (pure-Python mode: _unwaited.py is the source); the pure
# install interprets _unwaited.py. A release not waited for then costs its caller one small C
# object and a deque append, and its report a C loop.
cimport cython

@cython.final
@cython.freelist(64)
cdef class Entry:
    cdef public object lock
    cdef public object rnd
    cdef public object core
    cdef public double acquired_at
    cdef public bint was_lost

@cython.final
cdef class Unwaited:
    cdef public object entries
    cdef object _lock
    cdef Py_ssize_t _n
    cdef object _seen

    cpdef bint add(self, Entry entry) except -1
    @cython.locals(entry=Entry, out=list)
    cpdef list done(self, bint quiet)
    @cython.locals(entry=Entry)
    cpdef set stuck(self)
