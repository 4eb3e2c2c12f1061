"""Drop-in replacement for celery-once (3.0.1, ``pip install celery_once``, module ``celery_once``).

Change ``from celery_once import QueueOnce, AlreadyQueued`` to
``from fastredlock.compat.celery_once import QueueOnce, AlreadyQueued``; keep the rest::

    app.conf.ONCE = {
        "backend": "celery_once.backends.Redis",   # served by this module (celery-once need not be installed)
        "settings": {
            "url": "redis://localhost:6379/0",     # or a list of URLs: N independent masters, quorum N//2+1
            "default_timeout": 60 * 60,
        },
    }

    @app.task(base=QueueOnce, once={"graceful": True, "keys": ["a"]})
    def slow_add(a, b): ...

Kept from celery-once 3.0.1: ``QueueOnce`` (``once={'graceful', 'timeout', 'keys',
'unlock_before_run'}`` on the task, ``once={'graceful', 'timeout'}`` per ``apply_async`` call),
``AlreadyQueued`` (``countdown``: seconds until the name frees, and ``message``), ``app.conf.ONCE``
with ``backend`` and ``settings`` (``url``, ``default_timeout``, ``blocking``, ``blocking_timeout``),
the key ``qo_<task name>_<arg>-<value>_...`` built from the same signature binding, a graceful
duplicate answered with an ``EagerResult`` in state ``REJECTED``, retries not locked again, calling
the task as a function not locked, and ``get_key``/``once_backend``/``default_timeout``.

Safer (see the documentation's page docs/migrating/celery-once.md):

- the lock's value is the task id and every release is owner-checked (celery-once released with a
  plain ``DEL``, so a task whose lock had expired deleted the lock of the next one);
- the ``timeout`` (``default_timeout``, 1 h) is the longest the name may stay taken, not the time a
  crashed worker blocks it: once a worker starts the task, the lock's TTL is ``run_ttl`` (30 s,
  ``settings['run_ttl']`` or ``once={'run_ttl': ...}``) renewed while the task runs, so a worker
  killed with SIGKILL frees the name within ``run_ttl`` (celery-once: the whole hour, its #147);
- the name is released when the task is revoked, killed at its hard time limit or lost with its
  pool child (Celery's signals), not only after a run that returned;
- a run lock beside the queue lock: two messages of one name never run at the same time;
- several URLs make a Redlock over N masters;
- a failed ``apply_async`` (the broker down) releases the name instead of keeping it for an hour;
- a retry keeps the name until the retry runs (celery-once kept it too, but a retry's release by
  ``after_return`` did not happen; here the run lock goes and the queue lock stays).

Differences: only the Redis backend (``celery_once.backends.Redis``, or this module's ``Redis``)
is served; ``celery_once.backends.File`` or a custom backend raise ``ValueError`` (keep celery-once
for them). A per-call ``once={'timeout': ...}`` bounds the queued message's lock and, through a
message header, its run; ``unlock_before_run`` releases the queue lock when the run starts but
still holds the run lock, so a message enqueued meanwhile runs after this one, never beside it.
``Redis.clear_lock(key)`` deletes the key (and its run lock) unconditionally, as the original's
``DEL``; the task itself never releases that way.
"""
from __future__ import annotations

import uuid
from inspect import signature
from typing import Any, Dict, List, Optional

from celery import Task, states
from celery.result import EagerResult

from ._celery import (
    DEFAULT_RUN_TTL, HEADER, NEVER, RUN_PREFIX, Masters, Run, connect_signals, guarded_call, header_of, masters_for,
    release_ended, runs,
)

__all__ = ["AlreadyQueued", "QueueOnce", "Redis", "queue_once_key"]

#: The backend strings this module serves itself.
_REDIS_BACKENDS = frozenset({
    "celery_once.backends.Redis",
    "celery_once.backends.redis.Redis",
    "fastredlock.compat.celery_once.Redis",
})


class AlreadyQueued(Exception):
    """Raised by ``apply_async``/``delay`` when a task of the same key is queued or running.

    ``countdown``: seconds until the name's lock expires if nobody releases it; ``message``:
    ``"Expires in <countdown> seconds"``.
    """

    def __init__(self, countdown: float) -> None:
        self.message = "Expires in {} seconds".format(countdown)
        self.countdown = countdown


# --- the key (celery-once's format) ------------------------------------------------------------
def _as_text(value: Any) -> Any:
    """A value as celery-once wrote it into the key: dicts as their sorted items' reprs, lists
    item by item, anything else as itself (``str()`` is applied by the caller)."""
    if isinstance(value, dict):
        pairs = [(_as_text(k), _as_text(v)) for k, v in sorted(value.items(), key=lambda kv: kv[0])]
        return "{" + ", ".join(str({k: v}).strip("{}") for k, v in pairs) + "}"
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return value


def queue_once_key(name: str, kwargs: Dict[str, Any], restrict_to: Optional[List[str]] = None) -> str:
    """The lock key celery-once gives a task called ``name`` with the bound arguments ``kwargs``
    (only those named in ``restrict_to`` when it is given): ``qo_<name>_<arg>-<value>_...``, the
    arguments sorted by name."""
    if restrict_to is not None:
        kwargs = {key: kwargs[key] for key in restrict_to}
    parts = ["qo", _as_text(name)]
    parts += [str(k) + "-" + str(_as_text(v)) for k, v in sorted(kwargs.items(), key=lambda kv: kv[0])]
    return "_".join(parts)


# --- the backend ---------------------------------------------------------------------------------
class Redis:
    """celery-once's Redis backend, over one master or several (a list of URLs in ``url``).

    ``settings``: ``url`` (default ``redis://localhost:6379/0``; ``redis://``, ``rediss://``,
    ``redis+socket://`` and ``unix://`` URLs, redis-py's query options), ``blocking`` (default
    False) and ``blocking_timeout`` (seconds, default 1; None: no limit), ``run_ttl`` (seconds a
    running task's lock lives without renewal, default 30).
    """

    def __init__(self, settings: Dict[str, Any]) -> None:
        self.masters: Masters = masters_for(settings.get("url", "redis://localhost:6379/0"))
        self.blocking_timeout = settings.get("blocking_timeout", 1)
        self.blocking = settings.get("blocking", False)
        self.run_ttl = float(settings.get("run_ttl", DEFAULT_RUN_TTL))

    def raise_or_lock(self, key: str, timeout: Optional[float], token: Optional[str] = None) -> None:
        """Take the lock ``key`` for ``timeout`` seconds (None or 0: the longest TTL there is) with
        ``token`` (the task id; default: a fresh random one), or raise :class:`AlreadyQueued`."""
        token = token or uuid.uuid4().hex
        ttl = NEVER if not timeout else min(float(timeout), NEVER)  # 0: no expiry, as redis-py's Lock
        if not self.masters.take(key, token, ttl, blocking=bool(self.blocking), timeout=self.blocking_timeout):
            raise AlreadyQueued(self.masters.remaining(key))

    def release(self, key: str, token: str) -> bool:
        """Owner-checked release of ``key`` taken with ``token``; whether it was still held."""
        return self.masters.release(key, token)

    def clear_lock(self, key: str) -> int:
        """Delete ``key`` (and its run lock) on every master, whoever holds it (celery-once's ``DEL``)."""
        deleted = 0
        for reader in self.masters.readers():
            deleted += reader.delete(key, RUN_PREFIX + key)
        return deleted


def _backend(config: Dict[str, Any]) -> Redis:
    name = config.get("backend", "celery_once.backends.Redis")
    if name not in _REDIS_BACKENDS and name is not Redis:
        raise ValueError(
            f"ONCE['backend'] = {name!r}: fastredlock.compat.celery_once serves only the Redis backend "
            f"({', '.join(sorted(_REDIS_BACKENDS))}); keep celery-once for other backends"
        )
    settings = config.get("settings") or {}
    key = repr(sorted((k, repr(v)) for k, v in settings.items()))
    found = _backends.get(key)
    if found is None:
        found = _backends[key] = Redis(settings)
    return found


_backends: Dict[str, Redis] = {}


# --- the task base ----------------------------------------------------------------------------------
class QueueOnce(Task):
    """A Celery task base that refuses a second queued or running task of the same name and arguments.

    ``once`` (task option): ``graceful`` (True: a duplicate ``apply_async`` returns an
    ``EagerResult`` in state ``REJECTED`` instead of raising :class:`AlreadyQueued`), ``timeout``
    (seconds the name may stay taken; default ``settings['default_timeout']``, 1 h), ``keys``
    (the argument names the key is made of; ``[]``: the task name only), ``unlock_before_run``
    (release the queue lock when the run starts), ``run_ttl`` (seconds a running task's lock lives
    without renewal; default ``settings['run_ttl']``, 30). ``apply_async(..., once={'graceful',
    'timeout'})`` overrides them per call.
    """

    abstract = True
    once: Dict[str, Any] = {"graceful": False, "unlock_before_run": False}

    @property
    def config(self) -> Any:
        """The Celery app's configuration."""
        return self._get_app().conf

    @property
    def once_config(self) -> Dict[str, Any]:
        """``app.conf.ONCE``."""
        return self.config.ONCE

    @property
    def once_backend(self) -> Redis:
        """The backend ``ONCE`` names (the Redis backend, served by this module)."""
        return _backend(self.once_config)

    @property
    def default_timeout(self) -> float:
        """``ONCE['settings']['default_timeout']`` (default 3600 seconds)."""
        return (self.once_config.get("settings") or {}).get("default_timeout", 60 * 60)

    def unlock_before_run(self) -> bool:
        """Whether the queue lock is released when the run starts (``once['unlock_before_run']``)."""
        return self.once.get("unlock_before_run", False)

    @property
    def run_ttl(self) -> float:
        """Seconds a running task's locks live without renewal (renewed every third of it)."""
        return float(self.once.get("run_ttl", self.once_backend.run_ttl))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return guarded_call(self, lambda task_id, request: self._start_run(task_id, request, args, kwargs),
                            lambda: super(QueueOnce, self).__call__(*args, **kwargs))

    def _start_run(self, task_id: str, request: Any, args: Any, kwargs: Any) -> Optional[Run]:
        header = header_of(request)
        key = header["key"] if header else self.get_key(args, kwargs)
        bound = header.get("bound") if header else self.once.get("timeout", self.default_timeout)
        ttl = self.run_ttl
        return Run.start(self.once_backend.masters, key, task_id, run_ttl=ttl, bound=bound, wait=ttl,
                         unlock_queue=self.unlock_before_run())

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Queue the task unless one of the same key is queued or running (then raise
        :class:`AlreadyQueued`, or return a ``REJECTED`` ``EagerResult`` if graceful)."""
        once_options = options.pop("once", None) or {}
        graceful = once_options.get("graceful", self.once.get("graceful", False))
        timeout = once_options.get("timeout", self.once.get("timeout", self.default_timeout))
        if options.get("retries"):  # a retry: the name is already this task's
            run = runs.get(options.get("task_id"))
            if run is not None:
                header = header_of(self.request)
                bound = header.get("bound") if header else timeout
                run.requeue(NEVER if not bound else min(float(bound), NEVER))
            return super().apply_async(args, kwargs, **options)
        key = self.get_key(args, kwargs)
        task_id = options.get("task_id") or str(uuid.uuid4())
        options["task_id"] = task_id
        backend = self.once_backend
        try:
            backend.raise_or_lock(key, timeout=timeout, token=task_id)
        except AlreadyQueued:
            if graceful:
                return EagerResult(None, None, states.REJECTED)
            raise
        options["headers"] = {**(options.get("headers") or {}), HEADER: {"key": key, "bound": timeout}}
        try:
            return super().apply_async(args, kwargs, **options)
        except BaseException:  # not queued: the name is free again
            backend.release(key, task_id)
            raise

    def _get_call_args(self, args: Any, kwargs: Any) -> Dict[str, Any]:
        call_args = dict(signature(self.run).bind(*args, **kwargs).arguments)
        if isinstance(call_args.get("self"), Task):  # a bound task's instance (its repr changes)
            del call_args["self"]
        return call_args

    def get_key(self, args: Any = None, kwargs: Any = None) -> str:
        """The lock key of this task with these arguments (celery-once's ``qo_...`` format)."""
        call_args = self._get_call_args(args or (), kwargs or {})
        return queue_once_key(self.name, call_args, self.once.get("keys", None))


def _ended(task: QueueOnce, task_id: Optional[str], args: Any, kwargs: Any, request: Any) -> None:
    if not task_id or runs.handled(task_id):
        return
    header = header_of(request) if request is not None else None
    try:
        key = header["key"] if header else task.get_key(args, kwargs)
        masters = task.once_backend.masters
    except Exception:  # arguments that do not bind, no ONCE configuration: nothing this shim took
        return
    release_ended(masters, key, task_id)


connect_signals(QueueOnce, _ended)
