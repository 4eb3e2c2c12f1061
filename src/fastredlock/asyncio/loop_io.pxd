# Compiled with Cython for the C build (pure-Python mode: loop_io.py is the source): the event
# loop's callbacks read and write the LoopCore's fields as C struct members.
cimport cython

@cython.final
@cython.freelist(8)
cdef class _Turn:
    cdef object _loop  # the loop of the task that awaits it; set once
    cdef public bint _asyncio_future_blocking  # asyncio's protocol: set while the task yields it
    cdef bint over  # the round is over (or ended with _exc)
    cdef object _exc  # the error the round ended with, else None
    cdef object _callback  # the waiting task's wake-up, once it yielded this; else None
    cdef object _context  # the context to call _callback in

    cdef end_with(self, object exc)
    cdef resume(self, bint direct)

@cython.final
cdef class LoopCore:
    cdef public object core  # the core driven (either I/O twin); its on_close is _forget; set once
    cdef public object loop  # the event loop whose callbacks drive the core; set once
    cdef Py_ssize_t _changes  # the core's open/close count at the last readers' sync; -1: resync
    cdef dict _readers  # master index -> fd with a reader callback (every open socket)
    cdef dict _writers  # master index -> fd with a writer callback (while a round waits to write)
    cdef _Turn _round  # what the task running a round awaits, while it runs; else None
    cdef object _timer  # the timer for the next deadline (round's, or owed replies'), or None
    cdef double _timer_at  # when _timer fires (the core's monotonic clock); -1.0: no timer
    cdef list _waiters  # activity()'s futures, resolved by _wake() after a read or sweep
    cdef object _cancelled  # the cancellation run() held back, until take_cancelled()
    cdef bint _closed  # set by close(), never cleared: run() then raises
    cdef object _ep  # several masters on Linux: the epoll set of their sockets (the loop watches its fd); else None
    cdef dict _index  # fd -> master index, for the sockets in _ep
    cdef bint _ep_watched  # _ep's fd has the loop's reader callback

    cpdef object take_cancelled(self)
    cpdef close(self)
    @cython.locals(turn=_Turn)
    cdef _fail(self, object exc)
    @cython.locals(turn=_Turn)
    cdef _resume(self)
    cpdef _forget(self, Py_ssize_t i, Py_ssize_t fd)
    @cython.locals(changes=Py_ssize_t, first=double, turn=_Turn)
    cdef _rewatch(self)
    @cython.locals(i=Py_ssize_t, fd=Py_ssize_t)
    cdef _watch_readers(self, list fds)
    cdef _watch_writers(self, list fds, set writing)
    cdef _unwatch_all(self)
    cdef _unread(self, Py_ssize_t fd)
    @cython.locals(timer_at=double)
    cdef _arm(self, double at)
    cdef _wake(self)
