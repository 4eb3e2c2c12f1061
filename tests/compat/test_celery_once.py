"""fastredlock.compat.celery_once with real Celery workers: celery-once's documented behaviours
(its README's examples and options), the issue's failure cases (SIGKILL, revoke, time limits), and
a fleet mixing celery-once 3.0.1 and the drop-in on one broker.

The workers (``celery_fleet``, see _celery_workers.py) are a prefork worker on the Cython core and
one on the pure core; the tasks are in _celery_app.py and record their runs on a probe server.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("celery")

from celery import states  # noqa: E402

from _celery_workers import RUN_TTL, install_originals, trusted_masters, unique, wait_for  # noqa: E402,F401
from fastredlock.compat import celery_once  # noqa: E402
from fastredlock.compat.celery_once import AlreadyQueued, QueueOnce, queue_once_key  # noqa: E402
import _originals  # noqa: E402

RUN_PREFIX = "fastredlock-run:"
pytestmark = pytest.mark.usefixtures("trusted_masters")


def _accepted(task, args, **options):
    """Enqueue; the result, or None if the name was taken."""
    try:
        result = task.apply_async(args=args, **options)
    except AlreadyQueued:
        return None
    return result if result.id is not None else None


# --- the key --------------------------------------------------------------------------------------
_KEY_CASES = [
    ("tasks.example", {}),
    ("tasks.example", {"a": 1, "b": "x"}),
    ("tasks.example", {"b": [1, {"z": 2, "y": [3]}], "a": {"k": (1, 2), "j": None}}),
    ("tasks.ünï", {"s": "ü", "f": 1.5, "t": (1, "2")}),
]


def test_key_is_celery_once_key_for_the_same_arguments():
    try:
        folder = install_originals()
    except _originals.Unavailable as exc:
        pytest.skip(f"cannot install celery-once from PyPI: {exc}")
    sys.path.insert(0, str(folder))
    try:
        from celery_once.helpers import queue_once_key as original_key
        for name, kwargs in _KEY_CASES:
            assert queue_once_key(name, kwargs) == original_key(name, kwargs)
            assert queue_once_key(name, kwargs, ["a"] if "a" in kwargs else []) == \
                original_key(name, kwargs, ["a"] if "a" in kwargs else [])
    finally:
        sys.path.remove(str(folder))
        for mod in [m for m in sys.modules if m.startswith("celery_once")]:
            del sys.modules[mod]


def test_get_key_binds_positional_and_keyword_arguments(celery_fleet):
    t = celery_fleet.tasks
    assert t.once_work.get_key(["n", 1]) == "qo_once.work_name-n_seconds-1"
    assert t.once_work.get_key(["n"], {"seconds": 1}) == "qo_once.work_name-n_seconds-1"
    assert t.once_work.get_key(["n"]) == "qo_once.work_name-n"  # defaults are not bound (as celery-once)
    assert t.once_keyed.get_key([1, 2]) == "qo_once.keyed_a-1"
    assert t.once_any_args.get_key([1, 2]) == "qo_once.any_args"


# --- README: AlreadyQueued, graceful, keys, timeout, unlock_before_run ------------------------------
def test_delay_twice_raises_already_queued_until_the_task_ran(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    first = t.once_work.delay(name, 0.8)
    with pytest.raises(AlreadyQueued) as info:
        t.once_work.delay(name, 0.8)
    assert 0 < info.value.countdown <= 60 and info.value.message.startswith("Expires in ")
    with pytest.raises(AlreadyQueued):
        t.once_work.apply_async(args=(name, 0.8))
    first.get(timeout=20)
    second = t.once_work.delay(name, 0.8)  # the run released the name
    second.get(timeout=20)
    assert celery_fleet.runs(name) == 2 and celery_fleet.overlaps(name) == 0
    key = t.once_work.get_key([name, 0.8])
    assert celery_fleet.held(key) == 0 and celery_fleet.held(RUN_PREFIX + key) == 0


def test_graceful_returns_a_rejected_result_instead_of_raising(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    first = t.once_graceful.delay(name, 0.5)
    again = t.once_graceful.delay(name, 0.5)  # the task's option
    assert again.id is None and again.state == states.REJECTED and again.result is None
    other = t.once_work.delay(name, 0.5)
    per_call = t.once_work.apply_async(args=[name, 0.5], once={"graceful": True})  # per call
    assert per_call.state == states.REJECTED
    first.get(timeout=20)
    other.get(timeout=20)
    assert celery_fleet.runs(name) == 2


def test_keys_option_locks_on_the_named_arguments_only(celery_fleet):
    t, a = celery_fleet.tasks, unique()
    first = t.once_keyed.delay(a, 1, 0.5)
    with pytest.raises(AlreadyQueued):
        t.once_keyed.delay(a, 2, 0.5)  # same `a`
    other = t.once_keyed.delay(a + "x", 2, 0.5)
    any_first = t.once_any_args.delay(a, 1, 0.5)
    with pytest.raises(AlreadyQueued):
        t.once_any_args.delay(a + "y", 2)  # keys=[]: the task's name only
    for result in (first, other, any_first):
        result.get(timeout=20)
    t.once_any_args.delay(a, 3).get(timeout=20)


def test_timeout_bounds_how_long_an_unstarted_task_keeps_its_name(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    # a queue no worker consumes: the name stays taken only for the task's timeout (1 s)
    assert _accepted(t.once_timeout, [name], queue="nobody") is not None
    assert _accepted(t.once_timeout, [name], queue="nobody") is None
    start = time.monotonic()
    wait_for(lambda: _accepted(t.once_timeout, [name], queue="nobody"), 5, "the 1 s timeout to free the name")
    assert 0.3 < time.monotonic() - start < 2.5
    # per call: once={'timeout': ...}
    assert _accepted(t.once_work, [name], queue="nobody", once={"timeout": 1}) is not None
    key = t.once_work.get_key([name])
    assert 0 < celery_fleet.masters[0].command("PTTL", key) <= 1000


def test_unlock_before_run_frees_the_queue_lock_but_never_runs_two_at_once(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    first = t.once_unlock_first.delay(name, 1.0)
    wait_for(lambda: celery_fleet.started(name), 10, "the first run to start")
    second = t.once_unlock_first.delay(name, 1.0)  # accepted while the first runs
    first.get(timeout=20)
    second.get(timeout=20)
    assert celery_fleet.runs(name) == 2
    assert celery_fleet.overlaps(name) == 0  # the run lock kept them apart (two workers were free)


def test_failure_releases_the_name(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    with pytest.raises(Exception, match="fails on purpose"):
        t.once_fails.delay(name).get(timeout=20)
    with pytest.raises(Exception, match="fails on purpose"):
        t.once_fails.delay(name).get(timeout=20)  # accepted again: the failure released it
    assert celery_fleet.runs(name) == 2


def test_retries_keep_the_name_until_they_are_exhausted(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    # Each run takes 0.5 s: once the second has started, the name stays held for at least 1.3 s
    # more (the rest of it, the 0.3 s countdown, the third run), however late this test looks.
    result = t.once_retries.delay(name, 0.5)
    wait_for(lambda: celery_fleet.runs(name) >= 2, 15, "a retry to run")
    with pytest.raises(AlreadyQueued):
        t.once_retries.delay(name, 0.5)  # the retried task still holds its name
    assert result.get(timeout=20) == 2
    assert celery_fleet.runs(name) == 3 and celery_fleet.overlaps(name) == 0
    t.once_retries.apply_async(args=[name, 0.5], queue="nobody")  # free again


def test_blocking_setting_waits_for_the_name(celery_fleet):
    import _celery_app

    t = _celery_app.build(celery_fleet.config)
    t.app.conf.ONCE = {"backend": "celery_once.backends.Redis",
                       "settings": dict(t.app.conf.ONCE["settings"], blocking=True, blocking_timeout=10)}
    name = unique()
    first = t.once_work.delay(name, 1.2)
    wait_for(lambda: celery_fleet.started(name), 10, "the first run to start")
    start = time.monotonic()
    second = t.once_work.delay(name, 0.0)  # another key (seconds differs): not blocked
    assert time.monotonic() - start < 1
    start = time.monotonic()
    third = t.once_work.delay(name, 1.2)  # blocks until the first run released its name
    assert time.monotonic() - start > 0.2  # it waited (the first run takes 1.2 s)
    for result in (first, second, third):
        result.get(timeout=20)
    t.app.conf.ONCE = {"backend": "celery_once.backends.Redis",
                       "settings": dict(t.app.conf.ONCE["settings"], blocking=True, blocking_timeout=0.3)}
    t.once_work.apply_async(args=[name + "b"], queue="nobody")
    with pytest.raises(AlreadyQueued):
        t.once_work.apply_async(args=[name + "b"], queue="nobody")


def test_calling_the_task_directly_takes_no_lock(celery_fleet):
    t, name = celery_fleet.tasks, unique()
    assert t.once_work(name) == os.getpid()
    assert celery_fleet.held(t.once_work.get_key([name])) == 0


def test_other_backends_are_refused(celery_fleet):
    t = celery_fleet.tasks
    saved = t.app.conf.ONCE
    try:
        t.app.conf.ONCE = {"backend": "celery_once.backends.File", "settings": {"location": "/tmp"}}
        with pytest.raises(ValueError, match="only the Redis backend"):
            t.once_work.delay(unique())
    finally:
        t.app.conf.ONCE = saved


def test_redis_backend_serves_the_string_and_one_url(celery_fleet):
    backend = celery_once.Redis({"url": celery_fleet.lock_urls[0], "default_timeout": 5})
    key = "qo_" + unique()
    backend.raise_or_lock(key, timeout=5)
    with pytest.raises(AlreadyQueued) as info:
        backend.raise_or_lock(key, timeout=5)
    assert 4 < info.value.countdown <= 5
    assert backend.clear_lock(key) == 1
    backend.raise_or_lock(key, timeout=5)
    backend.clear_lock(key)


# --- the done checks ----------------------------------------------------------------------
def test_twenty_enqueues_from_four_processes_run_once(celery_fleet):
    """The same task enqueued 20 times at once from 4 processes (two on each core), two worker
    processes (one per core): one is accepted, it runs once, and its name is free afterwards."""
    name = unique()
    reports = celery_fleet.enqueue_from([{"core": "cython"}, {"core": "python"}] * 2, "once.work", [name, 0.5], 5)
    ids = [i for r in reports for i in r["ids"]]
    assert len(ids) == 1 and sum(r["refused"] for r in reports) == 19, reports
    assert {r["core"] for r in reports} == celery_fleet.cores == celery_fleet.worker_cores()
    celery_fleet.tasks.app.AsyncResult(ids[0]).get(timeout=20)
    assert celery_fleet.runs(name) == 1
    key = celery_fleet.tasks.once_work.get_key([name, 0.5])
    assert celery_fleet.held(key) == 0 and celery_fleet.held(RUN_PREFIX + key) == 0


def test_sigkill_of_the_worker_frees_the_name_within_two_ttls(celery_fleet):
    worker = celery_fleet.kill_workers["once"]  # a solo worker: its task runs in the killed process
    try:
        t, name = celery_fleet.tasks, unique()
        t.once_work.apply_async(args=[name, 30], queue="kill-once")
        wait_for(lambda: celery_fleet.started(name), 15, "the task to start")
        time.sleep(RUN_TTL)  # long enough that only renewals kept it: the queue lock's TTL is long gone
        key = t.once_work.get_key([name, 30])
        assert celery_fleet.held(key) >= 2 and celery_fleet.held(RUN_PREFIX + key) >= 2
        worker.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        worker.proc.wait(timeout=10)
        wait_for(lambda: _accepted(t.once_work, [name, 30], queue="nobody"), 4 * RUN_TTL, "the name to be free")
        freed = time.monotonic() - killed
    finally:
        worker.stop()
    assert freed <= 2 * RUN_TTL, f"freed after {freed:.2f} s"


@pytest.mark.parametrize("how", [
    "revoke-terminate", "revoke-queued", "hard-time-limit", "soft-time-limit", "pool-child-killed"])
def test_revoked_or_time_limited_task_releases_its_name(celery_fleet, how):
    """These tasks' run TTL is 20 s (renewed every third of it): a name accepted again within 4 s
    (10 s when the worker's main process must first notice that its pool child died) was
    released, not expired."""
    t, name = celery_fleet.tasks, unique()
    task = {"hard-time-limit": t.once_hard_limit, "soft-time-limit": t.once_soft_limit}.get(how, t.once_long)
    seconds = 0.0 if how == "revoke-queued" else 30.0
    if how == "revoke-queued":
        result = task.apply_async(args=[name, seconds], countdown=1.0)
        result.revoke()
    else:
        result = task.delay(name, seconds)
        wait_for(lambda: celery_fleet.started(name), 15, "the task to start")
        if how == "revoke-terminate":
            result.revoke(terminate=True, signal="SIGKILL")
        elif how == "pool-child-killed":  # the worker's main process sees its pool child die
            os.kill(celery_fleet.started(name), signal.SIGKILL)
    start = time.monotonic()
    wait_for(lambda: _accepted(task, [name, seconds], queue="nobody"), 12, f"the name to be free ({how})")
    assert time.monotonic() - start < (10.0 if how == "pool-child-killed" else 4.0)
    assert celery_fleet.runs(name) == (0 if how == "revoke-queued" else 1)


# --- interop with celery-once 3.0.1 ---------------------------------------------------------------
def test_celery_once_and_the_drop_in_never_run_a_task_twice(celery_fleet):
    """celery-once 3.0.1 processes and drop-in processes on one broker and one lock server: 20
    enqueues from 2 + 2 processes are accepted once, the task runs once, on either kind of worker,
    and the name is free again after (whichever kind ran it)."""
    interop = celery_fleet.interop()
    name = unique()
    sides = [{"impl": "original", "originals": interop.originals, "locks": interop.locks},
             {"impl": "shim", "locks": interop.locks}] * 2
    reports = celery_fleet.enqueue_from(sides, "once.work", [name, 0.5], 5, queue="interop")
    ids = [i for r in reports for i in r["ids"]]
    assert len(ids) == 1 and sum(r["refused"] for r in reports) == 19, reports
    assert [r["module"].split(".")[0] for r in reports] == ["celery_once", "fastredlock"] * 2
    wait_for(lambda: celery_fleet.runs(name) == 1 and int(celery_fleet.probe.get(f"active:{name}") or 0) == 0
             and celery_fleet.held(f"qo_once.work_name-{name}_seconds-0.5") == 0, 15, "the task to run and free its name")
    assert celery_fleet.overlaps(name) == 0


def test_each_kind_of_worker_frees_a_task_the_other_kind_queued(celery_fleet):
    """A drop-in worker runs a task celery-once queued (it takes over celery-once's lock, whose
    value is a redis-py token) and frees its name; celery-once's worker does the same for a task
    the drop-in queued."""
    celery_fleet.handed_across("once.work", lambda run: f"qo_once.work_name-{run}_seconds-1.0", unique())


def test_masters_down_raise_the_redis_error_not_already_queued(celery_fleet, dead_port):
    import redis

    nowhere = f"unix:///tmp/frl-nowhere-{unique()}.sock"  # two masters that refuse connections: no quorum
    backend = celery_once.Redis({"url": [f"redis://127.0.0.1:{dead_port}", celery_fleet.lock_urls[0], nowhere]})
    with pytest.raises(redis.exceptions.ConnectionError, match="too few masters"):
        backend.raise_or_lock("qo_" + unique(), timeout=5)


def test_url_forms_of_celery_once_are_read(celery_fleet):
    """celery-once's URL patterns: ``redis://host:port/db``, ``rediss://`` and
    ``redis+socket:///path?db=N``; query options (redis-py's) go through a redis-py client."""
    import redis

    from fastredlock.compat._celery import _master

    assert _master("redis://127.0.0.1:7001/1", {}) == "redis://127.0.0.1:7001/1"
    assert _master("redis+socket:///var/run/redis.sock?db=1", {}) == "unix:///var/run/redis.sock?db=1"
    client = _master("redis://127.0.0.1:7001/1?socket_timeout=2", {})
    assert isinstance(client, redis.Redis) and client.connection_pool.connection_kwargs["socket_timeout"] == 2
    # and one of them serving locks for real: a redis-py query option on a live master
    port = celery_fleet.masters[0].port
    backend = celery_once.Redis({"url": f"redis://127.0.0.1:{port}/0?socket_timeout=2"})
    key = "qo_" + unique()
    backend.raise_or_lock(key, timeout=5)
    with pytest.raises(AlreadyQueued):
        backend.raise_or_lock(key, timeout=5)
    backend.clear_lock(key)


def test_the_worker_releases_the_key_the_enqueuer_took(celery_fleet):
    """A tuple argument comes back from the broker as a list, so the key the worker would compute
    (``[...]``) is not the one taken at enqueue (``(...)``); celery-once then deleted the wrong key
    and the name stayed taken for its timeout. The enqueuer's key travels in a message header."""
    t, name = celery_fleet.tasks, unique()
    t.once_work.delay((name, 1), 0.2).get(timeout=20)
    key = t.once_work.get_key([(name, 1), 0.2])
    assert "(" in key and celery_fleet.held(key) == 0 and celery_fleet.held(RUN_PREFIX + key) == 0
    t.once_work.apply_async(args=[(name, 1), 0.2], queue="nobody")  # accepted again


def test_a_second_message_of_a_running_name_is_not_run(celery_fleet):
    """A message that bypassed the queue lock (sent with ``send_task``, as a message delivered
    twice would be) reaches the other worker while the first run holds the run lock: it waits one
    ``run_ttl`` for it, then is dropped (IGNORED, never run); the first run keeps its name."""
    t, name = celery_fleet.tasks, unique()
    first = t.once_work.delay(name, 3.0)
    wait_for(lambda: celery_fleet.started(name), 10, "the first run to start")
    second = t.app.send_task("once.work", args=[name, 3.0])
    assert wait_for(lambda: celery_fleet.probe.get(f"postrun:{second.id}"), 10, "the second message's end") == b"IGNORED"
    assert not first.ready()  # it was dropped while the first still ran (on the other worker)
    first.get(timeout=20)
    assert celery_fleet.runs(name) == 1 and celery_fleet.overlaps(name) == 0
    assert celery_fleet.held(t.once_work.get_key([name, 3.0])) == 0
