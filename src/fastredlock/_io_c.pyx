# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython core: one multiplexed round to all N masters, in C, and the quorum arithmetic.

Same interface and behaviour as the pure-Python reference :mod:`fastredlock._core_py` (its
docstrings are the contract: K commands per round, NOSCRIPT fallback, restart-aware voting, fencing,
early decision at quorum, owed replies matched in order, master health and cool-downs); this one
does the work in C:

* the N connections are plain non-blocking file descriptors (TCP with ``TCP_NODELAY``, or Unix
  sockets) opened with libc ``getaddrinfo``/``socket``/``connect``; the AUTH/SELECT(/INFO) handshake
  of a new connection is queued in front of its first commands, so it costs no extra round trip;
* the K commands of a round are encoded as RESP once, straight from the key/token/ttl bytes, into a
  reusable per-core C buffer; every master normally gets exactly one ``send``. The EVAL fallback of
  an EVALSHA command is derived from the encoded EVALSHA bytes only when a master says NOSCRIPT;
* the wait is ``poll(2)`` with the GIL released, each master with its own deadline; replies are read
  into a reusable C buffer and parsed by :meth:`Core._parse`, the one parser seam. Its fast path
  recognizes, at the front of a read on a clean connection, the exact replies a lock round expects
  (``+OK``/``$-1`` for SET, ``:1``/``:0`` for scripts, ``:n``/``:-1`` for a fenced acquisition) and
  settles them in C; anything else (handshakes, error replies, NOSCRIPT, split or unexpected
  replies) and whatever follows it goes to ``hiredis.Reader`` (one ``feed`` per read);
* early decision is two counters per key updated as outcomes are recorded; the replies a
  connection still owes to rounds that returned are a C array of (kind, deadline, flags, Round)
  read ahead of the next round's replies; :class:`Health` is C arrays shared by the client's
  cores, read once per round (one comparison when no master cools down);
* ``started``/``elapsed``/validity/quorum come from ``clock_gettime(CLOCK_MONOTONIC)`` (the clock of
  ``time.monotonic()`` on Linux; ``CLOCK_UPTIME_RAW``, i.e. ``mach_absolute_time``, on macOS).

A ``Core`` is not thread-safe (the client pools one per concurrent caller) but never holds the GIL
while it waits on the network (nor while it resolves a host name).

Portability: Linux and macOS (POSIX ``poll``). Windows is not supported by this module (no
``<poll.h>``/``<sys/socket.h>``; it would need ``WSAPoll`` and winsock error codes); there the
package uses the pure core, which ``setup.py``/the wheel configuration decide.
"""

cimport cython
from libc.errno cimport errno, EINTR, EPIPE, ECONNRESET, ECONNABORTED, ENOTCONN
from libc.string cimport memcpy, memcmp, memchr, memmove
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.math cimport ceil, ldexp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.exc cimport PyErr_CheckSignals

import os

import hiredis

from . import _outcomes as _oc
from ._scripts import (
    ACQUIRE_ALL, ACQUIRE_ALL_SHA, EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE, FENCED_ACQUIRE_SHA, RELEASE,
    RELEASE_MANY, RELEASE_MANY_SHA, RELEASE_SHA,
)

__all__ = ["Core", "Health", "Round", "encode_command"]

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
    KIND_SET = 0      # reply +OK means acquired, nil means taken
    KIND_SCRIPT = 1   # reply :1 means done, :0 means not the owner
    KIND_FENCED = 2   # reply :n >= 0 means acquired with counter n, :-1 means taken
    KIND_SCRIPT_ACQUIRE = 3  # like KIND_SCRIPT, but an acquisition: restart-aware voting applies
    KIND_BITS = 4     # one script for K keys, a bulk reply of K characters: '1' done, '0' not the owner
    HELLO_AUTH = 0
    HELLO_SELECT = 1
    HELLO_INFO = 2
    RECV_SIZE = 65536
    POLL_IN = POLLIN | POLLPRI | POLLHUP | POLLERR
    MAX_BULK = 1 << 20   # largest bulk reply accepted (INFO server is a few KB)
    MAX_LINE = 1 << 16   # longest status/error/integer/bulk-length line accepted
    MAX_ARGS = 8
    NCOUNTERS = 9        # len(_outcomes.COUNTERS), checked below
    MAX_OWED = 4096      # a connection that owes more replies than this is closed

# The outcome codes, read from the shared module so both cores can never disagree on them.
cdef int OC_OK = _oc.OK
cdef int OC_NO = _oc.NO
cdef int OC_TIMEOUT = _oc.TIMEOUT
cdef int OC_CONN_ERROR = _oc.CONN_ERROR
cdef int OC_ERROR_REPLY = _oc.ERROR_REPLY
cdef int OC_PROTOCOL_ERROR = _oc.PROTOCOL_ERROR
cdef int OC_UNTRUSTED = _oc.UNTRUSTED
cdef int OC_PENDING = _oc.PENDING
cdef int OC_SKIPPED = _oc.SKIPPED
cdef int C_REPLIES = _oc.C_REPLIES
cdef int C_TIMED = _oc.C_TIMED
cdef int C_TIMEOUTS = _oc.C_TIMEOUTS
cdef int C_CONNECT_ERRORS = _oc.C_CONNECT_ERRORS
cdef int C_CONNECTION_ERRORS = _oc.C_CONNECTION_ERRORS
cdef int C_ERROR_REPLIES = _oc.C_ERROR_REPLIES
cdef int C_PROTOCOL_ERRORS = _oc.C_PROTOCOL_ERRORS
cdef int C_SKIPPED = _oc.C_SKIPPED
cdef int C_LATE = _oc.C_LATE
if len(_oc.COUNTERS) != NCOUNTERS:  # pragma: no cover - a guard for whoever adds a counter
    raise ImportError("fastredlock._core was built for another _outcomes.COUNTERS")
#: A connection whose oldest owed reply is this many seconds past its deadline is closed.
STALE_AFTER = 1.0
cdef double _STALE_AFTER = STALE_AFTER
cdef tuple _CODE_OBJECTS = tuple(range(max(_oc.NAMES) + 1))

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

_Reader = hiredis.Reader
_ReplyError = hiredis.ReplyError
_ProtocolError = hiredis.ProtocolError
_os_strerror = os.strerror
_HELLO_NAMES = {HELLO_AUTH: "AUTH", HELLO_SELECT: "SELECT", HELLO_INFO: "INFO"}

# The parser fast path, switchable for measurements and differential tests.
cdef bint _fast_path = True


def _set_fast_path(bint enabled):
    """Enable or disable the exact-reply fast path of the parser seam (then hiredis parses all)."""
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


def _handshake(spec, restart_aware):
    """Return the bytes sent before the first command on a new connection, and what each answers."""
    out = b""
    kinds = []
    if spec.password is not None:
        if spec.username:
            out += encode_command(b"AUTH", spec.username.encode(), spec.password.encode())
        else:
            out += encode_command(b"AUTH", spec.password.encode())
        kinds.append(HELLO_AUTH)
    if spec.db:
        out += encode_command(b"SELECT", b"%d" % spec.db)
        kinds.append(HELLO_SELECT)
    if restart_aware:
        out += encode_command(b"INFO", b"server")
        kinds.append(HELLO_INFO)
    return out, tuple(kinds)


def parse_info_server(info):
    """Return ``(run_id, uptime_in_seconds)`` from an ``INFO server`` reply (``None`` where absent)."""
    run_id = uptime = None
    for line in info.split(b"\r\n"):
        if line.startswith(b"run_id:"):
            run_id = line[7:]
        elif line.startswith(b"uptime_in_seconds:"):
            try:
                uptime = int(line[18:])
            except ValueError:
                pass
    return run_id, uptime


cdef inline void _arg(const char **args, Py_ssize_t *lens, int m, bytes value) noexcept:
    """Point argument ``m`` of a command at ``value``'s bytes (it must outlive the encoding)."""
    args[m] = PyBytes_AS_STRING(value)
    lens[m] = PyBytes_GET_SIZE(value)


# --- the result of one operation ---------------------------------------------------------------
@cython.final
@cython.freelist(8)
@cython.no_gc  # holds only tuples of ints/strs/None: it cannot be part of a reference cycle
cdef class Round:
    """The result of one operation on one key: the decision, the timing and each master's answer.

    ``ok``: for acquire/extend, a quorum answered OK and validity is still positive; for release,
    a quorum still held the token. ``validity`` is in seconds, measured from ``started`` (the
    monotonic time taken before the first write), already reduced by elapsed time and drift.
    ``outcomes`` holds one code of :mod:`fastredlock._outcomes` per master; ``details`` is ``None``
    or a tuple of per-master messages (``None`` where there is nothing to say); ``values`` is
    ``None`` or, for a fenced acquisition, the fence counter each master returned (``None`` where it
    did not say OK).
    """

    cdef readonly bint ok
    cdef readonly Py_ssize_t successes
    cdef readonly double validity
    cdef readonly double elapsed
    cdef readonly double started
    cdef readonly tuple outcomes
    cdef readonly object details
    cdef readonly object values

    def __init__(self, ok, successes, validity, elapsed, started, outcomes, details, values=None):
        self.ok = ok
        self.successes = successes
        self.validity = validity
        self.elapsed = elapsed
        self.started = started
        self.outcomes = tuple(outcomes)
        self.details = details
        self.values = values

    @property
    def valid_until(self):
        """Monotonic time when the validity ends: ``started + elapsed + validity`` (computed here only)."""
        return self.started + self.elapsed + self.validity

    def __repr__(self):
        return (
            f"Round(ok={self.ok}, successes={self.successes}, validity={self.validity:.4f}, "
            f"elapsed={self.elapsed:.6f}, outcomes={self.outcomes}, details={self.details}, "
            f"values={self.values})"
        )


cdef dict _ALL_OK = {}


cdef tuple _all_ok(Py_ssize_t n):
    """The outcomes of a round every one of ``n`` masters answered OK (one shared tuple per n)."""
    cdef tuple t = _ALL_OK.get(n)
    if t is None:
        t = _ALL_OK[n] = (_CODE_OBJECTS[OC_OK],) * n
    return t


cdef int _set_outcome(Round rnd, Py_ssize_t i, int code, object detail, object value) except -1:
    """Fill in master ``i``'s PENDING outcome of a round that already returned."""
    cdef tuple old = rnd.outcomes
    cdef Py_ssize_t n = len(old), m
    cdef tuple new
    cdef list items
    if <int>old[i] != OC_PENDING:
        return 0
    if code == OC_OK and rnd.successes + 1 == n:
        new = _all_ok(n)  # the usual end of a round that returned early: share one tuple
    else:
        new = PyTuple_New(n)
        for m in range(n):
            obj = _CODE_OBJECTS[code] if m == i else old[m]
            Py_INCREF(obj)
            PyTuple_SET_ITEM(new, m, obj)
    rnd.outcomes = new
    if code == OC_OK:
        rnd.successes += 1
    if detail is not None:
        items = list(rnd.details) if rnd.details is not None else [None] * n
        items[i] = detail
        rnd.details = tuple(items)
    if value is not None and rnd.values is not None:
        items = list(rnd.values)
        items[i] = value
        rnd.values = tuple(items)
    return 0


cdef int _settle_sink(object sink, Py_ssize_t i, int code, object detail, object value) except -1:
    """Fill in master ``i``'s PENDING outcome of an owed reply's round(s) (a KIND_BITS reply
    answers for a list of rounds)."""
    if type(sink) is Round:
        return _set_outcome(<Round>sink, i, code, detail, value)
    for rnd in sink:
        _set_outcome(<Round>rnd, i, code, detail, value)
    return 0


cdef inline bint _bits_ok(object reply, Py_ssize_t rows) noexcept:
    """Whether ``reply`` is a RELEASE_MANY answer for ``rows`` keys: ``rows`` bytes of '0'/'1'."""
    cdef const char *p
    cdef Py_ssize_t r
    if type(reply) is not bytes or PyBytes_GET_SIZE(reply) != rows:
        return False
    p = PyBytes_AS_STRING(reply)
    for r in range(rows):
        if p[r] != c'0' and p[r] != c'1':
            return False
    return True


# --- master health, shared by the cores of one client ------------------------------------------
@cython.final
cdef class Health:
    """Per-master health and counters, shared by every core of one client (its pool).

    Same contract as :class:`fastredlock._core_py.Health`: counts replies, latency and failures per
    master (the fields of :data:`fastredlock._outcomes.COUNTERS`); a master that timed out, or
    refused a connection, cools down for ``cooldown`` seconds, doubled at each failure in a row up
    to ``max_cooldown``; a reply in time ends it. ``cooldown=0`` keeps the counters but never skips.
    The cores read and update it in C while holding the GIL, so it needs no lock of its own.
    """

    cdef readonly Py_ssize_t n
    cdef readonly double cooldown
    cdef readonly double max_cooldown
    cdef readonly Py_ssize_t n_cooling  # masters with a cool-down set (maybe passed, until a reply)
    cdef double *until                  # end of each master's cool-down, 0.0 when none is set
    cdef int *strikes                   # failures in a row
    cdef char *timed_out                # the cool-down follows a timeout (else a refused connect)
    cdef long long *counts              # n x NCOUNTERS
    cdef double *lat_sum
    cdef double *lat_max
    cdef list _why                      # the SKIPPED detail of each cooling master, or None
    cdef list _last                     # the last failure of each master, or None

    def __cinit__(self):
        self.until = NULL
        self.strikes = NULL
        self.timed_out = NULL
        self.counts = NULL
        self.lat_sum = NULL
        self.lat_max = NULL

    def __init__(self, Py_ssize_t n, double cooldown=0.0, double max_cooldown=5.0):
        if self.until != NULL:
            raise RuntimeError("Health is initialized once")
        self.n = n
        self.cooldown = cooldown
        self.max_cooldown = max_cooldown if max_cooldown > cooldown else cooldown
        self.until = <double *>calloc(n + 1, sizeof(double))
        self.strikes = <int *>calloc(n + 1, sizeof(int))
        self.timed_out = <char *>calloc(n + 1, sizeof(char))
        self.counts = <long long *>calloc(n * NCOUNTERS + 1, sizeof(long long))
        self.lat_sum = <double *>calloc(n + 1, sizeof(double))
        self.lat_max = <double *>calloc(n + 1, sizeof(double))
        if (self.until == NULL or self.strikes == NULL or self.timed_out == NULL or self.counts == NULL
                or self.lat_sum == NULL or self.lat_max == NULL):
            raise MemoryError()
        self._why = [None] * n
        self._last = [None] * n

    def __dealloc__(self):
        free(self.until)
        free(self.strikes)
        free(self.timed_out)
        free(self.counts)
        free(self.lat_sum)
        free(self.lat_max)

    cdef inline int mode(self, Py_ssize_t i, double now) noexcept:
        """0 healthy, 1 cooling down after a refused connection, 2 after a timeout."""
        if self.until[i] > now:
            return 2 if self.timed_out[i] else 1
        return 0

    def modes(self, double now):
        """Per master at ``now``: 0 healthy, 1 cooling down after a refused or failed connection,
        2 cooling down after a timeout (None when no master has a cool-down set)."""
        cdef Py_ssize_t i
        if not self.n_cooling:
            return None
        return [self.mode(i, now) for i in range(self.n)]

    def why(self, Py_ssize_t i):
        """Why master ``i`` is skipped: the detail of its ``SKIPPED`` outcome."""
        return self._why[i] or "cooling down"

    cdef inline int answered(self, Py_ssize_t i) except -1:
        """Master ``i`` sent a reply in time: count it, and end its cool-down."""
        self.counts[i * NCOUNTERS + C_REPLIES] += 1
        if self.strikes[i]:
            self.strikes[i] = 0
            self._why[i] = None
            if self.until[i] != 0.0:
                self.until[i] = 0.0
                self.n_cooling -= 1
        return 0

    cdef inline void timed(self, Py_ssize_t i, double latency) noexcept:
        """Master ``i`` answered all of a round's commands ``latency`` seconds after it began."""
        self.counts[i * NCOUNTERS + C_TIMED] += 1
        self.lat_sum[i] += latency
        if latency > self.lat_max[i]:
            self.lat_max[i] = latency

    cdef inline void count(self, Py_ssize_t i, int counter) noexcept:
        self.counts[i * NCOUNTERS + counter] += 1

    cdef int failed(self, Py_ssize_t i, int counter, object what, double now, bint strike) except -1:
        """Master ``i`` failed (``counter``, described by ``what``); ``strike``: start a cool-down."""
        cdef int strikes
        cdef double pause
        self.counts[i * NCOUNTERS + counter] += 1
        self._last[i] = what
        if not strike or self.until[i] > now:
            return 0  # not a health failure, or already cooling down: one failure per cool-down
        self.strikes[i] += 1
        if self.cooldown <= 0.0:
            return 0
        strikes = self.strikes[i]
        pause = self.cooldown * ldexp(1.0, strikes - 1 if strikes < 63 else 62)
        if pause > self.max_cooldown:
            pause = self.max_cooldown
        if self.until[i] == 0.0:
            self.n_cooling += 1
        self.until[i] = now + pause
        self.timed_out[i] = counter == C_TIMEOUTS
        self._why[i] = f"cooling down after {strikes} failure{'s' if strikes > 1 else ''} in a row (last: {what})"
        return 0

    def snapshot(self, double now):
        """Per master: the counters, mean and max latency, cool-down left, failures in a row, last failure."""
        cdef Py_ssize_t i, c
        cdef long long timed
        out = []
        for i in range(self.n):
            timed = self.counts[i * NCOUNTERS + C_TIMED]
            row = [self.counts[i * NCOUNTERS + c] for c in range(NCOUNTERS)]
            row.append(self.lat_sum[i] / timed if timed else 0.0)
            row.append(self.lat_max[i])
            row.append(self.until[i] - now if self.until[i] > now else 0.0)
            row.append(self.strikes[i])
            row.append(self._last[i])
            out.append(tuple(row))
        return out

    def after_fork(self):
        """In a fork child (the pure twin replaces its lock here; this one has none)."""


# --- one master's connection -------------------------------------------------------------------
ctypedef struct Owed:
    int kind              # KIND_* of the command whose reply is owed
    bint retried          # sent again on a reopened connection (a "no" may be our own SET)
    bint expired          # its deadline passed: outcome TIMEOUT, the reply is read and dropped
    double deadline
    PyObject *sink        # the Round whose PENDING outcome waits for it (a reference), or NULL


@cython.final
cdef class _Conn:
    """One master's connection: its fd, its reader, and its state within the current round."""

    cdef object spec
    cdef bytes host          # idna-encoded host, or None for a Unix socket
    cdef bytes port          # decimal port, or None
    cdef bytes path          # fs-encoded Unix socket path, or None
    cdef object addr_error   # a message if the address cannot even be encoded
    cdef bytes hello         # AUTH/SELECT/INFO sent in front of the first commands
    cdef int hello_kinds[3]
    cdef int n_hello
    cdef int fd
    cdef object reader, feed, gets, has_data
    cdef bint pending        # the reader was fed since it last ended clean (no partial reply)
    # the reply guard: where the byte stream is between replies (see guard())
    cdef int g_type          # type byte of the reply being read, 0 between replies
    cdef Py_ssize_t g_line   # bytes of its line seen so far
    cdef object g_header     # a bulk length line split across reads or not canonical, or None
    cdef Py_ssize_t g_skip   # bulk body bytes (and CRLF) still to pass over
    # restart-aware voting
    cdef object run_id
    cdef double up_since
    cdef bint has_up_since
    cdef Py_ssize_t restarts
    # per-round state
    cdef bint connecting, reused, retried, got_data
    cdef Py_ssize_t fallback_sent
    cdef int skip            # index of the next handshake reply, -1 when none is pending
    cdef int *expect         # the commands still unanswered, in reply order: expect[head:tail]
    cdef Py_ssize_t head, tail, expect_cap
    cdef const char *out     # bytes still to send (into the core's buffers or self.own)
    cdef Py_ssize_t out_len
    cdef char *own           # hello + commands for a new connection; unsent bytes + a fallback
    cdef Py_ssize_t own_cap
    cdef bint waited         # the round waits for this master's replies
    cdef bint best_effort    # cooling down after a timeout: written if possible, never waited for
    cdef bint use_eval       # an owed reply said NOSCRIPT: the next script round sends EVAL here
    cdef const char *payload # this round's commands for this connection (EVALSHA, or EVAL unwaited)
    cdef Py_ssize_t payload_len
    # replies owed to rounds that already returned, in arrival order: owed[ohead:otail]
    cdef Owed *owed
    cdef Py_ssize_t ohead, otail, ocap

    def __cinit__(self):
        self.fd = -1
        self.own = NULL
        self.expect = NULL
        self.owed = NULL
        self.skip = -1

    def __init__(self, spec, bint restart_aware):
        cdef int i
        self.spec = spec
        self.hello, kinds = _handshake(spec, restart_aware)
        self.n_hello = len(kinds)
        for i in range(self.n_hello):
            self.hello_kinds[i] = kinds[i]
        self.skip = -1
        try:
            if spec.path is not None:
                self.path = os.fsencode(spec.path)
            else:
                self.host = spec.host.encode("idna")
                self.port = str(int(spec.port)).encode()
        except (UnicodeError, TypeError, ValueError) as exc:
            self.addr_error = str(exc)

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1
        free(self.own)
        free(self.expect)
        self.forget_owed()
        free(self.owed)

    cdef void forget_owed(self) noexcept:
        """Drop the owed replies and the Rounds they reference (outcomes are the caller's business)."""
        cdef Py_ssize_t q
        for q in range(self.ohead, self.otail):
            Py_XDECREF(self.owed[q].sink)
            self.owed[q].sink = NULL
        self.ohead = 0
        self.otail = 0

    cdef int push_owed(self, int kind, double deadline, object sink, bint retried, bint expired) except -1:
        """Append an owed reply (``sink``: a Round, or None when its outcome is already final)."""
        cdef Owed *buf
        cdef Py_ssize_t live = self.otail - self.ohead
        if self.otail == self.ocap:
            if self.ohead > 0:  # slide the live entries to the front
                memmove(self.owed, self.owed + self.ohead, live * sizeof(Owed))
                self.ohead = 0
                self.otail = live
            else:
                buf = <Owed *>realloc(self.owed, (2 * self.ocap + 8) * sizeof(Owed))
                if buf == NULL:
                    raise MemoryError()
                self.owed = buf
                self.ocap = 2 * self.ocap + 8
        self.owed[self.otail].kind = kind
        self.owed[self.otail].retried = retried
        self.owed[self.otail].expired = expired
        self.owed[self.otail].deadline = deadline
        if sink is None:
            self.owed[self.otail].sink = NULL
        else:
            Py_INCREF(sink)
            self.owed[self.otail].sink = <PyObject *>sink
        self.otail += 1
        return 0

    cdef object open(self):
        """Start a non-blocking connect; return ``None``, or a message saying why it failed."""
        cdef const char *host = NULL
        cdef const char *port = NULL
        cdef const char *path = NULL
        cdef Py_ssize_t path_len = 0
        cdef int connecting = 0, err = 0, fd
        if self.addr_error is not None:
            return self.addr_error
        if self.path is not None:
            path = PyBytes_AS_STRING(self.path)
            path_len = PyBytes_GET_SIZE(self.path)
        else:
            host = PyBytes_AS_STRING(self.host)
            port = PyBytes_AS_STRING(self.port)
        with nogil:  # getaddrinfo may block on DNS
            fd = frl_connect(host, port, path, path_len, &connecting, &err)
        if fd == -1:
            return _os_strerror(err)
        if fd == -2:
            return (<bytes>gai_strerror(err)).decode("utf-8", "replace")
        if fd == -3:
            return "AF_UNIX path too long"
        self.fd = fd
        self.connecting = connecting != 0
        self.g_type = 0
        self.g_line = 0
        self.g_header = None
        self.g_skip = 0
        if self.reader is None or self.pending:
            reader = _Reader()
            self.reader = reader
            self.feed = reader.feed
            self.gets = reader.gets
            self.has_data = reader.has_data
            self.pending = False
        return None

    cdef object guard(self, const char *data, Py_ssize_t end):
        """Check that ``data`` continues a stream of replies of the shapes a lock client expects.

        Only RESP2 status, error, integer and bulk replies of bounded size pass; arrays, maps,
        RESP3 types, oversized bulks and endless lines are refused before hiredis buffers them.
        Returns a description of the problem, or None. Tracks reply boundaries across reads.
        """
        cdef Py_ssize_t pos = 0, stop, take
        cdef const char *nl
        cdef unsigned char kind
        cdef long long clen = 0
        cdef object length
        while pos < end:
            if self.g_skip:
                take = self.g_skip if self.g_skip < end - pos else end - pos
                self.g_skip -= take
                pos += take
                continue
            if not self.g_type:
                kind = <unsigned char>data[pos]
                if kind != c'+' and kind != c'-' and kind != c':' and kind != c'$':
                    return f"unexpected reply type {bytes([kind])!r}"
                self.g_type = kind
                self.g_line = 0
                self.g_header = None
                pos += 1
            nl = <const char *>memchr(data + pos, c'\n', <size_t>(end - pos))
            stop = end if nl == NULL else (nl - data) + 1
            self.g_line += stop - pos
            if self.g_line > MAX_LINE:
                return f"reply line longer than {MAX_LINE} bytes"
            if self.g_type == c'$':
                if nl != NULL and self.g_header is None and _canonical_length(data + pos, stop - pos, &clen):
                    length = None  # the usual case, parsed in C
                else:
                    # split across reads or unusual: keep the bytes and parse them as the pure core
                    header = PyBytes_FromStringAndSize(data + pos, stop - pos)
                    self.g_header = header if self.g_header is None else self.g_header + header
                    if nl == NULL:
                        return None
                    try:
                        length = int(self.g_header)
                    except ValueError:
                        return f"bad bulk length {self.g_header[:20]!r}"
                    if length > MAX_BULK:
                        return f"bulk reply of {length} bytes, over the {MAX_BULK}-byte limit"
                    clen = length if length >= 0 else -1
                if clen > MAX_BULK:
                    return f"bulk reply of {clen} bytes, over the {MAX_BULK}-byte limit"
                if clen >= 0:
                    self.g_skip = <Py_ssize_t>clen + 2
            elif nl == NULL:
                return None
            pos = stop
            self.g_type = 0
        return None

    cdef void close_fd(self) noexcept:
        """Drop the connection (close only: never shutdown, a fork sibling may share the socket)."""
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1
        self.connecting = False
        self.skip = -1
        self.out_len = 0

    cdef int reset_expect(self, Py_ssize_t k) except -1:
        """Expect the replies of commands 0..k-1 (room for k NOSCRIPT re-sends behind them)."""
        cdef Py_ssize_t j
        cdef int *buf
        if 2 * k > self.expect_cap:
            buf = <int *>realloc(self.expect, 2 * k * sizeof(int))
            if buf == NULL:
                raise MemoryError()
            self.expect = buf
            self.expect_cap = 2 * k
        for j in range(k):
            self.expect[j] = <int>j
        self.head = 0
        self.tail = k
        return 0

    cdef int set_own(self, const char *a, Py_ssize_t a_len, const char *b, Py_ssize_t b_len) except -1:
        """Queue ``a + b`` in this connection's own buffer (``a`` may point into it)."""
        cdef Py_ssize_t need = a_len + b_len
        cdef char *buf = <char *>malloc(need if need > self.own_cap else self.own_cap)
        if buf == NULL:
            raise MemoryError()
        memcpy(buf, a, a_len)
        memcpy(buf + a_len, b, b_len)
        if need > self.own_cap:
            self.own_cap = need
        free(self.own)
        self.own = buf
        self.out = buf
        self.out_len = need
        return 0


cdef void *_grow(void *ptr, size_t size) except NULL:
    """``realloc``, raising MemoryError on failure (``ptr`` is then left as it was)."""
    cdef void *buf = realloc(ptr, size)
    if buf == NULL:
        raise MemoryError()
    return buf


cdef inline bint _canonical_length(const char *p, Py_ssize_t n, long long *value) noexcept nogil:
    """Parse a bulk length line ``-?[0-9]{1,18}\\r\\n`` (``p[:n]`` ends at its newline)."""
    cdef Py_ssize_t pos = 0, end = n - 2
    cdef long long v = 0
    cdef bint neg = False
    if n < 3 or end > 19 or p[end] != c'\r':
        return False
    if p[0] == c'-':
        neg = True
        pos = 1
    if pos == end or end - pos > 18:
        return False
    while pos < end:
        if not (c'0' <= p[pos] <= c'9'):
            return False
        v = v * 10 + (p[pos] - c'0')
        pos += 1
    value[0] = -v if neg else v
    return True


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
cdef class Core:
    """N connections and the round that drives them. Not thread-safe; see the module docstring."""

    cdef readonly Py_ssize_t n
    cdef readonly Py_ssize_t quorum
    cdef readonly bint restart_aware
    cdef object _grace_obj
    cdef double _grace_ms
    cdef double _io_timeout
    cdef double _connect_timeout
    cdef double _drift_factor
    cdef list _conns
    cdef pollfd *_pfds         # one per master, fd -1 while the master is not polled
    cdef double *_deadline     # one per master: its deadline in the current round
    cdef Py_ssize_t _nactive
    cdef Health _health        # shared with the other cores of the client
    cdef readonly bint early   # acquisitions return as soon as every key is decided
    cdef int *_mode            # per master, this round: 0 healthy, 1/2 cooling down (Health.mode)
    cdef bint _any_mode        # some master cools down this round
    cdef bint _wait            # the round waits for answers (False: a release nobody awaits)
    cdef bint _acq             # the round is an acquisition
    cdef bint _early           # ... decided as soon as every key is
    cdef bint _decided         # ... and it is (nothing more to wait for but the writes)
    cdef bint _in_round        # reading for a round (else for settle/tidy: no latency samples)
    cdef double _decided_at
    cdef double _end
    cdef int *_oks             # per command: OKs so far (early decision)
    cdef int *_bad             # per command: other outcomes so far
    cdef Py_ssize_t _undecided # commands not decided yet
    cdef Py_ssize_t _n_left    # connections that owe replies after the round
    cdef tuple _all_ok
    cdef tuple _all_no
    # the round: K commands, their outcomes (K x N), details, values and ttls
    cdef int _kind
    cdef Py_ssize_t _k, _kcap     # outcome rows (keys) of the round, and the room for them
    cdef Py_ssize_t _ncmd          # commands sent to each master: _k, or 1 for KIND_BITS
    cdef int *_oc
    cdef long long *_ttls
    cdef list _details
    cdef bint _any_detail
    cdef list _values
    cdef double _io_deadline
    cdef double _started
    cdef double _elapsed
    # the encoded commands: command j is _cmd[_cmd_off[j]:_cmd_off[j + 1]]
    cdef char *_cmd
    cdef Py_ssize_t _cmd_cap
    cdef Py_ssize_t *_cmd_off
    # EVAL fallbacks (scripts only): EVAL header + the tail of command j after "EVALSHA <sha>"
    cdef bytes _script
    cdef Py_ssize_t _sha_head
    cdef int _argc
    cdef bint _fb_ready
    cdef char *_fb
    cdef Py_ssize_t _fb_cap
    cdef Py_ssize_t *_fb_off
    # the read buffer (a bytearray, so hiredis can be fed a slice of it without a copy)
    cdef bytearray _rbuf
    cdef char *_rbufp

    def __cinit__(self):
        self._pfds = NULL
        self._deadline = NULL
        self._mode = NULL
        self._oks = NULL
        self._bad = NULL
        self._oc = NULL
        self._ttls = NULL
        self._cmd = NULL
        self._cmd_off = NULL
        self._fb = NULL
        self._fb_off = NULL
        self._grace_obj = 0

    def __init__(self, masters, double io_timeout, double connect_timeout, double drift_factor,
                 bint restart_aware=False, Health health=None, bint early=True):
        cdef Py_ssize_t n
        conns = [_Conn(spec, restart_aware) for spec in masters]
        n = len(conns)
        if self._conns is not None:
            self.close()
        self._conns = conns
        self.n = n
        self.quorum = n // 2 + 1
        self.restart_aware = restart_aware
        self.restart_grace_ms = 0
        self._io_timeout = io_timeout
        self._connect_timeout = connect_timeout
        self._drift_factor = drift_factor
        self._health = health if health is not None else Health(n)
        if self._health.n != n:
            raise ValueError(f"health is for {self._health.n} masters, not {n}")
        self.early = early
        self._pfds = <pollfd *>realloc(self._pfds, (n + 1) * sizeof(pollfd))
        self._deadline = <double *>realloc(self._deadline, (n + 1) * sizeof(double))
        self._mode = <int *>realloc(self._mode, (n + 1) * sizeof(int))
        if self._pfds == NULL or self._deadline == NULL or self._mode == NULL:
            raise MemoryError()
        self._all_ok = (_CODE_OBJECTS[OC_OK],) * n
        self._all_no = (_CODE_OBJECTS[OC_NO],) * n
        self._details = []
        self._values = []
        self._any_detail = False
        self._kcap = 0
        self._reserve(1, 512)
        self._rbuf = bytearray(RECV_SIZE)
        self._rbufp = PyByteArray_AS_STRING(self._rbuf)

    def __dealloc__(self):
        # The connections close their own fds when the list drops them.
        free(self._pfds)
        free(self._deadline)
        free(self._mode)
        free(self._oks)
        free(self._bad)
        free(self._oc)
        free(self._ttls)
        free(self._cmd)
        free(self._cmd_off)
        free(self._fb)
        free(self._fb_off)

    @property
    def health(self):
        """The health of the masters, shared with the other cores of the client."""
        return self._health

    @property
    def restart_grace_ms(self):
        """An OK from a master up for less than this many milliseconds does not count (UNTRUSTED)."""
        return self._grace_obj

    @restart_grace_ms.setter
    def restart_grace_ms(self, value):
        self._grace_ms = float(value)
        self._grace_obj = value

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
        self._ttls[0] = ttl_ms
        self._script = None
        self._round(KIND_SET, 1, True)
        return self._result1()

    cdef int _script1(self, bytes sha, bytes script, const char *numkeys, int nargs,
                      const char **args, const Py_ssize_t *arg_lens, long long ttl_ms) except -1:
        """Encode ``EVALSHA sha numkeys args...`` as the round's only command (EVAL ``script`` is
        its fallback); ``ttl_ms`` > 0 asks for validity. At most 5 args."""
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
        self._ttls[0] = ttl_ms
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
        self._script1(_RELEASE_SHA, _RELEASE, b"1", 2, args, lens, 0)
        self._round(KIND_SCRIPT, 1, wait)
        return self._result1()

    def extend(self, key, token, long long ttl_ms):
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        cdef const char *args[3]
        cdef Py_ssize_t lens[3]
        cdef char ttl[24]
        _arg(args, lens, 0, k)
        _arg(args, lens, 1, t)
        args[2] = ttl; lens[2] = frl_fmt_ll(ttl, ttl_ms)
        self._script1(_EXTEND_SHA, _EXTEND, b"1", 3, args, lens, ttl_ms)
        self._round(KIND_SCRIPT, 1, True)
        return self._result1()

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
        self._script1(_FENCED_ACQUIRE_SHA, _FENCED_ACQUIRE, b"2", 4, args, lens, ttl_ms)
        self._round(KIND_FENCED, 1, True)
        return self._result1()

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
        self._script1(_FENCE_WRITE_SHA, _FENCE_WRITE, b"2", 5, args, lens, 0)
        self._round(KIND_SCRIPT, 1, True)
        return self._result1()

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
            self._ttls[j] = ttl_ms
        self._cmd_off[kk] = pos
        self._script = None
        self._round(KIND_SET, kk, True)
        return self._results(kk)

    def acquire_all(self, keys, token, long long ttl_ms):
        """Set every key to ``token`` on each master, or none of them there (one script per master)."""
        cdef list parts = [b"EVALSHA", _ACQUIRE_ALL_SHA, b"%d" % len(keys)]
        parts.extend([_as_bytes(k) for k in keys])
        parts.append(_as_bytes(token))
        parts.append(b"%d" % ttl_ms)
        self._encode_one(parts, _ACQUIRE_ALL, ttl_ms)
        self._round(KIND_SCRIPT_ACQUIRE, 1, True)
        return self._result1()

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
            self._encode_one(parts, _RELEASE_MANY, 0, kk)
            self._round(KIND_BITS, kk, wait)
            return self._results(kk)
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_RELEASE_SHA); lens[1] = PyBytes_GET_SIZE(_RELEASE_SHA)
        argv[2] = b"1"; lens[2] = 1
        for j in range(kk):
            lens[3] = PyBytes_GET_SIZE(<bytes>kbs[j])
            lens[4] = PyBytes_GET_SIZE(<bytes>tbs[j])
            size += frl_encoded_size(5, lens)
        self._reserve(kk, size)
        for j in range(kk):
            kb = <bytes>kbs[j]
            tb = <bytes>tbs[j]
            argv[3] = PyBytes_AS_STRING(kb); lens[3] = PyBytes_GET_SIZE(kb)
            argv[4] = PyBytes_AS_STRING(tb); lens[4] = PyBytes_GET_SIZE(tb)
            self._cmd_off[j] = pos
            pos += frl_encode(self._cmd + pos, 5, 5, argv, lens)
            self._ttls[j] = 0
        self._cmd_off[kk] = pos
        self._set_script(_RELEASE, 5, lens)
        self._round(KIND_SCRIPT, kk, wait)
        return self._results(kk)

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
            self._ttls[j] = ttl_ms
            j += 1
        self._cmd_off[kk] = pos
        self._set_script(_EXTEND, 6, lens)
        self._round(KIND_SCRIPT, kk, True)
        return self._results(kk)

    def master_states(self):
        """Per master: ``(run_id, up_since, restarts seen)`` as learned by restart-aware voting."""
        cdef _Conn c
        return [(c.run_id, c.up_since if c.has_up_since else None, c.restarts) for c in self._conns]

    @property
    def owed(self):
        """How many replies the connections still owe to rounds that already returned."""
        cdef _Conn c
        return sum([c.otail - c.ohead for c in self._conns])

    @property
    def pending(self):
        """How many of those would still fill in a PENDING outcome (not yet past their deadline)."""
        cdef _Conn c
        cdef Py_ssize_t q, count = 0
        for c in self._conns:
            for q in range(c.ohead, c.otail):
                if c.owed[q].sink != NULL:
                    count += 1
        return count

    def settle(self, timeout=None, until=None):
        """Read the replies owed by earlier rounds until each arrived or its deadline passed.

        Their rounds' PENDING outcomes are filled in (TIMEOUT for a reply that missed its deadline).
        ``timeout`` bounds the wait (seconds); by default it is bounded by the owed deadlines.
        ``until``: a callable; return as soon as it returns true (checked before each wait).
        """
        cdef Py_ssize_t n = self.n, i, q
        cdef _Conn c
        cdef pollfd *pfds = self._pfds
        cdef double end = -1.0, now, first, due, wait_ms
        cdef bint have
        cdef int rc, err, timeout_ms
        if timeout is not None:
            end = frl_now() + <double>timeout
        self._in_round = False
        self._nactive = 0
        for i in range(n):
            pfds[i].fd = -1
        while True:
            if until is not None and until():
                return
            now = frl_now()
            have = False
            first = 0.0
            for i in range(n):
                c = <_Conn>self._conns[i]
                if c.ohead == c.otail or c.fd < 0:
                    continue
                if pfds[i].fd < 0:
                    self._register(i, c)
                for q in range(c.ohead, c.otail):
                    if c.owed[q].sink != NULL and (not have or c.owed[q].deadline < first):
                        first = c.owed[q].deadline
                        have = True
            if not have:
                return
            due = first if end < 0.0 or first < end else end
            if due <= now:
                for i in range(n):
                    c = <_Conn>self._conns[i]
                    if c.ohead < c.otail:
                        self._tidy(i, c, now)
                if end >= 0.0 and end <= now:
                    return
                continue
            wait_ms = ceil((due - now) * 1000.0)
            timeout_ms = 2147483647 if wait_ms > 2147483647.0 else <int>wait_ms
            with nogil:
                rc = poll(pfds, <nfds_t>n, timeout_ms)
                err = errno
            if rc < 0:
                if err == EINTR:
                    PyErr_CheckSignals()
                    continue
                raise OSError(err, _os_strerror(err))
            for i in range(n):
                if pfds[i].fd >= 0 and pfds[i].revents & POLL_IN:
                    self._readable(i, <_Conn>self._conns[i])

    def close(self):
        """Close every connection; the core reconnects lazily if used again."""
        cdef _Conn c
        cdef Py_ssize_t i
        if self._conns is None:
            return
        for i in range(self.n):
            c = <_Conn>self._conns[i]
            self._drop_owed(i, c, OC_CONN_ERROR, "the connection was closed before the reply")
            c.close_fd()

    # --- buffers and encoding -----------------------------------------------------------------
    cdef int _reserve(self, Py_ssize_t k, Py_ssize_t size) except -1:
        """Room for k commands of ``size`` encoded bytes in all, and for their outcomes."""
        cdef Py_ssize_t n = self.n
        cdef Py_ssize_t cap
        cdef void *buf
        if size > self._cmd_cap or self._cmd == NULL:
            cap = size if size > 512 else 512
            buf = realloc(self._cmd, cap)
            if buf == NULL:
                raise MemoryError()
            self._cmd = <char *>buf
            self._cmd_cap = cap
        if k > self._kcap or self._oc == NULL:
            self._oc = <int *>_grow(self._oc, (k * n + 1) * sizeof(int))
            self._ttls = <long long *>_grow(self._ttls, (k + 1) * sizeof(long long))
            self._cmd_off = <Py_ssize_t *>_grow(self._cmd_off, (k + 1) * sizeof(Py_ssize_t))
            self._fb_off = <Py_ssize_t *>_grow(self._fb_off, (k + 1) * sizeof(Py_ssize_t))
            self._oks = <int *>_grow(self._oks, (k + 1) * sizeof(int))
            self._bad = <int *>_grow(self._bad, (k + 1) * sizeof(int))
            self._details = [None] * (k * n)
            self._any_detail = False
            self._kcap = k
        return 0

    cdef int _encode_one(self, list parts, bytes script, long long ttl_ms, Py_ssize_t rows=1) except -1:
        """The round's only command, from a list of bytes (for variable-length commands); it
        answers for ``rows`` outcome rows (KIND_BITS), each with ``ttl_ms``."""
        cdef Py_ssize_t argc = len(parts), i
        cdef const char **argv = <const char **>malloc((argc + 1) * sizeof(char *))
        cdef Py_ssize_t *lens = <Py_ssize_t *>malloc((argc + 1) * sizeof(Py_ssize_t))
        try:
            if argv == NULL or lens == NULL:
                raise MemoryError()
            for i in range(argc):
                argv[i] = PyBytes_AS_STRING(parts[i])
                lens[i] = PyBytes_GET_SIZE(parts[i])
            self._reserve(rows, frl_encoded_size(<int>argc, lens))
            self._cmd_off[0] = 0
            self._cmd_off[1] = frl_encode(self._cmd, <int>argc, <int>argc, argv, lens)
            for i in range(rows):
                self._ttls[i] = ttl_ms
            if script is None:
                self._script = None
            else:
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

    cdef int _encode_fallbacks(self) except -1:
        """Encode ``EVAL <script> ...`` for every command of the round (on the first NOSCRIPT)."""
        cdef const char *argv[2]
        cdef Py_ssize_t lens[2]
        cdef Py_ssize_t head, size, pos = 0, j, tail
        cdef void *buf
        argv[0] = b"EVAL"; lens[0] = 4
        argv[1] = PyBytes_AS_STRING(self._script); lens[1] = PyBytes_GET_SIZE(self._script)
        head = frl_encoded_size(2, lens)
        size = self._ncmd * head + self._cmd_off[self._ncmd]
        if size > self._fb_cap:
            buf = realloc(self._fb, size)
            if buf == NULL:
                raise MemoryError()
            self._fb = <char *>buf
            self._fb_cap = size
        for j in range(self._ncmd):
            self._fb_off[j] = pos
            pos += frl_encode(self._fb + pos, self._argc, 2, argv, lens)
            tail = self._cmd_off[j + 1] - self._cmd_off[j] - self._sha_head
            memcpy(self._fb + pos, self._cmd + self._cmd_off[j] + self._sha_head, tail)
            pos += tail
        self._fb_off[self._ncmd] = pos
        self._fb_ready = True
        return 0

    # --- the round ----------------------------------------------------------------------------
    cdef int _round(self, int kind, Py_ssize_t k, bint wait) except -1:
        """Run the k encoded commands on every master; fill outcomes and timing.

        Returns once the round is decided (early decision) or every waited master answered or
        passed its deadline, and every command that must be written is. ``wait=False``: only write.
        """
        cdef Py_ssize_t n = self.n, i
        cdef _Conn c
        cdef pollfd *pfds = self._pfds
        cdef Health health = self._health
        cdef double now, wait_s, first, fresh_deadline, wait_ms, swept = -1.0
        cdef int rc, err, timeout_ms
        cdef short ev
        cdef bint have

        self._kind = kind
        self._k = k
        self._ncmd = 1 if kind == KIND_BITS else k
        self._fb_ready = False
        self._nactive = 0
        if self._any_detail:
            for i in range(len(self._details)):
                self._details[i] = None
            self._any_detail = False
        if kind == KIND_FENCED:
            self._values = [None] * (k * n)
        for i in range(k * n):
            self._oc[i] = OC_PENDING
        for i in range(n):
            pfds[i].fd = -1
        self._wait = wait
        self._acq = kind != KIND_SCRIPT and kind != KIND_BITS
        self._early = wait and self.early and self._acq
        self._decided = not wait
        if self._early:
            for i in range(k):
                self._oks[i] = 0
                self._bad[i] = 0
            self._undecided = k

        self._started = frl_now()
        self._decided_at = self._started
        self._io_deadline = self._started + self._io_timeout
        fresh_deadline = self._io_deadline + self._connect_timeout
        self._any_mode = False
        if health.n_cooling:
            for i in range(n):
                self._mode[i] = health.mode(i, self._started)
                if self._mode[i]:
                    self._any_mode = True
        self._in_round = True
        for i in range(n):
            c = <_Conn>self._conns[i]
            c.retried = False
            c.fallback_sent = 0
            self._start(i, c, fresh_deadline)

        while True:
            now = frl_now()
            have = False
            first = 0.0
            for i in range(n):
                if pfds[i].fd < 0:
                    continue
                c = <_Conn>self._conns[i]
                if (((c.out_len or c.skip >= 0 or c.connecting) and not c.best_effort)
                        or (c.waited and not self._decided)):
                    if not have or self._deadline[i] < first:
                        first = self._deadline[i]
                        have = True
            if not have:
                break
            wait_s = first - now
            if wait_s <= 0.0:
                if swept != first:
                    # A deadline passed: first read what already arrived (this thread may have been
                    # descheduled past it), then call late only what is still missing.
                    swept = first
                    timeout_ms = 0
                else:
                    for i in range(n):
                        if pfds[i].fd >= 0 and self._deadline[i] <= now:
                            c = <_Conn>self._conns[i]
                            if (((c.out_len or c.skip >= 0 or c.connecting) and not c.best_effort)
                                    or (c.waited and not self._decided)):
                                self._timeout(i, c, now)
                    continue
            else:
                wait_ms = ceil(wait_s * 1000.0)
                timeout_ms = 2147483647 if wait_ms > 2147483647.0 else <int>wait_ms
            with nogil:
                rc = poll(pfds, <nfds_t>n, timeout_ms)
                err = errno
            if rc < 0:
                if err == EINTR:
                    PyErr_CheckSignals()  # a signal handler's exception ends the round
                    continue
                raise OSError(err, _os_strerror(err))
            if rc == 0:
                continue
            for i in range(n):
                ev = pfds[i].revents
                if ev == 0 or pfds[i].fd < 0:
                    continue
                c = <_Conn>self._conns[i]
                if ev & POLLOUT:
                    if c.connecting:
                        err = frl_sock_error(c.fd)
                        if err:
                            self._fail(i, c, OC_CONN_ERROR, _os_strerror(err), C_CONNECT_ERRORS, True)
                            continue
                        c.connecting = False
                    if not self._write(i, c):
                        continue
                    if c.out_len == 0:
                        pfds[i].events = POLL_IN
                if ev & POLL_IN:
                    self._readable(i, c)

        self._in_round = False
        now = frl_now()
        self._end = now
        self._elapsed = (self._decided_at if self._decided else now) - self._started
        self._n_left = 0
        for i in range(n):
            c = <_Conn>self._conns[i]
            if pfds[i].fd >= 0 and c.best_effort and (c.out_len or c.skip >= 0 or c.connecting):
                # a stalled master whose socket buffer is full: give up on it
                self._fail(i, c, OC_TIMEOUT, "not written: the connection does not take more", C_TIMEOUTS, True)
            if c.head < c.tail or c.ohead < c.otail:
                self._n_left += 1
        return 0

    cdef inline void _decide(self, Py_ssize_t j, int code) noexcept:
        """Count an outcome of command j toward the early decision."""
        if not self._early or self._decided:
            return
        if code == OC_OK:
            self._oks[j] += 1
            if self._oks[j] == self.quorum:
                self._undecided -= 1
        else:
            self._bad[j] += 1
            if self._bad[j] == self.n - self.quorum + 1:
                self._undecided -= 1
        if self._undecided == 0:
            self._decided = True
            self._decided_at = frl_now()

    cdef Round _result1(self):
        """The Round of the round's only command; its stragglers become owed replies."""
        cdef Round rnd = self._result(0)
        if self._n_left:
            self._finish(rnd)
        return rnd

    cdef list _results(self, Py_ssize_t k):
        cdef list rounds = [self._result(j) for j in range(k)]
        if self._n_left:
            self._finish(rounds)
        return rounds

    cdef int _finish(self, object rounds) except -1:
        """The replies still missing become owed replies of their connections; tidy those."""
        cdef Py_ssize_t i, q
        cdef _Conn c
        for i in range(self.n):
            c = <_Conn>self._conns[i]
            if c.head < c.tail:
                for q in range(c.head, c.tail):
                    if type(rounds) is Round or self._kind == KIND_BITS:
                        sink = rounds  # the one Round, or every Round a KIND_BITS reply answers for
                    else:
                        sink = rounds[c.expect[q]]
                    c.push_owed(self._kind, self._deadline[i], sink, c.retried, False)
                c.head = c.tail
            if c.ohead < c.otail:
                self._tidy(i, c, self._end)
        return 0

    cdef Round _result(self, Py_ssize_t j):
        """The Round of command j of the last round: the quorum and validity arithmetic."""
        cdef Py_ssize_t n = self.n, i, successes = 0, nos = 0
        cdef int *row = self._oc + j * n
        cdef int code
        cdef long long ttl_ms = self._ttls[j]
        cdef double validity_ms
        cdef tuple outcomes
        cdef Round rnd = Round.__new__(Round)
        for i in range(n):
            code = row[i]
            if code == OC_OK:
                successes += 1
            elif code == OC_NO:
                nos += 1
        if successes == n:
            outcomes = self._all_ok
        elif nos == n:
            outcomes = self._all_no
        else:
            outcomes = PyTuple_New(n)
            for i in range(n):
                obj = _CODE_OBJECTS[row[i]]
                Py_INCREF(obj)
                PyTuple_SET_ITEM(outcomes, i, obj)
        if ttl_ms:
            validity_ms = <double>ttl_ms - self._elapsed * 1000.0 - (<double>ttl_ms * self._drift_factor + 2.0)
            rnd.ok = successes >= self.quorum and validity_ms > 0
            rnd.validity = validity_ms / 1000.0
        else:
            rnd.ok = successes >= self.quorum
            rnd.validity = 0.0
        rnd.successes = successes
        rnd.elapsed = self._elapsed
        rnd.started = self._started
        rnd.outcomes = outcomes
        if self._any_detail:
            drow = tuple(self._details[j * n:(j + 1) * n])
            rnd.details = drow if any(d is not None for d in drow) else None
        if self._kind == KIND_FENCED:
            rnd.values = tuple(self._values[j * n:(j + 1) * n])
        return rnd

    cdef inline void _register(self, Py_ssize_t i, _Conn c) noexcept:
        if self._pfds[i].fd < 0:
            self._nactive += 1
        self._pfds[i].fd = c.fd
        self._pfds[i].events = POLL_IN | (POLLOUT if c.out_len else 0)
        self._pfds[i].revents = 0

    cdef inline void _unregister(self, Py_ssize_t i) noexcept:
        if self._pfds[i].fd >= 0:
            self._pfds[i].fd = -1
            self._nactive -= 1

    cdef int _drop_owed(self, Py_ssize_t i, _Conn c, int code, object detail) except -1:
        """Forget the owed replies (the connection is closing): PENDING outcomes become ``code``."""
        cdef Py_ssize_t q
        for q in range(c.ohead, c.otail):
            if c.owed[q].sink != NULL:
                _settle_sink(<object>c.owed[q].sink, i, code, detail, None)
        c.forget_owed()
        return 0

    cdef int _fail(self, Py_ssize_t i, _Conn c, int code, object detail, int counter, bint strike) except -1:
        """Close this master's connection; every reply it owes or has not sent gets ``code``."""
        cdef Py_ssize_t q, idx, j
        self._unregister(i)
        c.close_fd()
        for q in range(c.head, c.tail):
            self._record_cmd(c.expect[q], i, code, detail)
        c.head = c.tail
        self._drop_owed(i, c, code, detail)
        self._health.failed(i, counter, _what(code, detail), frl_now(), strike)
        return 0

    cdef int _record_cmd(self, Py_ssize_t j, Py_ssize_t i, int code, object detail) except -1:
        """Set master ``i``'s outcome of every row command ``j`` answers for (all, for KIND_BITS)."""
        cdef Py_ssize_t row, first = j, last = j + 1, idx
        if self._kind == KIND_BITS:
            first = 0
            last = self._k
        for row in range(first, last):
            idx = row * self.n + i
            self._oc[idx] = code
            if detail is not None:
                self._details[idx] = detail
                self._any_detail = True
            self._decide(row, code)
        return 0

    cdef int _timeout(self, Py_ssize_t i, _Conn c, double now) except -1:
        """The master's deadline passed. Keep a connection that carries all our commands open."""
        cdef Py_ssize_t q, j
        if c.out_len or c.skip >= 0 or c.connecting:
            # Not all of this round's commands went out: nothing would keep their order; drop it.
            self._fail(i, c, OC_TIMEOUT, None, C_TIMEOUTS, True)
            return 0
        self._unregister(i)
        for q in range(c.ohead, c.otail):
            if not c.owed[q].expired:
                c.owed[q].expired = True
                if c.owed[q].sink != NULL:
                    _settle_sink(<object>c.owed[q].sink, i, OC_TIMEOUT, None, None)
                    Py_XDECREF(c.owed[q].sink)
                    c.owed[q].sink = NULL
        for q in range(c.head, c.tail):
            self._record_cmd(c.expect[q], i, OC_TIMEOUT, None)
            c.push_owed(self._kind, self._deadline[i], None, c.retried, True)
        c.head = c.tail
        self._health.failed(i, C_TIMEOUTS, "timeout", now, True)
        return 0

    cdef int _tidy(self, Py_ssize_t i, _Conn c, double now) except -1:
        """Expire owed replies past their deadline (after reading what arrived); close a stale connection."""
        cdef Py_ssize_t q
        cdef bint overdue = False, struck = False
        for q in range(c.ohead, c.otail):
            if not c.owed[q].expired and c.owed[q].deadline <= now:
                overdue = True
                break
        if overdue and c.fd >= 0:
            self._readable(i, c)  # non-blocking: whatever already arrived is not late
        for q in range(c.ohead, c.otail):
            if not c.owed[q].expired and c.owed[q].deadline <= now:
                c.owed[q].expired = True
                struck = True
                if c.owed[q].sink != NULL:
                    _settle_sink(<object>c.owed[q].sink, i, OC_TIMEOUT, None, None)
                    Py_XDECREF(c.owed[q].sink)
                    c.owed[q].sink = NULL
        if struck:
            self._health.failed(i, C_TIMEOUTS, "timeout", now, True)
        if c.ohead < c.otail and (c.otail - c.ohead > MAX_OWED
                                  or c.owed[c.ohead].deadline + _STALE_AFTER < now):
            self._unregister(i)
            c.close_fd()
            self._drop_owed(i, c, OC_TIMEOUT, None)
        return 0

    cdef int _start(self, Py_ssize_t i, _Conn c, double deadline) except -1:
        """Open the connection if needed, queue the commands, write what the socket takes."""
        cdef object detail
        cdef Py_ssize_t j, idx
        cdef int mode = self._mode[i] if self._any_mode else 0
        c.reset_expect(self._ncmd)
        c.got_data = False
        if mode and (self._acq or (mode == 2 and c.fd < 0)):
            # Cooling down: acquisitions do not ask it. A release or an extension goes to a master
            # that refused connections (it may be back: a refusal costs no waiting), and to one
            # that timed out if its connection is open (behind the SETs there), without waiting.
            detail = self._health.why(i)
            for j in range(self._k):
                idx = j * self.n + i
                self._oc[idx] = OC_SKIPPED
                self._details[idx] = detail
                self._decide(j, OC_SKIPPED)
            self._any_detail = True
            c.head = c.tail
            self._health.count(i, C_SKIPPED)
            return 0
        c.best_effort = mode == 2
        c.waited = self._wait and not c.best_effort
        if self._script is None or (c.waited and not c.use_eval):
            c.payload = self._cmd
            c.payload_len = self._cmd_off[self._ncmd]
        else:
            # Nobody waits for this answer, so a NOSCRIPT could not be answered with EVAL; or the
            # master said NOSCRIPT too late last time (its script cache is empty): send EVAL.
            if not self._fb_ready:
                self._encode_fallbacks()
            c.payload = self._fb
            c.payload_len = self._fb_off[self._ncmd]
            c.use_eval = False
        if c.fd < 0:
            detail = c.open()
            if detail is not None:
                self._fail(i, c, OC_CONN_ERROR, detail, C_CONNECT_ERRORS, True)
                return 0
            if c.n_hello:
                # The handshake goes first, alone: if AUTH, SELECT or INFO fails, no command of ours
                # may have run (on the wrong db, or without the checks restart-aware voting needs).
                c.out = PyBytes_AS_STRING(c.hello)
                c.out_len = PyBytes_GET_SIZE(c.hello)
                c.skip = 0
            else:
                c.out = c.payload
                c.out_len = c.payload_len
                c.skip = -1
            c.reused = False
            self._deadline[i] = deadline
        else:
            c.out = c.payload
            c.out_len = c.payload_len
            c.skip = -1
            c.reused = True
            self._deadline[i] = self._io_deadline
        if not c.connecting and not self._write(i, c):
            return 0
        self._register(i, c)
        return 1

    cdef int _broken(self, Py_ssize_t i, _Conn c, object detail) except -1:
        """A reused connection that breaks before any reply is stale: reopen and resend once."""
        if c.head < c.tail and c.reused and not c.retried and not c.got_data:
            c.retried = True
            self._unregister(i)
            c.close_fd()
            self._drop_owed(i, c, OC_CONN_ERROR, "connection broke before the reply")
            self._health.count(i, C_CONNECTION_ERRORS)
            self._start(i, c, self._io_deadline + self._connect_timeout)
        else:
            self._fail(i, c, OC_CONN_ERROR, detail, C_CONNECTION_ERRORS, False)
        return 0

    cdef int _write(self, Py_ssize_t i, _Conn c) except -1:
        """Send what the socket takes; 1 if the connection is still usable, 0 if it was settled."""
        cdef ssize_t sent
        cdef int err
        while True:
            sent = send(c.fd, c.out, <size_t>c.out_len, MSG_NOSIGNAL)
            if sent >= 0:
                break
            err = errno
            if err == EINTR:
                PyErr_CheckSignals()
                continue
            if frl_would_block(err):
                return 1
            if _stale(err):
                self._broken(i, c, _os_strerror(err))
            else:
                self._fail(i, c, OC_CONN_ERROR, _os_strerror(err), C_CONNECTION_ERRORS, False)
            return 0
        c.out += sent
        c.out_len -= sent
        return 1

    cdef int _readable(self, Py_ssize_t i, _Conn c) except -1:
        """Read what arrived on one connection and hand it to the parser seam."""
        cdef ssize_t got
        cdef int err
        got = recv(c.fd, self._rbufp, RECV_SIZE, 0)
        if got < 0:
            err = errno
            if err == EINTR or frl_would_block(err):
                return 0
            if _stale(err):
                self._broken(i, c, _os_strerror(err))
            else:
                self._fail(i, c, OC_CONN_ERROR, _os_strerror(err), C_CONNECTION_ERRORS, False)
            return 0
        if got == 0:
            self._broken(i, c, "connection closed by the master")
            return 0
        problem = c.guard(self._rbufp, got)
        if problem is not None:
            self._fail(i, c, OC_PROTOCOL_ERROR, problem, C_PROTOCOL_ERRORS, False)
            return 0
        return self._parse(i, c, got)

    cdef inline int _done(self, Py_ssize_t i, _Conn c) except -1:
        """Every reply this connection owed has arrived: a latency sample, stop polling it."""
        if self._in_round and self._pfds[i].fd >= 0:
            self._health.timed(i, frl_now() - self._started)
        self._unregister(i)
        return 0

    # --- the parser seam ----------------------------------------------------------------------
    cdef int _parse(self, Py_ssize_t i, _Conn c, Py_ssize_t nbytes) except -1:
        """Turn the ``nbytes`` just read into outcomes for this master's owed and pending commands.

        Fast path (a clean reader, no handshake reply pending): whole expected replies at the front
        of the read are settled in C. The rest of the read, if any, goes to hiredis in one ``feed``.
        Replies owed to earlier rounds come first, in order.
        """
        cdef Py_ssize_t pos = 0, used
        cdef int code = 0, kind
        cdef long long value = 0
        cdef bint owed
        if _fast_path and not c.pending and c.skip < 0:
            while pos < nbytes:
                owed = c.ohead < c.otail
                if owed:
                    kind = c.owed[c.ohead].kind
                elif c.head < c.tail:
                    kind = self._kind
                else:
                    break
                used = _fast_reply(self._rbufp + pos, nbytes - pos, kind, &code, &value)
                if used == 0:
                    break
                pos += used
                if owed:
                    if not self._owed_answer(i, c, code, None,
                                             value if code == OC_OK and kind == KIND_FENCED else None):
                        return 0
                elif not self._answer(i, c, code, None, value if code == OC_OK and kind == KIND_FENCED else None):
                    return 0
            if pos == nbytes:
                if c.head == c.tail and c.ohead == c.otail:
                    self._done(i, c)
                return 0
            if c.head == c.tail and c.ohead == c.otail:
                self._fail(i, c, OC_PROTOCOL_ERROR, "unexpected bytes after the last reply", C_PROTOCOL_ERRORS, False)
                return 0
        c.feed(self._rbuf, pos, nbytes - pos)
        c.pending = True
        while c.ohead < c.otail or c.head < c.tail:
            try:
                reply = c.gets()
            except Exception as exc:  # hiredis.ProtocolError, or MemoryError on absurd headers
                self._fail(i, c, OC_PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}", C_PROTOCOL_ERRORS, False)
                return 0
            if reply is False:
                if c.ohead == c.otail and c.has_data():
                    c.got_data = True  # part of a reply to this round's commands
                return 0
            if c.skip >= 0:
                c.got_data = True
                problem = self._hello_reply(c, c.hello_kinds[c.skip], reply)
                if problem is not None:
                    self._fail(i, c, OC_ERROR_REPLY, problem, C_ERROR_REPLIES, False)
                    return 0
                c.skip += 1
                if c.skip == c.n_hello:
                    c.skip = -1
                    if not c.has_data():
                        c.pending = False  # the reader is clean again: the fast path may serve
                    c.out = c.payload
                    c.out_len = c.payload_len
                    if not self._write(i, c):
                        return 0
                    if c.out_len:
                        self._pfds[i].events = POLL_IN | POLLOUT
                continue
            if c.ohead < c.otail:
                if not self._owed_reply(i, c, reply):
                    return 0
                continue
            if isinstance(reply, _ReplyError):
                if (self._script is not None and c.fallback_sent < self._ncmd
                        and str(reply).startswith("NOSCRIPT")):
                    # The script cache is empty (a restart or SCRIPT FLUSH): send the script itself.
                    c.fallback_sent += 1
                    self._resend_as_eval(i, c)
                    if c.fd < 0:
                        return 0
                    continue
                if not self._answer(i, c, OC_ERROR_REPLY, str(reply), None):
                    return 0
            elif self._kind == KIND_BITS:
                if not self._answer_bits(i, c, reply):
                    return 0
            elif not self._classify(i, c, reply):
                return 0
        if c.has_data():
            self._fail(i, c, OC_PROTOCOL_ERROR, "unexpected bytes after the last reply", C_PROTOCOL_ERRORS, False)
            return 0
        c.pending = False
        self._done(i, c)
        return 0

    cdef int _classify(self, Py_ssize_t i, _Conn c, object reply) except -1:
        """Settle the next command with one non-error reply (parsed by hiredis)."""
        cdef int code
        code, detail, value = _classify_reply(self._kind, reply)
        return self._answer(i, c, code, detail, value)

    cdef int _answer(self, Py_ssize_t i, _Conn c, int code, object detail, object value) except -1:
        """Record the outcome of this master's next pending command; 0 if that closed the connection."""
        cdef Py_ssize_t j = c.expect[c.head]
        cdef Py_ssize_t idx = j * self.n + i
        c.head += 1
        c.got_data = True  # (owed replies do not count: they only say the master was alive)
        if self._acq and ((code == OC_OK and c.has_up_since) or (code == OC_NO and c.retried)):
            code, detail = self._acquisition_outcome(c, code, c.retried, detail)
        if self._kind == KIND_BITS:
            self._record_cmd(j, i, code, detail)  # an error reply: the same for every key
        else:
            self._oc[idx] = code
            self._decide(j, code)
            if detail is not None:
                self._details[idx] = detail
                self._any_detail = True
            if self._kind == KIND_FENCED:
                self._values[idx] = value
        if code == OC_PROTOCOL_ERROR:
            # A reply of the wrong shape: the connection is out of step with its requests.
            self._fail(i, c, code, detail, C_PROTOCOL_ERRORS, False)
            return 0
        self._health.answered(i)
        if code == OC_ERROR_REPLY:
            self._health.count(i, C_ERROR_REPLIES)
        return 1

    cdef int _answer_bits(self, Py_ssize_t i, _Conn c, object reply) except -1:
        """Record a RELEASE_MANY reply: one outcome per key; 0 if that closed the connection."""
        cdef Py_ssize_t row, n = self.n
        cdef const char *p
        if not _bits_ok(reply, self._k):
            return self._answer(i, c, OC_PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None)
        c.head += 1
        c.got_data = True
        p = PyBytes_AS_STRING(reply)
        for row in range(self._k):
            self._oc[row * n + i] = OC_OK if p[row] == c'1' else OC_NO
        self._health.answered(i)
        return 1

    cdef tuple _acquisition_outcome(self, _Conn c, int code, bint retried, object detail):
        """An acquisition's OK or "no" reconsidered: restart-aware voting, a resent command."""
        cdef double up
        if code == OC_OK:
            up = frl_now() - c.up_since
            if up * 1000.0 < self._grace_ms:
                return OC_UNTRUSTED, f"up for {up:.0f}s, less than the restart grace of {self._grace_obj / 1000.0:g}s"
        elif retried:
            # The lost connection may have run our first SET: the key can be ours.
            # Not a clear "no", so the caller releases (owner-checked) to be sure.
            return OC_CONN_ERROR, "connection broke; the resent command found the key set"
        return code, detail

    cdef int _owed_reply(self, Py_ssize_t i, _Conn c, object reply) except -1:
        """Settle the next owed reply with one reply parsed by hiredis; 0 if that closed the connection."""
        cdef int code
        if isinstance(reply, _ReplyError):
            # No EVAL fallback here: the round that sent it has returned (its outcome says so; an
            # acquisition must not land after its own cleanup). The next script round sends EVAL.
            detail = str(reply)
            if detail.startswith("NOSCRIPT"):
                c.use_eval = True
            return self._owed_answer(i, c, OC_ERROR_REPLY, detail, None)
        if c.owed[c.ohead].kind == KIND_BITS:
            return self._owed_bits(i, c, reply)
        code, detail, value = _classify_reply(c.owed[c.ohead].kind, reply)
        return self._owed_answer(i, c, code, detail, value)

    cdef int _owed_bits(self, Py_ssize_t i, _Conn c, object reply) except -1:
        """Settle an owed RELEASE_MANY reply: one outcome per key of the rounds it answers for."""
        cdef Owed *e = &c.owed[c.ohead]
        cdef Py_ssize_t row, rows
        cdef const char *p
        sink = <object>e.sink if e.sink != NULL else None
        rows = len(sink) if sink is not None else (PyBytes_GET_SIZE(reply) if type(reply) is bytes else 0)
        if not _bits_ok(reply, rows):
            return self._owed_answer(i, c, OC_PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None)
        if sink is not None:
            p = PyBytes_AS_STRING(reply)
            for row in range(rows):
                _set_outcome(<Round>sink[row], i, OC_OK if p[row] == c'1' else OC_NO, None, None)
            Py_XDECREF(e.sink)
            e.sink = NULL
        return self._owed_answer(i, c, OC_OK, None, None)  # counts the reply (or a late one)

    cdef int _owed_answer(self, Py_ssize_t i, _Conn c, int code, object detail, object value) except -1:
        """Record the next owed reply: fill in its round's outcome; 0 if that closed the connection."""
        cdef Owed *e = &c.owed[c.ohead]
        cdef PyObject *sink = e.sink
        cdef bint expired = e.expired
        e.sink = NULL
        c.ohead += 1
        if c.ohead == c.otail:
            c.ohead = 0
            c.otail = 0
        if e.kind != KIND_SCRIPT and ((code == OC_OK and c.has_up_since) or (code == OC_NO and e.retried)):
            code, detail = self._acquisition_outcome(c, code, e.retried, detail)
        try:
            if code == OC_PROTOCOL_ERROR:
                if sink != NULL:
                    _settle_sink(<object>sink, i, code, detail, None)
                self._fail(i, c, code, detail, C_PROTOCOL_ERRORS, False)
                return 0
            if expired:
                self._health.count(i, C_LATE)
                return 1
            self._health.answered(i)
            if code == OC_ERROR_REPLY:
                self._health.count(i, C_ERROR_REPLIES)
            if sink != NULL:
                _settle_sink(<object>sink, i, code, detail, value)
            return 1
        finally:
            Py_XDECREF(sink)

    cdef int _resend_as_eval(self, Py_ssize_t i, _Conn c) except -1:
        """Move the next pending command to the back and queue its EVAL form behind unsent bytes."""
        cdef int j = c.expect[c.head]
        cdef const char *fb
        cdef Py_ssize_t fb_len
        c.head += 1
        c.expect[c.tail] = j
        c.tail += 1
        if not self._fb_ready:
            self._encode_fallbacks()
        fb = self._fb + self._fb_off[j]
        fb_len = self._fb_off[j + 1] - self._fb_off[j]
        if c.out_len == 0:
            c.out = fb
            c.out_len = fb_len
        else:
            c.set_own(c.out, c.out_len, fb, fb_len)
        if self._write(i, c) and c.out_len:
            self._pfds[i].events = POLL_IN | POLLOUT
        return 0

    cdef object _hello_reply(self, _Conn c, int hello_kind, object reply):
        """Check one handshake reply; return a problem to report, or None."""
        if isinstance(reply, _ReplyError):
            what = _HELLO_NAMES[hello_kind]
            hint = " (pass restart_aware=False where INFO is not allowed)" if hello_kind == HELLO_INFO else ""
            return f"{what} failed: {reply}{hint}"
        if hello_kind == HELLO_INFO:
            if not isinstance(reply, bytes):
                return "INFO server: unexpected reply"
            run_id, uptime = parse_info_server(reply)
            if uptime is None:
                return "INFO server: no uptime_in_seconds (pass restart_aware=False for this master)"
            if c.run_id is not None and run_id != c.run_id:
                c.restarts += 1
            c.run_id = run_id
            c.up_since = frl_now() - uptime
            c.has_up_since = True
        return None


cdef object _what(int code, object detail):
    name = _oc.NAMES.get(code, str(code))
    return f"{name} ({detail})" if detail else name


cdef tuple _classify_reply(int kind, object reply):
    """Turn one non-error reply (parsed by hiredis) into ``(outcome, detail, value)``."""
    if kind == KIND_SET:
        if reply == b"OK":
            return OC_OK, None, None
        if reply is None:
            return OC_NO, None, None
    elif kind == KIND_SCRIPT or kind == KIND_SCRIPT_ACQUIRE:
        if reply == 1 and isinstance(reply, int):
            return OC_OK, None, None
        if reply == 0 and isinstance(reply, int):
            return OC_NO, None, None
    elif isinstance(reply, int):  # KIND_FENCED
        if reply >= 0:
            return OC_OK, None, reply
        if reply == -1:
            return OC_NO, None, None
    return OC_PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None
