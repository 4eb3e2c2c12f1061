# Compiled with Cython for the C build (pure-Python mode: loop_io.py is the source): the event
# loop's callbacks read and write the LoopCore's fields as C struct members.
cimport cython

@cython.final
cdef class LoopCore:
    cdef public object core  # the core driven (either I/O twin); its on_close is _forget; set once
    cdef public object loop  # the event loop whose callbacks drive the core; set once
    cdef Py_ssize_t _changes  # the core's open/close count at the last readers' sync; -1: resync
    cdef dict _readers  # master index -> fd with a reader callback (every open socket)
    cdef dict _writers  # master index -> fd with a writer callback (while a round waits to write)
    cdef object _round  # the future of the round in progress, else None
    cdef object _timer  # the timer for the next deadline (round's, or owed replies'), or None
    cdef double _timer_at  # when _timer fires (the core's monotonic clock); -1.0: no timer
    cdef list _waiters  # activity()'s futures, resolved by _wake() after a read or sweep
    cdef object _cancelled  # the cancellation run() held back, until take_cancelled()
    cdef bint _closed  # set by close(), never cleared: run() then raises

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
