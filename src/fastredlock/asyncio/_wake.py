"""Wake on release for the asyncio client: one notification connection per master, on the loop.

The same design as the sync client's (see :mod:`fastredlock._wake`, which says why pub/sub): one
:class:`~fastredlock._wake.Channels` per client says which channels its waiting tasks listen on;
here a task per master keeps that master's connection (made when the first task waits), reads its
messages and sets the waiters' ``asyncio.Event``; subscriptions are written from the loop as tasks
join and leave. A connection that breaks is made again after a pause; meanwhile the waiters sleep
their backoff.
"""
from __future__ import annotations

import asyncio
from time import monotonic
from typing import Any, List, Optional, Sequence, Set, Tuple

import hiredis

from .._tls import context_for
from .._wake import _RECONNECT, Channels, channel_of
from ..protocol.handshake import handshake
from ..protocol.resp import encode_command

__all__ = ["AsyncNotifier"]


class _Conn:
    __slots__ = ("reader", "writer", "parser", "hello", "subscribed")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: int) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = hiredis.Reader()
        #: Handshake replies (AUTH) still to come before the pub/sub replies.
        self.hello = hello
        #: Channels a SUBSCRIBE was written for (and no UNSUBSCRIBE since).
        self.subscribed: Set[bytes] = set()


class AsyncNotifier:
    """The asyncio client's notification connections (one per master, shared by its waiting tasks)."""

    def __init__(self, specs: Sequence[Any], connect_timeout: float, courtesy: float) -> None:
        self._specs = tuple(specs)
        self._timeout = max(connect_timeout, 0.05)
        self.channels = Channels(courtesy)
        self._conns: List[Optional[_Conn]] = [None] * len(self._specs)
        self._tasks: List[Optional[asyncio.Task]] = [None] * len(self._specs)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._closed = False

    # --- for the waiting tasks (on the client's loop) ---------------------------------------------
    def join(self, key: bytes) -> Tuple[bytes, asyncio.Event]:
        """Listen for releases of ``key``: ``(channel, event)``; the event is set by a message."""
        channel = channel_of(key)
        event = asyncio.Event()
        if not self._closed:
            self.channels.join(channel, event)
            self._sync()
        return channel, event

    def leave(self, channel: bytes, event: asyncio.Event) -> None:
        """The waiter of ``event`` returned: stop listening for it."""
        self.channels.leave(channel, event, monotonic())
        self._sync()

    def released(self, key: bytes) -> None:
        """This client released ``key`` (see :meth:`fastredlock._wake.Notifier.released`)."""
        if self.channels.idle or self.channels.waiters:
            self.channels.released(channel_of(key), monotonic())

    def pause_before(self, key: bytes) -> float:
        """Seconds an acquisition of ``key`` holds back for the waiters this client's release woke."""
        return self.channels.pause_before(channel_of(key), monotonic())

    def close(self) -> None:
        """Stop the tasks and close the connections (their subscriptions end with them)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in self._tasks:
            if task is not None:
                task.cancel()
        for i in range(len(self._conns)):
            self._drop(i)

    # --- the connections -------------------------------------------------------------------------
    def _sync(self) -> None:
        """Write the SUBSCRIBE/UNSUBSCRIBE each connection owes; start the tasks of masters not
        connected yet; look again when the next idle channel is due."""
        if self._closed:
            return
        wanted = self.channels.wanted(monotonic())
        for i, conn in enumerate(self._conns):
            if conn is None:
                if wanted and self._tasks[i] is None:
                    self._tasks[i] = asyncio.get_running_loop().create_task(self._serve(i))
                continue
            add = wanted - conn.subscribed
            remove = conn.subscribed - wanted
            if add:
                conn.writer.write(encode_command(b"SUBSCRIBE", *sorted(add)))
            if remove:
                conn.writer.write(encode_command(b"UNSUBSCRIBE", *sorted(remove)))
            conn.subscribed = (conn.subscribed | add) - remove
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self.channels.next_expiry()
        if due is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, due - monotonic()) + 0.001, self._sync)

    async def _connect(self, i: int) -> _Conn:
        spec = self._specs[i]
        ssl = None if spec.tls is None else context_for(spec.tls)
        if spec.path is not None:
            opened = asyncio.open_unix_connection(spec.path, ssl=ssl)
        else:
            opened = asyncio.open_connection(spec.host, spec.port, ssl=ssl,
                                             server_hostname=spec.host if ssl is not None else None)
        reader, writer = await asyncio.wait_for(opened, self._timeout)
        hello, kinds = handshake(spec, False)
        if hello:
            writer.write(hello)
        return _Conn(reader, writer, len(kinds))

    async def _serve(self, i: int) -> None:
        """Keep master ``i``'s connection while any channel is wanted; read its messages."""
        pause = _RECONNECT[0]
        try:
            while not self._closed and (self.channels.waiters or self.channels.idle):
                try:
                    conn = await self._connect(i)
                except (OSError, asyncio.TimeoutError):
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _RECONNECT[1])
                    continue
                self._conns[i] = conn
                self._sync()
                if await self._read(conn):
                    pause = _RECONNECT[0]
                self._drop(i)
                await asyncio.sleep(pause)
                pause = min(pause * 2, _RECONNECT[1])
        finally:
            self._tasks[i] = None
            self._drop(i)

    async def _read(self, conn: _Conn) -> bool:
        """Read ``conn`` until it breaks; True if its handshake had succeeded."""
        while True:
            try:
                data = await conn.reader.read(65536)
            except OSError:
                data = b""
            if not data:  # closed by the master (CLIENT KILL, restart)
                return conn.hello == 0
            conn.parser.feed(data)
            while True:
                try:
                    reply = conn.parser.gets()
                except hiredis.ProtocolError:
                    return False
                if reply is False:
                    break
                if conn.hello:
                    conn.hello -= 1
                    if isinstance(reply, hiredis.ReplyError):  # AUTH refused
                        return False
                    continue
                for event in self.channels.on_reply(reply):
                    event.set()

    def _drop(self, i: int) -> None:
        conn, self._conns[i] = self._conns[i], None
        if conn is not None:
            conn.writer.close()
