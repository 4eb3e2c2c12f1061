# Compiled with Cython for the C build (pure-Python mode: tokens.py is the source).
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcpy

cdef bint _COMPILED  # whether this module runs compiled (then new_token formats in C); constant
cdef bytes _random  # compiled: random bytes of the tokens to come, 16 each, from _spent on (fork: new)
cdef Py_ssize_t _spent  # compiled: bytes of _random already handed out

cdef inline bytes _hex_token(bytes prefix, bytes random, Py_ssize_t at):
    """``prefix`` + the 16 bytes of ``random`` from ``at`` as 32 lowercase hex digits, made in C."""
    cdef Py_ssize_t size = PyBytes_GET_SIZE(prefix)
    cdef bytes token = PyBytes_FromStringAndSize(NULL, size + 32)
    cdef char *out = PyBytes_AS_STRING(token)
    cdef const unsigned char *src = <const unsigned char *>PyBytes_AS_STRING(random) + at
    cdef const char *digits = b"0123456789abcdef"
    cdef Py_ssize_t i
    memcpy(out, PyBytes_AS_STRING(prefix), size)
    out += size
    for i in range(16):
        out[2 * i] = digits[src[i] >> 4]
        out[2 * i + 1] = digits[src[i] & 15]
    return token

cdef bytes _prefix  # this process's id: 32 random hex digits + ':', drawn again in a fork child
cdef object _pool  # a deque of unspent tokens (replaced in a fork child)
cdef object _take  # _pool.popleft
cdef list _INDEX  # the hex suffixes b'0'..b'3ff' of batch indexes, made once

@cython.locals(spent=Py_ssize_t, random=bytes)
cpdef bytes new_token()
cpdef list new_tokens(Py_ssize_t count)
cpdef str holder_of(object token)
