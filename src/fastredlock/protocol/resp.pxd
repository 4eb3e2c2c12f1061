cimport cython

@cython.final
cdef class ReplyGuard:
    cdef public int kind          # type byte of the reply being read (+ - : $); 0 between replies
    cdef public Py_ssize_t line   # bytes of its first line seen so far (<= MAX_LINE)
    cdef public bytes header      # a bulk reply's length digits seen so far (b"" otherwise)
    cdef public Py_ssize_t skip   # bulk body bytes and CRLF still to pass over (>= 0)
    cdef public Py_ssize_t good   # end of the last whole reply in the chunk last checked
    cdef public object problem    # the first problem found, or None

    cpdef reset(self)
    @cython.locals(pos=Py_ssize_t, take=Py_ssize_t, kind=int, nl=Py_ssize_t, stop=Py_ssize_t, length=object)
    cpdef check(self, object data, Py_ssize_t start, Py_ssize_t end)
    cdef _refuse(self, object problem)
