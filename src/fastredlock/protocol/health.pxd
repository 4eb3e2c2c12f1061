cimport cython

cdef Py_ssize_t _NCOUNTERS
cdef Py_ssize_t _C_REPLIES, _C_TIMED, _C_TIMEOUTS

@cython.final
cdef class Health:
    cdef public Py_ssize_t n               # masters; every array below holds n entries (_counts: n * _NCOUNTERS)
    cdef public double cooldown            # the first cool-down, seconds (<= 0: none)
    cdef public double max_cooldown        # the longest cool-down, seconds (>= cooldown)
    cdef public Py_ssize_t n_cooling       # masters whose _until is set (!= 0.0), passed or not
    cdef object _lock      # None when compiled (the GIL guards every method); else new_lock()
    cdef object _new_lock  # the caller's lock factory (threading.Lock), None when compiled
    cdef double[:] _until                  # per master: when its cool-down ends (monotonic s); 0.0: none
    cdef long long[:] _strikes             # per master: failures in a row (0 after a reply in time)
    cdef signed char[:] _timed_out         # per master: 1 if its cool-down began with a timeout, else 0
    cdef list _why                         # per master: its SKIPPED detail while striking, else None
    cdef list _last                        # per master: what its last failure was, or None
    cdef long long[:] _counts              # per master and counter (COUNTERS): events, only growing
    cdef double[:] _lat_sum                # per master: total latency of its timed rounds, seconds
    cdef double[:] _lat_max                # per master: the longest of them, seconds

    cpdef after_fork(self)
    cpdef int mode(self, Py_ssize_t i, double now) except -1
    cpdef modes(self, double now)
    cpdef str why(self, Py_ssize_t i)
    # (C calls from the session; compiled, nothing in them can raise: the lock is None, the index < n)
    cpdef void answered(self, Py_ssize_t i) noexcept
    cpdef void timed(self, Py_ssize_t i, double latency) noexcept
    cpdef void answered_timed(self, Py_ssize_t i, double latency) noexcept
    cpdef count(self, Py_ssize_t i, int counter)
    cpdef failed(self, Py_ssize_t i, int counter, object what, double now, bint strike)
    cdef _locked(self, Py_ssize_t i, bint timed, double latency)
    cdef inline void _answered(self, Py_ssize_t i) noexcept  # (inlined into answered / timed)
    cdef inline void _timed(self, Py_ssize_t i, double latency) noexcept
    cdef _count(self, Py_ssize_t i, int counter)
    @cython.locals(strikes=Py_ssize_t, pause=double)
    cdef _failed(self, Py_ssize_t i, int counter, object what, double now, bint strike)
    @cython.locals(i=Py_ssize_t, c=Py_ssize_t, timed=cython.longlong, until=double, out=list, counts=list)
    cpdef list snapshot(self, double now)
