"""Wake on release: waiters retry when a lock is freed instead of after their sleep.

Why pub/sub. The release script (:data:`fastredlock.protocol.scripts.RELEASE`) ends, where it
deleted the key and a waiter had marked the name (``<key>:wake``, see below), with
``PUBLISH fastredlock-wake:<key>``: still one script call, one write per master, the same
arguments (the client's cost of a release does not change). The alternatives were worse for Redlock:

* a signal *list* (python-redis-lock's ``BLPOP``) is a write that stays on the master (a key per
  name, which must expire), and ``BLPOP`` blocks a connection per waiter, or pops the signal for one
  waiter of the client only;
* keyspace notifications need ``notify-keyspace-events`` set on every master (a server setting that
  a client should not change, often refused by managed services) and publish every ``del``/``set``
  of the whole keyspace to their subscribers.

Pub/sub leaves nothing on a master: a subscription lives as long as its connection says so, and a
lost message (a connection that broke, a master that restarted) costs a waiter at most one retry
delay, because a waiter never sleeps longer than its backoff.

The client side: one :class:`Channels` per client (which channels its waiters listen on), and one
notifier per client with **one connection per master**, shared by all its waiters: the sync
:class:`~fastredlock.sync.notifier.Notifier` (a daemon thread, made when the first waiter of the client appears) and
:class:`fastredlock.asyncio.notifier.AsyncNotifier` (a task per master on the client's loop). A waiter
joins the channel of its lock after its first failed attempt, waits for a message from *any*
master or its backoff, whichever comes first, and leaves when it returns. A channel is unsubscribed
:data:`LINGER` seconds after its last waiter left (a contender that takes the lock and soon waits
again keeps its subscription instead of paying one per turn); closing the client ends them all.

The wake mark. A release that nobody waits for only deletes (a script of GET and one DEL, the
cheapest owner-checked release Lua allows): it looks for waiters, and publishes, only where a
waiter marked the name, ``<key>:wake`` beside the key (in its slot), which the release's DEL takes
with the key. A queued attempt marks it for as long as its place lasts; a waiter without a place
(a fenced lock's; a plain lock's first pause with ``retry_count``) marks it before each pause (the
plan's ``mark_step``); a release that woke someone or left waiters queued marks it again (which
covers the releaser's courtesy pause too). The lock family's releases, keys that cannot queue and
clusters keep the release that always looks (RELEASE_FULL), as every release of clients from
before the mark does; a waiter of such a client leaves no mark, and this version's releases do not
wake it: it comes back by its backoff.

Turns. A plain lock's waiters queue on the masters (see :mod:`fastredlock.protocol.scripts`,
"Turns"): a release that finds a queue names the waiter whose turn it is on that waiter's client's
turn channel (:attr:`Channels.turn_channel`, subscribed with the others), so one waiter wakes per
release instead of one per client, and it goes at once (no spread: nobody races it). A client that
released a name a waiter heard, or met contention on it within :data:`LINGER`, makes even its first
attempt a queued one: asking again at once, it finds the turn taken and queues behind. Without a
queue (batch releases, the lock family), a message on the name's channel wakes each client's
longest waiting waiter; those spread their retries, and a lock-family releaser holds its next
attempt back for ``courtesy`` seconds, or until it hears the next release. See the README, "Waiting".

Guards. A notification connection is a side channel, but its bytes come from the same masters as
the lock path's, so it is guarded alike (:class:`Partial`): at most :data:`MAX_REPLY` bytes
buffered for one reply, and a reply begun must be whole within :func:`reply_within` seconds; a
master that breaks either rule has its connection dropped (and made again after the reconnect
pause): its waiters lose nothing but that master's wake-ups, and sleep their backoff meanwhile.
"""
from __future__ import annotations

import os
import random
import socket
import time
from time import monotonic
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ..io.sentinel import Resolver
from ..io.tls import context_for
from ..protocol.replies import TURN, WOKE
from ..protocol.resp import MAX_BULK, encode_command
from ..protocol.scripts import ACQUIRE_QUEUED, TURN_PREFIX

__all__ = ["CHANNEL_PREFIX", "COURTESY", "LINGER", "MAX_REPLY", "PRELOAD", "Backoff", "Channels", "Partial",
           "address_of", "channel_of", "open_connection", "reply_within", "subscribe"]

#: Channels are this prefix plus the lock key (the release script builds the same name).
CHANNEL_PREFIX = b"fastredlock-wake:"
_PREFIX_LEN = len(CHANNEL_PREFIX)
#: Seconds a channel stays subscribed after its last waiter left.
LINGER = 0.5
#: Default seconds a client whose release woke waiters holds its next attempt at the name back
#: (it ends earlier when the next release is heard).
COURTESY = 0.01
#: The retries of the waiters a release woke are spread over up to this part of ``courtesy``
#: (the longer a waiter has waited, the sooner it retries).
SPREAD = 0.4
#: First and longest pause before a notifier reconnects to a master it lost, seconds.
_RECONNECT = (0.05, 1.0)
#: Most bytes a notification connection buffers for one reply (pub/sub messages name a channel
#: and a waiter: a few hundred bytes; the lock path's largest bulk is the same limit).
MAX_REPLY = MAX_BULK


def reply_within(connect_timeout: float) -> float:
    """Seconds a reply begun on a notification connection may take to be whole: the connect
    timeout, but at least one second (a message split over two TCP segments must not look hostile
    on a slow network)."""
    return max(connect_timeout, 1.0)


class Partial:
    """The reply a notification connection has begun and not finished: how many bytes were fed
    for it (at most; counted from the read that began it) and since when."""

    __slots__ = ("size", "since")

    def __init__(self) -> None:
        self.size = 0
        self.since = 0.0

    def fed(self, n: int, completed: bool, pending: bool, now: float) -> bool:
        """``n`` bytes were fed; ``completed``: a reply was taken from them; ``pending``: the
        reader holds bytes of a reply not yet whole. False when the connection must be dropped
        (over :data:`MAX_REPLY`)."""
        if not pending:
            self.size = 0
            self.since = 0.0
            return True
        if completed or not self.size:
            self.size = n
            self.since = now
        else:
            self.size += n
        return self.size <= MAX_REPLY

    def overdue(self, now: float, within: float) -> bool:
        """Whether the begun reply has taken longer than ``within`` seconds."""
        return self.size > 0 and now - self.since > within


#: Sent by a notification connection after its handshake: a waiter's queued attempts then find
#: their script in the master's cache (a NOSCRIPT answered after its round was decided cannot be
#: followed by EVAL, so that master's vote would be lost once). Its reply, or error (an ACL user
#: without SCRIPT), is read and dropped.
PRELOAD = encode_command(b"SCRIPT", b"LOAD", ACQUIRE_QUEUED)


def subscribe(channels: Set[bytes]) -> bytes:
    """SUBSCRIBE commands for ``channels``, one per channel: an ACL user allowed the lock channels
    (``&fastredlock-wake:*``) but not the turn channel still gets the former (one command naming a
    channel it may not use is refused whole)."""
    return b"".join(encode_command(b"SUBSCRIBE", channel) for channel in sorted(channels))


def channel_of(key: bytes) -> bytes:
    """The pub/sub channel a release of ``key`` publishes on."""
    return CHANNEL_PREFIX + key


class Channels:
    """The channels one client's waiters listen on: who waits, what stays subscribed, and when a
    releaser owes the woken waiters a courtesy pause. No I/O; the notifier's lock guards it."""

    def __init__(self, courtesy: float) -> None:
        self.courtesy = courtesy
        #: channel -> the events of its waiters (set when a message or a first confirmation arrives).
        self.waiters: Dict[bytes, List[Any]] = {}
        #: channel -> when its last waiter left (unsubscribed :data:`LINGER` later).
        self.idle: Dict[bytes, float] = {}
        #: channel -> when this client last released its lock (live channels only).
        self.released_at: Dict[bytes, float] = {}
        #: lock key -> True while its channel is wanted (its lock met contention here within
        #: LINGER): a plain lock's attempts are then queued (see "Turns"); read by the handles.
        self.contended: Dict[bytes, bool] = {}
        #: A queued waiter's member (see :meth:`join`) -> its event.
        self.members: Dict[bytes, Any] = {}
        #: This client's part of its waiters' members (not secret: masters and subscribers see it).
        self.ident = b""
        #: The channel where releases name this client's waiters whose turn it is.
        self.turn_channel = b""
        self.new_ident()
        self._count = 0

    def new_ident(self) -> None:
        """Draw this client's id (again in a fork child: the parent's waiters are not its own)."""
        self.ident = os.urandom(6).hex().encode()
        self.turn_channel = TURN_PREFIX + self.ident

    def member(self, deadline: Optional[float]) -> Tuple[bytes, bytes]:
        """``(member, score)`` of a new waiter in the masters' queues: ``<client id>.<n>|<deadline
        in ms since the epoch, 0: none>`` and when it began to wait (microseconds since the epoch;
        the wall clock, so that every master orders two waiters alike)."""
        self._count += 1
        wall = time.time()
        last = 0 if deadline is None else int((wall + deadline - monotonic()) * 1000) + 1
        return b"%s.%d|%d" % (self.ident, self._count, last), b"%d" % int(wall * 1e6)

    def join(self, channel: bytes, event: Any, member: Optional[bytes] = None) -> bool:
        """Add a waiter; True if ``channel`` was not wanted before (the notifier must subscribe)."""
        events = self.waiters.get(channel)
        new = events is None and channel not in self.idle
        if events is None:
            events = self.waiters[channel] = []
            self.idle.pop(channel, None)
        events.append(event)
        self.contended[channel[_PREFIX_LEN:]] = True
        if member is not None:
            self.members[member] = event
        return new

    def leave(self, channel: bytes, event: Any, now: float, member: Optional[bytes] = None) -> bool:
        """Remove a waiter; True if it was its channel's last (the channel's linger begins)."""
        if member is not None:
            self.members.pop(member, None)
        events = self.waiters.get(channel)
        if events is None:
            return False
        events.remove(event)
        if not events:
            del self.waiters[channel]
            self.idle[channel] = now
            return True
        return False

    def wanted(self, now: float) -> Set[bytes]:
        """The channels to keep subscribed; forgets those idle for :data:`LINGER`."""
        for channel, since in list(self.idle.items()):
            if now - since >= LINGER:
                del self.idle[channel]
                self.contended.pop(channel[_PREFIX_LEN:], None)
        wanted = set(self.waiters) | set(self.idle)
        if wanted:
            wanted.add(self.turn_channel)
        return wanted

    def next_expiry(self) -> Optional[float]:
        """When the next idle channel is due to be unsubscribed, or None."""
        return min(self.idle.values()) + LINGER if self.idle else None

    def released(self, channel: bytes, details: Sequence[Any], now: float) -> None:
        """This client released the lock of ``channel``; ``details``: the release round's. If a
        master gave the turn to a queued waiter (:data:`TURN`), or said its message reached a
        subscriber (:data:`WOKE`) while this client is not subscribed there itself (else the
        subscriber may be this client: then it would hold back after every release of a name it
        once waited for), the next acquisition here holds back."""
        if TURN in details or (WOKE in details and channel not in self.waiters and channel not in self.idle):
            if len(self.released_at) >= 1024:  # names released and never asked for again
                for name, at in list(self.released_at.items()):
                    if now - at >= self.courtesy:
                        del self.released_at[name]
            self.released_at[channel] = now
        elif self.released_at:
            self.released_at.pop(channel, None)

    def spread(self, since: float, deadline: Optional[float]) -> float:
        """Seconds a waiter that has waited since ``since`` lets pass after a wake-up before it
        retries: a random part of ``courtesy``, smaller the longer it has waited."""
        now = monotonic()
        age = now - since
        c = self.courtesy * SPREAD
        spread = c * random.random() ** (1.0 + age / (c * 8))
        if deadline is not None:
            spread = min(spread, deadline - now)
        return spread

    def pause_before(self, channel: bytes, now: float) -> float:
        """Seconds a fresh acquisition of ``channel``'s lock should hold back (0.0: none)."""
        at = self.released_at.pop(channel, None)
        if at is None:
            return 0.0
        left = at + self.courtesy - now
        return left if left > 0 else 0.0

    def on_reply(self, reply: Any) -> List[Any]:
        """The events to set for one pub/sub reply. A message that names a queued waiter (its
        turn, see "Turns", on this client's turn channel) wakes that waiter, and nobody else (if it
        has left, nobody); one on a lock's channel (no queue there) wakes the channel's longest
        waiting waiter in this client (its others would only race it and each other: they keep
        waiting, for the next message or their backoff). None for a (un)subscribe
        confirmation. (A release in the round trip between a waiter's first failed attempt and
        its SUBSCRIBE is not heard: it costs that waiter one backoff.)"""
        if type(reply) is list and len(reply) == 3 and reply[0] == b"message":
            if reply[1] == self.turn_channel:
                event = self.members.get(reply[2])
                return [] if event is None else [event]
            events = self.waiters.get(reply[1])
            if events:
                return [events[0]]
        return []


def address_of(spec: Any, tries: int, timeout: float) -> Tuple[Any, int]:
    """Where a notification connection to master ``spec`` goes: its address; for a cluster, one of
    its seed nodes (a message published on any node reaches the subscribers of every node),
    the next one after each failure (``tries``); for a Sentinel master, where its sentinels say
    it is now (blocking, at most ``timeout``; :class:`~fastredlock.io.sentinel.SentinelError` if
    none says)."""
    if spec.cluster is not None and spec.host is None:
        seeds = spec.cluster.seeds
        return seeds[tries % len(seeds)]
    if spec.sentinel is not None and spec.host is None:
        return Resolver(spec).ask(timeout)[0]
    return spec.host, spec.port


def open_connection(spec: Any, timeout: float, tries: int = 0) -> socket.socket:
    """A blocking connection to ``spec`` (TLS wrapped when it asks), bounded by ``timeout``."""
    host = None
    if spec.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(spec.path)
        except OSError:
            sock.close()
            raise
    else:
        host, port = address_of(spec, tries, timeout)
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if spec.tls is not None:
        try:
            sock = context_for(spec.tls).wrap_socket(sock, server_hostname=host)
        except OSError:
            sock.close()
            raise
    return sock


class Backoff:
    """When to try each master's notification connection again: a pause that doubles at each
    failure (``_RECONNECT``), and the failures counted (a cluster's next seed node is tried after
    each). Shared by the sync and the asyncio notifier."""

    __slots__ = ("retry_at", "pause", "tries")

    def __init__(self, n: int) -> None:
        self.retry_at = [0.0] * n
        self.pause = [_RECONNECT[0]] * n
        #: Failed connects per master.
        self.tries = [0] * n

    def failed(self, i: int) -> float:
        """Master ``i`` could not be reached or dropped us: when to try again (monotonic)."""
        self.tries[i] += 1
        pause = self.pause[i]
        self.pause[i] = min(pause * 2, _RECONNECT[1])
        self.retry_at[i] = monotonic() + pause
        return self.retry_at[i]

    def connected(self, i: int) -> None:
        """Master ``i`` answered its handshake: the next failure pauses the least again."""
        self.pause[i] = _RECONNECT[0]
