cimport cython
cdef int NO, SKIPPED, PENDING

@cython.locals(code=object)
cpdef bint may_hold(object outcomes) except -1
cpdef object fence_of(object values)
cpdef bint fenced_held(object second_ok, double valid_until, double now) except -1
@cython.locals(maybe=Py_ssize_t)
cpdef str renewal_verdict(object rnd, Py_ssize_t quorum, double valid_until, double now)
@cython.locals(limit=Py_ssize_t)
cpdef bint release_decided(object rounds, Py_ssize_t quorum, Py_ssize_t n) except -1
