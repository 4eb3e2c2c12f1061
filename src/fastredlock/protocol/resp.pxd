cimport cython

@cython.final
cdef class ReplyGuard:
    cdef public int kind
    cdef public Py_ssize_t line
    cdef public bytes header
    cdef public Py_ssize_t skip

    cpdef reset(self)
    cpdef check(self, object data, Py_ssize_t end)
