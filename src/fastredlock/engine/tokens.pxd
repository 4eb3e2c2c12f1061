# Compiled with Cython for the C build (pure-Python mode: tokens.py is the source).
cimport cython

cdef str _prefix  # this process's secret: 32 random hex digits + ':', drawn again in a fork child
cdef object _counter  # itertools.count(1): the counter of tokens minted with _prefix (reset with it)
cdef list _INDEX  # the hex suffixes b'0'..b'3ff' of batch indexes, made once

@cython.locals(count=cython.ulonglong)
cpdef bytes new_token()
cpdef list new_tokens(Py_ssize_t count)
cpdef str holder_of(object token)
