# Compiled with Cython for the C build (pure-Python mode: lock.py is the source); the pure
# install interprets lock.py. The handle's fields are C struct members shared by the sync and the
# asyncio Lock (both subclasses of LockBase), so the plans and the front-ends' hot paths read them
# as C fields.
cimport cython
from ..engine.executor cimport Executor
from ..engine.tokens cimport new_token
from ..engine.fork cimport fork_generation
from ..engine.checks cimport key_of
from ..protocol.result cimport Round
from cpython.time cimport monotonic as _c_now  # time.monotonic's clock, read in C

cdef bint _COMPILED  # whether this module runs compiled (then the hot path reads the clock in C); constant
cdef tuple _last_key  # (prefix, name, key) of the last handle made (see lock.py)

@cython.locals(last=tuple)
cdef bytes _key(object prefix, object name)

cdef class LockBase:
    cdef public object _client  # the client that made the handle (its options); set once
    cdef public Executor _executor  # the client's executor (every round goes through it); set once
    cdef public object name  # the name as given; set once
    cdef public bytes key  # the client's prefix + the name, as bytes (the masters' key); set once
    cdef public double ttl  # seconds each acquisition asks for; extend/adopt with a ttl change it
    cdef public object _ttl_ms  # ttl in milliseconds (checked by the executor); changes with ttl
    cdef public object token  # the current acquisition's token; None when not held (a release clears it first)
    cdef public double _valid_until  # monotonic time the validity ends; 0.0 while not held or _lost
    cdef public object _last  # the handle's latest round (for outcomes()); None before the first
    cdef public object fence  # the current acquisition's fencing token (fencing only), else None
    cdef public bint fencing  # acquisitions take a fencing token (two rounds); set once
    cdef public bint auto_extend  # the watchdog renews the lock while it is held; set once
    cdef public object max_hold  # seconds after acquiring when renewals stop, or None; set once
    cdef public object on_lost  # called with the handle when a held lock is lost, or None; set once
    cdef public bint _lost  # set True only by _lose_plan; cleared by _reset and by the release that reports it
    cdef public double _acquired_at  # monotonic time of the latest acquisition; 0.0 before the first
    cdef public Py_ssize_t _generation  # the fork generation of the latest acquisition; a fork child may not release it
    cdef public object _carrier  # the executor's carrier of the held acquisition (release/extend use it), else None
    cdef public bint _family_kind # a kind of the lock family (fastredlock.handles.family): its rounds are its plan's
    cdef public object _deadline  # the acquisition under way: its deadline (monotonic) or None
    cdef public double _started   # ... and when it began (0.0 without an on_event hook)
    cdef public bint _was_lost    # the release under way found the lock lost already
    cdef public object _chosen    # the token the caller chose for the acquisition under way, or None
    cdef object __weakref__  # handles are weakly referable (as the pure class's __slots__ make them)

    @cython.locals(executor=Executor)
    cpdef _setup(self, object client, object name, object ttl, bint auto_extend, object max_hold, object on_lost,
                 bint fencing)
    @cython.locals(executor=Executor)
    cpdef object _acquire_begin(self, bint blocking, object timeout, object token)
    @cython.locals(r=Round)
    cpdef bint _took(self, object token, object rnd, object carrier) except -1
    cpdef _acquired(self, object token, Py_ssize_t attempts)
    @cython.locals(now=double)
    cpdef bytes _release_begin(self)
    @cython.locals(executor=Executor, r=Round)
    cpdef bint _release_confirmed(self, object rnd, bint ok) except -1
    cpdef _reset(self)
    cpdef bytes _require_token(self)

@cython.locals(lock=LockBase, result=list, j=Py_ssize_t, valid_until=double, have_validity=bint, generation=Py_ssize_t)
cpdef list held_locks(object cls, object client, list names, list keys, double ttl, object ttl_ms, list tokens,
                       list rounds, list carriers)
@cython.locals(lock=LockBase, handles=list, keys=list, tokens=list, carriers=list)
cpdef tuple _release_args_of(object locks)
@cython.locals(lock=LockBase, j=Py_ssize_t)
cpdef _released_all(list handles, object rounds, bint report)
