"""The pure-Python I/O twin: sockets, ``poll``/``select`` and hiredis driving the protocol session.

Everything a round decides lives in :mod:`fastredlock.protocol` (its :class:`~.protocol.session.Session`
and links), and the round's drive, the same for both twins, in its :class:`~.protocol.driver.Driver`,
which this module's ``Core`` extends with the I/O: it only opens non-blocking sockets, writes what a link asks for (one write
per master per round), waits for readiness, reads, parses replies with ``hiredis.Reader`` and hands
them to the session. ``_io_c.pyx`` does the same in C with ``poll(2)`` outside the GIL and a fast
parser for the exact replies a lock round expects; both expose the :class:`Core` interface the
front-ends use, and behaviour tests run on both.

A ``Core`` is not thread-safe: the client keeps a pool of them, one per concurrent caller.
"""
from __future__ import annotations

import errno
import os
import select
import socket
from time import monotonic
from typing import Any, Callable, List, Optional, Sequence, Tuple

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from ..protocol.health import COOLDOWN, MAX_COOLDOWN, Health
from ..protocol.link import MAX_OWED, STALE_AFTER
from ..protocol.family import lean_release, lean_release_of, sha_of
from ..protocol.handshake import CAP_DELEX, CAP_DELIFEQ, native_deletes, native_extends, native_release, native_releases
from ..protocol.replies import KIND_BITS, KIND_FENCED, KIND_READ, KIND_SCRIPT, KIND_SET
from ..protocol.resp import MAX_BULK, MAX_LINE, encode_command
from ..protocol.result import Round
from ..protocol.scripts import (
    EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE, FENCED_ACQUIRE_SHA, QUIET, RELEASE_FULL, RELEASE_FULL_SHA, RELEASE_MANY, RELEASE_MANY_SHA,
    RELEASE_CLUSTER, RELEASE_TAGGED,
)
from ..protocol.driver import Driver
from fastredlock.io.tls import TlsConn, TlsError, context_for  # shared, never compiled: not served by _pure
from fastredlock.io.sentinel import Resolver, resolve
from fastredlock.io.cluster import refresh

__all__ = ["Core", "Health", "Round", "encode_command", "COOLDOWN", "MAX_COOLDOWN", "MAX_BULK",
           "MAX_LINE", "MAX_OWED", "STALE_AFTER"]

_RECV_SIZE = 65536
#: Stale-connection errors after which a reused connection is reopened and the command resent once.
_STALE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN})

if hasattr(select, "poll"):
    _POLLIN = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
    _POLLOUT = select.POLLOUT
    _new_poller: Callable[[], Any] = select.poll
else:  # Windows: no poll(2); select() over the same register/poll interface
    _POLLIN, _POLLOUT = 1, 4

    class _SelectPoller:
        """The part of ``select.poll``'s interface the loop uses, on top of ``select.select``."""

        def __init__(self) -> None:
            self._events: "dict[int, int]" = {}

        def register(self, fd: int, events: int) -> None:
            self._events[fd] = events

        def unregister(self, fd: int) -> None:
            del self._events[fd]

        def poll(self, timeout_ms: float) -> "list[tuple[int, int]]":
            readers = [fd for fd, ev in self._events.items() if ev & _POLLIN]
            writers = [fd for fd, ev in self._events.items() if ev & _POLLOUT]
            if not readers and not writers:
                return []
            r, w, x = select.select(readers, writers, writers, max(0.0, timeout_ms) / 1000.0)
            ready: "dict[int, int]" = {}
            for fd in r:
                ready[fd] = ready.get(fd, 0) | _POLLIN
            for fd in w + x:  # a failed connect shows up in the except set on Windows
                ready[fd] = ready.get(fd, 0) | _POLLOUT
            return list(ready.items())

    _new_poller = _SelectPoller


def _connect(spec) -> Tuple[socket.socket, bool]:
    """A non-blocking socket connecting to ``spec``; whether the connect is still in progress."""
    if spec.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr: Any = spec.path
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
    return sock, err != 0


class Core(Driver):
    """N connections to the masters, driven by one protocol :class:`Session`. Not thread-safe."""

    def __init__(
        self,
        masters: Sequence,
        io_timeout: float,
        connect_timeout: float,
        drift_factor: float,
        restart_aware: bool = False,
        health: Optional[Health] = None,
        early: bool = True,
    ) -> None:
        super().__init__(masters, io_timeout, connect_timeout, drift_factor, restart_aware, health, early)
        # Per link (a master's, or a cluster node's: see _grow): the socket and its reader; the TLS
        # context (None: plain), the open connection's TLS state, and the last TLS session
        # (resumed on reconnect); who to ask where a Sentinel master is (None: a fixed address).
        self._socks: List[Optional[socket.socket]] = []
        self._readers: List[Optional[hiredis.Reader]] = []
        self._tls_ctx: list = []
        self._tls: List[Optional[TlsConn]] = []
        self._tls_session: list = []
        self._resolvers: list = []
        self._poller = _new_poller()  # every fd it watches is unregistered after each wait
        self._grow()
        if self._session.routing is not None:
            self.refresh_routes(0.0)
        self._sentinels = any(r is not None for r in self._resolvers)

    def _grow(self) -> None:
        """Make room for the links the session has now (cluster nodes are added as they are learned)."""
        for link in self._links[len(self._socks):]:
            self._socks.append(None)
            self._readers.append(None)
            self._tls_ctx.append(None if link.spec.tls is None else context_for(link.spec.tls))
            self._tls.append(None)
            self._tls_session.append(None)
            self._resolvers.append(None if link.spec.sentinel is None or link.spec.host is not None
                                   else Resolver(link.spec))

    def refresh_routes(self, now: float) -> None:
        """Ask the clusters whose slot map is due (none, almost always) for it again."""
        for i in self._session.stale_routes(now):
            if refresh(self._session, i) is not None:
                self._grow()

    # --- operations on one key --------------------------------------------------------------------
    def acquire(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """``SET key token NX PX ttl_ms`` on all masters in one round."""
        cmd = encode_command(b"SET", key, token, b"NX", b"PX", b"%d" % ttl_ms)
        return self._round(KIND_SET, [cmd], None, (ttl_ms,))[0]

    def release(self, key: bytes, token: bytes) -> Round:
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours."""
        return self._release_many([key], [token], True)[0]

    def release_nowait(self, key: bytes, token: bytes) -> Round:
        """:meth:`release` written to every master, returning at once: every outcome is PENDING
        (the answers fill it in as they are read, by a later round or :meth:`settle`)."""
        return self._release_many([key], [token], False)[0]

    def release_quiet(self, key: bytes, token: bytes) -> Round:
        """The cleanup of a failed acquisition, written and not waited for (it only has to follow
        the SET on each connection): ``RELEASE_FULL`` with ``QUIET`` gives no turn and wakes
        nobody, the attempt never held the lock (where a master has ``DELEX``/``DELIFEQ``, that)."""
        native = native_deletes((key,), (token,)) if self._session.caps_seen else None
        return self._script(KIND_SCRIPT, RELEASE_FULL_SHA, RELEASE_FULL, [(b"1", key, token, QUIET)], (0,), False,
                            native)[0]

    def release_plain(self, key: bytes, token: bytes) -> Round:
        """An owner-checked delete of the key alone, waited for (``RELEASE_FULL`` with ``QUIET``,
        or the native delete): where an ACL's key patterns refuse the keys a release derives."""
        native = native_deletes((key,), (token,)) if self._session.caps_seen else None
        return self._script(KIND_SCRIPT, RELEASE_FULL_SHA, RELEASE_FULL, [(b"1", key, token, QUIET)], (0,), True,
                            native)[0]

    def extend(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """Owner-checked ``PEXPIRE`` on all masters; validity is recomputed from this round's start."""
        return self.extend_many([key], [token], (ttl_ms,))[0]

    def acquire_fenced(self, key: bytes, fence_key: bytes, token: bytes, ttl_ms: int) -> Round:
        """Round 1 of a fenced acquisition: ``SET NX PX`` and read the fence counter, atomically."""
        args = (b"2", key, fence_key, token, b"%d" % ttl_ms)
        return self._script(KIND_FENCED, FENCED_ACQUIRE_SHA, FENCED_ACQUIRE, [args], (ttl_ms,))[0]

    def write_fence(self, key: bytes, fence_key: bytes, token: bytes, fence: int, retention_ms: int) -> Round:
        """Round 2 of a fenced acquisition: owner-checked ``counter = max(counter, fence)``."""
        args = (b"2", key, fence_key, token, b"%d" % fence, b"%d" % retention_ms)
        return self._script(KIND_SCRIPT, FENCE_WRITE_SHA, FENCE_WRITE, [args], (0,))[0]

    # --- operations on many keys, pipelined in one write per master -----------------------------
    def acquire_many(self, keys: Sequence[bytes], tokens: Sequence[bytes], ttl_ms: int) -> List[Round]:
        """``SET keys[i] tokens[i] NX PX ttl_ms`` for every i, in one round (one timing window)."""
        ttl = b"%d" % ttl_ms
        cmds = [encode_command(b"SET", k, t, b"NX", b"PX", ttl) for k, t in zip(keys, tokens)]
        return self._round(KIND_SET, cmds, None, (ttl_ms,) * len(cmds))

    def release_many(self, keys: Sequence[bytes], tokens: Sequence[bytes]) -> List[Round]:
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round. Two keys
        or more go to each master in one script call (``RELEASE_MANY``), far cheaper for the master."""
        return self._release_many(keys, tokens, True)

    def release_many_nowait(self, keys: Sequence[bytes], tokens: Sequence[bytes]) -> List[Round]:
        """:meth:`release_many` written, returning at once: every outcome is PENDING."""
        return self._release_many(keys, tokens, False)

    def _release_many(self, keys: Sequence[bytes], tokens: Sequence[bytes], wait: bool) -> List[Round]:
        k = len(keys)
        if k < 2 or self._session.routing is not None or self._session.caps_any & (CAP_DELIFEQ | CAP_DELEX):
            # a cluster: one script per key (slot); masters with a native release: one each too
            # (a master with SET IFEQ alone still gets the one batch script)
            return self._release_each(keys, tokens, wait)
        args = (b"%d" % k, *keys, *tokens)
        return self._script(KIND_BITS, RELEASE_MANY_SHA, RELEASE_MANY, [args], (0,) * k, wait)

    def release_each(self, keys: Sequence[bytes], tokens: Sequence[bytes]) -> List[Round]:
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round of one
        ``RELEASE`` script per key: what :meth:`release_many` sends to a cluster (a script may name
        the keys of one slot only); for a plain master, ``release_many`` is cheaper. A key that
        cannot queue (no wake mark), or keys of both forms (with and without a hash tag) on plain
        masters, make it ``RELEASE_FULL`` for every key. A cluster gets ``RELEASE_CLUSTER`` (the
        key and its mark deleted by a DEL each: a node whose slot migrates answers a command that
        touches a key it has and one it lacks with ``-ASK``/``-TRYAGAIN``, an error in a script)
        and no native forms."""
        return self._release_each(keys, tokens, True)

    def _release_each(self, keys: Sequence[bytes], tokens: Sequence[bytes], wait: bool) -> List[Round]:
        session = self._session
        if session.routing is not None:  # a cluster
            script = RELEASE_CLUSTER if all(lean_release(key) is not None for key in keys) else RELEASE_FULL
        else:
            script = lean_release_of(keys) or RELEASE_FULL
        args = [(b"1", key, token) for key, token in zip(keys, tokens)]
        native = None
        if session.caps_seen and session.routing is None:
            if len(keys) == 1:
                if script is not RELEASE_FULL:
                    native = native_release(keys[0], tokens[0], script is RELEASE_TAGGED)  # (see protocol.handshake)
            elif all(lean_release(key) is not None for key in keys):
                native = native_releases(list(keys), list(tokens))
        return self._script(KIND_SCRIPT, sha_of(script), script, args, (0,) * len(args), wait, native)

    def extend_many(self, keys: Sequence[bytes], tokens: Sequence[bytes], ttls_ms: Sequence[int]) -> List[Round]:
        """Owner-checked ``PEXPIRE keys[i] ttls_ms[i]`` where ``keys[i]`` holds ``tokens[i]``, in one round
        (``SET ... IFEQ ... PX`` where a master has it)."""
        args = [(b"1", key, token, b"%d" % ttl) for key, token, ttl in zip(keys, tokens, ttls_ms)]
        native = native_extends(keys, tokens, ttls_ms) if self._session.caps_seen else None
        return self._script(KIND_SCRIPT, EXTEND_SHA, EXTEND, args, tuple(ttls_ms), True, native)

    # --- the rounds of Driver.script and Driver.inspect / reads -------------------------------
    def run_script(self, kind: int, sha: bytes, script: bytes, args: Sequence[bytes], ttl_ms: int,
                   wait: bool) -> Round:
        return self._script(kind, sha, script, [tuple(args)], (ttl_ms,), wait)[0]

    def run_reads(self, commands: Sequence[tuple]) -> List[Round]:
        cmds = [encode_command(*a) for a in commands]
        if not cmds:
            return []
        return self._round(KIND_READ, cmds, None, (0,) * len(cmds))

    def _script(self, kind: int, sha: bytes, script: bytes, args: List[tuple], ttls_ms: Sequence[int],
                wait: bool = True, native: Any = None) -> List[Round]:
        """EVALSHA ``sha`` once per argument tuple; the EVAL forms are encoded if a master needs them.
        ``native``: the round's native forms (see :meth:`.protocol.session.Session.begin`), or None."""
        cmds = [encode_command(b"EVALSHA", sha, *a) for a in args]
        return self._round(kind, cmds, lambda: [encode_command(b"EVAL", script, *a) for a in args], ttls_ms, wait,
                           native)

    # --- the round (driven by protocol.driver.Driver.run_round) ------------------------------------
    def _round(self, kind: int, cmds: List[bytes], fallbacks: Optional[Callable[[], List[bytes]]],
               ttls_ms: Sequence[int], wait: bool = True, native: Any = None) -> List[Any]:
        return self.run_round(kind, len(cmds), len(ttls_ms), cmds[0] if len(cmds) == 1 else b"".join(cmds),
                              fallbacks is not None, fallbacks, ttls_ms, wait, native)

    # --- the I/O the Driver calls ------------------------------------------------------------------
    clock = staticmethod(monotonic)
    now = staticmethod(monotonic)

    def is_open(self, i: int) -> bool:
        return self._socks[i] is not None

    def asks_sentinels(self, i: int) -> bool:
        return self._resolvers[i] is not None

    def writing(self) -> Tuple[int, ...]:
        socks = self._socks
        return tuple(link.index for link in self._links
                     if socks[link.index] is not None and self._wants_write(link))

    def fds(self) -> List[int]:
        """The open sockets' fds by master (-1: none)."""
        return [-1 if sock is None else sock.fileno() for sock in self._socks]

    def wait_and_serve(self, wait_ms: float) -> None:
        """Wait until a polled link can be written or read (or ``wait_ms`` passed) and serve it."""
        poller = self._poller
        registered = {}
        try:
            for link in self._links:
                sock = self._socks[link.index]
                if link.polled and sock is not None:
                    fd = sock.fileno()
                    registered[fd] = link
                    poller.register(fd, _POLLIN | (_POLLOUT if self._wants_write(link) else 0))
            for fd, ev in poller.poll(wait_ms + 0.5 if wait_ms > 0.0 else 0.0):
                link = registered.get(fd)
                if link is None or self._socks[link.index] is None:
                    continue
                self.serve(link.index, ev & _POLLIN, ev & _POLLOUT)
        finally:
            for fd in registered:
                try:
                    poller.unregister(fd)
                except (KeyError, ValueError, OSError):
                    pass

    def _wants_write(self, link) -> bool:
        """Whether the link's socket must be watched for writability (connect, bytes to send)."""
        tls = self._tls[link.index]
        if tls is None:
            return bool(link.out) or link.connecting
        return tls.wants_write(link.out)

    def serve(self, i: int, readable: bool, writable: bool) -> None:
        """The link's socket can be written and/or read: finish a connect, write, read."""
        link = self._links[i]
        if writable:
            tls = self._tls[link.index]
            if link.connecting and (tls is None or not tls.tcp_up):
                err = self._socks[link.index].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self._session.connect_failed(link.index, os.strerror(err), monotonic())
                    self.carry_out(link.index)
                    return
                if tls is None:
                    link.connecting = False
                else:
                    tls.tcp_up = True  # the handshake runs: the link stays connecting until it is done
            self.carry_out(link.index)
        if readable and self._socks[link.index] is not None:
            self.receive(i)

    def carry_out(self, i: int) -> None:
        """Carry out what link ``i`` asks for: close, open, write."""
        link = self._links[i]
        while True:
            if link.closing:
                link.closing = False
                sock = self._socks[i]
                self._socks[i] = None
                self._readers[i] = None
                tls = self._tls[i]
                if tls is not None:
                    self._tls[i] = None
                    self._tls_session[i] = tls.session or self._tls_session[i]
                if sock is not None:
                    self._opened += 1
                    if self.on_close is not None:
                        self.on_close(i, sock.fileno())  # an event loop forgets the fd first
                    try:
                        sock.close()  # close only: never shutdown, a fork sibling may share the socket
                    except OSError:
                        pass
            if link.opening:
                link.opening = False
                spec = link.spec
                if self._resolvers[i] is not None:
                    spec = resolve(self._session, i, self._resolvers[i])  # ask the sentinels first
                    if spec is None:
                        continue
                try:
                    sock, link.connecting = _connect(spec)
                except OSError as exc:
                    self._session.connect_failed(i, exc.strerror or str(exc), monotonic())
                    continue
                self._socks[i] = sock
                self._opened += 1
                self._readers[i] = hiredis.Reader()
                ctx = self._tls_ctx[i]
                if ctx is not None:
                    self._tls[i] = tls = TlsConn(ctx, spec.host, self._tls_session[i])
                    tls.tcp_up = not link.connecting
                    link.connecting = True  # until the handshake is done
            tls = self._tls[i]
            if tls is not None:
                if self._socks[i] is None or not tls.tcp_up:
                    return
                try:
                    data = tls.outgoing(link.out)
                except TlsError as exc:
                    self._session.tls_failed(i, str(exc), monotonic())
                    continue
                if not data:
                    return
            elif not link.out or link.connecting or self._socks[i] is None:
                return
            else:
                data = link.out
            try:
                sent = self._socks[i].send(data)  # type: ignore[union-attr]
            except BlockingIOError:
                return
            except OSError as exc:
                self._session.io_failed(i, exc.strerror or str(exc), exc.errno in _STALE_ERRNOS, monotonic())
                continue
            if tls is not None:
                link.out = tls.sent(sent, link.out)
                if tls.pending:
                    return
                continue  # the handshake may be done, or more plaintext may be queued
            link.out = link.out[sent:]
            if link.out:
                return

    def receive(self, i: int) -> None:
        """Read what arrived on one connection and hand the complete replies to the session."""
        link = self._links[i]
        session = self._session
        try:
            data = self._socks[i].recv(_RECV_SIZE)  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except OSError as exc:
            session.io_failed(i, exc.strerror or str(exc), exc.errno in _STALE_ERRNOS, monotonic())
            self.carry_out(link.index)
            return
        if not data:
            session.io_failed(i, "connection closed by the master", True, monotonic())
            self.carry_out(link.index)
            return
        tls = self._tls[i]
        if tls is not None:
            data = self._decrypt(link, tls, data)
            if not data:
                return
        good = session.received(i, data, 0, len(data), monotonic())
        reader = self._readers[i]
        if good:  # the replies before a bad byte count, as the C twin's fast path counts them
            reader.feed(data if good == len(data) else data[:good])  # type: ignore[union-attr]
            if not self.hand_replies(i, reader, hiredis.ReplyError, monotonic()):
                return
        if good < len(data):
            session.refused(i, monotonic())
            self.carry_out(link.index)
            return
        session.drained(i, reader.has_data(), monotonic())  # type: ignore[union-attr]
        self.carry_out(link.index)

    def _decrypt(self, link, tls: TlsConn, data: bytes) -> bytes:
        """The plaintext in ciphertext ``data`` (every byte of it: nothing stays buffered above the
        socket); advance the handshake and send what it answers. b"" when there is nothing to read
        (the handshake went on, a session ticket came, or the link failed)."""
        try:
            data = tls.feed(data)
        except TlsError as exc:
            self._session.tls_failed(link.index, str(exc), monotonic())
            self.carry_out(link.index)
            return b""
        if link.connecting and tls.done:
            link.connecting = False
        if tls.pending or (link.out and not link.connecting):
            self.carry_out(link.index)
            if self._tls[link.index] is not tls:
                return b""  # the link failed while writing
        return data
