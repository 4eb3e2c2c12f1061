"""``Redlock``: the client that knows the masters, the policy, and hands out :class:`Lock` handles.

One client is meant to be shared by every thread of a process. Single-lock acquires and releases
go through a combiner (:mod:`fastredlock._combine`): requests that threads make while a round is in
flight ride together in the next one. Every round runs on a core (one set of N connections) taken
from a small pool and given back: batches, extensions, fenced locks and the watchdog take their own,
and with ``auto_pipeline=False`` so does every single-lock round, so threads never wait behind each
other's round trips; a thread gets back the core it used last when it is free. After ``fork()`` the
child drops the pool it inherited and opens its own connections.

A lock whose acquisition returned before every master answered (early decision) is released and
extended through the core that acquired it while those answers are outstanding: a release must be
written on the connection that carries the SET it undoes, never overtake it on another one.

The cores of one client share a :class:`Health` object (the masters' cool-downs and counters, see
:meth:`Redlock.stats`), so a master that one thread found down is skipped by all of them.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from time import monotonic
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _fork
from . import _outcomes as oc
from ._cores import core_class
from ._masters import MasterSpec, parse_masters
from .errors import MasterOutcome
from ._tokens import new_token, new_tokens
from ._combine import Combiner, Request
from .lock import Lock, _may_hold
from .watchdog import Watchdog

__all__ = ["MasterStats", "Redlock"]

#: Longest TTL accepted, in seconds (2**31 - 1 ms, about 24.8 days).
MAX_TTL = (2**31 - 1) / 1000.0
#: Longest lock name accepted, in bytes after the prefix is added.
MAX_NAME_BYTES = 65536
#: Default lifetime of a fence counter after its last use, in seconds (30 days).
FENCE_RETENTION = 30 * 86400.0


#: Longest io_timeout, connect_timeout and retry sleep accepted, in seconds.
MAX_WAIT = 3600.0
#: Default first cool-down of a master that timed out or refused a connection, seconds.
COOLDOWN = 0.1
#: Default longest cool-down (it doubles at each failure in a row), seconds.
MAX_COOLDOWN = 5.0


class MasterStats(NamedTuple):
    """One master's counters and health, as :meth:`Redlock.stats` reports them.

    Counters are cumulative since the client was created (monotonic: export them as counters).
    """

    #: The master as configured, e.g. ``"127.0.0.1:7001"``.
    master: str
    #: Replies received in time (each reply of a batch counts; a straggler's reply read after its
    #: round returned early counts too).
    replies: int
    #: Rounds whose round trip to this master was measured (the count behind ``latency_avg``).
    rounds_timed: int
    #: Times the master missed a deadline (at most one per round).
    timeouts: int
    #: Connections refused or failed (including a connection reset before any reply).
    connect_errors: int
    #: Established connections that broke.
    connection_errors: int
    #: Error replies (``-ERR``, ``NOPERM``, ``WRONGTYPE``, a failed ``AUTH``, ...).
    error_replies: int
    #: Replies that were not valid RESP, or not of the expected shape.
    protocol_errors: int
    #: Rounds that did not ask this master because it was cooling down.
    skipped: int
    #: Replies that came after their deadline (read and dropped).
    late_replies: int
    #: Mean and largest time, in seconds, from a round's first write to this master's last reply
    #: of that round (over the rounds that waited for it).
    latency_avg: float
    latency_max: float
    #: Seconds of cool-down left (0.0: the master is asked normally).
    cooling_down: float
    #: Failures in a row (timeouts and refused connections) since its last reply in time.
    failures_in_a_row: int
    #: The last failure, e.g. ``"timeout"`` or ``"connection error (Connection refused)"``, or None.
    last_failure: Optional[str]


def _check_number(
    value: Any, name: str, *, minimum: float = 0.0, strict: bool = False, maximum: float = math.inf
) -> float:
    """Return ``value`` as a float, or raise ``TypeError``/``ValueError`` naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be finite, got an int too large for a float") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < minimum or (strict and value == minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}, got {value:g}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value:g}")
    return value


class Redlock:
    """A Redlock client over N independent Redis masters.

    :param masters: the masters, as URLs (``redis://[user:pass@]host:port[/db]``,
        ``unix:///path.sock``), dicts, ``(host, port)`` tuples or ``redis.Redis`` clients.
        Quorum is ``N // 2 + 1``.
    :param retry_count: retries after the first attempt when ``acquire`` blocks without a timeout.
    :param retry_delay: base sleep between attempts, seconds.
    :param retry_jitter: up to this many seconds, drawn at random, are added to each sleep.
    :param drift_factor: clock drift allowance as a fraction of the TTL (plus 2 ms).
    :param io_timeout: per-master deadline of one round, seconds; a master slower than this counts
        as "no" for that round. Keep it much smaller than your TTLs.
    :param connect_timeout: extra time allowed when a round has to (re)connect to a master.
    :param wait_for_all: ``False`` (default): an acquisition returns as soon as every key is
        decided, when a quorum answered OK (validity is measured at that instant) or a quorum has
        become impossible, without waiting for the slowest masters; their replies are still read,
        in order, before their connection carries anything else, and a release always follows the
        SET on the same connection. ``True``: wait for every master (up to ``io_timeout``).
    :param cooldown: a master that times out or refuses a connection is skipped by acquisitions for
        this many seconds (counted as "no" without waiting; outcome ``cooling down``), doubled at
        each failure in a row up to ``max_cooldown``, then probed again. ``0`` disables skipping.
    :param max_cooldown: the longest cool-down, seconds.
    :param prefix: prepended to every lock name to form the key.
    :param restart_aware: restart-aware voting (on by default): a master that has been up for less
        than ``restart_grace`` may have forgotten locks it held before a restart, so its OK does not
        count toward a quorum until then. Needs ``INFO server``; turn it off for services that hide
        INFO, and for masters you just started in a test.
    :param restart_grace: seconds a restarted master stays untrusted; default: the largest TTL this
        client has used. Set it to the largest TTL of the whole fleet.
    :param backoff: a callable ``backoff(attempt) -> seconds`` that replaces ``retry_delay`` and
        ``retry_jitter`` (``attempt`` counts from 1).
    :param fence_retention: seconds a fence counter outlives its last use (fencing locks only).
    :param auto_pipeline: ``True`` (default): single-lock acquires and releases that threads ask
        for while a round of the same kind is in flight ride together in the next round (one write
        per master carries them all; see :mod:`fastredlock._combine`). ``False``: each thread runs
        its own rounds on its own connections (a pool), never waiting for another thread's round.
    :param core: ``"cython"`` or ``"python"`` to force a core (tests, benchmarks); default: the
        active one (:data:`fastredlock.CORE`).
    """

    def __init__(
        self,
        masters: Iterable[Any],
        *,
        retry_count: int = 3,
        retry_delay: float = 0.2,
        retry_jitter: float = 0.2,
        drift_factor: float = 0.01,
        io_timeout: float = 0.05,
        connect_timeout: float = 0.1,
        wait_for_all: bool = False,
        cooldown: float = COOLDOWN,
        max_cooldown: float = MAX_COOLDOWN,
        prefix: Union[str, bytes] = "",
        restart_aware: bool = True,
        restart_grace: Optional[float] = None,
        backoff: Optional[Callable[[int], float]] = None,
        fence_retention: float = FENCE_RETENTION,
        auto_pipeline: bool = True,
        core: Optional[str] = None,
    ) -> None:
        if isinstance(retry_count, bool) or not isinstance(retry_count, int):
            raise TypeError(f"retry_count must be an int, not {type(retry_count).__name__}")
        if retry_count < 0:
            raise ValueError(f"retry_count must be >= 0, got {retry_count}")
        self.retry_count = retry_count
        self.retry_delay = _check_number(retry_delay, "retry_delay", maximum=MAX_WAIT)
        self.retry_jitter = _check_number(retry_jitter, "retry_jitter", maximum=MAX_WAIT)
        self.drift_factor = _check_number(drift_factor, "drift_factor")
        if self.drift_factor >= 1.0:
            raise ValueError(f"drift_factor must be < 1, got {drift_factor}")
        self.io_timeout = _check_number(io_timeout, "io_timeout", strict=True, maximum=MAX_WAIT)
        self.connect_timeout = _check_number(connect_timeout, "connect_timeout", maximum=MAX_WAIT)
        if not isinstance(wait_for_all, bool):
            raise TypeError(f"wait_for_all must be a bool, not {type(wait_for_all).__name__}")
        self.wait_for_all = wait_for_all
        self.cooldown = _check_number(cooldown, "cooldown", maximum=MAX_WAIT)
        self.max_cooldown = _check_number(max_cooldown, "max_cooldown", maximum=MAX_WAIT)
        if self.max_cooldown < self.cooldown:
            raise ValueError(f"max_cooldown must be >= cooldown, got {max_cooldown:g} < {cooldown:g}")
        if isinstance(prefix, str):
            prefix = prefix.encode()
        elif not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        self.prefix: bytes = prefix
        if backoff is not None and not callable(backoff):
            raise TypeError(f"backoff must be callable, not {type(backoff).__name__}")
        self.backoff = backoff
        if not isinstance(auto_pipeline, bool):
            raise TypeError(f"auto_pipeline must be a bool, not {type(auto_pipeline).__name__}")
        self.auto_pipeline = auto_pipeline
        self.restart_aware = bool(restart_aware)
        self.restart_grace = None if restart_grace is None else _check_number(restart_grace, "restart_grace")
        self._max_ttl_ms = 0
        #: TTLs (seconds, int or float) already checked, and their milliseconds.
        self._ttls_ms: Dict[Any, int] = {}
        self._fence_retention_ms = int(_check_number(fence_retention, "fence_retention", strict=True) * 1000)
        self._watchdog: Optional[Watchdog] = None
        self._core_cls = core_class(core)
        self.core: str = "python" if self._core_cls.__module__.endswith("_io_py") else "cython"
        self._specs: Tuple[MasterSpec, ...] = parse_masters(masters)
        self.quorum = len(self._specs) // 2 + 1
        health_cls = sys.modules[self._core_cls.__module__].Health
        self._health = health_cls(len(self._specs), self.cooldown, self.max_cooldown)
        self._pool: List[Any] = []
        self._pool_lock = threading.Lock()
        #: Every core this client made (since the last fork): a core not in the pool is in use.
        self._live: set = set()
        #: Threads waiting for one particular core (see _checkout_core), and their condition.
        self._waiters = 0
        self._returned = threading.Condition(threading.Lock())
        #: The core each thread used last (it gets it back if free: its SETs' connections).
        self._local = threading.local()
        self._generation = _fork.generation
        self._closed = False
        self._new_combiners()

    # --- public API -------------------------------------------------------------------------
    @property
    def masters(self) -> Tuple[str, ...]:
        """The masters' labels (``host:port[/db]`` or ``unix:///path``), in the order given."""
        return tuple(spec.label for spec in self._specs)

    def stats(self) -> List[MasterStats]:
        """Per master, in the order given: counters, latency and health (see :class:`MasterStats`).

        Cheap (no I/O); shared by every thread and core of this client. For metrics, e.g.
        ``{s.master: s.timeouts for s in dlm.stats()}``.
        """
        now = monotonic()
        return [MasterStats(spec.label, *row) for spec, row in zip(self._specs, self._health.snapshot(now))]

    def lock(
        self,
        name: Union[str, bytes],
        ttl: float = 10.0,
        *,
        auto_extend: bool = False,
        max_hold: Optional[float] = None,
        on_lost: Optional[Callable[[Lock], object]] = None,
        fencing: bool = False,
    ) -> Lock:
        """Return a handle for the lock called ``name`` held for ``ttl`` seconds; nothing is sent yet.

        :param auto_extend: the client's watchdog renews the lock about every ``ttl / 3`` while it
            is held (all such locks of a client share one thread and one round per tick).
        :param max_hold: with ``auto_extend``, stop renewing this many seconds after acquisition.
        :param on_lost: ``on_lost(lock)`` runs (on the watchdog thread) if the lock is lost while
            held: a renewal failed or its validity ran out.
        :param fencing: take a fencing token at each acquisition (:attr:`Lock.fence`, strictly
            increasing across holders of the name; one extra round).
        """
        return Lock(self, name, ttl, auto_extend=auto_extend, max_hold=max_hold, on_lost=on_lost, fencing=fencing)

    def acquire_many(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> List[Optional[Lock]]:
        """Try to acquire K independent locks in one round: K pipelined ``SET NX PX`` per master.

        Returns, for each name in order, its acquired :class:`Lock` or ``None``. One attempt, no
        retries. Quorum and validity are decided per name from the round's shared timing window;
        names that failed are released on all masters in one follow-up round.

        ``io_timeout`` bounds the whole round, however many names it carries: size it for the
        batch (here a 2500-name round costs the masters and the pure core ~30 ms, the Cython core
        ~15 ms), or a busy machine turns slow answers into "no".
        """
        names, keys, ttl_ms = self._batch_keys(names, ttl)
        tokens = new_tokens(len(keys))
        core = self._checkout_for_acquire(ttl_ms)
        clean = False
        try:
            rounds = core.acquire_many(keys, tokens, ttl_ms)
            failed = [j for j, rnd in enumerate(rounds) if not rnd.ok and _may_hold(rnd)]
            if failed:
                # Written behind the SETs on each connection; no need to wait for the answers.
                core.release_many([keys[j] for j in failed], [tokens[j] for j in failed], False)
            clean = True
        except BaseException:
            self._interrupted_round(core, keys, tokens)
            raise
        finally:
            self._checkin(core, clean)
        return Lock._batch_held(self, names, keys, float(ttl), ttl_ms, tokens, rounds, core)

    def release_many(self, locks: Sequence[Lock]) -> List[bool]:
        """Release several held locks in one round; return, per lock, whether a quorum still held it.

        Unlike :meth:`Lock.release` this does not raise for a lock that was no longer held: check the
        returned flags. Every handle is released either way. ``False`` also means "not confirmed":
        a master that did not answer within ``io_timeout`` (which bounds the whole round, however
        many locks it carries; see :meth:`acquire_many`) may still delete the key when it gets
        to it, or the key stays until its TTL.
        """
        held: List[Lock] = []
        keys: List[bytes] = []
        tokens: List[bytes] = []
        via = {}  # a lock per core that still carries unanswered SETs of some lock (_checkout_for)
        generation = _fork.generation
        for lock in locks:
            if not isinstance(lock, Lock):
                raise TypeError(f"locks must hold Lock objects, not {type(lock).__name__}")
            token = lock.token
            if token is None or lock._generation != generation:
                lock._require_token()  # raises
            held.append(lock)
            keys.append(lock.key)
            tokens.append(token)
            pending = lock._pending
            if pending is not None and id(pending[0]) not in via and lock._unsettled():
                via[id(pending[0])] = lock
        if not held:
            return []
        if self._watchdog is not None:
            for lock in held:
                self._unwatch(lock)
        core = self._checkout_for(list(via.values()))
        clean = False
        try:
            rounds = core.release_many(keys, tokens)
            clean = True
        finally:
            self._checkin(core, clean)
            for lock in held:
                lock._reset()
        flags = []
        for lock, rnd in zip(held, rounds):
            lock._last = rnd
            flags.append(bool(rnd.ok))
        return flags

    def lock_all(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> Optional[List[Lock]]:
        """Acquire several names together, all or none: one script per master sets every key or none.

        Returns the acquired locks (one per name, sharing one token and one validity), or ``None``
        if a quorum of masters could not set them all. One attempt; release with
        :meth:`release_many`. Keys go to one script, so on a Redis Cluster they must share a slot.
        """
        locks = self._batch_handles(names, ttl)
        token = new_token()
        keys = [lk.key for lk in locks]
        core = self._checkout_for_acquire(locks[0]._ttl_ms)
        clean = False
        try:
            rnd = core.acquire_all(keys, token, locks[0]._ttl_ms)
            if not rnd.ok and _may_hold(rnd):
                core.release_many(keys, [token] * len(keys), False)
            clean = True
        except BaseException:
            self._interrupted_round(core, keys, [token] * len(keys))
            raise
        finally:
            self._checkin(core, clean)
        for lock in locks:
            lock._last = rnd
        if not rnd.ok:
            return None
        now = monotonic()
        return [lock._set_acquired(token, rnd, core, now) for lock in locks]

    # --- automatic pipelining (see _combine) -------------------------------------------------
    def _new_combiners(self) -> None:
        self._combiner = Combiner(self._run_batch, self._abandon)

    def _acquire_one(self, key: bytes, token: bytes, ttl_ms: int) -> Tuple[Any, Any]:
        """``(core, round)`` of one ``SET NX PX`` on every master; a failed acquisition that may
        have landed somewhere has been released (written behind its SET on the same connection).

        A round in flight (another thread's): the request rides in the next one (see _combine).
        Else it is a round of its own, run here: the lean path, written inline because every
        Python call on it costs the hot loop of a thread alone.
        """
        combiner = self._combiner
        if not self.auto_pipeline:
            combiner = None
        elif not combiner.enter():  # a round is in flight: ride in the next one
            req = Request(key, token, ttl_ms)
            combiner.submit(req)
            return req.core, req.rnd
        try:
            core = self._checkout_for_acquire(ttl_ms)
            clean = False
            try:
                rnd = core.acquire(key, token, ttl_ms)
                if not rnd.ok and _may_hold(rnd):
                    # A master that answered anything but a clear "no" may hold the key (an OK
                    # outside a quorum, an untrusted OK, a SET not answered yet or after its
                    # timeout). The release is written behind that SET on the same connection, so
                    # it cannot be overtaken; nobody needs its answer, so it is not awaited.
                    core.release(key, token, False)
                clean = True
            except BaseException:
                self._interrupted_round(core, [key], [token])
                raise
            finally:
                self._checkin(core, clean)
            return core, rnd
        finally:
            if combiner is not None:
                combiner.leave()

    def _release_one(self, key: bytes, token: bytes, carrier: Any = None) -> Tuple[Any, bool]:
        """``(round, ok)`` of one owner-checked release on every master, through ``carrier`` (the
        core that may still carry the lock's unanswered SETs) if given, else through any core.
        Rides in the next shared round if one is in flight, like :meth:`_acquire_one`."""
        combiner = self._combiner
        if not self.auto_pipeline:
            combiner = None
        elif not combiner.enter():  # a round is in flight: ride in the next one
            req = Request(key, token, 0, carrier)
            combiner.submit(req)
            return req.rnd, req.ok
        try:
            core = self._checkout_core(carrier) if carrier is not None else self._checkout()
            clean = False
            try:
                rnd = core.release(key, token)
                clean = True
            finally:
                self._checkin(core, clean)
            return rnd, rnd.ok
        finally:
            if combiner is not None:
                combiner.leave()

    def _run_batch(self, batch: List[Request]) -> None:
        """One round trip for ``batch``: its releases are written first, then its acquisitions
        (``SET NX PX``) behind them on the same connections; the acquisition round reads both."""
        acqs = [r for r in batch if r.ttl_ms]
        rels = [r for r in batch if not r.ttl_ms] if len(acqs) < len(batch) else []
        carrier = None
        for r in rels:
            if r.carrier is not None:
                carrier = r.carrier
                break
        if carrier is not None:
            core = self._checkout_core(carrier)
            if acqs:
                self._grace(core, acqs[0].ttl_ms)
        elif acqs:
            core = self._checkout_for_acquire(acqs[0].ttl_ms)
        else:
            core = self._checkout()
        clean = False
        try:
            rel_rounds: List[Any] = []
            if rels:
                # With acquisitions behind them, written without waiting (as EVAL: a NOSCRIPT could
                # not be answered later); the acquisition round reads their answers first.
                rel_rounds = core.release_many([r.key for r in rels], [r.token for r in rels], not acqs)
            acq_rounds: List[Any] = []
            if acqs:
                acq_rounds = core.acquire_many([r.key for r in acqs], [r.token for r in acqs], acqs[0].ttl_ms)
                failed = [r for r, rnd in zip(acqs, acq_rounds) if not rnd.ok and _may_hold(rnd)]
                if failed:  # written behind their SETs, not awaited (see _acquire_one)
                    core.release_many([r.key for r in failed], [r.token for r in failed], False)
                if rels:
                    self._await_releases(core, rel_rounds)
            clean = True
        except BaseException:
            self._interrupted_round(core, [r.key for r in acqs], [r.token for r in acqs])
            raise
        finally:
            self._checkin(core, clean)
        quorum = self.quorum
        for req, rnd in zip(rels, rel_rounds):
            req.core = core
            req.rnd = rnd
            req.ok = rnd.successes >= quorum
        if acqs and any(oc.CONN_ERROR in rnd.outcomes for rnd in rel_rounds):
            self._repair_releases([r for r in rels if oc.CONN_ERROR in r.rnd.outcomes])
        for req, rnd in zip(acqs, acq_rounds):
            req.core = core
            req.rnd = rnd
            req.ok = rnd.ok

    @staticmethod
    def _interrupted_round(core: Any, keys: Sequence[bytes], tokens: Sequence[bytes]) -> None:
        """An acquisition's round was interrupted (KeyboardInterrupt, a bug): its SETs may have
        landed anywhere and replies may be in flight. Close the core and release ``keys`` on a
        fresh connection, best effort (the caller re-raises)."""
        core.close()
        if not keys:
            return
        try:
            core.release_many(keys, tokens)
        except Exception:  # pragma: no cover - best effort while another error propagates
            pass

    def _await_releases(self, core: Any, rounds: List[Any]) -> None:
        """Read the answers to releases written without waiting until each is decided: a quorum
        confirmed it, or a quorum has become impossible (early decision, like an acquisition's);
        with ``wait_for_all``, until every master answered or missed its deadline. The answers
        still missing then stay owed by their connections."""
        if self.wait_for_all:
            core.settle()
            return
        quorum, n = self.quorum, len(self._specs)
        limit = n - quorum + 1

        def decided() -> bool:
            for rnd in rounds:
                if rnd.successes < quorum:
                    outcomes = rnd.outcomes
                    if n - outcomes.count(oc.PENDING) - rnd.successes < limit:
                        return False
            return True

        if not decided():
            core.settle(until=decided)

    def _repair_releases(self, reqs: List[Request]) -> None:
        """Write again, and wait for, releases whose connection broke in a shared round.

        A release that rode ahead of acquisitions was not waited for, so a reused connection found
        broken (a master restarted) was reopened for the acquisitions alone. This round reopens
        and retries like any waited-for release; a master counts if either attempt deleted the key.
        """
        core = self._checkout()
        clean = False
        try:
            again = core.release_many([r.key for r in reqs], [r.token for r in reqs])
            clean = True
        finally:
            self._checkin(core, clean)
        for req, rnd in zip(reqs, again):
            first = req.rnd.outcomes
            req.ok = sum(1 for a, b in zip(first, rnd.outcomes) if a == oc.OK or b == oc.OK) >= self.quorum
            req.rnd = rnd if rnd.successes >= req.rnd.successes else req.rnd

    def _abandon(self, req: Request) -> None:
        """Undo an acquisition whose thread was interrupted while its round ran for it."""
        if req.ttl_ms and req.ok:
            core = self._checkout_core(req.core)
            clean = False
            try:
                core.release(req.key, req.token, False)
                clean = True
            finally:
                self._checkin(core, clean)

    def _batch_handles(self, names: Sequence[Union[str, bytes]], ttl: float) -> List[Lock]:
        if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
            raise TypeError("names must be a list of lock names")
        names = list(names)
        if not names:
            raise ValueError("names must not be empty")
        ttl_ms = self._ttl_ms(ttl)  # checked once for all
        locks = [Lock(self, name, ttl, _ttl_ms=ttl_ms) for name in names]
        if len({lk.key for lk in locks}) != len(locks):
            raise ValueError("names must not repeat a name")
        return locks

    def _batch_keys(self, names: Sequence[Union[str, bytes]], ttl: float) -> Tuple[List[Any], List[bytes], int]:
        """The names of a batch as a list, their keys and the TTL in ms, checked once for the batch
        (in the order and with the errors of :meth:`_batch_handles`)."""
        if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
            raise TypeError("names must be a list of lock names")
        names = list(names)
        if not names:
            raise ValueError("names must not be empty")
        ttl_ms = self._ttl_ms(ttl)
        prefix = self.prefix
        if all(map(str.__instancecheck__, names)) and all(names):  # all non-empty str: the common case
            keys = [prefix + name.encode("utf-8", "surrogatepass") for name in names]
            if max(map(len, keys)) > MAX_NAME_BYTES:
                keys = [self._key(name) for name in names]  # raises
        else:
            keys = [self._key(name) for name in names]
        if len(set(keys)) != len(keys):
            raise ValueError("names must not repeat a name")
        return names, keys, ttl_ms

    def close(self) -> None:
        """Close every connection and stop the watchdog. Locks still held stay until their TTL."""
        if self._watchdog is not None:
            self._watchdog.stop()
        with self._pool_lock:
            pool, self._pool = self._pool, []
            self._closed = True
            self._live.clear()
        with self._returned:
            self._returned.notify_all()
        for core in pool:
            core.close()

    def __enter__(self) -> "Redlock":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Redlock(masters={list(self.masters)!r}, quorum={self.quorum}, core={self.core!r})"

    # --- used by Lock -----------------------------------------------------------------------
    def _key(self, name: Union[str, bytes]) -> bytes:
        if isinstance(name, str):
            raw = name.encode("utf-8", "surrogatepass")
        elif isinstance(name, bytes):
            raw = name
        else:
            raise TypeError(f"name must be str or bytes, not {type(name).__name__}")
        if not raw:
            raise ValueError("name must not be empty")
        key = self.prefix + raw
        if len(key) > MAX_NAME_BYTES:
            raise ValueError(f"name is {len(key)} bytes with the prefix; the limit is {MAX_NAME_BYTES}")
        return key

    def _ttl_ms(self, ttl: Any) -> int:
        cls = ttl.__class__
        if cls is float or cls is int:  # not bool: it must still be refused
            known = self._ttls_ms.get(ttl)  # the TTLs a client uses are few: checked once each
            if known is not None:
                return known
        value = _check_number(ttl, "ttl", strict=True)
        if value > MAX_TTL:
            raise ValueError(f"ttl must be <= {MAX_TTL:g} seconds, got {value:g}")
        ttl_ms = int(value * 1000.0)
        # Validity is ttl - elapsed - (ttl * drift + 2 ms): a TTL below that margin can never hold.
        if ttl_ms * (1.0 - self.drift_factor) <= 2.0:
            raise ValueError(f"ttl is too small to ever be valid with drift_factor={self.drift_factor}: {value:g}s")
        if ttl_ms > self._max_ttl_ms:
            self._max_ttl_ms = ttl_ms
        if (cls is float or cls is int) and len(self._ttls_ms) < 64:
            self._ttls_ms[ttl] = ttl_ms
        return ttl_ms

    def _checkout_for_acquire(self, ttl_ms: int) -> Any:
        """A core whose restart grace covers the largest TTL used so far (restart-aware voting)."""
        core = self._checkout()
        self._grace(core, ttl_ms)
        return core

    def _grace(self, core: Any, ttl_ms: int) -> None:
        if self.restart_aware:
            grace = self._max_ttl_ms if self.restart_grace is None else int(self.restart_grace * 1000)
            core.restart_grace_ms = grace

    def _watch(self, lock: Lock) -> None:
        watchdog = self._watchdog
        if watchdog is None:
            with self._pool_lock:
                if self._watchdog is None:
                    self._watchdog = Watchdog(self)
                watchdog = self._watchdog
        watchdog.watch(lock)

    def _unwatch(self, lock: Lock) -> None:
        if self._watchdog is not None:
            self._watchdog.unwatch(lock)

    def _checkout(self) -> Any:
        """A free core: the one this thread used last if it is free, else any, else a new one."""
        if self._generation != _fork.generation:
            self._after_fork()
        if self._closed:
            raise RuntimeError("this Redlock client is closed")
        pool = self._pool
        if len(pool) > 1:  # a choice: this thread's own core if free (with one, it is that or none)
            mine = getattr(self._local, "core", None)
            if mine is not None:
                try:
                    pool.remove(mine)  # atomic under the GIL, like pop()
                    return mine
                except ValueError:
                    pass
        try:
            return pool.pop()
        except IndexError:
            core = self._core_cls(
                self._specs, self.io_timeout, self.connect_timeout, self.drift_factor, self.restart_aware,
                self._health, not self.wait_for_all,
            )
            self._live.add(core)
            return core

    def _checkout_core(self, core: Any) -> Any:
        """Check out this very core, waiting while another thread uses it (one round or two).

        Used where a lock's SETs may still be unanswered on the core's connections. Falls back to
        any core if this one no longer belongs to the client (closed, or inherited over a fork).
        """
        if self._generation != _fork.generation:
            self._after_fork()
        pool = self._pool
        try:
            pool.remove(core)
            return core
        except ValueError:
            pass
        with self._returned:
            self._waiters += 1
            try:
                while core in self._live and not self._closed:
                    try:
                        pool.remove(core)
                        return core
                    except ValueError:
                        self._returned.wait(0.05)
            finally:
                self._waiters -= 1
        return self._checkout()

    def _checkout_for(self, locks: Sequence[Lock]) -> Any:
        """A core for releasing or extending ``locks``: the one that acquired them while it may
        still carry unanswered SETs of theirs (see the module docstring), else any."""
        cores = {id(lock._pending[0]): lock._pending[0] for lock in locks if lock._unsettled()}
        if not cores:
            return self._checkout()
        if len(cores) > 1:  # acquired through several cores: let each read its stragglers first
            for core in cores.values():
                self._settle_core(self._checkout_core(core))
            return self._checkout()
        return self._checkout_core(next(iter(cores.values())))

    def _checkin(self, core: Any, clean: bool = True) -> None:
        if not clean:
            core.close()  # a round was interrupted: replies may still be in flight
        if self._generation == _fork.generation and not self._closed:
            self._pool.append(core)
            if len(self._live) > 1:  # which core is whose matters only when there are several
                self._local.core = core
            if self._waiters:
                with self._returned:
                    self._returned.notify_all()
        else:
            core.close()

    def _after_fork(self) -> None:
        """In a fork child: forget the parent's connections (closing our copies of the fds only)."""
        # The parent's pool lock may have been held by a thread that does not exist here: replace it.
        self._pool_lock = threading.Lock()
        self._returned = threading.Condition(threading.Lock())
        self._waiters = 0
        self._local = threading.local()
        self._live = set()
        pool, self._pool = self._pool, []
        self._watchdog = None  # its thread does not exist here; the parent's locks are not ours
        self._new_combiners()  # their mutexes may have been held by threads that do not exist here
        self._health.after_fork()
        self._generation = _fork.generation
        for core in pool:
            core.close()

    def _settle(self, rnd: Any) -> None:
        """Wait until the stragglers of ``rnd`` have been read (bounded by their deadlines).

        The core that ran the round holds their connections: take it from the pool if it is there
        and read the owed replies; if another thread is using it, that thread's round reads them.
        """
        limit = rnd.started + self.io_timeout + self.connect_timeout + 1.0
        while oc.PENDING in rnd.outcomes:
            for core in list(self._pool):
                if not core.pending:
                    continue
                try:
                    self._pool.remove(core)
                except ValueError:
                    continue  # another thread took it
                self._settle_core(core)
            if oc.PENDING not in rnd.outcomes or monotonic() >= limit:
                return
            time.sleep(0.001)

    def _settle_core(self, core: Any) -> None:
        """Read what a checked-out core's connections still owe (bounded), then give it back."""
        clean = False
        try:
            core.settle()
            clean = True
        finally:
            self._checkin(core, clean)

    def _outcomes(self, rnd: Any) -> List[MasterOutcome]:
        """The per-master outcomes of ``rnd``, its stragglers' answers filled in first."""
        if oc.PENDING in rnd.outcomes:
            self._settle(rnd)
        details = rnd.details or (None,) * len(self._specs)
        return [
            MasterOutcome(spec.label, oc.NAMES.get(code, str(code)), detail)
            for spec, code, detail in zip(self._specs, rnd.outcomes, details)
        ]

    def _down_note(self, outcomes: Sequence[MasterOutcome]) -> str:
        """``"; a quorum was impossible: k of N masters down (a, b)"`` when it was, else ``""``."""
        down = [o.master for o in outcomes if o.outcome in _DOWN_NAMES]
        if not down or len(outcomes) - len(down) >= self.quorum:
            return ""
        return f"; a quorum was impossible: {len(down)} of {len(outcomes)} masters down ({', '.join(down)})"


_DOWN_NAMES = frozenset(oc.NAMES[code] for code in oc.DOWN)

