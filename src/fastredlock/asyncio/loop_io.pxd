# Compiled with Cython for the C build (pure-Python mode: loop_io.py is the source): the event
# loop's callbacks read and write the LoopCore's fields as C struct members.
cimport cython

@cython.final
cdef class LoopCore:
    cdef public object core
    cdef public object loop
    cdef Py_ssize_t _changes
    cdef dict _readers
    cdef dict _writers
    cdef object _round
    cdef object _timer
    cdef double _timer_at
    cdef list _waiters
    cdef object _cancelled
    cdef bint _closed

    cpdef object take_cancelled(self)
    cpdef close(self)
    cdef _fail(self, object exc)
    cpdef _forget(self, Py_ssize_t i, Py_ssize_t fd)
    @cython.locals(changes=Py_ssize_t, first=double)
    cdef _rewatch(self)
    @cython.locals(i=Py_ssize_t, fd=Py_ssize_t)
    cdef _watch_readers(self, list fds)
    cdef _watch_writers(self, list fds, set writing)
    cdef _unwatch_all(self)
    @cython.locals(timer_at=double)
    cdef _arm(self, double at)
    cdef _wake(self)
