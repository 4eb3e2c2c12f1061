# Compiled with Cython for the C build (pure-Python mode: executor.py is the source): the
# executor's fields are C struct members, its helpers C functions.
cimport cython
from .loop_io cimport LoopCore
from ..protocol.plans cimport left_behind

@cython.final
@cython.freelist(64)
cdef class _Request:
    cdef public object key  # the lock's key; set once
    cdef public object token  # the token to set or to release; set once
    cdef public object ttl_ms  # > 0: an acquisition with this TTL; 0: an owner-checked release
    cdef public object future  # resolved with the request after its round (None: the caller's own round)
    cdef public object rnd  # the key's round once run, else None
    cdef public bint ok  # once run: rnd.ok (acquire) or a quorum confirmed (release); else False
    cdef public bint abandoned  # its caller was cancelled after a round took it (a kept release: before)
    cdef public object orphan  # a kept release's callback of (round, ok) for a cancelled caller, or None
    cdef public object unwaited  # a release not waited for: (on_done, acquired_at, was_lost), else None

@cython.final
cdef class _Job:
    cdef public object run  # run(loop_core) is awaited in the job's turn, alone on the core; set once
    cdef public object future  # the caller's: the job's result or exception
    cdef public object undo  # undoes the result if the caller is gone, or None
    cdef public bint abandoned  # its caller was cancelled while it ran (a kept job: before)
    cdef public object orphan  # a kept job's callback of its result for a cancelled caller, or None

@cython.final
cdef class AsyncExecutor:
    cdef public object executor  # the client's sync Executor: its first core, its bookkeeping; set once
    cdef public Py_ssize_t n  # number of masters (the sync executor's); set once
    cdef public Py_ssize_t quorum  # masters that must agree (the sync executor's); set once
    cdef bint _wait_for_all  # the client's wait_for_all; set once
    cdef object _loop  # the client's event loop: None until the first round binds it; never another
    cdef public LoopCore _loop_core  # the LoopCore of the first core on _loop; None until the first round
    cdef object _queue  # requests and jobs waiting, oldest first; the runner takes the front
    cdef object _runner  # the one task serving _queue, or None
    cdef bint _busy  # a caller's own task runs a round of one (the others queue)
    cdef list _idle_waiters  # aclose()'s futures, resolved when neither _busy nor a _runner
    cdef bint _closed  # set by aclose(), never cleared: later use raises RuntimeError
    cdef public Py_ssize_t carried  # requests that rode with others (only grows; for tests)
    cdef public object unwaited  # releases written without waiting, until reported (core None)
    cdef object _reap_timer  # the timer that reports unwaited, while any is in flight; else None
    cdef double _reap_pause  # the reap timer's next delay, REAP_EVERY to REAP_SLOWEST seconds
    cdef bint _reap_fresh  # the reap timer's next look is its first since it was set
    cdef object _acquired_then  # self._acquired_alone, bound once
    cdef object _released_then  # self._released_alone, bound once
    cdef object _written_then  # self._written_alone, bound once
    cdef object _new_watchdog  # the client's watchdog factory (watch() calls it once); set once
    cdef public object watchdog  # None until watch() makes it
    cdef set _tasks  # tasks the client owns (aclose() waits); each leaves when done

    cdef LoopCore _bind(self)
    cpdef object acquire_one(self, object key, object token, object ttl_ms)
    cpdef object release_one(self, object key, object token, object orphan=*)
    cpdef object release_unwaited(self, object key, object token, object on_done, double acquired_at, bint was_lost)
    cpdef _alone_done(self, LoopCore loop_core)
    cdef _enqueue(self, object item)
    cdef _check_idle(self)
    cdef list _take_batch(self)
    cdef _finish_batch(self, list batch)
    cdef _undo(self, _Request req)
    cpdef release_later(self, object key, object token)
