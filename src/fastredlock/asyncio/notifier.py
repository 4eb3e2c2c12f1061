"""Wake on release for the asyncio client: one notification connection per master, on the loop.

The same design as the sync client's (see :mod:`fastredlock.engine.wake`, which says why pub/sub): one
:class:`~fastredlock.engine.wake.Channels` per client says which channels its waiting tasks listen on;
here each master's connection is an ``asyncio.Protocol`` on the client's loop (made when the first
task waits): its ``data_received`` sets the waiters' ``asyncio.Event``, and subscriptions are
written as tasks join and leave. No task runs while nothing is being connected: when no channel is
wanted any more the connections are closed, and one that breaks is made again after a pause (a
timer), meanwhile the waiters sleep their backoff.
"""
from __future__ import annotations

import asyncio
from time import monotonic
from typing import Any, List, Optional, Sequence, Set, Tuple

from ..io import reader as hiredis
from ..engine.steps import Waiter
from ..io.tls import context_for
from ..io.sentinel import SentinelError
from ..engine.wake import PRELOAD, Backoff, Channels, Partial, address_of, channel_of, reply_within, subscribe
from ..protocol.handshake import handshake
from ..protocol.resp import encode_command

__all__ = ["AsyncNotifier"]


class _Conn(asyncio.Protocol):
    """One master's notification connection."""

    def __init__(self, notifier: "AsyncNotifier", i: int, hello: int) -> None:
        self.notifier = notifier
        self.i = i
        self.transport: Any = None
        self.parser = hiredis.Reader()
        #: Handshake replies (AUTH) still to come before the pub/sub replies.
        self.hello = hello
        #: The reply to the script preload still to come (see fastredlock.engine.wake.PRELOAD).
        self.preload = 1
        #: Channels a SUBSCRIBE was written for (and no UNSUBSCRIBE since).
        self.subscribed: Set[bytes] = set()
        #: The reply begun and not finished (its size and age are bounded, see _received).
        self.partial = Partial()
        #: The timer that drops the connection if that reply is not whole in time.
        self.overdue: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.notifier._received(self, data)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if self.overdue is not None:
            self.overdue.cancel()
            self.overdue = None
        self.notifier._lost(self)


class AsyncNotifier:
    """The asyncio client's notification connections (one per master, shared by its waiting tasks)."""

    def __init__(self, specs: Sequence[Any], connect_timeout: float, courtesy: float) -> None:
        self._specs = tuple(specs)
        self._timeout = max(connect_timeout, 0.05)
        self.channels = Channels(courtesy)
        self._conns: List[Optional[_Conn]] = [None] * len(self._specs)
        #: Per master: the task connecting it (None when connected or idle).
        self._connecting: List[Optional[asyncio.Task]] = [None] * len(self._specs)
        self._backoff = Backoff(len(self._specs))
        self._timer: Optional[asyncio.TimerHandle] = None
        self._closed = False

    # --- for the waiting tasks (on the client's loop) ---------------------------------------------
    def join(self, key: bytes, deadline: Optional[float] = None) -> Waiter:
        """Listen for releases of ``key``: a :class:`~fastredlock.engine.steps.Waiter` (see
        :meth:`fastredlock.sync.notifier.Notifier.join`); the event is set by a message."""
        channel = channel_of(key)
        event = asyncio.Event()
        member, score = self.channels.member(deadline)
        if not self._closed:
            self.channels.join(channel, event, member)
            self._update_subscriptions()
        return Waiter(channel, event, monotonic(), member, score)

    def leave(self, waiter: Waiter) -> None:
        """``waiter`` returned: stop listening for it."""
        self.channels.leave(waiter.channel, waiter.event, monotonic(), waiter.member)
        self._update_subscriptions()

    def released(self, key: bytes, details: Sequence[Any]) -> None:
        """This client released ``key`` (see :meth:`fastredlock.engine.wake.Channels.released`)."""
        self.channels.released(channel_of(key), details, monotonic())

    def spread(self, since: float, deadline: Optional[float]) -> float:
        """See :meth:`fastredlock.engine.wake.Channels.spread`."""
        return self.channels.spread(since, deadline)

    def pause_before(self, key: bytes) -> float:
        """Seconds an acquisition of ``key`` holds back for the waiters this client's release woke."""
        return self.channels.pause_before(channel_of(key), monotonic())

    async def aclose(self) -> None:
        """:meth:`close`, and wait until the connecting tasks have ended."""
        tasks = [task for task in self._connecting if task is not None]
        self.close()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Close the connections (their subscriptions end with them); no new one is made."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in self._connecting:
            if task is not None:
                task.cancel()
        for i in range(len(self._conns)):
            self._drop(i)

    # --- the connections -------------------------------------------------------------------------
    def _update_subscriptions(self) -> None:
        """Write the SUBSCRIBE/UNSUBSCRIBE each connection owes, connect the masters that are not
        (unless in their pause), close them all when no channel is wanted; set the next look."""
        if self._closed:
            return
        now = monotonic()
        wanted = self.channels.wanted(now)
        due = self.channels.next_expiry()
        for i, conn in enumerate(self._conns):
            if not wanted:
                self._drop(i)
                continue
            if conn is None:
                if self._connecting[i] is None:
                    if now >= self._backoff.retry_at[i]:
                        self._connecting[i] = asyncio.get_running_loop().create_task(self._connect(i))
                    else:
                        retry_at = self._backoff.retry_at[i]
                        due = retry_at if due is None else min(due, retry_at)
                continue
            add = wanted - conn.subscribed
            remove = conn.subscribed - wanted
            if add:
                conn.transport.write(subscribe(add))
            if remove:
                conn.transport.write(encode_command(b"UNSUBSCRIBE", *sorted(remove)))
            conn.subscribed = (conn.subscribed | add) - remove
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if due is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, due - monotonic()) + 0.001, self._update_subscriptions)

    async def _connect(self, i: int) -> None:
        spec = self._specs[i]
        loop = asyncio.get_running_loop()
        hello, kinds = handshake(spec, False)
        ssl = None if spec.tls is None else context_for(spec.tls)

        def made() -> _Conn:
            return _Conn(self, i, len(kinds))

        try:
            if spec.path is not None:
                opened = loop.create_unix_connection(made, spec.path, ssl=ssl)
            else:
                # (a Sentinel master's address is asked here, blocking the loop for at most the
                # connect timeout, as the lock rounds' own resolution does)
                host, port = address_of(spec, self._backoff.tries[i], self._timeout)
                opened = loop.create_connection(made, host, port, ssl=ssl,
                                                server_hostname=host if ssl is not None else None)
            _, conn = await asyncio.wait_for(opened, self._timeout)
        except (OSError, asyncio.TimeoutError, SentinelError):
            self._connecting[i] = None
            self._failed(i)
            return
        self._connecting[i] = None
        if self._closed:
            conn.transport.close()
            return
        conn.transport.write(hello + PRELOAD)
        self._conns[i] = conn
        self._update_subscriptions()

    def _failed(self, i: int) -> None:
        """Master ``i`` could not be reached or dropped us: try again after a pause."""
        self._backoff.failed(i)
        if not self._closed:
            self._update_subscriptions()

    def _received(self, conn: _Conn, data: bytes) -> None:
        conn.parser.feed(data)
        completed = False
        while True:
            try:
                reply = conn.parser.gets()
            except hiredis.ProtocolError:
                conn.transport.close()
                return
            if reply is False:
                break
            completed = True
            if conn.hello:
                conn.hello -= 1
                if isinstance(reply, hiredis.ReplyError):  # AUTH refused
                    conn.transport.close()
                    return
                if not conn.hello:
                    self._backoff.connected(conn.i)
                continue
            if conn.preload:
                conn.preload = 0
                continue
            for event in self.channels.on_reply(reply):
                event.set()
        # Guarded like the lock path (see fastredlock.engine.wake, "Guards").
        now = monotonic()
        within = reply_within(self._timeout)
        partial = conn.partial
        began = partial.since
        if not partial.fed(len(data), completed, conn.parser.has_data(), now) or partial.overdue(now, within):
            conn.transport.close()
            return
        if partial.size and partial.since != began:  # a reply begun: it must be whole in time
            if conn.overdue is not None:
                conn.overdue.cancel()
            conn.overdue = asyncio.get_running_loop().call_later(within + 0.01, self._check_overdue, conn)

    def _check_overdue(self, conn: _Conn) -> None:
        conn.overdue = None
        if conn.partial.overdue(monotonic(), reply_within(self._timeout)):
            conn.transport.close()

    def _lost(self, conn: _Conn) -> None:
        if self._conns[conn.i] is conn:
            self._conns[conn.i] = None
            if not self._closed and (self.channels.waiters or self.channels.idle):
                self._failed(conn.i)

    def _drop(self, i: int) -> None:
        conn, self._conns[i] = self._conns[i], None
        if conn is not None:
            conn.transport.close()
