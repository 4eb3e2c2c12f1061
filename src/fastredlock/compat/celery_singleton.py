"""Drop-in replacement for celery-singleton (0.3.1, ``pip install celery-singleton``).

Change ``from celery_singleton import Singleton`` (and ``DuplicateTaskError``, ``clear_locks``) to
``from fastredlock.compat.celery_singleton import Singleton``; keep the rest::

    app.conf.singleton_backend_url = "redis://localhost:6379/0"   # or a list: N masters, quorum N//2+1

    @app.task(base=Singleton, unique_on=["username"], lock_expiry=60)
    def do_something(username, otherarg=None): ...

    a = do_something.delay("bob")
    assert do_something.delay("bob") == a          # the queued (or running) task's AsyncResult

Kept from celery-singleton 0.3.1: ``Singleton`` (``unique_on``, ``raise_on_duplicate``,
``lock_expiry``; ``generate_lock``, ``aquire_lock``, ``get_existing_task_id``, ``release_lock``,
``unlock``, ``on_duplicate``, ``singleton_config``, ``singleton_backend``), ``DuplicateTaskError``
(``task_id``), ``clear_locks(app)``, the settings ``singleton_backend_url`` (default: the result
backend's URL if it is ``redis://``, else the broker's), ``singleton_backend_kwargs`` (redis-py
connection arguments), ``singleton_key_prefix`` (``SINGLETONLOCK_``), ``singleton_json_encoder_class``,
``singleton_raise_on_duplicate``, ``singleton_lock_expiry``, and the key: the prefix and the md5 of
the task name and the JSON of its arguments (``unique_on``: only those, defaults applied). The
lock's value is the task id, written with ``SET key <task id> NX PX ttl``: processes still on
celery-singleton and processes on the drop-in exclude each other.

Safer (see the documentation's page docs/migrating/celery-singleton.md):

- every release is owner-checked by the task id (celery-singleton deleted the key with a plain
  ``DEL``: a task whose lock had expired removed the lock of the next one);
- a running task's lock has a TTL of ``run_ttl`` (30 s; ``singleton_run_ttl`` or the task's
  ``run_ttl``) renewed while it runs, so a killed worker frees the name within ``run_ttl``
  instead of never (without ``lock_expiry``) or after ``lock_expiry``, which now bounds how long
  a name may stay taken;
- a revoked task (celery-singleton #29), a task killed at its hard time limit (#40) and a task
  whose pool child died release the name (Celery's ``task_revoked``/``task_failure`` signals);
- a retried task keeps its name and its retry is sent (celery-singleton found its own lock,
  returned the ``AsyncResult`` of the task itself, and the retry was never queued);
- a run lock beside the queue lock: two messages of one name never run at the same time;
- a list of URLs makes a Redlock over N masters.

Differences: only the Redis backend is served: ``singleton_backend_class`` other than
celery-singleton's ``RedisBackend`` (or this module's) raises ``ValueError``. Without
``lock_expiry`` a queued task's lock lasts the longest TTL Redis takes (about 24.8 days), not
forever. ``release_lock``/``unlock``/``clear_locks`` delete keys unconditionally, as the original's
(an operator's tools); the tasks themselves release only what they hold.
"""
from __future__ import annotations

import inspect
import json
import uuid
from hashlib import md5
from importlib import import_module
from typing import Any, Dict, List, Optional

from celery import Task as BaseTask

from ._celery import (
    DEFAULT_RUN_TTL, HEADER, NEVER, RUN_PREFIX, Masters, Run, connect_signals, guarded_call, header_of, masters_for,
    release_ended, runs,
)

__all__ = ["CelerySingletonException", "Config", "DuplicateTaskError", "RedisBackend", "Singleton", "clear_locks",
           "generate_lock"]

_REDIS_BACKENDS = frozenset({
    "celery_singleton.backends.redis.RedisBackend",
    "celery_singleton.backends.RedisBackend",
    "fastredlock.compat.celery_singleton.RedisBackend",
})


class CelerySingletonException(Exception):
    """The base of this module's errors (as celery-singleton's)."""


class DuplicateTaskError(CelerySingletonException):
    """Raised when a duplicate is queued with ``raise_on_duplicate``; ``task_id``: the task that holds the name."""

    def __init__(self, message: str, task_id: Optional[str]) -> None:
        self.task_id = task_id
        super().__init__(message)


def generate_lock(task_name: str, task_args: Any = None, task_kwargs: Any = None, key_prefix: str = "SINGLETONLOCK_",
                  json_encoder_class: Any = None) -> str:
    """celery-singleton's key: ``key_prefix`` + md5 of the name and the sorted JSON of the arguments."""
    text = (task_name + json.dumps(task_args or [], sort_keys=True, cls=json_encoder_class)
            + json.dumps(task_kwargs or {}, sort_keys=True, cls=json_encoder_class))
    return key_prefix + md5(text.encode()).hexdigest()


def _import(path_or_class: Any) -> Any:
    if isinstance(path_or_class, str):
        module, _, name = path_or_class.rpartition(".")
        return getattr(import_module(module), name)
    return path_or_class


class Config:
    """The ``singleton_*`` settings of a Celery app, with celery-singleton's defaults."""

    def __init__(self, app: Any) -> None:
        self.app = app

    @property
    def key_prefix(self) -> str:
        """``singleton_key_prefix`` (default ``SINGLETONLOCK_``): every lock key starts with it."""
        return self.app.conf.get("singleton_key_prefix", "SINGLETONLOCK_")

    @property
    def backend_class(self) -> Any:
        """The backend (only the Redis one is served: another raises ``ValueError``)."""
        value = self.app.conf.get("singleton_backend_class", "celery_singleton.backends.redis.RedisBackend")
        if value is RedisBackend or value in _REDIS_BACKENDS:
            return RedisBackend
        if not isinstance(value, str) and getattr(value, "__name__", None) == "RedisBackend" and \
                getattr(value, "__module__", "").startswith("celery_singleton."):
            return RedisBackend
        raise ValueError(
            f"singleton_backend_class = {value!r}: fastredlock.compat.celery_singleton serves only the Redis "
            "backend; keep celery-singleton for another backend"
        )

    @property
    def json_encoder_class(self) -> Any:
        """``singleton_json_encoder_class`` (a class or its import path; default None: ``json``'s)."""
        return _import(self.app.conf.get("singleton_json_encoder_class", None))

    @property
    def backend_kwargs(self) -> Dict[str, Any]:
        """``singleton_backend_kwargs``: redis-py connection arguments for every master (default none)."""
        return self.app.conf.get("singleton_backend_kwargs", {})

    @property
    def backend_url(self) -> Any:
        """``singleton_backend_url`` (a URL or a list of them), else the result backend's URL if it
        is ``redis://``, else the broker's."""
        url = self.app.conf.get("singleton_backend_url")
        if url is not None:
            return url
        url = self.app.conf.get("result_backend")
        if not url or not isinstance(url, str) or not url.startswith("redis://"):
            url = self.app.conf.get("broker_url")
        return url

    @property
    def raise_on_duplicate(self) -> Optional[bool]:
        """``singleton_raise_on_duplicate`` (default None: a duplicate returns the holder's result)."""
        return self.app.conf.get("singleton_raise_on_duplicate")

    @property
    def lock_expiry(self) -> Optional[float]:
        """``singleton_lock_expiry``: the longest a name may stay taken, seconds (default None: unbounded)."""
        return self.app.conf.get("singleton_lock_expiry")

    @property
    def run_ttl(self) -> float:
        """``singleton_run_ttl``: seconds a running task's locks live without renewal (default 30)."""
        return float(self.app.conf.get("singleton_run_ttl", None) or DEFAULT_RUN_TTL)


class RedisBackend:
    """celery-singleton's Redis backend over one master or several (``url``: a URL or a list)."""

    def __init__(self, url: Any, **kwargs: Any) -> None:
        self.masters: Masters = masters_for(url, kwargs)

    def lock(self, lock: str, task_id: str, expiry: Optional[float] = None) -> bool:
        """Take ``lock`` with ``task_id`` for ``expiry`` seconds (None: the longest TTL); whether taken."""
        ttl = NEVER if expiry is None else min(float(expiry), NEVER)
        return self.masters.take(lock, task_id, ttl)

    def release(self, lock: str, task_id: Any) -> bool:
        """Owner-checked release of ``lock`` taken with ``task_id``; whether it was still held."""
        return self.masters.release(lock, task_id)

    def unlock(self, lock: str) -> None:
        """Delete ``lock`` and its run lock on every master, whoever holds them (the original's ``DEL``)."""
        for reader in self.masters.readers():
            reader.delete(lock, RUN_PREFIX + lock)

    def get(self, lock: str) -> Optional[str]:
        """The task id a quorum of masters holds under ``lock``, or None."""
        value = self.masters.value(lock)
        return value.decode("utf-8", "replace") if value is not None else None

    def clear(self, key_prefix: str) -> None:
        """Delete every lock under ``key_prefix`` (and their run locks) on every master."""
        self.masters.clear([key_prefix, RUN_PREFIX + key_prefix])


_backends: Dict[str, RedisBackend] = {}


def _backend_of(config: Config) -> RedisBackend:
    config.backend_class  # noqa: B018 (refuses another backend)
    url, kwargs = config.backend_url, config.backend_kwargs
    key = repr((url, sorted(kwargs.items())))
    found = _backends.get(key)
    if found is None:
        found = _backends[key] = RedisBackend(url, **kwargs)
    return found


def clear_locks(app: Any) -> None:
    """Delete every singleton lock of ``app`` (its ``singleton_key_prefix``) on every master."""
    config = Config(app)
    _backend_of(config).clear(config.key_prefix)


class Singleton(BaseTask):
    """A Celery task base: at most one task of the same name and arguments queued or running.

    ``unique_on``: the argument names that make two tasks the same (a str for one; ``[]``: the
    name only; default: all arguments). ``raise_on_duplicate``: raise :class:`DuplicateTaskError`
    instead of returning the existing task's ``AsyncResult`` (default: the app's
    ``singleton_raise_on_duplicate``, else False). ``lock_expiry``: the longest a name may stay
    taken, seconds (default: ``singleton_lock_expiry``, else unbounded). ``run_ttl``: seconds a
    running task's locks live without renewal (default ``singleton_run_ttl``, 30).
    """

    abstract = True
    _singleton_backend: Optional[RedisBackend] = None
    _singleton_config: Optional[Config] = None
    unique_on: Any = None
    raise_on_duplicate: Optional[bool] = None
    lock_expiry: Optional[float] = None
    run_ttl: Optional[float] = None

    @property
    def _raise_on_duplicate(self) -> bool:
        if self.raise_on_duplicate is not None:
            return self.raise_on_duplicate
        return self.singleton_config.raise_on_duplicate or False

    @property
    def singleton_config(self) -> Config:
        """The app's ``singleton_*`` settings."""
        if self._singleton_config is None:
            self._singleton_config = Config(self._get_app())
        return self._singleton_config

    @property
    def singleton_backend(self) -> RedisBackend:
        """The backend (the Redis one, over the configured masters)."""
        if self._singleton_backend is None:
            self._singleton_backend = _backend_of(self.singleton_config)
        return self._singleton_backend

    def _expiry(self) -> Optional[float]:
        return self.lock_expiry if self.lock_expiry is not None else self.singleton_config.lock_expiry

    def aquire_lock(self, lock: str, task_id: Any) -> bool:
        """Take ``lock`` for ``task_id`` (the spelling is celery-singleton's)."""
        return self.singleton_backend.lock(lock, task_id, expiry=self._expiry())

    def get_existing_task_id(self, lock: str) -> Optional[str]:
        """The id of the task that holds ``lock``, or None."""
        return self.singleton_backend.get(lock)

    def generate_lock(self, task_name: str, task_args: Any = None, task_kwargs: Any = None) -> str:
        """The key of ``task_name`` with these arguments (``unique_on`` applied)."""
        unique_on = self.unique_on
        task_args = task_args or []
        task_kwargs = task_kwargs or {}
        if unique_on is not None:
            if isinstance(unique_on, str):
                unique_on = [unique_on]
            if not any(unique_on):
                unique_kwargs: Dict[str, Any] = {}
            else:
                bound = inspect.signature(self.run).bind(*task_args, **task_kwargs)
                bound.apply_defaults()
                unique_kwargs = {key: bound.arguments[key] for key in unique_on}
            unique_args: List[Any] = []
        else:
            unique_args, unique_kwargs = task_args, task_kwargs
        config = self.singleton_config
        return generate_lock(task_name, unique_args, unique_kwargs, key_prefix=config.key_prefix,
                             json_encoder_class=config.json_encoder_class)

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: Any = None, producer: Any = None,
                    link: Any = None, link_error: Any = None, shadow: Any = None, **options: Any) -> Any:
        """Queue the task unless one of the same key is queued or running; then return that one's
        ``AsyncResult`` (or raise :class:`DuplicateTaskError` with ``raise_on_duplicate``)."""
        args = args or []
        kwargs = kwargs or {}
        if options.get("retries"):  # a retry: the name is already this task's
            run = runs.get(task_id)
            if run is not None:
                header = header_of(self.request)
                bound = header.get("bound") if header else self._expiry()
                run.requeue(NEVER if bound is None else min(float(bound), NEVER))
            return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                       link_error=link_error, shadow=shadow, **options)
        task_id = task_id or str(uuid.uuid4())
        lock = self.generate_lock(self.name, args, kwargs)
        options["headers"] = {**(options.get("headers") or {}), HEADER: {"key": lock, "bound": self._expiry()}}
        run_args = dict(lock=lock, args=args, kwargs=kwargs, task_id=task_id, producer=producer, link=link,
                        link_error=link_error, shadow=shadow, **options)
        for _ in range(100):  # the holder may release between our attempt and our read: try again
            task = self.lock_and_run(**run_args)
            if task:
                return task
            existing_task_id = self.get_existing_task_id(lock)
            if existing_task_id:
                return self.on_duplicate(existing_task_id)
        return self.on_duplicate(existing_task_id)

    def lock_and_run(self, lock: str, *args: Any, task_id: Optional[str] = None, **kwargs: Any) -> Any:
        """Take ``lock`` and queue the task; None if the lock is taken. A failed queueing releases it."""
        if self.aquire_lock(lock, task_id):
            try:
                return super().apply_async(*args, task_id=task_id, **kwargs)
            except BaseException:
                self.singleton_backend.release(lock, task_id)
                raise
        return None

    def release_lock(self, task_args: Any = None, task_kwargs: Any = None) -> None:
        """Delete the lock of this task with these arguments, whoever holds it (an operator's tool)."""
        self.unlock(self.generate_lock(self.name, task_args, task_kwargs))

    def unlock(self, lock: str) -> None:
        """Delete ``lock``, whoever holds it."""
        self.singleton_backend.unlock(lock)

    def on_duplicate(self, existing_task_id: Optional[str]) -> Any:
        """What a duplicate ``apply_async`` returns: the existing task's ``AsyncResult`` (or raises)."""
        if self._raise_on_duplicate:
            raise DuplicateTaskError(f"Attempted to queue a duplicate of task ID {existing_task_id}",
                                     task_id=existing_task_id)
        return self.AsyncResult(existing_task_id)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return guarded_call(self, lambda task_id, request: self._start_run(task_id, request, args, kwargs),
                            lambda: super(Singleton, self).__call__(*args, **kwargs))

    def _start_run(self, task_id: str, request: Any, args: Any, kwargs: Any) -> Optional[Run]:
        header = header_of(request)
        key = header["key"] if header else self.generate_lock(self.name, list(args), kwargs)
        bound = header.get("bound") if header else self._expiry()
        ttl = float(self.run_ttl) if self.run_ttl is not None else self.singleton_config.run_ttl
        return Run.start(self.singleton_backend.masters, key, task_id, run_ttl=ttl, bound=bound, wait=ttl)


def _ended(task: Singleton, task_id: Optional[str], args: Any, kwargs: Any, request: Any) -> None:
    if not task_id or runs.handled(task_id):
        return
    header = header_of(request) if request is not None else None
    try:
        key = header["key"] if header else task.generate_lock(task.name, list(args), kwargs)
        masters = task.singleton_backend.masters
    except Exception:  # arguments that do not bind, a backend refused: nothing this shim took
        return
    release_ended(masters, key, task_id)


connect_signals(Singleton, _ended)
