# Compiled with Cython for the C build (pure-Python mode: tokens.py is the source).
cimport cython

cdef bytes _prefix  # this process's id: 32 random hex digits + ':', drawn again in a fork child
cdef object _pool  # a deque of unspent tokens (replaced in a fork child)
cdef object _take  # _pool.popleft
cdef list _INDEX  # the hex suffixes b'0'..b'3ff' of batch indexes, made once

cpdef bytes new_token()
cpdef list new_tokens(Py_ssize_t count)
cpdef str holder_of(object token)
