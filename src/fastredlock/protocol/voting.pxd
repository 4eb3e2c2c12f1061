cimport cython

@cython.final
cdef class MasterClock:
    cdef public object run_id          # the master's run_id (bytes) from its handshake, or None: not known
    cdef public double up_since        # monotonic time it started (from its uptime); -1.0: not known
    cdef public Py_ssize_t restarts    # how many times run_id changed (only grows)
    cdef public object address         # a Sentinel master: the (host, port) the sentinels named last, or None
    cdef public double reported_since  # ... when they saw it take the master role (monotonic); -1.0: not said
    cdef public object promoted_run    # a cluster node: its run_id when first seen promoted, or None
    cdef public double promoted_at     # ... and when (monotonic); -1.0: never

    cpdef learned(self, object run_id, double uptime, double now)
    cpdef promoted(self, double since)
    cpdef tuple state(self)
    cpdef bint untrusted(self, double now, double grace_ms) noexcept  # (C doubles only: nothing raises)
    cpdef tuple acquisition_outcome(self, int code, object detail, bint retried, double now, double grace_ms)
