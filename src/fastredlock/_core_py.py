"""The pure-Python core: one multiplexed round to all N masters, and the quorum arithmetic.

This is the reference implementation; ``_core.pyx`` does the same in C and must agree with it on
every outcome. A round is: encode the command once, write it to every master's non-blocking socket,
then ``poll`` until every master answered or its own deadline passed. Replies are parsed with
``hiredis.Reader``. A connection whose request did not complete (timeout, error, garbage) is closed,
so a late reply can never be read as the answer to a later request; it is reopened on next use.

A ``Core`` is not thread-safe: the client keeps a pool of them, one per concurrent caller.
"""
from __future__ import annotations

import errno
import os
import select
import socket
from time import monotonic
from typing import List, Optional, Sequence, Tuple

import hiredis

from . import _outcomes as oc
from ._masters import MasterSpec
from ._scripts import EXTEND, EXTEND_SHA, RELEASE, RELEASE_SHA

__all__ = ["Core", "Round", "encode_command"]

_KIND_SET = 0  # reply +OK means acquired, nil means taken
_KIND_SCRIPT = 1  # reply :1 means done, :0 means not the owner

_POLLIN = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
_POLLOUT = select.POLLOUT
_RECV_SIZE = 65536
#: Stale-connection errors after which a reused connection is reopened and the command resent once.
_STALE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN})


def encode_command(*args: bytes) -> bytes:
    """Encode one command as a RESP array of bulk strings (binary-safe: names may hold CRLF)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class Round:
    """The result of one round: the decision, the timing and what each master answered.

    ``ok``: for acquire/extend, a quorum answered OK and validity is still positive; for release,
    a quorum still held the token. ``validity`` is in seconds, measured from ``started`` (the
    monotonic time taken before the first write), already reduced by elapsed time and drift.
    ``outcomes`` holds one code of :mod:`fastredlock._outcomes` per master; ``details`` is ``None``
    or a tuple of per-master messages (``None`` where there is nothing to say).
    """

    __slots__ = ("ok", "successes", "validity", "elapsed", "started", "outcomes", "details")

    def __init__(
        self,
        ok: bool,
        successes: int,
        validity: float,
        elapsed: float,
        started: float,
        outcomes: Tuple[int, ...],
        details: Optional[Tuple[Optional[str], ...]],
    ) -> None:
        self.ok = ok
        self.successes = successes
        self.validity = validity
        self.elapsed = elapsed
        self.started = started
        self.outcomes = outcomes
        self.details = details

    def __repr__(self) -> str:
        return (
            f"Round(ok={self.ok}, successes={self.successes}, validity={self.validity:.4f}, "
            f"elapsed={self.elapsed:.6f}, outcomes={self.outcomes}, details={self.details})"
        )


def _handshake(spec: MasterSpec) -> Tuple[bytes, int]:
    """Return the bytes sent before the first command on a new connection, and their reply count."""
    out = b""
    count = 0
    if spec.password is not None:
        if spec.username:
            out += encode_command(b"AUTH", spec.username.encode(), spec.password.encode())
        else:
            out += encode_command(b"AUTH", spec.password.encode())
        count += 1
    if spec.db:
        out += encode_command(b"SELECT", b"%d" % spec.db)
        count += 1
    return out, count


class _Conn:
    """One master's connection and its state within the current round."""

    __slots__ = (
        "spec", "sock", "fd", "reader", "hello", "hello_replies",
        # per-round state
        "out", "skip", "deadline", "connecting", "reused", "retried", "got_data", "fallback_sent",
    )

    def __init__(self, spec: MasterSpec) -> None:
        self.spec = spec
        self.sock: Optional[socket.socket] = None
        self.fd = -1
        self.reader: Optional[hiredis.Reader] = None
        self.hello, self.hello_replies = _handshake(spec)
        self.out = b""
        self.skip = 0
        self.deadline = 0.0
        self.connecting = False
        self.reused = False
        self.retried = False
        self.got_data = False
        self.fallback_sent = False

    def open(self) -> None:
        """Start a non-blocking connect; the handshake is queued in front of the next command."""
        spec = self.spec
        if spec.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            addr: object = spec.path
        else:
            info = socket.getaddrinfo(spec.host, spec.port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            family, _, _, _, addr = info[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            sock.close()
            raise OSError(err, os.strerror(err))
        self.sock = sock
        self.fd = sock.fileno()
        self.reader = hiredis.Reader()
        self.connecting = err != 0

    def close(self) -> None:
        """Drop the connection (close only: never shutdown, a fork sibling may share the socket)."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.fd = -1
        self.reader = None
        self.connecting = False


class Core:
    """N connections and the round that drives them. Not thread-safe; see the module docstring."""

    def __init__(
        self,
        masters: Sequence[MasterSpec],
        io_timeout: float,
        connect_timeout: float,
        drift_factor: float,
    ) -> None:
        self._conns: List[_Conn] = [_Conn(spec) for spec in masters]
        self.n = len(self._conns)
        self.quorum = self.n // 2 + 1
        self._io_timeout = io_timeout
        self._connect_timeout = connect_timeout
        self._drift_factor = drift_factor

    # --- the three operations -------------------------------------------------------------
    def acquire(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """``SET key token NX PX ttl_ms`` on all masters in one round."""
        cmd = encode_command(b"SET", key, token, b"NX", b"PX", b"%d" % ttl_ms)
        return self._round(cmd, b"", _KIND_SET, ttl_ms)

    def release(self, key: bytes, token: bytes) -> Round:
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours."""
        cmd = encode_command(b"EVALSHA", RELEASE_SHA, b"1", key, token)
        fallback = encode_command(b"EVAL", RELEASE, b"1", key, token)
        return self._round(cmd, fallback, _KIND_SCRIPT, 0)

    def extend(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start."""
        ttl = b"%d" % ttl_ms
        cmd = encode_command(b"EVALSHA", EXTEND_SHA, b"1", key, token, ttl)
        fallback = encode_command(b"EVAL", EXTEND, b"1", key, token, ttl)
        return self._round(cmd, fallback, _KIND_SCRIPT, ttl_ms)

    def close(self) -> None:
        """Close every connection; the core reconnects lazily if used again."""
        for conn in self._conns:
            conn.close()

    # --- the round ------------------------------------------------------------------------------
    def _round(self, cmd: bytes, fallback: bytes, kind: int, ttl_ms: int) -> Round:
        n = self.n
        outcomes = [oc.TIMEOUT] * n
        details: List[Optional[str]] = [None] * n
        by_fd = {}
        poller = select.poll()
        started = monotonic()
        io_deadline = started + self._io_timeout

        def fail(i: int, conn: _Conn, code: int, detail: Optional[str]) -> None:
            if conn.fd >= 0 and conn.fd in by_fd:
                poller.unregister(conn.fd)
                del by_fd[conn.fd]
            conn.close()
            outcomes[i] = code
            details[i] = detail

        def start(i: int, conn: _Conn, fresh_deadline: float) -> None:
            """Open the connection if needed, queue the command, write what the socket takes."""
            if conn.sock is None:
                try:
                    conn.open()
                except OSError as exc:
                    fail(i, conn, oc.CONN_ERROR, exc.strerror or str(exc))
                    return
                conn.out = conn.hello + cmd
                conn.skip = conn.hello_replies
                conn.reused = False
                conn.deadline = fresh_deadline
            else:
                conn.out = cmd
                conn.skip = 0
                conn.reused = True
                conn.deadline = io_deadline
            conn.got_data = False
            if not conn.connecting and not write(i, conn):
                return
            by_fd[conn.fd] = i
            poller.register(conn.fd, _POLLIN | (_POLLOUT if conn.out else 0))

        def broken(i: int, conn: _Conn, detail: str) -> None:
            """A reused connection that breaks before any reply is stale: reopen and resend once."""
            if conn.reused and not conn.retried and not conn.got_data:
                conn.retried = True
                if conn.fd in by_fd:
                    poller.unregister(conn.fd)
                    del by_fd[conn.fd]
                conn.close()
                start(i, conn, io_deadline + self._connect_timeout)
            else:
                fail(i, conn, oc.CONN_ERROR, detail)

        def write(i: int, conn: _Conn) -> bool:
            try:
                sent = conn.sock.send(conn.out)  # type: ignore[union-attr]
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno in _STALE_ERRNOS:
                    broken(i, conn, exc.strerror or str(exc))
                else:
                    fail(i, conn, oc.CONN_ERROR, exc.strerror or str(exc))
                return False
            conn.out = conn.out[sent:]
            return True

        fresh_deadline = io_deadline + self._connect_timeout
        for i, conn in enumerate(self._conns):
            conn.retried = False
            conn.fallback_sent = False
            start(i, conn, fresh_deadline)

        while by_fd:
            now = monotonic()
            wait = min(self._conns[i].deadline for i in by_fd.values()) - now
            if wait <= 0:
                for fd, i in list(by_fd.items()):
                    conn = self._conns[i]
                    if conn.deadline <= now:
                        fail(i, conn, oc.TIMEOUT, None)
                continue
            for fd, ev in poller.poll(wait * 1000.0 + 0.5):
                i = by_fd.get(fd)
                if i is None:
                    continue
                conn = self._conns[i]
                if ev & _POLLOUT:
                    if conn.connecting:
                        err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
                        if err:
                            fail(i, conn, oc.CONN_ERROR, os.strerror(err))
                            continue
                        conn.connecting = False
                    if not write(i, conn):
                        continue
                    if not conn.out:
                        poller.modify(fd, _POLLIN)
                if ev & _POLLIN:
                    self._readable(i, conn, kind, fallback, outcomes, details, fail, broken, write, poller, by_fd)

        elapsed = monotonic() - started
        successes = outcomes.count(oc.OK)
        if kind == _KIND_SET or ttl_ms:
            validity_ms = ttl_ms - elapsed * 1000.0 - (ttl_ms * self._drift_factor + 2.0)
            ok = successes >= self.quorum and validity_ms > 0
            validity = validity_ms / 1000.0
        else:
            ok = successes >= self.quorum
            validity = 0.0
        has_details = any(d is not None for d in details)
        return Round(
            ok, successes, validity, elapsed, started, tuple(outcomes),
            tuple(details) if has_details else None,
        )

    def _readable(self, i, conn, kind, fallback, outcomes, details, fail, broken, write, poller, by_fd):
        """Read what arrived on one connection and settle its outcome once its reply is complete."""
        try:
            data = conn.sock.recv(_RECV_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno in _STALE_ERRNOS:
                broken(i, conn, exc.strerror or str(exc))
            else:
                fail(i, conn, oc.CONN_ERROR, exc.strerror or str(exc))
            return
        if not data:
            broken(i, conn, "connection closed by the master")
            return
        conn.got_data = True
        reader = conn.reader
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                fail(i, conn, oc.PROTOCOL_ERROR, str(exc))
                return
            if reply is False:
                return
            if conn.skip:
                conn.skip -= 1
                if isinstance(reply, hiredis.ReplyError):
                    fail(i, conn, oc.ERROR_REPLY, f"handshake: {reply}")
                    return
                continue
            if isinstance(reply, hiredis.ReplyError):
                if not conn.fallback_sent and fallback and str(reply).startswith("NOSCRIPT"):
                    conn.fallback_sent = True
                    conn.out = fallback
                    if write(i, conn) and conn.out:
                        poller.modify(conn.fd, _POLLIN | _POLLOUT)
                    continue
                code, detail = oc.ERROR_REPLY, str(reply)
            elif kind == _KIND_SET:
                if reply == b"OK":
                    code, detail = oc.OK, None
                elif reply is None:
                    code, detail = oc.NO, None
                else:
                    code, detail = oc.PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}"
            elif reply == 1:
                code, detail = oc.OK, None
            elif reply == 0:
                code, detail = oc.NO, None
            else:
                code, detail = oc.PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}"
            if code == oc.ERROR_REPLY or code == oc.PROTOCOL_ERROR or reader.has_data():
                # An error may leave the connection in an unknown state; extra bytes mean it is
                # out of step. Either way it must not carry another request.
                fail(i, conn, code, detail)
                return
            poller.unregister(conn.fd)
            del by_fd[conn.fd]
            outcomes[i] = code
            details[i] = detail
            return
