cimport cython

@cython.final
cdef class Health:
    cdef public Py_ssize_t n
    cdef public double cooldown
    cdef public double max_cooldown
    cdef public Py_ssize_t n_cooling
    cdef object _lock
    cdef list _until
    cdef list _strikes
    cdef list _timed_out
    cdef list _why
    cdef list _last
    cdef list _counts
    cdef list _lat_sum
    cdef list _lat_max

    cpdef after_fork(self)
    cpdef int mode(self, Py_ssize_t i, double now) except -1
    cpdef modes(self, double now)
    cpdef str why(self, Py_ssize_t i)
    cpdef answered(self, Py_ssize_t i)
    cpdef timed(self, Py_ssize_t i, double latency)
    cpdef count(self, Py_ssize_t i, int counter)
    cpdef failed(self, Py_ssize_t i, int counter, object what, double now, bint strike)
    cpdef list snapshot(self, double now)
