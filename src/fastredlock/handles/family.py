# cython: annotation_typing=False
"""The lock family's plans: reentrant locks, read-write locks and counting semaphores over N masters.

Their rules (scripts, keys, the safety arguments) are :mod:`fastredlock.protocol.family`'s. The plan
mixins (``RLockPlan``, ``PermitPlan``, ``ReadPlan``, ``WritePlan``) say what to send, what a round
means, and hold each operation's plan (see :mod:`fastredlock.handles.lock`); a handle of either
front-end mixes them in (:mod:`fastredlock.sync.family`, :mod:`fastredlock.asyncio.family`) and its
rounds are then the plan's (``_family_kind``). The handle's ``key`` is the key whose wake channel its
releases publish on (waiters listen there). :class:`RLockBase` is the reentrant lock's owner logic and
:class:`RWLock` the pair of handles, shared the same way.
"""
from __future__ import annotations

import random
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

from ..errors import LockError
from ..engine.steps import Call, Job, Op, Settle
from ..protocol.family import (
    CoreStep, ACQUIRE_MANY, PERMIT_RELEASE, READ_ACQUIRE, READ_EXTEND, READ_RELEASE, RELEASE_MANY_NOWAIT, RLOCK_ACQUIRE, RLOCK_EXTEND, RLOCK_RELEASE, SCRIPT, WRITE_ACQUIRE, choose_permit, ms, owner_step, permit_keys, permit_leftovers, renewal_ms, script_template, tagged, template_step,
)
from ..protocol.replies import KIND_SCRIPT, KIND_SCRIPT_ACQUIRE
from ..protocol.plans import left_behind
from ..protocol.scripts import EXTEND, RELEASE_FULL
from ..engine.tokens import new_token

if TYPE_CHECKING:  # type names only
    from .client import RedlockBase as Redlock

__all__ = ["PermitPlan", "RLockBase", "RLockPlan", "RWLock", "ReadPlan", "WritePlan", "mark_ms"]

Step = CoreStep


def _rounds(result: Any) -> List[Any]:
    """A core operation's result as a list of rounds (``script`` returns one round)."""
    return result if isinstance(result, list) else [result]


#: What each name's handles share, made once per name: a handle is made for each use (as
#: ``dlm.rwlock(name).read`` is), so its keys and script templates are not remade each time.
_SHARED: Dict[Any, tuple] = {}


def _shared(kind: str, base: bytes, make: Callable[..., tuple], extra: Any = None) -> tuple:
    """``make(base)``, kept for the next handle of ``kind`` on the key ``base`` (a bounded cache)."""
    entry = (kind, base, extra)
    found = _SHARED.get(entry)
    if found is None:
        if len(_SHARED) >= 4096:  # names used once: start again rather than grow
            _SHARED.clear()
        found = _SHARED[entry] = make(base) if extra is None else make(base, extra)
    return found


def _no_wait(step: Step) -> Step:
    """A script step written behind what came before, not awaited (a cleanup)."""
    op, args = step
    return CoreStep(op, args[:len(args) - 1] + (False,))  # (no negative index: compiled without wraparound)


# --- the plans (what each kind sends, and what a round means) -----------------------------------------
if TYPE_CHECKING:  # the mixins are only ever mixed with a handle: type them as one
    from .lock import LockBase as _Handle
else:
    _Handle = object


class _Plan(_Handle):
    """The defaults of a plan: one script round per acquisition; a failed one that may have landed
    somewhere is cleaned up by the kind's release, written behind it."""

    #: Whether an attempt is always one script round decided by the default :meth:`_granted`
    #: (the front-end then takes its lean path).
    _one_round = True

    def _acquire_step(self, token: bytes) -> Step:
        raise NotImplementedError

    def _release_step(self, token: bytes) -> Step:
        raise NotImplementedError

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Step:
        raise NotImplementedError

    def _family_init(self) -> None:
        """Called by each kind's ``__init__`` after the handle's: the rounds are the plan's."""
        self._family_kind = True
        self._base = self.key  # the name's key; the kind's keys carry its hash tag

    def _plain_keys(self, token: bytes) -> Tuple[List[bytes], List[bytes]]:
        """``(keys, tokens)`` an attempt may set that the plain owner-checked release undoes (the
        executor releases them if the attempt is interrupted); the others expire on their TTL."""
        return [], []

    def _granted(self, rounds: List[Any], token: bytes) -> Tuple[bool, Any, List[Step], Optional[Step]]:
        """``(held, the round that says so, cleanup steps, the attempt's next step or None)`` of
        an attempt's rounds."""
        rnd = rounds[0]
        if not left_behind(rnd):
            return bool(rnd.ok), rnd, [], None
        return False, rnd, [_no_wait(self._release_step(token))], None

    # --- the plans (both front-ends run them; see fastredlock.handles.lock) ---------------------------
    def _attempt_family(self, token: bytes) -> Any:
        """One attempt: the kind's rounds; a failure that may have landed somewhere is released
        behind them, not awaited. Returns whether it holds."""
        undo = lambda: Op(*self._release_step(token), None, True)  # noqa: E731 (made only if needed)
        if self._one_round:
            # One script round decided by the default _granted: the executor's lean path.
            op, args = self._acquire_step(token)
            carrier, rnd = yield Op(op, args, None, False, self._plain_keys(token), undo)
            ok = bool(rnd.ok)
            if left_behind(rnd):
                op, args = _no_wait(self._release_step(token))
                yield Op(op, args, carrier)
        else:
            ok, rnd, carrier = yield Job(self._family_job(token), self._plain_keys(token), undo)
        self._last = rnd
        if ok:
            self._valid_until = rnd.valid_until
            self._carrier = carrier
        return ok

    def _family_job(self, token: bytes) -> Any:
        """The rounds of an attempt of several steps, on one core: ``(held, its round)``."""
        step: Optional[Step] = self._acquire_step(token)
        while step is not None:
            rounds = _rounds((yield Call(step[0], *step[1])))
            ok, rnd, cleanup, step = self._granted(rounds, token)
            for op, args in cleanup:
                yield Call(op, *args)
        return ok, rnd


class RLockPlan(_Plan):
    """A reentrant lock's hash: first acquisition with count 1 (the key must be absent)."""

    count: int

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)  # type: ignore[call-arg]
        self._rlock_init()

    def _reenter_plan(self) -> Any:
        """One round that counts one more entry (and renews the TTL); False (the count rolled back
        where it was written) if a quorum did not confirm it."""
        token = self._require_token()
        _carrier, rnd = yield Op(*self._count_step(token, self.count + 1), self._carrier)
        if self._entered(rnd):
            return True
        yield Op(*self._leave_step(token, self.count, False), self._carrier)
        return False

    def _leave_plan(self) -> Any:
        """One round that counts one entry less (the count stays above zero; protected)."""
        token = self._require_token()
        self.count -= 1
        _carrier, rnd = yield Op(*self._leave_step(token, self.count), self._carrier, True)
        self._last = rnd
        if not rnd.ok:
            raise self._release_unconfirmed(rnd, (yield Settle(rnd)))

    def _rlock_init(self) -> None:
        self._family_init()
        self.key, self._acquire_tpl, self._release_tpl = _shared("rlock", self._base, _rlock_shared)
        #: How many times the owner entered (0 when not held).
        self.count = 0
        #: A weak reference to the owner (thread or task) holding it (set by RLock), or None.
        self._owner_ref: Any = None

    def _acquire_step(self, token: bytes) -> Step:
        return self._count_step(token, 1)

    def _count_step(self, token: bytes, count: int) -> Step:
        """Hold the lock with ``count`` (a first acquisition, or a re-entry with count + 1)."""
        ttl_ms = self._ttl_ms
        return template_step(self._acquire_tpl, (token, ms(ttl_ms), ms(count)), ttl_ms)

    def _entered(self, rnd: Any) -> bool:
        """Take a re-entry's round: on a quorum the count grows and the validity starts again."""
        self._last = rnd
        if not rnd.ok:
            return False
        self.count += 1
        self._valid_until = rnd.valid_until
        return True

    def _release_step(self, token: bytes) -> Step:
        return self._leave_step(token, 0)

    def owner_gone(self) -> bool:
        """Whether the owner holding it ended (a thread exited, a task finished) without releasing:
        the watchdog then stops renewing it, and it expires within its TTL (``on_lost`` is called
        then), since nobody is left to release it."""
        ref = self._owner_ref
        if ref is None:
            return False
        owner = ref()
        if owner is None:
            return True
        done = getattr(owner, "done", None)  # an asyncio task
        return done is not None and done()

    def _leave_step(self, token: bytes, left: int, wait: bool = True) -> Step:
        """Hold on with ``left`` entries (0: the key goes and waiters wake)."""
        return template_step(self._release_tpl, (token, ms(left)), 0, wait)

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Step:
        return owner_step(RLOCK_EXTEND, [self.key], [token, ms(ttl_ms)], ttl_ms)


def _rlock_shared(base: bytes) -> tuple:
    """A reentrant lock's key and the templates of its acquisition and release."""
    key = tagged(base, b":rlock")
    return key, script_template(KIND_SCRIPT_ACQUIRE, RLOCK_ACQUIRE, [key]), script_template(KIND_SCRIPT, RLOCK_RELEASE, [key])


class PermitPlan(_Plan):
    """A semaphore's permit slots: ``SET NX`` on every slot in one round; a quorum on one slot holds."""

    limit: int
    slot: Optional[int]
    _slots: List[bytes]
    _one_round = False  # a probe, then maybe every slot (its own _granted)

    def __init__(self, client: Any, name: Union[str, bytes], limit: int, ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)  # type: ignore[call-arg]
        self._permit_init(limit)

    def _permit_init(self, limit: Any) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be an int, not {type(limit).__name__}")
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be between 1 and 1000, got {limit}")
        self._family_init()
        #: How many permits the semaphore has.
        self.limit = limit
        #: Which permit slot the current (or last) acquisition holds, or None.
        self.slot = None
        self._slots, self.key, self._release_tpls = _shared("semaphore", self._base, _permit_shared, limit)

    def _acquire_step(self, token: bytes) -> Step:
        # First a probe of one slot (the one this handle held last, else one at random): alone,
        # a permit costs what a plain lock does. Refused, the same attempt tries every slot.
        if self.slot is None:
            self.slot = random.randrange(self.limit)
        return CoreStep(ACQUIRE_MANY, ([self._slots[self.slot]], [token], self._ttl_ms))

    def _plain_keys(self, token: bytes) -> Tuple[List[bytes], List[bytes]]:
        return self._slots, [token] * self.limit

    def _granted(self, rounds: List[Any], token: bytes) -> Tuple[bool, Any, List[Step], Optional[Step]]:
        if len(rounds) == 1 and self.limit > 1:  # the probe of slot self.slot
            rnd = rounds[0]
            if rnd.ok:
                return True, rnd, [], None
            cleanup = [_no_wait(self._release_step(token))] if left_behind(rnd) else []
            return False, rnd, cleanup, CoreStep(ACQUIRE_MANY, (self._slots, [token] * self.limit, self._ttl_ms))
        held = choose_permit(rounds, random.randrange(len(rounds)))
        left = permit_leftovers(rounds, held)
        cleanup = [CoreStep(RELEASE_MANY_NOWAIT, ([self._slots[i] for i in left], [token] * len(left)))] if left else []
        if held < 0:
            return False, max(rounds, key=lambda rnd: rnd.successes), cleanup, None
        self.slot = held
        return True, rounds[held], cleanup, None

    def _release_step(self, token: bytes) -> Step:
        slot = self.slot or 0
        templates = self._release_tpls  # the name's, made once per slot
        template = templates[slot]
        if template is None:
            template = templates[slot] = script_template(KIND_SCRIPT, PERMIT_RELEASE, [self._slots[slot], self.key])
        return template_step(template, (token,))

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Step:
        return owner_step(EXTEND, [self._slots[self.slot or 0]], [token, ms(ttl_ms)], ttl_ms)


def _permit_shared(base: bytes, limit: int) -> tuple:
    """A semaphore's permit slots, its wake key (never written: its channel), and each slot's
    release template, made at the slot's first release."""
    return permit_keys(base, limit), tagged(base, b":semaphore"), [None] * limit


class _RWPlan(_Plan):
    """The keys of a read-write lock: the write key (also its wake key), the readers' set, the
    writer's mark, and the prefix of the readers' share keys (``{key}:read:<token>``)."""

    _readers: bytes
    _mark: bytes
    _shares: bytes

    def _rw_init(self) -> None:
        self._family_init()
        make = _rw_write_shared if self._writes else _rw_read_shared
        self.key, self._readers, self._mark, self._shares, self._acquire_tpl, self._release_tpl = _shared(
            "rwlock-write" if self._writes else "rwlock-read", self._base, make)

    _writes = False  # which side: the templates it takes


def _rw_keys(base: bytes) -> Tuple[bytes, bytes, bytes, bytes]:
    """A read-write lock's keys: write, readers, mark, and the share keys' prefix."""
    return tagged(base, b":write"), tagged(base, b":readers"), tagged(base, b":writer-waiting"), tagged(base, b":read:")


def _rw_read_shared(base: bytes) -> tuple:
    """The keys and a reader's (acquisition, release) templates (each side makes only its own:
    a name used once costs one side's)."""
    write, readers, mark, shares = keys = _rw_keys(base)
    return keys + (script_template(KIND_SCRIPT_ACQUIRE, READ_ACQUIRE, [write, readers, mark], 1),
                   script_template(KIND_SCRIPT, READ_RELEASE, [readers, write, mark], 1))


def _rw_write_shared(base: bytes) -> tuple:
    """The keys and a writer's (acquisition, release) templates."""
    write, readers, mark, shares = keys = _rw_keys(base)
    return keys + (script_template(KIND_SCRIPT_ACQUIRE, WRITE_ACQUIRE, [write, readers, mark]),
                   script_template(KIND_SCRIPT, RELEASE_FULL, [write]))


class ReadPlan(_RWPlan):
    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)  # type: ignore[call-arg]
        self._rw_init()

    """A reader's share: its own key (``{key}:read:<token>``), its token listed in the readers' set.
    (The templates' key lists end before the share key: each step names it, then the arguments.)"""

    def _acquire_step(self, token: bytes) -> Step:
        ttl_ms = self._ttl_ms
        return template_step(self._acquire_tpl, (self._shares + token, token, ms(ttl_ms)), ttl_ms)

    def _release_step(self, token: bytes) -> Step:
        return template_step(self._release_tpl, (self._shares + token, token))

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Step:
        return owner_step(READ_EXTEND, [self._readers, self._shares + token], [token, ms(ttl_ms)], ttl_ms)


class WritePlan(_RWPlan):
    """A writer: the write key, taken when no reader is live; else it leaves its waiting mark."""

    _mark_id: bytes
    _mark_ms: int

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)  # type: ignore[call-arg]
        self._write_init()

    def _gave_up(self, waiter: Any) -> Any:
        """A writer that gives up clears its mark (new readers are let in again). (Its attempts
        are never queued: no ``waiter`` to take out of the queues.)"""
        op, args = self._unmark_step()
        _carrier, _rnd = yield Op(op, args)

    def _write_init(self) -> None:
        self._rw_init()
        self._mark_id = new_token()
        self._mark_ms = mark_ms(self._client)
        self._mark_arg = ms(self._mark_ms)

    _writes = True

    def _acquire_step(self, token: bytes) -> Step:
        ttl_ms = self._ttl_ms
        return template_step(self._acquire_tpl, (token, ms(ttl_ms), self._mark_arg, self._mark_id, self._shares),
                             ttl_ms)

    def _plain_keys(self, token: bytes) -> Tuple[List[bytes], List[bytes]]:
        return [self.key], [token]

    def _release_step(self, token: bytes) -> Step:
        return template_step(self._release_tpl, (token,))

    def _extend_step(self, token: bytes, ttl_ms: Any) -> Step:
        return owner_step(EXTEND, [self.key], [token, ms(ttl_ms)], ttl_ms)

    def _unmark_step(self) -> Step:
        """Clear this writer's waiting mark where it is still there (it gave up)."""
        return owner_step(RELEASE_FULL, [self._mark], [self._mark_id], 0, False)


def mark_ms(client: Any) -> int:
    """How long a waiting writer's mark lasts (it renews the mark at each attempt; a writer killed
    while waiting blocks new readers no longer): see :func:`~.protocol.family.renewal_ms`."""
    return renewal_ms(client.retry_delay, client.retry_jitter, client.io_timeout)


class RWLock:
    """A read-write lock: :attr:`read` and :attr:`write` are its two handles (each with the
    :class:`Lock` API); get one from :meth:`Redlock.rwlock`. Take one per thread.

    ``write`` may be None if ``make_write`` is given: a callable that makes the write handle when
    :attr:`write` is first read (a reader alone never pays for one)."""

    __slots__ = ("read", "_write", "_make_write")

    def __init__(self, read: Any, write: Any = None, make_write: Optional[Callable[[], Any]] = None) -> None:
        if write is None and make_write is None:
            raise TypeError("RWLock needs its write handle, or make_write")
        #: The read handle: shared with other readers, never with a writer.
        self.read = read
        self._write = write
        self._make_write = make_write

    @property
    def write(self) -> Any:
        """The write handle: exclusive."""
        write = self._write
        if write is None:
            write = self._write = self._make_write()  # type: ignore[misc]
        return write

    def __repr__(self) -> str:
        return f"<RWLock read={self.read!r} write={self.write!r}>"


class _Owner:
    """A thread as the owner of reentrant locks: one per thread, kept in a ``threading.local``, so
    it dies with its thread. (A thread id would not do: the id of a thread that exited is given to
    the next new thread, which would then be taken for the owner of the dead thread's holds.)"""

    __slots__ = ("__weakref__",)


_threads = threading.local()


def _thread_owner() -> _Owner:
    """The calling thread's :class:`_Owner`."""
    try:
        return _threads.owner
    except AttributeError:
        owner = _threads.owner = _Owner()
        return owner


class RLockBase:
    """A reentrant lock: its owner (the thread that acquired it; for asyncio, the task) may acquire
    it again while it holds it, and each acquisition needs its release; the lock is freed on the
    masters when the count reaches zero. Get one from :meth:`Redlock.rlock`.

    Every :class:`RLock` of a client for one name shares the owners' holds, so nested code that
    calls ``dlm.rlock(name)`` again re-enters. Another owner (thread, task, process) is refused as
    any other client is. The methods act for the calling owner.
    """

    #: The class of an owner's hold (a sync or asyncio lock handle mixed with RLockPlan).
    _hold_class: Any = None

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, *, auto_extend: bool = False,
                 max_hold: Optional[float] = None, on_lost: Optional[Callable[[Any], object]] = None) -> None:
        self._client = client
        self._options = {"auto_extend": auto_extend, "max_hold": max_hold, "on_lost": on_lost}
        probe = self._hold_class(client, name, ttl, **self._options)  # checks the arguments once
        #: The name as given.
        self.name = name
        #: Seconds each acquisition (and re-entry) holds it for.
        self.ttl = float(ttl)
        #: The key written on the masters (a hash: owner, count).
        self.key: bytes = probe.key
        self._spare = probe  # a fresh hold: the first acquisition takes it (see _new_hold)
        # owner -> {key: its hold}; an owner's entry goes with the owner (a thread that exited, a
        # task that finished), never read by another owner
        self._holds: Any = client.__dict__.setdefault("_rlock_holds", weakref.WeakKeyDictionary())

    #: The calling owner (weakly referable; it lives as long as the thread or task).
    _owner = staticmethod(_thread_owner)

    def _hold(self) -> Any:
        """The calling owner's hold (held or lost), or None."""
        holds = self._holds.get(self._owner())
        return None if holds is None else holds.get(self.key)

    def _new_hold(self) -> Any:
        spare = self.__dict__.pop("_spare", None)  # one atomic step: two threads never share it
        if spare is not None:
            return spare
        return self._hold_class(self._client, self.name, self.ttl, **self._options)

    def _held(self, hold: Any) -> bool:
        return hold is not None and hold.token is not None and not hold._lost

    def _mine(self) -> Any:
        hold = self._hold()
        if hold is None or hold.token is None:
            raise LockError(f"reentrant lock {self.name!r} is not held by this owner", self.name)
        return hold

    def _acquire_plan(self, blocking: bool, timeout: Optional[float]) -> Any:
        """Acquire it, or enter it once more if the caller holds it already (one round; a re-entry
        that a quorum did not confirm returns False and the count stays)."""
        hold = self._hold()
        if self._held(hold):
            return (yield from hold._reenter_plan())
        hold = self._new_hold()
        if not (yield from hold._acquiring(blocking, timeout)):
            self._last = hold
            return False
        self._took(hold)
        return True

    def _took(self, hold: Any) -> None:
        """The caller's first acquisition succeeded: it holds once."""
        hold.count = 1
        owner = self._owner()
        hold._owner_ref = weakref.ref(owner)
        holds = self._holds.get(owner)
        if holds is None:
            holds = self._holds[owner] = {}
        holds[self.key] = hold

    def _drop(self, hold: Any) -> None:
        """The caller's last entry is being released: forget its hold."""
        del self._holds[self._owner()][self.key]
        hold.count = 0

    def _release_plan(self) -> Any:
        """Leave it once; the last release frees it on the masters (and wakes waiters)."""
        hold = self._mine()
        if hold.count > 1:
            yield from hold._leave_plan()
            return
        self._drop(hold)
        yield from hold._release_plan()

    @property
    def count(self) -> int:
        """How many times the caller entered it (0: not held by the caller)."""
        hold = self._hold()
        return hold.count if self._held(hold) else 0

    @property
    def validity(self) -> float:
        """Seconds the caller can still rely on holding it (0.0 when not held)."""
        hold = self._hold()
        return hold.validity if hold is not None else 0.0

    def locked(self) -> bool:
        """Whether the caller holds it with validity left (a local check)."""
        hold = self._hold()
        return hold is not None and hold.locked()

    @property
    def outcomes(self) -> List[Any]:
        """What each master answered in the caller's last round."""
        hold = self._hold() or getattr(self, "_last", None)
        return hold.outcomes if hold is not None else []

    def __repr__(self) -> str:
        return f"<RLock {self.name!r} ttl={self.ttl:g}s count={self.count}>"


