# Compiled with Cython for the C build (pure-Python mode: combine.py is the source); the pure
# install interprets combine.py. Attributes are public where the tests look at them.
cimport cython

@cython.final
cdef class Combiner:
    cdef public object _run
    cdef public object _abandon
    cdef public object _lead_token
    cdef public object _mutex
    cdef public list _queue
    cdef public Py_ssize_t carried

    cpdef bint enter(self) except -1
    cpdef leave(self)
    cdef bint _take_lead(self) except -1
