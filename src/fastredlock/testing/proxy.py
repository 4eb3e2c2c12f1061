""":class:`FaultProxy`: a loopback TCP proxy in front of one master, with faults switched at any time.

Latency, stall, blackhole, drop or reset connections (also in the middle of a reply), refuse new
connections, and hooks that run as a request or a reply passes (to kill the master at an exact
point of a round). One thread runs a selector loop over every proxied connection.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Tuple

from .net import HOST, Address, _address, _LoopbackServer, _reset

__all__ = ["FaultProxy"]

_UP, _DOWN = 0, 1  # client -> master, master -> client
_DATA, _CLOSE, _RESET = 0, 1, 2
_DIRECTIONS = {"both": (_UP, _DOWN), "up": (_UP,), "down": (_DOWN,), "requests": (_UP,), "replies": (_DOWN,)}


class _Pair:
    """One proxied connection: the client side, the master side and what is in flight each way."""

    __slots__ = ("socks", "pending", "out", "closed")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        # socks[_UP] is read by the UP pipe (the client), socks[_DOWN] by the DOWN pipe (the master);
        # a pipe writes to the other socket.
        self.socks = (client, upstream)
        # per direction: (due, kind, bytes) not delivered yet (latency, stall), oldest first
        self.pending: Tuple[Deque[Tuple[float, int, bytes]], Deque[Tuple[float, int, bytes]]] = (deque(), deque())
        # per direction: bytes accepted for delivery that the destination socket has not taken yet
        self.out = (bytearray(), bytearray())
        self.closed = False


class FaultProxy(_LoopbackServer):
    """A loopback TCP proxy in front of one master, with faults you switch on and off at any time.

    :param upstream: the master: ``(host, port)``, ``"redis://host:port"`` or a
        :class:`~fastredlock.testing.LocalMaster`.
    :param host: where to listen (a loopback address).
    :param port: port to listen on; 0 picks a free one.

    Faults apply at once to existing and new connections. ``direction`` is ``"up"`` (requests,
    client to master), ``"down"`` (replies) or ``"both"``. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`. Hooks (:meth:`on_request`, :meth:`on_reply`) run in the proxy's
    own thread, so a hook that kills the master acts while the client is mid-round.
    """

    _thread_name = "FaultProxy"

    def __init__(self, upstream: Address, *, host: str = HOST, port: int = 0) -> None:
        self.upstream = _address(upstream)
        super().__init__(host, port)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._lock = threading.Lock()
        self._pairs: List[_Pair] = []
        # fault state, guarded by _lock
        self._latency = [0.0, 0.0]
        self._stalled = [False, False]
        self._blackholed = [False, False]
        self._refuse = False
        self._reset_next_reply: Optional[Tuple[Optional[int], bool, float]] = None
        self._hooks: Tuple[List[Callable[[], Any]], List[Callable[[], Any]]] = ([], [])
        self._changed = threading.Condition(self._lock)
        self._calls: Deque[Tuple[Callable[[], None], threading.Event]] = deque()
        #: Connections accepted so far.
        self.connections = 0
        #: Chunks read from clients (requests) and from the master (replies) so far.
        self.requests = 0
        self.replies = 0

    # --- lifecycle ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the thread and close every connection and the listening socket."""
        self._running = False
        self._wake()
        self._join()
        for pair in list(self._pairs):
            self._close_pair(pair, None)
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"<FaultProxy {self.url} -> {self.upstream[0]}:{self.upstream[1]}>"

    # --- faults -------------------------------------------------------------------------------
    def latency(self, seconds: float, direction: str = "down") -> None:
        """Delay every chunk passing in ``direction`` by ``seconds`` (0 removes the delay)."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        with self._lock:
            for d in _DIRECTIONS[direction]:
                self._latency[d] = float(seconds)
        self._wake()

    def stall(self, direction: str = "both") -> None:
        """Hold every byte passing in ``direction`` until :meth:`heal` (like a paused master).

        If the master closes a connection while replies are stalled, the held replies are lost
        and the client's connection is closed: a master that dies never sent them.
        """
        with self._lock:
            for d in _DIRECTIONS[direction]:
                self._stalled[d] = True
        self._wake()

    def blackhole(self, direction: str = "both") -> None:
        """Silently discard every byte passing in ``direction``; connections stay open."""
        with self._lock:
            for d in _DIRECTIONS[direction]:
                self._blackholed[d] = True
        self._wake()

    def refuse(self, on: bool = True) -> None:
        """Reset every new connection at once (as a master that refuses connections would)."""
        with self._lock:
            self._refuse = bool(on)

    def drop(self, reset: bool = False) -> None:
        """Close every current connection now (with an RST when ``reset``); new ones still work."""
        kind = _RESET if reset else _CLOSE

        def close_all() -> None:
            with self._lock:
                pairs = list(self._pairs)
            for pair in pairs:
                self._close_pair(pair, kind)

        self._call(close_all)

    def _call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the proxy thread (which owns the selector) and wait until it ran."""
        if self._thread is None or not self._thread.is_alive() or threading.current_thread() is self._thread:
            fn()
            return
        done = threading.Event()
        self._calls.append((fn, done))
        self._wake()
        done.wait(5)

    def reset_mid_reply(self, keep: Optional[int] = None, reset: bool = True, gap: float = 0.02) -> None:
        """Arm a one-shot fault on the next reply: forward ``keep`` bytes of it, then cut the client off.

        ``keep`` defaults to half the reply. After those bytes, the proxy waits ``gap`` seconds
        (so the client reads them) and closes the client's connection with an RST (``reset=True``)
        or a FIN; the master's side is closed too.
        """
        with self._lock:
            self._reset_next_reply = (keep, reset, gap)

    def on_request(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` once, in the proxy thread, when the next request arrives (before forwarding)."""
        with self._lock:
            self._hooks[_UP].append(fn)

    def on_reply(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` once, in the proxy thread, when the next reply arrives from the master.

        Combined with ``stall("down")`` this places a fault exactly between "the master executed
        the command" and "the client read the answer", e.g. ``proxy.on_reply(master.kill)``.
        """
        with self._lock:
            self._hooks[_DOWN].append(fn)

    def heal(self) -> None:
        """Remove every fault: stalled bytes are delivered now; blackholed bytes stay lost."""
        with self._lock:
            self._latency = [0.0, 0.0]
            self._stalled = [False, False]
            self._blackholed = [False, False]
            self._refuse = False
            self._reset_next_reply = None
            self._hooks[_UP].clear()
            self._hooks[_DOWN].clear()
        self._wake()

    def wait_for(self, what: str, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until ``requests``, ``replies`` or ``connections`` reached ``count``; return whether it did."""
        if what not in ("requests", "replies", "connections"):
            raise ValueError(f"what must be 'requests', 'replies' or 'connections', not {what!r}")
        deadline = time.monotonic() + timeout
        with self._changed:
            while getattr(self, what) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    # --- the loop -----------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        self._sel = sel
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        while self._running:
            timeout = self._next_due()
            for key, mask in sel.select(timeout):
                tag = key.data
                if tag == "accept":
                    self._accept()
                elif tag == "wake":
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                    while self._calls:
                        fn, done = self._calls.popleft()
                        try:
                            fn()
                        finally:
                            done.set()
                else:
                    pair, side = tag
                    if pair.closed:
                        continue
                    if mask & selectors.EVENT_READ:
                        self._read(pair, side)
                    if not pair.closed and mask & selectors.EVENT_WRITE:
                        self._flush(pair, 1 - side)
            self._deliver()
        sel.close()

    def _next_due(self) -> Optional[float]:
        due = None
        with self._lock:
            for pair in self._pairs:
                for d in (_UP, _DOWN):
                    if pair.pending[d] and not self._stalled[d]:
                        t = pair.pending[d][0][0]
                        due = t if due is None else min(due, t)
        if due is None:
            return None
        return max(0.0, due - time.monotonic())

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with self._lock:
                refuse = self._refuse
            if refuse:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=1.0)
            except OSError:
                _reset(client)  # the master is down: the client sees its connection reset
                continue
            for sock in (client, upstream):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, upstream)
            with self._changed:
                self._pairs.append(pair)
                self.connections += 1
                self._changed.notify_all()
            self._sel.register(client, selectors.EVENT_READ, (pair, _UP))
            self._sel.register(upstream, selectors.EVENT_READ, (pair, _DOWN))

    def _read(self, pair: _Pair, d: int) -> None:
        """Read from the socket that feeds direction ``d`` and queue what arrived."""
        try:
            data = pair.socks[d].recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if data:
            with self._lock:
                hooks = list(self._hooks[d])
                self._hooks[d].clear()
            for fn in hooks:
                fn()
            with self._changed:  # counted once the hooks ran, so wait_for() sees their effect
                if d == _UP:
                    self.requests += 1
                else:
                    self.replies += 1
                self._changed.notify_all()
            if pair.closed:  # a hook dropped the connection
                return
        with self._lock:
            latency = self._latency[d]
            stalled = self._stalled[d]
            blackholed = self._blackholed[d]
            cut = self._reset_next_reply if d == _DOWN and data else None
            if cut is not None:
                self._reset_next_reply = None
        pending = pair.pending[d]
        if not data:
            if stalled and d == _DOWN:
                pending.clear()  # a master that died never sent what it held back
                self._close_pair(pair, _CLOSE)
                return
            try:
                self._sel.unregister(pair.socks[d])
            except (KeyError, ValueError):
                pass
            pending.append((now + latency, _CLOSE, b""))
            return
        if blackholed:
            return
        if cut is not None:
            keep, reset, gap = cut
            keep = len(data) // 2 if keep is None else max(0, min(keep, len(data)))
            pending.append((now + latency, _DATA, data[:keep]))
            pending.append((now + latency + gap, _RESET if reset else _CLOSE, b""))
            try:
                self._sel.unregister(pair.socks[d])  # nothing more is read from this master
            except (KeyError, ValueError):
                pass
            return
        pending.append((now + latency, _DATA, data))

    def _deliver(self) -> None:
        now = time.monotonic()
        with self._lock:
            pairs = list(self._pairs)
            stalled = list(self._stalled)
        for pair in pairs:
            for d in (_UP, _DOWN):
                if pair.closed or stalled[d]:
                    continue
                pending = pair.pending[d]
                while pending and pending[0][0] <= now and not pair.closed:
                    _, kind, data = pending[0]
                    if kind == _DATA:
                        pair.out[d].extend(data)
                        pending.popleft()
                        continue
                    if pair.out[d]:
                        break  # flush the bytes before the close
                    pending.popleft()
                    self._close_pair(pair, kind, victim=pair.socks[1 - d])
                if not pair.closed:
                    self._flush(pair, d)

    def _flush(self, pair: _Pair, d: int) -> None:
        """Write what direction ``d`` has for its destination; watch for writability if it is full."""
        out = pair.out[d]
        dst = pair.socks[1 - d]
        if out:
            try:
                sent = dst.send(out)
                del out[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._close_pair(pair, _CLOSE)
                return
        events = 0
        try:
            events = self._sel.get_key(dst).events
        except (KeyError, ValueError):
            pass
        want = (events | selectors.EVENT_WRITE) if out else (events & ~selectors.EVENT_WRITE)
        want |= selectors.EVENT_READ if self._readable(pair, 1 - d) else 0
        try:
            if want and events:
                if want != events:
                    self._sel.modify(dst, want, (pair, 1 - d))
            elif want:
                self._sel.register(dst, want, (pair, 1 - d))
            elif events:
                self._sel.unregister(dst)
        except (KeyError, ValueError, OSError):
            pass

    @staticmethod
    def _readable(pair: _Pair, d: int) -> bool:
        """Whether direction ``d``'s source is still read (no end-of-stream queued for it)."""
        return not any(kind != _DATA for _, kind, _ in pair.pending[d])

    def _close_pair(self, pair: _Pair, kind: Optional[int], victim: Optional[socket.socket] = None) -> None:
        """Close both sockets; with ``_RESET``, ``victim`` (default: both) gets an RST."""
        if pair.closed:
            return
        pair.closed = True
        for sock in pair.socks:
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError, AttributeError):
                pass
            if kind == _RESET and (victim is None or sock is victim):
                _reset(sock)
            else:
                try:
                    sock.close()
                except OSError:
                    pass
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
