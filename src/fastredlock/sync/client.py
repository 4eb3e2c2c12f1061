"""``Redlock``: the client that knows the masters, the policy, and hands out :class:`Lock` handles.

One client is meant to be shared by every thread of a process. It checks its options, then hands
the engine to an :class:`~fastredlock.engine.executor.Executor` (:attr:`Redlock.executor`): the pool of
cores (one set of N connections each), automatic pipelining of single-lock rounds, the carrier
rule, outcomes and fork handling. Handles and the watchdog run their rounds through it; this module
adds the batch operations (:meth:`Redlock.acquire_many`, :meth:`Redlock.lock_all`,
:meth:`Redlock.release_many`: plans of :mod:`fastredlock.handles.batch`, driven here),
:meth:`Redlock.inspect` and the statistics.

The cores of one client share a :class:`Health` object (the masters' cool-downs and counters, see
:meth:`Redlock.stats`), so a master that one thread found down is skipped by all of them.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, List, Optional, Sequence, Union

from ..handles.client import (
    COOLDOWN, FENCE_RETENTION, MAX_COOLDOWN, MAX_NAME_BYTES, MAX_TTL, MAX_WAIT, MasterStats, RedlockBase,
)  # noqa: F401 (re-exported: the names' historical home)
from ..engine.checks import key_of
from ..handles.batch import acquire_many_plan, lock_all_plan, release_many_plan
from .family import RLock, ReadLock, Semaphore, WriteLock
from .lock import Lock, client_lock, drive, fence_key, new_lock
from ..handles.lockinfo import FamilyInfo, LockInfo, family_inspection, inspection
from .notifier import Notifier
from .watchdog import Watchdog

__all__ = ["MasterStats", "Redlock"]


class Redlock(RedlockBase):
    """A Redlock client over N independent Redis masters.

    Besides :meth:`lock`, the lock family (the guide "The lock family"): :meth:`rlock`,
    :meth:`rwlock`, :meth:`semaphore`.

    :param masters: the masters, as URLs (``redis://[user:pass@]host:port[/db]``,
        ``rediss://...`` for TLS, ``unix:///path.sock``), dicts, ``(host, port)`` tuples or
        ``redis.Redis`` clients. Quorum is ``N // 2 + 1``. TLS masters take redis-py's settings
        (``ssl_ca_certs``, ``ssl_certfile``/``ssl_keyfile`` for mutual TLS, ``ssl_cert_reqs``,
        ``ssl_check_hostname``, ``ssl_ca_path``, ``ssl_min_version``) as URL query parameters or
        dict keys (with ``ssl=True``), or an ``ssl_context``; certificates and host names are
        verified by default.
    :param retry_count: retries after the first attempt when ``acquire`` blocks without a timeout;
        default None: no limit, a blocking ``acquire()`` waits until it gets the lock (as
        ``threading.Lock`` and redis-py's Lock do). ``timeout=`` bounds a wait in seconds instead.
    :param retry_delay: base sleep between attempts, seconds.
    :param retry_jitter: up to this many seconds, drawn at random, are added to each sleep.
    :param drift_factor: clock drift allowance as a fraction of the TTL (plus 2 ms).
    :param io_timeout: per-master deadline of one round, seconds; a master slower than this counts
        as "no" for that round. Keep it much smaller than your TTLs.
    :param connect_timeout: extra time allowed when a round has to (re)connect to a master (the
        TLS handshake included).
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
        per master carries them all; the guide "Batches and hot paths"). ``False``: each thread runs
        its own rounds on its own connections (a pool), never waiting for another thread's round.
    :param core: ``"cython"`` or ``"python"`` to force a core (tests, benchmarks); default: the
        active one (:data:`fastredlock.CORE`).
    :param on_event: ``on_event(event)`` is called with a :class:`fastredlock.events.LockEvent`
        for each acquisition, refusal, extension, release and loss (default None: nothing is built
        or called). :mod:`fastredlock.metrics` feeds Prometheus and OpenTelemetry from it.
    :param same_server_ok: ``False`` (default): two masters that are the same server (once host
        names are resolved), whatever their db, raise ``ValueError``. ``True``: several dbs of one
        server are accepted as masters (a common CI setup). Each db holds its own key and casts its
        own vote, so the quorum is a majority of those dbs and mutual exclusion still holds (two
        holders would both need a majority of the same dbs of one server); what is lost is fault
        tolerance: that server is a single point of failure, and its restart without persistence
        forgets the lock in every db at once. The same db of one server twice is always refused.
    :param ssl_context: an ``ssl.SSLContext`` for every TLS master that gives no TLS settings of
        its own (a CA, a client certificate, a minimum version...; default: one built from each
        master's settings, verifying the server's certificate and host name).
    :param wake: ``True`` (default): a waiting ``acquire`` retries as soon as a release of the
        name is published by any master (pub/sub, one connection per master shared by all of the
        client's waiters, opened when the first one waits), and still never sleeps longer than
        its backoff. ``False``: waiters only sleep their backoff. Releases publish either way.
    :param courtesy: seconds (default 0.01) a client whose release of a name woke a waiter holds
        back its next attempt at the same name (ended early when it hears the lock is free), so
        that the woken waiter goes first; a plain lock's attempt then queues behind the waiters
        (the guide "Waiting, wake on release, turns").
    :param wait_release: ``True`` (default): ``release()`` and the end of a ``with`` block wait for
        the masters' answers and raise if the lock was not held on a quorum. ``False``: they write
        the release to every master and return at once (one round trip per lock cycle instead of
        two); the answers still count, reported through ``on_lost``, the ``lost`` event and
        ``stats()`` instead of an exception (see :meth:`Lock.release`). ``release(wait=...)``
        decides per call.
    :param unreachable_timeout: seconds (default 5) a blocking ``acquire()`` goes on while every
        attempt finds so many masters unreachable (connection refused or broken, no answer in time,
        cooling down) that no quorum is possible; then it raises
        :class:`~fastredlock.QuorumUnreachableError` naming them (a warning is logged at the first
        such attempt). Down is not held: a lock that masters answer is held by someone else is
        waited for as before. A ``timeout=`` or ``retry_count`` that ends first makes
        ``acquire()`` return False as usual. ``None``: wait for the masters for ever.
    :param scripts: ``True`` (default): scripts go where a master runs them for this client's
        user (a master that refuses them is found on connect and gets native commands only).
        ``False``: no script is ever sent: native commands only (``SET NX PX``, ``SET ... IFEQ
        ... PX``, ``DELIFEQ``/``DELEX ... IFEQ``); fencing, the lock family, turns and
        ``signal=`` releases raise :class:`~fastredlock.ScriptsRefusedError`, and a master
        without a native owner-checked delete is never asked to take a lock (the guide
        "Deploying", section "Without scripts").
    """

    _family = (RLock, Semaphore, ReadLock, WriteLock)
    _new_lock = staticmethod(new_lock)

    def acquire_many(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> List[Optional[Lock]]:
        """Try to acquire K independent locks in one round: K pipelined ``SET NX PX`` per master.

        Returns, for each name in order, its acquired :class:`Lock` or ``None``. One attempt, no
        retries. Quorum and validity are decided per name from the round's shared timing window;
        names that failed are released on all masters in one follow-up round.

        ``io_timeout`` bounds the whole round, however many names it carries: size it for the
        batch (here a 2500-name round costs the masters and the pure core ~30 ms, the Cython core
        ~15 ms), or a busy machine turns slow answers into "no".
        """
        return drive(self.executor, acquire_many_plan(Lock, self, names, ttl))

    def release_many(self, locks: Sequence[Lock], *, wait: Optional[bool] = None) -> Optional[List[bool]]:
        """Release several held locks in one round; return, per lock, whether a quorum still held it.

        Unlike :meth:`Lock.release` this does not raise for a lock that was no longer held: check the
        returned flags. Every handle is released either way. ``False`` also means "not confirmed":
        a master that did not answer within ``io_timeout`` (which bounds the whole round, however
        many locks it carries; see :meth:`acquire_many`) may still delete the key when it gets
        to it, or the key stays until its TTL.

        ``wait=False`` (default: the client's ``wait_release``) writes the releases and returns
        None at once; each lock's answers are reported as for ``Lock.release(wait=False)``.
        """
        return drive(self.executor, release_many_plan(Lock, self, locks, wait))

    def lock_all(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> Optional[List[Lock]]:
        """Acquire several names together, all or none: one script per master sets every key or none.

        Returns the acquired locks (one per name, sharing one token and one validity), or ``None``
        if a quorum of masters could not set them all. One attempt; release with
        :meth:`release_many`. Keys go to one script, so on a Redis Cluster they must share a slot.
        """
        return drive(self.executor, lock_all_plan(Lock, self, names, ttl))

    def inspect(self, name: Union[str, bytes]) -> LockInfo:
        """Tell whether the lock called ``name`` is held, on which masters, by whom and for how
        long, without taking it: one round of ``GET`` and ``PTTL`` (and ``GET`` of its fence
        counter) on every master at once; nothing is written. See :class:`fastredlock.LockInfo`.

        The holder is never shown as its token (the secret that releases the lock) but as a
        digest of the token's client prefix (:func:`fastredlock.holder_of`), or ``"foreign"``.
        A master that does not answer within ``io_timeout`` (or is cooling down) says so in its
        :class:`~fastredlock.MasterView`.
        """
        key = key_of(self.prefix, name)
        with self.executor.core() as core:
            rounds = core.inspect([key], [fence_key(key)])
        return inspection(name, self.masters, rounds, self.quorum, self.drift_factor)

    def inspect_family(self, name: Union[str, bytes], kind: str, limit: int = 0) -> FamilyInfo:
        """Tell who holds the reentrant lock (``kind="rlock"``), the read-write lock (``"rwlock"``)
        or the semaphore (``"semaphore"``, with its ``limit``) called ``name``, without taking it:
        one round of plain reads on every master; nothing is written. See
        :class:`fastredlock.FamilyInfo` (holders shown as for :meth:`inspect`)."""
        reads = self._family_reads(name, kind, limit)
        with self.executor.core() as core:
            rounds = core.reads(reads)
        return family_inspection(name, kind, limit, self.masters, rounds, self.quorum, self.drift_factor)

    def close(self) -> None:
        """Close every connection and stop the watchdog. Locks still held stay until their TTL."""
        self.executor.close()

    def __enter__(self) -> "Redlock":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _new_watchdog(self, ref: "weakref.ref[Any]") -> Watchdog:
        return Watchdog(ref)

    def _new_notifier(self) -> Notifier:
        return Notifier(self._specs, self.connect_timeout, self.courtesy)


# ``dlm.lock(name, ttl)`` is the compiled twin of RedlockBase.lock (the hot path's first call: its
# keywords parsed in C, the handle made by one C call), with the same signature and documentation.
client_lock.__doc__ = RedlockBase.lock.__doc__
Redlock.lock = client_lock  # type: ignore[method-assign]
