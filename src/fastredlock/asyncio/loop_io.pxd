# Compiled with Cython for the C build (pure-Python mode: loop_io.py is the source): the event
# loop's callbacks read and write the LoopCore's fields as C struct members.
cimport cython
from ..protocol.driver cimport Driver

cdef extern from *:
    """
    /* StopIteration(value) set as the current exception (a tuple value stays one value) */
    static CYTHON_INLINE int __fastredlock_set_stop(PyObject *value) {
        PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, value);
        if (exc == NULL) return -1;
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
        return 0;
    }
    """
    int _stop "__fastredlock_set_stop" (object value) except? -1

cdef bint _COMPILED  # whether this module runs compiled (a round's result then leaves __next__ through _stop); constant

cdef class LoopCore

@cython.final
cdef class _StopCheck:
    pass

@cython.final
@cython.freelist(8)
cdef class _Run:
    cdef LoopCore _lc  # the loop core that runs it; set by setup
    cdef object _loop  # the loop of the task that awaits it; set by setup
    cdef public bint _asyncio_future_blocking  # asyncio's protocol: set while the task yields it
    cdef bint over  # the current round is over (or ended with _exc)
    cdef object _exc  # the error the round ended with, else None
    cdef object _callback  # the waiting task's wake-up, once it yielded this; else None
    cdef object _context  # the context to call _callback in
    cdef public object op  # the core operation's name (chain() sets the next one)
    cdef public tuple args  # ... and its arguments
    cdef int _state  # 0: the operation is not started; 1: its round runs; 2: done
    cdef object _result  # the await's result, once in
    cdef public object cancelled_by  # a CancelledError held back while the round ran, else None
    cdef public object then  # then(run, rounds, exc), or None (see the class)
    cdef public object held  # kept for then

    cpdef setup(self, LoopCore lc, object op, tuple args)
    cpdef chain(self, object op, tuple args)
    cdef end_with(self, object exc)
    cdef resume(self, bint direct)
    cdef bint _step(self, object thrown) except -1
    @cython.locals(lc=LoopCore)
    cdef bint _advance(self, object thrown) except -1

@cython.final
cdef class LoopCore:
    cdef public object core  # the core driven (either I/O twin); its on_close is _forget; set once
    cdef Driver _c  # core, where it is the compiled twin (its calls are then C calls); else None
    cdef dict _ops  # operation name -> the core's bound method (begin looks each up once)
    cdef public object loop  # the event loop whose callbacks drive the core; set once
    cdef Py_ssize_t _changes  # the core's open/close count at the last readers' sync; -1: resync
    cdef dict _readers  # master index -> fd with a reader callback (every open socket)
    cdef dict _writers  # master index -> fd with a writer callback (while a round waits to write)
    cdef _Run _round  # what the task running a round awaits, while it runs; else None
    cdef object _timer  # the timer for the next deadline (round's, or owed replies'), or None
    cdef double _timer_at  # when _timer fires (the core's monotonic clock); -1.0: no timer
    cdef list _waiters  # activity()'s futures, resolved by _wake() after a read or sweep
    cdef object _cancelled  # the cancellation run() held back, until take_cancelled()
    cdef readonly bint closed  # set by close(), never cleared: run() then raises
    cdef object _ep  # several masters on Linux: the epoll set of their sockets (the loop watches its fd); else None
    cdef dict _index  # fd -> master index, for the sockets in _ep
    cdef bint _ep_watched  # _ep's fd has the loop's reader callback

    @cython.locals(run=_Run)
    cpdef _Run prepare(self, object op, tuple args)
    cpdef begin(self, _Run run)
    cpdef list end(self, _Run run)
    cpdef abort(self)
    cpdef object take_cancelled(self)
    cpdef close(self)
    @cython.locals(turn=_Run)
    cdef _fail(self, object exc)
    @cython.locals(turn=_Run)
    cdef _resume(self)
    cpdef _forget(self, Py_ssize_t i, Py_ssize_t fd)
    @cython.locals(changes=Py_ssize_t, first=double, turn=_Run)
    cdef _rewatch(self)
    @cython.locals(i=Py_ssize_t, fd=Py_ssize_t)
    cdef _watch_readers(self, list fds)
    cdef _watch_writers(self, list fds, set writing)
    cdef _unwatch_all(self)
    cdef _unread(self, Py_ssize_t fd)
    @cython.locals(timer_at=double)
    cdef _arm(self, double at)
    cdef _wake(self)
    cdef _start(self, object op, tuple args)
    cdef int _ready(self, Py_ssize_t i, bint readable, bint writable) except -1
    cdef double _next_deadline(self) except? -3.0
    cdef double _owed_deadline(self) except? -3.0
    cdef list _finish(self)
    cdef tuple _watched(self)
