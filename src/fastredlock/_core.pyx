# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython core: one multiplexed round to all N masters, in C, and the quorum arithmetic.

Same interface and behaviour as the pure-Python reference :mod:`fastredlock._core_py` (its
docstrings are the contract: K commands per round, NOSCRIPT fallback, restart-aware voting, fencing);
this one does the work in C:

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
from libc.string cimport memcpy, memcmp, memchr
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport ceil
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.exc cimport PyErr_CheckSignals

import os

import hiredis

from . import _outcomes as _oc
from ._scripts import (
    ACQUIRE_ALL, ACQUIRE_ALL_SHA, EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE, FENCED_ACQUIRE_SHA, RELEASE,
    RELEASE_SHA,
)

__all__ = ["Core", "Round", "encode_command"]

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
    HELLO_AUTH = 0
    HELLO_SELECT = 1
    HELLO_INFO = 2
    RECV_SIZE = 65536
    POLL_IN = POLLIN | POLLPRI | POLLHUP | POLLERR
    MAX_BULK = 1 << 20   # largest bulk reply accepted (INFO server is a few KB)
    MAX_LINE = 1 << 16   # longest status/error/integer/bulk-length line accepted
    MAX_ARGS = 8

# The outcome codes, read from the shared module so both cores can never disagree on them.
cdef int OC_OK = _oc.OK
cdef int OC_NO = _oc.NO
cdef int OC_TIMEOUT = _oc.TIMEOUT
cdef int OC_CONN_ERROR = _oc.CONN_ERROR
cdef int OC_ERROR_REPLY = _oc.ERROR_REPLY
cdef int OC_PROTOCOL_ERROR = _oc.PROTOCOL_ERROR
cdef int OC_UNTRUSTED = _oc.UNTRUSTED
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

    def __repr__(self):
        return (
            f"Round(ok={self.ok}, successes={self.successes}, validity={self.validity:.4f}, "
            f"elapsed={self.elapsed:.6f}, outcomes={self.outcomes}, details={self.details}, "
            f"values={self.values})"
        )


# --- one master's connection -------------------------------------------------------------------
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

    def __cinit__(self):
        self.fd = -1
        self.own = NULL
        self.expect = NULL

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
    cdef pollfd *_pfds         # one per master, fd -1 while the master is not waited on
    cdef double *_deadline     # one per master
    cdef Py_ssize_t _nactive
    cdef tuple _all_ok
    cdef tuple _all_no
    # the round: K commands, their outcomes (K x N), details, values and ttls
    cdef int _kind
    cdef Py_ssize_t _k, _kcap
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
        self._oc = NULL
        self._ttls = NULL
        self._cmd = NULL
        self._cmd_off = NULL
        self._fb = NULL
        self._fb_off = NULL
        self._grace_obj = 0

    def __init__(self, masters, double io_timeout, double connect_timeout, double drift_factor,
                 bint restart_aware=False):
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
        self._pfds = <pollfd *>realloc(self._pfds, (n + 1) * sizeof(pollfd))
        self._deadline = <double *>realloc(self._deadline, (n + 1) * sizeof(double))
        if self._pfds == NULL or self._deadline == NULL:
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
        free(self._oc)
        free(self._ttls)
        free(self._cmd)
        free(self._cmd_off)
        free(self._fb)
        free(self._fb_off)

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
        self._round(KIND_SET, 1)
        return self._result(0)

    def release(self, key, token):
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        cdef const char *argv[5]
        cdef Py_ssize_t lens[5]
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_RELEASE_SHA); lens[1] = PyBytes_GET_SIZE(_RELEASE_SHA)
        argv[2] = b"1"; lens[2] = 1
        argv[3] = PyBytes_AS_STRING(k); lens[3] = PyBytes_GET_SIZE(k)
        argv[4] = PyBytes_AS_STRING(t); lens[4] = PyBytes_GET_SIZE(t)
        self._reserve(1, frl_encoded_size(5, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, 5, 5, argv, lens)
        self._ttls[0] = 0
        self._set_script(_RELEASE, 5, lens)
        self._round(KIND_SCRIPT, 1)
        return self._result(0)

    def extend(self, key, token, long long ttl_ms):
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        cdef const char *argv[6]
        cdef Py_ssize_t lens[6]
        cdef char ttl[24]
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_EXTEND_SHA); lens[1] = PyBytes_GET_SIZE(_EXTEND_SHA)
        argv[2] = b"1"; lens[2] = 1
        argv[3] = PyBytes_AS_STRING(k); lens[3] = PyBytes_GET_SIZE(k)
        argv[4] = PyBytes_AS_STRING(t); lens[4] = PyBytes_GET_SIZE(t)
        argv[5] = ttl; lens[5] = frl_fmt_ll(ttl, ttl_ms)
        self._reserve(1, frl_encoded_size(6, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, 6, 6, argv, lens)
        self._ttls[0] = ttl_ms
        self._set_script(_EXTEND, 6, lens)
        self._round(KIND_SCRIPT, 1)
        return self._result(0)

    def acquire_fenced(self, key, fence_key, token, long long ttl_ms):
        """Round 1 of a fenced acquisition: ``SET NX PX`` and read the fence counter, atomically.

        ``values`` holds each granting master's counter.
        """
        cdef bytes k = _as_bytes(key), f = _as_bytes(fence_key), t = _as_bytes(token)
        cdef const char *argv[7]
        cdef Py_ssize_t lens[7]
        cdef char ttl[24]
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_FENCED_ACQUIRE_SHA); lens[1] = PyBytes_GET_SIZE(_FENCED_ACQUIRE_SHA)
        argv[2] = b"2"; lens[2] = 1
        argv[3] = PyBytes_AS_STRING(k); lens[3] = PyBytes_GET_SIZE(k)
        argv[4] = PyBytes_AS_STRING(f); lens[4] = PyBytes_GET_SIZE(f)
        argv[5] = PyBytes_AS_STRING(t); lens[5] = PyBytes_GET_SIZE(t)
        argv[6] = ttl; lens[6] = frl_fmt_ll(ttl, ttl_ms)
        self._reserve(1, frl_encoded_size(7, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, 7, 7, argv, lens)
        self._ttls[0] = ttl_ms
        self._set_script(_FENCED_ACQUIRE, 7, lens)
        self._round(KIND_FENCED, 1)
        return self._result(0)

    def write_fence(self, key, fence_key, token, fence, retention_ms):
        """Round 2 of a fenced acquisition: owner-checked ``counter = max(counter, fence)``."""
        cdef bytes k = _as_bytes(key), f = _as_bytes(fence_key), t = _as_bytes(token)
        cdef bytes fb = b"%d" % fence, rb = b"%d" % retention_ms
        cdef const char *argv[8]
        cdef Py_ssize_t lens[8]
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_FENCE_WRITE_SHA); lens[1] = PyBytes_GET_SIZE(_FENCE_WRITE_SHA)
        argv[2] = b"2"; lens[2] = 1
        argv[3] = PyBytes_AS_STRING(k); lens[3] = PyBytes_GET_SIZE(k)
        argv[4] = PyBytes_AS_STRING(f); lens[4] = PyBytes_GET_SIZE(f)
        argv[5] = PyBytes_AS_STRING(t); lens[5] = PyBytes_GET_SIZE(t)
        argv[6] = PyBytes_AS_STRING(fb); lens[6] = PyBytes_GET_SIZE(fb)
        argv[7] = PyBytes_AS_STRING(rb); lens[7] = PyBytes_GET_SIZE(rb)
        self._reserve(1, frl_encoded_size(8, lens))
        self._cmd_off[0] = 0
        self._cmd_off[1] = frl_encode(self._cmd, 8, 8, argv, lens)
        self._ttls[0] = 0
        self._set_script(_FENCE_WRITE, 8, lens)
        self._round(KIND_SCRIPT, 1)
        return self._result(0)

    # --- operations on many keys, pipelined in one write per master --------------------------
    def acquire_many(self, keys, tokens, long long ttl_ms):
        """``SET keys[i] tokens[i] NX PX ttl_ms`` for every i, in one round (one timing window)."""
        cdef list pairs = [(_as_bytes(k), _as_bytes(t)) for k, t in zip(keys, tokens)]
        cdef Py_ssize_t kk = len(pairs), j, size = 0, pos = 0
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
        for kb, tb in pairs:
            lens[1] = PyBytes_GET_SIZE(kb)
            lens[2] = PyBytes_GET_SIZE(tb)
            size += frl_encoded_size(6, lens)
        self._reserve(kk, size)
        j = 0
        for kb, tb in pairs:
            argv[1] = PyBytes_AS_STRING(kb); lens[1] = PyBytes_GET_SIZE(kb)
            argv[2] = PyBytes_AS_STRING(tb); lens[2] = PyBytes_GET_SIZE(tb)
            self._cmd_off[j] = pos
            pos += frl_encode(self._cmd + pos, 6, 6, argv, lens)
            self._ttls[j] = ttl_ms
            j += 1
        self._cmd_off[kk] = pos
        self._script = None
        self._round(KIND_SET, kk)
        return [self._result(j) for j in range(kk)]

    def acquire_all(self, keys, token, long long ttl_ms):
        """Set every key to ``token`` on each master, or none of them there (one script per master)."""
        cdef list parts = [b"EVALSHA", _ACQUIRE_ALL_SHA, b"%d" % len(keys)]
        parts.extend([_as_bytes(k) for k in keys])
        parts.append(_as_bytes(token))
        parts.append(b"%d" % ttl_ms)
        self._encode_one(parts, _ACQUIRE_ALL, ttl_ms)
        self._round(KIND_SCRIPT_ACQUIRE, 1)
        return self._result(0)

    def release_many(self, keys, tokens):
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round."""
        cdef list pairs = [(_as_bytes(k), _as_bytes(t)) for k, t in zip(keys, tokens)]
        cdef Py_ssize_t kk = len(pairs), j, size = 0, pos = 0
        cdef const char *argv[5]
        cdef Py_ssize_t lens[5]
        cdef bytes kb, tb
        if kk == 0:
            return []
        argv[0] = b"EVALSHA"; lens[0] = 7
        argv[1] = PyBytes_AS_STRING(_RELEASE_SHA); lens[1] = PyBytes_GET_SIZE(_RELEASE_SHA)
        argv[2] = b"1"; lens[2] = 1
        for kb, tb in pairs:
            lens[3] = PyBytes_GET_SIZE(kb)
            lens[4] = PyBytes_GET_SIZE(tb)
            size += frl_encoded_size(5, lens)
        self._reserve(kk, size)
        j = 0
        for kb, tb in pairs:
            argv[3] = PyBytes_AS_STRING(kb); lens[3] = PyBytes_GET_SIZE(kb)
            argv[4] = PyBytes_AS_STRING(tb); lens[4] = PyBytes_GET_SIZE(tb)
            self._cmd_off[j] = pos
            pos += frl_encode(self._cmd + pos, 5, 5, argv, lens)
            self._ttls[j] = 0
            j += 1
        self._cmd_off[kk] = pos
        self._set_script(_RELEASE, 5, lens)
        self._round(KIND_SCRIPT, kk)
        return [self._result(j) for j in range(kk)]

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
        self._round(KIND_SCRIPT, kk)
        return [self._result(j) for j in range(kk)]

    def master_states(self):
        """Per master: ``(run_id, up_since, restarts seen)`` as learned by restart-aware voting."""
        cdef _Conn c
        return [(c.run_id, c.up_since if c.has_up_since else None, c.restarts) for c in self._conns]

    def close(self):
        """Close every connection; the core reconnects lazily if used again."""
        cdef _Conn c
        if self._conns is None:
            return
        for c in self._conns:
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
            buf = realloc(self._oc, (k * n + 1) * sizeof(int))
            if buf == NULL:
                raise MemoryError()
            self._oc = <int *>buf
            buf = realloc(self._ttls, (k + 1) * sizeof(long long))
            if buf == NULL:
                raise MemoryError()
            self._ttls = <long long *>buf
            buf = realloc(self._cmd_off, (k + 1) * sizeof(Py_ssize_t))
            if buf == NULL:
                raise MemoryError()
            self._cmd_off = <Py_ssize_t *>buf
            buf = realloc(self._fb_off, (k + 1) * sizeof(Py_ssize_t))
            if buf == NULL:
                raise MemoryError()
            self._fb_off = <Py_ssize_t *>buf
            self._details = [None] * (k * n)
            self._any_detail = False
            self._kcap = k
        return 0

    cdef int _encode_one(self, list parts, bytes script, long long ttl_ms) except -1:
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
            self._ttls[0] = ttl_ms
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
        size = self._k * head + self._cmd_off[self._k]
        if size > self._fb_cap:
            buf = realloc(self._fb, size)
            if buf == NULL:
                raise MemoryError()
            self._fb = <char *>buf
            self._fb_cap = size
        for j in range(self._k):
            self._fb_off[j] = pos
            pos += frl_encode(self._fb + pos, self._argc, 2, argv, lens)
            tail = self._cmd_off[j + 1] - self._cmd_off[j] - self._sha_head
            memcpy(self._fb + pos, self._cmd + self._cmd_off[j] + self._sha_head, tail)
            pos += tail
        self._fb_off[self._k] = pos
        self._fb_ready = True
        return 0

    # --- the round ----------------------------------------------------------------------------
    cdef int _round(self, int kind, Py_ssize_t k) except -1:
        """Run the k encoded commands on every master in one write each; fill outcomes and timing."""
        cdef Py_ssize_t n = self.n, i
        cdef _Conn c
        cdef pollfd *pfds = self._pfds
        cdef double now, wait, first, fresh_deadline, wait_ms
        cdef int rc, err, timeout_ms
        cdef short ev

        self._kind = kind
        self._k = k
        self._fb_ready = False
        self._nactive = 0
        if self._any_detail:
            for i in range(len(self._details)):
                self._details[i] = None
            self._any_detail = False
        if kind == KIND_FENCED:
            self._values = [None] * (k * n)
        for i in range(k * n):
            self._oc[i] = OC_TIMEOUT
        for i in range(n):
            pfds[i].fd = -1

        self._started = frl_now()
        self._io_deadline = self._started + self._io_timeout
        fresh_deadline = self._io_deadline + self._connect_timeout
        for i in range(n):
            c = <_Conn>self._conns[i]
            c.retried = False
            c.fallback_sent = 0
            self._start(i, c, fresh_deadline)

        while self._nactive > 0:
            now = frl_now()
            first = 0.0
            rc = 0
            for i in range(n):
                if pfds[i].fd >= 0 and (rc == 0 or self._deadline[i] < first):
                    first = self._deadline[i]
                    rc = 1
            wait = first - now
            if wait <= 0.0:
                for i in range(n):
                    if pfds[i].fd >= 0 and self._deadline[i] <= now:
                        self._fail(i, <_Conn>self._conns[i], OC_TIMEOUT, None)
                continue
            wait_ms = ceil(wait * 1000.0)
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
                            self._fail(i, c, OC_CONN_ERROR, _os_strerror(err))
                            continue
                        c.connecting = False
                    if not self._write(i, c):
                        continue
                    if c.out_len == 0:
                        pfds[i].events = POLL_IN
                if ev & POLL_IN:
                    self._readable(i, c)

        self._elapsed = frl_now() - self._started
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

    cdef int _fail(self, Py_ssize_t i, _Conn c, int code, object detail) except -1:
        """Close this master's connection; every command it has not answered gets ``code``."""
        cdef Py_ssize_t q, idx
        self._unregister(i)
        c.close_fd()
        for q in range(c.head, c.tail):
            idx = c.expect[q] * self.n + i
            self._oc[idx] = code
            if detail is not None:
                self._details[idx] = detail
        if detail is not None and c.tail > c.head:
            self._any_detail = True
        c.head = c.tail
        return 0

    cdef int _start(self, Py_ssize_t i, _Conn c, double deadline) except -1:
        """Open the connection if needed, queue the commands, write what the socket takes."""
        cdef object detail
        cdef Py_ssize_t payload_len = self._cmd_off[self._k]
        c.reset_expect(self._k)
        c.got_data = False
        if c.fd < 0:
            detail = c.open()
            if detail is not None:
                self._fail(i, c, OC_CONN_ERROR, detail)
                return 0
            if c.n_hello:
                # The handshake goes first, alone: if AUTH, SELECT or INFO fails, no command of ours
                # may have run (on the wrong db, or without the checks restart-aware voting needs).
                c.out = PyBytes_AS_STRING(c.hello)
                c.out_len = PyBytes_GET_SIZE(c.hello)
                c.skip = 0
            else:
                c.out = self._cmd
                c.out_len = payload_len
                c.skip = -1
            c.reused = False
            self._deadline[i] = deadline
        else:
            c.out = self._cmd
            c.out_len = payload_len
            c.skip = -1
            c.reused = True
            self._deadline[i] = self._io_deadline
        if not c.connecting and not self._write(i, c):
            return 0
        self._register(i, c)
        return 1

    cdef int _broken(self, Py_ssize_t i, _Conn c, object detail) except -1:
        """A reused connection that breaks before any reply is stale: reopen and resend once."""
        if c.reused and not c.retried and not c.got_data:
            c.retried = True
            self._unregister(i)
            c.close_fd()
            self._start(i, c, self._io_deadline + self._connect_timeout)
        else:
            self._fail(i, c, OC_CONN_ERROR, detail)
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
                self._fail(i, c, OC_CONN_ERROR, _os_strerror(err))
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
                self._fail(i, c, OC_CONN_ERROR, _os_strerror(err))
            return 0
        if got == 0:
            self._broken(i, c, "connection closed by the master")
            return 0
        c.got_data = True
        problem = c.guard(self._rbufp, got)
        if problem is not None:
            self._fail(i, c, OC_PROTOCOL_ERROR, problem)
            return 0
        return self._parse(i, c, got)

    # --- the parser seam ----------------------------------------------------------------------
    cdef int _parse(self, Py_ssize_t i, _Conn c, Py_ssize_t nbytes) except -1:
        """Turn the ``nbytes`` just read into outcomes for this master's pending commands.

        Fast path (a clean reader, no handshake reply pending): whole expected replies at the front
        of the read are settled in C. The rest of the read, if any, goes to hiredis in one ``feed``.
        """
        cdef Py_ssize_t pos = 0, used
        cdef int code = 0
        cdef long long value = 0
        if _fast_path and not c.pending and c.skip < 0:
            while c.head < c.tail and pos < nbytes:
                used = _fast_reply(self._rbufp + pos, nbytes - pos, self._kind, &code, &value)
                if used == 0:
                    break
                pos += used
                self._answer(i, c, code, None, value if code == OC_OK and self._kind == KIND_FENCED else None)
            if pos == nbytes:
                if c.head == c.tail:
                    self._unregister(i)
                return 0
            if c.head == c.tail:
                self._fail(i, c, OC_PROTOCOL_ERROR, "unexpected bytes after the last reply")
                return 0
        c.feed(self._rbuf, pos, nbytes - pos)
        c.pending = True
        while c.head < c.tail:
            try:
                reply = c.gets()
            except Exception as exc:  # hiredis.ProtocolError, or MemoryError on absurd headers
                self._fail(i, c, OC_PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}")
                return 0
            if reply is False:
                return 0
            if c.skip >= 0:
                problem = self._hello_reply(c, c.hello_kinds[c.skip], reply)
                if problem is not None:
                    self._fail(i, c, OC_ERROR_REPLY, problem)
                    return 0
                c.skip += 1
                if c.skip == c.n_hello:
                    c.skip = -1
                    if not c.has_data():
                        c.pending = False  # the reader is clean again: the fast path may serve
                    c.out = self._cmd
                    c.out_len = self._cmd_off[self._k]
                    if not self._write(i, c):
                        return 0
                    if c.out_len:
                        self._pfds[i].events = POLL_IN | POLLOUT
                continue
            if isinstance(reply, _ReplyError):
                if (self._script is not None and c.fallback_sent < self._k
                        and str(reply).startswith("NOSCRIPT")):
                    # The script cache is empty (a restart or SCRIPT FLUSH): send the script itself.
                    c.fallback_sent += 1
                    self._resend_as_eval(i, c)
                    if c.fd < 0:
                        return 0
                    continue
                if not self._answer(i, c, OC_ERROR_REPLY, str(reply), None):
                    return 0
            elif not self._classify(i, c, reply):
                return 0
        if c.has_data():
            self._fail(i, c, OC_PROTOCOL_ERROR, "unexpected bytes after the last reply")
            return 0
        c.pending = False
        self._unregister(i)
        return 0

    cdef int _classify(self, Py_ssize_t i, _Conn c, object reply) except -1:
        """Settle the next command with one non-error reply (parsed by hiredis)."""
        cdef int kind = self._kind
        if kind == KIND_SET:
            if reply == b"OK":
                return self._answer(i, c, OC_OK, None, None)
            if reply is None:
                return self._answer(i, c, OC_NO, None, None)
        elif kind == KIND_SCRIPT or kind == KIND_SCRIPT_ACQUIRE:
            if reply == 1 and isinstance(reply, int):
                return self._answer(i, c, OC_OK, None, None)
            if reply == 0 and isinstance(reply, int):
                return self._answer(i, c, OC_NO, None, None)
        elif isinstance(reply, int):  # KIND_FENCED
            if reply >= 0:
                return self._answer(i, c, OC_OK, None, reply)
            if reply == -1:
                return self._answer(i, c, OC_NO, None, None)
        return self._answer(i, c, OC_PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None)

    cdef int _answer(self, Py_ssize_t i, _Conn c, int code, object detail, object value) except -1:
        """Record the outcome of this master's next pending command; 0 if that closed the connection."""
        cdef Py_ssize_t idx = c.expect[c.head] * self.n + i
        cdef double up
        c.head += 1
        if self._kind != KIND_SCRIPT:  # an acquisition
            if code == OC_OK and c.has_up_since:
                up = frl_now() - c.up_since
                if up * 1000.0 < self._grace_ms:
                    code = OC_UNTRUSTED
                    detail = f"up for {up:.0f}s, less than the restart grace of {self._grace_obj / 1000.0:g}s"
            elif code == OC_NO and c.retried:
                # The lost connection may have run our first SET: the key can be ours.
                # Not a clear "no", so the caller releases (owner-checked) to be sure.
                code = OC_CONN_ERROR
                detail = "connection broke; the resent command found the key set"
        self._oc[idx] = code
        if detail is not None:
            self._details[idx] = detail
            self._any_detail = True
        if self._kind == KIND_FENCED:
            self._values[idx] = value
        if code == OC_PROTOCOL_ERROR:
            # A reply of the wrong shape: the connection is out of step with its requests.
            self._fail(i, c, code, detail)
            return 0
        return 1

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
