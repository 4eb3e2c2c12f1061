# Compiled with Cython for the C build (pure-Python mode: lock.py is the source); the pure install
# interprets lock.py. The handle's hot path (a first attempt, a plain release) calls the base's
# methods and the asyncio executor's as C functions, and reads its fields as C struct members.
cimport cython
from ..handles.lock cimport LockBase
from .executor cimport AsyncExecutor

cdef class Lock(LockBase):
    cdef public AsyncExecutor _async_executor  # the client's asyncio executor; set once

@cython.locals(lock=Lock)
cpdef Lock new_lock(object client, object name, object ttl, bint auto_extend=*, object max_hold=*, object on_lost=*,
                    bint fencing=*)
