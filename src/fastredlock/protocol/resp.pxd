cimport cython

@cython.final
cdef class ReplyGuard:
    cdef public int kind
    cdef public Py_ssize_t line
    cdef public bytes header
    cdef public Py_ssize_t skip

    cpdef reset(self)
    @cython.locals(pos=Py_ssize_t, take=Py_ssize_t, kind=int, nl=Py_ssize_t, stop=Py_ssize_t, length=object)
    cpdef check(self, object data, Py_ssize_t start, Py_ssize_t end)
