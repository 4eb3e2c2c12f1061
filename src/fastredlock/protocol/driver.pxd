cimport cython
from .session cimport Session
from .link cimport Link

cdef double _PACE_EXPIRED  # Session.pace's answer when deadlines passed and were expired (-2.0)
cdef int READY_OVER, READY_WATCH, READY_IDLE  # ready()'s answer bits: 1, 2, 4

cdef class Driver:
    cdef readonly Session _session   # the round state machine; set once by __init__, never replaced
    cdef readonly list _links        # _session.links itself: masters' links, then cluster nodes' (appended)
    cdef readonly Py_ssize_t n       # masters (== _session.n); links past n are cluster nodes
    cdef readonly Py_ssize_t quorum  # n // 2 + 1
    cdef readonly bint restart_aware  # new connections read the master's uptime (restart-aware voting)
    cdef object _grace               # restart_grace_ms as last set (the session holds it as a double)
    cdef public bint _sentinels      # some link asks sentinels before it connects (set by the twin)
    cdef bint _stepped               # inside start(): run_round returns once the commands are sent
    cdef public Py_ssize_t _opened   # sockets opened or closed so far; only grows (the twin counts)
    cdef Py_ssize_t _seen            # _opened when watched() last told the caller (<= _opened)
    cdef public object on_close      # on_close(i, fd) before link i's socket closes, or None
    cdef public bint _warm           # the twin's last wait found a socket ready (its next one looks first)

    cpdef double clock(self) except? -1.0
    cpdef carry_out(self, Py_ssize_t i)
    cpdef receive(self, Py_ssize_t i)
    cpdef serve(self, Py_ssize_t i, bint readable, bint writable)
    cpdef wait_and_serve(self, double wait_ms)
    cpdef bint is_open(self, Py_ssize_t i) except -1
    cpdef tuple writing(self)
    cpdef bint any_writing(self) except -1
    cpdef bint asks_sentinels(self, Py_ssize_t i) except -1
    cpdef refresh_routes(self, double now)
    cpdef run_script(self, int kind, object sha, object script, object args, long long ttl_ms, bint wait)
    cpdef list run_reads(self, object commands)
    @cython.locals(session=Session, link=Link, alive=bint)
    cpdef bint hand_replies(self, Py_ssize_t i, object reader, object reply_error, double now) except -1

    cpdef list run_round(self, int kind, Py_ssize_t k, Py_ssize_t rows, bytes payload, bint script,
                         object make_fallbacks, object ttls_ms, bint wait, object native)
    cdef object run_round1(self, int kind, Py_ssize_t k, bytes payload, bint script, object make_fallbacks,
                           object ttl_ms, bint wait, object native)
    @cython.locals(session=Session, first=double, wait_ms=double)
    cdef bint _drive(self, int kind, Py_ssize_t k, Py_ssize_t rows, bytes payload, bint script,
                     object make_fallbacks, object ttls_ms, bint wait, object native) except -1
    @cython.locals(links=list, i=Py_ssize_t, link=Link)
    cdef _send_round(self)
    @cython.locals(links=list, i=Py_ssize_t, link=Link)
    cdef _serve_redirected(self)
    @cython.locals(i=Py_ssize_t)
    cdef _carry_out_all(self)
    @cython.locals(session=Session, links=list, i=Py_ssize_t, now=double, link=Link, due=list)
    cdef _tidy(self)
    @cython.locals(session=Session, code=int)
    cpdef int ready(self, Py_ssize_t i, bint readable, bint writable) except -1
    # what an event loop's driver (asyncio.loop_io) calls every round, as C calls
    cpdef start_call(self, object method, tuple args)
    cpdef tuple watched(self)
    cpdef double next_deadline(self) except? -3.0
    cpdef list finish(self)
    cpdef double owed_deadline(self) except? -3.0
    @cython.locals(links=list, i=Py_ssize_t, link=Link)
    cpdef sweep(self)
    @cython.locals(session=Session, end=double, due=double, now=double)
    cpdef settle(self, object timeout=*, object until=*)
