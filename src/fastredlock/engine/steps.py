"""The steps a lock operation's plan yields, and what each driver does with them.

A lock operation (acquire with its retries, the queued, fenced and family attempts, release,
extend, adopt, lose) is written once, in :mod:`fastredlock.handles.lock`, as a *plan*: a generator that
yields the steps below and receives each step's result. The sync driver
(:func:`fastredlock.sync.lock.drive`) runs a step with the client's executor and sleeps with
``threading``; the asyncio driver (:func:`fastredlock.asyncio.lock.drive`) awaits it on the
client's loop. Neither decides anything: every rule is in the plan.

A *job* is a plan of its own that needs one core alone for several rounds in a row (the fenced
acquisition's two rounds, a queued attempt and its clean-up): it yields :class:`Call` steps and
returns its result; its driver runs it on one checked-out core (sync) or as one job of the asyncio
executor.

Steps that undo something (a release; an acquisition's clean-up) are *protected*: once asked for,
they reach the masters even if the caller is cancelled or interrupted meanwhile (see the drivers).
"""
from __future__ import annotations

from typing import Any, Generator, Tuple

__all__ = ["Acquire", "Await", "Background", "Batch", "Call", "Done", "Job", "Op", "Release", "ReleaseUnwaited", "Settle",
           "Sleep", "Wait", "Waiter", "advance"]


class Acquire:
    """One ``SET key token NX PX ttl_ms`` on every master, riding with other callers' rounds.
    Result: ``(carrier, round)`` (the carrier is None on the asyncio side)."""

    __slots__ = ("key", "token", "ttl_ms")

    def __init__(self, key: bytes, token: bytes, ttl_ms: Any) -> None:
        self.key = key
        self.token = token
        self.ttl_ms = ttl_ms


class Release:
    """One owner-checked release of ``key`` held with ``token`` on every master (protected).
    ``signal``: ``(list key, ms)`` to push to in the same script, or None. Result: ``(round, ok)``."""

    __slots__ = ("key", "token", "carrier", "signal")

    def __init__(self, key: bytes, token: bytes, carrier: Any, signal: Any = None) -> None:
        self.key = key
        self.token = token
        self.carrier = carrier
        self.signal = signal


class Op:
    """One core operation ``op(*args)`` alone (a family script, an extension), on the core that
    carries ``carrier`` if it still does. ``protected``: it undoes a hold (a release).
    ``acquiring``: ``(keys, tokens)`` it may take, as for :class:`Job`, and ``undo`` then the step
    that releases them if its caller is gone when it holds. Result: ``(carrier, round)``."""

    __slots__ = ("op", "args", "carrier", "protected", "acquiring", "undo")

    def __init__(self, op: str, args: tuple, carrier: Any = None, protected: bool = False,
                 acquiring: Any = None, undo: Any = None) -> None:
        self.op = op
        self.args = args
        self.carrier = carrier
        self.protected = protected
        self.acquiring = acquiring
        self.undo = undo


class Call:
    """A step of a job: core operation ``op(*args)`` on the job's core. Result: what the core
    returns (a round, or a list of rounds)."""

    __slots__ = ("op", "args")

    def __init__(self, op: str, *args: Any) -> None:
        self.op = op
        self.args = args


class Job:
    """Run ``plan`` (a generator of :class:`Call` steps returning ``(ok, round)``) with one core
    alone. ``acquiring``: ``(keys, tokens)`` it may take (the restart grace applies; an interrupted
    job releases them). ``undo``: the step that releases what it took, run in the background if it
    held (``ok``) when its caller was already gone. Result: ``(ok, round, carrier)``."""

    __slots__ = ("plan", "acquiring", "undo")

    def __init__(self, plan: Generator[Call, Any, Tuple[bool, Any]], acquiring: Any, undo: Any = None) -> None:
        self.plan = plan
        self.acquiring = acquiring
        self.undo = undo


class Batch:
    """The rounds of a batch operation (``acquire_many``, ``lock_all``, ``release_many``, see
    :mod:`fastredlock.handles.batch`): ``plan``, a generator of :class:`Call` steps returning a
    list of rounds (one per key), run with one core alone. ``acquiring``: ``(keys, tokens)`` it may
    take (the restart grace applies; interrupted, they are released; if its caller is gone when
    it is done, the keys whose round held are released). ``carrying``: the carriers of the locks
    it releases. Result: ``(rounds, carriers)``, a carrier per round (None on the asyncio side)."""

    __slots__ = ("plan", "acquiring", "carrying")

    def __init__(self, plan: Generator[Call, Any, Any], acquiring: Any, carrying: Any = ()) -> None:
        self.plan = plan
        self.acquiring = acquiring
        self.carrying = carrying


class ReleaseUnwaited:
    """A batch release not waited for: ``release_many_unwaited`` of the executor (sync or asyncio)
    with these arguments; ``written(rounds)`` once it is written (on the asyncio side, also if its
    caller was cancelled meanwhile: it goes out anyway). Result: None."""

    __slots__ = ("keys", "tokens", "carriers", "on_done", "acquired_at", "written")

    def __init__(self, keys: Any, tokens: Any, carriers: Any, on_done: Any, acquired_at: Any, written: Any) -> None:
        self.keys = keys
        self.tokens = tokens
        self.carriers = carriers
        self.on_done = on_done
        self.acquired_at = acquired_at
        self.written = written


class Wait:
    """Wait until ``event`` is set or ``delay`` seconds passed, then clear it. Result: whether it
    was set (a release of the name was heard)."""

    __slots__ = ("event", "delay")

    def __init__(self, event: Any, delay: float) -> None:
        self.event = event
        self.delay = delay


class Sleep:
    """Sleep ``delay`` seconds. Result: None."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Settle:
    """The outcomes of ``rnd`` once its stragglers answered (or their deadlines passed). Result:
    a list of :class:`~fastredlock.errors.MasterOutcome`."""

    __slots__ = ("rnd",)

    def __init__(self, rnd: Any) -> None:
        self.rnd = rnd


class Background:
    """Run ``step`` without waiting for it (a clean-up while the operation is being abandoned:
    its caller raised or was cancelled). Errors are logged, not raised. Result: None."""

    __slots__ = ("step",)

    def __init__(self, step: Any) -> None:
        self.step = step


class Await:
    """Await ``awaitable`` (an async ``on_lost`` callback's result; the sync driver closes a
    coroutine it is handed, with a warning). Result: None."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable


class Waiter:
    """What a front-end's notifier hands a lock that listens for releases of its name (``join``).

    ``channel``: the name's wake channel; ``event``: set when a release is heard; ``since``: when
    it joined (monotonic: the longest waiting go first); ``member``/``score``: its place in the
    masters' queues (see :meth:`fastredlock.engine.wake.Channels.member`).
    """

    __slots__ = ("channel", "event", "since", "member", "score")

    def __init__(self, channel: bytes, event: Any, since: float, member: bytes, score: Any) -> None:
        self.channel = channel
        self.event = event
        self.since = since
        self.member = member
        self.score = score


class Done:
    """What :func:`advance` returns once the plan returned: its result is ``value``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def advance(plan: Generator[Any, Any, Any], value: Any, error: Any) -> Any:
    """The plan's next step, given the last step's result ``value`` (or its exception ``error``,
    thrown into the plan); :class:`Done` once the plan returned. A driver's one move."""
    try:
        return plan.send(value) if error is None else plan.throw(error)
    except StopIteration as stop:
        return Done(stop.value)
