# Compiled with Cython for the C build (pure-Python mode: executor.py is the source): the
# executor's fields are C struct members, its helpers C functions.
cimport cython
from .loop_io cimport LoopCore

@cython.final
@cython.freelist(64)
cdef class _Request:
    cdef public object key
    cdef public object token
    cdef public object ttl_ms
    cdef public object future
    cdef public object rnd
    cdef public bint ok
    cdef public bint abandoned
    cdef public object orphan
    cdef public object unwaited

@cython.final
cdef class _Job:
    cdef public object run
    cdef public object future
    cdef public object undo
    cdef public bint abandoned
    cdef public object orphan

@cython.final
cdef class AsyncExecutor:
    cdef public object executor
    cdef public Py_ssize_t n
    cdef public Py_ssize_t quorum
    cdef bint _wait_for_all
    cdef object _loop
    cdef public LoopCore _lc
    cdef object _queue
    cdef object _runner
    cdef bint _busy
    cdef list _idle_waiters
    cdef bint _closed
    cdef public Py_ssize_t carried
    cdef public object unwaited
    cdef object _reap_timer
    cdef object _new_watchdog
    cdef public object watchdog
    cdef set _tasks

    cdef LoopCore _bind(self)
    cdef _enqueue(self, object item)
    cdef _check_idle(self)
    cdef list _take_batch(self)
    cdef _finish_batch(self, list batch)
    cdef _undo(self, _Request req)
    cpdef release_later(self, object key, object token)
