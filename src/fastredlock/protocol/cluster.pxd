cimport cython

cdef double _REFRESH_EVERY
cdef unsigned short[:] _CRC

@cython.locals(start=Py_ssize_t, end=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, p=Py_ssize_t, crc=cython.uint)
cpdef int key_slot(bytes key) except -1
