"""What the two Celery drop-ins share: the masters, the two locks of a task, and the end of a run.

A task of :mod:`fastredlock.compat.celery_once` or :mod:`fastredlock.compat.celery_singleton` is
guarded by two locks, both taken with the task id as their token (so whichever process ends the
task, the worker's pool child or the worker's main process, can release them owner-checked):

- the **queue lock**, under the original library's key, taken when the task is enqueued, with the
  original's timeout (``timeout``/``default_timeout``, ``lock_expiry``) as its TTL: the longest a
  name may stay taken by a task that never starts;
- when a worker starts the task, the queue lock is **handed over**: the worker adopts it (same
  token) with a short TTL (``run_ttl``, 30 s by default) that the client's watchdog renews while
  the task runs, for at most that same bound; beside it the worker takes the **run lock**
  (``fastredlock-run:<key>``, same token, same short renewed TTL), so that two messages of one name
  (a message delivered twice, a second one enqueued after the queue lock expired) never run at
  the same time.

Both are released when the task ends: success, failure, retries exhausted (in the pool child,
around the task's body), a revoke, a hard time limit or a pool child that died (in the worker's
main process, through Celery's ``task_revoked`` and ``task_failure`` signals, by token). A worker
killed outright stops renewing: its names are free within one ``run_ttl``.

The queue lock keeps the original's key and is written with ``SET key <task id> NX PX ttl``, so a
process still on celery-once or celery-singleton and a process on the drop-in exclude each other.
"""
from __future__ import annotations

import logging
import math
import re
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

import fastredlock
import fastredlock.compat
from fastredlock import LockError, LockNotOwnedError

from . import _common

__all__ = [
    "DEFAULT_RUN_TTL", "HEADER", "NEVER", "RESTART_GRACE", "RUN_PREFIX", "Masters", "Run", "connect_signals", "guarded_call",
    "header_of", "masters_for", "release_ended", "runs",
]

log = logging.getLogger("fastredlock.compat.celery")

#: The run lock's key is the queue lock's key behind this prefix (never an original's key: those
#: start with ``qo_`` or with the singleton prefix).
RUN_PREFIX = "fastredlock-run:"
#: Seconds a run holds its names after its worker stopped renewing them (killed, frozen).
DEFAULT_RUN_TTL = 30.0
#: The longest TTL a master accepts (``PX`` is a signed 32-bit count of ms): "never expires" in
#: the originals (celery-singleton's default ``lock_expiry``) becomes this, about 24.8 days.
NEVER = (2**31 - 1) / 1000.0
#: How long a restarted master stays out of the quorum, unless ``fastredlock.compat.configure(
#: restart_grace=...)`` says otherwise: long enough for every run lock it may have forgotten to have
#: expired (twice the default ``run_ttl``), not the queue locks' TTL (an hour, or weeks: one master
#: restarted would refuse every task for that long). A restarted master that forgot a queue lock may
#: let one duplicate be enqueued; its run then waits behind the run lock.
RESTART_GRACE = 2 * DEFAULT_RUN_TTL
#: The message header the enqueuing process writes: the queue lock's key and the run's bounds, so the
#: worker uses the key the enqueuer took (a tuple argument comes back from JSON as a list).
HEADER = "fastredlock_lock"

#: A redis-py ``Lock`` token (``uuid1().hex``): the queue lock of a process still on celery-once.
_REDIS_PY_TOKEN = re.compile(rb"\A[0-9a-f]{32}\Z")


def _master(url: str, redis_kwargs: Dict[str, Any]) -> Any:
    """One master as :class:`fastredlock.Redlock` takes it: the URL, or a redis-py client where
    the URL has redis-py query options, a ``redis+socket://`` scheme or extra arguments."""
    if not isinstance(url, str):
        return url  # a redis-py client, a dict, a (host, port) tuple
    parts = urlsplit(url)
    if parts.scheme == "redis+socket":  # celery-once's spelling of a Unix socket
        url = "unix://" + parts.path + ("?" + parts.query if parts.query else "")
        parts = urlsplit(url)
    if redis_kwargs or (parts.query and parts.scheme != "unix"):
        import redis

        return redis.Redis.from_url(url, **redis_kwargs)
    return url


class Masters:
    """The masters of one configuration, the client shared for them, and plain reads of the
    originals' keys (``GET``, ``PTTL``, ``SCAN``) through redis-py, as the originals read them."""

    def __init__(self, urls: Sequence[Any], redis_kwargs: Optional[Dict[str, Any]] = None) -> None:
        if isinstance(urls, (str, bytes)):
            urls = [urls]
        if not urls:
            raise ValueError("no Redis URL configured for the lock masters")
        self.urls = list(urls)
        self.redis_kwargs = dict(redis_kwargs or {})
        self._client: Optional[fastredlock.Redlock] = None
        self._generation = -1  # the shims' generation (see _common) the client was built in
        self._readers: Optional[List[Any]] = None
        self._lock = threading.Lock()

    @property
    def client(self) -> fastredlock.Redlock:
        """The :class:`fastredlock.Redlock` client (built on first use, with the options of
        :func:`fastredlock.compat.configure`, and again after ``configure()`` or the shims'
        ``close_clients()``; fork-safe: a pool child reconnects on its own)."""
        generation = _common._generation  # bumped by configure() and close_clients()
        client = self._client
        if client is None or self._generation != generation:
            with self._lock:
                if self._client is None or self._generation != generation:
                    masters = [_master(u, self.redis_kwargs) for u in self.urls]
                    options = fastredlock.compat.options()
                    if options.get("restart_grace") is None:
                        options["restart_grace"] = RESTART_GRACE
                    self._client = fastredlock.Redlock(masters, **options)
                    self._generation = generation
                client = self._client
        return client

    @property
    def quorum(self) -> int:
        return len(self.urls) // 2 + 1

    def readers(self) -> List[Any]:
        """redis-py clients for the masters (plain reads; locks never go through them)."""
        if self._readers is None:
            import redis

            readers = []
            for url in self.urls:
                master = _master(url, self.redis_kwargs)
                readers.append(master if not isinstance(master, str) else redis.Redis.from_url(master))
            self._readers = readers
        return self._readers

    def take(self, key: str, token: str, ttl: float, blocking: bool = False,
             timeout: Optional[float] = None) -> bool:
        """Take the queue lock ``key`` with ``token`` for ``ttl`` seconds (one attempt unless
        ``blocking``; ``timeout`` None with ``blocking``: until taken)."""
        lock = self.client.lock(key, ttl=ttl)
        if blocking:
            taken = lock.acquire(blocking=True, timeout=timeout, token=token)
        else:
            taken = lock.acquire(blocking=False, token=token)
        if not taken:
            self.check_refused(lock)
        return taken

    def check_refused(self, lock: Any) -> None:
        """After a failed attempt: return if a quorum of masters said the name is taken; raise the
        redis-py error the originals would have raised if masters failed instead (a name refused
        because the lock service is down is not a duplicate)."""
        outcomes = lock.outcomes
        if not outcomes or sum(1 for o in outcomes if o.outcome == "no") >= self.quorum:
            return
        errors = _common.redis_errors(outcomes)
        if errors:
            detail = "; ".join(str(o) for o in outcomes)
            raise type(errors[0])(f"lock {lock.name!r}: too few masters answered ({detail})")

    def release(self, key: str, token: Union[str, bytes]) -> bool:
        """Owner-checked release of ``key`` held with ``token``; whether a quorum still held it."""
        try:
            self.client.lock(key).release(token=token)
        except LockNotOwnedError:
            return False
        return True

    def value(self, key: str) -> Optional[bytes]:
        """The value a quorum of masters holds under ``key``, or None."""
        counts: Dict[bytes, int] = {}
        for reader in self.readers():
            try:
                got = reader.get(key)
            except Exception:  # a master down counts as no value, as for a lock
                continue
            if got is not None:
                got = got.encode() if isinstance(got, str) else got
                counts[got] = counts.get(got, 0) + 1
        for got, count in counts.items():
            if count >= self.quorum:
                return got
        return None

    def remaining(self, key: str) -> float:
        """Seconds until ``key`` expires on the quorum's slowest-to-free master (0 if not there)."""
        ttls = []
        for reader in self.readers():
            try:
                ms = reader.pttl(key)
            except Exception:
                continue
            ttls.append(ms / 1000.0 if ms >= 0 else (math.inf if ms == -1 else 0.0))
        ttls.sort(reverse=True)
        return ttls[self.quorum - 1] if len(ttls) >= self.quorum else 0.0

    def clear(self, prefixes: Sequence[str]) -> int:
        """Delete every key under ``prefixes`` on every master (SCAN + DEL, as the original's
        ``clear_locks``); return how many were deleted."""
        deleted = 0
        for reader in self.readers():
            for prefix in prefixes:
                pattern = prefix.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?").replace("[", "\\[")
                for key in reader.scan_iter(match=pattern + "*"):
                    deleted += reader.delete(key)
        return deleted


_masters: Dict[Tuple[Any, ...], Masters] = {}
_masters_lock = threading.Lock()


def masters_for(urls: Any, redis_kwargs: Optional[Dict[str, Any]] = None) -> Masters:
    """The :class:`Masters` of ``urls`` (one per configuration and process)."""
    if isinstance(urls, (str, bytes)):
        urls = [urls]
    urls = list(urls)
    kwargs = dict(redis_kwargs or {})
    try:
        key: Tuple[Any, ...] = (tuple(urls), tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:  # unhashable arguments: not shared
        return Masters(urls, kwargs)
    found = _masters.get(key)
    if found is None:
        with _masters_lock:
            found = _masters.get(key)
            if found is None:
                found = _masters[key] = Masters(urls, kwargs)
    return found


def _lost(lock: Any) -> None:
    log.warning("the lock %r of a running task was lost (its masters did not confirm a renewal): another "
                "run of the same name may start", lock.name)


class Run:
    """The locks one running task holds in this process (see the module docstring)."""

    __slots__ = ("masters", "key", "task_id", "queue", "run")

    def __init__(self, masters: Masters, key: str, task_id: str, queue: Any, run: Any) -> None:
        self.masters = masters
        self.key = key
        self.task_id = task_id
        self.queue = queue
        self.run = run

    @classmethod
    def start(cls, masters: Masters, key: str, task_id: str, *, run_ttl: float, bound: Optional[float],
              wait: float, unlock_queue: bool = False) -> Optional["Run"]:
        """Take the run lock and hand the queue lock over to this worker; None if another run of
        the same name holds the run lock for longer than ``wait`` seconds (its queue lock, if this
        task's, is then released: this message will not run)."""
        client = masters.client
        options = cls.renewal(run_ttl, bound)
        run = client.lock(RUN_PREFIX + key, **options)
        if not run.acquire(blocking=True, timeout=wait, token=task_id):
            masters.check_refused(run)  # the masters failed: the task fails (it is not a duplicate)
            masters.release(key, task_id)
            return None
        queue = client.lock(key, **options)
        try:
            if unlock_queue:
                cls._unlock_queue(masters, key, task_id)
                queue = None
            elif not cls._hand_over(masters, queue, task_id):
                queue = None
        except BaseException:
            run.release()
            raise
        return cls(masters, key, task_id, queue, run)

    @staticmethod
    def renewal(run_ttl: float, bound: Optional[float]) -> Dict[str, Any]:
        """The locks' TTL and renewal for a run: ``run_ttl`` renewed while the task runs, but never
        past ``bound`` seconds from the start (the original's timeout/expiry: the last renewal
        expires by then); a bound shorter than ``run_ttl`` is one TTL, not renewed; no bound (None,
        0), renewed for as long as the task runs."""
        if not bound or bound >= NEVER:  # (0: celery-once's redis-py Lock set no expiry for it)
            return {"ttl": run_ttl, "auto_extend": True, "on_lost": _lost}
        bound = float(bound)
        if bound <= run_ttl:
            return {"ttl": bound}
        return {"ttl": run_ttl, "auto_extend": True, "max_hold": bound - run_ttl, "on_lost": _lost}

    @staticmethod
    def _hand_over(masters: Masters, queue: Any, task_id: str) -> bool:
        try:
            queue.adopt(task_id)  # the enqueuing process took it with this task's id
            return True
        except LockNotOwnedError:
            pass
        held = masters.value(queue.key.decode("utf-8", "surrogateescape"))
        if held is not None and _REDIS_PY_TOKEN.match(held):
            # taken by a process still on celery-once (redis-py's token): this run takes it over
            try:
                queue.adopt(held)
                return True
            except LockNotOwnedError:
                pass
        if held is None:  # expired, or never taken (apply()): hold the name while this runs
            return queue.acquire(blocking=False, token=task_id)
        return False  # another message of this name is queued: its lock stays its own

    @staticmethod
    def _unlock_queue(masters: Masters, key: str, task_id: str) -> None:
        if masters.release(key, task_id):
            return
        held = masters.value(key)
        if held is not None and _REDIS_PY_TOKEN.match(held):
            masters.release(key, held)  # celery-once's process took it: cleared as it would

    def requeue(self, ttl: float) -> None:
        """The task is being retried (its message is about to be sent again, same id): the queue
        lock goes back to a plain TTL of ``ttl`` (the original's bound) until a worker starts the
        retry. (Released and taken again: there is no owner-checked way to stop renewing a lock
        without releasing it; a name enqueued in between wins, and the two runs are serialised by
        the run lock.)"""
        if self.queue is not None and self.queue.token is not None:
            try:
                self.queue.release()
            except LockError:
                pass
        self.queue = None
        try:
            self.masters.take(self.key, self.task_id, ttl)
        except Exception as exc:  # pragma: no cover - masters unreachable: the retry runs unguarded
            log.warning("could not keep the queue lock %r for the retry of %s: %s", self.key, self.task_id, exc)

    def finish(self) -> None:
        """Release both locks (owner-checked); a lock already lost or released is only logged."""
        for lock in (self.queue, self.run):
            if lock is None or lock.token is None:
                continue
            try:
                lock.release()
            except LockError as exc:
                log.info("lock %r was not held any more at the end of task %s: %s", lock.name, self.task_id, exc)
        self.queue = self.run = None


class Runs:
    """The runs of this process, by task id, and the ids of those that ended recently (so that the
    ``task_failure`` signal that follows a failure in the same process does not release twice)."""

    def __init__(self) -> None:
        self._runs: Dict[str, Run] = {}
        self._ended: "OrderedDict[str, None]" = OrderedDict()
        self._lock = threading.Lock()

    def add(self, run: Run) -> None:
        with self._lock:
            self._runs[run.task_id] = run
            self._ended.pop(run.task_id, None)  # a retry of a task this process ran before

    def get(self, task_id: Optional[str]) -> Optional[Run]:
        return self._runs.get(task_id) if task_id is not None else None

    def end(self, run: Run) -> None:
        with self._lock:
            if self._runs.get(run.task_id) is run:
                del self._runs[run.task_id]
            self._ended[run.task_id] = None
            while len(self._ended) > 1024:
                self._ended.popitem(last=False)
        run.finish()

    def retried(self, run: Run) -> None:
        """The run ended with a retry: its run lock goes, its queue lock stays (see
        :meth:`Run.requeue`), and the task is not counted as ended."""
        with self._lock:
            if self._runs.get(run.task_id) is run:
                del self._runs[run.task_id]
        run.finish()

    def handled(self, task_id: str) -> bool:
        """Whether this process runs, or just ended, ``task_id`` (its locks are its own business)."""
        return task_id in self._runs or task_id in self._ended


#: The runs of this process.
runs = Runs()


def release_ended(masters: Masters, key: str, task_id: str) -> None:
    """A task ended outside the process that ran it (revoked, killed at its hard time limit, its
    pool child lost): release its queue and run locks by token."""
    if not task_id or runs.handled(task_id):
        return
    for name in (key, RUN_PREFIX + key):
        try:
            masters.release(name, task_id)
        except LockError as exc:
            log.warning("could not release %r of task %s: %s", name, task_id, exc)


def connect_signals(base: type, ended: Any) -> None:
    """Release the locks of tasks of ``base`` that end outside their run: ``ended(task, task_id,
    args, kwargs, request)`` is called for Celery's ``task_revoked`` and ``task_failure``."""
    from celery import signals

    def on_revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
        if isinstance(sender, base) and request is not None:
            ended(sender, getattr(request, "id", None), getattr(request, "args", None) or (),
                  getattr(request, "kwargs", None) or {}, request)

    def on_failure(sender: Any = None, task_id: Any = None, args: Any = None, kwargs: Any = None, **_: Any) -> None:
        if isinstance(sender, base):
            ended(sender, task_id, args or (), kwargs or {}, None)

    signals.task_revoked.connect(on_revoked, weak=False)
    signals.task_failure.connect(on_failure, weak=False)


def header_of(request: Any) -> Optional[Dict[str, Any]]:
    """The drop-in's message header of a running task's request, if the enqueuer wrote one."""
    found = getattr(request, HEADER, None)
    if found is None:
        headers = getattr(request, "headers", None)
        if isinstance(headers, dict):
            found = headers.get(HEADER)
    return found if isinstance(found, dict) and isinstance(found.get("key"), str) else None


def guarded_call(task: Any, start: Any, body: Any) -> Any:
    """Run a task's body in a worker between :meth:`Run.start` and :meth:`Run.finish`.

    ``start()`` returns the :class:`Run` (or None: another run of the name holds it, and this
    message is ignored); ``body()`` runs the task. A retry keeps the name (see
    :meth:`Run.requeue`, done when the retry's message is sent); any other end releases it.
    """
    from celery.exceptions import Ignore, Retry

    request = task.request
    task_id = getattr(request, "id", None)
    if task_id is None or getattr(request, "called_directly", True):
        return body()  # called as a function: no locks (as the originals)
    run = start(task_id, request)
    if run is None:
        log.warning("task %s[%s] not run: another run of the same name holds its run lock", task.name, task_id)
        raise Ignore()
    runs.add(run)
    try:
        result = body()
    except Retry:
        runs.retried(run)
        raise
    except BaseException:
        runs.end(run)
        raise
    runs.end(run)
    return result
