"""The Celery app of the Celery drop-in tests: the same tasks under the drop-ins or the originals.

A worker runs it as ``celery -A _celery_app worker``; its configuration comes from the environment
(``FRL_CELERY``: a JSON object, see :func:`build`). The tests' own process (and the enqueuing
subprocesses, ``_celery_enqueue.py``) build it with :func:`build` too. Every task records what it
did on the probe server (``runs:<name>``: how many times it started, ``overlap:<name>``: how many
times it started while another run of the same name was running, ``started:<name>``: the pid of
the run in progress, ``events``), so a test sees how often and how a task ran without trusting the
worker's own account; ``postrun:<task id>`` says how each message ended (``IGNORED`` included).
"""
from __future__ import annotations

import json
import os
import time
import types

import redis
from celery import Celery
from celery.signals import task_postrun, worker_ready


def _probe(url):
    return redis.Redis.from_url(url)


def build(config):
    """The app and its tasks (a namespace) for ``config``: ``broker`` (a redis URL: db 1 is the
    broker, db 2 the result backend), ``probe`` (a redis URL), ``locks`` (the lock masters' URLs),
    ``impl`` (``"shim"`` or ``"original"``), ``run_ttl`` (seconds)."""
    impl = config.get("impl", "shim")
    if impl == "original":
        from celery_once import AlreadyQueued, QueueOnce
        from celery_singleton import DuplicateTaskError, Singleton, clear_locks
    else:
        import fastredlock.compat
        from fastredlock.compat.celery_once import AlreadyQueued, QueueOnce
        from fastredlock.compat.celery_singleton import DuplicateTaskError, Singleton, clear_locks

        fastredlock.compat.configure(restart_aware=False)  # the masters were just started
    locks = config["locks"]
    run_ttl = config.get("run_ttl", 2)
    app = Celery(f"frl_{impl}", broker=config["broker"] + "/1", backend=config["broker"] + "/2", set_as_current=False)
    app.conf.update(
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        result_expires=600,
        ONCE={
            "backend": "celery_once.backends.Redis",
            "settings": {"url": locks if impl == "shim" else locks[0], "default_timeout": 60, "run_ttl": run_ttl},
        },
        singleton_backend_url=locks if impl == "shim" else locks[0],
        singleton_run_ttl=run_ttl,
    )
    probe = _probe(config["probe"])

    def record(name, seconds=0.0, fail=False):
        pid = os.getpid()
        probe.incr(f"runs:{name}")
        if probe.incr(f"active:{name}") > 1:
            probe.incr(f"overlap:{name}")
        probe.set(f"started:{name}", pid)
        probe.rpush("events", json.dumps(["start", name, pid, impl, time.time()]))
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if fail:
                raise RuntimeError(f"{name} fails on purpose")
            return pid
        finally:
            probe.decr(f"active:{name}")
            probe.rpush("events", json.dumps(["end", name, pid, impl, time.time()]))

    t = types.SimpleNamespace(app=app, AlreadyQueued=AlreadyQueued, DuplicateTaskError=DuplicateTaskError,
                              clear_locks=clear_locks, QueueOnce=QueueOnce, Singleton=Singleton, impl=impl)

    # --- celery-once ---------------------------------------------------------------------------
    @app.task(base=QueueOnce, name="once.work")
    def once_work(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=QueueOnce, name="once.keyed", once={"keys": ["a"]})
    def once_keyed(a, b, seconds=0.0):
        return record(f"keyed:{a}:{b}", seconds)

    @app.task(base=QueueOnce, name="once.any_args", once={"keys": []})
    def once_any_args(a, b, seconds=0.0):
        return record(f"any:{a}:{b}", seconds)

    @app.task(base=QueueOnce, name="once.graceful", once={"graceful": True})
    def once_graceful(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=QueueOnce, name="once.fails")
    def once_fails(name, seconds=0.0):
        return record(name, seconds, fail=True)

    @app.task(base=QueueOnce, name="once.timeout", once={"timeout": 1})
    def once_timeout(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=QueueOnce, name="once.unlock_first", once={"unlock_before_run": True})
    def once_unlock_first(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=QueueOnce, name="once.retries", bind=True, max_retries=2, once={"run_ttl": 10})
    def once_retries(self, name, seconds=0.0):
        record(name, seconds)
        if self.request.retries < 2:
            raise self.retry(countdown=0.3)
        return self.request.retries

    @app.task(base=QueueOnce, name="once.long", once={"run_ttl": 20})
    def once_long(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=QueueOnce, name="once.hard_limit", time_limit=1, once={"run_ttl": 20})
    def once_hard_limit(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=QueueOnce, name="once.soft_limit", soft_time_limit=0.5, once={"run_ttl": 20})
    def once_soft_limit(name, seconds=0.0):
        return record(name, seconds)

    # --- celery-singleton ------------------------------------------------------------------------
    @app.task(base=Singleton, name="single.work")
    def single_work(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=Singleton, name="single.fails")
    def single_fails(name, seconds=0.0):
        return record(name, seconds, fail=True)

    @app.task(base=Singleton, name="single.unique", unique_on=["a", "c"])
    def single_unique(a, b, c, d=4, seconds=0.0):
        return record(f"unique:{a}:{c}", seconds)

    @app.task(base=Singleton, name="single.unique_default", unique_on="d")
    def single_unique_default(a, b=2, c=3, d=4, seconds=0.0):
        return record(f"unique_default:{a}", seconds)

    @app.task(base=Singleton, name="single.unique_none", unique_on=[])
    def single_unique_none(a, b=2, seconds=0.0):
        return record(f"unique_none:{a}", seconds)

    @app.task(base=Singleton, name="single.raising", raise_on_duplicate=True)
    def single_raising(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=Singleton, name="single.expiring", lock_expiry=1)
    def single_expiring(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=Singleton, name="single.retries", bind=True, max_retries=2, run_ttl=10)
    def single_retries(self, name, seconds=0.0):
        record(name, seconds)
        if self.request.retries < 2:
            raise self.retry(countdown=0.3)
        return self.request.retries

    @app.task(base=Singleton, name="single.long", run_ttl=20)
    def single_long(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=Singleton, name="single.hard_limit", time_limit=1, run_ttl=20)
    def single_hard_limit(name, seconds=0.0):
        return record(name, seconds)

    @app.task(base=Singleton, name="single.soft_limit", soft_time_limit=0.5, run_ttl=20)
    def single_soft_limit(name, seconds=0.0):
        return record(name, seconds)

    for var, fn in list(locals().items()):
        if var.startswith(("once_", "single_")):
            setattr(t, var, fn)
    t.probe = probe
    return t


_config = os.environ.get("FRL_CELERY")
if _config:  # a worker (``celery -A _celery_app``) or an enqueuing subprocess
    tasks = build(json.loads(_config))
    app = tasks.app

    @task_postrun.connect
    def _postrun(task_id=None, state=None, **_):
        tasks.probe.set(f"postrun:{task_id}", state or "?", ex=600)  # how each message ended, ignored ones too

    @worker_ready.connect
    def _ready(sender=None, **_):
        core = None
        if tasks.impl == "shim":
            import fastredlock

            core = fastredlock.CORE
        tasks.probe.set(f"ready:{os.environ.get('FRL_CELERY_WORKER', '?')}", json.dumps([os.getpid(), core]))
