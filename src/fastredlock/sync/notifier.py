"""The sync client's wake-on-release notifier: one connection per master, one daemon thread.

The channels, the backoff and the wire rules are :mod:`fastredlock.engine.wake`'s (shared with
:mod:`fastredlock.asyncio.notifier`); this module is the thread that reads the connections.
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
from time import monotonic
from typing import Any, List, Optional, Sequence, Set

from ..engine.fork import fork_generation
from ..engine.steps import Waiter
from ..engine.wake import (LINGER, PRELOAD, Backoff, Channels, Partial, channel_of, open_connection, reply_within,
                           subscribe)
from ..io import reader as hiredis
from ..io.sentinel import SentinelError
from ..protocol.handshake import handshake
from ..protocol.resp import encode_command

class _Conn:
    """One master's notification connection (used by the notifier thread only)."""

    __slots__ = ("sock", "reader", "hello", "preload", "subscribed", "partial")

    def __init__(self, sock: socket.socket, hello: int) -> None:
        self.sock = sock
        self.reader = hiredis.Reader()
        #: Handshake replies (AUTH) still to come before the pub/sub replies.
        self.hello = hello
        #: The reply to :data:`PRELOAD` still to come (after the handshake's).
        self.preload = 1
        #: Channels a SUBSCRIBE was sent for (and no UNSUBSCRIBE since).
        self.subscribed: Set[bytes] = set()
        #: The reply begun and not finished (its size and age are bounded).
        self.partial = Partial()


class Notifier:
    """The sync client's notification connections: one per master, one daemon thread, shared by
    every waiting thread of the client. Made by :meth:`fastredlock.Redlock` on first use."""

    def __init__(self, specs: Sequence[Any], connect_timeout: float, courtesy: float) -> None:
        self._specs = tuple(specs)
        self._timeout = max(connect_timeout, 0.05)
        self._lock = threading.Lock()
        self.channels = Channels(courtesy)
        self._conns: List[Optional[_Conn]] = [None] * len(self._specs)
        self._backoff = Backoff(len(self._specs))
        self._thread: Optional[threading.Thread] = None
        self._poke_r, self._poke_w = socket.socketpair()
        self._poke_r.setblocking(False)
        self._poke_w.setblocking(False)
        self._closed = False
        self._generation = fork_generation()

    # --- for the waiters -------------------------------------------------------------------------
    def join(self, key: bytes, deadline: Optional[float] = None) -> Waiter:
        """Listen for releases of ``key``: a :class:`~fastredlock._steps.Waiter` whose event is
        set by a message; ``member``/``score``: its place in the masters' queues (see
        :meth:`Channels.member`; ``deadline``: when it gives up, monotonic)."""
        if self._generation != fork_generation():
            self._after_fork()
        channel = channel_of(key)
        event = threading.Event()
        with self._lock:
            member, score = self.channels.member(deadline)
            if self._closed:
                return Waiter(channel, event, monotonic(), member, score)  # never set: it sleeps its backoff
            new = self.channels.join(channel, event, member)
            if self._thread is None:
                new = True
                self._thread = threading.Thread(target=self._run, name="fastredlock-wake", daemon=True)
                self._thread.start()
        if new:  # (a channel already wanted needs nothing of the thread)
            self._poke()
        return Waiter(channel, event, monotonic(), member, score)

    def leave(self, waiter: Waiter) -> None:
        """``waiter`` returned: stop listening for it."""
        with self._lock:
            self.channels.leave(waiter.channel, waiter.event, monotonic(), waiter.member)
        # No poke when the channel goes idle: the thread looks at the wanted channels at least
        # every LINGER seconds while it listens, so the channel is unsubscribed within two
        # lingers. (A poke here would wake the thread, and it would take the GIL from the waiter
        # that just won, on the way to its critical section: a hand-over's critical path.)

    def released(self, key: bytes, details: Sequence[Any]) -> None:
        """This client released ``key`` in a round with these ``details`` (see :meth:`Channels.released`)."""
        with self._lock:
            self.channels.released(channel_of(key), details, monotonic())

    def spread(self, since: float, deadline: Optional[float]) -> float:
        """See :meth:`Channels.spread`."""
        return self.channels.spread(since, deadline)

    def pause_before(self, key: bytes) -> float:
        """Seconds an acquisition of ``key`` holds back for the waiters this client's release woke."""
        if not self.channels.released_at:
            return 0.0
        with self._lock:
            return self.channels.pause_before(channel_of(key), monotonic())

    def close(self) -> None:
        """Stop the thread and close the connections (their subscriptions end with them)."""
        with self._lock:
            self._closed = True
            thread = self._thread
            if thread is None:
                self._poke_r.close()
                self._poke_w.close()
        if thread is not None:
            self._poke()
            if thread is not threading.current_thread():
                thread.join(2.0)

    # --- the thread ------------------------------------------------------------------------------
    def _poke(self) -> None:
        try:
            self._poke_w.send(b"x")
        except OSError:
            pass  # the buffer is full (a poke is pending anyway) or the notifier is closed

    def _after_fork(self) -> None:
        """A fork child: the parent's thread is gone and its sockets are not ours."""
        self._generation = fork_generation()
        self._lock = threading.Lock()
        channels = self.channels  # cleared in place: the executor holds its released_at
        channels.waiters.clear()
        channels.idle.clear()
        channels.released_at.clear()
        channels.contended.clear()
        channels.members.clear()
        channels.new_ident()
        self._conns = [None] * len(self._specs)
        self._thread = None
        self._poke_r, self._poke_w = socket.socketpair()
        self._poke_r.setblocking(False)
        self._poke_w.setblocking(False)

    def _run(self) -> None:
        try:
            look = True
            while True:
                if look:
                    # The wanted channels changed (a poke), a connection was lost, or a timer is
                    # due: bring the connections in line. (Not after a mere message: the thread
                    # goes back to select at once, and the woken waiter's thread gets the GIL.)
                    now = monotonic()
                    with self._lock:
                        wanted = self.channels.wanted(now)
                        if self._closed or not wanted:
                            # Nothing to listen for: the connections (and their subscriptions)
                            # end, and so does the thread (the next waiter starts another).
                            for i in range(len(self._conns)):
                                self._drop(i)
                            self._thread = None
                            if self._closed:
                                self._poke_r.close()
                                self._poke_w.close()
                            return
                        until = self.channels.next_expiry()
                    for i in range(len(self._specs)):
                        until = self._update_subscription(i, wanted, now, until)
                    socks = [self._poke_r] + [c.sock for c in self._conns if c is not None]
                    look = False
                # At least every LINGER: a channel whose last waiter left (no poke) is noticed.
                timeout = LINGER if until is None else min(LINGER, max(0.0, until - monotonic()))
                readable, _, _ = select.select(socks, [], [], timeout)
                if not readable:
                    look = True
                for sock in readable:
                    if sock is self._poke_r:
                        look = True
                        try:
                            self._poke_r.recv(4096)
                        except OSError:
                            pass
                    elif not self._read(sock):
                        look = True
        except BaseException:
            with self._lock:
                for i in range(len(self._conns)):
                    self._drop(i)
                self._thread = None
            raise

    def _update_subscription(self, i: int, wanted: Set[bytes], now: float, until: Optional[float]) -> Optional[float]:
        """Bring master ``i``'s connection in line with ``wanted``; returns the next time to look."""
        conn = self._conns[i]
        if conn is None:
            if not wanted:
                return until
            retry_at = self._backoff.retry_at[i]
            if now < retry_at:
                return retry_at if until is None else min(until, retry_at)
            try:
                hello, kinds = handshake(self._specs[i], False)
                conn = _Conn(open_connection(self._specs[i], self._timeout, self._backoff.tries[i]), len(kinds))
                conn.sock.sendall(hello + PRELOAD)
            except (OSError, SentinelError):
                return self._failed(i, until)
            self._conns[i] = conn
        elif conn.partial.overdue(now, reply_within(self._timeout)):  # a reply begun, then silence
            self._drop(i)
            return self._failed(i, until)
        add = wanted - conn.subscribed
        remove = conn.subscribed - wanted
        if not add and not remove:
            return until
        try:
            conn.sock.settimeout(self._timeout)
            if add:
                conn.sock.sendall(subscribe(add))
            if remove:
                conn.sock.sendall(encode_command(b"UNSUBSCRIBE", *sorted(remove)))
            conn.sock.settimeout(0)
        except OSError:
            self._drop(i)
            return self._failed(i, until)
        conn.subscribed = (conn.subscribed | add) - remove
        return until

    def _failed(self, i: int, until: Optional[float]) -> Optional[float]:
        """Master ``i`` could not be reached: try again later (the waiters sleep their backoff)."""
        retry_at = self._backoff.failed(i)
        return retry_at if until is None else min(until, retry_at)

    def _drop(self, i: int) -> None:
        conn, self._conns[i] = self._conns[i], None
        if conn is not None:
            try:
                conn.sock.close()
            except OSError:
                pass

    def _read(self, sock: Any) -> bool:
        """Read what ``sock`` has and set the events it names; False if the connection was dropped."""
        i = next(j for j, c in enumerate(self._conns) if c is not None and c.sock is sock)
        conn = self._conns[i]
        assert conn is not None  # (found just above)
        try:
            data = sock.recv(65536)
            while getattr(sock, "pending", None) is not None and sock.pending():
                data += sock.recv(65536)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            return True
        except OSError:
            data = b""
        if not data:  # the master closed it (CLIENT KILL, restart): reconnect later
            self._drop(i)
            self._failed(i, None)
            return False
        conn.reader.feed(data)
        to_set: List[Any] = []
        completed = False
        with self._lock:
            while True:
                try:
                    reply = conn.reader.gets()
                except hiredis.ProtocolError:
                    reply = None
                    self._drop(i)
                    self._failed(i, None)
                    break
                if reply is False:
                    break
                completed = True
                if conn.hello:
                    conn.hello -= 1
                    if isinstance(reply, hiredis.ReplyError):  # AUTH refused: not before a pause
                        self._drop(i)
                        self._failed(i, None)
                        break
                    continue
                if conn.preload:
                    conn.preload = 0
                    continue
                to_set += self.channels.on_reply(reply)
        if self._conns[i] is conn:
            # Guarded like the lock path: a reply over MAX_REPLY bytes, or begun and not whole
            # within reply_within(), drops the connection (its waiters sleep their backoff).
            now = monotonic()
            if (not conn.partial.fed(len(data), completed, conn.reader.has_data(), now)
                    or conn.partial.overdue(now, reply_within(self._timeout))):
                self._drop(i)
                self._failed(i, None)
            elif conn.hello == 0 and completed:  # (a whole reply: not a stream that merely began)
                self._backoff.connected(i)
        for event in to_set:
            event.set()
        return self._conns[i] is conn

