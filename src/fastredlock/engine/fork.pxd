# Compiled with Cython for the C build (pure-Python mode: fork.py is the source): the lock and the
# executor read the fork generation with one C call instead of a module attribute lookup.
cdef Py_ssize_t _generation  # forks between this process and the one that imported fastredlock; +1 in each fork child

cpdef Py_ssize_t fork_generation() noexcept
