# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The C I/O twin: N non-blocking fds, ``poll(2)`` without the GIL, and a fast reply parser, driving
the compiled protocol session.

Every rule of a round (what it writes, when a master's answer decides, validity, cool-downs,
restart-aware voting, owed replies, handshake, reply guard and classification) lives in
:mod:`fastredlock.protocol`, which Cython compiles for this build; this module calls it as C
(``cimport``) and does only I/O, exactly as :mod:`fastredlock.io.core_py` does in Python. The round's
drive and the stepped API are the compiled :class:`~fastredlock.protocol.driver.Driver`'s, which
``Core`` extends with the I/O it calls back (as C, through its virtual methods):

* the connections are plain non-blocking file descriptors (TCP with ``TCP_NODELAY``, or Unix
  sockets) opened with libc ``getaddrinfo``/``socket``/``connect`` (without the GIL);
* the commands of a round are encoded as RESP once, straight from the key/token/ttl bytes, into a
  reusable C buffer; every master normally gets exactly one ``send``. The EVAL fallback of an
  EVALSHA command is derived from the encoded EVALSHA bytes only when the session asks for it;
* the wait is ``poll(2)`` with the GIL released, until the session's next deadline (a wait that
  follows one that found a socket ready first looks with ``poll(0)``, keeping the GIL: the other
  masters' replies are often there already); replies are
  read into a reusable buffer. A fast path recognizes, at the front of a read on a clean
  connection, the exact replies a lock round expects (``+OK``/``$-1`` for SET, ``:1``/``:0`` for
  scripts, ``:n``/``:-1`` for a fenced acquisition) and hands their outcome to the session without
  building a reply object; anything else goes to ``hiredis.Reader`` (one ``feed`` per read);
* TLS masters (``rediss://``) run on the same non-blocking fds. The shared :mod:`fastredlock.io.tls`
  state machine (``ssl.SSLObject`` over memory BIOs) sets each connection up: context,
  verification, host name, the handshake, which is part of the connect (the link stays
  ``connecting``, under the connect deadline). After it, rounds run in C on that same SSL object
  (``_tls_c.h``: ``SSL_write`` + one ``send``; ``recv`` + ``SSL_read`` until OpenSSL wants more,
  so no reply waits above the socket where ``poll`` cannot see it), using the OpenSSL that
  Python's ``_ssl`` loaded; where that is not available the Python state machine does it all.
  Plain links keep their path: one C flag per master tells them apart;
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
from cpython.mem cimport PyMem_Free
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport PyObject

import os

import hiredis


from ..protocol.session cimport Session
from ..protocol.link cimport Link, _head_kind
from ..protocol.driver cimport Driver
from .encode_c cimport Commands, _grow, native_release1
from ..protocol import outcomes as _oc
from ..protocol import replies as _replies
from ..protocol.health import COOLDOWN, MAX_COOLDOWN, Health
from ..protocol.result import Round
from ..protocol.link import MAX_OWED, STALE_AFTER
from ..protocol.resp import MAX_BULK, MAX_LINE, encode_command
from ..protocol.family cimport lean_release, lean_release_of
from ..protocol.handshake import native_deletes, native_extends, native_releases
from ..protocol.handshake import CAP_DELEX as _CAP_DELEX, CAP_DELIFEQ as _CAP_DELIFEQ
from ..protocol.scripts import RELEASE_TAGGED as _RELEASE_TAGGED_SCRIPT, RELEASE_CLUSTER as _RELEASE_CLUSTER_SCRIPT
from .tls import TlsConn, TlsError, context_for
from .sentinel import Resolver, resolve
from .cluster import refresh

__all__ = ["Core", "Health", "Round", "encode_command", "COOLDOWN", "MAX_COOLDOWN", "MAX_BULK",
           "MAX_LINE", "MAX_OWED", "STALE_AFTER"]

cdef extern from "Python.h":
    # (borrowed forms, for a bytes the caller holds: no reference counting around them)
    Py_ssize_t _bytes_size "PyBytes_GET_SIZE"(PyObject *o) nogil
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *o) nogil

cdef extern from "core_c_sys.h":
    double frl_now() nogil
    int frl_connect(const char *host, const char *port, const char *path, Py_ssize_t path_len,
                    int *connecting, int *err) nogil
    int frl_sock_error(int fd) nogil
    int frl_would_block(int e) nogil
    int MSG_NOSIGNAL


cdef extern from "tls_c.h":
    int frl_tls_load(const char *ssl_module_path)
    void *frl_tls_ssl(object sslobj, object incoming, object outgoing, void **rbio, void **wbio)
    Py_ssize_t frl_tls_encrypt(void *ssl, void *wbio, const char *p, Py_ssize_t n, char **buf,
                               Py_ssize_t *cap, const char **why)
    int frl_tls_feed(void *rbio, const char *c, Py_ssize_t n)
    Py_ssize_t frl_tls_decrypt(void *ssl, char *out, Py_ssize_t cap, const char **why)
    Py_ssize_t frl_tls_backlog(void *wbio)


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
cdef long long _MAX_FENCE = _replies.MAX_FENCE
cdef int KIND_SCRIPT_ACQUIRE = _replies.KIND_SCRIPT_ACQUIRE
cdef int KIND_BITS = _replies.KIND_BITS
cdef int KIND_READ = _replies.KIND_READ
cdef int KIND_IFEQ = _replies.KIND_IFEQ
cdef int KIND_NATIVE_DEL = _replies.KIND_NATIVE_DEL
cdef int KIND_WAKE = _replies.KIND_WAKE
cdef int CAP_DELEX = _CAP_DELEX
cdef int CAP_DELIFEQ = _CAP_DELIFEQ
cdef int OC_OK = _oc.OK
cdef int OC_NO = _oc.NO

cdef bytes _EMPTY = b""

# OpenSSL as loaded by Python's _ssl (the TLS data path in C); TLS links use Python's otherwise.
import _ssl
cdef bytes _ssl_path = os.fsencode(getattr(_ssl, "__file__", None) or "")
cdef bint _tls_in_c = frl_tls_load(<const char *>_ssl_path if _ssl_path else NULL) == 1


def _set_tls_in_c(bint enabled):
    """Enable or disable the TLS data path in C for links set up from now on (measurements,
    differential tests); it cannot be enabled where OpenSSL's functions were not found."""
    global _tls_in_c
    _tls_in_c = enabled and frl_tls_load(NULL) == 1


cdef str _ossl_reason(const char *why):
    """OpenSSL's reason string in the form Python's ssl module gives it (``CERTIFICATE_REQUIRED``)."""
    if why == NULL:
        return "TLS error"
    return (<bytes>why).decode("ascii", "replace").upper().replace(" ", "_")


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


# --- the parser fast path ----------------------------------------------------------------------
cdef inline Py_ssize_t _fast_reply(const char *p, Py_ssize_t n, int kind, int *code,
                                   long long *value) noexcept nogil:
    """If ``p[:n]`` starts with a whole expected reply, set its outcome and return its length.

    Only replies whose meaning is settled without hiredis are recognized; 0 means "ask hiredis".
    """
    cdef Py_ssize_t pos
    cdef long long v = 0
    cdef bint neg = False
    if kind == KIND_BITS or kind == KIND_READ or kind == KIND_WAKE:
        return 0  # one bulk string per master, or any value read, or the waiters' work: hiredis reads it
    if kind == KIND_NATIVE_DEL:
        # A native release's pair, both whole: the delete's ``:1``/``:0``, then its wake mark's.
        # Deleted with the mark there (``:1`` ``:1``): the session writes the waiters' work (hiredis).
        if n >= 8 and p[0] == b':' and p[2] == b'\r' and p[3] == b'\n' and p[4] == b':' and p[6] == b'\r' \
                and p[7] == b'\n' and (p[5] == b'0' or p[5] == b'1'):
            if p[1] == b'1' and p[5] == b'0':
                code[0] = OC_OK
                return 8
            if p[1] == b'0':
                code[0] = OC_NO
                return 8
        return 0
    if kind == KIND_SET or kind == KIND_IFEQ:
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
    # KIND_FENCED: ':' '-'? digits{1,17} CRLF, at most MAX_FENCE (protocol.replies): more digits or a
    # larger value go to hiredis and classify(), which refuse them as the pure twin does (18 digits
    # here once let 19 through, and a long long overflowed into a negative fence)
    if n < 4 or p[0] != b':':
        return 0
    pos = 1
    if p[1] == b'-':
        neg = True
        pos = 2
    while pos < n and pos < 18 and c'0' <= p[pos] <= c'9':
        v = v * 10 + (p[pos] - c'0')
        pos += 1
    if pos == (2 if neg else 1) or pos + 2 > n or p[pos] != b'\r' or p[pos + 1] != b'\n':
        return 0
    if neg:
        if v != 1:
            return 0  # hiredis reports the unexpected value
        code[0] = OC_NO
    elif v > _MAX_FENCE:
        return 0  # classify() refuses it
    else:
        code[0] = OC_OK
        value[0] = v
    return pos + 2


# --- the core ----------------------------------------------------------------------------------
cdef inline bint _asks(Link link) noexcept:
    """Whether the link asks the twin for anything (:meth:`Core.carry_out` would do nothing else)."""
    return link.closing or link.opening or PyBytes_GET_SIZE(link.out) != 0


@cython.final
cdef class Core(Driver):
    """N connections to the masters, driven by one compiled protocol :class:`Session`. Not thread-safe."""

    cdef Py_ssize_t _link_count  # how many links the per-link arrays below hold (masters', then nodes')
    cdef int *_fds              # one per master, -1 when closed
    cdef bint *_dirty           # the master's reader holds bytes fed since it last ended clean
    cdef bint *_is_tls          # the master is a TLS master (its link takes the TLS path)
    cdef list _tls_ctx          # per master: its ssl.SSLContext, or None
    cdef list _tls              # per master: the open connection's _tls.TlsConn, or None
    cdef list _tls_session      # per master: the last TLS session (resumed on reconnect), or None
    cdef void **_ssl            # per master: the SSL* its rounds drive in C (after the handshake), or NULL
    cdef void **_rbio           # ... its incoming memory BIO
    cdef void **_wbio           # ... its outgoing memory BIO
    cdef bint *_backlog         # ciphertext waits in the link's TlsConn.pending (the Python path sends it)
    cdef char *_sbuf            # encrypted records of a round, before their send
    cdef Py_ssize_t _scap       # _sbuf's size
    cdef bytearray _pbuf        # decrypted replies
    cdef char *_pbufp           # _pbuf's bytes
    cdef list _readers          # one hiredis.Reader per master (None until its first connection)
    cdef pollfd *_pfds          # the fds a wait polls (room for every link)
    cdef Py_ssize_t *_pidx      # which master each polled fd belongs to
    cdef list _addr             # per master: (host, port, path) as bytes, or an error message
    cdef list _hosts            # per master: the host name TLS checks (a Sentinel master's: the last resolved)
    cdef list _resolvers        # per master: a _sentinel.Resolver (asked before each connect), or None
    cdef Commands _enc          # the encoded commands of the round
    cdef bytearray _rbuf        # what a recv reads (RECV_SIZE bytes, reused)
    cdef tuple _ttls1           # (ttl_ms,) of the last single-key acquisition (reused while it is the same)
    cdef long long _ttl1        # ... that ttl_ms
    cdef char *_rbufp           # _rbuf's bytes

    def __cinit__(self):
        self._fds = NULL
        self._dirty = NULL
        self._is_tls = NULL
        self._ssl = NULL
        self._rbio = NULL
        self._wbio = NULL
        self._backlog = NULL
        self._sbuf = NULL
        self._scap = 0
        self._pfds = NULL
        self._pidx = NULL

    def __init__(self, masters, double io_timeout, double connect_timeout, double drift_factor,
                 bint restart_aware=False, health=None, bint early=True):
        cdef Py_ssize_t n, i
        if self._session is not None:
            raise RuntimeError("Core is initialized once")
        Driver.__init__(self, masters, io_timeout, connect_timeout, drift_factor, restart_aware, health, early)
        if self._session.health.n != self._session.n:
            raise ValueError(f"health is for {self._session.health.n} masters, not {self._session.n}")
        self._tls_ctx, self._tls, self._tls_session, self._readers = [], [], [], []
        self._resolvers, self._addr, self._hosts = [], [], []
        self._link_count = 0
        self._grow_links()
        self._sentinels = any(r is not None for r in self._resolvers)
        self._enc = Commands()
        self._rbuf = bytearray(RECV_SIZE)
        self._rbufp = PyByteArray_AS_STRING(self._rbuf)
        if self._session.routing is not None:
            self.refresh_routes(0.0)

    cdef int _grow_links(self) except -1:
        """Make room for the links the session has now (cluster nodes are added as they are learned)."""
        cdef Py_ssize_t nl = len(self._links), i
        if nl == self._link_count:
            return 0
        self._fds = <int *>_grow(self._fds, (nl + 1) * sizeof(int))
        self._dirty = <bint *>_grow(self._dirty, (nl + 1) * sizeof(bint))
        self._is_tls = <bint *>_grow(self._is_tls, (nl + 1) * sizeof(bint))
        self._backlog = <bint *>_grow(self._backlog, (nl + 1) * sizeof(bint))
        self._ssl = <void **>_grow(self._ssl, (nl + 1) * sizeof(void *))
        self._rbio = <void **>_grow(self._rbio, (nl + 1) * sizeof(void *))
        self._wbio = <void **>_grow(self._wbio, (nl + 1) * sizeof(void *))
        self._pfds = <pollfd *>_grow(self._pfds, (nl + 1) * sizeof(pollfd))
        self._pidx = <Py_ssize_t *>_grow(self._pidx, (nl + 1) * sizeof(Py_ssize_t))
        for i in range(self._link_count, nl):
            spec = (<Link>self._links[i]).spec
            self._tls_ctx.append(None if spec.tls is None else context_for(spec.tls))
            self._tls.append(None)
            self._tls_session.append(None)
            self._readers.append(None)
            self._resolvers.append(None if spec.sentinel is None else Resolver(spec))
            self._addr.append("not resolved yet" if spec.sentinel is not None else _address(spec))
            self._hosts.append(spec.host)
            self._fds[i] = -1
            self._dirty[i] = False
            self._is_tls[i] = self._tls_ctx[i] is not None
            self._backlog[i] = False
            self._ssl[i] = NULL
        self._link_count = nl
        if self._pbuf is None and any(self._tls_ctx):
            self._pbuf = bytearray(RECV_SIZE)
            self._pbufp = PyByteArray_AS_STRING(self._pbuf)
        return 0

    cpdef refresh_routes(self, double now):
        """Ask the clusters whose slot map is due (none, almost always) for it again."""
        for i in self._session.stale_routes(now):
            if refresh(self._session, i) is not None:
                self._grow_links()

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._fds != NULL:
            for i in range(self._link_count):
                if self._fds[i] >= 0:
                    c_close(self._fds[i])
        free(self._fds)
        free(self._dirty)
        free(self._is_tls)
        free(self._backlog)
        free(self._ssl)
        free(self._rbio)
        free(self._wbio)
        PyMem_Free(self._sbuf)
        free(self._pfds)
        free(self._pidx)

    # --- operations on one key (the commands are encoded by _encode_c.Commands) ----------------
    def acquire(self, key, token, long long ttl_ms):
        """``SET key token NX PX ttl_ms`` on all masters in one round."""
        return self._acquire(_as_bytes(key), _as_bytes(token), ttl_ms)

    cdef object _acquire(self, bytes key, bytes token, long long ttl_ms):
        self._enc.acquire(key, token, ttl_ms)
        if self._ttls1 is None or self._ttl1 != ttl_ms:
            self._ttls1 = (ttl_ms,)
            self._ttl1 = ttl_ms
        return self._run1(KIND_SET, self._ttls1, True, None)

    def release(self, key, token):
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        return self._run1(KIND_SCRIPT, (0,), True, self._release1(k, t))

    def release_nowait(self, key, token):
        """:meth:`release` written to every master, returning at once: every outcome is PENDING."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        return self._run1(KIND_SCRIPT, (0,), False, self._release1(k, t))

    def release_quiet(self, key, token):
        """The cleanup of a failed attempt, not waited for (``RELEASE_FULL`` with ``QUIET`` gives
        no turn and wakes nobody; where a master has ``DELEX``/``DELIFEQ``, that instead)."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        self._enc.release_quiet(k, t)
        return self._run1(KIND_SCRIPT, (0,), False, native_deletes((k,), (t,)) if self._session.caps_seen else None)

    def release_plain(self, key, token):
        """An owner-checked delete of the key alone, waited for (``RELEASE_FULL`` with ``QUIET``,
        or the native delete): where an ACL's key patterns refuse the keys a release derives."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        self._enc.release_quiet(k, t)
        return self._run1(KIND_SCRIPT, (0,), True, native_deletes((k,), (t,)) if self._session.caps_seen else None)

    cdef object _release1(self, bytes key, bytes token):
        """Encode the plain release of ``key``: ``RELEASE`` or ``RELEASE_TAGGED``
        (``RELEASE_CLUSTER`` on a cluster), or ``RELEASE_FULL`` for a key that cannot queue (see
        :meth:`fastredlock.io.core_py.Core.release_each`); return its native forms, or None."""
        cdef bytes script = lean_release(key)
        if self._session.routing is not None:  # a cluster: no native forms (see release_each)
            self._enc.release(key, token, None if script is None else _RELEASE_CLUSTER_SCRIPT)
            return None
        self._enc.release(key, token, script)
        if script is not None and self._session.caps_seen:
            return self._native_release(key, token, script is _RELEASE_TAGGED_SCRIPT)
        return None

    cdef tuple _native_release(self, bytes key, bytes token, bint tagged):
        """:func:`fastredlock.protocol.handshake.native_release`, encoded in C, with only the forms
        some master here runs (``Session.caps_any``)."""
        cdef int caps = self._session.caps_any
        cdef tuple keys = (key,)
        if not caps & CAP_DELEX:
            return ((CAP_DELIFEQ, native_release1(key, token, tagged, False), KIND_NATIVE_DEL, keys),)
        if not caps & CAP_DELIFEQ:
            return ((CAP_DELEX, native_release1(key, token, tagged, True), KIND_NATIVE_DEL, keys),)
        return ((CAP_DELEX, native_release1(key, token, tagged, True), KIND_NATIVE_DEL, keys),
                (CAP_DELIFEQ, native_release1(key, token, tagged, False), KIND_NATIVE_DEL, keys))

    def extend(self, key, token, long long ttl_ms):
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start
        (``SET ... IFEQ ... PX`` where a master has it)."""
        cdef bytes k = _as_bytes(key), t = _as_bytes(token)
        self._enc.extend(k, t, ttl_ms)
        return self._run(KIND_SCRIPT, 1, (ttl_ms,), True,
                         native_extends((k,), (t,), (ttl_ms,)) if self._session.caps_seen else None)[0]

    def acquire_fenced(self, key, fence_key, token, long long ttl_ms):
        """Round 1 of a fenced acquisition: ``SET NX PX`` and read the fence counter, atomically.

        ``values`` holds each granting master's counter.
        """
        self._enc.acquire_fenced(_as_bytes(key), _as_bytes(fence_key), _as_bytes(token), ttl_ms)
        return self._run1(KIND_FENCED, (ttl_ms,), True, None)

    def write_fence(self, key, fence_key, token, fence, retention_ms):
        """Round 2 of a fenced acquisition: owner-checked ``counter = max(counter, fence)``."""
        self._enc.write_fence(_as_bytes(key), _as_bytes(fence_key), _as_bytes(token),
                              b"%d" % fence, b"%d" % retention_ms)
        return self._run1(KIND_SCRIPT, (0,), True, None)

    # --- operations on many keys, pipelined in one write per master --------------------------
    def acquire_many(self, keys, tokens, long long ttl_ms):
        """``SET keys[i] tokens[i] NX PX ttl_ms`` for every i, in one round (one timing window)."""
        cdef list kbs, tbs
        kbs, tbs = _pairs(keys, tokens)
        if not kbs:
            return []
        self._enc.acquire_many(kbs, tbs, ttl_ms)
        return self._run(KIND_SET, len(kbs), (ttl_ms,) * len(kbs), True)

    def release_many(self, keys, tokens):
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round. Two keys
        or more go to each master in one script call (``RELEASE_MANY``), far cheaper for the master."""
        return self._release_many(keys, tokens, True)

    def release_many_nowait(self, keys, tokens):
        """:meth:`release_many` written, returning at once: every outcome is PENDING."""
        return self._release_many(keys, tokens, False)

    cdef list _release_many(self, keys, tokens, bint wait):
        cdef list kbs, tbs
        kbs, tbs = _pairs(keys, tokens)
        if not kbs:
            return []
        if self._session.routing is not None:  # a cluster: one script per key (slot)
            self._enc.release_each(kbs, tbs, _RELEASE_CLUSTER_SCRIPT if all(
                [lean_release(<bytes>k) is not None for k in kbs]) else None)
            return self._run(KIND_SCRIPT, len(kbs), (0,) * len(kbs), wait)
        if len(kbs) >= 2 and self._session.caps_any & (_CAP_DELIFEQ | _CAP_DELEX):  # a native release: one each
            return self._release_each(kbs, tbs, wait)
        if len(kbs) >= 2:
            self._enc.release_many(kbs, tbs)
            return self._run(KIND_BITS, len(kbs), (0,) * len(kbs), wait)
        return self._run(KIND_SCRIPT, 1, (0,), wait, self._release1(<bytes>kbs[0], <bytes>tbs[0]))

    cdef list _release_each(self, list kbs, list tbs, bint wait):
        """One release per key (:meth:`release_each`), with their native forms where every key can queue."""
        cdef bytes script
        if self._session.routing is not None:
            script = _RELEASE_CLUSTER_SCRIPT if all([lean_release(<bytes>k) is not None for k in kbs]) else None
        else:
            script = lean_release_of(kbs)
        self._enc.release_each(kbs, tbs, script)
        native = None
        if self._session.caps_seen and self._session.routing is None and all(
                [lean_release(<bytes>k) is not None for k in kbs]):
            native = native_releases(kbs, tbs)
        return self._run(KIND_SCRIPT, len(kbs), (0,) * len(kbs), wait, native)

    def release_each(self, keys, tokens):
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round of one
        ``RELEASE`` script per key: what :meth:`release_many` sends to a cluster (a script may name
        the keys of one slot only); for a plain master, ``release_many`` is cheaper."""
        cdef list kbs, tbs
        kbs, tbs = _pairs(keys, tokens)
        if not kbs:
            return []
        return self._release_each(kbs, tbs, True)

    def extend_many(self, keys, tokens, ttls_ms):
        """Owner-checked ``PEXPIRE keys[i] ttls_ms[i]`` where ``keys[i]`` holds ``tokens[i]``, in one round."""
        cdef list triples = [(_as_bytes(k), _as_bytes(t), <long long>ttl)
                             for k, t, ttl in zip(keys, tokens, ttls_ms)]
        if not triples:
            return []
        ttls = [t[2] for t in triples]
        kbs, tbs = [t[0] for t in triples], [t[1] for t in triples]
        self._enc.extend_many(kbs, tbs, ttls)
        return self._run(KIND_SCRIPT, len(triples), tuple(ttls), True,
                         native_extends(kbs, tbs, ttls) if self._session.caps_seen else None)

    # --- the rounds of Driver.script and Driver.inspect / reads --------------------------------
    cpdef run_script(self, int kind, object sha, object script, object args, long long ttl_ms, bint wait):
        cdef list parts = [b"EVALSHA", _as_bytes(sha)]
        parts.extend([_as_bytes(a) for a in args])
        self._enc.parts(parts, _as_bytes(script))
        return self._run1(kind, (ttl_ms,), wait, None)

    cpdef list run_reads(self, object commands):
        cdef list args = [tuple([_as_bytes(a) for a in cmd]) for cmd in commands]
        if not args:
            return []
        self._enc.commands(args)
        return self._run(KIND_READ, len(args), (0,) * len(args), True)

    # --- the round (driven by protocol.driver.Driver.run_round) -------------------------------
    cdef inline list _run(self, int kind, Py_ssize_t rows, tuple ttls_ms, bint wait, object native=None):
        """Run the encoded commands on every master; return the Rounds, one per key (``rows``).
        ``native``: the round's native forms (see :meth:`.protocol.session.Session.begin`), or None."""
        cdef Commands enc = self._enc
        return self.run_round(kind, enc.ncmd, rows, enc.payload(), enc.script is not None, enc.make_fallbacks,
                              ttls_ms, wait, native)

    cdef inline object _run1(self, int kind, tuple ttls_ms, bint wait, object native):
        """:meth:`_run` of one key's one command: its Round (None under ``start``)."""
        cdef Commands enc = self._enc
        return self.run_round1(kind, 1, enc.payload(), enc.script is not None, enc.make_fallbacks, ttls_ms, wait,
                               native)

    # --- the I/O the Driver calls -----------------------------------------------------------
    cpdef double clock(self) except? -1.0:
        return frl_now()

    @staticmethod
    def now():
        """The clock of the deadlines (monotonic seconds)."""
        return frl_now()

    cpdef bint is_open(self, Py_ssize_t i) except -1:
        return self._fds[i] >= 0

    cpdef bint asks_sentinels(self, Py_ssize_t i) except -1:
        return self._resolvers[i] is not None

    cpdef tuple writing(self):
        cdef Py_ssize_t i
        writing = None
        for i in range(self._link_count):
            if self._fds[i] >= 0 and self._wants_write(i, <Link>self._links[i]):
                if writing is None:
                    writing = []
                writing.append(i)
        return () if writing is None else tuple(writing)

    cpdef bint any_writing(self) except -1:
        cdef Py_ssize_t i
        for i in range(self._link_count):
            if self._fds[i] >= 0 and self._wants_write(i, <Link>self._links[i]):
                return True
        return False

    def fds(self):
        """The open sockets' fds by master (-1: none)."""
        return [self._fds[i] for i in range(self._link_count)]

    cpdef receive(self, Py_ssize_t i):
        self._read(i)

    cpdef serve(self, Py_ssize_t i, bint readable, bint writable):
        self._serve(i, readable, writable)

    cpdef wait_and_serve(self, double wait_ms):
        """Wait until a polled link can be written or read (or ``wait_ms`` passed) and serve it."""
        cdef Py_ssize_t i, m = 0, q
        cdef Link link
        cdef int rc, err
        cdef short ev
        cdef pollfd *pfds = self._pfds
        cdef int timeout_ms
        wait_ms = ceil(wait_ms)
        timeout_ms = 2147483647 if wait_ms > 2147483647.0 else <int>wait_ms
        for i in range(self._link_count):
            link = <Link>self._links[i]
            if link.polled and self._fds[i] >= 0:
                pfds[m].fd = self._fds[i]
                pfds[m].events = POLL_IN | (POLLOUT if self._wants_write(i, link) else 0)
                pfds[m].revents = 0
                self._pidx[m] = i
                m += 1
        if m == 0 and timeout_ms == 0:
            return
        rc = 0
        if timeout_ms == 0 or self._warm:
            # A look that cannot block keeps the GIL (no drop and retake, ~400 instructions): a
            # wait that follows one that found a socket ready (the other masters' replies of a
            # round, mostly) looks first; only where nothing is ready does it let the GIL go.
            rc = poll(pfds, <nfds_t>m, 0)
            err = errno
        if rc == 0 and timeout_ms != 0:
            with nogil:
                rc = poll(pfds, <nfds_t>m, timeout_ms)
                err = errno
        self._warm = rc > 0
        if rc < 0:
            if err == EINTR:
                PyErr_CheckSignals()  # a signal handler's exception ends the round
                return
            raise OSError(err, _os_strerror(err))
        if rc == 0:
            return
        for q in range(m):
            ev = pfds[q].revents
            i = self._pidx[q]
            if ev == 0 or self._fds[i] != pfds[q].fd:
                continue
            self._serve(i, ev & POLL_IN, ev & POLLOUT)

    cdef inline bint _wants_write(self, Py_ssize_t i, Link link) except -1:
        """Whether master ``i``'s socket must be watched for writability (connect, bytes to send)."""
        if not self._is_tls[i]:  # (small enough to be inlined where it is called: TLS goes out of line)
            return PyBytes_GET_SIZE(link.out) != 0 or link.connecting
        return self._wants_write_tls(i, link)

    cdef bint _wants_write_tls(self, Py_ssize_t i, Link link) except -1:
        """:meth:`_wants_write` for a TLS link."""
        if self._ssl[i] != NULL and not self._backlog[i]:
            return PyBytes_GET_SIZE(link.out) != 0
        tls = self._tls[i]
        return tls is not None and (<object>tls).wants_write(link.out)

    cdef int _serve(self, Py_ssize_t i, bint readable, bint writable) except -1:
        """Master ``i``'s socket can be written and/or read: finish a connect, write, read."""
        cdef Link link
        cdef int err
        if writable:
            link = <Link>self._links[i]  # (a read alone does not look at it here)
            if link.connecting and (not self._is_tls[i] or not self._tls[i].tcp_up):
                err = frl_sock_error(self._fds[i])
                if err:
                    self._session.connect_failed(i, _os_strerror(err), frl_now())
                    self.carry_out(i)
                    return 0
                if self._is_tls[i]:
                    self._tls[i].tcp_up = True  # the handshake runs; the link stays connecting
                else:
                    link.connecting = False
            self.carry_out(i)
        if readable and self._fds[i] >= 0:
            self._read(i)
        return 0

    cdef _send_round(self):
        """:meth:`Driver._send_round` in C: each link's usual write (:meth:`_send_plain`) in place,
        anything else by :meth:`carry_out`; with Sentinel masters, the driver's order."""
        cdef list links = self._links
        cdef Py_ssize_t i
        if self._sentinels:
            Driver._send_round(self)
            return
        for i in range(len(links)):
            if not self._send_plain(i, <Link>links[i]):
                self.carry_out(i)

    cdef inline bint _send_plain(self, Py_ssize_t i, Link link) except -1:
        """The usual write: an open plain socket, nothing to close or open first, one send of
        ``out`` (what :meth:`carry_out`'s loop does first, in more steps). True: done (all sent,
        part of it, nothing to send, or the socket full); False: not the usual case, or the send
        failed (reported): carry_out's loop takes over."""
        cdef PyObject *out
        cdef ssize_t sent
        cdef Py_ssize_t size
        if link.closing or link.opening or link.connecting or self._is_tls[i] or self._fds[i] < 0:
            return False
        out = <PyObject *>link.out  # (borrowed: nothing below runs Python code before it is sent)
        size = _bytes_size(out)
        if size == 0:
            return True
        sent = send(self._fds[i], _bytes_data(out), <size_t>size, MSG_NOSIGNAL)
        if sent == size:
            link.out = _EMPTY
            return True
        # (the rest out of line, so that this stays small enough for the C compiler to inline)
        return self._sent_part(i, link, sent, errno if sent < 0 else 0)

    cdef bint _sent_part(self, Py_ssize_t i, Link link, ssize_t sent, int err) except -1:
        """:meth:`_send_plain` where the socket took part of ``out`` (``sent`` bytes), or the send
        failed (``sent`` < 0, ``errno`` ``err``)."""
        if sent >= 0:
            link.out = link.out[sent:]
            return True
        if err == EINTR:
            PyErr_CheckSignals()
            return False
        if frl_would_block(err):
            return True
        self._session.io_failed(i, _os_strerror(err), _stale(err), frl_now())
        return False

    cpdef carry_out(self, Py_ssize_t i):
        """Carry out what link ``i`` asks for: close, open, write."""
        cdef Link link = <Link>self._links[i]
        if self._send_plain(i, link):
            return
        while True:
            if link.closing:
                link.closing = False
                if self._is_tls[i] and self._tls[i] is not None:
                    self._tls_session[i] = self._tls[i].session or self._tls_session[i]
                    self._tls[i] = None
                    self._ssl[i] = NULL
                    self._backlog[i] = False
                if self._fds[i] >= 0:
                    if self.on_close is not None:
                        self.on_close(i, self._fds[i])  # an event loop forgets the fd first
                    c_close(self._fds[i])  # close only: never shutdown, a fork sibling may share it
                    self._fds[i] = -1
                    self._opened += 1
            if link.opening:
                link.opening = False
                if self._resolvers[i] is not None and not self._resolve(i):
                    continue  # no sentinel said where the master is (the session was told)
                detail = self._open(i)
                if detail is not None:
                    self._session.connect_failed(i, detail, frl_now())
                    continue
            if self._is_tls[i]:
                if self._send_tls(i, link):
                    continue
                return
            if link.connecting or self._fds[i] < 0:
                return
            if self._send_plain(i, link):
                return
            # (not sent: interrupted, or failed and reported: the link asks again)

    cdef bint _send_tls(self, Py_ssize_t i, Link link) except -1:
        """Send what a TLS link has to send (handshake records, or its ``out`` encrypted); True
        when :meth:`carry_out` must look at the link again (it failed, or more may be sendable)."""
        cdef ssize_t sent
        cdef Py_ssize_t size
        cdef int err
        if self._ssl[i] != NULL and not self._backlog[i]:
            return self._send_tls_c(i, link)
        tls = self._tls[i]
        if tls is None or self._fds[i] < 0 or not tls.tcp_up:
            return False
        try:
            data = tls.outgoing(link.out)
        except TlsError as exc:
            self._session.tls_failed(i, str(exc), frl_now())
            return True
        size = PyBytes_GET_SIZE(data)
        if size == 0:
            return False
        sent = send(self._fds[i], PyBytes_AS_STRING(data), <size_t>size, MSG_NOSIGNAL)
        if sent < 0:
            err = errno
            if err == EINTR:
                PyErr_CheckSignals()
                return True
            if frl_would_block(err):
                return False
            self._session.io_failed(i, _os_strerror(err), _stale(err), frl_now())
            return True
        link.out = tls.sent(sent, link.out)
        if tls.pending:
            return False
        self._backlog[i] = False
        return True

    cdef bint _send_tls_c(self, Py_ssize_t i, Link link) except -1:
        """:meth:`_send_tls` in C: encrypt ``out``, one ``send``; what the socket does not take
        waits in the TlsConn (the Python path sends it when the socket is writable)."""
        cdef Py_ssize_t size = PyBytes_GET_SIZE(link.out), clen
        cdef ssize_t sent
        cdef int err
        cdef const char *why = NULL
        if size == 0 or self._fds[i] < 0:
            return False
        clen = frl_tls_encrypt(self._ssl[i], self._wbio[i], PyBytes_AS_STRING(link.out), size,
                               &self._sbuf, &self._scap, &why)
        if clen < 0:
            self._session.tls_failed(i, _ossl_reason(why), frl_now())
            return True
        while True:
            sent = send(self._fds[i], self._sbuf, <size_t>clen, MSG_NOSIGNAL)
            if sent >= 0:
                break
            err = errno
            if err == EINTR:
                PyErr_CheckSignals()
                continue
            if frl_would_block(err):
                sent = 0
                break
            self._session.io_failed(i, _os_strerror(err), _stale(err), frl_now())
            return True
        if sent == clen:
            link.out = _EMPTY
            return False
        tls = self._tls[i]
        tls.pending = PyBytes_FromStringAndSize(self._sbuf + sent, clen - sent)
        tls.plain_len = size
        self._backlog[i] = True
        return False

    cdef int _read_tls_c(self, Py_ssize_t i, Link link, Py_ssize_t got, double now) except -1:
        """The ``got`` bytes of ciphertext just read, decrypted in C and handed to the session;
        OpenSSL is read until it wants more, so nothing decrypted stays above the socket."""
        cdef Session s = self._session
        cdef Py_ssize_t n, back
        cdef const char *why = NULL
        cdef void *ssl = self._ssl[i]
        if frl_tls_feed(self._rbio[i], self._rbufp, got) < 0:
            s.tls_failed(i, "cannot buffer the ciphertext", now)
            self.carry_out(i)
            return 0
        while True:
            n = frl_tls_decrypt(ssl, self._pbufp, RECV_SIZE, &why)
            if n == -2:
                s.io_failed(i, "connection closed by the master (TLS close_notify)", True, now)
                self.carry_out(i)
                return 0
            if n == -1:
                s.tls_failed(i, _ossl_reason(why), now)
                self.carry_out(i)
                return 0
            back = frl_tls_backlog(self._wbio[i])
            if back:  # OpenSSL answered something (a key update): the Python path sends it
                tls = self._tls[i]
                tls.pending += tls._out.read()
                self._backlog[i] = True
                self.carry_out(i)
                if self._ssl[i] != ssl:
                    return 0
            if n == 0:
                return 0
            self._consume(i, link, self._pbuf, self._pbufp, n, now)
            if self._ssl[i] != ssl:
                return 0  # the link was closed while its replies were handled

    cdef object _decrypt(self, Py_ssize_t i, Link link, Py_ssize_t got):
        """The plaintext of the ``got`` bytes of ciphertext just read (all of it: nothing stays
        buffered above the socket); advance the handshake and send what it answers. None when
        there is nothing to parse (the handshake went on, a session ticket came, the link failed)."""
        tls = self._tls[i]
        try:
            data = tls.feed(PyBytes_FromStringAndSize(self._rbufp, got))
        except TlsError as exc:
            self._session.tls_failed(i, str(exc), frl_now())
            self.carry_out(i)
            return None
        if link.connecting and tls.done:
            link.connecting = False
            if _tls_in_c:
                self._ssl[i] = frl_tls_ssl(tls.obj._sslobj, tls._in, tls._out, &self._rbio[i], &self._wbio[i])
                self._backlog[i] = bool(tls.pending)
        if tls.pending or (PyBytes_GET_SIZE(link.out) and not link.connecting):
            self.carry_out(i)
            if self._tls[i] is not tls:
                return None  # the link failed while writing
        return data if PyBytes_GET_SIZE(data) else None

    cdef bint _resolve(self, Py_ssize_t i) except -1:
        """Ask a Sentinel master's sentinels where it is, before its connect; whether they said."""
        spec = resolve(self._session, i, self._resolvers[i])
        if spec is None:
            return False
        self._addr[i] = _address(spec)
        self._hosts[i] = spec.host
        return True

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
        self._opened += 1
        (<Link>self._links[i]).connecting = connecting != 0
        if self._is_tls[i]:
            tls = TlsConn(self._tls_ctx[i], self._hosts[i], self._tls_session[i])
            tls.tcp_up = connecting == 0
            self._tls[i] = tls
            (<Link>self._links[i]).connecting = True  # until the handshake is done
        if self._readers[i] is None or self._dirty[i]:
            self._readers[i] = _Reader()
            self._dirty[i] = False
        return None

    cdef int _read(self, Py_ssize_t i) except -1:
        """Read what arrived on one connection and hand the complete replies to the session."""
        cdef Session s = self._session
        cdef Link link = <Link>self._links[i]
        cdef ssize_t got
        cdef int err
        cdef double now
        got = recv(self._fds[i], self._rbufp, RECV_SIZE, 0)
        now = frl_now()
        if got < 0:
            err = errno
            if err == EINTR or frl_would_block(err):
                return 0
            s.io_failed(i, _os_strerror(err), _stale(err), now)
            self.carry_out(i)
            return 0
        if got == 0:
            s.io_failed(i, "connection closed by the master", True, now)
            self.carry_out(i)
            return 0
        if self._is_tls[i]:
            if self._ssl[i] != NULL:
                return self._read_tls_c(i, link, got, now)
            plain = self._decrypt(i, link, got)
            if plain is None:
                return 0
            return self._consume(i, link, plain, PyBytes_AS_STRING(plain), PyBytes_GET_SIZE(plain), frl_now())
        return self._consume(i, link, self._rbuf, self._rbufp, got, now)

    cdef inline int _consume(self, Py_ssize_t i, Link link, object buf, const char *p, Py_ssize_t got,
                             double now) except -1:
        """Hand the replies in ``p[:got]`` (the bytes of ``buf``) to the session."""
        cdef Session s = self._session
        cdef int kind, code = 0
        cdef long long value = 0
        cdef Py_ssize_t pos = 0, used, good
        if _fast_path and not self._dirty[i]:
            # Exact expected replies at the front of a read on a clean connection: settled here
            # without a reply object (and without the guard: they are well-formed by definition).
            # (the session's cdef forms, given the Link: no lookup of links[i] per reply)
            while pos < got:
                kind = _head_kind(link)
                if kind >= 0:
                    # the usual reply (this round's next command): settled, and if it is the read's
                    # last, drained, in one call (it never closes the link)
                    used = _fast_reply(p + pos, got - pos, kind, &code, &value)
                    if used == 0:
                        break
                    pos += used
                    s.answer_head(link, code, value if code == OC_OK and kind == KIND_FENCED else None, pos == got, now)
                    if pos == got:
                        if _asks(link):
                            self.carry_out(i)
                        return 0
                    continue
                kind = s._next_kind(link)
                if kind < 0:
                    break
                used = _fast_reply(p + pos, got - pos, kind, &code, &value)
                if used == 0:
                    break
                pos += used
                if pos == got:  # the read's last reply: answered and drained in one call
                    if not s._answer_last(link, code, value if code == OC_OK and kind == KIND_FENCED else None, now):
                        self.carry_out(i)
                        return 0
                    if _asks(link):
                        self.carry_out(i)
                    return 0
                if not s._answer(link, code, None, value if code == OC_OK and kind == KIND_FENCED else None, now):
                    self.carry_out(i)
                    return 0
            if pos == got:
                s._drained(link, False, now)
                if _asks(link):
                    self.carry_out(i)
                return 0
        good = s.received(i, buf, pos, got, now)
        reader = self._readers[i]
        if good > pos:  # the replies before a bad byte count, wherever the read was split
            reader.feed(buf, pos, good - pos)
            self._dirty[i] = True
            if not self.hand_replies(i, reader, _ReplyError, now):
                return 0
        if good < got:
            s.refused(i, now)
            self.carry_out(i)
            return 0
        leftover = reader.has_data()
        if not leftover:
            self._dirty[i] = False  # the reader is clean again: the fast path may serve
        s.drained(i, leftover, now)
        self.carry_out(i)
        return 0


cdef object _address(spec):
    """``(host, port, path)`` of a master as bytes for libc (None where unused), or an error message."""
    if spec.path is None and spec.host is None:
        return "a cluster's own link is never opened (its nodes' are)"
    try:
        if spec.path is not None:
            return (None, None, os.fsencode(spec.path))
        return (spec.host.encode("idna"), str(int(spec.port)).encode(), None)
    except (UnicodeError, TypeError, ValueError) as exc:
        return str(exc)



# --- the executor's C entries (engine/executor.pxd's core_acquire_fn, core_release_fn) --------------
# Core.acquire and Core.release for an executor whose cores are exactly this Core (not a subclass):
# called through these pointers, a round costs no method lookup and no argument parsing. The
# executor finds them in _C_ENTRIES (no .pxd of this module: the class's fields stay here).
cdef object _c_acquire(object core, object key, object token, long long ttl_ms):
    return (<Core>core)._acquire(_as_bytes(key), _as_bytes(token), ttl_ms)


cdef object _c_release(object core, object key, object token):
    cdef bytes k = _as_bytes(key), t = _as_bytes(token)
    return (<Core>core)._run1(KIND_SCRIPT, (0,), True, (<Core>core)._release1(k, t))


#: (Core, capsule of _c_acquire, capsule of _c_release): see engine/executor.pxd's _bind_core.
_C_ENTRIES = (Core, PyCapsule_New(<void *>_c_acquire, b"fastredlock.core_c.acquire", NULL),
              PyCapsule_New(<void *>_c_release, b"fastredlock.core_c.release", NULL))
