cimport cython
cdef int NO, OK, SKIPPED, PENDING
from .result cimport validity_ms

@cython.locals(code=object)
cpdef bint may_hold(object outcomes) except -1
cpdef bint left_behind(object rnd) except -1
@cython.locals(j=Py_ssize_t)
cpdef list left_behind_of(object rounds)
cpdef object fence_of(object values)
cpdef bint fenced_held(object second_ok, double valid_until, double now) except -1
@cython.locals(maybe=Py_ssize_t)
cpdef str renewal_verdict(object rnd, Py_ssize_t quorum, double valid_until, double now)
@cython.locals(limit=Py_ssize_t)
cpdef bint release_decided(object rounds, Py_ssize_t quorum, Py_ssize_t n) except -1
cpdef list inspect_args(object keys, object fence_keys)
cpdef tuple read_view(int get_code, object value, int pttl_code, object pttl)
cpdef object fence_value(int code, object value)
@cython.locals(n=Py_ssize_t, holders=Py_ssize_t, silent=Py_ssize_t, some=bint, i=Py_ssize_t, j=Py_ssize_t,
               count=Py_ssize_t, code=int, forever=Py_ssize_t, finite=list, ttl=cython.longlong, low=double, drift=double)
cpdef tuple inspect_summary(object codes, object values, object pttls, Py_ssize_t quorum, double elapsed,
                            double drift_factor)
