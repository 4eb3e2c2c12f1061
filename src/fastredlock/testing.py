"""A fault kit: test your code (and fastredlock) against masters that fail.

Everything here listens on loopback addresses only and is meant for tests, never for production.

- :class:`FaultProxy` sits between a client and a real master and can add latency, stall, blackhole,
  drop or reset connections (also in the middle of a reply), refuse new connections, and run a hook
  at the moment a request or a reply passes (to kill the master at an exact point of a round).
- :class:`FakeMaster` is a tiny loopback server that answers every lock command with scripted bytes:
  garbage, truncated RESP, errors, wrong types, a 512 MB bulk length, a never-ending array, half a
  reply then a close. :data:`HOSTILE_REPLIES` names the classic ones.
- Real masters: :func:`start_master` / :func:`start_masters` (with or without persistence),
  :func:`paused` (SIGSTOP/SIGCONT), :func:`restart` (kill -9 and start again, at once or after a
  delay: the "delayed restart" operators are told to use), :func:`pause_process` for any process
  (a client paused past its TTL), and :func:`blackhole_address` (an address where a TCP connect never
  completes).

Example::

    from fastredlock import Redlock
    from fastredlock.testing import FaultProxy, start_masters

    with start_masters(3) as masters, FaultProxy(masters[0]) as proxy:
        dlm = Redlock([proxy.url] + masters.urls[1:], io_timeout=0.05)
        proxy.stall()                      # master 0 now answers nothing
        with dlm.lock("job", ttl=5) as lock:
            assert lock.outcomes[0].outcome == "timeout"
"""
from __future__ import annotations

import ipaddress
import os
import selectors
import signal
import socket
import struct
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

import hiredis

from .servers import LocalMaster, LocalMasters
from .servers import start_masters as _start_masters

__all__ = [
    "FaultProxy",
    "FakeMaster",
    "Close",
    "HalfThenClose",
    "Silent",
    "Stream",
    "HOSTILE_REPLIES",
    "PERSISTENCE_ARGS",
    "blackhole_address",
    "pause_process",
    "paused",
    "restart",
    "start_master",
    "start_masters",
]

#: Server flags that make a master keep its keys across a crash: every write is fsynced to the AOF.
PERSISTENCE_ARGS: Tuple[str, ...] = ("--appendonly", "yes", "--appendfsync", "always")

Address = Union[str, Tuple[str, int], Any]


def _check_loopback(host: str) -> str:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"the fault kit listens on loopback addresses only, not {host!r}")
    return host


def _address(target: Address) -> Tuple[str, int]:
    """``(host, port)`` from a tuple, a ``redis://`` URL, or anything with ``host`` and ``port``."""
    if isinstance(target, tuple):
        return str(target[0]), int(target[1])
    if isinstance(target, str):
        parts = urlsplit(target)
        if not parts.hostname or not parts.port:
            raise ValueError(f"expected redis://host:port, got {target!r}")
        return parts.hostname, parts.port
    if hasattr(target, "host") and hasattr(target, "port"):
        return str(target.host), int(target.port)
    raise TypeError(f"expected (host, port), a URL or a master, not {type(target).__name__}")


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN (SO_LINGER 0): the peer sees ECONNRESET."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _LoopbackServer:
    """A listening socket on a loopback address and the background thread that serves it."""

    _thread_name = "server"

    def __init__(self, host: str, port: int) -> None:
        self.host = _check_loopback(host)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._thread: Optional[threading.Thread] = None
        self._running = False

    @property
    def url(self) -> str:
        """``redis://host:port``: give this to the client."""
        return f"redis://{self.host}:{self.port}"

    @property
    def address(self) -> Tuple[str, int]:
        """``(host, port)``."""
        return self.host, self.port

    def start(self):
        """Start serving in a background thread; return ``self``."""
        if self._thread is None:
            self._running = True
            self._thread = threading.Thread(target=self._run, name=f"{self._thread_name}:{self.port}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# The proxy
# ---------------------------------------------------------------------------------------------
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
        :class:`~fastredlock.servers.LocalMaster`.
    :param host: where to listen (a loopback address).
    :param port: port to listen on; 0 picks a free one.

    Faults apply at once to existing and new connections. ``direction`` is ``"up"`` (requests,
    client to master), ``"down"`` (replies) or ``"both"``. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`. Hooks (:meth:`on_request`, :meth:`on_reply`) run in the proxy's
    own thread, so a hook that kills the master acts while the client is mid-round.
    """

    _thread_name = "FaultProxy"

    def __init__(self, upstream: Address, *, host: str = "127.0.0.1", port: int = 0) -> None:
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


# ---------------------------------------------------------------------------------------------
# The fake master
# ---------------------------------------------------------------------------------------------
class Close:
    """Behaviour: close the connection without answering."""

    def __repr__(self) -> str:
        return "Close()"


class Silent:
    """Behaviour: keep the connection open and never answer (a blackholed master)."""

    def __repr__(self) -> str:
        return "Silent()"


class HalfThenClose:
    """Behaviour: send the first half of ``reply`` (or ``keep`` bytes), then close (or reset)."""

    def __init__(self, reply: bytes, keep: Optional[int] = None, reset: bool = False) -> None:
        self.reply = reply
        self.keep = len(reply) // 2 if keep is None else keep
        self.reset = reset

    def __repr__(self) -> str:
        return f"HalfThenClose({self.reply!r}, keep={self.keep}, reset={self.reset})"


class Stream:
    """Behaviour: send ``head``, then ``chunk`` again and again until the client goes away.

    ``limit`` bounds the total sent (bytes), so a client that never stops reading cannot keep the
    fake master busy forever.
    """

    def __init__(self, head: bytes, chunk: bytes, limit: int = 1 << 30) -> None:
        if not chunk:
            raise ValueError("chunk must not be empty")
        self.head = head
        self.chunk = chunk
        self.limit = limit

    def __repr__(self) -> str:
        return f"Stream({self.head[:20]!r}, {self.chunk[:20]!r}, limit={self.limit})"


Behaviour = Union[bytes, Close, Silent, HalfThenClose, Stream]
Script = Union[Behaviour, Callable[[List[bytes]], Behaviour]]

#: Classic hostile answers to a lock command, by name; each is a behaviour :class:`FakeMaster` takes.
HOSTILE_REPLIES: Dict[str, Behaviour] = {
    "garbage": b"\x00\x01garbage, not RESP\xff\r\n",
    "unknown type byte": b"!3\r\nerr\r\n",
    "bad integer": b":12abc\r\n",
    "negative bulk length": b"$-5\r\n",
    "truncated": b"$10\r\nOK",  # a bulk string that never completes
    "error": b"-ERR the fake master refuses\r\n",
    "wrong type": b"$5\r\nhello\r\n",  # a string where +OK/nil or :0/:1 is expected
    "wrong type array": b"*2\r\n:1\r\n:1\r\n",
    "wrong type map": b"%1\r\n+OK\r\n:1\r\n",
    "resp3 double": b",1.0\r\n",
    "huge bulk header": b"$536870912\r\n" + b"x" * 1024,  # 512 MB announced, 1 KB sent
    "huge bulk streamed": Stream(b"$536870912\r\n", b"x" * 65536),
    "huge array header": b"*4294967295\r\n",  # the largest count hiredis accepts
    # 2**27 elements announced (hiredis sizes the list from the header), then elements forever
    "never-ending array": Stream(b"*134217728\r\n", b":1\r\n" * 4096),
    "never-ending nesting": Stream(b"", b"*1\r\n" * 4096),
    "never-ending line": Stream(b"+", b"O" * 65536),
    "two replies": b"+OK\r\n+OK\r\n",
    "half then close": HalfThenClose(b"+OK\r\n"),
    "half then reset": HalfThenClose(b":1\r\n", reset=True),
    "close": Close(),
    "silent": Silent(),
}


def _handshake_reply(args: List[bytes], run_id: bytes) -> Optional[bytes]:
    """Plausible answers to the commands a client sends on a new connection, or ``None``."""
    cmd = args[0].upper() if args else b""
    if cmd in (b"AUTH", b"SELECT", b"CLIENT", b"READONLY"):
        return b"+OK\r\n"
    if cmd == b"PING":
        return b"+PONG\r\n"
    if cmd == b"INFO":  # up for ten days: restart-aware voting trusts it
        body = (b"# Server\r\nredis_version:7.0.0\r\nrun_id:" + run_id
                + b"\r\nuptime_in_seconds:864000\r\n")
        return b"$%d\r\n%s\r\n" % (len(body), body)
    if cmd == b"HELLO":
        return b"-ERR unknown command 'HELLO'\r\n"
    return None


class FakeMaster(_LoopbackServer):
    """A loopback server that speaks just enough RESP to be a hostile master.

    :param script: what to answer to each lock command (``SET``, ``EVALSHA``, ``EVAL``, ...):
        raw bytes (sent as they are), a behaviour (:class:`Close`, :class:`Silent`,
        :class:`HalfThenClose`, :class:`Stream`), or a callable taking the command's arguments
        (a list of bytes) and returning one of those. Handshake commands (``AUTH``, ``SELECT``,
        ``PING``, ``INFO``) get plausible answers unless ``handshake=False``.
    :param host: a loopback address to listen on; ``port`` 0 picks a free port.

    :attr:`commands` records every command received (as lists of bytes). :attr:`script` may be
    replaced at any time; it applies to the next command.
    """

    _thread_name = "FakeMaster"

    def __init__(self, script: Script = b"+OK\r\n", *, host: str = "127.0.0.1", port: int = 0,
                 handshake: bool = True) -> None:
        super().__init__(host, port)
        self.script = script
        self.handshake = handshake
        #: The ``run_id`` its ``INFO`` reports (distinct per fake master, as for real ones).
        self.run_id = os.urandom(20).hex().encode()
        self._socks: List[socket.socket] = []
        self._lock = threading.Lock()
        #: Every command received, in order, as lists of bytes.
        self.commands: List[List[bytes]] = []
        #: Requests that were not valid RESP (the connection was closed on each): should stay 0.
        self.malformed = 0
        #: Connections accepted so far.
        self.connections = 0

    def stop(self) -> None:
        """Close the listening socket and every connection; the handler threads then end."""
        self._running = False
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._join()

    def __repr__(self) -> str:
        return f"<FakeMaster {self.url} script={self.script!r}>"

    def _run(self) -> None:
        """Accept connections; each one is served by a thread of its own."""
        while self._running:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._running:
                    sock.close()
                    return
                self._socks.append(sock)
                self.connections += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _behaviour(self, args: List[bytes]) -> Behaviour:
        if self.handshake:
            hello = _handshake_reply(args, self.run_id)
            if hello is not None:
                return hello
        script = self.script
        return script(args) if callable(script) else script

    def _serve(self, sock: socket.socket) -> None:
        reader = hiredis.Reader()
        try:
            while self._running:
                data = sock.recv(65536)
                if not data:
                    return
                reader.feed(data)
                while True:
                    try:
                        args = reader.gets()
                    except hiredis.ProtocolError:
                        with self._lock:
                            self.malformed += 1
                        return
                    if args is False:
                        break
                    args = list(args) if isinstance(args, list) else [args]
                    with self._lock:
                        self.commands.append(args)
                    if not self._act(sock, self._behaviour(args)):
                        return
        except OSError:
            return
        finally:
            with self._lock:
                if sock in self._socks:
                    self._socks.remove(sock)
            try:
                sock.close()
            except OSError:
                pass

    def _act(self, sock: socket.socket, behaviour: Behaviour) -> bool:
        """Carry out one behaviour; return whether the connection stays open for more commands."""
        if isinstance(behaviour, (bytes, bytearray, memoryview)):
            sock.sendall(behaviour)
            return True
        if isinstance(behaviour, Close):
            return False
        if isinstance(behaviour, Silent):
            while self._running and sock.recv(65536):  # swallow everything, answer nothing
                pass
            return False
        if isinstance(behaviour, HalfThenClose):
            sock.sendall(behaviour.reply[: behaviour.keep])
            time.sleep(0.01)  # let the client read the half before the connection ends
            if behaviour.reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if isinstance(behaviour, Stream):
            sock.sendall(behaviour.head)
            sent = len(behaviour.head)
            while self._running and sent < behaviour.limit:
                sock.sendall(behaviour.chunk)
                sent += len(behaviour.chunk)
            return False
        raise TypeError(f"FakeMaster: unknown behaviour {behaviour!r}")


# ---------------------------------------------------------------------------------------------
# Real masters and processes
# ---------------------------------------------------------------------------------------------
def _master_args(persistent: bool, extra_args: Sequence[str]) -> List[str]:
    return (list(PERSISTENCE_ARGS) if persistent else []) + list(extra_args)


def _wait_loaded(master: LocalMaster, timeout: float = 10.0) -> None:
    """Wait until a (re)started master has loaded its data set: PING answers PONG, not LOADING."""
    deadline = time.monotonic() + timeout
    while master.command("PING") != b"PONG":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{master} is still loading after {timeout}s")
        time.sleep(0.01)


def start_master(persistent: bool = False, extra_args: Sequence[str] = (), binary: Optional[str] = None) -> LocalMaster:
    """Start one local master on a free loopback port and return it (call ``.stop()`` when done).

    With ``persistent=True`` it runs with ``appendonly yes`` and ``appendfsync always``: a kill -9
    followed by :func:`restart` keeps every acknowledged lock. Without, a restart forgets them all.
    The master offers ``.kill()`` (SIGKILL), ``.pause()``/``.resume()`` (SIGSTOP/SIGCONT),
    ``.restart()``, ``.stop()``, ``.url`` and ``.command(...)``.
    """
    return LocalMaster(binary, extra_args=_master_args(persistent, extra_args)).start()


def start_masters(count: int = 5, persistent: bool = False, extra_args: Sequence[str] = (),
                  binary: Optional[str] = None) -> LocalMasters:
    """Start ``count`` local masters; a context manager that stops them all (see :func:`start_master`)."""
    return _start_masters(count, binary=binary, extra_args=_master_args(persistent, extra_args))


def restart(master: LocalMaster, delay: float = 0.0, background: bool = False) -> Optional[threading.Thread]:
    """Kill ``master`` with SIGKILL and start it again on the same port after ``delay`` seconds.

    A master without persistence comes back empty. Operators are told to keep a restarted master
    out of service for longer than the largest TTL in use (a delayed restart): pass that as
    ``delay``. With ``background=True`` the wait and the start happen in a thread, which is returned
    (join it before using the master again); otherwise this call blocks until the master serves
    (a persistent one: until it has loaded its keys back).
    """
    if not delay >= 0:
        raise ValueError(f"delay must be >= 0, got {delay!r}")
    master.kill()

    def start_later() -> None:
        time.sleep(delay)
        master.start()
        _wait_loaded(master)

    if background:
        thread = threading.Thread(target=start_later, name=f"restart:{master.port}", daemon=True)
        thread.start()
        return thread
    start_later()
    return None


@contextmanager
def paused(*masters: LocalMaster) -> Iterator[None]:
    """SIGSTOP the given masters for the duration of the ``with`` block, then SIGCONT them.

    A paused master keeps its TCP connections open (the kernel still accepts new ones) but answers
    nothing: the classic "stalled master".
    """
    for m in masters:
        m.pause()
    try:
        yield
    finally:
        for m in masters:
            m.resume()


@contextmanager
def pause_process(pid: int) -> Iterator[None]:
    """SIGSTOP process ``pid`` for the duration of the ``with`` block, then SIGCONT it.

    Use it to pause a client process past its TTL (as a long GC pause or swap would) and check that
    it finds out when it wakes up.
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextmanager
def blackhole_address(host: str = "127.0.0.1") -> Iterator[Tuple[str, int]]:
    """Yield ``(host, port)`` where a TCP connect never completes, as behind a firewall that drops SYNs.

    A listening socket with a backlog of 0 that never accepts, whose queue is filled by one
    connection of our own: the kernel then drops further SYNs, so connects hang until their timeout.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((_check_loopback(host), 0))
    listener.listen(0)
    filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    filler.settimeout(1.0)
    try:
        filler.connect(listener.getsockname())
        yield listener.getsockname()
    finally:
        filler.close()
        listener.close()
