# Compiled with Cython for the C build (pure-Python mode: unwaited.py is the source); the pure
# install interprets unwaited.py. A release not waited for then costs its caller one small C
# object and a list append, and its report a C loop under the GIL (no lock).
cimport cython

cdef bint _COMPILED
cdef int _PENDING

@cython.final
@cython.freelist(64)
cdef class Entry:
    cdef public object on_done       # called with the entry once its answers are in
    cdef public object rnd
    cdef public object core
    cdef public double acquired_at
    cdef public bint was_lost

cpdef Entry new_entry(object on_done, object rnd, object core, double acquired_at, bint was_lost)

@cython.final
cdef class Unwaited:
    cdef public list entries
    cdef object _lock
    cdef Py_ssize_t _n
    cdef object _seen

    cpdef bint add(self, Entry entry) except -1
    cpdef list done(self, bint quiet)
    @cython.locals(entry=Entry, out=list, entries=list, taken=Py_ssize_t)
    cdef list _done(self, bint quiet)
    cpdef set stuck(self)
    @cython.locals(entry=Entry, entries=list)
    cdef set _stuck(self)
