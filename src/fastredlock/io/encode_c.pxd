# The C encoder of the commands of a round (see _encode_c.pyx); cimported by the C I/O twin.
cimport cython

cdef extern from "encode_c.h":
    Py_ssize_t frl_fmt_ll(char *p, long long v) nogil
    Py_ssize_t frl_encoded_size(int nargs, const Py_ssize_t *lens) nogil
    Py_ssize_t frl_encode(char *out, int argc, int nargs, const char **argv, const Py_ssize_t *lens) nogil
    Py_ssize_t frl_head_len(int argc, int nargs, const Py_ssize_t *lens) nogil

cdef void *_grow(void *ptr, size_t size) except NULL
cdef bytes native_release1(bytes key, bytes token, bint tagged, bint delex)

@cython.final
cdef class Commands:
    cdef Py_ssize_t ncmd              # commands of the round
    cdef Py_ssize_t kcap              # commands off can hold (off has kcap + 1 entries; >= ncmd)
    cdef char *buf                    # the commands, back to back
    cdef Py_ssize_t cap               # buf's size in bytes (>= off[ncmd])
    cdef Py_ssize_t *off              # where command j starts (off[ncmd]: the end)
    cdef bytes script                 # the commands are EVALSHA of this script (None: not a script)
    cdef Py_ssize_t sha_head          # a script command's bytes through its SHA (its EVAL form replaces them)
    cdef int argc                     # a script round's arguments per command (its EVAL form has as many)
    cdef object make_fallbacks        # the bound method that derives their EVAL forms

    cdef bytes payload(self)
    cdef int reserve(self, Py_ssize_t k, Py_ssize_t size) except -1
    cdef int one(self, int argc, const char **argv, Py_ssize_t *lens, bytes script) except -1
    cdef int parts(self, list parts, bytes script) except -1
    cdef int commands(self, list args) except -1
    cdef int script1(self, bytes sha, bytes script, const char *numkeys, int nargs,
                     const char **args, const Py_ssize_t *arg_lens) except -1
    cdef int acquire(self, bytes key, bytes token, long long ttl_ms) except -1
    cdef int release(self, bytes key, bytes token, bytes script) except -1
    cdef int _key_token(self, bytes sha, bytes script, bytes key, bytes token) except -1
    cdef int release_quiet(self, bytes key, bytes token) except -1
    cdef int extend(self, bytes key, bytes token, long long ttl_ms) except -1
    cdef int acquire_fenced(self, bytes key, bytes fence_key, bytes token, long long ttl_ms) except -1
    cdef int write_fence(self, bytes key, bytes fence_key, bytes token, bytes fence, bytes retention) except -1
    cdef int acquire_many(self, list keys, list tokens, long long ttl_ms) except -1
    cdef int release_many(self, list keys, list tokens) except -1
    cdef int release_each(self, list keys, list tokens, bytes script) except -1
    cdef int extend_many(self, list keys, list tokens, list ttls_ms) except -1
    cdef int _each(self, bytes sha, bytes script, list keys, list tokens, list ttls_ms) except -1
