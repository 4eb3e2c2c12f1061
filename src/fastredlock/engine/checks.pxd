# Compiled with Cython for the C build (pure-Python mode: checks.py is the source): a lock handle
# made in a hot loop checks its name with one C call.
cimport cython

@cython.locals(raw=bytes, key=bytes)
cpdef bytes key_of(object prefix, object name)
