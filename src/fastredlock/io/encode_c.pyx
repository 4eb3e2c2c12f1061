# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The C encoder of a round's commands: RESP straight from the key, token and TTL bytes into one
reusable buffer, and the EVAL fallback of an EVALSHA round derived from those bytes when asked.

What each operation sends is the protocol's business (:mod:`fastredlock.protocol.scripts` and the
command kinds); this module only writes the bytes, fast, for the C I/O twin
(:mod:`fastredlock.io.core_c`). The pure twin encodes with :func:`fastredlock.protocol.resp.encode_command`.
"""
cimport cython
from libc.string cimport memcpy
from libc.stdlib cimport malloc, realloc, free
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize

from ..protocol.scripts import (
    ACQUIRE_ALL, ACQUIRE_ALL_SHA, EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE,
    FENCED_ACQUIRE_SHA, QUIET, RELEASE, RELEASE_FULL, RELEASE_FULL_SHA, RELEASE_MANY, RELEASE_MANY_SHA, RELEASE_SHA,
    RELEASE_TAGGED, RELEASE_TAGGED_SHA, RELEASE_CLUSTER, RELEASE_CLUSTER_SHA,
)

cdef bytes _RELEASE = RELEASE, _RELEASE_SHA = RELEASE_SHA, _QUIET = QUIET
cdef bytes _RELEASE_FULL = RELEASE_FULL, _RELEASE_FULL_SHA = RELEASE_FULL_SHA
cdef bytes _RELEASE_TAGGED = RELEASE_TAGGED, _RELEASE_TAGGED_SHA = RELEASE_TAGGED_SHA
cdef bytes _RELEASE_CLUSTER = RELEASE_CLUSTER, _RELEASE_CLUSTER_SHA = RELEASE_CLUSTER_SHA
cdef bytes _EXTEND = EXTEND, _EXTEND_SHA = EXTEND_SHA
cdef bytes _FENCED_ACQUIRE = FENCED_ACQUIRE, _FENCED_ACQUIRE_SHA = FENCED_ACQUIRE_SHA
cdef bytes _FENCE_WRITE = FENCE_WRITE, _FENCE_WRITE_SHA = FENCE_WRITE_SHA
cdef bytes _ACQUIRE_ALL = ACQUIRE_ALL, _ACQUIRE_ALL_SHA = ACQUIRE_ALL_SHA
cdef bytes _RELEASE_MANY = RELEASE_MANY, _RELEASE_MANY_SHA = RELEASE_MANY_SHA


cdef void *_grow(void *ptr, size_t size) except NULL:
    """``realloc``, raising MemoryError on failure (``ptr`` is then left as it was)."""
    cdef void *buf = realloc(ptr, size)
    if buf == NULL:
        raise MemoryError()
    return buf


cdef inline void _arg(const char **args, Py_ssize_t *lens, int m, bytes value) noexcept:
    """Point argument ``m`` of a command at ``value``'s bytes (it must outlive the encoding)."""
    args[m] = PyBytes_AS_STRING(value)
    lens[m] = PyBytes_GET_SIZE(value)


cdef inline Py_ssize_t _digits(Py_ssize_t n) noexcept nogil:
    """Decimal digits of ``n`` >= 0."""
    cdef Py_ssize_t d = 1
    while n >= 10:
        n = n // 10
        d += 1
    return d


cdef inline char *_bulk(char *p, const char *data, Py_ssize_t n) noexcept nogil:
    """Write ``$<n>\\r\\n<data>\\r\\n`` at ``p``; return the end."""
    p[0] = b'$'
    p += 1 + frl_fmt_ll(p + 1, n)
    p[0] = b'\r'; p[1] = b'\n'
    memcpy(p + 2, data, n)
    p += 2 + n
    p[0] = b'\r'; p[1] = b'\n'
    return p + 2


cdef bytes native_release1(bytes key, bytes token, bint tagged, bint delex):
    """One plain release's native form, built in C: ``DELIFEQ key token`` (``delex``: ``DELEX key
    IFEQ token``) and ``EXISTS`` of the key's wake mark (``key:wake`` where ``tagged``, else
    ``{key}:wake``), back to back: the bytes of :func:`fastredlock.protocol.handshake.native_release`."""
    cdef Py_ssize_t lk = PyBytes_GET_SIZE(key), lt = PyBytes_GET_SIZE(token)
    cdef Py_ssize_t lm = lk + (5 if tagged else 7)
    cdef Py_ssize_t size = ((15 + 10) if delex else 17) + 16
    size += 5 + _digits(lk) + lk + 5 + _digits(lt) + lt + 5 + _digits(lm) + lm
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef char *p = PyBytes_AS_STRING(out)
    if delex:
        memcpy(p, b"*4\r\n$5\r\nDELEX\r\n", 15)
        p = _bulk(p + 15, PyBytes_AS_STRING(key), lk)
        memcpy(p, b"$4\r\nIFEQ\r\n", 10)
        p += 10
    else:
        memcpy(p, b"*3\r\n$7\r\nDELIFEQ\r\n", 17)
        p = _bulk(p + 17, PyBytes_AS_STRING(key), lk)
    p = _bulk(p, PyBytes_AS_STRING(token), lt)
    memcpy(p, b"*2\r\n$6\r\nEXISTS\r\n$", 17)
    p += 17 + frl_fmt_ll(p + 17, lm)
    p[0] = b'\r'; p[1] = b'\n'
    p += 2
    if tagged:
        memcpy(p, PyBytes_AS_STRING(key), lk)
        memcpy(p + lk, b":wake\r\n", 7)
    else:
        p[0] = b'{'
        memcpy(p + 1, PyBytes_AS_STRING(key), lk)
        memcpy(p + 1 + lk, b"}:wake\r\n", 8)
    return out


def command_bytes(str op, *args):
    """The payload and EVAL fallbacks :class:`Commands` encodes for ``op`` (``"acquire"``:
    key, token, ttl_ms; ``"release"``: key, token and the script or None; ``"release_quiet"``:
    key, token), for the tests (they compare them with :func:`fastredlock.protocol.resp.encode_command`)."""
    cdef Commands enc = Commands()
    if op == "acquire":
        enc.acquire(args[0], args[1], args[2])
    elif op == "release":
        enc.release(args[0], args[1], args[2])
    elif op == "release_quiet":
        enc.release_quiet(args[0], args[1])
    else:
        raise ValueError(op)
    return enc.payload(), (enc.fallbacks() if enc.script is not None else None)


def native_release_bytes(bytes key, bytes token, bint tagged, bint delex):
    """:func:`native_release1` for the tests (they compare it with the protocol's bytes)."""
    return native_release1(key, token, tagged, delex)


@cython.final
cdef class Commands:
    """The encoded commands of the round in progress (one per core, reused round after round)."""

    def __cinit__(self):
        self.buf = NULL
        self.off = NULL
        self.make_fallbacks = self.fallbacks
        self.reserve(1, 512)

    def __dealloc__(self):
        free(self.buf)
        free(self.off)

    cdef bytes payload(self):
        """The round's commands, back to back, as one bytes object (what each master is sent)."""
        return PyBytes_FromStringAndSize(self.buf, self.off[self.ncmd])

    cdef int reserve(self, Py_ssize_t k, Py_ssize_t size) except -1:
        """Room for k commands of ``size`` encoded bytes in all."""
        cdef Py_ssize_t cap
        if size > self.cap or self.buf == NULL:
            cap = size if size > 512 else 512
            self.buf = <char *>_grow(self.buf, cap)
            self.cap = cap
        if k > self.kcap or self.off == NULL:
            self.off = <Py_ssize_t *>_grow(self.off, (k + 1) * sizeof(Py_ssize_t))
            self.kcap = k
        return 0

    cdef int one(self, int argc, const char **argv, Py_ssize_t *lens, bytes script) except -1:
        """The round's only command: ``argv``; ``script``: it is EVALSHA of that script."""
        self.reserve(1, frl_encoded_size(argc, lens))
        self.off[0] = 0
        self.off[1] = frl_encode(self.buf, argc, argc, argv, lens)
        self.ncmd = 1
        self.script = script
        if script is not None:
            self.argc = argc
            self.sha_head = frl_head_len(argc, 2, lens)
        return 0

    cdef int parts(self, list parts, bytes script) except -1:
        """The round's only command, from a list of bytes (for variable-length commands)."""
        cdef Py_ssize_t argc = len(parts), i
        cdef const char **argv = <const char **>malloc((argc + 1) * sizeof(char *))
        cdef Py_ssize_t *lens = <Py_ssize_t *>malloc((argc + 1) * sizeof(Py_ssize_t))
        try:
            if argv == NULL or lens == NULL:
                raise MemoryError()
            for i in range(argc):
                argv[i] = PyBytes_AS_STRING(parts[i])
                lens[i] = PyBytes_GET_SIZE(parts[i])
            self.one(<int>argc, argv, lens, script)
        finally:
            free(argv)
            free(lens)
        return 0

    def fallbacks(self):
        """``EVAL <script> ...`` for every command of the round, derived from the EVALSHA bytes
        (asked for by the session on the first NOSCRIPT, or for a master nobody waits for)."""
        cdef const char *argv[2]
        cdef Py_ssize_t lens[2]
        cdef Py_ssize_t head, tail, j, pos
        cdef char *out
        cdef list result = []
        argv[0] = b"EVAL"; lens[0] = 4
        argv[1] = PyBytes_AS_STRING(self.script); lens[1] = PyBytes_GET_SIZE(self.script)
        head = frl_encoded_size(2, lens)
        for j in range(self.ncmd):
            tail = self.off[j + 1] - self.off[j] - self.sha_head
            out = <char *>_grow(NULL, head + tail)
            try:
                pos = frl_encode(out, self.argc, 2, argv, lens)
                memcpy(out + pos, self.buf + self.off[j] + self.sha_head, tail)
                result.append(PyBytes_FromStringAndSize(out, pos + tail))
            finally:
                free(out)
        return result

    cdef int commands(self, list args) except -1:
        """Plain commands (not scripts), back to back: ``args[j]`` is command j's list of bytes."""
        cdef Py_ssize_t kk = len(args), j, m, argc, size = 0, pos = 0, most = 0
        cdef tuple cmd
        cdef const char **argv
        cdef Py_ssize_t *lens
        for j in range(kk):
            argc = len(<tuple>args[j])
            if argc > most:
                most = argc
        argv = <const char **>malloc((most + 1) * sizeof(char *))
        lens = <Py_ssize_t *>malloc((most + 1) * sizeof(Py_ssize_t))
        try:
            if argv == NULL or lens == NULL:
                raise MemoryError()
            for j in range(kk):
                cmd = <tuple>args[j]
                for m in range(len(cmd)):
                    lens[m] = PyBytes_GET_SIZE(<bytes>cmd[m])
                size += frl_encoded_size(<int>len(cmd), lens)
            self.reserve(kk, size)
            for j in range(kk):
                cmd = <tuple>args[j]
                argc = len(cmd)
                for m in range(argc):
                    _arg(argv, lens, <int>m, <bytes>cmd[m])
                self.off[j] = pos
                pos += frl_encode(self.buf + pos, <int>argc, <int>argc, argv, lens)
        finally:
            free(argv)
            free(lens)
        self.off[kk] = pos
        self.ncmd = kk
        self.script = None
        return 0

    # --- what each operation sends ---------------------------------------------------------------
    cdef int script1(self, bytes sha, bytes script, const char *numkeys, int nargs,
                     const char **args, const Py_ssize_t *arg_lens) except -1:
        """``EVALSHA sha numkeys args...`` as the round's only command (EVAL ``script`` is its
        fallback). At most 5 args."""
        cdef const char *argv[8]
        cdef Py_ssize_t lens[8]
        cdef int m
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(sha); lens[1] = PyBytes_GET_SIZE(sha)
        argv[2] = numkeys; lens[2] = 1
        for m in range(nargs):
            argv[3 + m] = args[m]
            lens[3 + m] = arg_lens[m]
        return self.one(3 + nargs, argv, lens, script)

    cdef int acquire(self, bytes key, bytes token, long long ttl_ms) except -1:
        """``SET key token NX PX ttl_ms`` (written straight: its fixed parts are constants)."""
        cdef char ttl[24]
        cdef Py_ssize_t lk = PyBytes_GET_SIZE(key), lt = PyBytes_GET_SIZE(token)
        cdef Py_ssize_t ln = frl_fmt_ll(ttl, ttl_ms)
        cdef char *p
        self.reserve(1, 13 + 16 + 3 * 25 + lk + lt + ln)
        p = self.buf
        memcpy(p, b"*6\r\n$3\r\nSET\r\n", 13)
        p = _bulk(p + 13, PyBytes_AS_STRING(key), lk)
        p = _bulk(p, PyBytes_AS_STRING(token), lt)
        memcpy(p, b"$2\r\nNX\r\n$2\r\nPX\r\n", 16)
        p = _bulk(p + 16, ttl, ln)
        self.off[0] = 0
        self.off[1] = p - self.buf
        self.ncmd = 1
        self.script = None
        return 0

    cdef int release(self, bytes key, bytes token, bytes script) except -1:
        """The plain lock's owner-checked delete: ``script`` is ``RELEASE`` or ``RELEASE_TAGGED``
        (:func:`fastredlock.protocol.family.lean_release`), ``RELEASE_CLUSTER`` (a cluster's), or
        None: ``RELEASE_FULL``."""
        if script is _RELEASE:
            return self._key_token(_RELEASE_SHA, _RELEASE, key, token)
        if script is _RELEASE_TAGGED:
            return self._key_token(_RELEASE_TAGGED_SHA, _RELEASE_TAGGED, key, token)
        if script is _RELEASE_CLUSTER:
            return self._key_token(_RELEASE_CLUSTER_SHA, _RELEASE_CLUSTER, key, token)
        return self._key_token(_RELEASE_FULL_SHA, _RELEASE_FULL, key, token)

    cdef int _key_token(self, bytes sha, bytes script, bytes key, bytes token) except -1:
        """``EVALSHA sha 1 key token`` as the round's only command (:meth:`script1`'s bytes,
        written straight)."""
        cdef Py_ssize_t lk = PyBytes_GET_SIZE(key), lt = PyBytes_GET_SIZE(token), ls = PyBytes_GET_SIZE(sha)
        cdef char *p
        self.reserve(1, 17 + 7 + 3 * 25 + ls + lk + lt)
        p = self.buf
        memcpy(p, b"*5\r\n$7\r\nEVALSHA\r\n", 17)
        p = _bulk(p + 17, PyBytes_AS_STRING(sha), ls)
        self.sha_head = p - self.buf
        memcpy(p, b"$1\r\n1\r\n", 7)
        p = _bulk(p + 7, PyBytes_AS_STRING(key), lk)
        p = _bulk(p, PyBytes_AS_STRING(token), lt)
        self.off[0] = 0
        self.off[1] = p - self.buf
        self.ncmd = 1
        self.script = script
        self.argc = 5
        return 0

    cdef int release_quiet(self, bytes key, bytes token) except -1:
        """The cleanup of a failed attempt: ``RELEASE_FULL`` with ``QUIET`` (it gives no turn and
        wakes nobody: the attempt never held the lock)."""
        cdef const char *args[3]
        cdef Py_ssize_t lens[3]
        _arg(args, lens, 0, key)
        _arg(args, lens, 1, token)
        _arg(args, lens, 2, _QUIET)
        return self.script1(_RELEASE_FULL_SHA, _RELEASE_FULL, b"1", 3, args, lens)

    cdef int extend(self, bytes key, bytes token, long long ttl_ms) except -1:
        """The owner-checked ``PEXPIRE`` (``EXTEND``)."""
        cdef const char *args[3]
        cdef Py_ssize_t lens[3]
        cdef char ttl[24]
        _arg(args, lens, 0, key)
        _arg(args, lens, 1, token)
        args[2] = ttl; lens[2] = frl_fmt_ll(ttl, ttl_ms)
        return self.script1(_EXTEND_SHA, _EXTEND, b"1", 3, args, lens)

    cdef int acquire_fenced(self, bytes key, bytes fence_key, bytes token, long long ttl_ms) except -1:
        """``SET NX PX`` and read the fence counter, atomically (``FENCED_ACQUIRE``)."""
        cdef const char *args[4]
        cdef Py_ssize_t lens[4]
        cdef char ttl[24]
        _arg(args, lens, 0, key)
        _arg(args, lens, 1, fence_key)
        _arg(args, lens, 2, token)
        args[3] = ttl; lens[3] = frl_fmt_ll(ttl, ttl_ms)
        return self.script1(_FENCED_ACQUIRE_SHA, _FENCED_ACQUIRE, b"2", 4, args, lens)

    cdef int write_fence(self, bytes key, bytes fence_key, bytes token, bytes fence, bytes retention) except -1:
        """Owner-checked ``counter = max(counter, fence)`` (``FENCE_WRITE``)."""
        cdef const char *args[5]
        cdef Py_ssize_t lens[5]
        _arg(args, lens, 0, key)
        _arg(args, lens, 1, fence_key)
        _arg(args, lens, 2, token)
        _arg(args, lens, 3, fence)
        _arg(args, lens, 4, retention)
        return self.script1(_FENCE_WRITE_SHA, _FENCE_WRITE, b"2", 5, args, lens)

    cdef int acquire_many(self, list keys, list tokens, long long ttl_ms) except -1:
        """``SET keys[j] tokens[j] NX PX ttl_ms`` for every j, back to back."""
        cdef Py_ssize_t kk = len(keys), j, size = 0, pos = 0
        cdef const char *argv[6]
        cdef Py_ssize_t lens[6]
        cdef char ttl[24]
        argv[0] = b"SET"; lens[0] = 3
        argv[3] = b"NX"; lens[3] = 2
        argv[4] = b"PX"; lens[4] = 2
        argv[5] = ttl; lens[5] = frl_fmt_ll(ttl, ttl_ms)
        for j in range(kk):
            lens[1] = PyBytes_GET_SIZE(<bytes>keys[j])
            lens[2] = PyBytes_GET_SIZE(<bytes>tokens[j])
            size += frl_encoded_size(6, lens)
        self.reserve(kk, size)
        for j in range(kk):
            _arg(argv, lens, 1, <bytes>keys[j])
            _arg(argv, lens, 2, <bytes>tokens[j])
            self.off[j] = pos
            pos += frl_encode(self.buf + pos, 6, 6, argv, lens)
        self.off[kk] = pos
        self.ncmd = kk
        self.script = None
        return 0

    cdef int release_many(self, list keys, list tokens) except -1:
        """One ``RELEASE_MANY`` call for all the keys (two or more)."""
        cdef list parts = [b"EVALSHA", _RELEASE_MANY_SHA, b"%d" % len(keys)]
        parts.extend(keys)
        parts.extend(tokens)
        return self.parts(parts, _RELEASE_MANY)

    cdef int release_each(self, list keys, list tokens, bytes script) except -1:
        """The release ``script`` (as for :meth:`release`: ``RELEASE``, ``RELEASE_TAGGED``,
        ``RELEASE_CLUSTER``, or None: ``RELEASE_FULL``) of keys[j] holding tokens[j], one script call per key, back to
        back (a cluster: the keys of a batch are in different slots, so no script may take them
        all)."""
        if script is _RELEASE:
            return self._each(_RELEASE_SHA, _RELEASE, keys, tokens, None)
        if script is _RELEASE_TAGGED:
            return self._each(_RELEASE_TAGGED_SHA, _RELEASE_TAGGED, keys, tokens, None)
        if script is _RELEASE_CLUSTER:
            return self._each(_RELEASE_CLUSTER_SHA, _RELEASE_CLUSTER, keys, tokens, None)
        return self._each(_RELEASE_FULL_SHA, _RELEASE_FULL, keys, tokens, None)

    cdef int extend_many(self, list keys, list tokens, list ttls_ms) except -1:
        """``EXTEND`` of keys[j] to ttls_ms[j] for every j, back to back."""
        return self._each(_EXTEND_SHA, _EXTEND, keys, tokens, ttls_ms)

    cdef int _each(self, bytes sha, bytes script, list keys, list tokens, list ttls_ms) except -1:
        """``EVALSHA sha 1 keys[j] tokens[j] [ttls_ms[j]]`` for every j, back to back."""
        cdef Py_ssize_t kk = len(keys), j, size = 0, pos = 0
        cdef int argc = 5 if ttls_ms is None else 6
        cdef const char *argv[6]
        cdef Py_ssize_t lens[6]
        cdef char ttl_buf[24]
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(sha); lens[1] = PyBytes_GET_SIZE(sha)
        argv[2] = b"1"; lens[2] = 1
        argv[5] = ttl_buf
        lens[5] = 20
        for j in range(kk):
            lens[3] = PyBytes_GET_SIZE(<bytes>keys[j])
            lens[4] = PyBytes_GET_SIZE(<bytes>tokens[j])
            size += frl_encoded_size(argc, lens)
        self.reserve(kk, size)
        for j in range(kk):
            _arg(argv, lens, 3, <bytes>keys[j])
            _arg(argv, lens, 4, <bytes>tokens[j])
            if ttls_ms is not None:
                lens[5] = frl_fmt_ll(ttl_buf, <long long>ttls_ms[j])
            self.off[j] = pos
            pos += frl_encode(self.buf + pos, argc, argc, argv, lens)
        self.off[kk] = pos
        self.ncmd = kk
        self.script = script
        self.argc = argc
        self.sha_head = frl_head_len(argc, 2, lens)
        return 0
