# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The C I/O twin: N non-blocking fds, ``poll(2)`` without the GIL, and a fast reply parser, driving
the compiled protocol session.

Every rule of a round (what it writes, when a master's answer decides, validity, cool-downs,
restart-aware voting, owed replies, handshake, reply guard and classification) lives in
:mod:`fastredlock.protocol`, which Cython compiles for this build; this module calls it as C
(``cimport``) and does only I/O, exactly as :mod:`fastredlock._io_py` does in Python:

* the connections are plain non-blocking file descriptors (TCP with ``TCP_NODELAY``, or Unix
  sockets) opened with libc ``getaddrinfo``/``socket``/``connect`` (without the GIL);
* the commands of a round are encoded as RESP once, straight from the key/token/ttl bytes, into a
  reusable C buffer; every master normally gets exactly one ``send``. The EVAL fallback of an
  EVALSHA command is derived from the encoded EVALSHA bytes only when the session asks for it;
* the wait is ``poll(2)`` with the GIL released, until the session's next deadline; replies are
  read into a reusable buffer. A fast path recognizes, at the front of a read on a clean
  connection, the exact replies a lock round expects (``+OK``/``$-1`` for SET, ``:1``/``:0`` for
  scripts, ``:n``/``:-1`` for a fenced acquisition) and hands their outcome to the session without
  building a reply object; anything else goes to ``hiredis.Reader`` (one ``feed`` per read);
* time is ``clock_gettime(CLOCK_MONOTONIC)`` (the clock of ``time.monotonic()`` on Linux;
  ``CLOCK_UPTIME_RAW`` on macOS).

A ``Core`` is not thread-safe (the client pools one per concurrent caller) but never holds the GIL
while it waits on the network (nor while it resolves a host name).

Portability: Linux and macOS (POSIX ``poll``). Windows is not supported by this module; there the
package uses the pure core, which ``setup.py``/the wheel configuration decide.
"""

cimport cython
from libc.errno cimport errno, EINTR, EPIPE, ECONNRESET, ECONNABORTED, ENOTCONN
from libc.string cimport memcpy, memcmp
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport ceil
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.exc cimport PyErr_CheckSignals

import os

import hiredis

from .protocol.session cimport Session
from .protocol.link cimport Link
from .protocol import outcomes as _oc
from .protocol import replies as _replies
from .protocol.health import COOLDOWN, MAX_COOLDOWN, Health
from .protocol.result import Round
from .protocol.link import MAX_OWED, STALE_AFTER
from .protocol.resp import MAX_BULK, MAX_LINE
from .protocol.scripts import (
    ACQUIRE_ALL, ACQUIRE_ALL_SHA, EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE,
    FENCED_ACQUIRE_SHA, RELEASE, RELEASE_MANY, RELEASE_MANY_SHA, RELEASE_SHA,
)

__all__ = ["Core", "Health", "Round", "encode_command", "COOLDOWN", "MAX_COOLDOWN", "MAX_BULK",
           "MAX_LINE", "MAX_OWED", "STALE_AFTER"]

cdef extern from *:
    """
    #include <sys/types.h>
    #include <sys/socket.h>
    #include <sys/un.h>
    #include <netinet/in.h>
    #include <netinet/tcp.h>
    #include <netdb.h>
    #include <poll.h>
    #include <fcntl.h>
    #include <unistd.h>
    #include <errno.h>
    #include <string.h>
    #include <stddef.h>
    #include <time.h>

    #ifndef MSG_NOSIGNAL  /* macOS: SO_NOSIGPIPE is set on the socket instead */
    #define MSG_NOSIGNAL 0
    #endif

    /* The monotonic clock of time.monotonic(), in seconds, computed as CPython does. */
    static double frl_now(void) {
        struct timespec ts;
    #if defined(__APPLE__) && defined(CLOCK_UPTIME_RAW)
        clock_gettime(CLOCK_UPTIME_RAW, &ts);
    #else
        clock_gettime(CLOCK_MONOTONIC, &ts);
    #endif
        return (double)((long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec) / 1e9;
    }

    /* Non-blocking, close-on-exec, no SIGPIPE; TCP_NODELAY for TCP. 0, or -1 with *err. */
    static int frl_prepare(int fd, int tcp, int *err) {
        int flags, one = 1;
        if (tcp && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) goto fail;
    #ifdef SO_NOSIGPIPE
        if (setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one) < 0) goto fail;
    #endif
        flags = fcntl(fd, F_GETFD);
        if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) goto fail;
        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) goto fail;
        return 0;
    fail:
        *err = errno;
        return -1;
    }

    /* Start a non-blocking connect to host:port (first getaddrinfo result) or to the Unix socket
       path. Returns the fd (*connecting = 1 while the connect is in progress), or -1 with
       *err = errno, -2 with *err = a getaddrinfo error code, -3 if the Unix path is too long. */
    static int frl_connect(const char *host, const char *port, const char *path, Py_ssize_t path_len,
                           int *connecting, int *err) {
        int fd, rc, e;
        *connecting = 0;
        *err = 0;
        if (path != NULL) {
            struct sockaddr_un sa;
            socklen_t salen;
            if ((size_t)path_len > sizeof(sa.sun_path)) return -3;
            memset(&sa, 0, sizeof sa);
            sa.sun_family = AF_UNIX;
            memcpy(sa.sun_path, path, (size_t)path_len);
            salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)path_len);
            fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd < 0) { *err = errno; return -1; }
            if (frl_prepare(fd, 0, err) < 0) { close(fd); return -1; }
            rc = connect(fd, (struct sockaddr *)&sa, salen);
        } else {
            struct addrinfo hints, *res = NULL;
            memset(&hints, 0, sizeof hints);
            hints.ai_family = AF_UNSPEC;
            hints.ai_socktype = SOCK_STREAM;
            hints.ai_protocol = IPPROTO_TCP;
            rc = getaddrinfo(host, port, &hints, &res);
            if (rc != 0) {
    #ifdef EAI_SYSTEM
                if (rc == EAI_SYSTEM) { *err = errno; return -1; }
    #endif
                *err = rc;
                return -2;
            }
            fd = socket(res->ai_family, SOCK_STREAM, 0);
            if (fd < 0) { *err = errno; freeaddrinfo(res); return -1; }
            if (frl_prepare(fd, 1, err) < 0) { close(fd); freeaddrinfo(res); return -1; }
            rc = connect(fd, res->ai_addr, res->ai_addrlen);
            e = errno;
            freeaddrinfo(res);
            errno = e;
        }
        if (rc == 0) return fd;
        e = errno;
        if (e == EINPROGRESS || e == EAGAIN || e == EWOULDBLOCK || e == EINTR) {
            *connecting = 1;
            return fd;
        }
        close(fd);
        *err = e;
        return -1;
    }

    /* EAGAIN and EWOULDBLOCK are the same value on some systems, different on others. */
    static int frl_would_block(int e) {
        return e == EAGAIN || e == EWOULDBLOCK;
    }

    /* The outcome of a finished non-blocking connect: 0 or an errno. */
    static int frl_sock_error(int fd) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return errno;
        return err;
    }

    /* Decimal digits of v (may be negative) at p; returns the length (at most 20). */
    static Py_ssize_t frl_fmt_ll(char *p, long long v) {
        char tmp[24];
        Py_ssize_t n = 0, len = 0;
        unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        do { tmp[n++] = (char)('0' + (int)(u % 10)); u /= 10; } while (u);
        if (v < 0) p[len++] = '-';
        while (n) p[len++] = tmp[--n];
        return len;
    }

    /* Bytes needed to encode nargs bulk strings (plus the array header). */
    static Py_ssize_t frl_encoded_size(int nargs, const Py_ssize_t *lens) {
        Py_ssize_t size = 1 + 20 + 2;
        int i;
        for (i = 0; i < nargs; i++) size += 1 + 20 + 2 + lens[i] + 2;
        return size;
    }

    /* Encode the header of a RESP array of argc bulk strings and the first nargs of them at out
       (sized by frl_encoded_size); returns the length. nargs == argc encodes a whole command. */
    static Py_ssize_t frl_encode(char *out, int argc, int nargs, const char *const *argv,
                                 const Py_ssize_t *lens) {
        char *p = out;
        int i;
        *p++ = '*';
        p += frl_fmt_ll(p, argc);
        *p++ = '\\r'; *p++ = '\\n';
        for (i = 0; i < nargs; i++) {
            *p++ = '$';
            p += frl_fmt_ll(p, (long long)lens[i]);
            *p++ = '\\r'; *p++ = '\\n';
            memcpy(p, argv[i], (size_t)lens[i]);
            p += lens[i];
            *p++ = '\\r'; *p++ = '\\n';
        }
        return (Py_ssize_t)(p - out);
    }

    /* Length of the array header and the first nargs bulk strings, as frl_encode writes them. */
    static Py_ssize_t frl_head_len(int argc, int nargs, const Py_ssize_t *lens) {
        char tmp[24];
        Py_ssize_t size = 1 + frl_fmt_ll(tmp, argc) + 2;
        int i;
        for (i = 0; i < nargs; i++) size += 1 + frl_fmt_ll(tmp, (long long)lens[i]) + 2 + lens[i] + 2;
        return size;
    }
    """
    double frl_now() nogil
    int frl_connect(const char *host, const char *port, const char *path, Py_ssize_t path_len,
                    int *connecting, int *err) nogil
    int frl_sock_error(int fd) nogil
    int frl_would_block(int e) nogil
    Py_ssize_t frl_fmt_ll(char *p, long long v) nogil
    Py_ssize_t frl_encoded_size(int nargs, const Py_ssize_t *lens) nogil
    Py_ssize_t frl_encode(char *out, int argc, int nargs, const char **argv, const Py_ssize_t *lens) nogil
    Py_ssize_t frl_head_len(int argc, int nargs, const Py_ssize_t *lens) nogil
    int MSG_NOSIGNAL


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    ctypedef unsigned long nfds_t
    int poll(pollfd *fds, nfds_t nfds, int timeout)
    enum:
        POLLIN
        POLLPRI
        POLLOUT
        POLLERR
        POLLHUP


cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    ssize_t recv(int fd, void *buf, size_t n, int flags)


cdef extern from "<netdb.h>" nogil:
    const char *gai_strerror(int errcode)


cdef extern from "<unistd.h>" nogil:
    int c_close "close"(int fd)



# --- constants ---------------------------------------------------------------------------------
cdef enum:
    RECV_SIZE = 65536
    POLL_IN = POLLIN | POLLPRI | POLLHUP | POLLERR

# Command kinds and outcome codes, read from the protocol so the twins can never disagree on them.
cdef int KIND_SET = _replies.KIND_SET
cdef int KIND_SCRIPT = _replies.KIND_SCRIPT
cdef int KIND_FENCED = _replies.KIND_FENCED
cdef int KIND_SCRIPT_ACQUIRE = _replies.KIND_SCRIPT_ACQUIRE
cdef int KIND_BITS = _replies.KIND_BITS
cdef int OC_OK = _oc.OK
cdef int OC_NO = _oc.NO

cdef bytes _RELEASE = bytes(RELEASE)
cdef bytes _EXTEND = bytes(EXTEND)
cdef bytes _FENCED_ACQUIRE = bytes(FENCED_ACQUIRE)
cdef bytes _FENCE_WRITE = bytes(FENCE_WRITE)
cdef bytes _ACQUIRE_ALL = bytes(ACQUIRE_ALL)
cdef bytes _ACQUIRE_ALL_SHA = bytes(ACQUIRE_ALL_SHA)
cdef bytes _RELEASE_SHA = bytes(RELEASE_SHA)
cdef bytes _EXTEND_SHA = bytes(EXTEND_SHA)
cdef bytes _FENCED_ACQUIRE_SHA = bytes(FENCED_ACQUIRE_SHA)
cdef bytes _FENCE_WRITE_SHA = bytes(FENCE_WRITE_SHA)
cdef bytes _RELEASE_MANY = bytes(RELEASE_MANY)
cdef bytes _RELEASE_MANY_SHA = bytes(RELEASE_MANY_SHA)
cdef bytes _EMPTY = b""

_Reader = hiredis.Reader
_ReplyError = hiredis.ReplyError
_os_strerror = os.strerror

# The parser fast path, switchable for measurements and differential tests.
cdef bint _fast_path = True


def _set_fast_path(bint enabled):
    """Enable or disable the exact-reply fast path (then hiredis parses every reply)."""
    global _fast_path
    _fast_path = enabled


cdef inline bint _stale(int err) noexcept nogil:
    """Errors after which a reused connection is reopened and the command resent once."""
    return err == EPIPE or err == ECONNRESET or err == ECONNABORTED or err == ENOTCONN


cdef inline bytes _as_bytes(object value):
    """Bytes as given; other bytes-like objects copied; anything else raises TypeError."""
    if type(value) is bytes:
        return <bytes>value
    return bytes(memoryview(value))


cdef tuple _pairs(object keys, object tokens):
    """``keys`` and ``tokens`` as two lists of bytes of the same length (``zip`` semantics)."""
    if type(keys) is list and type(tokens) is list and len(<list>keys) == len(<list>tokens):
        return [_as_bytes(k) for k in <list>keys], [_as_bytes(t) for t in <list>tokens]
    cdef list pairs = [(_as_bytes(k), _as_bytes(t)) for k, t in zip(keys, tokens)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def encode_command(*args):
    """Encode one command as a RESP array of bulk strings (binary-safe: names may hold CRLF)."""
    cdef Py_ssize_t argc = len(args), i, length
    cdef list parts = [_as_bytes(a) for a in args]
    cdef const char **argv = <const char **>malloc((argc + 1) * sizeof(char *))
    cdef Py_ssize_t *lens = <Py_ssize_t *>malloc((argc + 1) * sizeof(Py_ssize_t))
    cdef char *out = NULL
    try:
        if argv == NULL or lens == NULL:
            raise MemoryError()
        for i in range(argc):
            argv[i] = PyBytes_AS_STRING(parts[i])
            lens[i] = PyBytes_GET_SIZE(parts[i])
        out = <char *>malloc(frl_encoded_size(<int>argc, lens))
        if out == NULL:
            raise MemoryError()
        length = frl_encode(out, <int>argc, <int>argc, argv, lens)
        return PyBytes_FromStringAndSize(out, length)
    finally:
        free(argv)
        free(lens)
        free(out)



cdef inline void _arg(const char **args, Py_ssize_t *lens, int m, bytes value) noexcept:
    """Point argument ``m`` of a command at ``value``'s bytes (it must outlive the encoding)."""
    args[m] = PyBytes_AS_STRING(value)
    lens[m] = PyBytes_GET_SIZE(value)



cdef void *_grow(void *ptr, size_t size) except NULL:
    """``realloc``, raising MemoryError on failure (``ptr`` is then left as it was)."""
    cdef void *buf = realloc(ptr, size)
    if buf == NULL:
        raise MemoryError()
    return buf



# --- the parser fast path ----------------------------------------------------------------------
cdef inline Py_ssize_t _fast_reply(const char *p, Py_ssize_t n, int kind, int *code,
                                   long long *value) noexcept nogil:
    """If ``p[:n]`` starts with a whole expected reply, set its outcome and return its length.

    Only replies whose meaning is settled without hiredis are recognized; 0 means "ask hiredis".
    """
    cdef Py_ssize_t pos
    cdef long long v = 0
    cdef bint neg = False
    if kind == KIND_BITS:
        return 0  # one bulk string per master: hiredis reads it
    if kind == KIND_SET:
        if n >= 5:
            if memcmp(p, b"+OK\r\n", 5) == 0:
                code[0] = OC_OK
                return 5
            if memcmp(p, b"$-1\r\n", 5) == 0:
                code[0] = OC_NO
                return 5
        return 0
    if kind == KIND_SCRIPT or kind == KIND_SCRIPT_ACQUIRE:
        if n >= 4 and p[0] == b':' and p[2] == b'\r' and p[3] == b'\n':
            if p[1] == b'1':
                code[0] = OC_OK
                return 4
            if p[1] == b'0':
                code[0] = OC_NO
                return 4
        return 0
    # KIND_FENCED: ':' '-'? digits{1,18} CRLF
    if n < 4 or p[0] != b':':
        return 0
    pos = 1
    if p[1] == b'-':
        neg = True
        pos = 2
    while pos < n and pos < 20 and c'0' <= p[pos] <= c'9':
        v = v * 10 + (p[pos] - c'0')
        pos += 1
    if pos == (2 if neg else 1) or pos + 2 > n or p[pos] != b'\r' or p[pos + 1] != b'\n':
        return 0
    if neg:
        if v != 1:
            return 0  # hiredis reports the unexpected value
        code[0] = OC_NO
    else:
        code[0] = OC_OK
        value[0] = v
    return pos + 2



# --- the core ----------------------------------------------------------------------------------
@cython.final
cdef class Core:
    """N connections to the masters, driven by one compiled protocol :class:`Session`. Not thread-safe."""

    cdef Session _s
    cdef list _links
    cdef readonly Py_ssize_t n
    cdef readonly Py_ssize_t quorum
    cdef readonly bint restart_aware
    cdef object _grace_obj
    cdef int *_fds              # one per master, -1 when closed
    cdef bint *_dirty           # the master's reader holds bytes fed since it last ended clean
    cdef list _readers          # one hiredis.Reader per master (None until its first connection)
    cdef pollfd *_pfds
    cdef Py_ssize_t *_pidx      # which master each polled fd belongs to
    cdef list _addr             # per master: (host, port, path) as bytes, or an error message
    cdef object _fb_maker       # the bound method that encodes the EVAL fallbacks of this round
    # the encoded commands of the round
    cdef Py_ssize_t _ncmd, _kcap
    cdef char *_cmd
    cdef Py_ssize_t _cmd_cap
    cdef Py_ssize_t *_cmd_off
    cdef bytes _script
    cdef Py_ssize_t _sha_head
    cdef int _argc
    cdef bytearray _rbuf
    cdef char *_rbufp

    def __cinit__(self):
        self._fds = NULL
        self._dirty = NULL
        self._pfds = NULL
        self._pidx = NULL
        self._cmd = NULL
        self._cmd_off = NULL
        self._grace_obj = 0

    def __init__(self, masters, double io_timeout, double connect_timeout, double drift_factor,
                 bint restart_aware=False, health=None, bint early=True):
        cdef Py_ssize_t n, i
        if self._s is not None:
            raise RuntimeError("Core is initialized once")
        self._s = Session(masters, io_timeout, connect_timeout, drift_factor, restart_aware, health, early)
        if self._s.health.n != self._s.n:
            raise ValueError(f"health is for {self._s.health.n} masters, not {self._s.n}")
        self._links = self._s.links
        n = self.n = self._s.n
        self.quorum = self._s.quorum
        self.restart_aware = restart_aware
        self._fds = <int *>_grow(NULL, (n + 1) * sizeof(int))
        self._dirty = <bint *>_grow(NULL, (n + 1) * sizeof(bint))
        self._pfds = <pollfd *>_grow(NULL, (n + 1) * sizeof(pollfd))
        self._pidx = <Py_ssize_t *>_grow(NULL, (n + 1) * sizeof(Py_ssize_t))
        for i in range(n):
            self._fds[i] = -1
            self._dirty[i] = False
        self._readers = [None] * n
        self._addr = [_address(link.spec) for link in self._links]
        self._fb_maker = self._fallbacks
        self._reserve(1, 512)
        self._rbuf = bytearray(RECV_SIZE)
        self._rbufp = PyByteArray_AS_STRING(self._rbuf)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._fds != NULL:
            for i in range(self.n):
                if self._fds[i] >= 0:
                    c_close(self._fds[i])
        free(self._fds)
        free(self._dirty)
        free(self._pfds)
        free(self._pidx)
        free(self._cmd)
        free(self._cmd_off)

    # --- settings and state -------------------------------------------------------------------
    @property
    def health(self):
        """The health of the masters, shared with the other cores of the client."""
        return self._s.health

    @property
    def early(self):
        """Whether acquisitions return as soon as every key is decided."""
        return self._s.early

    @property
    def restart_grace_ms(self):
        """An OK from a master up for less than this many milliseconds does not count (UNTRUSTED)."""
        return self._grace_obj

    @restart_grace_ms.setter
    def restart_grace_ms(self, value):
        self._s.restart_grace_ms = float(value)
        self._grace_obj = value

    def master_states(self):
        """Per master: ``(run_id, up_since, restarts seen)`` as learned by restart-aware voting."""
        return self._s.master_states()

    @property
    def owed(self):
        """How many replies the connections still owe to rounds that already returned."""
        return self._s.owed()

    @property
    def pending(self):
        """How many of those would still fill in a PENDING outcome (not yet past their deadline)."""
        return self._s.pending()

    # --- operations on one key --------------------------------------------------------------
    def acquire(self, key, token, long long ttl_ms):
        """``SET key token NX PX ttl_ms`` on all masters in one round."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        cdef const char *argv[6]
        cdef Py_ssize_t lens[6]
        cdef char ttl[24]
        argv[0] = b"SET"; lens[0] = 3
        argv[1] = PyBytes_AS_STRING(k); lens[1] = PyBytes_GET_SIZE(k)
        argv[2] = PyBytes_AS_STRING(t); lens[2] = PyBytes_GET_SIZE(t)
        argv[3] = b"NX"; lens[3] = 2
        argv[4] = b"PX"; lens[4] = 2
        argv[5] = ttl; lens[5] = frl_fmt_ll(ttl, ttl_ms)
        self._reserve(1, frl_encoded_size(6, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, 6, 6, argv, lens)
        self._script = None
        return self._run(KIND_SET, 1, 1, (ttl_ms,), True)[0]

    cdef int _script1(self, bytes sha, bytes script, const char *numkeys, int nargs,
                      const char **args, const Py_ssize_t *arg_lens) except -1:
        """Encode ``EVALSHA sha numkeys args...`` as the round's only command (EVAL ``script`` is
        its fallback). At most 5 args."""
        cdef const char *argv[8]
        cdef Py_ssize_t lens[8]
        cdef int argc = 3 + nargs, m
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(sha); lens[1] = PyBytes_GET_SIZE(sha)
        argv[2] = numkeys; lens[2] = 1
        for m in range(nargs):
            argv[3 + m] = args[m]
            lens[3 + m] = arg_lens[m]
        self._reserve(1, frl_encoded_size(argc, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, argc, argc, argv, lens)
        self._set_script(script, argc, lens)
        return 0

    def release(self, key, token, bint wait=True):
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours.

        ``wait=False`` writes the release and returns without waiting for any answer.
        """
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        cdef const char *args[2]
        cdef Py_ssize_t lens[2]
        _arg(args, lens, 0, k)
        _arg(args, lens, 1, t)
        self._script1(_RELEASE_SHA, _RELEASE, b"1", 2, args, lens)
        return self._run(KIND_SCRIPT, 1, 1, (0,), wait)[0]

    def extend(self, key, token, long long ttl_ms):
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        cdef const char *args[3]
        cdef Py_ssize_t lens[3]
        cdef char ttl[24]
        _arg(args, lens, 0, k)
        _arg(args, lens, 1, t)
        args[2] = ttl; lens[2] = frl_fmt_ll(ttl, ttl_ms)
        self._script1(_EXTEND_SHA, _EXTEND, b"1", 3, args, lens)
        return self._run(KIND_SCRIPT, 1, 1, (ttl_ms,), True)[0]

    def acquire_fenced(self, key, fence_key, token, long long ttl_ms):
        """Round 1 of a fenced acquisition: ``SET NX PX`` and read the fence counter, atomically.

        ``values`` holds each granting master's counter.
        """
        cdef bytes k = _as_bytes(key), f = _as_bytes(fence_key), t = _as_bytes(token)
        cdef const char *args[4]
        cdef Py_ssize_t lens[4]
        cdef char ttl[24]
        _arg(args, lens, 0, k)
        _arg(args, lens, 1, f)
        _arg(args, lens, 2, t)
        args[3] = ttl; lens[3] = frl_fmt_ll(ttl, ttl_ms)
        self._script1(_FENCED_ACQUIRE_SHA, _FENCED_ACQUIRE, b"2", 4, args, lens)
        return self._run(KIND_FENCED, 1, 1, (ttl_ms,), True)[0]

    def write_fence(self, key, fence_key, token, fence, retention_ms):
        """Round 2 of a fenced acquisition: owner-checked ``counter = max(counter, fence)``."""
        cdef bytes k = _as_bytes(key), f = _as_bytes(fence_key), t = _as_bytes(token)
        cdef bytes fb = b"%d" % fence, rb = b"%d" % retention_ms
        cdef const char *args[5]
        cdef Py_ssize_t lens[5]
        _arg(args, lens, 0, k)
        _arg(args, lens, 1, f)
        _arg(args, lens, 2, t)
        _arg(args, lens, 3, fb)
        _arg(args, lens, 4, rb)
        self._script1(_FENCE_WRITE_SHA, _FENCE_WRITE, b"2", 5, args, lens)
        return self._run(KIND_SCRIPT, 1, 1, (0,), True)[0]

    # --- operations on many keys, pipelined in one write per master --------------------------
    def acquire_many(self, keys, tokens, long long ttl_ms):
        """``SET keys[i] tokens[i] NX PX ttl_ms`` for every i, in one round (one timing window)."""
        cdef list kbs, tbs
        kbs, tbs = _pairs(keys, tokens)
        cdef Py_ssize_t kk = len(kbs), j, size = 0, pos = 0
        cdef const char *argv[6]
        cdef Py_ssize_t lens[6]
        cdef char ttl[24]
        cdef bytes kb, tb
        if kk == 0:
            return []
        argv[0] = b"SET"; lens[0] = 3
        argv[3] = b"NX"; lens[3] = 2
        argv[4] = b"PX"; lens[4] = 2
        argv[5] = ttl; lens[5] = frl_fmt_ll(ttl, ttl_ms)
        for j in range(kk):
            lens[1] = PyBytes_GET_SIZE(<bytes>kbs[j])
            lens[2] = PyBytes_GET_SIZE(<bytes>tbs[j])
            size += frl_encoded_size(6, lens)
        self._reserve(kk, size)
        for j in range(kk):
            kb = <bytes>kbs[j]
            tb = <bytes>tbs[j]
            argv[1] = PyBytes_AS_STRING(kb); lens[1] = PyBytes_GET_SIZE(kb)
            argv[2] = PyBytes_AS_STRING(tb); lens[2] = PyBytes_GET_SIZE(tb)
            self._cmd_off[j] = pos
            pos += frl_encode(self._cmd + pos, 6, 6, argv, lens)
        self._cmd_off[kk] = pos
        self._script = None
        return self._run(KIND_SET, kk, kk, (ttl_ms,) * kk, True)

    def acquire_all(self, keys, token, long long ttl_ms):
        """Set every key to ``token`` on each master, or none of them there (one script per master)."""
        cdef list parts = [b"EVALSHA", _ACQUIRE_ALL_SHA, b"%d" % len(keys)]
        parts.extend([_as_bytes(k) for k in keys])
        parts.append(_as_bytes(token))
        parts.append(b"%d" % ttl_ms)
        self._encode_one(parts, _ACQUIRE_ALL)
        return self._run(KIND_SCRIPT_ACQUIRE, 1, 1, (ttl_ms,), True)[0]

    def release_many(self, keys, tokens, bint wait=True):
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round.

        ``wait=False``: write and return at once; every outcome is PENDING.
        Two keys or more go to each master in one script call (``RELEASE_MANY``), far cheaper for
        the master than one call per key.
        """
        cdef list kbs, tbs
        kbs, tbs = _pairs(keys, tokens)
        cdef Py_ssize_t kk = len(kbs), j, size = 0, pos = 0
        cdef const char *argv[5]
        cdef Py_ssize_t lens[5]
        cdef bytes kb, tb
        cdef list parts
        if kk == 0:
            return []
        if kk >= 2:
            parts = [b"EVALSHA", _RELEASE_MANY_SHA, b"%d" % kk]
            parts.extend(kbs)
            parts.extend(tbs)
            self._encode_one(parts, _RELEASE_MANY)
            return self._run(KIND_BITS, 1, kk, (0,) * kk, wait)
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_RELEASE_SHA); lens[1] = PyBytes_GET_SIZE(_RELEASE_SHA)
        argv[2] = b"1"; lens[2] = 1
        kb = <bytes>kbs[0]
        tb = <bytes>tbs[0]
        argv[3] = PyBytes_AS_STRING(kb); lens[3] = PyBytes_GET_SIZE(kb)
        argv[4] = PyBytes_AS_STRING(tb); lens[4] = PyBytes_GET_SIZE(tb)
        self._reserve(1, frl_encoded_size(5, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, 5, 5, argv, lens)
        self._set_script(_RELEASE, 5, lens)
        return self._run(KIND_SCRIPT, 1, 1, (0,), wait)

    def extend_many(self, keys, tokens, ttls_ms):
        """Owner-checked ``PEXPIRE keys[i] ttls_ms[i]`` where ``keys[i]`` holds ``tokens[i]``, in one round."""
        cdef list triples = [(_as_bytes(k), _as_bytes(t), <long long>ttl)
                             for k, t, ttl in zip(keys, tokens, ttls_ms)]
        cdef Py_ssize_t kk = len(triples), j, size = 0, pos = 0
        cdef const char *argv[6]
        cdef Py_ssize_t lens[6]
        cdef char ttl_buf[24]
        cdef bytes kb, tb
        cdef long long ttl_ms
        if kk == 0:
            return []
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_EXTEND_SHA); lens[1] = PyBytes_GET_SIZE(_EXTEND_SHA)
        argv[2] = b"1"; lens[2] = 1
        argv[5] = ttl_buf
        lens[5] = 20
        for kb, tb, ttl_ms in triples:
            lens[3] = PyBytes_GET_SIZE(kb)
            lens[4] = PyBytes_GET_SIZE(tb)
            size += frl_encoded_size(6, lens)
        self._reserve(kk, size)
        j = 0
        for kb, tb, ttl_ms in triples:
            argv[3] = PyBytes_AS_STRING(kb); lens[3] = PyBytes_GET_SIZE(kb)
            argv[4] = PyBytes_AS_STRING(tb); lens[4] = PyBytes_GET_SIZE(tb)
            lens[5] = frl_fmt_ll(ttl_buf, ttl_ms)
            self._cmd_off[j] = pos
            pos += frl_encode(self._cmd + pos, 6, 6, argv, lens)
            j += 1
        self._cmd_off[kk] = pos
        self._set_script(_EXTEND, 6, lens)
        return self._run(KIND_SCRIPT, kk, kk, tuple([t[2] for t in triples]), True)

    # --- buffers and encoding -----------------------------------------------------------------
    cdef int _reserve(self, Py_ssize_t k, Py_ssize_t size) except -1:
        """Room for k commands of ``size`` encoded bytes in all."""
        cdef Py_ssize_t cap
        if size > self._cmd_cap or self._cmd == NULL:
            cap = size if size > 512 else 512
            self._cmd = <char *>_grow(self._cmd, cap)
            self._cmd_cap = cap
        if k > self._kcap or self._cmd_off == NULL:
            self._cmd_off = <Py_ssize_t *>_grow(self._cmd_off, (k + 1) * sizeof(Py_ssize_t))
            self._kcap = k
        return 0

    cdef int _encode_one(self, list parts, bytes script) except -1:
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
            self._reserve(1, frl_encoded_size(<int>argc, lens))
            self._cmd_off[0] = 0
            self._cmd_off[1] = frl_encode(self._cmd, <int>argc, <int>argc, argv, lens)
            self._set_script(script, <int>argc, lens)
        finally:
            free(argv)
            free(lens)
        return 0

    cdef void _set_script(self, bytes script, int argc, Py_ssize_t *lens) noexcept:
        """This round's commands are ``EVALSHA <sha> ...`` of ``script``; EVAL is their fallback."""
        self._script = script
        self._argc = argc
        self._sha_head = frl_head_len(argc, 2, lens)

    def _fallbacks(self):
        """``EVAL <script> ...`` for every command of the round, derived from the EVALSHA bytes
        (asked for by the session on the first NOSCRIPT, or for a master nobody waits for)."""
        cdef const char *argv[2]
        cdef Py_ssize_t lens[2]
        cdef Py_ssize_t head, tail, j, pos
        cdef char *buf
        cdef list out = []
        argv[0] = b"EVAL"; lens[0] = 4
        argv[1] = PyBytes_AS_STRING(self._script); lens[1] = PyBytes_GET_SIZE(self._script)
        head = frl_encoded_size(2, lens)
        for j in range(self._ncmd):
            tail = self._cmd_off[j + 1] - self._cmd_off[j] - self._sha_head
            buf = <char *>_grow(NULL, head + tail)
            try:
                pos = frl_encode(buf, self._argc, 2, argv, lens)
                memcpy(buf + pos, self._cmd + self._cmd_off[j] + self._sha_head, tail)
                out.append(PyBytes_FromStringAndSize(buf, pos + tail))
            finally:
                free(buf)
        return out

    # --- the round ----------------------------------------------------------------------------
    cdef list _run(self, int kind, Py_ssize_t k, Py_ssize_t rows, tuple ttls_ms, bint wait):
        """Run the ``k`` encoded commands on every master: until the session says the round is
        over, poll and hand it what happens; return its Rounds, one per key."""
        cdef Session s = self._s
        cdef Py_ssize_t n = self.n, i
        cdef double now, first, swept = -1.0, wait_ms
        cdef int timeout_ms
        self._ncmd = k
        s.begin(kind, k, rows, PyBytes_FromStringAndSize(self._cmd, self._cmd_off[k]),
                self._script is not None, self._fb_maker, ttls_ms, wait, frl_now())
        for i in range(n):
            self._sync(i)
        while True:
            first = s.next_deadline()
            if first < 0.0:
                break
            now = frl_now()
            if first > now:
                wait_ms = ceil((first - now) * 1000.0)
                timeout_ms = 2147483647 if wait_ms > 2147483647.0 else <int>wait_ms
            elif swept != first:
                # A deadline passed: first read what already arrived (this thread may have been
                # descheduled past it), then call late only what is still missing.
                swept = first
                timeout_ms = 0
            else:
                s.expire_due(now)
                for i in range(n):
                    self._sync(i)
                continue
            self._poll(timeout_ms)
        rounds = s.finish(frl_now())
        self._tidy()
        return rounds

    cdef int _tidy(self) except -1:
        """Read what already arrived on the links whose owed replies are overdue, then let the
        session expire what is still missing; carry out what the links then ask for."""
        cdef Py_ssize_t i
        cdef double now = frl_now()
        for i in self._s.overdue_links(now):
            self._readable(i)  # non-blocking: whatever already arrived is not late
        self._s.tidy_all(now)
        for i in range(self.n):
            self._sync(i)
        return 0

    cdef int _poll(self, int timeout_ms) except -1:
        """Wait until a polled link can be written or read (or the timeout passed) and serve it."""
        cdef Py_ssize_t i, m = 0, q
        cdef Link link
        cdef int rc, err
        cdef short ev
        cdef pollfd *pfds = self._pfds
        for i in range(self.n):
            link = <Link>self._links[i]
            if link.polled and self._fds[i] >= 0:
                pfds[m].fd = self._fds[i]
                pfds[m].events = POLL_IN | (POLLOUT if (PyBytes_GET_SIZE(link.out) or link.connecting) else 0)
                pfds[m].revents = 0
                self._pidx[m] = i
                m += 1
        with nogil:
            rc = poll(pfds, <nfds_t>m, timeout_ms)
            err = errno
        if rc < 0:
            if err == EINTR:
                PyErr_CheckSignals()  # a signal handler's exception ends the round
                return 0
            raise OSError(err, _os_strerror(err))
        if rc == 0:
            return 0
        for q in range(m):
            ev = pfds[q].revents
            i = self._pidx[q]
            if ev == 0 or self._fds[i] != pfds[q].fd:
                continue
            link = <Link>self._links[i]
            if ev & POLLOUT:
                if link.connecting:
                    err = frl_sock_error(self._fds[i])
                    if err:
                        self._s.connect_failed(i, _os_strerror(err), frl_now())
                        self._sync(i)
                        continue
                    link.connecting = False
                self._sync(i)
            if ev & POLL_IN and self._fds[i] >= 0:
                self._readable(i)
        return 0

    cdef int _sync(self, Py_ssize_t i) except -1:
        """Carry out what link ``i`` asks for: close, open, write."""
        cdef Link link = <Link>self._links[i]
        cdef ssize_t sent
        cdef Py_ssize_t size
        cdef int err
        while True:
            if link.closing:
                link.closing = False
                if self._fds[i] >= 0:
                    c_close(self._fds[i])  # close only: never shutdown, a fork sibling may share it
                    self._fds[i] = -1
            if link.opening:
                link.opening = False
                detail = self._open(i)
                if detail is not None:
                    self._s.connect_failed(i, detail, frl_now())
                    continue
            size = PyBytes_GET_SIZE(link.out)
            if size == 0 or link.connecting or self._fds[i] < 0:
                return 0
            sent = send(self._fds[i], PyBytes_AS_STRING(link.out), <size_t>size, MSG_NOSIGNAL)
            if sent < 0:
                err = errno
                if err == EINTR:
                    PyErr_CheckSignals()
                    continue
                if frl_would_block(err):
                    return 0
                self._s.io_failed(i, _os_strerror(err), _stale(err), frl_now())
                continue
            link.out = _EMPTY if sent == size else link.out[sent:]
            return 0

    cdef object _open(self, Py_ssize_t i):
        """Start a non-blocking connect to master ``i``; None, or a message saying why it failed."""
        cdef const char *host = NULL
        cdef const char *port = NULL
        cdef const char *path = NULL
        cdef Py_ssize_t path_len = 0
        cdef int connecting = 0, err = 0, fd
        addr = self._addr[i]
        if type(addr) is str:
            return addr
        if addr[2] is not None:
            path = PyBytes_AS_STRING(addr[2])
            path_len = PyBytes_GET_SIZE(addr[2])
        else:
            host = PyBytes_AS_STRING(addr[0])
            port = PyBytes_AS_STRING(addr[1])
        with nogil:  # getaddrinfo may block on DNS
            fd = frl_connect(host, port, path, path_len, &connecting, &err)
        if fd == -1:
            return _os_strerror(err)
        if fd == -2:
            return (<bytes>gai_strerror(err)).decode("utf-8", "replace")
        if fd == -3:
            return "AF_UNIX path too long"
        self._fds[i] = fd
        (<Link>self._links[i]).connecting = connecting != 0
        if self._readers[i] is None or self._dirty[i]:
            self._readers[i] = _Reader()
            self._dirty[i] = False
        return None

    cdef int _readable(self, Py_ssize_t i) except -1:
        """Read what arrived on one connection and hand the complete replies to the session."""
        cdef Session s = self._s
        cdef Link link = <Link>self._links[i]
        cdef ssize_t got
        cdef int err, kind, code = 0
        cdef long long value = 0
        cdef Py_ssize_t pos = 0, used
        cdef double now
        got = recv(self._fds[i], self._rbufp, RECV_SIZE, 0)
        now = frl_now()
        if got < 0:
            err = errno
            if err == EINTR or frl_would_block(err):
                return 0
            s.io_failed(i, _os_strerror(err), _stale(err), now)
            return self._sync(i)
        if got == 0:
            s.io_failed(i, "connection closed by the master", True, now)
            return self._sync(i)
        if _fast_path and not self._dirty[i]:
            # Exact expected replies at the front of a read on a clean connection: settled here
            # without a reply object (and without the guard: they are well-formed by definition).
            while pos < got:
                kind = s.next_kind(i)
                if kind < 0:
                    break
                used = _fast_reply(self._rbufp + pos, got - pos, kind, &code, &value)
                if used == 0:
                    break
                pos += used
                if not s.answer(i, code, None, value if code == OC_OK and kind == KIND_FENCED else None, now):
                    return self._sync(i)
            if pos == got:
                s.drained(i, False, now)
                return self._sync(i)
        if not s.received(i, self._rbuf, pos, got, now):
            return self._sync(i)
        reader = self._readers[i]
        reader.feed(self._rbuf, pos, got - pos)
        self._dirty[i] = True
        while link.expecting():
            try:
                reply = reader.gets()
            except Exception as exc:  # hiredis.ProtocolError, or MemoryError on absurd headers
                s.parse_failed(i, f"{type(exc).__name__}: {exc}", now)
                return self._sync(i)
            if reply is False:
                break
            if isinstance(reply, _ReplyError):
                alive = s.reply(i, None, str(reply), now)
            else:
                alive = s.reply(i, reply, None, now)
            self._sync(i)
            if not alive or self._fds[i] < 0:
                return 0
        leftover = reader.has_data()
        if not leftover:
            self._dirty[i] = False  # the reader is clean again: the fast path may serve
        s.drained(i, leftover, now)
        return self._sync(i)

    # --- outside rounds ---------------------------------------------------------------------------
    def settle(self, timeout=None, until=None):
        """Read the replies owed by earlier rounds until each arrived or its deadline passed.

        Their rounds' PENDING outcomes are filled in (TIMEOUT for a reply that missed its deadline).
        ``timeout`` bounds the wait (seconds); by default it is bounded by the owed deadlines.
        ``until``: a callable; return as soon as it returns true (checked before each wait).
        """
        cdef Session s = self._s
        cdef double end = -1.0, now, due, wait_ms
        if timeout is not None:
            end = frl_now() + <double>timeout
        try:
            while until is None or not until():
                due = s.settle_wait(end)
                if due < 0.0:
                    return
                now = frl_now()
                if due > now:
                    wait_ms = ceil((due - now) * 1000.0)
                    self._poll(2147483647 if wait_ms > 2147483647.0 else <int>wait_ms)
                    continue
                self._tidy()
                if 0.0 <= end <= now:
                    return
        finally:
            s.settle_done()

    def close(self):
        """Close every connection; the core reconnects lazily if used again."""
        cdef Py_ssize_t i
        if self._s is None:
            return
        self._s.close()
        for i in range(self.n):
            self._sync(i)


cdef object _address(spec):
    """``(host, port, path)`` of a master as bytes for libc (None where unused), or an error message."""
    try:
        if spec.path is not None:
            return (None, None, os.fsencode(spec.path))
        return (spec.host.encode("idna"), str(int(spec.port)).encode(), None)
    except (UnicodeError, TypeError, ValueError) as exc:
        return str(exc)
