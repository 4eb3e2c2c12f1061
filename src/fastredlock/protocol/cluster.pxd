cimport cython

cdef double _REFRESH_EVERY
cdef unsigned short[:] _CRC

@cython.locals(start=Py_ssize_t, end=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, p=Py_ssize_t, crc=cython.uint)
cpdef int key_slot(bytes key) except -1

@cython.locals(value=Py_ssize_t)
cdef tuple _number(bytes payload, Py_ssize_t pos)
@cython.locals(pos=Py_ssize_t, begin=Py_ssize_t, argc=Py_ssize_t, size=Py_ssize_t, slot=int, s=int, out=list,
               args=list, keys=list)
cpdef list split_commands(bytes payload, Py_ssize_t k)
