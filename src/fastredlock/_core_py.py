"""The pure-Python core: one multiplexed round to all N masters, and the quorum arithmetic.

This is the reference implementation; ``_core.pyx`` does the same in C and must agree with it on
every outcome. A round is: encode the K commands of the operation once, write them to every
master's non-blocking socket in one write, then ``poll`` until every master answered all K or its
own deadline passed. A new connection first sends its handshake (AUTH, SELECT, INFO) alone and waits
for it to succeed before the commands follow, so a failed login never lets a command run (one extra
round trip, on connect only). Replies are parsed with ``hiredis.Reader``. A connection whose request did not
complete (timeout, error, garbage) is closed, so a late reply can never be read as the answer to a
later request; it is reopened on next use.

Restart-aware voting: with ``restart_aware=True`` every new connection asks the master for its
uptime (``INFO server``, part of the handshake). An OK from a master that has been up for less
than :attr:`Core.restart_grace_ms` is reported as ``UNTRUSTED`` and does not count toward a quorum:
that master may have forgotten locks it held before it restarted.

A ``Core`` is not thread-safe: the client keeps a pool of them, one per concurrent caller.
"""
from __future__ import annotations

import errno
import os
import select
import socket
from collections import deque
from time import monotonic
from typing import Deque, List, Optional, Sequence, Tuple

import hiredis

from . import _outcomes as oc
from ._masters import MasterSpec
from ._scripts import (
    ACQUIRE_ALL, ACQUIRE_ALL_SHA, EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE, FENCED_ACQUIRE_SHA, RELEASE,
    RELEASE_SHA,
)

__all__ = ["Core", "Round", "encode_command"]

KIND_SET = 0  # reply +OK means acquired, nil means taken
KIND_SCRIPT = 1  # reply :1 means done, :0 means not the owner
KIND_FENCED = 2  # reply :n >= 0 means acquired with counter n, :-1 means taken
KIND_SCRIPT_ACQUIRE = 3  # like KIND_SCRIPT, but an acquisition: restart-aware voting applies

_HELLO_AUTH = 0
_HELLO_SELECT = 1
_HELLO_INFO = 2

_POLLIN = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
_POLLOUT = select.POLLOUT
_RECV_SIZE = 65536
#: Largest bulk reply accepted (``INFO server`` is a few KB; lock replies are a few bytes). A master
#: announcing more is hostile or confused: it is cut off at the header, before anything is buffered.
MAX_BULK = 1 << 20
#: Longest status/error/integer line accepted.
MAX_LINE = 1 << 16
_REPLY_TYPES = frozenset(b"+-:$")
#: Stale-connection errors after which a reused connection is reopened and the command resent once.
_STALE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN})


def encode_command(*args: bytes) -> bytes:
    """Encode one command as a RESP array of bulk strings (binary-safe: names may hold CRLF)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class Round:
    """The result of one operation on one key: the decision, the timing and each master's answer.

    ``ok``: for acquire/extend, a quorum answered OK and validity is still positive; for release,
    a quorum still held the token. ``validity`` is in seconds, measured from ``started`` (the
    monotonic time taken before the first write), already reduced by elapsed time and drift.
    ``outcomes`` holds one code of :mod:`fastredlock._outcomes` per master; ``details`` is ``None``
    or a tuple of per-master messages (``None`` where there is nothing to say); ``values`` is
    ``None`` or, for a fenced acquisition, the fence counter each master returned (``None`` where it
    did not say OK).
    """

    __slots__ = ("ok", "successes", "validity", "elapsed", "started", "outcomes", "details", "values")

    def __init__(
        self,
        ok: bool,
        successes: int,
        validity: float,
        elapsed: float,
        started: float,
        outcomes: Tuple[int, ...],
        details: Optional[Tuple[Optional[str], ...]],
        values: Optional[Tuple[Optional[int], ...]] = None,
    ) -> None:
        self.ok = ok
        self.successes = successes
        self.validity = validity
        self.elapsed = elapsed
        self.started = started
        self.outcomes = outcomes
        self.details = details
        self.values = values

    def __repr__(self) -> str:
        return (
            f"Round(ok={self.ok}, successes={self.successes}, validity={self.validity:.4f}, "
            f"elapsed={self.elapsed:.6f}, outcomes={self.outcomes}, details={self.details}, "
            f"values={self.values})"
        )


def _handshake(spec: MasterSpec, restart_aware: bool) -> Tuple[bytes, Tuple[int, ...]]:
    """Return the bytes sent before the first command on a new connection, and what each answers."""
    out = b""
    kinds: List[int] = []
    if spec.password is not None:
        if spec.username:
            out += encode_command(b"AUTH", spec.username.encode(), spec.password.encode())
        else:
            out += encode_command(b"AUTH", spec.password.encode())
        kinds.append(_HELLO_AUTH)
    if spec.db:
        out += encode_command(b"SELECT", b"%d" % spec.db)
        kinds.append(_HELLO_SELECT)
    if restart_aware:
        out += encode_command(b"INFO", b"server")
        kinds.append(_HELLO_INFO)
    return out, tuple(kinds)


def parse_info_server(info: bytes) -> Tuple[Optional[bytes], Optional[int]]:
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


class _Conn:
    """One master's connection and its state within the current round."""

    __slots__ = (
        "spec", "sock", "fd", "reader", "hello", "hello_kinds", "up_since", "run_id", "restarts",
        "g_type", "g_line", "g_header", "g_skip",
        # per-round state
        "out", "skip", "expect", "deadline", "connecting", "reused", "retried", "got_data",
        "fallback_sent",
    )

    def __init__(self, spec: MasterSpec, restart_aware: bool) -> None:
        self.spec = spec
        self.sock: Optional[socket.socket] = None
        self.fd = -1
        self.reader: Optional[hiredis.Reader] = None
        self.hello, self.hello_kinds = _handshake(spec, restart_aware)
        #: Monotonic time the master started, from its uptime (restart-aware voting), or None.
        self.up_since: Optional[float] = None
        #: The master's run_id as last seen, and how many times it changed (restarts seen).
        self.run_id: Optional[bytes] = None
        self.restarts = 0
        self.out = b""
        self.skip = 0
        self.expect: Deque[int] = deque()
        self.deadline = 0.0
        self.connecting = False
        self.reused = False
        self.retried = False
        self.got_data = False
        self.fallback_sent = 0
        self.g_type = 0
        self.g_line = 0
        self.g_header = b""
        self.g_skip = 0

    def guard(self, data: bytes) -> Optional[str]:
        """Check that ``data`` continues a stream of replies of the shapes a lock client expects.

        Only RESP2 status, error, integer and bulk replies of bounded size pass; arrays, maps,
        RESP3 types, oversized bulks and endless lines are refused before hiredis buffers them.
        Returns a description of the problem, or None. Tracks reply boundaries across reads.
        """
        pos, end = 0, len(data)
        while pos < end:
            if self.g_skip:
                take = min(self.g_skip, end - pos)
                self.g_skip -= take
                pos += take
                continue
            if not self.g_type:
                kind = data[pos]
                if kind not in _REPLY_TYPES:
                    return f"unexpected reply type {bytes([kind])!r}"
                self.g_type = kind
                self.g_line = 0
                self.g_header = b""
                pos += 1
            nl = data.find(b"\n", pos)
            stop = end if nl == -1 else nl + 1
            self.g_line += stop - pos
            if self.g_line > MAX_LINE:
                return f"reply line longer than {MAX_LINE} bytes"
            if self.g_type == 36:  # '$': keep the length digits
                self.g_header += data[pos:stop]
            if nl == -1:
                return None
            pos = stop
            if self.g_type == 36:
                try:
                    length = int(self.g_header)
                except ValueError:
                    return f"bad bulk length {self.g_header[:20]!r}"
                if length > MAX_BULK:
                    return f"bulk reply of {length} bytes, over the {MAX_BULK}-byte limit"
                if length >= 0:
                    self.g_skip = length + 2
            self.g_type = 0
        return None

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
        self.g_type = 0
        self.g_line = 0
        self.g_header = b""
        self.g_skip = 0

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
        restart_aware: bool = False,
    ) -> None:
        self._conns: List[_Conn] = [_Conn(spec, restart_aware) for spec in masters]
        self.n = len(self._conns)
        self.quorum = self.n // 2 + 1
        self._io_timeout = io_timeout
        self._connect_timeout = connect_timeout
        self._drift_factor = drift_factor
        #: Whether new connections read the master's uptime (restart-aware voting).
        self.restart_aware = restart_aware
        #: An OK from a master up for less than this many milliseconds does not count (UNTRUSTED).
        self.restart_grace_ms = 0

    # --- operations on one key ------------------------------------------------------------
    def acquire(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """``SET key token NX PX ttl_ms`` on all masters in one round."""
        cmd = encode_command(b"SET", key, token, b"NX", b"PX", b"%d" % ttl_ms)
        return self._round([cmd], None, KIND_SET, (ttl_ms,))[0]

    def release(self, key: bytes, token: bytes) -> Round:
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours."""
        return self.release_many([key], [token])[0]

    def extend(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start."""
        return self.extend_many([key], [token], (ttl_ms,))[0]

    def acquire_fenced(self, key: bytes, fence_key: bytes, token: bytes, ttl_ms: int) -> Round:
        """Round 1 of a fenced acquisition: ``SET NX PX`` and read the fence counter, atomically.

        ``values`` holds each granting master's counter.
        """
        args = (b"2", key, fence_key, token, b"%d" % ttl_ms)
        cmd = encode_command(b"EVALSHA", FENCED_ACQUIRE_SHA, *args)
        fallback = encode_command(b"EVAL", FENCED_ACQUIRE, *args)
        return self._round([cmd], [fallback], KIND_FENCED, (ttl_ms,))[0]

    def write_fence(self, key: bytes, fence_key: bytes, token: bytes, fence: int, retention_ms: int) -> Round:
        """Round 2 of a fenced acquisition: owner-checked ``counter = max(counter, fence)``."""
        args = (b"2", key, fence_key, token, b"%d" % fence, b"%d" % retention_ms)
        cmd = encode_command(b"EVALSHA", FENCE_WRITE_SHA, *args)
        fallback = encode_command(b"EVAL", FENCE_WRITE, *args)
        return self._round([cmd], [fallback], KIND_SCRIPT, (0,))[0]

    # --- operations on many keys, pipelined in one write per master ------------------------
    def acquire_many(self, keys: Sequence[bytes], tokens: Sequence[bytes], ttl_ms: int) -> List[Round]:
        """``SET keys[i] tokens[i] NX PX ttl_ms`` for every i, in one round (one timing window)."""
        ttl = b"%d" % ttl_ms
        cmds = [encode_command(b"SET", k, t, b"NX", b"PX", ttl) for k, t in zip(keys, tokens)]
        return self._round(cmds, None, KIND_SET, (ttl_ms,) * len(cmds))

    def acquire_all(self, keys: Sequence[bytes], token: bytes, ttl_ms: int) -> Round:
        """Set every key to ``token`` on each master, or none of them there (one script per master)."""
        args = (b"%d" % len(keys), *keys, token, b"%d" % ttl_ms)
        cmd = encode_command(b"EVALSHA", ACQUIRE_ALL_SHA, *args)
        fallback = encode_command(b"EVAL", ACQUIRE_ALL, *args)
        return self._round([cmd], [fallback], KIND_SCRIPT_ACQUIRE, (ttl_ms,))[0]

    def release_many(self, keys: Sequence[bytes], tokens: Sequence[bytes]) -> List[Round]:
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round."""
        cmds = [encode_command(b"EVALSHA", RELEASE_SHA, b"1", k, t) for k, t in zip(keys, tokens)]
        fallbacks = [encode_command(b"EVAL", RELEASE, b"1", k, t) for k, t in zip(keys, tokens)]
        return self._round(cmds, fallbacks, KIND_SCRIPT, (0,) * len(cmds))

    def extend_many(
        self, keys: Sequence[bytes], tokens: Sequence[bytes], ttls_ms: Sequence[int]
    ) -> List[Round]:
        """Owner-checked ``PEXPIRE keys[i] ttls_ms[i]`` where ``keys[i]`` holds ``tokens[i]``, in one round."""
        cmds, fallbacks = [], []
        for key, token, ttl_ms in zip(keys, tokens, ttls_ms):
            ttl = b"%d" % ttl_ms
            cmds.append(encode_command(b"EVALSHA", EXTEND_SHA, b"1", key, token, ttl))
            fallbacks.append(encode_command(b"EVAL", EXTEND, b"1", key, token, ttl))
        return self._round(cmds, fallbacks, KIND_SCRIPT, ttls_ms)

    def master_states(self) -> List[Tuple[Optional[bytes], Optional[float], int]]:
        """Per master: ``(run_id, up_since, restarts seen)`` as learned by restart-aware voting."""
        return [(c.run_id, c.up_since, c.restarts) for c in self._conns]

    def close(self) -> None:
        """Close every connection; the core reconnects lazily if used again."""
        for conn in self._conns:
            conn.close()

    # --- the round ------------------------------------------------------------------------------
    def _round(
        self, cmds: List[bytes], fallbacks: Optional[List[bytes]], kind: int, ttls_ms: Sequence[int]
    ) -> List[Round]:
        """Run ``cmds`` on every master in one write each; ``ttls_ms[j]`` > 0 asks for validity of j."""
        n = self.n
        k = len(cmds)
        payload = cmds[0] if k == 1 else b"".join(cmds)
        outcomes = [[oc.TIMEOUT] * n for _ in range(k)]
        details: List[List[Optional[str]]] = [[None] * n for _ in range(k)]
        values: Optional[List[List[Optional[int]]]] = (
            [[None] * n for _ in range(k)] if kind == KIND_FENCED else None
        )
        conns = self._conns
        by_fd = {}
        poller = select.poll()
        started = monotonic()
        io_deadline = started + self._io_timeout
        fresh_deadline = io_deadline + self._connect_timeout

        def settle_all(i: int, code: int, detail: Optional[str]) -> None:
            """Give every command this master has not answered yet the same outcome."""
            for j in conns[i].expect:
                outcomes[j][i] = code
                details[j][i] = detail
            conns[i].expect.clear()

        def fail(i: int, code: int, detail: Optional[str]) -> None:
            conn = conns[i]
            if conn.fd in by_fd:
                poller.unregister(conn.fd)
                del by_fd[conn.fd]
            conn.close()
            settle_all(i, code, detail)

        def start(i: int, deadline: float) -> None:
            """Open the connection if needed, queue the commands, write what the socket takes."""
            conn = conns[i]
            conn.expect = deque(range(k))
            conn.got_data = False
            if conn.sock is None:
                try:
                    conn.open()
                except OSError as exc:
                    fail(i, oc.CONN_ERROR, exc.strerror or str(exc))
                    return
                # The handshake goes first, alone: if AUTH, SELECT or INFO fails, no command of ours
                # may have run (on the wrong db, or without the checks restart-aware voting needs).
                if conn.hello_kinds:
                    conn.out = conn.hello
                    conn.skip = 0
                else:
                    conn.out = payload
                    conn.skip = -1
                conn.reused = False
                conn.deadline = deadline
            else:
                conn.out = payload
                conn.skip = -1
                conn.reused = True
                conn.deadline = io_deadline
            if not conn.connecting and not write(i):
                return
            by_fd[conn.fd] = i
            poller.register(conn.fd, _POLLIN | (_POLLOUT if conn.out else 0))

        def broken(i: int, detail: str) -> None:
            """A reused connection that breaks before any reply is stale: reopen and resend once."""
            conn = conns[i]
            if conn.reused and not conn.retried and not conn.got_data:
                conn.retried = True
                if conn.fd in by_fd:
                    poller.unregister(conn.fd)
                    del by_fd[conn.fd]
                conn.close()
                start(i, io_deadline + self._connect_timeout)
            else:
                fail(i, oc.CONN_ERROR, detail)

        def write(i: int) -> bool:
            conn = conns[i]
            try:
                sent = conn.sock.send(conn.out)  # type: ignore[union-attr]
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno in _STALE_ERRNOS:
                    broken(i, exc.strerror or str(exc))
                else:
                    fail(i, oc.CONN_ERROR, exc.strerror or str(exc))
                return False
            conn.out = conn.out[sent:]
            return True

        def readable(i: int) -> None:
            """Read what arrived on one connection and settle the replies that are complete."""
            conn = conns[i]
            try:
                data = conn.sock.recv(_RECV_SIZE)  # type: ignore[union-attr]
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in _STALE_ERRNOS:
                    broken(i, exc.strerror or str(exc))
                else:
                    fail(i, oc.CONN_ERROR, exc.strerror or str(exc))
                return
            if not data:
                broken(i, "connection closed by the master")
                return
            conn.got_data = True
            problem = conn.guard(data)
            if problem is not None:
                fail(i, oc.PROTOCOL_ERROR, problem)
                return
            reader = conn.reader
            reader.feed(data)  # type: ignore[union-attr]
            while conn.expect:
                try:
                    reply = reader.gets()  # type: ignore[union-attr]
                except Exception as exc:  # hiredis.ProtocolError, or MemoryError on absurd headers
                    fail(i, oc.PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}")
                    return
                if reply is False:
                    return
                if conn.skip >= 0:
                    problem = self._hello_reply(conn, conn.hello_kinds[conn.skip], reply)
                    if problem is not None:
                        fail(i, oc.ERROR_REPLY, problem)
                        return
                    conn.skip += 1
                    if conn.skip == len(conn.hello_kinds):
                        conn.skip = -1
                        conn.out = payload
                        if not write(i):
                            return
                        if conn.out:
                            poller.modify(conn.fd, _POLLIN | _POLLOUT)
                    continue
                j = conn.expect.popleft()
                if isinstance(reply, hiredis.ReplyError):
                    if fallbacks is not None and str(reply).startswith("NOSCRIPT") and conn.fallback_sent < k:
                        # The script cache is empty (a restart or SCRIPT FLUSH): send the script itself.
                        conn.fallback_sent += 1
                        conn.expect.append(j)
                        conn.out += fallbacks[j]
                        if write(i) and conn.out:
                            poller.modify(conn.fd, _POLLIN | _POLLOUT)
                        if conn.sock is None:
                            return
                        continue
                    code, detail, value = oc.ERROR_REPLY, str(reply), None
                else:
                    code, detail, value = _classify(kind, reply)
                    if kind != KIND_SCRIPT:  # an acquisition
                        if code == oc.OK and self._untrusted(conn):
                            code, detail = oc.UNTRUSTED, self._untrusted_detail(conn)
                        elif code == oc.NO and conn.retried:
                            # The lost connection may have run our first SET: the key can be ours.
                            # Not a clear "no", so the caller releases (owner-checked) to be sure.
                            code, detail = oc.CONN_ERROR, "connection broke; the resent command found the key set"
                outcomes[j][i] = code
                details[j][i] = detail
                if values is not None:
                    values[j][i] = value
                if code == oc.PROTOCOL_ERROR:
                    # A reply of the wrong shape: the connection is out of step with its requests.
                    fail(i, code, detail)
                    return
            if reader.has_data():  # type: ignore[union-attr]
                fail(i, oc.PROTOCOL_ERROR, "unexpected bytes after the last reply")
                return
            poller.unregister(conn.fd)
            del by_fd[conn.fd]

        for i in range(n):
            conns[i].retried = False
            conns[i].fallback_sent = 0
            start(i, fresh_deadline)

        while by_fd:
            now = monotonic()
            wait = min(conns[i].deadline for i in by_fd.values()) - now
            if wait <= 0:
                for i in list(by_fd.values()):
                    if conns[i].deadline <= now:
                        fail(i, oc.TIMEOUT, None)
                continue
            for fd, ev in poller.poll(wait * 1000.0 + 0.5):
                i = by_fd.get(fd)
                if i is None:
                    continue
                conn = conns[i]
                if ev & _POLLOUT:
                    if conn.connecting:
                        err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
                        if err:
                            fail(i, oc.CONN_ERROR, os.strerror(err))
                            continue
                        conn.connecting = False
                    if not write(i):
                        continue
                    if not conn.out:
                        poller.modify(fd, _POLLIN)
                if ev & _POLLIN:
                    readable(i)

        elapsed = monotonic() - started
        rounds = []
        for j in range(k):
            row = outcomes[j]
            successes = row.count(oc.OK)
            ttl_ms = ttls_ms[j]
            if ttl_ms:
                validity_ms = ttl_ms - elapsed * 1000.0 - (ttl_ms * self._drift_factor + 2.0)
                ok = successes >= self.quorum and validity_ms > 0
                validity = validity_ms / 1000.0
            else:
                ok = successes >= self.quorum
                validity = 0.0
            drow = details[j]
            rounds.append(Round(
                ok, successes, validity, elapsed, started, tuple(row),
                tuple(drow) if any(d is not None for d in drow) else None,
                tuple(values[j]) if values is not None else None,
            ))
        return rounds

    # --- restart-aware voting -------------------------------------------------------------
    def _hello_reply(self, conn: _Conn, hello_kind: int, reply: object) -> Optional[str]:
        """Check one handshake reply; return a problem to report, or None."""
        if isinstance(reply, hiredis.ReplyError):
            what = {_HELLO_AUTH: "AUTH", _HELLO_SELECT: "SELECT", _HELLO_INFO: "INFO"}[hello_kind]
            hint = " (pass restart_aware=False where INFO is not allowed)" if hello_kind == _HELLO_INFO else ""
            return f"{what} failed: {reply}{hint}"
        if hello_kind == _HELLO_INFO:
            if not isinstance(reply, bytes):
                return "INFO server: unexpected reply"
            run_id, uptime = parse_info_server(reply)
            if uptime is None:
                return "INFO server: no uptime_in_seconds (pass restart_aware=False for this master)"
            if conn.run_id is not None and run_id != conn.run_id:
                conn.restarts += 1
            conn.run_id = run_id
            conn.up_since = monotonic() - uptime
        return None

    def _untrusted(self, conn: _Conn) -> bool:
        up_since = conn.up_since
        return up_since is not None and (monotonic() - up_since) * 1000.0 < self.restart_grace_ms

    def _untrusted_detail(self, conn: _Conn) -> str:
        up = monotonic() - conn.up_since  # type: ignore[operator]
        return f"up for {up:.0f}s, less than the restart grace of {self.restart_grace_ms / 1000.0:g}s"


def _classify(kind: int, reply: object) -> Tuple[int, Optional[str], Optional[int]]:
    """Turn one non-error reply into ``(outcome, detail, value)`` for a command of ``kind``."""
    if kind == KIND_SET:
        if reply == b"OK":
            return oc.OK, None, None
        if reply is None:
            return oc.NO, None, None
    elif kind == KIND_SCRIPT or kind == KIND_SCRIPT_ACQUIRE:
        if reply == 1 and isinstance(reply, int):
            return oc.OK, None, None
        if reply == 0 and isinstance(reply, int):
            return oc.NO, None, None
    elif isinstance(reply, int):  # KIND_FENCED
        if reply >= 0:
            return oc.OK, None, reply
        if reply == -1:
            return oc.NO, None, None
    return oc.PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None
