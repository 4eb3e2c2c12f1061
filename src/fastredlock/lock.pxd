# Compiled with Cython for the C build (pure-Python mode: lock.py is the source); the pure install
# interprets lock.py. Typed attributes and a typed executor make Lock.acquire/release one C call
# into the executor's compiled hot path.
cimport cython
from ._executor cimport Executor
from ._tokens cimport new_token

cdef class Lock:
    cdef public object _client
    cdef public Executor _executor
    cdef public object name
    cdef public bytes key
    cdef public double ttl
    cdef public object _ttl_ms
    cdef public object token
    cdef public double _valid_until
    cdef public object _last
    cdef public object fence
    cdef public bint fencing
    cdef public bint auto_extend
    cdef public object max_hold
    cdef public object on_lost
    cdef public bint _lost
    cdef public double _acquired_at
    cdef public object _generation
    cdef public object _carrier
    cdef object __weakref__

    @cython.locals(executor=Executor, attempts=Py_ssize_t, ok=bint)
    cpdef bint acquire(self, bint blocking=*, object timeout=*) except -1
    cpdef _reset(self)
