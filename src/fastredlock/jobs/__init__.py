"""Single-run jobs: a job that must not run twice at once, wherever it runs.

::

    from fastredlock import Redlock, jobs

    dlm = Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])

    @jobs.single_run(dlm, key_args=["day"], ttl=30)
    def nightly_report(day):
        ...

    nightly_report("2026-11-27")   # runs; or, if another process runs it for that day, returns jobs.SKIPPED

:func:`single_run` works with any job runner (RQ, Dramatiq, APScheduler, Huey, cron scripts: see
``docs/guides/jobs.md``), as a decorator or a ``with`` block, for plain and ``async def`` jobs.
What a run does:

- **The key**: the job's name (default: the function's ``module.qualname``), followed, when
  ``key_args`` names some of its arguments, by those arguments' values (``name:{"day":"2026-11-27"}``,
  JSON with sorted keys; longer than 200 characters: a SHA-256 digest of it). Runs with the same
  key exclude each other; runs with different keys do not.
- **The lock**: acquired on a quorum of the client's masters with ``ttl`` and renewed by the
  client's watchdog about every ``ttl / 3`` while the job runs (``auto_extend``), so a long job
  keeps it and a killed worker frees it within ``ttl``. Released when the job returns or raises,
  and on ``KeyboardInterrupt`` and asyncio cancellation too.
- **When the key is held** (``on_held``): ``"skip"`` (the default) returns :data:`SKIPPED` without
  running the job, logs it (logger ``fastredlock.jobs``, INFO) and counts it (a ``refused`` lock
  event: the contention metrics of :mod:`fastredlock.metrics`); ``"raise"`` raises
  :class:`JobHeldError`; ``"wait"`` waits up to ``wait`` seconds for it, then raises
  :class:`JobHeldError`. A ``with`` block cannot be skipped: entering one whose key is held raises
  :class:`JobHeldError` whatever ``on_held`` says ("wait" waits first).
- **When no quorum of masters answers** (down, unreachable): :class:`fastredlock.LockNotAcquiredError`
  with each master's outcome; the job does not run (whatever ``on_held`` says: that is not a held name).
- **When the lock is lost while the job runs** (a renewal could not reach a quorum in time; another
  run may then start): ``on_lost="raise"`` (the default) lets the job finish, then raises
  :class:`JobLockLostError` (its ``result`` is the job's return value); ``"report"`` logs a warning
  at the moment of the loss and returns the result; ``"cancel"`` (``async def`` jobs only) cancels the
  job at the moment of the loss and raises :class:`JobLockLostError`. Either way the ``lost`` event is
  counted (``fastredlock_lock_lost_total``). A synchronous job that must stop when its lock is lost
  calls ``jobs.current().check()`` between steps (it raises :class:`fastredlock.LockLostError`).
  A job that raises keeps its own exception; a loss then is logged.

Sync or asyncio is the client's choice, not a second API: a :class:`fastredlock.Redlock` runs plain
functions, a :class:`fastredlock.asyncio.Redlock` runs ``async def`` functions (and ``async with``
blocks); mixing them is a :class:`TypeError` when the job is decorated. The client may also be given
as a callable that returns it (called at each run), for clients made after the job is defined
(one asyncio client per event loop, a client made in a worker process after the fork).
"""
from __future__ import annotations

import asyncio
import contextvars
import datetime
import decimal
import enum
import functools
import hashlib
import inspect
import json
import logging
import math
import uuid
from typing import Any, Callable, Dict, Optional, Sequence, Union

from .. import Redlock
from ..asyncio import Redlock as AsyncRedlock
from ..errors import LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError, MasterOutcome

__all__ = [
    "CANCEL", "JobHeldError", "JobLockLostError", "JobRun", "RAISE", "REPORT", "SKIP", "SKIPPED", "SingleRun",
    "WAIT", "current", "job_key", "single_run",
]

log = logging.getLogger("fastredlock.jobs")

#: ``on_held``: return :data:`SKIPPED` without running the job (the default).
SKIP = "skip"
#: ``on_held``: wait up to ``wait`` seconds for the key, then raise :class:`JobHeldError`.
WAIT = "wait"
#: ``on_held``: raise :class:`JobHeldError` at once; ``on_lost``: raise :class:`JobLockLostError` after the job.
RAISE = "raise"
#: ``on_lost``: log a warning when the lock is lost and return the job's result.
REPORT = "report"
#: ``on_lost`` (``async def`` jobs): cancel the job when its lock is lost, raise :class:`JobLockLostError`.
CANCEL = "cancel"

_ON_HELD = (SKIP, WAIT, RAISE)
_ON_LOST = (RAISE, REPORT, CANCEL)
#: A key's arguments part longer than this is replaced by its SHA-256 digest.
MAX_ARGS_CHARS = 200


class _Skipped:
    """The type of :data:`SKIPPED` (one instance; false; pickles as itself, for result backends)."""

    _instance: Optional["_Skipped"] = None

    def __new__(cls) -> "_Skipped":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "fastredlock.jobs.SKIPPED"

    def __reduce__(self) -> str:
        return "SKIPPED"


#: What a decorated job returns when it did not run because its key was held (``on_held="skip"``).
#: False in a boolean context; compare with ``is``.
SKIPPED = _Skipped()


class JobHeldError(LockNotAcquiredError):
    """The job's key is held by another run, so the job did not run (``on_held="raise"``, a ``wait``
    that ran out, or a ``with`` block). ``name`` is the lock's name; ``outcomes`` each master's answer."""


class JobLockLostError(LockLostError):
    """The job's lock was lost while the job ran: another run may have started meanwhile.

    ``result`` is the job's return value (None if it was cancelled, ``on_lost="cancel"``);
    ``finished`` says whether the job ran to its end.
    """

    def __init__(self, message: str, name: Any = None, outcomes: Sequence[MasterOutcome] = (), *,
                 result: Any = None, finished: bool = True) -> None:
        super().__init__(message, name, outcomes)
        self.result = result
        self.finished = finished


class JobRun:
    """One run of a single-run job: its lock's ``name`` and ``lock`` (a held handle while the job
    runs). :func:`current` returns it inside the job or the ``with`` block; ``with single_run(...)
    as run`` binds it too."""

    __slots__ = ("name", "lock", "_job", "_task", "_cancelled", "_done", "_token")

    def __init__(self, job: "SingleRun", name: str) -> None:
        #: The lock's name: the job's name and its key arguments.
        self.name = name
        #: The lock handle (:class:`fastredlock.Lock` or its asyncio twin); set once made.
        self.lock: Any = None
        self._job = job
        self._task: Optional["asyncio.Task[Any]"] = None
        self._cancelled = False
        self._done = False
        self._token: Any = None  # the with block's contextvar token (current())

    @property
    def lost(self) -> bool:
        """Whether the lock was lost while the job held it (a local check, no I/O)."""
        return self.lock is not None and self.lock.lost

    def check(self) -> None:
        """Raise :class:`fastredlock.LockLostError` unless the job still holds its lock with
        validity left: call it before each step that must not overlap another run."""
        self.lock.check()

    def _lost(self, lock: Any) -> None:
        """The lock's ``on_lost`` hook (the watchdog's thread, or the client's event loop)."""
        log.warning("fastredlock.jobs: job %r lost its lock while running (another run may start now)", self.name)
        if self._job.on_lost == CANCEL and self._task is not None and not self._done:
            self._cancelled = True
            self._task.cancel()

    def __repr__(self) -> str:
        return f"<JobRun {self.name!r} lock={self.lock!r}>"


_current: "contextvars.ContextVar[Optional[JobRun]]" = contextvars.ContextVar("fastredlock_job_run", default=None)


def current() -> Optional[JobRun]:
    """The :class:`JobRun` of the single-run job running in this thread or task, or None."""
    return _current.get()


# --- keys ------------------------------------------------------------------------------------------
def _plain(value: Any, arg: str) -> Any:
    """``value`` as JSON-able data with one spelling per value, or TypeError naming ``arg``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"key_args: argument {arg!r} is {value!r}; a key needs a finite number")
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, arg)
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, (datetime.date, datetime.time, uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item, arg) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"key_args: argument {arg!r} is a dict with keys that are not str")
        return {k: _plain(v, arg) for k, v in value.items()}
    raise TypeError(
        f"key_args: argument {arg!r} is a {type(value).__name__}; key arguments must be str, int, float, bool, "
        "None, bytes, enum, date/time, UUID, Decimal, or lists/tuples/dicts of those (or pass key_args=callable "
        "to build the key yourself)")


def job_key(name: str, values: Optional[Dict[str, Any]] = None) -> str:
    """The lock name of the job ``name`` run with the key arguments ``values`` (``{argument: value}``):
    ``name`` alone without them, else ``name:`` + their JSON with sorted keys (a SHA-256 digest of it,
    ``sha256:...``, when longer than 200 characters). Values as :func:`single_run`'s ``key_args`` take."""
    if not values:
        return name
    text = json.dumps({k: _plain(v, k) for k, v in values.items()}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    if len(text) > MAX_ARGS_CHARS:
        text = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return f"{name}:{text}"


def _check_seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


# --- the job ----------------------------------------------------------------------------------------
class SingleRun:
    """A single-run policy: a decorator for jobs, and a ``with`` / ``async with`` block; made by
    :func:`single_run` (see there for the arguments and the module docstring for what a run does).

    As a context manager it is entered by one thread or task at a time: write
    ``with single_run(dlm, name=...)`` where the block is, rather than sharing one object.
    """

    def __init__(self, dlm: Any, name: Optional[str] = None, *, key_args: Any = None, on_held: str = SKIP,
                 wait: Optional[float] = None, ttl: float = 30.0, max_hold: Optional[float] = None,
                 on_lost: str = RAISE) -> None:
        if not isinstance(dlm, (Redlock, AsyncRedlock)) and not callable(dlm):
            raise TypeError("dlm must be a fastredlock.Redlock, a fastredlock.asyncio.Redlock, or a callable "
                            f"returning one, not {type(dlm).__name__}")
        if name is not None and not (isinstance(name, str) and name):
            raise TypeError(f"name must be a non-empty str or None, not {name!r}")
        if isinstance(key_args, str):
            key_args = (key_args,)
        elif key_args is not None and not callable(key_args):
            try:
                key_args = tuple(key_args)
            except TypeError:
                raise TypeError("key_args must be an argument name, a sequence of argument names or a callable, "
                                f"not {type(key_args).__name__}") from None
            if not key_args or not all(isinstance(a, str) and a for a in key_args):
                raise TypeError(f"key_args must name the job's arguments (non-empty str), got {key_args!r}")
        if on_held not in _ON_HELD:
            raise ValueError(f"on_held must be one of {', '.join(map(repr, _ON_HELD))}; got {on_held!r}")
        if on_held == WAIT:
            if wait is None:
                raise ValueError("on_held='wait' needs wait= (the longest wait for the key, seconds)")
            wait = _check_seconds(wait, "wait")
        elif wait is not None:
            raise ValueError(f"wait= applies to on_held='wait' only (on_held is {on_held!r})")
        if on_lost not in _ON_LOST:
            raise ValueError(f"on_lost must be one of {', '.join(map(repr, _ON_LOST))}; got {on_lost!r}")
        if isinstance(dlm, Redlock) and on_lost == CANCEL:
            raise ValueError("on_lost='cancel' needs an asyncio client and an async job (a thread cannot be "
                             "interrupted safely: call jobs.current().check() in the job instead)")
        self.dlm = dlm
        self.name = name
        self.key_args = key_args
        self.on_held = on_held
        self.wait = wait
        self.ttl = _check_seconds(ttl, "ttl")
        self.max_hold = None if max_hold is None else _check_seconds(max_hold, "max_hold")
        self.on_lost = on_lost
        self._entered: Optional[JobRun] = None

    # --- as a decorator ------------------------------------------------------------------------
    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Decorate the job ``func`` (a plain function for a sync client, an ``async def`` for an
        asyncio one): each call runs it under the lock, or returns :data:`SKIPPED`."""
        if not callable(func):
            raise TypeError(f"single_run decorates a function, not {type(func).__name__}")
        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise TypeError("a generator function cannot be a single-run job (the lock would be released "
                            "before its body runs)")
        is_async = inspect.iscoroutinefunction(func)
        self._check_flavour(self.dlm, is_async)
        if not is_async and self.on_lost == CANCEL:
            raise ValueError("on_lost='cancel' needs an async job (a thread cannot be interrupted safely)")
        name = self.name or f"{func.__module__}.{func.__qualname__}"
        key_of = self._key_function(func, name)
        if is_async:
            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await self._run_async(self._client(True), key_of(args, kwargs), func, args, kwargs)
            run_async.single_run = self  # type: ignore[attr-defined]
            return run_async

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            return self._run(self._client(False), key_of(args, kwargs), func, args, kwargs)
        run.single_run = self  # type: ignore[attr-defined]
        return run

    def _key_function(self, func: Callable[..., Any], name: str) -> Callable[[tuple, dict], str]:
        key_args = self.key_args
        if key_args is None:
            return lambda args, kwargs: name
        if callable(key_args):
            def by_callable(args: tuple, kwargs: dict) -> str:
                part = key_args(*args, **kwargs)
                if isinstance(part, bool) or not isinstance(part, (str, int)):
                    raise TypeError(f"key_args callable must return a str or an int, not {type(part).__name__}")
                return f"{name}:{part}"
            return by_callable
        signature = inspect.signature(func)
        params = signature.parameters
        open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        unknown = [a for a in key_args if a not in params and not open_kwargs]
        if unknown:
            raise ValueError(f"key_args names {unknown!r}, which {func.__qualname__}() does not take "
                             f"(its arguments: {list(params)})")

        def by_arguments(args: tuple, kwargs: dict) -> str:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            found = dict(bound.arguments)
            for p in params.values():  # **kwargs: their names count as arguments too
                if p.kind is inspect.Parameter.VAR_KEYWORD:
                    found.update(found.pop(p.name, {}))
            return job_key(name, {a: found.get(a) for a in key_args})
        return by_arguments

    @staticmethod
    def _check_flavour(dlm: Any, is_async: bool) -> None:
        if is_async and isinstance(dlm, Redlock):
            raise TypeError("an async def job (or async with) needs a fastredlock.asyncio.Redlock, "
                            "not a fastredlock.Redlock")
        if not is_async and isinstance(dlm, AsyncRedlock):
            raise TypeError("a fastredlock.asyncio.Redlock runs async def jobs (and async with blocks); "
                            "use a fastredlock.Redlock for a plain function or a with block")

    def _client(self, is_async: bool) -> Any:
        dlm = self.dlm
        if not isinstance(dlm, (Redlock, AsyncRedlock)):
            dlm = dlm()
            if not isinstance(dlm, (Redlock, AsyncRedlock)):
                raise TypeError(f"the dlm callable returned a {type(dlm).__name__}, not a fastredlock client")
        self._check_flavour(dlm, is_async)
        return dlm

    # --- the run, sync ---------------------------------------------------------------------------
    def _start(self, client: Any, name: str) -> JobRun:
        run = JobRun(self, name)
        run.lock = client.lock(name, self.ttl, auto_extend=True, max_hold=self.max_hold, on_lost=run._lost)
        return run

    def _run(self, client: Any, name: str, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        run = self._start(client, name)
        if not self._acquire(run, skip=True):
            return SKIPPED
        token = _current.set(run)
        result, finished = None, False
        try:
            result = func(*args, **kwargs)
            finished = True
        finally:
            _current.reset(token)
            lost = self._release(run, finished)
        return self._after(run, result, lost)

    def _acquire(self, run: JobRun, skip: bool) -> bool:
        lock = run.lock
        got = lock.acquire(timeout=self.wait) if self.on_held == WAIT else lock.acquire(blocking=False)
        return got or self._refused(run, list(lock.outcomes), skip)

    def _refused(self, run: JobRun, outcomes: list, skip: bool) -> bool:
        """The key was not acquired: False (skip), or raise (held, or no quorum answered)."""
        if not any(o.outcome == "no" for o in outcomes):
            raise LockNotAcquiredError(f"job {run.name!r} did not run: no quorum of masters could be reached",
                                       run.name, outcomes)
        if skip and self.on_held == SKIP:
            log.info("fastredlock.jobs: job %r skipped: another run holds it", run.name)
            return False
        waited = f" after waiting {self.wait:g} s" if self.on_held == WAIT else ""
        raise JobHeldError(f"job {run.name!r} is held by another run{waited}", run.name, outcomes)

    def _release(self, run: JobRun, finished: bool) -> bool:
        """Release the run's lock; True if it had been lost (the error says so)."""
        run._done = True
        try:
            run.lock.release()
        except (LockLostError, LockNotOwnedError):
            return self._lost_at_release(run, finished)
        return False

    def _lost_at_release(self, run: JobRun, finished: bool) -> bool:
        if not finished:
            log.warning("fastredlock.jobs: job %r raised, and its lock had been lost while it ran", run.name)
        return True

    def _after(self, run: JobRun, result: Any, lost: bool) -> Any:
        if not lost:
            return result
        if self.on_lost == REPORT:
            log.warning("fastredlock.jobs: job %r finished, but its lock was lost while it ran", run.name)
            return result
        raise JobLockLostError(f"job {run.name!r} lost its lock while it ran; another run may have overlapped it",
                               run.name, result=result, finished=True)

    # --- the run, asyncio ------------------------------------------------------------------------
    async def _run_async(self, client: Any, name: str, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        run = self._start(client, name)
        if not await self._acquire_async(run, skip=True):
            return SKIPPED
        run._task = asyncio.current_task()
        token = _current.set(run)
        result, finished = None, False
        try:
            result = await func(*args, **kwargs)
            finished = True
        except asyncio.CancelledError:
            if not run._cancelled:
                raise  # somebody else's cancellation: it goes on (the lock is released below)
        finally:
            _current.reset(token)
            if run._cancelled:
                _uncancel(run._task)  # our own cancellation (on_lost="cancel") ends here
            lost = await self._release_async(run, finished)
        if run._cancelled and not finished:
            raise JobLockLostError(f"job {run.name!r} was cancelled: its lock was lost while it ran", run.name,
                                   result=None, finished=False)
        return self._after(run, result, lost or run._cancelled)

    async def _acquire_async(self, run: JobRun, skip: bool) -> bool:
        lock = run.lock
        got = await (lock.acquire(timeout=self.wait) if self.on_held == WAIT else lock.acquire(blocking=False))
        return got or self._refused(run, await lock.settled_outcomes(), skip)

    async def _release_async(self, run: JobRun, finished: bool) -> bool:
        run._done = True
        try:
            await run.lock.release()
        except (LockLostError, LockNotOwnedError):
            return self._lost_at_release(run, finished or run._cancelled)
        return False

    # --- as a context manager ----------------------------------------------------------------------
    def _enter_run(self, is_async: bool) -> JobRun:
        if self.name is None:
            raise ValueError("a with block needs name= (a decorated job takes its function's name)")
        if self.key_args is not None:
            raise ValueError("key_args applies to decorated jobs; in a with block, put the key in name=")
        if self._entered is not None:
            raise RuntimeError("this single_run block is already entered (by another thread or task?): "
                               "write single_run(...) in each with statement")
        if not is_async and self.on_lost == CANCEL:
            raise ValueError("on_lost='cancel' needs async with (a thread cannot be interrupted safely)")
        run = self._start(self._client(is_async), self.name)
        self._entered = run
        return run

    def __enter__(self) -> JobRun:
        run = self._enter_run(False)
        try:
            self._acquire(run, skip=False)
        except BaseException:
            self._entered = None
            raise
        run._token = _current.set(run)
        return run

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        run, self._entered = self._entered, None
        if run is None:  # pragma: no cover - __exit__ without __enter__
            return
        _current.reset(run._token)
        lost = self._release(run, exc_type is None)
        if exc_type is None:
            self._after(run, None, lost)

    async def __aenter__(self) -> JobRun:
        run = self._enter_run(True)
        try:
            await self._acquire_async(run, skip=False)
        except BaseException:
            self._entered = None
            raise
        run._task = asyncio.current_task()
        run._token = _current.set(run)
        return run

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        run, self._entered = self._entered, None
        if run is None:  # pragma: no cover - __aexit__ without __aenter__
            return False
        _current.reset(run._token)
        if run._cancelled:
            _uncancel(run._task)  # our own cancellation (on_lost="cancel") ends here
        lost = await self._release_async(run, exc_type is None)
        if run._cancelled and exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            raise JobLockLostError(f"job {run.name!r} was cancelled: its lock was lost while it ran", run.name,
                                   result=None, finished=False)
        if exc_type is None:
            self._after(run, None, lost or run._cancelled)
        return False

    def __repr__(self) -> str:
        return (f"SingleRun(name={self.name!r}, key_args={self.key_args!r}, on_held={self.on_held!r}, "
                f"wait={self.wait!r}, ttl={self.ttl:g}, on_lost={self.on_lost!r})")


def _uncancel(task: Optional["asyncio.Task[Any]"]) -> None:
    """Take back the cancellation we asked for (Python 3.11+ counts them; earlier ones need nothing)."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()


def single_run(dlm: Any, name: Optional[str] = None, *, key_args: Union[None, str, Sequence[str], Callable[..., Any]] = None,
               on_held: str = SKIP, wait: Optional[float] = None, ttl: float = 30.0, max_hold: Optional[float] = None,
               on_lost: str = RAISE) -> SingleRun:
    """A single-run policy for a job: use it as a decorator (``@single_run(dlm, ...)``), or as a
    ``with`` / ``async with`` block (``with single_run(dlm, name=...) as run:``). See the module
    docstring for what a run does.

    :param dlm: a :class:`fastredlock.Redlock` (plain functions, ``with``), a
        :class:`fastredlock.asyncio.Redlock` (``async def`` functions, ``async with``), or a
        callable that returns one (called at each run).
    :param name: the job's name, the start of its lock's name (default for a decorated function:
        its ``module.qualname``; required for a ``with`` block).
    :param key_args: which of the job's arguments make runs distinct: an argument name, a sequence
        of them (their values, as :func:`job_key` writes them, follow the name), or a callable taking
        the job's arguments and returning a str or int (appended as ``name:<value>``). Default None:
        one run of the job at a time, whatever its arguments.
    :param on_held: ``"skip"`` (return :data:`SKIPPED`), ``"raise"`` (:class:`JobHeldError`) or
        ``"wait"`` (wait up to ``wait`` seconds, then :class:`JobHeldError`).
    :param wait: with ``on_held="wait"`` (required there, only there): the longest wait, seconds.
    :param ttl: the lock's time to live, seconds (default 30): renewed every ``ttl / 3`` while the
        job runs; the longest a killed worker keeps the key.
    :param max_hold: stop renewing this many seconds after the job started (default: never).
    :param on_lost: ``"raise"`` (:class:`JobLockLostError` after the job), ``"report"`` (log, return
        the result) or ``"cancel"`` (async jobs: cancel the job, :class:`JobLockLostError`).
    """
    return SingleRun(dlm, name, key_args=key_args, on_held=on_held, wait=wait, ttl=ttl, max_hold=max_hold,
                     on_lost=on_lost)
