cimport cython

@cython.final
@cython.freelist(8)
cdef class Round:
    cdef public bint ok
    cdef public Py_ssize_t successes
    cdef public double validity
    cdef public double elapsed
    cdef public double started
    cdef public tuple outcomes
    cdef public object details
    cdef public object values

cpdef double validity_ms(long long ttl_ms, double elapsed, double drift_factor)
@cython.locals(successes=Py_ssize_t, left=double, rnd=Round)
cpdef Round decide(tuple outcomes, long long ttl_ms, double elapsed, double started, Py_ssize_t quorum,
                   double drift_factor, object details, object values)
@cython.locals(items=list, outcomes=tuple)
cpdef set_outcome(Round rnd, Py_ssize_t i, int code, object detail, object value)
@cython.locals(rnd=Round)
cpdef settle_sink(object sink, Py_ssize_t i, int code, object detail, object value)
