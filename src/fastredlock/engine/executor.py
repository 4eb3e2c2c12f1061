# cython: annotation_typing=False
"""The executor: *the* seam between the front-ends (``Lock``, the watchdog, ``Redlock``'s batches)
and the engine (the cores). Front-ends call only what this module documents; nothing here knows
what a ``Lock`` is: what the executor must tell a handle goes through a value it returns or a
callback it was given (``on_done`` of :meth:`Executor.release_unwaited`).

What it owns:

* **The pool of cores.** A core is one set of N connections; a round runs on a core taken from the
  pool and given back. A thread gets back the core it used last when it is free (its SETs'
  connections); batches, extensions, fenced locks and the watchdog take their own. The first core is
  made with the executor: :attr:`n` and :attr:`quorum` are the core's (computed there, once).
* **One checkout dance**, :meth:`Executor.core`: check out, run, and on an exception (a
  KeyboardInterrupt, a bug) close the core, whose replies may still be in flight, and release the
  keys the round was acquiring, best effort; then check in.
* **The carrier rule.** An acquisition that returned before every master answered (early decision)
  hands its caller a *carrier*, an opaque value (None when every master answered). While those
  answers are outstanding, the lock's release and extension run on the core that carries its SETs:
  written on another connection, a release could overtake the SET it undoes.
* **Automatic pipelining** (:mod:`fastredlock.engine.combine`): :meth:`acquire_one` and
  :meth:`release_one` ride in a round another thread has in flight, else run a round of their own.
* **Outcomes**: :meth:`outcomes` fills in the stragglers' answers first; :meth:`down_note`.
* **Restart grace**: :meth:`ttl_ms` checks a TTL and remembers the largest one used; acquiring
  rounds do not trust a master that restarted less than that ago (or ``restart_grace``).
* **Fork handling**: a fork child drops the pool, the combiner and the watchdog it inherited.
* **The watchdog's lifetime** (:meth:`watch`): made on first use by the factory the client gives,
  dropped over a fork, stopped by :meth:`close`.
* **Releases nobody waits for** (:meth:`release_unwaited`, see :mod:`fastredlock.engine.unwaited`):
  written on the core that carries the lock's SETs (else the thread's own), their rounds kept until
  the answers are in: read by the next round on those connections, or by the *reaper* (a daemon
  thread, made on first use) when the core stays idle; the reaper hands each finished round to
  the ``on_done`` callback its writer gave. :meth:`close` reads the answers still owed before it closes the connections.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from time import monotonic
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .fork import fork_generation
from ..protocol import outcomes as oc
from .checks import ttl_ms_of
from .combine import Combiner, Request
from .unwaited import MAX_IN_FLIGHT, REAP_EVERY, REAP_LINGER, REAP_SLOWEST, Unwaited, new_entry
from ..errors import MasterOutcome
from ..protocol.plans import left_behind, release_decided
from ..protocol.result import Round

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False

__all__ = ["Executor"]

log = logging.getLogger("fastredlock")

_PENDING = oc.PENDING
_TIMEOUT = oc.TIMEOUT
_DOWN_NAMES = frozenset(oc.NAMES[code] for code in oc.DOWN)
#: What ``Executor._last_ttl`` starts with: no TTL given is this object.
_NO_TTL = object()


def _outstanding(rnd: Any) -> bool:
    """Whether some master's answer to ``rnd`` may still be on its way (pending, or late)."""
    if type(rnd) is Round:  # (compiled: read as the C field; a pure core's round is another class)
        r = rnd
        outcomes = r.outcomes  # (compiled: a tuple, walked as one; each code a C int)
        if r.successes == len(outcomes):  # every master said OK (the usual case): nothing to look at
            return False
        for code in outcomes:
            if code == _PENDING or code == _TIMEOUT:
                return True
        return False
    for code in rnd.outcomes:
        if code == _PENDING or code == _TIMEOUT:
            return True
    return False


def _carrier(core: Any, rnd: Any) -> Any:
    """The carrier of an acquisition ``rnd`` made on ``core``: None once every master answered."""
    return (core, rnd) if _outstanding(rnd) else None


def ok_of(rnd: Any) -> bool:
    """``rnd.ok`` (compiled: the C field of a Round; the sync handle's release reads it so too)."""
    if type(rnd) is Round:
        r = rnd
        return r.ok
    return bool(rnd.ok)


def _carrying_core(carrier: Any) -> Any:
    """The core a carrier still pins (some answer to its acquisition is outstanding), else None."""
    if carrier is None or not _outstanding(carrier[1]):
        return None
    return carrier[0]


class _Checkout:
    """What :meth:`Executor.core` returns: the core for a ``with`` block, checked in at its end."""

    __slots__ = ("_executor", "_core", "_acquiring")

    def __init__(self, executor: "Executor", core: Any, acquiring: Any) -> None:
        self._executor = executor
        self._core = core
        self._acquiring = acquiring

    def __enter__(self) -> Any:
        return self._core

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self._executor.checkin(self._core)
        else:
            acquiring = self._acquiring or (None, None)
            self._executor.interrupted(self._core, *acquiring)


class Executor:
    """Runs the rounds of one client's front-ends on its pool of cores (see the module docstring).

    :param specs: the parsed masters.
    :param core_cls: the core class (Cython or pure Python); its module provides ``Health``.
    :param watchdog: a callable returning a new watchdog (``watch``, ``unwatch``, ``stop``).
    The other parameters are the :class:`~fastredlock.Redlock` options of the same names.
    """

    def __init__(
        self,
        specs: Sequence[Any],
        core_cls: Any,
        *,
        io_timeout: float,
        connect_timeout: float,
        drift_factor: float,
        wait_for_all: bool,
        cooldown: float,
        max_cooldown: float,
        restart_aware: bool,
        restart_grace: Optional[float],
        auto_pipeline: bool,
        watchdog: Callable[[], Any],
        scripts: bool = True,
    ) -> None:
        self._specs = tuple(specs)
        self._core_cls = core_cls
        #: The Cython core's class when every core is one (its rounds are then called in C), else None.
        self._c_core: Any = None
        entries = getattr(sys.modules[core_cls.__module__], "_C_ENTRIES", None)
        if _COMPILED and entries is not None and entries[0] is core_cls:
            _bind_core(self, entries)  # type: ignore[name-defined]  # noqa: F821 (executor.pxd's)
        #: Whether the cores may send scripts (``scripts=False``: native commands only).
        self.scripts = scripts
        #: The client's key prefix (bytes; the client's ``prefix`` property reads and sets it here).
        self.prefix: Any = b""
        self._io_timeout = io_timeout
        self._connect_timeout = connect_timeout
        self._drift_factor = drift_factor
        self.wait_for_all = wait_for_all
        self._restart_aware = restart_aware
        self._fixed_grace = restart_grace is not None
        #: The restart grace acquisitions apply (ms): ``restart_grace``, else the largest TTL used so far.
        self._grace_ms = int(restart_grace * 1000) if restart_grace is not None else 0
        #: TTLs (seconds, int or float) already checked, and their milliseconds.
        self._ttls_ms: Dict[Any, int] = {}
        #: ``(ttl, ms)`` of the last TTL found in ``_ttls_ms`` (an int or float: immutable, so the
        #: same object has the same ms).
        self._last_ttl: Tuple[Any, Any] = (_NO_TTL, 0)
        #: ``(core, grace)``: the core whose ``restart_grace_ms`` was set last, and to what.
        self._graced: Tuple[Any, Any] = (None, None)
        self._auto_pipeline = auto_pipeline
        self._new_watchdog = watchdog
        #: The watchdog, once a lock was watched (None before, and in a fork child).
        self.watchdog: Any = None
        #: The client's ``on_event`` hook, or None (the handles check this field; see fastredlock.events).
        self.on_event: Optional[Callable[[Any], object]] = None
        #: The client's notifier (wake on release, see fastredlock.engine.wake), or None (``wake=False``).
        self.notifier: Any = None
        #: The notifier's ``channels.released_at`` (the names whose next acquisition owes a courtesy
        #: pause), read by the handles before a first attempt: empty, it costs one C length check.
        self.owed: dict = {}
        #: The notifier's ``channels.contended`` (the lock keys whose attempts are queued, see
        #: fastredlock.engine.wake "Turns"): empty, it costs one C length check.
        self.contended: dict = {}
        #: The masters' health, shared by every core (cool-downs, counters: ``Redlock.stats``).
        self.health = sys.modules[core_cls.__module__].Health(len(self._specs), cooldown, max_cooldown,
                                                             new_lock=threading.Lock)
        self._pool_lock = threading.Lock()
        #: Every core made since the last fork: a core not in the pool is in use.
        self._live: set = set()
        #: Threads waiting for one particular core (see checkout), and their condition.
        self._waiters = 0
        self._returned = threading.Condition(threading.Lock())
        #: The core each thread used last (it gets it back if free: its SETs' connections).
        self._local = threading.local()
        self._generation = fork_generation()
        self._closed = False
        first = self._new_core()
        #: Number of masters and the quorum, as the core computes them.
        self.n: int = first.n
        self.quorum: int = first.quorum
        self._pool: List[Any] = [first]
        #: The combiner of single-lock rounds (automatic pipelining).
        self.combiner = Combiner(self._run_batch, self._abandon)
        #: Whether a release waits for the masters' answers unless told (the client's ``wait_release``).
        self.wait_release = True
        #: The releases written without waiting whose answers are not all in (see _unwaited).
        self.unwaited = Unwaited(self.n)
        self._reaper: Any = None
        self._reap_event = threading.Event()
        self._reaper_asleep = False
        #: The core the reaper is reading (a thread finding the pool empty waits for it).
        self._reaping: Any = None

    # --- what the front-ends call ------------------------------------------------------------
    def ttl_ms(self, ttl: Any) -> int:
        """Return ``ttl`` (seconds) in milliseconds, checked; the largest seen sets the restart grace."""
        last = self._last_ttl
        if last[0] is ttl:  # the same object as last time (a constant at the call site): its ms
            return last[1]
        cls = type(ttl)
        if cls is float or cls is int:  # not bool: it must still be refused
            known = self._ttls_ms.get(ttl)  # the TTLs a client uses are few: checked once each
            if known is not None:
                self._last_ttl = (ttl, known)  # one tuple: a thread reads both or neither
                return known
        ttl_ms = ttl_ms_of(ttl, self._drift_factor)
        if ttl_ms > self._grace_ms and not self._fixed_grace:
            self._grace_ms = ttl_ms
        if (cls is float or cls is int) and len(self._ttls_ms) < 64:
            self._ttls_ms[ttl] = ttl_ms
        return ttl_ms

    def core(self, carrying: Sequence[Any] = (), acquiring: Optional[Tuple[Sequence[bytes], Sequence[bytes]]] = None):
        """``with executor.core(...) as core:`` a checked-out core, checked in at the block's end.

        ``carrying``: the carriers of the locks the block releases or extends; the core is the
        one that still carries their SETs if there is one (with several, each first reads its
        stragglers). ``acquiring``: ``(keys, tokens)`` the block acquires: masters are trusted
        per the restart grace, and if the block raises, the core is closed and those keys are
        released on fresh connections, best effort (any exception closes the core).
        """
        cores = {id(core): core for core in map(_carrying_core, carrying) if core is not None}
        if not cores:
            core = self.checkout()
        elif len(cores) == 1:
            core = self.checkout(next(iter(cores.values())))
        else:  # acquired through several cores: let each read its stragglers first
            for core in cores.values():
                self._settle_core(self.checkout(core))
            core = self.checkout()
        return self._use(core, acquiring)

    def release_waits(self, wait: Optional[bool]) -> bool:
        """Whether a release waits for the masters' answers: ``wait`` if given (a call's
        ``release(wait=...)``), else the client's ``wait_release``."""
        return self.wait_release if wait is None else bool(wait)

    def acquire_one(self, key: bytes, token: bytes, ttl_ms: int) -> Tuple[Any, Any]:
        """``(carrier, round)`` of one ``SET NX PX`` on every master. A failed acquisition that
        may have landed somewhere has been released (written behind its SET, not awaited).

        A round in flight (another thread's): the request rides in the next one. Else it is a
        round of its own, run here: the lean path of a thread alone.
        """
        got = self.acquire_lean(key, token, ttl_ms)
        if type(got) is tuple:
            return got
        return None, got

    def acquire_lean(self, key: bytes, token: bytes, ttl_ms: int) -> Any:
        """:meth:`acquire_one` without its tuple where it can: the round alone when its carrier is
        None (every master answered, the usual case), else the tuple ``(carrier, round)`` (a round
        is never a tuple). The sync handle's hot path (a C call: no tuple made and taken apart)."""
        combiner: Optional[Combiner] = self.combiner if self._auto_pipeline else None
        if combiner is not None and not combiner.enter():  # a round is in flight: ride in the next one
            req = Request(key, token, ttl_ms)
            combiner.submit(req)
            return _carrier(req.core, req.rnd), req.rnd
        try:
            # The dance of Executor.core(), written out: this is the hot path of a thread alone.
            core = self.checkout()
            if self._restart_aware:
                self._grace_on(core)
            try:
                if type(core) is self._c_core:  # (the Cython core: a C call, no lookup, no parsing)
                    rnd = _core_acquire(self, core, key, token, ttl_ms)  # type: ignore[name-defined]  # noqa: F821
                else:
                    rnd = core.acquire(key, token, ttl_ms)
                if not ok_of(rnd) and left_behind(rnd):
                    # A master that answered anything but a clear "no" may hold the key (an OK
                    # outside a quorum, an untrusted OK, a SET not answered yet or after its
                    # timeout). The release is written behind that SET on the same connection, so
                    # it cannot be overtaken; nobody needs its answer, so it is not awaited.
                    core.release_quiet(key, token)  # no turn given, nobody woken
            except BaseException:
                self.interrupted(core, (key,), (token,))
                raise
            self.checkin(core)
            if _outstanding(rnd):
                return (core, rnd), rnd  # (the carrier of _carrier(core, rnd))
            return rnd
        finally:
            if combiner is not None:
                combiner.leave()

    def release_one(self, key: bytes, token: bytes, carrier: Any = None) -> Tuple[Any, bool]:
        """``(round, ok)`` of one owner-checked release on every master (``ok``: a quorum still
        held ``token``), through the core that carries the acquisition's SETs while it does.
        Rides in the next shared round if one is in flight, like :meth:`acquire_one`."""
        got = self.release_lean(key, token, carrier)
        if type(got) is tuple:
            return got
        return got, ok_of(got)

    def release_lean(self, key: bytes, token: bytes, carrier: Any = None) -> Any:
        """:meth:`release_one` without its tuple where it can: the round alone when ``ok`` is the
        round's own (a round of this thread's), else the tuple ``(round, ok)`` (a round is never a
        tuple). The sync handle's hot path, like :meth:`acquire_lean`."""
        combiner: Optional[Combiner] = self.combiner if self._auto_pipeline else None
        if combiner is not None and not combiner.enter():  # a round is in flight: ride in the next one
            req = Request(key, token, 0, _carrying_core(carrier))
            combiner.submit(req)
            return req.rnd, req.ok
        try:
            core = self.checkout(None if carrier is None else _carrying_core(carrier))
            try:
                if type(core) is self._c_core:  # (as in acquire_lean)
                    rnd = _core_release(self, core, key, token)  # type: ignore[name-defined]  # noqa: F821
                else:
                    rnd = core.release(key, token)
            except BaseException:
                self.interrupted(core, None, None)
                raise
            self.checkin(core)
            return rnd
        finally:
            if combiner is not None:
                combiner.leave()

    def release_unwaited(self, key: bytes, token: bytes, carrier: Any, on_done: Callable[[Any], object],
                         acquired_at: float, was_lost: bool) -> Any:
        """Write one owner-checked release of ``key`` held with ``token`` to every master and
        return its round (every outcome PENDING) without waiting for any answer. It goes through
        the core that carries the acquisition's SETs while it does (behind them on each
        connection), else the thread's own (the next acquisition there is written behind it).
        Once its answers are in, ``on_done(entry)`` is called (by the reaper, or by :meth:`close`)
        with an :class:`~fastredlock.engine.unwaited.Entry` that also carries ``acquired_at`` and
        ``was_lost`` back (the writer's values, not read here)."""
        unwaited = self.unwaited
        if unwaited.entries:
            self._before_unwaited(unwaited)
        core = self.checkout(None if carrier is None else _carrying_core(carrier))
        try:
            rnd = core.release_nowait(key, token)
        except BaseException:
            self.interrupted(core, None, None)
            raise
        self.checkin(core)
        if unwaited.add(new_entry(on_done, rnd, core, acquired_at, was_lost)) and (
                self._reaper is None or self._reaper_asleep):
            self._wake_reaper()
        return rnd

    def release_many_unwaited(self, keys: List[bytes], tokens: List[bytes], carriers: Sequence[Any],
                              on_done: Sequence[Callable[[Any], object]], acquired_at: Sequence[float]) -> List[Any]:
        """:meth:`release_unwaited` of several held locks in one round (``release_many``): their
        rounds; each key's ``on_done[j]`` is called on its own once its answers are in."""
        unwaited = self.unwaited
        if unwaited.entries:
            self._before_unwaited(unwaited)
        with self.core(carrying=carriers) as core:
            rounds = core.release_many_nowait(keys, tokens)
        first = False
        for report, rnd, since in zip(on_done, rounds, acquired_at):
            first = unwaited.add(new_entry(report, rnd, core, since, False)) or first
        if first:
            self._wake_reaper()
        return rounds

    def _before_unwaited(self, unwaited: Any) -> None:
        """Before another release not waited for: report the earlier ones whose answers the
        rounds since have read; with too many in flight (a master stopped answering), read them
        all first rather than pile up behind it."""
        done = unwaited.done(self.on_event is None)
        if done:
            self._report(done)
        if len(unwaited.entries) >= MAX_IN_FLIGHT:
            self._reap(True)

    def release_signal(self, key: bytes, token: bytes, carrier: Any, signal: bytes, signal_ms: int) -> Tuple[Any, bool]:
        """``(round, ok)`` of one owner-checked release that also pushes to the list ``signal``
        where it deletes (see :meth:`fastredlock.Lock.release`): :meth:`release_one`'s lean path,
        never riding with other threads' releases (a shared round carries plain releases only)."""
        core = self.checkout(None if carrier is None else _carrying_core(carrier))
        try:
            rnd = core.release_signal(key, signal, token, signal_ms)
        except BaseException:
            self.interrupted(core, None, None)
            raise
        self.checkin(core)
        return rnd, rnd.ok

    def script_one(self, args: tuple, carrier: Any = None,
                   acquiring: Optional[Tuple[Sequence[bytes], Sequence[bytes]]] = None) -> Tuple[Any, Any]:
        """``(carrier, round)`` of one ``core.script(*args)`` (a plan step of the lock family, see
        :mod:`fastredlock.protocol.family`) on a checked-out core: the one that carries
        ``carrier`` while it does. ``acquiring`` as for :meth:`core`. :meth:`core`'s dance written
        out: this is the hot path of a family handle's acquisition and release."""
        core = self.checkout(None if carrier is None else _carrying_core(carrier))
        if acquiring is not None:
            self.for_acquiring(core)
        try:
            rnd = core.script(*args)
        except BaseException:
            keys, tokens = acquiring if acquiring is not None else (None, None)
            self.interrupted(core, keys, tokens)
            raise
        self.checkin(core)
        return _carrier(core, rnd), rnd

    def carrier(self, core: Any, rnd: Any) -> Any:
        """The carrier of an acquisition ``rnd`` made in a ``with executor.core(...)`` block."""
        return _carrier(core, rnd)

    def carriers(self, core: Any, rounds: Sequence[Any]) -> List[Any]:
        """:meth:`carrier` of each of a batch's ``rounds``."""
        return [_carrier(core, rnd) for rnd in rounds]

    def outcomes(self, rnd: Any, settle: bool = True) -> List[MasterOutcome]:
        """The per-master outcomes of ``rnd``, its stragglers' answers filled in first (unless
        ``settle`` is false: the asyncio front-end reads them on its loop, never blocking it)."""
        if settle and _PENDING in rnd.outcomes:
            self._settle(rnd)
        details = rnd.details or (None,) * self.n
        return [
            MasterOutcome(spec.label, oc.NAMES.get(code, str(code)), detail)
            for spec, code, detail in zip(self._specs, rnd.outcomes, details)
        ]

    def settle_time(self) -> float:
        """The longest a caller waits for a round's stragglers before their outcomes are reported."""
        return self._io_timeout + self._connect_timeout + 1.0

    def down_note(self, outcomes: Sequence[MasterOutcome]) -> str:
        """``"; a quorum was impossible: k of N masters down (a, b)"`` when it was, else ``""``."""
        down = [o.master for o in outcomes if o.outcome in _DOWN_NAMES]
        if not down or len(outcomes) - len(down) >= self.quorum:
            return ""
        return f"; a quorum was impossible: {len(down)} of {len(outcomes)} masters down ({', '.join(down)})"

    def watch(self, lock: Any) -> None:
        """Hand a freshly acquired lock to the watchdog (made on first use)."""
        watchdog = self.watchdog
        if watchdog is None:
            with self._pool_lock:
                if self.watchdog is None:
                    self.watchdog = self._new_watchdog()
                watchdog = self.watchdog
        watchdog.watch(lock)

    def unwatch(self, lock: Any) -> None:
        """Stop renewing or watching ``lock`` (a no-op if it was not watched)."""
        if self.watchdog is not None:
            self.watchdog.unwatch(lock)

    def close(self) -> None:
        """Stop the watchdog and close every connection; a later round raises ``RuntimeError``.
        Releases written without waiting are delivered first: the answers their connections still
        owe are read (bounded by their deadlines) and reported."""
        if self.unwaited and self._generation == fork_generation():
            self._reap(True)
        self._reap_event.set()  # the reaper ends (self._closed), asleep or not
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.notifier is not None:
            self.notifier.close()
        with self._pool_lock:
            pool, self._pool = self._pool, []
            self._closed = True
            self._live.clear()
        with self._returned:
            self._returned.notify_all()
        for core in pool:
            core.close()

    # --- the pool ------------------------------------------------------------------------------
    def checkout(self, carrier_core: Any = None) -> Any:
        """Take a core from the pool: ``carrier_core`` itself if given (waiting while another
        thread uses it; any core if it no longer belongs to this client), else the core this
        thread used last if it is free, else any, else a new one. Give it back with :meth:`checkin`."""
        if self._generation != fork_generation():
            self._after_fork()
        pool = self._pool
        if carrier_core is not None:
            # Usually the carrier is this thread's only core, on top: pop() it. (list.remove would
            # shrink the one-core list to nothing, and every pop() and append() after that would
            # free and allocate its storage again.) Each step is atomic under the GIL; a core
            # taken by mistake is back at once.
            if _COMPILED:  # (C: nothing runs between the look and the pop, no try needed)
                if not pool:
                    return self._wait_for(carrier_core)
                core = pool.pop()
            else:
                try:
                    core = pool.pop()
                except IndexError:
                    return self._wait_for(carrier_core)
            if core is carrier_core:
                return core
            pool.append(core)
            try:
                pool.remove(carrier_core)  # atomic under the GIL, like pop()
                return carrier_core
            except ValueError:
                return self._wait_for(carrier_core)
        if self._closed:
            raise RuntimeError("this Redlock client is closed")
        if len(pool) > 1:  # a choice: this thread's own core if free (with one, it is that or none)
            mine = getattr(self._local, "core", None)
            if mine is not None:
                try:
                    pool.remove(mine)
                    return mine
                except ValueError:
                    pass
        if _COMPILED:  # (C: the look and the pop are one step under the GIL)
            if pool:
                return pool.pop()
        else:
            try:
                return pool.pop()
            except IndexError:
                pass
        reaping = self._reaping
        if reaping is not None:  # the reaper is reading a free core's replies: a moment
            return self._wait_for(reaping)
        return self._new_core()

    def checkin(self, core: Any, clean: bool = True) -> None:
        """Give back a core; ``clean=False``: a round on it was interrupted (it is closed first)."""
        if not clean:
            core.close()  # replies may still be in flight
        if self._generation == fork_generation() and not self._closed:
            self._pool.append(core)
            if len(self._live) > 1:  # which core is whose matters only when there are several
                self._local.core = core
            if self._waiters:
                with self._returned:
                    self._returned.notify_all()
        else:
            core.close()

    def _use(self, core: Any, acquiring: Any) -> _Checkout:
        if acquiring is not None:
            self.for_acquiring(core)
        return _Checkout(self, core, acquiring)

    def for_acquiring(self, core: Any) -> None:
        """Before an acquiring round on ``core``: the restart grace it applies (restart-aware voting)."""
        if self._restart_aware:
            self._grace_on(core)

    def _grace_on(self, core: Any) -> None:
        """Set ``core.restart_grace_ms`` to the grace (a property of the core: a Python-level call)
        unless it was the last core given this very value. Only the executor sets a core's grace,
        and ``_grace_ms`` only grows (or never changes), so a stale memo never skips a change."""
        grace = self._grace_ms
        graced = self._graced
        if graced[0] is not core or graced[1] is not grace:
            core.restart_grace_ms = grace
            self._graced = (core, grace)  # one store: a thread reads both or neither

    def interrupted(self, core: Any, keys: Optional[Sequence[bytes]], tokens: Optional[Sequence[bytes]]) -> None:
        """A round on ``core`` was interrupted (KeyboardInterrupt, a bug): its SETs may have landed
        anywhere and replies may be in flight. Close the core (a late reply must not answer a later
        request), release ``keys`` (the round's acquisitions) on fresh connections, best effort,
        and check the core in; the caller re-raises."""
        core.close()
        if keys:
            try:
                core.release_many(keys, tokens)
            except Exception:  # pragma: no cover - best effort while another error propagates
                pass
        self.checkin(core, False)

    def _new_core(self) -> Any:
        core = self._core_cls(
            self._specs, self._io_timeout, self._connect_timeout, self._drift_factor, self._restart_aware,
            self.health, not self.wait_for_all,
        )
        if not self.scripts:
            core.no_scripts()
        self._live.add(core)
        return core

    def _wait_for(self, core: Any) -> Any:
        """Check out ``core`` once another thread gives it back (one round or two)."""
        pool = self._pool
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
        return self.checkout()

    def _after_fork(self) -> None:
        """In a fork child: forget the parent's connections (closing our copies of the fds only)."""
        # The parent's locks may have been held by threads that do not exist here: replace them.
        self._pool_lock = threading.Lock()
        self._returned = threading.Condition(threading.Lock())
        self._waiters = 0
        self._local = threading.local()
        self._live = set()
        pool, self._pool = self._pool, []
        self.watchdog = None  # its thread does not exist here; the parent's locks are not ours
        self.combiner = Combiner(self._run_batch, self._abandon)
        self.unwaited = Unwaited(self.n)  # the parent's releases: its own to report
        self._reaper = None
        self._reap_event = threading.Event()
        self._reaper_asleep = False
        self._reaping = None
        self.health.after_fork()
        self._generation = fork_generation()
        for core in pool:
            core.close()

    # --- releases nobody waits for (see fastredlock.engine.unwaited) ----------------------------------
    def _wake_reaper(self) -> None:
        """A release in flight and none before it: the reaper (made on first use, again after a
        fork) looks, if it is asleep (in a busy loop it is not: waking it is a Python call)."""
        if self._reaper is None:
            with self._pool_lock:
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap_loop, name="fastredlock-reaper", daemon=True)
                    self._reaper.start()
        if self._reaper_asleep:
            self._reap_event.set()

    def _reap_loop(self) -> None:
        """The reaper: while releases are in flight (and for REAP_LINGER seconds after the last
        one, so a busy loop does not wake it each time), report those whose answers are in and read
        the idle cores' (see :meth:`_reap`); asleep otherwise. It looks every REAP_EVERY seconds,
        less often (down to every REAP_SLOWEST) while each look finds the client's own rounds read
        the answers since the last (a loop of lock cycles: nothing stays owed; waking the thread
        would cost the loop more than the look finds)."""
        generation = self._generation
        event = self._reap_event
        unwaited = self.unwaited
        idle_since = monotonic()
        pause = REAP_EVERY
        fresh = True  # the first look after a wake-up: its entry was just written
        while not self._closed and generation == fork_generation():
            if not unwaited:
                now = monotonic()
                if now - idle_since < REAP_LINGER:
                    time.sleep(pause)
                    continue
                self._reaper_asleep = True  # (before looking: a release added now sets the event)
                if not unwaited:
                    event.wait()
                event.clear()
                self._reaper_asleep = False
                idle_since = monotonic()
                pause = REAP_EVERY
                fresh = True
                continue
            idle_since = monotonic()
            time.sleep(pause)
            try:
                if self._reap(False) or fresh or not unwaited.moved:
                    pause = REAP_EVERY  # replies read, or nothing moved: the client may be idle
                elif pause < REAP_SLOWEST:
                    pause = min(2 * pause, REAP_SLOWEST)  # the client's rounds read them: busy
            except Exception:  # pragma: no cover - a bug; the reaper must live on
                log.exception("fastredlock: the reaper of releases not waited for failed")
                pause = REAP_EVERY
            fresh = False

    def _reap(self, everything: bool) -> bool:
        """Report the releases whose answers are in; read the replies that free cores owe to
        releases pending since the reaper last looked (``everything``: to all of them, waiting
        until their deadlines: :meth:`close`, or too many in flight), then report again. Returns
        whether there were such replies to read."""
        unwaited = self.unwaited
        quiet = self.on_event is None
        self._report(unwaited.done(quiet))
        cores = unwaited.pending_cores() if everything else unwaited.stuck()
        for core in cores:
            try:
                self._pool.remove(core)  # free: nobody's round will read them soon
            except ValueError:
                continue  # in use (its round reads them), or gone
            self._reaping = core
            try:
                core.settle(None if everything else REAP_EVERY / 4)
            except BaseException:
                self._reaping = None
                self.checkin(core, False)
                raise
            self._reaping = None
            self.checkin(core)
        self._report(unwaited.done(quiet))
        return len(cores) > 0

    def _report(self, entries: List[Any]) -> None:
        for entry in entries:
            try:
                entry.on_done(entry)
            except Exception:
                log.exception("fastredlock: reporting a release not waited for failed (%r)", entry.on_done)

    # --- stragglers ----------------------------------------------------------------------------
    def _settle(self, rnd: Any) -> None:
        """Wait until the stragglers of ``rnd`` have been read (bounded by their deadlines).

        The core that ran the round holds their connections: take it from the pool if it is there
        and read the owed replies; if another thread is using it, that thread's round reads them.
        """
        limit = rnd.started + self._io_timeout + self._connect_timeout + 1.0
        while _PENDING in rnd.outcomes:
            for core in list(self._pool):
                if not core.pending:
                    continue
                try:
                    self._pool.remove(core)
                except ValueError:
                    continue  # another thread took it
                self._settle_core(core)
            if _PENDING not in rnd.outcomes or monotonic() >= limit:
                return
            time.sleep(0.001)

    def _settle_core(self, core: Any) -> None:
        """Read what a checked-out core's connections still owe (bounded), then give it back."""
        with self._use(core, None):
            core.settle()

    # --- combined rounds (the combiner's runner; see _combine) ---------------------------------
    def _run_batch(self, batch: List[Request]) -> None:
        """One round trip for ``batch``: its releases are written first, then its acquisitions
        (``SET NX PX``) behind them on the same connections; the acquisition round reads both."""
        acqs = [r for r in batch if r.ttl_ms]
        rels = [r for r in batch if not r.ttl_ms] if len(acqs) < len(batch) else []
        carrier = next((r.carrier for r in rels if r.carrier is not None), None)
        acquiring = ([r.key for r in acqs], [r.token for r in acqs]) if acqs else None
        with self._use(self.checkout(carrier), acquiring) as core:
            rel_rounds: List[Any] = []
            if rels:
                # With acquisitions behind them, written without waiting (as EVAL: a NOSCRIPT could
                # not be answered later); the acquisition round reads their answers first.
                release = core.release_many_nowait if acqs else core.release_many
                rel_rounds = release([r.key for r in rels], [r.token for r in rels])
            acq_rounds: List[Any] = []
            if acquiring is not None:
                acq_rounds = core.acquire_many(acquiring[0], acquiring[1], acqs[0].ttl_ms)
                failed = [r for r, rnd in zip(acqs, acq_rounds) if left_behind(rnd)]
                if failed:  # written behind their SETs, not awaited (see acquire_one)
                    core.release_many_nowait([r.key for r in failed], [r.token for r in failed])
                if rels:
                    self._await_releases(core, rel_rounds)
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

    def _await_releases(self, core: Any, rounds: List[Any]) -> None:
        """Read the answers to releases written without waiting until each is decided: a quorum
        confirmed it, or a quorum has become impossible (early decision, like an acquisition's);
        with ``wait_for_all``, until every master answered or missed its deadline. The answers
        still missing then stay owed by their connections."""
        if self.wait_for_all:
            core.settle()
            return
        quorum, n = self.quorum, self.n

        def decided() -> bool:
            return release_decided(rounds, quorum, n)

        if not decided():
            core.settle(until=decided)

    def _repair_releases(self, reqs: List[Request]) -> None:
        """Write again, and wait for, releases whose connection broke in a shared round.

        A release that rode ahead of acquisitions was not waited for, so a reused connection found
        broken (a master restarted) was reopened for the acquisitions alone. This round reopens
        and retries like any waited-for release; a master counts if either attempt deleted the key.
        """
        with self.core() as core:
            again = core.release_many([r.key for r in reqs], [r.token for r in reqs])
        for req, rnd in zip(reqs, again):
            first = req.rnd.outcomes
            req.ok = sum(1 for a, b in zip(first, rnd.outcomes) if a == oc.OK or b == oc.OK) >= self.quorum
            req.rnd = rnd if rnd.successes >= req.rnd.successes else req.rnd

    def _abandon(self, req: Request) -> None:
        """Undo an acquisition whose thread was interrupted while its round ran for it."""
        if req.ttl_ms and req.ok:
            with self._use(self.checkout(req.core), None) as core:
                core.release_nowait(req.key, req.token)
