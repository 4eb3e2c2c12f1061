cimport cython
from .voting cimport MasterClock

cpdef tuple handshake(object spec, bint restart_aware)
cpdef tuple parse_info_server(bytes info)
cpdef object hello_reply(MasterClock clock, int kind, object reply, object error, double now)
cpdef int probe_answer(Py_ssize_t n, object reply, object error) except -1
cpdef bytes wake_after(bytes key, bint whole)
cdef list _LENS
cdef bytes _len_of(Py_ssize_t n)
@cython.locals(lk=Py_ssize_t, exists=bytes, lkb=bytes, ltb=bytes)
cpdef tuple native_release(bytes key, bytes token, bint tagged)
