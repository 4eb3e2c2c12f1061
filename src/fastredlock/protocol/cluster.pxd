cimport cython

cdef double _REFRESH_EVERY
cdef unsigned short[:] _CRC

cpdef int key_slot(bytes key) except -1
@cython.locals(i=Py_ssize_t, j=Py_ssize_t, p=Py_ssize_t, crc=cython.uint)
cdef int _slot_in(bytes data, Py_ssize_t start, Py_ssize_t end) except -1

@cython.locals(pos=Py_ssize_t, begin=Py_ssize_t, argc=Py_ssize_t, size=Py_ssize_t, slot=int, s=int, out=list,
               a=Py_ssize_t, first_key=Py_ssize_t, nkeys=Py_ssize_t, first=Py_ssize_t, first_size=Py_ssize_t,
               p=Py_ssize_t)
cpdef list split_commands(bytes payload, Py_ssize_t k)

@cython.final
cdef class ClusterRouting:
    cdef public list links          # the session's own list: its N masters' links, then the nodes'
    cdef object make_link           # the Link class (not cimported: link -> handshake -> cluster)
    cdef public list routes         # per cluster master, its ClusterRoute (at least one)
    cdef public object split        # the round's commands as (bytes, slot); None before the first round
    cdef public Py_ssize_t k        # how many commands the round has
    cdef public Py_ssize_t redirects  # redirections followed in the round (at most MAX_REDIRECTS * k)

    cpdef object route_of(self, Py_ssize_t i)
    @cython.locals(index=Py_ssize_t)
    cpdef Py_ssize_t add_node(self, Py_ssize_t i, object address, bint restart_aware, bint preload) except -1
    cpdef learned(self, Py_ssize_t i, object ranges, double now, bint restart_aware, bint preload)
    cpdef refresh_tried(self, Py_ssize_t i, double now)
    cpdef failed(self, Py_ssize_t i, double now)
    cpdef list due(self, double now)
    cpdef bint stale(self) except -1
    cpdef split_round(self, bytes payload, Py_ssize_t k)
    @cython.locals(j=Py_ssize_t, slot=Py_ssize_t, owner=Py_ssize_t, split=list)
    cpdef list assign(self, double now)
    @cython.locals(parts=list, j=Py_ssize_t)
    cpdef bytes payload(self, object link, object fallbacks)
    @cython.locals(target=Py_ssize_t, j=Py_ssize_t, ask=bint, data=bytes)
    cpdef int redirect(self, object link, object error, bint wait, double io_deadline, double connect_timeout,
                       double now) except -2

cpdef requeue_asking(object link, Py_ssize_t j)
