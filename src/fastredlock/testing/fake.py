""":class:`FakeMaster`: a loopback server that answers lock commands with scripted, hostile bytes.

Behaviours beyond raw bytes: :class:`Close`, :class:`Silent`, :class:`HalfThenClose`,
:class:`Stream`. :data:`HOSTILE_REPLIES` names the classic hostile answers.
"""
from __future__ import annotations

import hashlib

import os
import socket
import threading
import time
from typing import Callable, Dict, List, Optional, Union

from fastredlock.io import reader as hiredis  # hiredis, or the pure reader where it is absent

from ..protocol.handshake import PROBE_KEY

SCRIPT_PROBE_SHA = b"0" * 40  # the script probe's (see fastredlock.protocol.handshake.SCRIPT_PROBE)
from .net import HOST, _arm_reset, _LoopbackServer

__all__ = ["FakeMaster", "Close", "HalfThenClose", "Silent", "Stream", "HOSTILE_REPLIES"]

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
    if cmd == b"SCRIPT" and len(args) == 3 and args[1].upper() == b"LOAD":  # the preloaded scripts
        sha = hashlib.sha1(args[2]).hexdigest().encode()
        return b"$40\r\n" + sha + b"\r\n"
    if cmd == b"EVALSHA" and len(args) == 3 and args[1] == SCRIPT_PROBE_SHA:  # may this user run scripts? yes
        return b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
    if len(args) > 1 and args[1] == PROBE_KEY:  # the probes of native commands: a Redis 7.0 has none
        return b"-ERR syntax error\r\n" if cmd == b"SET" else b"-ERR unknown command\r\n"
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

    def __init__(self, script: Script = b"+OK\r\n", *, host: str = HOST, port: int = 0,
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
                _arm_reset(sock)
            return False
        if isinstance(behaviour, Stream):
            sock.sendall(behaviour.head)
            sent = len(behaviour.head)
            while self._running and sent < behaviour.limit:
                sock.sendall(behaviour.chunk)
                sent += len(behaviour.chunk)
            return False
        raise TypeError(f"FakeMaster: unknown behaviour {behaviour!r}")
