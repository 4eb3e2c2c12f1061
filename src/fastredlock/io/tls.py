"""TLS for both I/O twins, written once: ``ssl.SSLObject`` over two memory BIOs.

Why memory BIOs and not ``ssl.SSLSocket``: the twins own their non-blocking sockets (C fds polled
without the GIL, Python sockets, or an event loop's readiness callbacks on the same fds). An
``SSLObject`` never touches a socket: the twin hands it the ciphertext it read and sends the
ciphertext it produces, so a TLS link keeps the same one-send-per-round, poll-driven shape as a
plain one, and a write can never block on a read (the BIOs are memory). Decryption reads until
the object wants more ciphertext, so no decrypted reply ever stays buffered above the socket
where ``poll`` (or the event loop) cannot see it.

Contexts are built from a master's :class:`TlsOptions` once per distinct settings and shared (so
TLS session tickets are reused across reconnects: :class:`TlsConn` takes the previous
connection's session). Certificate verification and hostname checking are on by default; SNI is
the master's host name (none for an IP address, as RFC 6066 says).
"""
from __future__ import annotations

import ssl
import threading
from typing import Any, Dict, NamedTuple, Optional

from .redact import redacted_repr

__all__ = ["TlsConn", "TlsError", "TlsOptions", "context_for", "reason"]

_READ_SIZE = 65536


class TlsOptions(NamedTuple):
    """A master's TLS settings, with redis-py's names (without the ``ssl_`` prefix)."""

    #: ``"required"`` (default), ``"optional"`` or ``"none"`` (no verification: tests only).
    cert_reqs: str = "required"
    #: CA bundle file / CA directory to verify the server with (default: the system's CAs).
    ca_certs: Optional[str] = None
    ca_path: Optional[str] = None
    #: Client certificate and key for mutual TLS.
    certfile: Optional[str] = None
    keyfile: Optional[str] = None
    #: Check that the certificate names the host (default: on when verifying).
    check_hostname: Optional[bool] = None
    #: Lowest protocol version, e.g. ``"TLSv1_2"`` or an ``ssl.TLSVersion`` (default: OpenSSL's).
    min_version: Optional[str] = None
    #: A ready ``ssl.SSLContext``; when given, the settings above are not used.
    context: Any = None
    #: The password of an encrypted client key (``keyfile``, or the key inside ``certfile``).
    #: Without it an encrypted key is an error: OpenSSL is never left to ask on the terminal.
    password: Optional[str] = None

    def __repr__(self) -> str:  # a key's password, if set, never shown
        return redacted_repr(self)

    def is_default(self) -> bool:
        """Whether no setting was given (``Redlock(ssl_context=...)`` then applies)."""
        return self == _DEFAULT


_DEFAULT = TlsOptions()
_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
_contexts: Dict[TlsOptions, ssl.SSLContext] = {}
_lock = threading.Lock()


class TlsError(Exception):
    """A TLS handshake or record failed; ``str()`` is OpenSSL's reason, e.g.
    ``"CERTIFICATE_VERIFY_FAILED: certificate verify failed: unable to get local issuer certificate"``."""


def reason(exc: BaseException) -> str:
    """A short readable reason for an ``ssl.SSLError`` (OpenSSL's reason and verify message)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"{exc.reason}: {exc.verify_message}" if exc.verify_message else str(exc.reason)
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _min_version(value: Any) -> ssl.TLSVersion:
    if isinstance(value, ssl.TLSVersion):
        return value
    name = str(value).upper().replace(".", "_").replace("TLSV", "TLSv")
    for version in ssl.TLSVersion:
        if version.name.upper() == name.upper() or version.name.upper() == f"TLSV{name}".upper():
            return version
    raise ValueError(f"masters: unknown ssl_min_version {value!r} (e.g. 'TLSv1_2', 'TLSv1_3')")


def _password(password: Optional[str]) -> Any:
    """The ``password`` callable for ``load_cert_chain``: the given password, or an error (never a
    prompt) when the key is encrypted and none was given."""

    def give() -> bytes:
        if password is None:
            raise ValueError("the client key is encrypted: give its password (ssl_password)")
        return password.encode() if isinstance(password, str) else bytes(password)

    return give


def _build(opts: TlsOptions) -> ssl.SSLContext:
    if opts.cert_reqs not in _CERT_REQS:
        raise ValueError(f"masters: ssl_cert_reqs must be one of {sorted(_CERT_REQS)}, not {opts.cert_reqs!r}")
    if opts.keyfile and not opts.certfile:
        raise ValueError("masters: ssl_keyfile given without ssl_certfile")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    verify = _CERT_REQS[opts.cert_reqs]
    # Without verification there is no certificate to check a host name against (redis-py's
    # clients say ssl_check_hostname=True by default, with ssl_cert_reqs='none' too).
    check = verify != ssl.CERT_NONE if opts.check_hostname is None else bool(opts.check_hostname)
    ctx.check_hostname = check and verify != ssl.CERT_NONE
    ctx.verify_mode = verify
    try:
        if verify != ssl.CERT_NONE:
            if opts.ca_certs or opts.ca_path:
                ctx.load_verify_locations(cafile=opts.ca_certs, capath=opts.ca_path)
            else:
                ctx.load_default_certs()
        if opts.certfile:
            # A callable, never None: with None, OpenSSL asks for an encrypted key's password on
            # the terminal (blocking a service, or a CI job, inside the constructor).
            ctx.load_cert_chain(opts.certfile, opts.keyfile, password=_password(opts.password))
    except (OSError, ssl.SSLError, ValueError) as exc:
        why = reason(exc)
        if opts.password is not None and isinstance(exc, ssl.SSLError) and opts.certfile:
            why += " (is ssl_password the key's password?)"
        raise ValueError(f"masters: cannot load the TLS files: {why}") from None
    if opts.min_version is not None:
        ctx.minimum_version = _min_version(opts.min_version)
    return ctx


def context_for(opts: TlsOptions, default: Optional[ssl.SSLContext] = None) -> ssl.SSLContext:
    """The context for a master's settings: its own ``context``, else ``default`` when it gave no
    settings, else one built from them (cached per distinct settings; ``ValueError`` naming
    ``masters`` for a bad setting or an unreadable file)."""
    if opts.context is not None:
        if not isinstance(opts.context, ssl.SSLContext):
            raise TypeError(f"masters: ssl_context must be an ssl.SSLContext, not {type(opts.context).__name__}")
        return opts.context
    if default is not None and opts.is_default():
        return default
    with _lock:
        ctx = _contexts.get(opts)
        if ctx is None:
            ctx = _contexts[opts] = _build(opts)
        return ctx


class TlsConn:
    """One TLS connection's state, without a socket: feed it ciphertext, send what it returns."""

    __slots__ = ("obj", "_in", "_out", "done", "pending", "plain_len", "tcp_up")

    def __init__(self, ctx: ssl.SSLContext, host: Optional[str], session: Any = None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        # SNI is the host name (CPython sends none for an IP address); the certificate is
        # checked against it either way when the context checks host names.
        self.obj = ctx.wrap_bio(self._in, self._out, server_side=False, server_hostname=host or None)
        if session is not None:
            try:
                self.obj.session = session
            except (ValueError, AttributeError):
                pass  # a session of another context: a full handshake then
        #: The handshake finished.
        self.done = False
        #: Ciphertext produced and not yet sent (the twin sends it; a partial send leaves the rest).
        self.pending = b""
        #: How many bytes of the link's plaintext ``out`` are encrypted into ``pending``.
        self.plain_len = 0
        #: The TCP connect finished (the handshake runs; the link stays ``connecting`` until done).
        self.tcp_up = False
        self.handshake()  # the ClientHello, sent once the TCP connect is done

    def wants_write(self, out: bytes) -> bool:
        """Whether the socket must be watched for writability: the TCP connect is in progress,
        ciphertext waits to be sent, or (after the handshake) plaintext waits to be encrypted."""
        return not self.tcp_up or bool(self.pending) or (self.done and bool(out))

    def outgoing(self, out: bytes) -> bytes:
        """The ciphertext to send for the link's plaintext ``out`` (what is not encrypted yet is
        encrypted now, after the handshake; before it, only the handshake's own records)."""
        if self.done and len(out) > self.plain_len:
            self.encrypt(out[self.plain_len:] if self.plain_len else out)
        return self.pending

    def sent(self, n: int, out: bytes) -> bytes:
        """``n`` bytes of :meth:`outgoing` went out; return what the link's ``out`` is now (the
        plaintext is gone from it once every record carrying it is sent)."""
        self.pending = self.pending[n:]
        if self.pending or not self.plain_len:
            return out
        out = out[self.plain_len:]
        self.plain_len = 0
        return out

    def handshake(self) -> bool:
        """Advance the handshake; True when it is done. The ciphertext to send is appended to
        :attr:`pending`. Raises :class:`TlsError` with OpenSSL's reason when it failed."""
        try:
            self.obj.do_handshake()
            self.done = True
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLError, ValueError) as exc:
            raise TlsError(reason(exc)) from None
        finally:
            out = self._out.read()
            if out:
                self.pending += out
        return self.done

    def encrypt(self, plaintext: bytes) -> None:
        """Encrypt ``plaintext`` and append the records to :attr:`pending`."""
        try:
            self.obj.write(plaintext)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsError(reason(exc)) from None
        self.pending += self._out.read()
        self.plain_len += len(plaintext)

    def feed(self, ciphertext: bytes) -> bytes:
        """Hand ciphertext read from the socket; return every byte of plaintext it completes
        (read until OpenSSL wants more, so nothing decrypted stays buffered). During the
        handshake, return b"" and advance it (see :attr:`done`)."""
        self._in.write(ciphertext)
        if not self.done:
            if not self.handshake():
                return b""
        chunks = []
        obj = self.obj
        incoming = self._in
        while True:
            try:
                chunk = obj.read(_READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                break  # close_notify: the socket's EOF follows and is reported as a close
            except ssl.SSLError as exc:
                raise TlsError(reason(exc)) from None
            if not chunk:
                break
            chunks.append(chunk)
            if not incoming.pending and not obj.pending():
                break  # all read (without the exception another read would raise)
        out = self._out.read()  # e.g. a key update answered
        if out:
            self.pending += out
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    @property
    def session(self) -> Any:
        """The TLS session to resume on the next connection (None before the handshake)."""
        try:
            return self.obj.session if self.done else None
        except (ValueError, AttributeError):
            return None
