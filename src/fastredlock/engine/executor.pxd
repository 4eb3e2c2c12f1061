# Compiled with Cython for the C build (pure-Python mode: executor.py is the source); the pure
# install interprets executor.py. The hot path of a thread alone (acquire_one, release_one and
# the pool) then runs as C from one call of Lock.
cimport cython
from .combine cimport Combiner
from .fork cimport fork_generation
from ..protocol.plans cimport left_behind, release_decided

cdef int _PENDING, _TIMEOUT

@cython.locals(code=int)
cdef bint _outstanding(object rnd) except -1
cpdef object _carrier(object core, object rnd)
cpdef object _carrying_core(object carrier)

@cython.final
cdef class Executor:
    cdef tuple _specs
    cdef object _core_cls
    cdef double _io_timeout
    cdef double _connect_timeout
    cdef double _drift_factor
    cdef readonly bint wait_for_all  # the client's wait_for_all (the asyncio executor reads it too)
    cdef bint _restart_aware
    cdef bint _fixed_grace
    cdef public object _grace_ms
    cdef dict _ttls_ms
    cdef bint _auto_pipeline
    cdef object _new_watchdog
    cdef public object watchdog
    cdef public object on_event
    cdef public object notifier
    cdef public dict owed
    cdef public dict contended
    cdef public object health
    cdef object _pool_lock
    cdef set _live
    cdef Py_ssize_t _waiters
    cdef object _returned
    cdef object _local
    cdef Py_ssize_t _generation
    cdef bint _closed
    cdef public Py_ssize_t n
    cdef public Py_ssize_t quorum
    cdef public list _pool
    cdef public Combiner combiner
    cdef public bint wait_release
    cdef public object unwaited
    cdef object _reaper
    cdef object _reap_event
    cdef bint _reaper_asleep
    cdef public object _reaping

    @cython.locals(combiner=Combiner)
    cpdef tuple acquire_one(self, object key, object token, object ttl_ms)
    @cython.locals(combiner=Combiner)
    cpdef tuple release_one(self, object key, object token, object carrier=*)
    cpdef object release_unwaited(self, object key, object token, object carrier, object on_done, double acquired_at,
                                  bint was_lost)
    @cython.locals(pool=list)
    cpdef object checkout(self, object carrier_core=*)
    cpdef checkin(self, object core, bint clean=*)
    cpdef object ttl_ms(self, object ttl)
    cpdef bint release_waits(self, object wait) except -1
