"""The pure-Python core: one multiplexed round to all N masters, and the quorum arithmetic.

This is the reference implementation; ``_core.pyx`` does the same in C and must agree with it on
every outcome. A round is: encode the K commands of the operation once, write them to every
master's non-blocking socket in one write, then ``poll`` until the round is decided or each
master's own deadline passed. A new connection first sends its handshake (AUTH, SELECT, INFO) alone
and waits for it to succeed before the commands follow, so a failed login never lets a command run
(one extra round trip, on connect only). Replies are parsed with ``hiredis.Reader``.

**Early decision.** An acquisition (``acquire``, ``acquire_fenced``, ``acquire_many``,
``acquire_all``) stops waiting as soon as every key is decided: a quorum answered OK (validity is
measured at that instant), or so many masters answered anything else that a quorum has become
impossible. ``Core(early=False)`` waits for every master instead (up to its deadline). Releases,
extensions and fence writes wait for every master that is not cooling down; ``release(wait=False)``
(the cleanup of a failed acquisition) only writes. The masters that had not answered when a round
returned are *stragglers*: their outcome is ``PENDING`` and their commands are *owed* replies of
the connection. Everything a round sends is fully written before it returns (or its connection
is closed).

**Owed replies.** A connection keeps, in order, the replies it still owes to rounds that already
returned. The next round on that connection writes its commands behind them and reads them first,
so a late reply is always matched with the request it answers, never read as the answer to a later
one; a release is therefore written on the same connection, after the SET it undoes. When an owed
reply arrives, its round's :class:`Round` is updated in place (its ``PENDING`` outcome becomes
what the master answered); :meth:`Core.settle` waits for them explicitly. A reply still missing
after its deadline makes that outcome ``TIMEOUT`` (the reply is read and dropped when it comes).
A connection whose request timed out is kept open, so the cleanup release queues behind the SET;
it is closed when it breaks, answers garbage, owes more than :data:`MAX_OWED` replies, or its oldest
owed reply is :data:`STALE_AFTER` seconds overdue.

**Master health.** A :class:`Health` object, shared by every core of one client, counts replies,
latency and failures per master. A master that timed out or refused a connection is *cooling down*
for a short, growing time (``cooldown``, doubled at each failure in a row, at most
``max_cooldown``); a reply in time ends it. Acquisitions skip a cooling master (outcome
``SKIPPED``, counted as "no" without waiting). Releases and extensions still reach it, without
waiting for it when it timed out: they are written behind the SETs on its open connection (or
skipped if that connection is closed); a master that refused connections is simply tried again,
which costs no waiting and lets a master that came back be cleaned up. When the cool-down has
passed, the next round probes the master again.

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
import threading
from collections import deque
from time import monotonic
from typing import Callable, Deque, List, Optional, Sequence, Tuple

import hiredis

from . import _outcomes as oc
from ._masters import MasterSpec
from ._scripts import (
    ACQUIRE_ALL, ACQUIRE_ALL_SHA, EXTEND, EXTEND_SHA, FENCE_WRITE, FENCE_WRITE_SHA, FENCED_ACQUIRE, FENCED_ACQUIRE_SHA, RELEASE,
    RELEASE_MANY, RELEASE_MANY_SHA, RELEASE_SHA,
)

__all__ = ["Core", "Health", "Round", "encode_command"]

KIND_SET = 0  # reply +OK means acquired, nil means taken
KIND_SCRIPT = 1  # reply :1 means done, :0 means not the owner
KIND_FENCED = 2  # reply :n >= 0 means acquired with counter n, :-1 means taken
KIND_SCRIPT_ACQUIRE = 3  # like KIND_SCRIPT, but an acquisition: restart-aware voting applies
KIND_BITS = 4  # one script for K keys, a bulk reply of K characters: '1' done, '0' not the owner

_HELLO_AUTH = 0
_HELLO_SELECT = 1
_HELLO_INFO = 2

if hasattr(select, "poll"):
    _POLLIN = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
    _POLLOUT = select.POLLOUT
    _new_poller = select.poll
else:  # Windows: no poll(2); select() over the same register/modify/poll interface
    _POLLIN, _POLLOUT = 1, 4

    class _SelectPoller:
        """The part of ``select.poll``'s interface the round uses, on top of ``select.select``."""

        def __init__(self) -> None:
            self._events: "dict[int, int]" = {}

        def register(self, fd: int, events: int) -> None:
            self._events[fd] = events

        modify = register

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
_RECV_SIZE = 65536
#: Largest bulk reply accepted (``INFO server`` is a few KB; lock replies are a few bytes). A master
#: announcing more is hostile or confused: it is cut off at the header, before anything is buffered.
MAX_BULK = 1 << 20
#: Longest status/error/integer line accepted.
MAX_LINE = 1 << 16
_REPLY_TYPES = frozenset(b"+-:$")
#: Stale-connection errors after which a reused connection is reopened and the command resent once.
_STALE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN})
#: A connection whose oldest owed reply is this many seconds past its deadline is closed.
STALE_AFTER = 1.0
#: A connection that owes more replies than this is closed (a master silent under a heavy load).
MAX_OWED = 4096

#: Default first cool-down of a master that timed out or refused a connection, seconds.
COOLDOWN = 0.1
#: Default longest cool-down, seconds.
MAX_COOLDOWN = 5.0


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

    @property
    def valid_until(self) -> float:
        """Monotonic time when the validity ends: ``started + elapsed + validity`` (computed here only)."""
        return self.started + self.elapsed + self.validity

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


class Health:
    """Per-master health and counters, shared by every core of one client (its pool).

    Counts, per master, the replies and their latency and each kind of failure (the fields of
    :data:`fastredlock._outcomes.STAT_FIELDS`). A master that timed out, or refused (or failed) a
    connection, starts a cool-down of ``cooldown`` seconds, doubled at each failure in a row up to
    ``max_cooldown``; a reply in time ends it. While a master cools down the cores skip it in
    acquisitions and do not wait for it elsewhere; once the cool-down has passed the next round
    probes it. ``cooldown=0`` keeps the counters but never skips a master. Thread-safe.
    """

    def __init__(self, n: int, cooldown: float = 0.0, max_cooldown: float = MAX_COOLDOWN) -> None:
        self.n = n
        self.cooldown = float(cooldown)
        self.max_cooldown = max(float(max_cooldown), self.cooldown)
        #: How many masters have a cool-down set (possibly passed, until a reply ends it).
        self.n_cooling = 0
        self._lock = threading.Lock()
        self._until = [0.0] * n
        self._strikes = [0] * n
        self._why: List[Optional[str]] = [None] * n
        self._last: List[Optional[str]] = [None] * n
        self._timed_out = [False] * n
        self._counts = [[0] * len(oc.COUNTERS) for _ in range(n)]
        self._lat_sum = [0.0] * n
        self._lat_max = [0.0] * n

    def modes(self, now: float) -> Optional[List[int]]:
        """Per master at ``now``: 0 healthy, 1 cooling down after a refused or failed connection,
        2 cooling down after a timeout (None when no master has a cool-down set)."""
        if not self.n_cooling:
            return None
        return [(2 if timed_out else 1) if until > now else 0 for until, timed_out in zip(self._until, self._timed_out)]

    def why(self, i: int) -> str:
        """Why master ``i`` is skipped: the detail of its ``SKIPPED`` outcome."""
        return self._why[i] or "cooling down"

    def answered(self, i: int) -> None:
        """Master ``i`` sent a reply in time: count it, and end its cool-down."""
        with self._lock:
            self._counts[i][oc.C_REPLIES] += 1
            if self._strikes[i]:
                self._strikes[i] = 0
                self._why[i] = None
                if self._until[i]:
                    self._until[i] = 0.0
                    self.n_cooling -= 1

    def timed(self, i: int, latency: float) -> None:
        """Master ``i`` answered all of a round's commands ``latency`` seconds after the round began."""
        with self._lock:
            self._counts[i][oc.C_TIMED] += 1
            self._lat_sum[i] += latency
            if latency > self._lat_max[i]:
                self._lat_max[i] = latency

    def after_fork(self) -> None:
        """In a fork child: a lock held by a parent thread at the fork would never be released."""
        self._lock = threading.Lock()

    def count(self, i: int, counter: int) -> None:
        """Count one event of ``counter`` (an index of :data:`~fastredlock._outcomes.COUNTERS`)."""
        with self._lock:
            self._counts[i][counter] += 1

    def failed(self, i: int, counter: int, what: str, now: float, strike: bool) -> None:
        """Master ``i`` failed (``counter``, described by ``what``); ``strike``: start a cool-down."""
        with self._lock:
            self._counts[i][counter] += 1
            self._last[i] = what
            if not strike or self._until[i] > now:
                return  # not a health failure, or already cooling down: one failure per cool-down
            self._strikes[i] += 1
            if self.cooldown <= 0.0:
                return
            strikes = self._strikes[i]
            pause = min(self.cooldown * 2.0 ** min(strikes - 1, 62), self.max_cooldown)
            if not self._until[i]:
                self.n_cooling += 1
            self._until[i] = now + pause
            self._timed_out[i] = counter == oc.C_TIMEOUTS
            self._why[i] = f"cooling down after {strikes} failure{'s' if strikes > 1 else ''} in a row (last: {what})"

    def snapshot(self, now: float) -> List[Tuple]:
        """Per master: the counters, mean and max latency, cool-down left, failures in a row, last failure."""
        with self._lock:
            out = []
            for i in range(self.n):
                counts = self._counts[i]
                timed = counts[oc.C_TIMED]
                out.append((
                    *counts,
                    self._lat_sum[i] / timed if timed else 0.0,
                    self._lat_max[i],
                    max(0.0, self._until[i] - now) if self._until[i] else 0.0,
                    self._strikes[i],
                    self._last[i],
                ))
            return out


class _Owed:
    """A reply a connection still owes to a round that already returned."""

    __slots__ = ("kind", "deadline", "sink", "retried", "expired")

    def __init__(self, kind: int, deadline: float, sink: Optional["Round"], retried: bool) -> None:
        self.kind = kind
        self.deadline = deadline
        #: The Round whose outcome for this master waits for the reply (None: outcome already final).
        self.sink = sink
        self.retried = retried
        #: The deadline passed before the reply came: its outcome is TIMEOUT, the reply is dropped.
        self.expired = False


class _Conn:
    """One master's connection, the replies it still owes, and its state within the current round."""

    __slots__ = (
        "spec", "sock", "fd", "reader", "hello", "hello_kinds", "up_since", "run_id", "restarts",
        "g_type", "g_line", "g_header", "g_skip", "owed",
        # per-round state
        "out", "skip", "expect", "deadline", "connecting", "reused", "retried", "got_data",
        "fallback_sent", "waited", "best_effort", "payload", "use_eval",
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
        #: Replies owed to rounds that already returned, in the order they will arrive.
        self.owed: Deque[_Owed] = deque()
        self.out = b""
        self.skip = -1
        self.expect: Deque[int] = deque()
        self.deadline = 0.0
        self.connecting = False
        self.reused = False
        self.retried = False
        self.got_data = False
        self.fallback_sent = 0
        #: Whether the round waits for this master's replies (False: cooling down, or not waiting).
        self.waited = False
        #: Cooling down after a timeout, in a release or extension: written to if that needs no
        #: waiting (the connection is open and takes the bytes), never waited for.
        self.best_effort = False
        #: What this round sends on this connection (EVALSHA, or EVAL where NOSCRIPT cannot be handled).
        self.payload = b""
        #: An owed reply said NOSCRIPT (too late for EVAL): the next script round sends EVAL here.
        self.use_eval = False
        self.g_type = 0
        self.g_line = 0
        self.g_header = b""
        self.g_skip = 0

    def unsent(self) -> bool:
        """Whether this round's commands are not all written yet (connecting, handshake, partial write)."""
        return bool(self.out) or self.skip >= 0 or self.connecting


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
        self.skip = -1


class _Ctx:
    """The state of one round in progress (or of a settle: no commands of its own)."""

    __slots__ = (
        "k", "rows", "kind", "payload", "fallbacks", "outcomes", "details", "values", "poller", "by_fd",
        "started", "io_deadline", "acquisition", "wait", "early", "modes", "oks", "bad",
        "undecided", "decided_at", "eval_payload",
    )

    def __init__(self, k: int, kind: int, rows: int) -> None:
        #: Commands sent to each master, and outcome rows (keys): the same, but for KIND_BITS
        #: where one command answers for every row.
        self.k = k
        self.rows = rows
        self.kind = kind
        self.payload = b""
        self.fallbacks: Optional[List[bytes]] = None
        self.outcomes: List[List[int]] = []
        self.details: List[List[Optional[str]]] = []
        self.values: Optional[List[List[Optional[int]]]] = None
        self.poller = _new_poller()
        self.by_fd: dict = {}
        self.started = 0.0
        self.io_deadline = 0.0
        self.acquisition = kind != KIND_SCRIPT and kind != KIND_BITS
        self.wait = True
        self.early = False
        self.modes: Optional[List[int]] = None
        self.eval_payload: Optional[bytes] = None
        self.oks: List[int] = []
        self.bad: List[int] = []
        self.undecided = 0
        self.decided_at: Optional[float] = None


def _set_outcome(rnd: Round, i: int, code: int, detail: Optional[str], value: Optional[int]) -> None:
    """Fill in master ``i``'s PENDING outcome of a round that already returned."""
    outcomes = list(rnd.outcomes)
    if outcomes[i] != oc.PENDING:
        return
    outcomes[i] = code
    rnd.outcomes = tuple(outcomes)
    if code == oc.OK:
        rnd.successes += 1
    if detail is not None:
        details = list(rnd.details) if rnd.details is not None else [None] * len(outcomes)
        details[i] = detail
        rnd.details = tuple(details)
    if value is not None and rnd.values is not None:
        values = list(rnd.values)
        values[i] = value
        rnd.values = tuple(values)


def _settle_sink(sink: object, i: int, code: int, detail: Optional[str], value: Optional[int]) -> None:
    """Fill in master ``i``'s PENDING outcome of an owed reply's round(s) (a KIND_BITS reply answers
    for a list of rounds)."""
    if sink is None:
        return
    if isinstance(sink, list):
        for rnd in sink:
            _set_outcome(rnd, i, code, detail, value)
    else:
        _set_outcome(sink, i, code, detail, value)  # type: ignore[arg-type]


def _bits(reply: object, rows: int) -> Optional[List[int]]:
    """The per-key outcomes of a RELEASE_MANY reply (``b"1101..."``), or None if it is not one."""
    if not isinstance(reply, bytes) or len(reply) != rows or reply.strip(b"01"):
        return None
    return [oc.OK if c == 49 else oc.NO for c in reply]


def _what(code: int, detail: Optional[str]) -> str:
    name = oc.NAMES.get(code, str(code))
    return f"{name} ({detail})" if detail else name


class Core:
    """N connections and the round that drives them. Not thread-safe; see the module docstring."""

    def __init__(
        self,
        masters: Sequence[MasterSpec],
        io_timeout: float,
        connect_timeout: float,
        drift_factor: float,
        restart_aware: bool = False,
        health: Optional[Health] = None,
        early: bool = True,
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
        #: The health of the masters, shared with the other cores of the client.
        self.health = health if health is not None else Health(self.n)
        #: Whether acquisitions return as soon as every key is decided (see the module docstring).
        self.early = bool(early)

    # --- operations on one key ------------------------------------------------------------
    def acquire(self, key: bytes, token: bytes, ttl_ms: int) -> Round:
        """``SET key token NX PX ttl_ms`` on all masters in one round."""
        cmd = encode_command(b"SET", key, token, b"NX", b"PX", b"%d" % ttl_ms)
        return self._round([cmd], None, KIND_SET, (ttl_ms,))[0]

    def release(self, key: bytes, token: bytes, wait: bool = True) -> Round:
        """Owner-checked delete on all masters; ``successes`` counts masters where the key was ours.

        ``wait=False`` writes the release and returns without waiting for any answer (the cleanup
        of a failed acquisition: it only has to follow the SET on each connection).
        """
        return self.release_many([key], [token], wait)[0]

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
        """``SET keys[i] tokens[i] NX PX ttl_ms`` for every i, in one round (one timing window).

        With early decision the round returns once every key is decided; validity is measured at
        that instant for all of them.
        """
        ttl = b"%d" % ttl_ms
        cmds = [encode_command(b"SET", k, t, b"NX", b"PX", ttl) for k, t in zip(keys, tokens)]
        return self._round(cmds, None, KIND_SET, (ttl_ms,) * len(cmds))

    def acquire_all(self, keys: Sequence[bytes], token: bytes, ttl_ms: int) -> Round:
        """Set every key to ``token`` on each master, or none of them there (one script per master)."""
        args = (b"%d" % len(keys), *keys, token, b"%d" % ttl_ms)
        cmd = encode_command(b"EVALSHA", ACQUIRE_ALL_SHA, *args)
        fallback = encode_command(b"EVAL", ACQUIRE_ALL, *args)
        return self._round([cmd], [fallback], KIND_SCRIPT_ACQUIRE, (ttl_ms,))[0]

    def release_many(self, keys: Sequence[bytes], tokens: Sequence[bytes], wait: bool = True) -> List[Round]:
        """Owner-checked delete of every ``keys[i]`` holding ``tokens[i]``, in one round.

        ``wait=False``: write and return at once (see :meth:`release`); every outcome is PENDING.
        Two keys or more go to each master in one script call (``RELEASE_MANY``), far cheaper for
        the master than one call per key.
        """
        k = len(keys)
        if k < 2:
            cmds = [encode_command(b"EVALSHA", RELEASE_SHA, b"1", k, t) for k, t in zip(keys, tokens)]
            fallbacks = [encode_command(b"EVAL", RELEASE, b"1", k, t) for k, t in zip(keys, tokens)]
            return self._round(cmds, fallbacks, KIND_SCRIPT, (0,) * len(cmds), wait)
        args = (b"%d" % k, *keys, *tokens)
        cmd = encode_command(b"EVALSHA", RELEASE_MANY_SHA, *args)
        fallback = encode_command(b"EVAL", RELEASE_MANY, *args)
        return self._round([cmd], [fallback], KIND_BITS, (0,) * k, wait)

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

    @property
    def owed(self) -> int:
        """How many replies the connections still owe to rounds that already returned."""
        return sum(len(c.owed) for c in self._conns)

    @property
    def pending(self) -> int:
        """How many of those would still fill in a PENDING outcome (not yet past their deadline)."""
        return sum(1 for c in self._conns for e in c.owed if e.sink is not None)

    def settle(self, timeout: Optional[float] = None, until: Optional[Callable[[], bool]] = None) -> None:
        """Read the replies owed by earlier rounds until each arrived or its deadline passed.

        Their rounds' PENDING outcomes are filled in (TIMEOUT for a reply that missed its deadline).
        ``timeout`` bounds the wait (seconds); by default it is bounded by the owed deadlines.
        ``until``: a callable; return as soon as it returns true (checked before each wait).
        """
        ctx = _Ctx(0, KIND_SCRIPT, 0)
        conns = self._conns
        end = None if timeout is None else monotonic() + timeout
        while True:
            if until is not None and until():
                break
            now = monotonic()
            first = None
            for i, conn in enumerate(conns):
                for entry in conn.owed:
                    if entry.sink is not None and (first is None or entry.deadline < first):
                        first = entry.deadline
                if conn.owed and conn.sock is not None and conn.fd not in ctx.by_fd:
                    ctx.by_fd[conn.fd] = i
                    ctx.poller.register(conn.fd, _POLLIN)
            if first is None:
                break
            due = first if end is None else min(first, end)
            if due <= now:
                for i, conn in enumerate(conns):
                    if conn.owed:
                        self._tidy(ctx, i, conn, now)
                if end is not None and end <= now:
                    break
                continue
            for fd, _ev in ctx.poller.poll((due - now) * 1000.0 + 0.5):
                i = ctx.by_fd.get(fd)
                if i is not None:
                    self._readable(ctx, i)

    def close(self) -> None:
        """Close every connection; the core reconnects lazily if used again."""
        for i, conn in enumerate(self._conns):
            self._drop_owed(i, conn, oc.CONN_ERROR, "the connection was closed before the reply")
            conn.close()

    # --- the round ------------------------------------------------------------------------------
    def _round(
        self, cmds: List[bytes], fallbacks: Optional[List[bytes]], kind: int, ttls_ms: Sequence[int],
        wait: bool = True,
    ) -> List[Round]:
        """Run ``cmds`` on every master in one write each; ``ttls_ms[j]`` > 0 asks for validity of j."""
        n = self.n
        k = len(cmds)
        rows = len(ttls_ms)
        ctx = _Ctx(k, kind, rows)
        ctx.payload = cmds[0] if k == 1 else b"".join(cmds)
        ctx.fallbacks = fallbacks
        ctx.outcomes = [[oc.PENDING] * n for _ in range(rows)]
        ctx.details = [[None] * n for _ in range(rows)]
        if kind == KIND_FENCED:
            ctx.values = [[None] * n for _ in range(rows)]
        ctx.wait = wait
        ctx.early = wait and self.early and ctx.acquisition
        conns = self._conns
        ctx.started = monotonic()
        ctx.io_deadline = ctx.started + self._io_timeout
        fresh_deadline = ctx.io_deadline + self._connect_timeout
        ctx.modes = self.health.modes(ctx.started)
        if ctx.early:
            ctx.oks = [0] * rows
            ctx.bad = [0] * rows
            ctx.undecided = rows
        elif not wait:
            ctx.decided_at = ctx.started  # nothing to wait for but the writes
        for i in range(n):
            conns[i].retried = False
            conns[i].fallback_sent = 0
            self._start(ctx, i, fresh_deadline)
        self._run(ctx)
        return self._finish(ctx, ttls_ms)

    def _record_cmd(self, ctx: _Ctx, j: int, i: int, code: int, detail: Optional[str]) -> None:
        """Set master ``i``'s outcome of every row that command ``j`` answers for."""
        if ctx.kind == KIND_BITS:
            for row in range(ctx.rows):
                self._record(ctx, row, i, code, detail)
        else:
            self._record(ctx, j, i, code, detail)

    def _record(self, ctx: _Ctx, j: int, i: int, code: int, detail: Optional[str], value: Optional[int] = None) -> None:
        """Set master ``i``'s outcome of row ``j``; decide the round early when it can be."""
        ctx.outcomes[j][i] = code
        if detail is not None:
            ctx.details[j][i] = detail
        if value is not None and ctx.values is not None:
            ctx.values[j][i] = value
        if ctx.early and ctx.decided_at is None:
            if code == oc.OK:
                ctx.oks[j] += 1
                if ctx.oks[j] == self.quorum:
                    ctx.undecided -= 1
            else:
                ctx.bad[j] += 1
                if ctx.bad[j] == self.n - self.quorum + 1:
                    ctx.undecided -= 1
            if ctx.undecided == 0:
                ctx.decided_at = monotonic()

    def _run(self, ctx: _Ctx) -> None:
        """Poll until the round is decided (or every waited master answered) and everything is written."""
        conns = self._conns
        swept = -1.0
        while ctx.by_fd:
            now = monotonic()
            first = None
            for i in ctx.by_fd.values():
                conn = conns[i]
                if (conn.unsent() and not conn.best_effort) or (conn.waited and ctx.decided_at is None):
                    if first is None or conn.deadline < first:
                        first = conn.deadline
            if first is None:
                return
            if first > now:
                wait_ms = (first - now) * 1000.0 + 0.5
            elif swept != first:
                # A deadline passed: first read what already arrived (this thread may have been
                # descheduled past it), then call late only what is still missing.
                swept = first
                wait_ms = 0.0
            else:
                for i in list(ctx.by_fd.values()):
                    conn = conns[i]
                    if conn.deadline <= now and (
                        (conn.unsent() and not conn.best_effort) or (conn.waited and ctx.decided_at is None)
                    ):
                        self._timeout(ctx, i, now)
                continue
            for fd, ev in ctx.poller.poll(wait_ms):
                i = ctx.by_fd.get(fd)
                if i is None:
                    continue
                conn = conns[i]
                if ev & _POLLOUT:
                    if conn.connecting:
                        err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
                        if err:
                            self._fail(ctx, i, oc.CONN_ERROR, os.strerror(err), oc.C_CONNECT_ERRORS, True)
                            continue
                        conn.connecting = False
                    if not self._write(ctx, i):
                        continue
                    if not conn.out:
                        ctx.poller.modify(fd, _POLLIN)
                if ev & _POLLIN:
                    self._readable(ctx, i)

    def _finish(self, ctx: _Ctx, ttls_ms: Sequence[int]) -> List[Round]:
        """Build the Rounds; the replies still missing become owed replies of their connections."""
        for i in list(ctx.by_fd.values()):
            conn = self._conns[i]
            if conn.best_effort and conn.unsent():  # its socket buffer is full: a stalled master
                self._fail(ctx, i, oc.TIMEOUT, "not written: the connection does not take more", oc.C_TIMEOUTS, True)
        end = monotonic()
        elapsed = (ctx.decided_at if ctx.decided_at is not None else end) - ctx.started
        rounds = []
        for j in range(ctx.rows):
            row = ctx.outcomes[j]
            successes = row.count(oc.OK)
            ttl_ms = ttls_ms[j]
            if ttl_ms:
                validity_ms = ttl_ms - elapsed * 1000.0 - (ttl_ms * self._drift_factor + 2.0)
                ok = successes >= self.quorum and validity_ms > 0
                validity = validity_ms / 1000.0
            else:
                ok = successes >= self.quorum
                validity = 0.0
            drow = ctx.details[j]
            rounds.append(Round(
                ok, successes, validity, elapsed, ctx.started, tuple(row),
                tuple(drow) if any(d is not None for d in drow) else None,
                tuple(ctx.values[j]) if ctx.values is not None else None,
            ))
        for i, conn in enumerate(self._conns):
            if conn.expect:
                for j in conn.expect:
                    sink = rounds if ctx.kind == KIND_BITS else rounds[j]
                    conn.owed.append(_Owed(ctx.kind, conn.deadline, sink, conn.retried))
                conn.expect.clear()
            if conn.owed:
                self._tidy(ctx, i, conn, end)
        return rounds

    def _start(self, ctx: _Ctx, i: int, deadline: float) -> None:
        """Open the connection if needed, queue the commands, write what the socket takes."""
        conn = self._conns[i]
        k = ctx.k
        conn.expect = deque(range(k))
        conn.got_data = False
        mode = ctx.modes[i] if ctx.modes is not None else 0
        if mode and (ctx.acquisition or (mode == 2 and conn.sock is None)):
            # Cooling down: acquisitions do not ask it. A release or an extension goes to a master
            # that refused connections (it may be back: a refusal costs no waiting), and to one
            # that timed out if its connection is open (behind the SETs there), without waiting.
            why = self.health.why(i)
            conn.expect.clear()
            for j in range(ctx.rows):
                self._record(ctx, j, i, oc.SKIPPED, why)
            self.health.count(i, oc.C_SKIPPED)
            return
        conn.best_effort = mode == 2
        conn.waited = ctx.wait and not conn.best_effort
        if ctx.fallbacks is None or (conn.waited and not conn.use_eval):
            conn.payload = ctx.payload
        else:
            # Nobody waits for this answer, so a NOSCRIPT could not be answered with EVAL; or the
            # master said NOSCRIPT too late last time (its script cache is empty): send EVAL.
            if ctx.eval_payload is None:
                ctx.eval_payload = b"".join(ctx.fallbacks)
            conn.payload = ctx.eval_payload
            conn.use_eval = False
        if conn.sock is None:
            try:
                conn.open()
            except OSError as exc:
                self._fail(ctx, i, oc.CONN_ERROR, exc.strerror or str(exc), oc.C_CONNECT_ERRORS, True)
                return
            # The handshake goes first, alone: if AUTH, SELECT or INFO fails, no command of ours
            # may have run (on the wrong db, or without the checks restart-aware voting needs).
            if conn.hello_kinds:
                conn.out = conn.hello
                conn.skip = 0
            else:
                conn.out = conn.payload
                conn.skip = -1
            conn.reused = False
            conn.deadline = deadline
        else:
            conn.out = conn.payload
            conn.skip = -1
            conn.reused = True
            conn.deadline = ctx.io_deadline
        if not conn.connecting and not self._write(ctx, i):
            return
        ctx.by_fd[conn.fd] = i
        ctx.poller.register(conn.fd, _POLLIN | (_POLLOUT if conn.out else 0))

    def _unregister(self, ctx: _Ctx, conn: _Conn) -> None:
        if conn.fd in ctx.by_fd:
            ctx.poller.unregister(conn.fd)
            del ctx.by_fd[conn.fd]

    @staticmethod
    def _drop_owed(i: int, conn: _Conn, code: int, detail: Optional[str]) -> None:
        """Forget the owed replies (the connection is closing): PENDING outcomes become ``code``."""
        for entry in conn.owed:
            if entry.sink is not None:
                _settle_sink(entry.sink, i, code, detail, None)
        conn.owed.clear()

    def _fail(self, ctx: _Ctx, i: int, code: int, detail: Optional[str], counter: int, strike: bool) -> None:
        """Close this master's connection; every reply it still owes or has not sent gets ``code``."""
        conn = self._conns[i]
        self._unregister(ctx, conn)
        conn.close()
        for j in conn.expect:
            self._record_cmd(ctx, j, i, code, detail)
        conn.expect.clear()
        self._drop_owed(i, conn, code, detail)
        self.health.failed(i, counter, _what(code, detail), monotonic(), strike)

    def _timeout(self, ctx: _Ctx, i: int, now: float) -> None:
        """The master's deadline passed. Keep a connection that carries all our commands open."""
        conn = self._conns[i]
        if conn.unsent():
            # Not all of this round's commands went out: nothing would keep their order; drop it.
            self._fail(ctx, i, oc.TIMEOUT, None, oc.C_TIMEOUTS, True)
            return
        self._unregister(ctx, conn)
        for entry in conn.owed:
            if not entry.expired:
                entry.expired = True
                if entry.sink is not None:
                    _settle_sink(entry.sink, i, oc.TIMEOUT, None, None)
                    entry.sink = None
        for j in conn.expect:
            self._record_cmd(ctx, j, i, oc.TIMEOUT, None)
            entry = _Owed(ctx.kind, conn.deadline, None, conn.retried)
            entry.expired = True
            conn.owed.append(entry)
        conn.expect.clear()
        self.health.failed(i, oc.C_TIMEOUTS, "timeout", now, True)

    def _tidy(self, ctx: _Ctx, i: int, conn: _Conn, now: float) -> None:
        """Expire owed replies past their deadline (after reading what arrived); close a stale connection."""
        overdue = False
        for entry in conn.owed:
            if not entry.expired and entry.deadline <= now:
                overdue = True
                break
        if overdue and conn.sock is not None:
            self._readable(ctx, i)  # non-blocking: whatever already arrived is not late
        struck = False
        for entry in conn.owed:
            if not entry.expired and entry.deadline <= now:
                entry.expired = True
                struck = True
                if entry.sink is not None:
                    _settle_sink(entry.sink, i, oc.TIMEOUT, None, None)
                    entry.sink = None
        if struck:
            self.health.failed(i, oc.C_TIMEOUTS, "timeout", now, True)
        if conn.owed and (len(conn.owed) > MAX_OWED or conn.owed[0].deadline + STALE_AFTER < now):
            self._unregister(ctx, conn)
            self._drop_owed(i, conn, oc.TIMEOUT, None)
            conn.close()

    def _broken(self, ctx: _Ctx, i: int, detail: str) -> None:
        """A reused connection that breaks before any reply is stale: reopen and resend once."""
        conn = self._conns[i]
        if conn.expect and conn.reused and not conn.retried and not conn.got_data:
            conn.retried = True
            self._unregister(ctx, conn)
            conn.close()
            self._drop_owed(i, conn, oc.CONN_ERROR, "connection broke before the reply")
            self.health.count(i, oc.C_CONNECTION_ERRORS)
            self._start(ctx, i, ctx.io_deadline + self._connect_timeout)
        else:
            self._fail(ctx, i, oc.CONN_ERROR, detail, oc.C_CONNECTION_ERRORS, False)

    def _write(self, ctx: _Ctx, i: int) -> bool:
        conn = self._conns[i]
        try:
            sent = conn.sock.send(conn.out)  # type: ignore[union-attr]
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno in _STALE_ERRNOS:
                self._broken(ctx, i, exc.strerror or str(exc))
            else:
                self._fail(ctx, i, oc.CONN_ERROR, exc.strerror or str(exc), oc.C_CONNECTION_ERRORS, False)
            return False
        conn.out = conn.out[sent:]
        return True

    def _readable(self, ctx: _Ctx, i: int) -> None:
        """Read what arrived on one connection and settle the replies that are complete."""
        conn = self._conns[i]
        try:
            data = conn.sock.recv(_RECV_SIZE)  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno in _STALE_ERRNOS:
                self._broken(ctx, i, exc.strerror or str(exc))
            else:
                self._fail(ctx, i, oc.CONN_ERROR, exc.strerror or str(exc), oc.C_CONNECTION_ERRORS, False)
            return
        if not data:
            self._broken(ctx, i, "connection closed by the master")
            return
        problem = conn.guard(data)
        if problem is not None:
            self._fail(ctx, i, oc.PROTOCOL_ERROR, problem, oc.C_PROTOCOL_ERRORS, False)
            return
        reader = conn.reader
        reader.feed(data)  # type: ignore[union-attr]
        health = self.health
        while conn.owed or conn.expect:
            try:
                reply = reader.gets()  # type: ignore[union-attr]
            except Exception as exc:  # hiredis.ProtocolError, or MemoryError on absurd headers
                self._fail(ctx, i, oc.PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}", oc.C_PROTOCOL_ERRORS, False)
                return
            if reply is False:
                if not conn.owed and reader.has_data():  # type: ignore[union-attr]
                    conn.got_data = True  # part of a reply to this round's commands
                return
            if conn.skip >= 0:
                conn.got_data = True
                problem = self._hello_reply(conn, conn.hello_kinds[conn.skip], reply)
                if problem is not None:
                    self._fail(ctx, i, oc.ERROR_REPLY, problem, oc.C_ERROR_REPLIES, False)
                    return
                conn.skip += 1
                if conn.skip == len(conn.hello_kinds):
                    conn.skip = -1
                    conn.out = conn.payload
                    if not self._write(ctx, i):
                        return
                    if conn.out:
                        ctx.poller.modify(conn.fd, _POLLIN | _POLLOUT)
                continue
            if conn.owed:
                if not self._owed_reply(ctx, i, conn, conn.owed.popleft(), reply):
                    return
                continue
            j = conn.expect.popleft()
            conn.got_data = True  # (owed replies do not count: they only say the master was alive)
            if isinstance(reply, hiredis.ReplyError):
                fallbacks = ctx.fallbacks
                if fallbacks is not None and str(reply).startswith("NOSCRIPT") and conn.fallback_sent < ctx.k:
                    # The script cache is empty (a restart or SCRIPT FLUSH): send the script itself.
                    conn.fallback_sent += 1
                    conn.expect.append(j)
                    conn.out += fallbacks[j]
                    if self._write(ctx, i) and conn.out:
                        ctx.poller.modify(conn.fd, _POLLIN | _POLLOUT)
                    if conn.sock is None:
                        return
                    continue
                code, detail, value = oc.ERROR_REPLY, str(reply), None
                health.count(i, oc.C_ERROR_REPLIES)
            elif ctx.kind == KIND_BITS:
                codes = _bits(reply, ctx.rows)
                if codes is not None:
                    health.answered(i)
                    for row, code in enumerate(codes):
                        self._record(ctx, row, i, code, None)
                    continue
                code, detail, value = oc.PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None
            else:
                code, detail, value = _classify(ctx.kind, reply)
                if ctx.acquisition:
                    code, detail = self._acquisition_outcome(conn, code, conn.retried, detail)
            if code == oc.PROTOCOL_ERROR:
                # A reply of the wrong shape: the connection is out of step with its requests.
                self._record_cmd(ctx, j, i, code, detail)
                self._fail(ctx, i, code, detail, oc.C_PROTOCOL_ERRORS, False)
                return
            health.answered(i)
            if ctx.kind == KIND_BITS:
                self._record_cmd(ctx, j, i, code, detail)
            else:
                self._record(ctx, j, i, code, detail, value)
        if reader.has_data():  # type: ignore[union-attr]
            self._fail(ctx, i, oc.PROTOCOL_ERROR, "unexpected bytes after the last reply", oc.C_PROTOCOL_ERRORS, False)
            return
        if ctx.k and conn.fd in ctx.by_fd:
            health.timed(i, monotonic() - ctx.started)
        self._unregister(ctx, conn)

    def _acquisition_outcome(
        self, conn: _Conn, code: int, retried: bool, detail: Optional[str]
    ) -> Tuple[int, Optional[str]]:
        """An acquisition's OK or "no" reconsidered: restart-aware voting, a resent command."""
        if code == oc.OK and self._untrusted(conn):
            return oc.UNTRUSTED, self._untrusted_detail(conn)
        if code == oc.NO and retried:
            # The lost connection may have run our first SET: the key can be ours.
            # Not a clear "no", so the caller releases (owner-checked) to be sure.
            return oc.CONN_ERROR, "connection broke; the resent command found the key set"
        return code, detail

    def _owed_reply(self, ctx: _Ctx, i: int, conn: _Conn, entry: _Owed, reply: object) -> bool:
        """Settle one owed reply; False if it closed the connection."""
        if isinstance(reply, hiredis.ReplyError):
            # No EVAL fallback here: the round that sent it has returned (its outcome says so; an
            # acquisition must not land after its own cleanup). The next script round sends EVAL.
            code, detail, value = oc.ERROR_REPLY, str(reply), None
            if detail.startswith("NOSCRIPT"):
                conn.use_eval = True
        elif entry.kind == KIND_BITS:
            sink = entry.sink
            rows = len(sink) if isinstance(sink, list) else len(reply) if isinstance(reply, bytes) else 0
            codes = _bits(reply, rows)
            if codes is None:
                code, detail, value = oc.PROTOCOL_ERROR, f"unexpected reply {reply!r:.80}", None
            elif entry.expired:
                self.health.count(i, oc.C_LATE)
                return True
            else:
                self.health.answered(i)
                for rnd, row_code in zip(sink or (), codes):
                    _set_outcome(rnd, i, row_code, None, None)
                return True
        else:
            code, detail, value = _classify(entry.kind, reply)
            if entry.kind != KIND_SCRIPT:
                code, detail = self._acquisition_outcome(conn, code, entry.retried, detail)
        if code == oc.PROTOCOL_ERROR:
            _settle_sink(entry.sink, i, code, detail, None)
            self._fail(ctx, i, code, detail, oc.C_PROTOCOL_ERRORS, False)
            return False
        if entry.expired:
            self.health.count(i, oc.C_LATE)
            return True
        self.health.answered(i)
        if code == oc.ERROR_REPLY:
            self.health.count(i, oc.C_ERROR_REPLIES)
        _settle_sink(entry.sink, i, code, detail, value)
        return True

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
