# Compiled with Cython for the C build (pure-Python mode: family.py is the source). Only what a hot
# path calls from C is declared: the plain release's script, chosen on every release.
cimport cython

cdef bytes RELEASE, RELEASE_TAGGED
cdef int _OPEN, _CLOSE

@cython.locals(left=Py_ssize_t)
cpdef bytes lean_release(bytes key)
@cython.locals(scripts=set)
cpdef bytes lean_release_of(object keys)
