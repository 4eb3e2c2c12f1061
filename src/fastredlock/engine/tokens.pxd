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
    # the two hex digits of byte b at 2 * b (a C string literal)
    cdef const char *pairs = (
        b"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        b"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
        b"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
        b"606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
        b"808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
        b"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        b"c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
        b"e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"
    )
    cdef Py_ssize_t i
    memcpy(out, PyBytes_AS_STRING(prefix), size)
    out += size
    for i in range(16):
        memcpy(out + 2 * i, pairs + 2 * src[i], 2)
    return token

cdef bytes _prefix  # this process's id: 32 random hex digits + ':', drawn again in a fork child
cdef object _pool  # a deque of unspent tokens (replaced in a fork child)
cdef object _take  # _pool.popleft
cdef list _INDEX  # the hex suffixes b'0'..b'3ff' of batch indexes, made once

@cython.locals(spent=Py_ssize_t, random=bytes)
cpdef bytes new_token()
cpdef list new_tokens(Py_ssize_t count)
cpdef str holder_of(object token)
