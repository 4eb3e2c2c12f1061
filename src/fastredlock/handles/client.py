"""What the sync and the asyncio clients share: their options, checked once, and the executor
they build from them; the masters, their statistics, and the checks of a batch's names.

:class:`fastredlock.Redlock` and :class:`fastredlock.asyncio.Redlock` subclass
:class:`RedlockBase`; each adds its own (sync or awaitable) operations and its watchdog.
"""
from __future__ import annotations

import weakref
from functools import partial
from time import monotonic
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..engine.checks import MAX_NAME_BYTES, MAX_TTL, MAX_WAIT, check_number, key_of, keys_of, name_list  # noqa: F401 (MAX_*: re-exported)
from ..io.cores import core_class
from ..engine.executor import Executor
from .family import RWLock
from ..protocol.family import SEMAPHORE, inspect_reads
from ..io.masters import MasterSpec, parse_masters
from ..engine.wake import COURTESY

__all__ = ["COOLDOWN", "FENCE_RETENTION", "MAX_COOLDOWN", "MasterStats", "RedlockBase", "UNREACHABLE_TIMEOUT"]

#: Default lifetime of a fence counter after its last use, in seconds (30 days).
FENCE_RETENTION = 30 * 86400.0
#: Default first cool-down of a master that timed out or refused a connection, seconds.
COOLDOWN = 0.1
#: Default longest cool-down (it doubles at each failure in a row), seconds.
MAX_COOLDOWN = 5.0
#: Default seconds a waiting acquisition goes on while a quorum of masters cannot be reached.
UNREACHABLE_TIMEOUT = 5.0
# (MAX_TTL, MAX_NAME_BYTES and MAX_WAIT are defined in _checks and importable from here.)


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
    #: Releases not waited for (``release(wait=False)``) that this master answered "not held": the
    #: key had expired or belonged to another holder (see :meth:`fastredlock.Lock.release`).
    releases_not_held: int
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


class RedlockBase:
    """The options and the executor of a client (see :class:`fastredlock.Redlock` for them all)."""

    #: The classes of the lock family this client hands out: ``(RLock, Semaphore, ReadLock,
    #: WriteLock)`` of :mod:`fastredlock.handles.family` or of :mod:`fastredlock.asyncio.family`.
    _family: Tuple[Any, ...] = ()
    #: ``new_lock(client, name, ttl, auto_extend, max_hold, on_lost, fencing)``: the front-end's handle.
    _new_lock: Any = None

    def __init__(
        self,
        masters: Iterable[Any],
        *,
        retry_count: Optional[int] = None,
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
        on_event: Optional[Callable[[Any], object]] = None,
        same_server_ok: bool = False,
        ssl_context: Any = None,
        wake: bool = True,
        courtesy: float = COURTESY,
        wait_release: bool = True,
        unreachable_timeout: Optional[float] = UNREACHABLE_TIMEOUT,
        scripts: bool = True,
    ) -> None:
        if retry_count is not None:
            if isinstance(retry_count, bool) or not isinstance(retry_count, int):
                raise TypeError(f"retry_count must be an int or None, not {type(retry_count).__name__}")
            if retry_count < 0:
                raise ValueError(f"retry_count must be >= 0, got {retry_count}")
        #: Retries of a blocking ``acquire()`` without a timeout; None (the default): no limit, it
        #: waits until the lock is acquired (as ``threading.Lock`` and redis-py's Lock do).
        self.retry_count: Optional[int] = retry_count
        #: Seconds a blocking ``acquire()`` goes on while every attempt finds a quorum of masters
        #: unreachable, before it raises :class:`~fastredlock.QuorumUnreachableError`; None: no limit.
        self.unreachable_timeout: Optional[float] = (
            None if unreachable_timeout is None
            else check_number(unreachable_timeout, "unreachable_timeout", maximum=MAX_WAIT))
        self.retry_delay = check_number(retry_delay, "retry_delay", maximum=MAX_WAIT)
        self.retry_jitter = check_number(retry_jitter, "retry_jitter", maximum=MAX_WAIT)
        self.drift_factor = check_number(drift_factor, "drift_factor")
        if self.drift_factor >= 1.0:
            raise ValueError(f"drift_factor must be < 1, got {drift_factor}")
        self.io_timeout = check_number(io_timeout, "io_timeout", strict=True, maximum=MAX_WAIT)
        self.connect_timeout = check_number(connect_timeout, "connect_timeout", maximum=MAX_WAIT)
        if not isinstance(wait_for_all, bool):
            raise TypeError(f"wait_for_all must be a bool, not {type(wait_for_all).__name__}")
        self.wait_for_all = wait_for_all
        self.cooldown = check_number(cooldown, "cooldown", maximum=MAX_WAIT)
        self.max_cooldown = check_number(max_cooldown, "max_cooldown", maximum=MAX_WAIT)
        if self.max_cooldown < self.cooldown:
            raise ValueError(f"max_cooldown must be >= cooldown, got {max_cooldown:g} < {cooldown:g}")
        if isinstance(prefix, str):
            prefix = prefix.encode()
        elif not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        if backoff is not None and not callable(backoff):
            raise TypeError(f"backoff must be callable, not {type(backoff).__name__}")
        self.backoff = backoff
        if not isinstance(auto_pipeline, bool):
            raise TypeError(f"auto_pipeline must be a bool, not {type(auto_pipeline).__name__}")
        self.auto_pipeline = auto_pipeline
        self.restart_aware = bool(restart_aware)
        self.restart_grace = None if restart_grace is None else check_number(restart_grace, "restart_grace")
        #: Seconds a fence counter outlives its last use (fencing locks only).
        self.fence_retention = check_number(fence_retention, "fence_retention", strict=True)
        core_cls = core_class(core)
        self.core: str = "python" if core_cls.__module__.endswith("core_py") else "cython"
        if not isinstance(same_server_ok, bool):
            raise TypeError(f"same_server_ok must be a bool, not {type(same_server_ok).__name__}")
        #: Whether several dbs of one server may be masters (see :func:`fastredlock.io.masters.parse_masters`).
        self.same_server_ok = same_server_ok
        self._specs: Tuple[MasterSpec, ...] = parse_masters(masters, ssl_context, same_server_ok=same_server_ok)
        ref = weakref.ref(self)  # the watchdog must not keep the client alive
        #: The seam the handles and the watchdog run their rounds through (not for applications).
        self.executor = Executor(
            self._specs, core_cls, io_timeout=self.io_timeout, connect_timeout=self.connect_timeout,
            drift_factor=self.drift_factor, wait_for_all=wait_for_all, cooldown=self.cooldown,
            max_cooldown=self.max_cooldown, restart_aware=self.restart_aware, restart_grace=self.restart_grace,
            auto_pipeline=auto_pipeline, watchdog=lambda: self._new_watchdog(ref), scripts=self._scripts_of(scripts),
        )
        self.executor.prefix = prefix  # (kept there: a handle made reads it as a C field)
        #: Masters that must agree: ``N // 2 + 1``.
        self.quorum: int = self.executor.quorum
        self.on_event = on_event
        if not isinstance(wake, bool):
            raise TypeError(f"wake must be a bool, not {type(wake).__name__}")
        #: Whether waiting acquisitions listen for releases (see :mod:`fastredlock.engine.wake`).
        self.wake = wake
        #: Seconds a client that released a contended name holds its next attempt back.
        self.courtesy = check_number(courtesy, "courtesy", maximum=MAX_WAIT)
        if not isinstance(wait_release, bool):
            raise TypeError(f"wait_release must be a bool, not {type(wait_release).__name__}")
        self.executor.wait_release = wait_release
        if wake:
            notifier = self.executor.notifier = self._new_notifier()
            self.executor.owed = notifier.channels.released_at
            self.executor.contended = notifier.channels.contended

    def _scripts_of(self, scripts: bool) -> bool:
        if not isinstance(scripts, bool):
            raise TypeError(f"scripts must be a bool, not {type(scripts).__name__}")
        if not scripts and any(spec.cluster is not None for spec in self._specs):
            raise ValueError("scripts=False does not work with cluster masters (their commands go as scripts)")
        return scripts

    @property
    def prefix(self) -> bytes:
        """The bytes prepended to every lock name to form its key (the ``prefix`` argument, str
        encoded as UTF-8)."""
        return self.executor.prefix

    @prefix.setter
    def prefix(self, value: bytes) -> None:
        self.executor.prefix = value

    @property
    def scripts(self) -> bool:
        """Whether this client sends scripts (the ``scripts`` argument). With ``scripts=False`` it
        sends native commands only: ``SET NX PX`` to acquire, ``SET ... IFEQ ... PX`` to extend,
        ``DELIFEQ``/``DELEX ... IFEQ`` to release (Valkey >= 9.0, Redis >= 8.4); what needs a
        script (fencing, the lock family, turns, ``signal=`` releases) raises
        :class:`~fastredlock.ScriptsRefusedError` at once, and a master without a native
        owner-checked delete is never asked to take a lock. The same holds, per master, where a
        master refuses scripts to the client's user (an ACL without ``@scripting``)."""
        return bool(self.executor.scripts)

    @property
    def wait_release(self) -> bool:
        """Whether a lock's ``release()`` (and a ``with`` block's end) waits for the masters'
        answers when not told (``release(wait=...)``); settable at any time."""
        return bool(self.executor.wait_release)

    @wait_release.setter
    def wait_release(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"wait_release must be a bool, not {type(value).__name__}")
        self.executor.wait_release = value

    @property
    def on_event(self) -> Optional[Callable[[Any], object]]:
        """The hook called with a :class:`fastredlock.events.LockEvent` for each acquisition,
        refusal, extension, release and loss of this client's locks, or None (the default: then
        it costs nothing). Settable at any time; see :mod:`fastredlock.events`."""
        return self.executor.on_event

    @on_event.setter
    def on_event(self, hook: Optional[Callable[[Any], object]]) -> None:
        if hook is not None and not callable(hook):
            raise TypeError(f"on_event must be callable, not {type(hook).__name__}")
        self.executor.on_event = hook

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
        return [MasterStats(spec.label, *row) for spec, row in zip(self._specs, self.executor.health.snapshot(now))]

    def lock(
        self,
        name: Union[str, bytes],
        ttl: float = 10.0,
        *,
        auto_extend: bool = False,
        max_hold: Optional[float] = None,
        on_lost: Optional[Callable[[Any], object]] = None,
        fencing: bool = False,
    ) -> Any:
        """Return a handle for the lock called ``name`` held for ``ttl`` seconds; nothing is sent yet.

        :param auto_extend: the client's watchdog renews the lock about every ``ttl / 3`` while it
            is held (all such locks of a client share one thread and one round per tick).
        :param max_hold: with ``auto_extend``, stop renewing this many seconds after acquisition.
        :param on_lost: ``on_lost(lock)`` runs (on the watchdog thread, or task: an async callable
            is awaited) if the lock is lost while held: a renewal failed, its validity ran out, or a
            release whose caller was cancelled found it gone.
        :param fencing: take a fencing token at each acquisition (:attr:`Lock.fence`, strictly
            increasing across holders of the name; one extra round).
        """
        return self._new_lock(self, name, ttl, auto_extend, max_hold, on_lost, fencing)

    def rlock(self, name: Union[str, bytes], ttl: float = 10.0, *, auto_extend: bool = False,
              max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None) -> Any:
        """Return the reentrant lock called ``name`` (:class:`fastredlock.RLock`): its owner (the
        thread; for asyncio, the task) may acquire it again while it holds it, each acquisition
        needs its release; nothing is sent yet. Options as for ``lock``."""
        return self._family[0](self, name, ttl, auto_extend=auto_extend, max_hold=max_hold, on_lost=on_lost)

    def semaphore(self, name: Union[str, bytes], limit: int, ttl: float = 10.0, *, auto_extend: bool = False,
                  max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None) -> Any:
        """Return a handle on one permit of the counting semaphore ``name`` with ``limit`` permits
        (:class:`fastredlock.Semaphore`); nothing is sent yet. Options as for ``lock``."""
        return self._family[1](self, name, limit, ttl, auto_extend=auto_extend, max_hold=max_hold, on_lost=on_lost)

    def rwlock(self, name: Union[str, bytes], ttl: float = 10.0, *, auto_extend: bool = False,
               max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None) -> Any:
        """Return the read-write lock ``name`` (:class:`fastredlock.RWLock`): its ``.read`` and
        ``.write`` handles (options for both as for ``lock``); nothing is sent yet."""
        # The write handle is made when first asked for (a reader alone never pays for one); the
        # read handle checks the arguments now. (No options passed on where all are the defaults:
        # a reader's handle is made for each use, and keywords cost it a dict per call.)
        options: Any = ({"auto_extend": auto_extend, "max_hold": max_hold, "on_lost": on_lost}
                        if auto_extend or max_hold is not None or on_lost is not None else {})
        return RWLock(self._family[2](self, name, ttl, **options),
                      make_write=partial(self._family[3], self, name, ttl, **options))

    def _family_reads(self, name: Union[str, bytes], kind: str, limit: int) -> List[tuple]:
        """The reads of an inspection of a family lock (checked: the kind, a semaphore's limit)."""
        if kind == SEMAPHORE and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000):
            raise ValueError(f"inspecting a semaphore needs its limit (1 to 1000), got {limit!r}")
        return inspect_reads(kind, key_of(self.prefix, name), limit)

    def _batch_args(self, names: Sequence[Union[str, bytes]], ttl: float) -> Tuple[List[Any], List[bytes], int]:
        """The names of a batch as a list, their keys and the TTL in ms, checked once for the batch."""
        names = name_list(names)
        ttl_ms = self.executor.ttl_ms(ttl)
        return names, keys_of(self.prefix, names), ttl_ms

    def _new_notifier(self) -> Any:
        """The notifier of this client's waiters (one connection per master, made on first use)."""
        raise NotImplementedError

    def _new_watchdog(self, ref: "weakref.ref[Any]") -> Any:
        """A new watchdog for the client ``ref()`` (the executor makes one on first use)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Redlock(masters={list(self.masters)!r}, quorum={self.quorum}, core={self.core!r})"
