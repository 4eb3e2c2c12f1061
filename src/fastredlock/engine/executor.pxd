# Compiled with Cython for the C build (pure-Python mode: executor.py is the source); the pure
# install interprets executor.py. The hot path of a thread alone (acquire_one, release_one and
# the pool) then runs as C from one call of Lock.
cimport cython
from cpython.pycapsule cimport PyCapsule_GetPointer
from .combine cimport Combiner
from .unwaited cimport Unwaited, new_entry
from .fork cimport fork_generation
from ..protocol.plans cimport left_behind, release_decided
from ..protocol.result cimport Round

cdef bint _COMPILED  # whether this module runs compiled (then the Cython core's rounds are C calls); constant
cdef int _PENDING, _TIMEOUT  # outcome codes PENDING and TIMEOUT (protocol.outcomes) as C ints; constant

@cython.locals(code=int, r=Round, outcomes=tuple)
cdef bint _outstanding(object rnd) except -1
@cython.locals(r=Round)
cpdef bint ok_of(object rnd) except -1
cpdef object _carrier(object core, object rnd)
cpdef object _carrying_core(object carrier)

#: The Cython core's rounds as C functions (io/core_c.pyx's _C_ENTRIES): (core, key, token[, ttl_ms]) -> round
ctypedef object (*core_acquire_fn)(object, object, object, long long)
ctypedef object (*core_release_fn)(object, object, object)

@cython.final
cdef class Executor:
    cdef public object _c_core  # io.core_c.Core when the cores are exactly that class (its rounds called in C), else None
    cdef core_acquire_fn _c_acquire  # its _c_acquire (set with _c_core)
    cdef core_release_fn _c_release  # its _c_release (set with _c_core)
    cdef tuple _specs  # the parsed masters, in the order given; set once
    cdef object _core_cls  # the class (Cython or pure twin) every core is made of; set once
    cdef double _io_timeout  # the client's io_timeout (seconds); set once
    cdef double _connect_timeout  # the client's connect_timeout (seconds); set once
    cdef double _drift_factor  # the client's drift_factor (for ttl_ms and the cores); set once
    cdef readonly bint wait_for_all  # the client's wait_for_all (the asyncio executor reads it too)
    cdef bint _restart_aware  # the client's restart_aware: acquiring rounds set the core's grace; set once
    cdef bint _fixed_grace  # restart_grace was given: _grace_ms never follows the TTLs; set once
    cdef public object _grace_ms  # restart grace (ms): restart_grace, else the largest TTL ttl_ms() saw
    cdef dict _ttls_ms  # TTL as given (int/float seconds) -> its checked ms; at most 64 entries
    cdef tuple _graced  # (core, grace): the core whose restart_grace_ms was set last, and to what
    cdef tuple _last_ttl  # (ttl, ms) of the last TTL found in _ttls_ms (replaced whole: one store)
    cdef bint _auto_pipeline  # the client's auto_pipeline: single-lock rounds use the combiner; set once
    cdef object _new_watchdog  # the client's watchdog factory (watch() calls it once); set once
    cdef public object watchdog  # None until watch() makes it (under _pool_lock); None again in a fork child
    cdef public object on_event  # the client's on_event hook, or None; the client sets it at any time
    cdef public object notifier  # the client's notifier, or None (wake=False); set once by the client
    cdef public dict owed  # the notifier's channels.released_at (it writes), else {}; handles read it
    cdef public dict contended  # the notifier's channels.contended (it writes), else {}; handles read it
    cdef public object health  # the masters' Health, shared by every core; made once
    cdef object _pool_lock  # makes the watchdog/reaper once; guards close()'s pool swap; new in a fork child
    cdef set _live  # cores made since the last fork, until close(): one not in _pool is in use
    cdef Py_ssize_t _waiters  # threads in _wait_for() (changed under _returned); > 0: checkin() notifies
    cdef object _returned  # Condition notified by checkin() while _waiters > 0, and by close()
    cdef object _local  # thread-local .core: the core it checked in last (set while > 1 core is live)
    cdef Py_ssize_t _generation  # fork generation of the pool; checkout() runs _after_fork() when it differs
    cdef bint _closed  # set by close(), never cleared: checkout() raises, checkin() closes the core
    cdef public Py_ssize_t n  # number of masters (the first core's); set once
    cdef public Py_ssize_t quorum  # masters that must agree (the first core's); set once
    cdef public list _pool  # the free cores: pop/remove/append (atomic under the GIL); replaced by close() and a fork
    cdef public Combiner combiner  # combines single-lock rounds (with _auto_pipeline); new in a fork child
    cdef public bint wait_release  # the client's wait_release (release_waits' default); the client sets it
    cdef public object prefix  # the client's key prefix (bytes): the client's prefix property is this field
    cdef public bint scripts       # the cores may send scripts (the client's scripts=False: native commands only)
    cdef public Unwaited unwaited  # releases written without waiting, until reported; new in a fork child
    cdef object _reaper  # the reaper thread, made on first use (under _pool_lock); None before, and in a fork child
    cdef object _reap_event  # wakes the reaper asleep (_reaper_asleep); close() sets it to end it
    cdef bint _reaper_asleep  # the reaper waits on _reap_event (written by the reaper only)
    cdef public object _reaping  # the core the reaper took out to read its replies, else None

    cpdef tuple acquire_one(self, object key, object token, object ttl_ms)
    @cython.locals(combiner=Combiner)
    cpdef object acquire_lean(self, object key, object token, object ttl_ms)
    cpdef tuple release_one(self, object key, object token, object carrier=*)
    @cython.locals(combiner=Combiner)
    cpdef object release_lean(self, object key, object token, object carrier=*)
    cpdef object release_unwaited(self, object key, object token, object carrier, object on_done, double acquired_at,
                                  bint was_lost)
    cdef object _before_unwaited(self, Unwaited unwaited)
    cdef object _wake_reaper(self)
    cdef object _report(self, list entries)
    @cython.locals(pool=list)
    cpdef object checkout(self, object carrier_core=*)
    cpdef checkin(self, object core, bint clean=*)
    @cython.locals(graced=tuple)
    cdef _grace_on(self, object core)
    @cython.locals(last=tuple)
    cpdef object ttl_ms(self, object ttl)
    cpdef bint release_waits(self, object wait) except -1



cdef inline object _bind_core(Executor executor, object entries):
    """Take the C entries of io/core_c.pyx's ``_C_ENTRIES`` (see there) for ``executor``."""
    executor._c_acquire = <core_acquire_fn>PyCapsule_GetPointer(entries[1], b"fastredlock.core_c.acquire")
    executor._c_release = <core_release_fn>PyCapsule_GetPointer(entries[2], b"fastredlock.core_c.release")
    executor._c_core = entries[0]


cdef inline object _core_acquire(Executor executor, object core, object key, object token, long long ttl_ms):
    return executor._c_acquire(core, key, token, ttl_ms)


cdef inline object _core_release(Executor executor, object core, object key, object token):
    return executor._c_release(core, key, token)
