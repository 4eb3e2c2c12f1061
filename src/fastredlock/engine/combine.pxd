# Compiled with Cython for the C build (pure-Python mode: combine.py is the source); the pure
# install interprets combine.py. Attributes are public where the tests look at them.
cimport cython

cdef bint _COMPILED  # whether this module runs compiled (then no signal lands between taking the lead and the try); constant

@cython.final
cdef class Combiner:
    cdef public object _run  # runs a batch as one round trip (the executor's _run_batch); set once
    cdef public object _abandon  # undoes a done request whose thread was interrupted (the executor's); set once
    cdef public object _lead_token  # [True]: nobody leads; []: one does (pop() takes the lead, append() gives it up)
    cdef public object _leader  # interpreted: the thread (get_ident()) holding the lead while it is taken, written as it is taken
    cdef public object _mutex  # guards _queue (a request is queued only while the lead is held)
    cdef public list _queue  # requests waiting for the next round, oldest first; changed under _mutex
    cdef public Py_ssize_t carried  # requests that rode in another thread's round (only grows; for tests)

    cpdef bint enter(self) except -1
    cpdef leave(self)
    cdef bint _take_lead(self) except -1
