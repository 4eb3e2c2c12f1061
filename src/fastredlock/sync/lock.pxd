# Compiled with Cython for the C build (pure-Python mode: lock.py is the source); the pure install
# interprets lock.py. The sync handle's hot path (a lean first attempt, a plain release) is then one
# C call into the executor's compiled hot path.
cimport cython
from ..engine.executor cimport Executor, ok_of
from ..handles.lock cimport LockBase

cdef class Lock(LockBase):
    @cython.locals(tok=object, first=object)
    cpdef bint acquire(self, bint blocking=*, object timeout=*, object token=*) except -1
    @cython.locals(ok=bint, waits=bint)
    cpdef _release_lean(self, object wait)

@cython.locals(executor=Executor)
cpdef tuple _release_now(Executor executor, object key, object token, object carrier, object signal)

@cython.locals(lock=Lock)
cpdef Lock new_lock(object client, object name, object ttl, bint auto_extend=*, object max_hold=*, object on_lost=*,
                    bint fencing=*)
