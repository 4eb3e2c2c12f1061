cimport cython

cdef Py_ssize_t _NCOUNTERS
cdef Py_ssize_t _C_REPLIES, _C_TIMED, _C_TIMEOUTS

@cython.final
cdef class Health:
    cdef public Py_ssize_t n
    cdef public double cooldown
    cdef public double max_cooldown
    cdef public Py_ssize_t n_cooling
    cdef object _lock      # None when compiled (the GIL guards every method); else new_lock()
    cdef object _new_lock  # the caller's lock factory (threading.Lock), None when compiled
    cdef double[:] _until
    cdef long long[:] _strikes
    cdef signed char[:] _timed_out
    cdef list _why
    cdef list _last
    cdef long long[:] _counts
    cdef double[:] _lat_sum
    cdef double[:] _lat_max

    cpdef after_fork(self)
    cpdef int mode(self, Py_ssize_t i, double now) except -1
    cpdef modes(self, double now)
    cpdef str why(self, Py_ssize_t i)
    cpdef answered(self, Py_ssize_t i)
    cpdef timed(self, Py_ssize_t i, double latency)
    cpdef count(self, Py_ssize_t i, int counter)
    cpdef failed(self, Py_ssize_t i, int counter, object what, double now, bint strike)
    cdef _answered(self, Py_ssize_t i)
    cdef _timed(self, Py_ssize_t i, double latency)
    cdef _count(self, Py_ssize_t i, int counter)
    @cython.locals(strikes=Py_ssize_t, pause=double)
    cdef _failed(self, Py_ssize_t i, int counter, object what, double now, bint strike)
    @cython.locals(i=Py_ssize_t, c=Py_ssize_t, timed=cython.longlong, until=double, out=list, counts=list)
    cpdef list snapshot(self, double now)
