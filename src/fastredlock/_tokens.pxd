# Compiled with Cython for the C build (pure-Python mode: _tokens.py is the source).
cdef bytes _prefix
cdef object _counter
cdef list _INDEX

cpdef bytes new_token()
cpdef list new_tokens(Py_ssize_t count)
