cimport cython

@cython.final
cdef class MasterClock:
    cdef public object run_id
    cdef public double up_since
    cdef public Py_ssize_t restarts
    cdef public object address
    cdef public double reported_since
    cdef public object promoted_run
    cdef public double promoted_at

    cpdef learned(self, object run_id, double uptime, double now)
    cpdef promoted(self, double since)
    cpdef tuple state(self)
    cpdef bint untrusted(self, double now, double grace_ms)
    cpdef tuple acquisition_outcome(self, int code, object detail, bint retried, double now, double grace_ms)
