cimport cython
from cpython.object cimport PyObject

cdef extern from "Python.h":
    Py_ssize_t _refcnt "Py_REFCNT"(PyObject *o)
    PyObject *_tuple_get "PyTuple_GET_ITEM"(PyObject *t, Py_ssize_t i)
    void _tuple_set "PyTuple_SET_ITEM"(PyObject *t, Py_ssize_t i, PyObject *v)
    void _incref "Py_INCREF"(PyObject *o)
    void _decref "Py_DECREF"(PyObject *o)

@cython.final  # (its freelist is declared in result.py: Cython leaves one declared here out)
cdef class Round:
    cdef public bint ok               # the decision: a quorum said OK (and validity > 0 for acquire/extend)
    cdef public Py_ssize_t successes  # masters whose outcome is OK (0..n)
    cdef public double validity       # seconds left of the TTL after elapsed and drift (0.0: none)
    cdef public double elapsed        # seconds from started to the decision
    cdef public double started        # monotonic time before the round's first write
    cdef public tuple outcomes        # one outcome code per master (PENDING until its answer is read)
    cdef public object details        # None, or a tuple of per-master messages (None: nothing to say)
    cdef public object values         # None, or per master what it returned (a fence, a read), None where not OK

cdef int NO, OK, PENDING  # outcome codes: C ints when compiled (set by the import from .outcomes)
cdef object _OK, _NO, _PENDING  # ... and as objects

cpdef double validity_ms(long long ttl_ms, double elapsed, double drift_factor)
@cython.locals(successes=Py_ssize_t, left=double, rnd=Round)
cpdef Round decide(tuple outcomes, long long ttl_ms, double elapsed, double started, Py_ssize_t quorum,
                   double drift_factor, object details, object values)
cdef inline bint _put_sole(Round rnd, Py_ssize_t i, int code) except -1:
    """Fill in ``rnd.outcomes[i]`` in place where the Round holds the only reference to the tuple
    (built for it by decide(), nobody else sees it: the same as a new tuple, without building one)."""
    cdef PyObject *t = <PyObject *>rnd.outcomes
    cdef PyObject *old
    cdef object value
    if _refcnt(t) != 1:
        return False
    value = code
    old = _tuple_get(t, i)
    _incref(<PyObject *>value)
    _tuple_set(t, i, <PyObject *>value)
    _decref(old)
    return True

@cython.locals(items=list, outcomes=tuple)
cpdef set_outcome(Round rnd, Py_ssize_t i, int code, object detail, object value)
@cython.locals(rnd=Round)
cpdef settle_sink(object sink, Py_ssize_t i, int code, object detail, object value)
