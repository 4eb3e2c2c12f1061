# Compiled with Cython for the C build (pure-Python mode: checks.py is the source): a lock handle
# made in a hot loop checks its name with one C call.
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcpy

cdef extern from "Python.h":
    # (declared without an exception value: a NULL is handled below, the error cleared)
    const char *_frl_utf8 "PyUnicode_AsUTF8AndSize"(object text, Py_ssize_t *size)
    void PyErr_Clear()

cdef bint _COMPILED  # whether this module runs compiled (then key_of makes a str name's key in C); constant

cdef inline object _str_key(bytes prefix, str name, Py_ssize_t limit):
    """``prefix`` + ``name`` as UTF-8, made in one allocation (an ASCII str's UTF-8 is its own
    data; another's is cached on it); None if the name is empty, holds lone surrogates, or the key
    would be longer than ``limit``: key_of's general path then raises or encodes it."""
    cdef Py_ssize_t size = 0
    cdef const char *raw = _frl_utf8(name, &size)
    if raw == NULL:
        PyErr_Clear()
        return None
    cdef Py_ssize_t head = PyBytes_GET_SIZE(prefix)
    if size == 0 or head + size > limit:
        return None
    cdef bytes key = PyBytes_FromStringAndSize(NULL, head + size)
    cdef char *out = PyBytes_AS_STRING(key)
    memcpy(out, PyBytes_AS_STRING(prefix), head)
    memcpy(out + head, raw, size)
    return key

@cython.locals(raw=bytes, key=bytes, fast=object)
cpdef bytes key_of(object prefix, object name)
