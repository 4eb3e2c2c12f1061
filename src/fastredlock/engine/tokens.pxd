# Compiled with Cython for the C build (pure-Python mode: tokens.py is the source).
cimport cython

cdef str _prefix
cdef object _counter
cdef list _INDEX

@cython.locals(count=cython.ulonglong)
cpdef bytes new_token()
cpdef list new_tokens(Py_ssize_t count)
cpdef str holder_of(object token)
